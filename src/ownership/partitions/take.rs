//! Taking partitions: a new epoch for each, and its tasks started at once, or after
//! Redis was rebuilt from the state topic and the commands after its checkpoint were
//! replayed. All partitions of an assignment are taken together: what each needs from
//! Redis and the state topic is read and written for all of them at once, so a distant
//! Redis costs a few round trips for the whole assignment, not a few per partition.

use super::{drain, Owned, Partitions};
use crate::retry::Retry;
use crate::state::rebuild::{rebuild, Rebuilt};
use crate::store::PartitionState;
use futures::StreamExt;
use rdkafka::consumer::Consumer;
use rdkafka::Offset;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most partitions rebuilt at a time (each reads its state-topic partition with a
/// consumer of its own).
const REBUILDS: usize = 16;

/// What taking a partition found and wrote in Redis ([`Partitions::take`]).
struct Taking {
    /// What Redis held of it before.
    before: PartitionState,
    /// Whether what it holds is older than the state topic's last checkpoint.
    stale: bool,
    /// The new epoch.
    epoch: i64,
    /// Whether the previous owner's producer still holds fires of it.
    draining: bool,
}

/// How a taken partition gets ready to fire.
enum Ready {
    /// Redis holds it as it should: its tasks start now.
    Now,
    /// Its state-topic partition is missing: it waits (`unavailable`).
    Unavailable(String),
    /// Rebuilt from the state topic: its tasks wait for the replay.
    Rebuilt(Rebuilt),
}

impl Partitions {
    /// Takes partition `p` with a new epoch (see [`Partitions::own_all`]). `false` only
    /// on shutdown.
    pub(super) async fn own(&mut self, p: i32, stale: bool) -> bool {
        self.own_all(vec![(p, stale)]).await
    }

    /// Takes partitions `ps` (each with whether it is known to be `stale`) with new
    /// epochs. If Redis has nothing of a partition (or `stale`: what it has is older
    /// than the last checkpoint), it is rebuilt from the state topic and its tasks wait
    /// for the replay of the commands after the checkpoint; otherwise they start now.
    /// `false` only on shutdown.
    pub(super) async fn own_all(&mut self, ps: Vec<(i32, bool)>) -> bool {
        let taking = Instant::now();
        let mut applied_before = HashMap::new();
        for &(p, _) in &ps {
            applied_before.insert(p, self.owned.get(&p).and_then(|o| o.handled));
            if let Some(old) = self.owned.remove(&p) {
                old.stop().await;
            }
        }
        let tails: Vec<_> = ps.iter().map(|(p, _)| self.tails.remove(p)).collect();
        let takes: Vec<_> = (ps.iter().zip(tails))
            .map(|(&(p, stale), tail)| self.take(p, stale, tail))
            .collect();
        let Some(taken) = all(takes, usize::MAX).await else {
            return false;
        };
        let readies: Vec<_> = (ps.iter().zip(&taken))
            .map(|(&(p, _), t)| self.ready(p, t))
            .collect();
        let Some(readies) = all(readies, REBUILDS).await else {
            return false;
        };
        let rebuilt: Vec<i32> = (ps.iter().zip(&readies))
            .filter(|(_, r)| matches!(r, Ready::Rebuilt(_)))
            .map(|(&(p, _), _)| p)
            .collect();
        let positions = self.positions(rebuilt).await;
        let mut seeks = Vec::new();
        for ((&(p, _), t), ready) in ps.iter().zip(taken).zip(readies) {
            let before = applied_before.get(&p).copied().flatten();
            let at = positions.get(&p).copied().unwrap_or_default();
            seeks.extend(self.install(p, t, ready, (before, at), taking));
        }
        self.seek_all(seeks).await;
        true
    }

    /// What taking partition `p` reads and writes in Redis first: its state, whether it
    /// is behind the state topic, a new epoch, the drain mark. `None` only on shutdown.
    async fn take(&self, p: i32, stale: bool, tail: Option<Option<i64>>) -> Option<Taking> {
        let t = &self.tasks;
        let clock = t.trigger.clock.clone();
        let retry = || {
            Retry::new("acquire", &t.token)
                .partition(p)
                .counting(t.metrics.redis_errors.with_label_values(&["acquire"]))
        };
        let before = retry().forever(|| t.store.partition_state(p)).await?;
        let stale = self.behind_state_topic(p, &before, stale, tail).await?;
        let epoch = (retry().forever(|| t.store.acquire(p, clock.now_ms()))).await?;
        let draining = self.previous_owner_draining(p).await?;
        Some(Taking {
            before,
            stale,
            epoch,
            draining,
        })
    }

    /// Rebuilds partition `p` taken as `taken` says, if it needs it. `None` only on
    /// shutdown.
    async fn ready(&self, p: i32, taken: &Taking) -> Option<Ready> {
        if !super::super::needs_rebuild(&taken.before, taken.stale) {
            return Some(Ready::Now);
        }
        let t = &self.tasks;
        let (topic, reader) = &t.state;
        let wipe = taken.before.epoch.is_some();
        if wipe && taken.before.format != Some(crate::store::STORE_FORMAT) {
            tracing::info!(
                partition = p,
                format = ?taken.before.format,
                "redis holds the partition in an older key layout: rebuilding it"
            );
        }
        if let Some(why) = self.state_partition_missing(p).await {
            return Some(Ready::Unavailable(why));
        }
        let epoch = taken.epoch;
        let r = Retry::new("rebuild", &t.token)
            .partition(p)
            .counting(t.metrics.redis_errors.with_label_values(&["rebuild"]))
            .forever(|| rebuild(p, epoch, &t.store, reader, topic, wipe))
            .await?;
        if r.records == 0 && r.replay_from == 0 && !wipe {
            // Nothing recorded for the partition yet (a new one): not a loss to report.
            tracing::info!(
                partition = p,
                "no state recorded yet: replaying the partition's commands from the start"
            );
        } else {
            tracing::warn!(
                partition = p,
                timers = r.timers,
                records = r.records,
                replay_from = r.replay_from,
                read_ms = r.read.as_millis() as u64,
                elapsed_ms = r.elapsed.as_millis() as u64,
                "redis rebuilt from the state topic; replaying the commands after its checkpoint"
            );
            t.metrics.replays.inc();
        }
        Some(Ready::Rebuilt(r))
    }

    /// Owns partition `p`, taken and made ready: its tasks start now, or once the
    /// commands after the rebuilt checkpoint are replayed. `applied_before`: the highest
    /// offset this instance applied while it owned the partition before; `at`: where the
    /// broker has the partition ([`Partitions::positions`]). Returns where its consumer
    /// must seek to, if anywhere.
    fn install(
        &mut self,
        p: i32,
        taken: Taking,
        ready: Ready,
        (applied_before, at): (Option<i64>, Position),
        taking: Instant,
    ) -> Option<(i32, Offset)> {
        let epoch = taken.epoch;
        let mut o = Owned {
            epoch,
            handled: None,
            seek: None,
            tasks: None,
            hold_until: None,
            sequence: taken.before.checkpoint.unwrap_or(0),
            taken_ms: None,
            draining: drain::since(taken.draining),
        };
        let r = match ready {
            Ready::Now => {
                o.tasks = Some(self.tasks.start(p, epoch, o.sequence));
                // The takeover path reads a few keys, whatever the partition holds.
                let elapsed_ms = taking.elapsed().as_millis() as u64;
                o.taken_ms = Some(elapsed_ms);
                self.owned.insert(p, o);
                tracing::info!(partition = p, epoch, elapsed_ms, "partition taken: firing");
                return None;
            }
            Ready::Unavailable(why) => {
                self.set_unavailable(p, why);
                return None;
            }
            Ready::Rebuilt(r) => r,
        };
        o.sequence = r.sequence;
        // Listed ends can trail (Tansu lists the last batch's start): what this instance
        // applied before is replayed too.
        o.hold_until = (at.last)
            .max(applied_before)
            .filter(|&last| last >= r.replay_from);
        let hold = o.hold_until.is_some();
        self.owned.insert(p, o);
        if !hold {
            self.release(p);
        }
        // Commands after the group's committed offset may have been applied (and
        // checkpointed) but never answered by a previous owner: they are read again too.
        let from = at.committed.map_or(r.replay_from, |c| c.min(r.replay_from));
        Some((p, Offset::Offset(from)))
    }

    /// Where the broker has partitions `ps` of the commands topic: the last offset and
    /// the group's committed offset of each, asked off the runtime's threads (the
    /// consumer's calls block) and in one call for all the committed offsets.
    async fn positions(&self, ps: Vec<i32>) -> HashMap<i32, Position> {
        if ps.is_empty() {
            return HashMap::new();
        }
        let (consumer, topic) = (self.consumer.clone(), self.topic.clone());
        let asked = tokio::task::spawn_blocking(move || {
            let committed = committed_offsets(&*consumer, &topic, &ps);
            let last_of = |p| match consumer.fetch_watermarks(&topic, p, Duration::from_secs(5)) {
                Ok((_, high)) => (high > 0).then_some(high - 1),
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "end of the commands partition unknown");
                    None
                }
            };
            (ps.iter())
                .map(|&p| {
                    (
                        p,
                        Position {
                            last: last_of(p),
                            committed: committed.get(&p).copied(),
                        },
                    )
                })
                .collect()
        });
        asked.await.unwrap_or_default()
    }

    /// The group's committed offset of partition `p`, if it has one.
    pub(super) fn committed(&self, p: i32) -> Option<i64> {
        committed_offsets(&*self.consumer, &self.topic, &[p]).remove(&p)
    }
}

/// The group's committed offsets of partitions `ps` of `topic`, in one call (blocking);
/// a partition without one is absent.
fn committed_offsets<C: Consumer<super::IntakeContext>>(
    consumer: &C,
    topic: &str,
    ps: &[i32],
) -> HashMap<i32, i64> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for &p in ps {
        tpl.add_partition(topic, p);
    }
    let Ok(c) = consumer.committed_offsets(tpl, Duration::from_secs(5)) else {
        return HashMap::new();
    };
    (c.elements_for_topic(topic).iter())
        .filter_map(|e| match e.offset() {
            Offset::Offset(n) => Some((e.partition(), n)),
            _ => None,
        })
        .collect()
}

/// Where the broker has a partition of the commands topic.
#[derive(Debug, Clone, Copy, Default)]
struct Position {
    /// Its last offset, if it has records.
    last: Option<i64>,
    /// The group's committed offset, if any.
    committed: Option<i64>,
}

/// Runs `steps`, at most `together` at a time, in order; `None` if any gives `None`
/// (shutdown).
async fn all<T>(
    steps: Vec<impl std::future::Future<Output = Option<T>>>,
    together: usize,
) -> Option<Vec<T>> {
    let done: Vec<Option<T>> = futures::stream::iter(steps)
        .buffered(together)
        .collect()
        .await;
    done.into_iter().collect()
}
