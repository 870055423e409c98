//! The partitions this instance owns, each with its epoch and tasks: taking them on
//! assignment (rebuilding Redis from the state topic when it has nothing of them),
//! dropping them on revocation. The periodic check against Redis, and replaying what
//! Redis lost before the partition fires again, are in [`check`]; a partition whose
//! state-topic partition is missing waits in [`unavailable`]; one whose previous owner
//! still has fires in its producer applies no command until they are answered
//! ([`drain`]); the state topic's last checkpoints are read in [`tail`]; taking
//! partitions, all of an assignment at once, is in [`take`].

mod check;
mod drain;
mod tail;
mod take;
mod unavailable;

pub use check::Survey;

use super::tasks::{Running, Tasks};
use super::{IntakeContext, RebalanceEvent};
use rdkafka::consumer::StreamConsumer;
use rdkafka::Offset;
use std::collections::HashMap;
use std::sync::Arc;

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
                let taking = std::time::Instant::now();
                let ids: Vec<i32> = ps.iter().map(|&(p, _)| p).collect();
                let Some(tails) = self.read_tails(&ids).await else {
                    return false;
                };
                self.tails = tails;
                if !self.own_all(ps).await {
                    return false;
                }
                let took = taking.elapsed();
                self.tasks.metrics.takeover.observe(took.as_secs_f64());
                let elapsed_ms = took.as_millis() as u64;
                tracing::info!(partitions = ?self.ids(), elapsed_ms, "assigned");
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
