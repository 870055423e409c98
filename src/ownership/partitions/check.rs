//! The periodic check of the owned partitions against Redis (fenced, behind, lost), and
//! holding a partition's tasks while the commands Redis lost are replayed.

use super::Partitions;
use crate::ownership::{verdict, Verdict};
use crate::store::PartitionState;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::Offset;
use std::future::Future;
use std::time::Duration;

/// How long the check waits for Redis's answers. The reads run beside the intake (see
/// [`Partitions::survey`]), so a distant Redis slows the check, not the commands; a
/// partition not answered within this is skipped until the next check.
const CHECK_READ: Duration = Duration::from_secs(5);

/// What one round of the check read from Redis: per partition, what this instance held
/// when the round began and what Redis answered. Read for all partitions at once (one
/// round trip on the multiplexed connection, however many partitions).
#[derive(Debug, Default)]
pub struct Survey {
    reads: Vec<Read>,
}

/// One partition's part of a [`Survey`].
#[derive(Debug)]
struct Read {
    partition: i32,
    /// The epoch held when the round began: a partition taken again since is skipped.
    epoch: i64,
    /// The highest offset handled when the round began (Redis's answer is at least as
    /// recent, so a verdict compares like with like).
    handled: Option<i64>,
    /// The oldest checkpoint Redis may hold, when the round began.
    floor: i64,
    /// Redis's answer; `None` when it did not answer in time.
    state: Option<PartitionState>,
    /// Whether the previous owner still drains (read only while this instance waits for
    /// it); `None` when not read or not answered.
    draining: Option<bool>,
}

impl Partitions {
    /// Checks that Redis still holds what this instance wrote for `parts`: drops the
    /// partitions another instance took, replays from Kafka what Redis lost, rebuilds
    /// what it lost entirely, restarts tasks that ended. Returns the partitions found as
    /// this instance left them.
    pub async fn check(&mut self, parts: &[i32]) -> Vec<i32> {
        let survey = self.survey(parts).await;
        self.conclude(survey).await
    }

    /// Reads what Redis holds of `parts` (and of the drain marks this instance waits
    /// for), all at once. The future owns what it needs, so the intake can read commands
    /// while it waits; [`Partitions::conclude`] acts on the answers.
    ///
    /// Invariant: the future is polled until it ends (spawn it). Its calls take their
    /// turn on the shared Redis connection in order; one given its turn and not polled
    /// holds every call behind it.
    pub fn survey(&self, parts: &[i32]) -> impl Future<Output = Survey> + Send + 'static {
        let now = self.tasks.trigger.clock.now_ms();
        let mut reads = Vec::new();
        for &p in parts {
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            reads.push((
                Read {
                    partition: p,
                    epoch: o.epoch,
                    handled: o.handled,
                    floor: o.floor(now),
                    state: None,
                    draining: None,
                },
                o.draining.is_some(),
            ));
        }
        let store = self.tasks.store.clone();
        async move {
            let read = reads.into_iter().map(|(mut r, drains)| {
                let store = store.clone();
                async move {
                    let p = r.partition;
                    let state = tokio::time::timeout(CHECK_READ, store.partition_state(p));
                    r.state = match state.await {
                        Ok(Ok(s)) => Some(s),
                        Ok(Err(e)) => {
                            tracing::debug!(partition = p, error = %e, "ownership check skipped");
                            None
                        }
                        Err(_) => None,
                    };
                    if drains {
                        let d = tokio::time::timeout(CHECK_READ, store.draining(p)).await;
                        r.draining = d.ok().and_then(Result::ok);
                    }
                    r
                }
            });
            Survey {
                reads: futures::future::join_all(read).await,
            }
        }
    }

    /// Whether `survey` asks for nothing: every partition held as this instance left it,
    /// its tasks running, nothing to seek, release or retry. The intake acts on a
    /// survey that is not quiet only after landing the batches in flight.
    pub fn quiet(&self, survey: &Survey) -> bool {
        let now = std::time::Instant::now();
        if self.unavailable.values().any(|u| u.due(now)) {
            return false;
        }
        survey.reads.iter().all(|r| {
            let Some(o) = self.owned.get(&r.partition) else {
                return true;
            };
            if o.epoch != r.epoch {
                // Taken again since the round began: the next round checks it.
                return true;
            }
            if o.draining.is_some() {
                return r.draining != Some(false);
            }
            if o.seek.is_some() || o.hold_until.is_some() {
                return false;
            }
            r.state.is_none_or(|state| {
                !o.ended() && verdict(r.epoch, r.handled, r.floor, state) == Verdict::Held
            })
        })
    }

    /// Acts on what `survey` read. Returns the partitions found as this instance left
    /// them.
    pub async fn conclude(&mut self, survey: Survey) -> Vec<i32> {
        let mut changed = false;
        let mut held = Vec::new();
        if !self.retry_unavailable().await {
            return held;
        }
        for r in survey.reads {
            let p = r.partition;
            if self.owned.get(&p).is_none_or(|o| o.epoch != r.epoch) {
                continue;
            }
            if self.still_draining(p, r.draining) {
                continue;
            }
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            if let Some(to) = o.seek {
                self.seek(p, to);
                continue;
            }
            if o.hold_until.is_some() && self.caught_up(p) {
                self.release(p);
            }
            let Some(state) = r.state else {
                continue;
            };
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            match verdict(r.epoch, r.handled, r.floor, state) {
                Verdict::Held if o.ended() && !self.tasks.token.is_cancelled() => {
                    // Only a fence ends them otherwise; Redis says the epoch is still ours.
                    tracing::error!(partition = p, "a partition task ended; restarting them");
                    self.tasks.metrics.task_restarts.inc();
                    if !self.own(p, false).await {
                        return held;
                    }
                    changed = true;
                }
                Verdict::Held => held.push(p),
                Verdict::Fenced => {
                    tracing::warn!(partition = p, "fenced: another instance took the partition");
                    if let Some(o) = self.owned.remove(&p) {
                        o.stop().await;
                    }
                    self.tasks.metrics.forget_partition(&self.topic, p);
                    changed = true;
                }
                Verdict::Behind(to) => {
                    // Everything handled until now is applied again before firing.
                    let handled = o.handled.max(r.handled);
                    tracing::warn!(partition = p, ?handled, redis = ?state.applied,
                        floor = r.floor, checkpoint = ?state.checkpoint,
                        "redis lost commands it had applied: replaying them before firing again");
                    self.tasks.metrics.replays.inc();
                    self.hold(p, handled).await;
                    self.seek(p, to);
                }
                Verdict::Lost => {
                    tracing::warn!(partition = p, ?state, floor = r.floor,
                        "redis lost the partition (emptied, or back from older data): rebuilding it");
                    if !self.own(p, true).await {
                        return held;
                    }
                    changed = true;
                }
            }
        }
        if changed {
            self.publish();
        }
        held
    }

    /// Stops the tasks of `p` until the commands up to `until` are applied again.
    async fn hold(&mut self, p: i32, until: Option<i64>) {
        let Some(o) = self.owned.get_mut(&p) else {
            return;
        };
        if let Some(r) = o.tasks.take() {
            o.sequence = r.checkpoint.sequence();
            r.stop().await;
        }
        o.hold_until = until;
        if until.is_none() {
            self.release(p);
        }
    }

    /// Whether the consumer of `p` read past the offset its tasks wait for.
    fn caught_up(&self, p: i32) -> bool {
        let Some(until) = self.owned.get(&p).and_then(|o| o.hold_until) else {
            return true;
        };
        let pos = self
            .consumer
            .position()
            .ok()
            .and_then(|tpl| tpl.find_partition(&self.topic, p).map(|e| e.offset()));
        matches!(pos, Some(Offset::Offset(n)) if n > until)
    }

    /// Moves the consumer of `p` back to `to`; if librdkafka refuses for now, records of
    /// `p` are skipped until a later check succeeds.
    pub fn seek(&mut self, p: i32, to: Offset) {
        let done = self
            .consumer
            .seek(&self.topic, p, to, Duration::from_secs(5));
        self.sought(p, to, done);
    }

    /// Moves the consumers of several partitions at once ([`Partitions::seek`]), off the
    /// runtime's threads (the call blocks until librdkafka did it).
    pub(super) async fn seek_all(&mut self, to: Vec<(i32, Offset)>) {
        if to.is_empty() {
            return;
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        for &(p, off) in &to {
            if let Err(e) = tpl.add_partition_offset(&self.topic, p, off) {
                tracing::warn!(partition = p, error = %e, "seek not asked");
            }
        }
        let (consumer, topic) = (self.consumer.clone(), self.topic.clone());
        let asked = tokio::task::spawn_blocking(move || {
            consumer.seek_partitions(tpl, Duration::from_secs(5))
        });
        let done = asked.await.map_err(|e| KafkaError::Seek(e.to_string()));
        for (p, off) in to {
            let one = match &done {
                Ok(Ok(tpl)) => match tpl.find_partition(&topic, p).map(|e| e.error()) {
                    Some(Ok(())) => Ok(()),
                    Some(Err(e)) => Err(e),
                    None => Err(KafkaError::Seek("not answered".into())),
                },
                Ok(Err(e)) | Err(e) => Err(e.clone()),
            };
            self.sought(p, off, one);
        }
    }

    /// Records how seeking `p` to `to` went.
    fn sought(&mut self, p: i32, to: Offset, done: Result<(), KafkaError>) {
        let Some(o) = self.owned.get_mut(&p) else {
            return;
        };
        match done {
            Ok(()) => {
                o.seek = None;
                o.handled = match to {
                    Offset::Offset(n) => Some(n - 1),
                    _ => None,
                };
            }
            Err(e) => {
                tracing::warn!(partition = p, error = %e, "seek refused; retrying in a second");
                o.seek = Some(to);
            }
        }
    }
}
