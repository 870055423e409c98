//! The checkpoint task of one owned partition: about once a second, writes the state of
//! every timer changed since the last checkpoint to the state topic, then a checkpoint
//! record, and only then confirms both to Redis.
//!
//! Invariants:
//! * a checkpoint record follows the records of every timer changed before it (they are
//!   produced first, to the same partition, by one idempotent producer);
//! * Redis forgets a page's timers (pending set) only after the broker acknowledged
//!   their records: a page lost with a producer or a process is taken again;
//! * the sequence Redis keeps only grows, and is the last one the broker acknowledged.

use super::StateError;
use crate::clock::Clock;
use crate::codec::{encode_checkpoint, encode_timer_state};
use crate::metrics::Metrics;
use crate::retry::Retry;
use crate::shutdown::{within_deadline, CancellationToken, Stoppable, CALL_GRACE};
use crate::sink::{delivered, Sink};
use crate::store::{CheckpointPage, Store};
use crate::timer::{Checkpoint, TimerFields};
use rdkafka::producer::DeliveryFuture;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most timers per checkpoint page: one page is one Redis call that reads each timer,
/// about 10 to 20 µs apiece, during which no claim runs; 500 keep it to a few ms (5,000
/// held claims back up to 190 ms, and fires late by as much).
pub const PAGE: usize = 500;

/// Checkpoint tuning.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// How often a checkpoint is taken (fires acknowledged within one interval before a
    /// Redis loss fire again).
    pub interval: Duration,
    /// Most timers per page.
    pub page: usize,
    /// Most in-flight members listed in a checkpoint (beyond them the watermark stops).
    pub in_flight: usize,
    /// The clock.
    pub clock: Clock,
}

/// The last checkpoint the broker acknowledged and Redis recorded, shared by a
/// partition's checkpoint task (which raises it) and its trigger and ownership check
/// (which compare Redis with it).
#[derive(Debug, Default)]
pub struct Confirmed {
    sequence: AtomicI64,
    at_ms: AtomicI64,
    interval_ms: i64,
}

impl Confirmed {
    /// Checkpoint `sequence`, confirmed long ago; checkpoints every `interval_ms`.
    pub fn new(sequence: i64, interval_ms: i64) -> Confirmed {
        Confirmed {
            sequence: AtomicI64::new(sequence),
            at_ms: AtomicI64::new(0),
            interval_ms,
        }
    }

    /// The last sequence confirmed.
    pub fn sequence(&self) -> i64 {
        self.sequence.load(Ordering::Relaxed)
    }

    fn confirm(&self, sequence: i64, at_ms: i64) {
        self.at_ms.store(at_ms, Ordering::Relaxed);
        self.sequence.store(sequence, Ordering::Relaxed);
    }

    /// The oldest checkpoint Redis may hold at `now_ms`: the last one, or the one before
    /// while the last is younger than one and a half intervals (Redis may have lost just
    /// its confirmation, with a second of writes). Older means Redis came back from data
    /// that lacks acknowledgements older than that: it must be rebuilt.
    pub fn floor(&self, now_ms: i64) -> i64 {
        let young = now_ms - self.at_ms.load(Ordering::Relaxed) <= self.interval_ms * 3 / 2;
        self.sequence() - i64::from(young)
    }
}

/// A running checkpoint task.
pub struct CheckpointHandle {
    /// The last checkpoint confirmed.
    pub confirmed: Arc<Confirmed>,
    task: Stoppable,
}

impl CheckpointHandle {
    /// The last checkpoint sequence acknowledged.
    pub fn sequence(&self) -> i64 {
        self.confirmed.sequence()
    }

    /// Whether the task ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the task (a checkpoint under way completes or is taken again later).
    pub async fn stop(self) {
        self.task.stop().await;
    }
}

/// Which partition a checkpoint task serves.
#[derive(Debug, Clone)]
pub struct Held {
    /// Commands-topic partition.
    pub partition: i32,
    /// The epoch held.
    pub epoch: i64,
    /// The last checkpoint Redis confirmed; the task raises it after each checkpoint
    /// (the partition's trigger reads it).
    pub confirmed: Arc<Confirmed>,
}

/// Starts the checkpoint task of a held partition.
pub fn spawn(
    Held {
        partition,
        epoch,
        confirmed,
    }: Held,
    store: Store,
    sink: Arc<Sink>,
    cfg: CheckpointConfig,
    metrics: &Metrics,
    token: CancellationToken,
) -> CheckpointHandle {
    let retry = Retry::new("checkpoint", &token)
        .partition(partition)
        .counting(metrics.redis_errors.with_label_values(&["checkpoint"]));
    let c = Checkpointer {
        partition,
        epoch,
        store,
        sink,
        cfg,
        confirmed: confirmed.clone(),
        last: None,
        token: token.clone(),
        kafka_errors: metrics.kafka_errors.with_label_values(&["state"]),
    };
    CheckpointHandle {
        confirmed,
        task: Stoppable::spawn(token, c.run(retry)),
    }
}

struct Checkpointer {
    partition: i32,
    epoch: i64,
    store: Store,
    sink: Arc<Sink>,
    cfg: CheckpointConfig,
    confirmed: Arc<Confirmed>,
    /// The reflected offset, acknowledgement counter and in-flight list of the last
    /// checkpoint written.
    last: Option<(i64, i64, Vec<String>)>,
    token: CancellationToken,
    /// Failed writes to the state topic.
    kafka_errors: prometheus::IntCounter,
}

impl Checkpointer {
    async fn run(mut self, retry: Retry) {
        let mut tick = tokio::time::interval(self.cfg.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.token.cancelled() => return,
                _ = tick.tick() => {}
            }
            let mut attempts = retry.attempts();
            loop {
                // Stopped mid-checkpoint and not done a grace later: nothing is
                // recorded, the next owner takes it.
                let token = self.token.clone();
                let Some(taken) = within_deadline(self.take(), &token, CALL_GRACE).await else {
                    return;
                };
                match taken {
                    Ok(()) => break,
                    Err(e) if e.is_fenced() => {
                        tracing::info!(
                            partition = self.partition,
                            "checkpoints stopped: partition lost"
                        );
                        return;
                    }
                    Err(e) => {
                        if let StateError::Sink(s) = &e {
                            self.sink.heal(s);
                            self.kafka_errors.inc();
                        }
                        if !attempts.failed(&e).await {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Takes one checkpoint: pages of changed timers, then (if anything changed) the
    /// checkpoint record.
    async fn take(&mut self) -> Result<(), StateError> {
        let mut wrote = false;
        loop {
            // Between pages: a shutdown leaves the rest to the next owner.
            if self.token.is_cancelled() {
                return Ok(());
            }
            let now = self.cfg.clock.now_ms();
            // Redis back from older data: its states must never reach the state topic.
            let held = (self.partition, self.epoch, self.confirmed.floor(now));
            let page = self
                .store
                .checkpoint_page(held, now, (self.cfg.page, self.cfg.in_flight))
                .await?;
            wrote |= !page.timers.is_empty();
            let mut sent = Vec::with_capacity(page.timers.len());
            for (id, fields) in &page.timers {
                sent.extend(self.send_state(id, fields.as_ref()).await?);
            }
            let done = page.left == 0;
            tracing::debug!(
                partition = self.partition,
                timers = page.timers.len(),
                left = page.left,
                applied = page.applied,
                acked_through = page.acked_through_ms,
                "checkpoint page"
            );
            let record = (done && (wrote || self.changed(&page))).then(|| self.record(&page, now));
            // The checkpoint record goes only once the page's states are in the topic: were
            // the producer replaced between them (Sink::heal), the checkpoint could land
            // without states that failed on the old one.
            for f in sent {
                delivered(f).await?;
            }
            if let Some(c) = &record {
                let v = encode_checkpoint(c)?;
                delivered(self.sink.send_state(self.partition, b"", Some(&v)).await?).await?;
            }
            let seq = record.as_ref().map(|c| c.sequence);
            self.store.checkpointed(held, seq).await?;
            if let Some(c) = record {
                self.confirmed.confirm(c.sequence, self.cfg.clock.now_ms());
                self.last = Some((c.commands_offset, page.acks, c.in_flight));
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Enqueues the state record of timer `id` (a tombstone for `None`). A state the
    /// producer refuses as too large goes again without its history; one still too large
    /// is left out, with an error: one timer never stops the partition's checkpoints.
    async fn send_state(
        &self,
        id: &str,
        fields: Option<&TimerFields>,
    ) -> Result<Option<DeliveryFuture>, StateError> {
        let (p, key) = (self.partition, id.as_bytes());
        let value = fields.map(encode_timer_state).transpose()?;
        match self.sink.send_state(p, key, value.as_deref()).await {
            Err(e) if e.does_not_fit() => {
                self.kafka_errors.inc();
                tracing::error!(partition = p, timer_id = id, error = %e,
                    "a timer's state is too large for the state topic: written without its history");
            }
            other => return Ok(Some(other?)),
        }
        let lean = fields.map(without_history);
        let value = lean.as_ref().map(encode_timer_state).transpose()?;
        match self.sink.send_state(p, key, value.as_deref()).await {
            Err(e) if e.does_not_fit() => {
                tracing::error!(partition = p, timer_id = id, error = %e,
                    "a timer's state is too large for the state topic even without its history: \
                     not recorded (a rebuild would not restore it)");
                Ok(None)
            }
            other => Ok(Some(other?)),
        }
    }

    /// Whether commands were applied, fires acknowledged or the in-flight list changed
    /// since the last checkpoint (a Redis back from older data then shows an older
    /// sequence, so its stale fires are never claimed).
    fn changed(&self, page: &CheckpointPage) -> bool {
        self.last.as_ref().is_none_or(|(applied, acks, flight)| {
            *applied != page.applied || *acks != page.acks || *flight != page.in_flight
        })
    }

    fn record(&self, page: &CheckpointPage, now: i64) -> Checkpoint {
        Checkpoint {
            sequence: self.confirmed.sequence() + 1,
            epoch: self.epoch,
            commands_offset: page.applied,
            acked_through_ms: page.acked_through_ms,
            in_flight: page.in_flight.clone(),
            written_at_ms: now,
            applied_offset: page.applied_now,
        }
    }
}

/// A timer's fields without its history and last fire (the look-up's, not the schedule's).
fn without_history(t: &TimerFields) -> TimerFields {
    use crate::store::keys::field;
    let mut lean = t.clone();
    lean.fields.remove(field::HISTORY);
    lean.fields.remove(field::LAST_FIRE);
    lean
}

#[cfg(test)]
mod tests {
    use super::Confirmed;

    #[test]
    fn redis_may_lag_one_checkpoint_only_while_the_last_is_young() {
        let c = Confirmed::new(5, 1_000);
        assert_eq!(c.floor(10_000), 5, "confirmed long ago: Redis must hold it");
        c.confirm(6, 10_000);
        assert_eq!(
            c.floor(10_500),
            5,
            "just confirmed: Redis may have lost that write"
        );
        assert_eq!(c.floor(11_500), 5);
        assert_eq!(c.floor(11_501), 6);
    }
}
