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
use crate::shutdown::{CancellationToken, Stoppable};
use crate::sink::{delivered, Sink};
use crate::store::{CheckpointPage, Store};
use crate::timer::{Checkpoint, TimerFields};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Checkpoint tuning.
#[derive(Debug, Clone, Copy)]
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

/// A running checkpoint task.
pub struct CheckpointHandle {
    /// The sequence of the last checkpoint the broker acknowledged.
    pub sequence: Arc<AtomicI64>,
    task: Stoppable,
}

impl CheckpointHandle {
    /// The last checkpoint sequence acknowledged.
    pub fn sequence(&self) -> i64 {
        self.sequence.load(Ordering::Relaxed)
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
#[derive(Debug, Clone, Copy)]
pub struct Held {
    /// Commands-topic partition.
    pub partition: i32,
    /// The epoch held.
    pub epoch: i64,
    /// The last checkpoint sequence Redis confirmed.
    pub sequence: i64,
}

/// Starts the checkpoint task of a held partition.
pub fn spawn(
    Held {
        partition,
        epoch,
        sequence,
    }: Held,
    store: Store,
    sink: Arc<Sink>,
    cfg: CheckpointConfig,
    metrics: &Metrics,
    token: CancellationToken,
) -> CheckpointHandle {
    let seq = Arc::new(AtomicI64::new(sequence));
    let retry = Retry::new("checkpoint", &token)
        .partition(partition)
        .counting(metrics.redis_errors.with_label_values(&["checkpoint"]));
    let c = Checkpointer {
        partition,
        epoch,
        store,
        sink,
        cfg,
        sequence: seq.clone(),
        last: None,
        token: token.clone(),
    };
    CheckpointHandle {
        sequence: seq,
        task: Stoppable::spawn(token, c.run(retry)),
    }
}

struct Checkpointer {
    partition: i32,
    epoch: i64,
    store: Store,
    sink: Arc<Sink>,
    cfg: CheckpointConfig,
    sequence: Arc<AtomicI64>,
    /// The applied offset and in-flight list of the last checkpoint written.
    last: Option<(i64, Vec<String>)>,
    token: CancellationToken,
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
                match self.take().await {
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
            let now = self.cfg.clock.now_ms();
            let page = self
                .store
                .checkpoint_page(
                    self.partition,
                    self.epoch,
                    now,
                    self.cfg.page,
                    self.cfg.in_flight,
                )
                .await?;
            wrote |= !page.timers.is_empty();
            let mut sent = Vec::with_capacity(page.timers.len() + 1);
            for (id, fields) in &page.timers {
                let value = fields
                    .as_ref()
                    .map(|f| encode_timer_state(&to_record(f)))
                    .transpose()?;
                sent.push(
                    self.sink
                        .send_state(self.partition, id.as_bytes(), value.as_deref())
                        .await?,
                );
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
            if let Some(c) = &record {
                let v = encode_checkpoint(c)?;
                sent.push(self.sink.send_state(self.partition, b"", Some(&v)).await?);
            }
            for f in sent {
                delivered(f).await?;
            }
            let seq = record.as_ref().map(|c| c.sequence);
            self.store
                .checkpointed(self.partition, self.epoch, seq)
                .await?;
            if let Some(c) = record {
                self.sequence.store(c.sequence, Ordering::Relaxed);
                self.last = Some((c.commands_offset, c.in_flight));
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Whether the page's offset or in-flight list differ from the last checkpoint's.
    fn changed(&self, page: &CheckpointPage) -> bool {
        self.last
            .as_ref()
            .is_none_or(|(applied, flight)| *applied != page.applied || *flight != page.in_flight)
    }

    fn record(&self, page: &CheckpointPage, now: i64) -> Checkpoint {
        Checkpoint {
            sequence: self.sequence.load(Ordering::Relaxed) + 1,
            epoch: self.epoch,
            commands_offset: page.applied,
            acked_through_ms: page.acked_through_ms,
            in_flight: page.in_flight.clone(),
            written_at_ms: now,
        }
    }
}

/// A timer's hash fields as a state record.
fn to_record(fields: &[(String, Vec<u8>)]) -> TimerFields {
    TimerFields {
        fields: fields
            .iter()
            .map(|(k, v)| (k.clone(), serde_bytes::ByteBuf::from(v.clone())))
            .collect(),
    }
}
