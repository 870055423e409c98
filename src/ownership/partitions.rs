//! The partitions this instance owns, each with its epoch and tasks: taking them on
//! assignment (rebuilding Redis from the state topic when it has nothing of them),
//! dropping them on revocation. The periodic check against Redis, and replaying what
//! Redis lost before the partition fires again, are in [`check`]; a partition whose
//! state-topic partition is missing waits in [`unavailable`]; one whose previous owner
//! still has fires in its producer applies no command until they are answered
//! ([`drain`]); the state topic's last checkpoints are read in [`tail`].

mod check;
mod drain;
mod tail;
mod unavailable;

use super::tasks::{Running, Tasks};
use super::{IntakeContext, RebalanceEvent};
use crate::retry::Retry;
use crate::state::rebuild::rebuild;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::Offset;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A partition this instance owns.
pub struct Owned {
    /// The epoch this instance holds.
    epoch: i64,
    /// The highest offset handled (and marked in Redis) since this instance owns it.
    handled: Option<i64>,
    /// A seek back that librdkafka refused so far; records of the partition are skipped
    /// (not applied, not answered, offsets not stored) until it succeeds.
    seek: Option<Offset>,
    /// The trigger, migrator and checkpoint task; `None` while commands Redis lost are
    /// replayed (nothing fires before they are applied again).
    pub tasks: Option<Running>,
    /// The tasks start once the commands up to this offset are applied again.
    hold_until: Option<i64>,
    /// The last checkpoint sequence confirmed (before the tasks run).
    sequence: i64,
    /// Taken without a rebuild: ms from the assignment until the tasks started.
    taken_ms: Option<u64>,
    /// Since when its commands wait for the previous owner's producer ([`drain`]).
    draining: Option<std::time::Instant>,
}

impl Owned {
    fn ended(&self) -> bool {
        self.tasks.as_ref().is_some_and(Running::ended)
    }

    /// The oldest checkpoint Redis may hold at `now_ms` (lenient while the tasks wait).
    fn floor(&self, now_ms: i64) -> i64 {
        self.tasks
            .as_ref()
            .map_or(self.sequence - 1, |r| r.checkpoint.confirmed.floor(now_ms))
    }

    async fn stop(self) {
        if let Some(r) = self.tasks {
            r.stop().await;
        }
    }
}

/// The owned partitions of the commands topic.
pub struct Partitions {
    owned: HashMap<i32, Owned>,
    consumer: Arc<StreamConsumer<IntakeContext>>,
    topic: String,
    tasks: Tasks,
    /// The state topic's last checkpoint sequence of partitions about to be taken (read
    /// for all of an assignment at once; `None`: no checkpoint).
    tails: HashMap<i32, Option<i64>>,
    /// Partitions taken whose state-topic partition is missing.
    unavailable: HashMap<i32, unavailable::Unavailable>,
}

impl Partitions {
    /// None owned yet; `consumer` reads `topic`.
    pub fn new(
        consumer: Arc<StreamConsumer<IntakeContext>>,
        topic: &str,
        tasks: Tasks,
    ) -> Partitions {
        Partitions {
            owned: HashMap::new(),
            consumer,
            topic: topic.to_string(),
            tasks,
            tails: HashMap::new(),
            unavailable: HashMap::new(),
        }
    }

    /// The partition, if owned.
    pub fn get(&self, p: i32) -> Option<&Owned> {
        self.owned.get(&p)
    }

    /// The epoch of `p` and the highest offset applied since this instance owns it (-1
    /// for none), if its records are to be handled now (owned, no seek pending, not
    /// waiting for the previous owner's producer).
    pub fn live(&self, p: i32) -> Option<(i64, i64)> {
        self.owned
            .get(&p)
            .filter(|o| o.seek.is_none() && o.draining.is_none())
            .map(|o| (o.epoch, o.handled.unwrap_or(-1)))
    }

    /// Records that offsets up to `offset` of `p` were handled; starts the partition's
    /// tasks once a replay reached its target.
    pub fn handled(&mut self, p: i32, offset: i64) {
        if let Some(o) = self.owned.get_mut(&p) {
            o.handled = Some(offset);
            if o.hold_until.is_some_and(|h| offset >= h) {
                self.release(p);
            }
        }
    }

    /// Starts the tasks of `p` (its replay is complete).
    fn release(&mut self, p: i32) {
        let Some(o) = self.owned.get_mut(&p) else {
            return;
        };
        o.hold_until = None;
        if o.tasks.is_none() {
            tracing::info!(partition = p, handled = ?o.handled, "replay complete: firing again");
            o.tasks = Some(self.tasks.start(p, o.epoch, o.sequence));
        }
    }

    /// The owned partitions, in no order.
    pub fn ids(&self) -> Vec<i32> {
        self.owned.keys().copied().collect()
    }

    /// Applies a rebalance; `false` only on shutdown.
    pub async fn rebalance(&mut self, ev: RebalanceEvent) -> bool {
        match ev {
            RebalanceEvent::Assigned(ps) => {
                self.tasks
                    .metrics
                    .rebalances
                    .with_label_values(&["assigned"])
                    .inc();
                let ids: Vec<i32> = ps.iter().map(|&(p, _)| p).collect();
                let Some(tails) = self.read_tails(&ids).await else {
                    return false;
                };
                self.tails = tails;
                for (p, behind) in ps {
                    if !self.own(p, behind).await {
                        return false;
                    }
                }
                tracing::info!(partitions = ?self.ids(), "assigned");
            }
            RebalanceEvent::Revoked(ps) => {
                self.tasks
                    .metrics
                    .rebalances
                    .with_label_values(&["revoked"])
                    .inc();
                for p in ps {
                    self.forget_unavailable(p);
                    if let Some(o) = self.owned.remove(&p) {
                        o.stop().await;
                    }
                    self.tasks.metrics.forget_partition(&self.topic, p);
                }
                tracing::info!(partitions = ?self.ids(), "revoked");
            }
        }
        self.publish();
        true
    }

    /// Takes partition `p` with a new epoch. If Redis has nothing of it (or `stale`: what
    /// it has is older than the last checkpoint), the partition is rebuilt from the state
    /// topic and its tasks wait for the replay of the commands after the checkpoint;
    /// otherwise they start now. `false` only on shutdown.
    async fn own(&mut self, p: i32, stale: bool) -> bool {
        let taking = std::time::Instant::now();
        let applied_before = self.owned.get(&p).and_then(|o| o.handled);
        if let Some(old) = self.owned.remove(&p) {
            old.stop().await;
        }
        let tail = self.tails.remove(&p);
        let t = &self.tasks;
        let clock = t.trigger.clock.clone();
        let retry = |what| {
            Retry::new(what, &t.token)
                .partition(p)
                .counting(t.metrics.redis_errors.with_label_values(&[what]))
        };
        let Some(before) = retry("acquire")
            .forever(|| t.store.partition_state(p))
            .await
        else {
            return false;
        };
        let Some(stale) = self.behind_state_topic(p, &before, stale, tail).await else {
            return false;
        };
        let Some(epoch) = retry("acquire")
            .forever(|| t.store.acquire(p, clock.now_ms()))
            .await
        else {
            return false;
        };
        let Some(draining) = self.previous_owner_draining(p).await else {
            return false;
        };
        let mut o = Owned {
            epoch,
            handled: None,
            seek: None,
            tasks: None,
            hold_until: None,
            sequence: before.checkpoint.unwrap_or(0),
            taken_ms: None,
            draining: drain::since(draining),
        };
        if !super::needs_rebuild(&before, stale) {
            o.tasks = Some(t.start(p, epoch, o.sequence));
            // The takeover path reads a few keys, whatever the partition holds.
            let elapsed_ms = taking.elapsed().as_millis() as u64;
            o.taken_ms = Some(elapsed_ms);
            self.owned.insert(p, o);
            tracing::info!(partition = p, epoch, elapsed_ms, "partition taken: firing");
            return true;
        }
        let (topic, reader) = &t.state;
        let wipe = before.epoch.is_some();
        if wipe && before.format != Some(crate::store::STORE_FORMAT) {
            tracing::info!(
                partition = p,
                format = ?before.format,
                "redis holds the partition in an older key layout: rebuilding it"
            );
        }
        if let Some(why) = self.state_partition_missing(p).await {
            self.set_unavailable(p, why);
            return true;
        }
        let rebuilt = retry("rebuild")
            .forever(|| rebuild(p, epoch, &t.store, reader, topic, wipe))
            .await;
        let Some(r) = rebuilt else {
            return false;
        };
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
        o.sequence = r.sequence;
        // Listed ends can trail (Tansu lists the last batch's start): what this instance
        // applied before is replayed too.
        o.hold_until = self
            .end_of(p)
            .max(applied_before)
            .filter(|&last| last >= r.replay_from);
        let hold = o.hold_until.is_some();
        self.owned.insert(p, o);
        // Commands after the group's committed offset may have been applied (and
        // checkpointed) but never answered by a previous owner: they are read again too.
        let from = self
            .committed(p)
            .map_or(r.replay_from, |c| c.min(r.replay_from));
        self.seek(p, Offset::Offset(from));
        if !hold {
            self.release(p);
        }
        true
    }

    /// The group's committed offset of partition `p`, if it has one.
    fn committed(&self, p: i32) -> Option<i64> {
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition(&self.topic, p);
        let c = self
            .consumer
            .committed_offsets(tpl, Duration::from_secs(5))
            .ok()?;
        match c.find_partition(&self.topic, p)?.offset() {
            Offset::Offset(n) => Some(n),
            _ => None,
        }
    }

    /// The last offset of partition `p` of the commands topic, if it has records.
    fn end_of(&self, p: i32) -> Option<i64> {
        match self
            .consumer
            .fetch_watermarks(&self.topic, p, Duration::from_secs(5))
        {
            Ok((_, high)) => (high > 0).then_some(high - 1),
            Err(e) => {
                tracing::warn!(partition = p, error = %e, "end of the commands partition unknown");
                None
            }
        }
    }

    /// Publishes the owned partitions (metrics, status).
    pub fn publish(&self) {
        let t = &self.tasks;
        t.metrics
            .owned_partitions
            .with_label_values(&[&self.topic])
            .set(self.owned.len() as i64);
        self.gauge_waiting();
        self.gauge_triggers();
        let mut parts = self.ids();
        parts.sort_unstable();
        let taken = self
            .owned
            .iter()
            .filter_map(|(p, o)| Some((*p, o.taken_ms?)));
        let taken_ms = taken.collect();
        let topic = self.topic.clone();
        t.status.send_modify(|s| {
            s.lanes.insert(topic, parts.clone());
            if t.shared {
                s.joined = true;
                s.owned = parts;
                s.taken_ms = taken_ms;
            }
        });
    }

    /// Sets `trigger_alive` of every owned partition: 1 while its trigger runs.
    pub fn gauge_triggers(&self) {
        for (p, o) in &self.owned {
            let alive = o.tasks.as_ref().is_some_and(|t| !t.trigger.is_finished());
            let l = crate::metrics::slot(&self.topic, *p);
            let g = self.tasks.metrics.trigger_alive.with_label_values(&l);
            g.set(alive as i64);
        }
    }

    /// Stops every partition's tasks (shutdown).
    pub async fn stop_all(&mut self) {
        for (_, o) in self.owned.drain() {
            o.stop().await;
        }
        self.publish();
    }
}
