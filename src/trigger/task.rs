//! The trigger task: recover, then claim, send and acknowledge until stopped.

use super::lease::Lease;
use super::ready::{Pending, Ready};
use super::{Gate, TriggerConfig, Wake};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::pace::Pacer;
use crate::retry::Retry;
use crate::shutdown::CancellationToken;
use crate::sink::{Sink, SinkError};
use crate::store::{ClaimWindow, Store, StoreError};
use crate::timer::Fire;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A delivery in progress: resolves with the fire and the broker's answer.
pub(super) type Sending = Pin<Box<dyn Future<Output = (Pending, Result<(), SinkError>)> + Send>>;

/// Metric handles of one trigger, resolved once, off the per-fire path.
pub(super) struct Handles {
    pub in_flight: IntGauge,
    pub delivered: IntCounter,
    pub retried: IntCounter,
    pub stale: IntCounter,
    pub dead_lettered: IntCounter,
    pub lateness: Histogram,
    pub kafka_errors: IntCounter,
}

impl Handles {
    fn new(m: &Metrics, partition: i32) -> Handles {
        Handles {
            in_flight: m.in_flight.with_label_values(&[&partition.to_string()]),
            delivered: m.fires.with_label_values(&["delivered"]),
            retried: m.fires.with_label_values(&["retried"]),
            stale: m.fires.with_label_values(&["stale"]),
            dead_lettered: m.fires.with_label_values(&["dead_lettered"]),
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
    pub token: CancellationToken,
    /// Redis calls: retried with the shared backoff until fenced or stopped.
    pub retry: Retry,
    pub ready: Ready,
    pub sending: FuturesUnordered<Sending>,
    /// Members delivered and not yet acknowledged in Redis.
    pub acks: Vec<String>,
    pub m: Handles,
    pub lease: Lease,
    /// Fires routed to the dead-letter topic so far (for sparse logging).
    pub undeliverable: u32,
    /// Whether the in-flight set was read since the last call whose outcome is unknown
    /// (the first step takes over what a previous owner left).
    pub recovered: bool,
    /// Members this trigger holds (queued, sending, or delivered and not yet
    /// acknowledged): a re-read of the in-flight set skips them.
    pub held: HashSet<String>,
    /// Per-application delivery rate limits: this partition's share.
    pub pacer: Pacer,
    /// Fires per application (bounded labels: see [`crate::apps::Applications::label`]).
    pub app_fires: IntCounterVec,
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
        Trigger {
            m: Handles::new(metrics, partition),
            lease: Lease::new(cfg.lease),
            clock: cfg.clock,
            partition,
            epoch,
            store,
            sink,
            wake: Arc::new(Wake::new(cfg.claim_ahead_ms)),
            gate: Arc::new(Gate::default()),
            cfg,
            token,
            retry,
            ready: Ready::default(),
            sending: FuturesUnordered::new(),
            acks: Vec::new(),
            undeliverable: 0,
            recovered: false,
            held: HashSet::new(),
            pacer: Pacer::default(),
            app_fires: metrics.app_fires.clone(),
        }
    }

    /// Re-drives what the partition has in flight, then fires until stopped or fenced.
    pub async fn run(mut self) {
        let p = self.partition;
        tracing::info!(partition = p, epoch = self.epoch, "trigger started");
        let retry = self.retry.clone();
        let mut attempts = retry.attempts();
        while !self.token.is_cancelled() {
            match self.step().await {
                Ok(()) => {
                    attempts.succeeded();
                    self.wait().await;
                }
                Err(e) if e.is_fenced() => return self.lost(e),
                Err(e) if !attempts.failed(&e).await => break,
                Err(_) => {}
            }
        }
        self.drain().await;
        tracing::info!(partition = p, "trigger stopped");
    }

    fn lost(&self, e: StoreError) {
        tracing::warn!(partition = self.partition, error = %e, "trigger stopped: partition lost");
    }

    pub(super) fn push(&mut self, fire: Fire) {
        let at = fire.due_ms;
        self.held.insert(fire.member.clone());
        let pending = Pending {
            fired_ms: 0,
            fire,
            attempt: 1,
            dead: None,
            paced: false,
        };
        self.requeue(at, pending);
    }

    pub(super) fn in_flight_gauge(&self) {
        let n = self.ready.len() + self.sending.len() + self.acks.len();
        self.m.in_flight.set(n as i64);
    }

    /// One round: (the first time) take over what is in flight, send what is due,
    /// acknowledge, claim when it is time, send again. Sending first keeps the
    /// acknowledgement's Redis round trip off the due fires' path.
    async fn step(&mut self) -> Result<(), StoreError> {
        if !self.recovered {
            self.recover().await?;
            self.recovered = true;
        }
        self.send_due().await?;
        self.flush_acks().await?;
        if self.wake.take_if_due(self.clock.now_ms()) {
            if let Err(e) = self.claim().await {
                self.wake.claim_again();
                // A claim whose reply was lost (a timeout) may still have moved fires in
                // flight: read the in-flight set again before the next claim.
                self.recovered = false;
                return Err(e);
            }
        }
        self.send_due().await
    }

    /// Claims what is due within `claim_ahead_ms` and plans the next claim.
    async fn claim(&mut self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let c = &self.cfg;
        let issued = self.lease.issue();
        let missed_before = now - c.misfire_threshold_ms;
        let upto = now + c.claim_ahead_ms;
        let window = ClaimWindow {
            upto_ms: upto,
            limit: c.claim_batch,
            missed_before_ms: missed_before,
            now_ms: now,
            checkpoint: c.checkpoint.floor(now),
        };
        let claimed = (self.store)
            .claim(self.partition, self.epoch, window)
            .await?;
        self.lease.confirm(issued);
        let full = claimed.fires.len() >= self.cfg.claim_batch;
        claimed.fires.into_iter().for_each(|f| self.push(f));
        let next = match claimed.next_due_ms {
            _ if full => now,
            Some(d) => d - self.cfg.claim_ahead_ms,
            None => i64::MAX,
        };
        self.wake.plan(next);
        Ok(())
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

    /// Takes the broker's answers that arrived, prunes the gate, and acknowledges the
    /// delivered fires in Redis in one call.
    async fn flush_acks(&mut self) -> Result<(), StoreError> {
        if !self.gate.is_empty() {
            self.gate.prune(&self.ready.timer_ids());
        }
        while let Some(Some((p, r))) = self.sending.next().now_or_never() {
            self.delivered(p, r);
        }
        if self.acks.is_empty() {
            return Ok(());
        }
        let issued = self.lease.issue();
        self.store
            .ack(self.partition, self.epoch, &self.acks)
            .await?;
        self.lease.confirm(issued);
        for a in self.acks.drain(..) {
            self.held.remove(super::delivery::acked_member(&a));
        }
        self.in_flight_gauge();
        Ok(())
    }

    /// Sleeps until the next send or claim time, a wake-up, a delivery, or shutdown.
    async fn wait(&mut self) {
        let until = wake_at(
            self.clock.now_ms(),
            self.wake.claim_at(),
            self.ready.next_at(),
            self.cfg.max_idle_ms,
            !self.acks.is_empty(),
        );
        let clock = self.clock;
        tokio::select! {
            _ = self.token.cancelled() => {}
            _ = clock.sleep_until(until) => {}
            _ = self.wake.notified() => {}
            Some((p, r)) = self.sending.next(), if !self.sending.is_empty() => self.delivered(p, r),
        }
    }

    /// On shutdown: wait (bounded) for records already handed to the producer and
    /// acknowledge them; fires not yet sent stay in flight for the next owner.
    async fn drain(&mut self) {
        let deadline = tokio::time::sleep(Duration::from_secs(5));
        tokio::pin!(deadline);
        while !self.sending.is_empty() {
            tokio::select! {
                _ = &mut deadline => break,
                Some((p, r)) = self.sending.next() => {
                    if r.is_ok() {
                        self.delivered(p, r);
                    }
                }
            }
        }
        if let Err(e) = self.flush_acks().await {
            tracing::warn!(partition = self.partition, error = %e, "final acknowledgement failed; fires stay in flight");
        }
        self.m.in_flight.set(0);
    }
}

/// When the trigger must look again: the planned claim, the next send, or `max_idle_ms`
/// from now, whichever comes first; now if acknowledgements are waiting.
pub(super) fn wake_at(
    now_ms: i64,
    claim_at: i64,
    send_at: Option<i64>,
    max_idle_ms: i64,
    acks_waiting: bool,
) -> i64 {
    if acks_waiting {
        return now_ms;
    }
    let idle = now_ms.saturating_add(max_idle_ms);
    claim_at.min(send_at.unwrap_or(i64::MAX)).min(idle)
}

#[cfg(test)]
mod tests {
    use super::wake_at;

    #[test]
    fn the_trigger_looks_again_at_the_first_thing_due() {
        assert_eq!(wake_at(1_000, 1_500, Some(1_200), 5_000, false), 1_200);
        assert_eq!(wake_at(1_000, 1_100, Some(1_200), 5_000, false), 1_100);
        assert_eq!(
            wake_at(1_000, i64::MAX, None, 5_000, false),
            6_000,
            "idle safety net"
        );
        assert_eq!(
            wake_at(1_000, i64::MAX, None, 5_000, true),
            1_000,
            "acks first"
        );
    }
}
