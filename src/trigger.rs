//! The trigger: one task per owned partition that fires its timers at the due millisecond.
//!
//! The task sleeps until the next claim time (the next due time minus `claim_ahead`), or
//! until the intake wakes it because an earlier timer arrived; there is no polling
//! interval. A claim moves due fires atomically into the in-flight set; the task then
//! waits in memory for each fire's due millisecond, enqueues its record, and only after
//! the broker acknowledged it removes it from the in-flight set (batched). A fire is never
//! produced before its due time: the wall clock is checked after every wake.
//!
//! On start the task re-drives whatever the partition has in flight (a previous owner
//! crashed or lost the partition). Slices of earlier minutes are claimed first, so a
//! backlog left by downtime drains in due order.
//!
//! Just before a fire is handed to the producer, the [`Gate`] is checked: a pause, update
//! or cancel applied after the fire was claimed makes it stale, and it is dropped instead.

use crate::metrics::Metrics;
use crate::now_ms;
use crate::retry;
use crate::shutdown::CancellationToken;
use crate::sink::{delivered, Sink, SinkError, Stamp};
use crate::store::{Fire, Store, StoreError};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use prometheus::{IntCounter, IntGauge};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a successful epoch-checked Redis call vouches for the ownership of a
/// partition before sending needs a fresh check, counted from when the call was issued (a
/// reply read after a freeze says nothing about the time of the freeze). Must stay well
/// below the group's session timeout minus the heartbeat interval (10 s - 3 s by default).
pub const LEASE: std::time::Duration = std::time::Duration::from_millis(2_000);

/// Trigger tuning.
#[derive(Debug, Clone)]
pub struct TriggerConfig {
    /// Claim fires this many ms before they are due (then wait in memory).
    pub claim_ahead_ms: i64,
    /// Most fires claimed in one Redis call.
    pub claim_batch: usize,
    /// Longest sleep without a wake-up (a safety net, not a polling interval).
    pub max_idle_ms: i64,
    /// Delay of the first delivery retry; doubles up to `retry_max_ms`.
    pub retry_base_ms: i64,
    /// Largest delay between delivery retries.
    pub retry_max_ms: i64,
    /// Delivery attempts of a fire before it goes to the dead-letter topic (an error the
    /// broker will never accept, such as a record too large, sends it there at once).
    pub max_attempts: i32,
    /// A cron occurrence claimed more than this late was missed (its misfire policy applies).
    pub misfire_threshold_ms: i64,
}

/// Tells a trigger when it must claim next. Shared between the intake and the trigger.
#[derive(Debug)]
pub struct Wake {
    at: AtomicI64,
    notify: Notify,
    ahead: i64,
}

impl Wake {
    fn new(ahead: i64) -> Wake {
        Wake {
            at: AtomicI64::new(i64::MIN),
            notify: Notify::new(),
            ahead,
        }
    }

    /// A fire due at `due_ms` was stored: wake the trigger if it planned to sleep past it.
    pub fn due(&self, due_ms: i64) {
        let t = due_ms.saturating_sub(self.ahead);
        if t < self.at.fetch_min(t, Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

/// Fires made stale by commands, checked just before delivery.
///
/// Invariant: after the intake applied a pause, update or cancel of a timer at command
/// offset `o` (its new version), it blocks every fire of that timer with a version below
/// `o` here *before* it sends the command's result; the trigger checks the gate right
/// before each send. So no fire of an older version is produced after the result. An
/// entry lives while the trigger may still hold a fire of that timer in memory.
#[derive(Debug, Default)]
pub struct Gate {
    blocked: Mutex<HashMap<String, i64>>,
}

impl Gate {
    /// Fires of `timer_id` with a version below `version` must not be delivered.
    pub fn block(&self, timer_id: &str, version: i64) {
        let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        let v = b.entry(timer_id.to_string()).or_insert(version);
        *v = (*v).max(version);
    }

    fn blocks(&self, timer_id: &str, version: i64) -> bool {
        let b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        b.get(timer_id).is_some_and(|&v| version < v)
    }

    /// Forgets entries of timers the trigger holds no fire of. Claims that ran before a
    /// command was applied have been pushed to the ready queue by then, so this is safe.
    fn prune(&self, held: &HashSet<&str>) {
        let mut b = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        b.retain(|id, _| held.contains(id.as_str()));
    }

    fn is_empty(&self) -> bool {
        self.blocked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

/// The intake's handle on a running trigger.
pub struct TriggerHandle {
    /// Wakes the trigger for earlier timers.
    pub wake: Arc<Wake>,
    /// Fires made stale by commands.
    pub gate: Arc<Gate>,
    token: CancellationToken,
    join: tokio::task::JoinHandle<()>,
}

impl TriggerHandle {
    /// Stops the trigger and waits for it to hand back what it holds.
    pub async fn stop(self) {
        self.token.cancel();
        let _ = self.join.await;
    }
}

/// A claimed fire waiting for its send time.
struct Pending {
    fire: Fire,
    attempt: i32,
    /// Set when the fire goes to the dead-letter topic instead: why.
    dead: Option<String>,
}

type Sending = Pin<Box<dyn Future<Output = (Pending, Result<(), SinkError>)> + Send>>;

/// Starts the trigger of `partition` holding `epoch`.
pub fn spawn(
    partition: i32,
    epoch: i64,
    store: Store,
    sink: Arc<Sink>,
    metrics: Arc<Metrics>,
    cfg: TriggerConfig,
    token: CancellationToken,
) -> TriggerHandle {
    let wake = Arc::new(Wake::new(cfg.claim_ahead_ms));
    let gate = Arc::new(Gate::default());
    let t = Trigger {
        in_flight: metrics
            .in_flight
            .with_label_values(&[&partition.to_string()]),
        delivered: metrics.fires.with_label_values(&["delivered"]),
        retried: metrics.fires.with_label_values(&["retried"]),
        stale: metrics.fires.with_label_values(&["stale"]),
        dead_lettered: metrics.fires.with_label_values(&["dead_lettered"]),
        confirmed: std::time::Instant::now(),
        undeliverable: 0,
        partition,
        epoch,
        store,
        sink,
        metrics,
        cfg,
        wake: wake.clone(),
        gate: gate.clone(),
        token: token.clone(),
        ready: BTreeMap::new(),
        seq: 0,
        sending: FuturesUnordered::new(),
        acks: Vec::new(),
    };
    let join = tokio::spawn(t.run());
    TriggerHandle {
        wake,
        gate,
        token,
        join,
    }
}

struct Trigger {
    partition: i32,
    epoch: i64,
    store: Store,
    sink: Arc<Sink>,
    metrics: Arc<Metrics>,
    cfg: TriggerConfig,
    wake: Arc<Wake>,
    gate: Arc<Gate>,
    token: CancellationToken,
    /// Claimed fires by (send time, sequence).
    ready: BTreeMap<(i64, u64), Pending>,
    seq: u64,
    sending: FuturesUnordered<Sending>,
    /// Members delivered and not yet acknowledged in Redis.
    acks: Vec<String>,
    /// Metric handles resolved once, off the per-fire path.
    in_flight: IntGauge,
    delivered: IntCounter,
    retried: IntCounter,
    stale: IntCounter,
    dead_lettered: IntCounter,
    /// When an epoch-checked call last succeeded (see [`LEASE`]).
    confirmed: std::time::Instant,
    /// Fires routed to the dead-letter topic so far (for sparse logging).
    undeliverable: u32,
}

impl Trigger {
    async fn run(mut self) {
        let p = self.partition;
        tracing::info!(partition = p, epoch = self.epoch, "trigger started");
        let mut failures = 0u32;
        let missed_before = now_ms() - self.cfg.misfire_threshold_ms;
        match self.store.recover(p, self.epoch, missed_before).await {
            Ok(fires) => {
                if !fires.is_empty() {
                    tracing::info!(
                        partition = p,
                        fires = fires.len(),
                        "re-driving in-flight fires"
                    );
                }
                fires.into_iter().for_each(|f| self.push(f, 1));
            }
            Err(e) => return self.stopped(e),
        }
        loop {
            if let Err(e) = self.step().await {
                if matches!(e, StoreError::Fenced(_)) {
                    return self.stopped(e);
                }
                self.metrics
                    .redis_errors
                    .with_label_values(&["trigger"])
                    .inc();
                failures += 1;
                if retry::worth_logging(failures) {
                    tracing::warn!(partition = p, error = %e, failures, "trigger: redis call failed; retrying");
                }
                retry::pause(&self.token, failures).await;
            } else {
                failures = 0;
            }
            if self.token.is_cancelled() {
                break;
            }
            self.wait().await;
        }
        self.drain().await;
        tracing::info!(partition = p, "trigger stopped");
    }

    fn stopped(&self, e: StoreError) {
        tracing::warn!(partition = self.partition, error = %e, "trigger stopped: partition lost");
    }

    fn push(&mut self, fire: Fire, attempt: i32) {
        let pending = Pending {
            attempt,
            dead: None,
            fire,
        };
        self.requeue(pending.fire.due_ms, pending);
    }

    fn in_flight_gauge(&self) {
        let n = self.ready.len() + self.sending.len() + self.acks.len();
        self.in_flight.set(n as i64);
    }

    /// One round: send what is due, acknowledge, claim when it is time, send again.
    /// Sending first keeps the acknowledgement's Redis round trip off the due fires' path.
    async fn step(&mut self) -> Result<(), StoreError> {
        self.send_due().await?;
        self.flush_acks().await?;
        let now = now_ms();
        if self.wake.at.load(Ordering::SeqCst) <= now {
            self.wake.at.store(i64::MAX, Ordering::SeqCst);
            let issued = std::time::Instant::now();
            let claimed = match self
                .store
                .claim(
                    self.partition,
                    self.epoch,
                    now + self.cfg.claim_ahead_ms,
                    self.cfg.claim_batch,
                    now - self.cfg.misfire_threshold_ms,
                )
                .await
            {
                Ok(c) => {
                    self.confirmed = issued;
                    c
                }
                Err(e) => {
                    self.wake.at.store(i64::MIN, Ordering::SeqCst);
                    return Err(e);
                }
            };
            let full = claimed.fires.len() >= self.cfg.claim_batch;
            claimed.fires.into_iter().for_each(|f| self.push(f, 1));
            let next = if full {
                now
            } else {
                claimed
                    .next_due_ms
                    .map_or(i64::MAX, |d| d - self.cfg.claim_ahead_ms)
            };
            self.wake.at.fetch_min(next, Ordering::SeqCst);
        }
        self.send_due().await
    }

    /// Before sending: if no epoch-checked Redis call succeeded within [`LEASE`], check
    /// the epoch now. An instance that was frozen (GC, SIGSTOP, a stalled VM) longer than
    /// the group's session timeout lost its partitions meanwhile; this keeps it from
    /// producing the fires it still holds in memory (the new owner re-drives them).
    async fn confirm_epoch(&mut self) -> Result<(), StoreError> {
        if self.confirmed.elapsed() < LEASE {
            return Ok(());
        }
        let issued = std::time::Instant::now();
        let state = self.store.partition_state(self.partition).await?;
        if state.epoch != Some(self.epoch) {
            return Err(StoreError::Fenced(self.partition));
        }
        self.confirmed = issued;
        Ok(())
    }

    /// Enqueues every ready fire whose due time has come (by the wall clock). The lease
    /// is checked before each fire (a clock read; a Redis call only once it ran out), so a
    /// freeze in the middle of a batch cannot let the rest of it out unfenced.
    async fn send_due(&mut self) -> Result<(), StoreError> {
        loop {
            let now = now_ms();
            if self.ready.first_key_value().is_none_or(|(k, _)| k.0 > now) {
                break;
            }
            self.confirm_epoch().await?;
            let Some(entry) = self.ready.first_entry() else {
                break;
            };
            let pending = entry.remove();
            if self
                .gate
                .blocks(&pending.fire.timer_id, pending.fire.version)
            {
                self.stale.inc();
                self.acks.push(pending.fire.member);
                continue;
            }
            let lateness = (now - pending.fire.due_ms).max(0);
            let stamp = Stamp {
                attempt: pending.attempt,
                fired_ms: now,
                epoch: self.epoch,
            };
            let sent = match &pending.dead {
                None => self.sink.send_fire(&pending.fire, stamp).await,
                Some(why) => {
                    self.sink
                        .send_fire_dead_letter(&pending.fire, stamp, why)
                        .await
                }
            };
            match sent {
                Ok(f) => {
                    if pending.dead.is_none() {
                        self.metrics.fire_lateness.observe(lateness as f64 / 1000.0);
                    }
                    self.sending.push(Box::pin(
                        delivered(f).map(move |r| (pending, r.map(|_| ()))),
                    ));
                }
                Err(e) => self.retry(pending, e),
            }
        }
        Ok(())
    }

    /// A delivery failed: retry later with backoff, or (attempts exhausted, or an error
    /// the broker will never accept) route the fire to the dead-letter topic now. A fire
    /// already on its way there is retried until the dead-letter topic takes it: it is
    /// never dropped.
    fn retry(&mut self, mut pending: Pending, e: SinkError) {
        let p = self.partition;
        if pending.dead.is_none() && (!e.is_retryable() || pending.attempt >= self.cfg.max_attempts)
        {
            self.undeliverable += 1;
            if retry::worth_logging(self.undeliverable) {
                tracing::warn!(partition = p, error = %e, attempt = pending.attempt,
                    undeliverable = self.undeliverable,
                    "fire undeliverable: sending it to the dead-letter topic");
            }
            pending.dead = Some(format!(
                "not delivered after {} attempt(s): {e}",
                pending.attempt
            ));
            return self.requeue(now_ms(), pending);
        }
        self.retried.inc();
        let n = pending.attempt.clamp(1, 20) as u32;
        let delay = (self.cfg.retry_base_ms << (n - 1).min(16)).min(self.cfg.retry_max_ms);
        if pending.attempt == 1 || pending.attempt.count_ones() == 1 {
            tracing::warn!(partition = p, error = %e, attempt = pending.attempt,
                retryable = e.is_retryable(), dead_letter = pending.dead.is_some(),
                "fire delivery failed; will retry");
        }
        pending.attempt += 1;
        self.requeue(now_ms() + delay, pending);
    }

    fn requeue(&mut self, at_ms: i64, pending: Pending) {
        self.seq += 1;
        self.ready.insert((at_ms, self.seq), pending);
        self.in_flight_gauge();
    }

    fn delivered(&mut self, pending: Pending, r: Result<(), SinkError>) {
        match (r, pending.dead) {
            (Ok(()), None) => {
                self.delivered.inc();
                self.acks.push(pending.fire.member);
            }
            (Ok(()), Some(why)) => {
                self.dead_lettered.inc();
                let why: String = why.chars().filter(|c| *c != '\n').take(500).collect();
                self.acks.push(format!("!{}\n{why}", pending.fire.member));
            }
            (Err(e), dead) => self.retry(Pending { dead, ..pending }, e),
        }
    }

    async fn flush_acks(&mut self) -> Result<(), StoreError> {
        if !self.gate.is_empty() {
            let held = self
                .ready
                .values()
                .map(|p| p.fire.timer_id.as_str())
                .collect();
            self.gate.prune(&held);
        }
        while let Some(Some((p, r))) = self.sending.next().now_or_never() {
            self.delivered(p, r);
        }
        if self.acks.is_empty() {
            return Ok(());
        }
        let issued = std::time::Instant::now();
        self.store
            .ack(self.partition, self.epoch, &self.acks)
            .await?;
        self.confirmed = issued;
        self.acks.clear();
        self.in_flight_gauge();
        Ok(())
    }

    /// Sleeps until the next send or claim time, a wake-up, a delivery, or shutdown.
    async fn wait(&mut self) {
        let now = now_ms();
        let claim_at = self.wake.at.load(Ordering::SeqCst);
        let send_at = self.ready.keys().next().map_or(i64::MAX, |k| k.0);
        let mut until = claim_at.min(send_at).min(now + self.cfg.max_idle_ms);
        if !self.acks.is_empty() {
            until = now;
        }
        let sleep = tokio::time::sleep_until(Instant::now() + ms_until(now, until));
        tokio::select! {
            _ = self.token.cancelled() => {}
            _ = sleep => {}
            _ = self.wake.notify.notified() => {}
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
        self.in_flight.set(0);
    }
}

/// Time from `now_ms` until `until_ms`, with sub-millisecond rounding up so a wake-up is
/// never before the target millisecond.
fn ms_until(now_ms: i64, until_ms: i64) -> Duration {
    if until_ms <= now_ms {
        return Duration::ZERO;
    }
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(now_ms * 1000);
    Duration::from_micros((until_ms.saturating_mul(1000) - now_us).max(0) as u64)
}
