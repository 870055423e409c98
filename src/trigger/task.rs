//! The trigger task: recover, then claim, send and acknowledge until stopped.

use super::budget::Held;
use super::calls::{finished, Call, Done};
use super::fence::{self, Fence};
use super::lease::Lease;
use super::plan::{ack_at, answers_wake, wake_at};
use super::ready::{Pending, Ready};
use super::{Gate, Landing, TriggerConfig, Wake};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::retry::Retry;
use crate::shutdown::{within_deadline, CancellationToken, CALL_GRACE};
use crate::sink::{Sink, SinkError};
use crate::store::{Ack, Store, StoreError};
use crate::timer::Fire;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A delivery in progress: resolves with the fire and the broker's answer.
pub(super) type Sending = Pin<Box<dyn Future<Output = (Pending, Result<(), SinkError>)> + Send>>;

/// How often the gate forgets timers the trigger holds no fire of, at most, ms.
const PRUNE_EVERY_MS: i64 = 200;

/// Metric handles of one trigger, resolved once, off the per-fire path.
pub(super) struct Handles {
    pub in_flight: IntGauge,
    pub parked: IntGauge,
    pub delivered: IntCounter,
    pub retried: IntCounter,
    pub stale: IntCounter,
    pub dead_lettered: IntCounter,
    pub vanished: IntCounter,
    pub poisoned: IntCounter,
    pub lateness: Histogram,
    pub kafka_errors: IntCounter,
}

impl Handles {
    fn new(m: &Metrics, topic: &str, partition: i32) -> Handles {
        let l = crate::metrics::slot(topic, partition);
        Handles {
            in_flight: m.in_flight.with_label_values(&l),
            parked: m.parked.with_label_values(&l),
            delivered: m.fires.with_label_values(&["delivered"]),
            retried: m.fires.with_label_values(&["retried"]),
            stale: m.fires.with_label_values(&["stale"]),
            dead_lettered: m.fires.with_label_values(&["dead_lettered"]),
            vanished: m.fires.with_label_values(&["vanished"]),
            poisoned: m.fires.with_label_values(&["poisoned"]),
            lateness: m.fire_lateness.clone(),
            kafka_errors: m.kafka_errors.with_label_values(&["fire"]),
        }
    }
}

/// The state of one partition's trigger.
pub(super) struct Trigger {
    pub partition: i32,
    pub epoch: i64,
    pub store: Store,
    pub sink: Arc<Sink>,
    pub cfg: TriggerConfig,
    pub clock: Clock,
    pub wake: Arc<Wake>,
    pub gate: Arc<Gate>,
    /// The acknowledgements' counts the intake waits on.
    pub landing: Arc<Landing>,
    pub token: CancellationToken,
    /// Redis calls: retried with the shared backoff until fenced or stopped.
    pub retry: Retry,
    pub ready: Ready,
    pub sending: FuturesUnordered<Sending>,
    /// Members delivered and not yet acknowledged in Redis.
    pub acks: Vec<Ack>,
    /// When the first of `acks` was pushed, Unix ms ([`super::plan::ack_at`]).
    pub acks_since_ms: i64,
    pub m: Handles,
    pub lease: Lease,
    /// Whether the producer answers its fires (no claims, and a drain mark, while not).
    pub fence: Fence,
    /// Fires routed to the dead-letter topic so far (for sparse logging).
    pub undeliverable: u32,
    /// Whether the in-flight set was read since the last call whose outcome is unknown
    /// (the first step takes over what a previous owner left).
    pub recovered: bool,
    /// Fires this trigger holds (queued, sending, or delivered and not yet
    /// acknowledged), counted against the instance's budget: a re-read of the in-flight
    /// set skips them.
    pub held: Held,
    /// Where the next page of the in-flight set's take-over starts (it pauses while the
    /// budget has no room).
    pub recover_cursor: u64,
    /// Applications with fires parked in Redis, and how many, after the last claim.
    pub parked: Vec<(String, u64)>,
    /// When the gate was last pruned, Unix ms.
    pub pruned_ms: i64,
    /// Per-application delivery rate limits: this partition's share.
    pub pacer: Pacer,
    /// Fires per application (bounded labels: see [`crate::apps::Applications::label`]).
    pub app_fires: IntCounterVec,
    /// The Redis call running beside the sending (`calls`), if any.
    pub call: Option<Call>,
    /// The error of the last call, for the next step to return.
    pub call_failed: Option<StoreError>,
    /// Whether the last call started was a claim.
    pub claimed_last: bool,
    /// The gate's stamp when the last claim started: while it runs, the gate keeps what
    /// was blocked since ([`Gate::prune`]).
    pub claim_stamp: u64,
}

impl Trigger {
    /// A trigger of `partition` holding `epoch`, with a fresh wake and gate.
    pub fn new(
        partition: i32,
        epoch: i64,
        store: Store,
        sink: Arc<Sink>,
        metrics: &Metrics,
        cfg: TriggerConfig,
        token: CancellationToken,
    ) -> Trigger {
        let retry = Retry::new("trigger", &token)
            .partition(partition)
            .counting(metrics.redis_errors.with_label_values(&["trigger"]));
        let budget = cfg.budget.clone();
        Trigger {
            m: Handles::new(metrics, store.topic(), partition),
            lease: Lease::new(cfg.lease),
            fence: Fence::default(),
            clock: cfg.clock.clone(),
            partition,
            epoch,
            store,
            sink,
            wake: Arc::new(Wake::new(cfg.claim_ahead_ms)),
            gate: Arc::new(Gate::default()),
            landing: Arc::default(),
            cfg,
            token,
            retry,
            ready: Ready::default(),
            sending: FuturesUnordered::new(),
            acks: Vec::new(),
            acks_since_ms: 0,
            undeliverable: 0,
            recovered: false,
            held: Held::new(budget),
            recover_cursor: 0,
            parked: Vec::new(),
            pruned_ms: 0,
            pacer: Pacer::default(),
            app_fires: metrics.app_fires.clone(),
            call: None,
            call_failed: None,
            claimed_last: false,
            claim_stamp: 0,
        }
    }

    /// Re-drives what the partition has in flight, then fires until stopped or fenced.
    pub async fn run(mut self) {
        let p = self.partition;
        tracing::info!(partition = p, epoch = self.epoch, "trigger started");
        let retry = self.retry.clone();
        let mut attempts = retry.attempts();
        while !self.token.is_cancelled() {
            // A step still waiting on Redis a grace after the stop is dropped: its fires
            // stay in flight for the next owner.
            let token = self.token.clone();
            let Some(stepped) = within_deadline(self.step(), &token, CALL_GRACE).await else {
                break;
            };
            match stepped {
                Ok(()) => {
                    attempts.succeeded();
                    self.wait().await;
                }
                Err(e) if e.is_fenced() => {
                    tracing::warn!(partition = p, error = %e, "trigger stopped: partition lost");
                    self.landing.close();
                    return self.hand_over();
                }
                Err(e) if !attempts.failed(&e).await => break,
                Err(_) => {}
            }
        }
        self.drain().await;
        self.landing.close();
        self.hand_over();
        tracing::info!(partition = p, "trigger stopped");
    }

    /// Holds and queues claimed (or taken over) fires, each at its due time; a fire
    /// held already is skipped.
    pub(super) fn push_all(&mut self, fires: Vec<Fire>) {
        let apps = self.cfg.apps.current();
        for fire in fires {
            if !self.held.insert(&fire, apps.paced(&fire.def.application)) {
                continue;
            }
            let pending = Pending {
                fired_ms: 0,
                fire,
                attempt: 1,
                dead: None,
                paced: false,
            };
            self.ready.push(pending.fire.due_ms, pending);
        }
        self.in_flight_gauge();
    }

    /// Queues the acknowledgement of a fire delivered (or dropped); it goes to Redis with
    /// the others at [`Trigger::ack_at`].
    pub(super) fn push_ack(&mut self, ack: Ack) {
        if self.acks.is_empty() {
            self.acks_since_ms = self.clock.now_ms();
        }
        self.acks.push(ack);
        self.landing.queued(1);
    }

    /// When the acknowledgements waiting go to Redis, Unix ms (never when none wait).
    pub(super) fn ack_at(&self) -> i64 {
        ack_at(self.acks_since_ms, self.acks.len(), self.cfg.ack_every_ms)
    }

    pub(super) fn in_flight_gauge(&self) {
        let n = self.ready.len() + self.sending.len() + self.acks.len();
        self.m.in_flight.set(n as i64);
    }

    /// One round: (the first time) take over what is in flight, send what is due, take
    /// the broker's answers, start the next Redis call (`calls`: a claim when it is time,
    /// else an acknowledgement), send again. No Redis round trip is awaited on the way
    /// to a due fire but the first recovery and an expired lease's check.
    async fn step(&mut self) -> Result<(), StoreError> {
        if let Some(e) = self.call_failed.take() {
            return Err(e);
        }
        if !self.recovered {
            self.recovered = self.recover().await?;
        }
        self.send_due().await?;
        self.take_answers();
        self.start_call();
        self.send_due().await
    }

    /// Before sending: if the [`Lease`] ran out, check the epoch now. An instance that
    /// was frozen longer than the group's session timeout lost its partitions meanwhile;
    /// this keeps it from producing the fires it still holds (the new owner re-drives them).
    pub(super) async fn confirm_epoch(&mut self) -> Result<(), StoreError> {
        if self.lease.valid() {
            return Ok(());
        }
        let issued = self.lease.issue();
        let state = self.store.partition_state(self.partition).await?;
        if state.epoch != Some(self.epoch) {
            return Err(StoreError::Fenced(self.partition));
        }
        self.lease.confirm(issued);
        Ok(())
    }

    /// Takes the broker's answers that arrived and prunes the gate (at most every
    /// [`PRUNE_EVERY_MS`]: a pruning reads every held fire).
    fn take_answers(&mut self) {
        let now = self.clock.now_ms();
        if !self.gate.is_empty() && now - self.pruned_ms >= PRUNE_EVERY_MS {
            self.pruned_ms = now;
            let claiming = self.call.is_some() && self.claimed_last;
            let claim = claiming.then_some(self.claim_stamp);
            self.gate.prune(&self.ready.timer_ids(), claim);
        }
        while let Some(Some((p, r))) = self.sending.next().now_or_never() {
            self.delivered(p, r);
        }
    }

    /// Sleeps until the next send or claim time, a wake-up, a delivery, or shutdown.
    async fn wait(&mut self) {
        // While a call runs, the next one waits for it (no claim time, no acks waiting);
        // while the producer is stuck there is no claim to wait for (an answer, or the
        // mark's refresh, wakes the task); nor while the budget has no room (fires given
        // back, here or by another trigger, wake it). A take-over with room goes on now.
        let budget = self.held.budget().clone();
        let freed = budget.freed();
        tokio::pin!(freed);
        freed.as_mut().enable();
        let room = budget.has_room();
        let idle = self.call.is_none();
        let claims = idle && room && self.recovered && !self.fence.stuck(self.sending.len());
        let until = if room && !self.recovered {
            self.clock.now_ms()
        } else {
            wake_at(
                self.clock.now_ms(),
                if claims {
                    self.wake.claim_at()
                } else {
                    i64::MAX
                },
                self.ready.next_at(),
                self.cfg.max_idle_ms,
                if idle { self.ack_at() } else { i64::MAX },
            )
        };
        let clock = self.clock.clone();
        let waiting = !self.sending.is_empty();
        // The broker's answers wait for a send due soon: the step takes them (and its
        // last poll of `sending`, take_answers', left no waker for them to wake).
        let answers = answers_wake(self.clock.now_ms(), self.ready.next_at());
        tokio::select! {
            _ = self.token.cancelled() => {}
            _ = clock.sleep_until(until) => {}
            _ = self.wake.notified() => {}
            _ = self.landing.asked(), if idle => {}
            Some((p, r)) = self.sending.next(), if waiting && answers => self.delivered(p, r),
            done = finished(&mut self.call) => self.call_done(done),
            _ = tokio::time::sleep(fence::MARK_EVERY), if waiting => {}
            _ = &mut freed, if !room => {}
        }
        self.mark_if_stuck();
    }

    fn call_done(&mut self, done: Done) {
        self.call = None;
        if let Err(e) = self.finish_call(done) {
            self.call_failed = Some(e);
        }
    }

    /// On shutdown: wait (bounded) for the running call and for records already handed
    /// to the producer, and acknowledge them; fires not yet sent stay in flight for the
    /// next owner. Redis gets [`CALL_GRACE`] per call: a trigger stopped because Redis
    /// is cut off must not hold its partition for a call's whole timeout.
    async fn drain(&mut self) {
        let deadline = tokio::time::sleep(Duration::from_secs(5));
        let call_deadline = tokio::time::sleep(CALL_GRACE);
        tokio::pin!(deadline, call_deadline);
        // A producer that does not answer is not waited for: what it holds waits in
        // `fence::hold`, keeping the next owner's commands back.
        let stuck = self.fence.stuck(self.sending.len());
        while (!self.sending.is_empty() && !stuck) || self.call.is_some() {
            tokio::select! {
                _ = &mut deadline => break,
                _ = &mut call_deadline, if self.call.is_some() => self.call = None,
                Some((p, r)) = self.sending.next(), if !self.sending.is_empty() => {
                    if r.is_ok() {
                        self.delivered(p, r);
                    }
                }
                done = finished(&mut self.call) => self.call_done(done),
            }
        }
        let last = match self.call_failed.take() {
            Some(e) => Err(e.to_string()),
            None => match tokio::time::timeout(CALL_GRACE, self.final_ack()).await {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no reply within {CALL_GRACE:?}")),
            },
        };
        if let Err(error) = last {
            tracing::warn!(partition = self.partition, %error, "final acknowledgement failed; fires stay in flight");
        }
        self.m.in_flight.set(0);
    }

    /// Acknowledges what is delivered, awaited (on shutdown, after the last call).
    async fn final_ack(&mut self) -> Result<(), StoreError> {
        self.take_answers();
        if self.call.is_some() || self.acks.is_empty() {
            return Ok(());
        }
        let done = self.ack_call().await;
        self.finish_call(done)
    }
}
