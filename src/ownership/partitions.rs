//! The partitions this instance owns, each with its epoch, trigger and migrator: taking
//! them on assignment, dropping them on revocation, the periodic check against Redis, and
//! seeking back to replay what Redis lost.

use super::{verdict, IntakeContext, RebalanceEvent, Verdict};
use crate::metrics::Metrics;
use crate::migrator::{self, MigratorConfig, MigratorHandle};
use crate::retry::Retry;
use crate::shutdown::CancellationToken;
use crate::sink::Sink;
use crate::status::StatusTx;
use crate::store::Store;
use crate::trigger::{self, TriggerConfig, TriggerHandle};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::Offset;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A partition this instance owns: its epoch, trigger and migrator.
pub struct Owned {
    /// The epoch this instance holds.
    epoch: i64,
    /// The highest offset handled (and marked in Redis) since this instance owns it.
    handled: Option<i64>,
    /// A seek back that librdkafka refused so far; records of the partition are skipped
    /// (not applied, not answered, offsets not stored) until it succeeds.
    seek: Option<Offset>,
    /// The partition's trigger.
    pub trigger: TriggerHandle,
    /// The partition's migrator.
    pub migrator: MigratorHandle,
}

impl Owned {
    /// Whether the trigger's or the migrator's task ended while the partition is owned.
    fn ended(&self) -> bool {
        self.trigger.is_finished() || self.migrator.is_finished()
    }

    async fn stop(self) {
        self.migrator.stop().await;
        self.trigger.stop().await;
    }
}

/// What taking a partition needs.
pub struct Tasks {
    /// Redis.
    pub store: Store,
    /// Redis for the triggers: their own connection, so a large intake pipeline never
    /// delays a claim.
    pub trigger_store: Store,
    /// The producer.
    pub sink: Arc<Sink>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Trigger tuning.
    pub trigger: TriggerConfig,
    /// Migrator tuning.
    pub migrator: MigratorConfig,
    /// Shutdown; every task gets a child.
    pub token: CancellationToken,
    /// Where the owned partitions are published.
    pub status: StatusTx,
}

/// The owned partitions of the commands topic.
pub struct Partitions {
    owned: HashMap<i32, Owned>,
    consumer: Arc<StreamConsumer<IntakeContext>>,
    topic: String,
    tasks: Tasks,
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
        }
    }

    /// The partition, if owned.
    pub fn get(&self, p: i32) -> Option<&Owned> {
        self.owned.get(&p)
    }

    /// The epoch of `p` if its records are to be handled now (owned, no seek pending).
    pub fn live(&self, p: i32) -> Option<i64> {
        self.owned
            .get(&p)
            .filter(|o| o.seek.is_none())
            .map(|o| o.epoch)
    }

    /// Records that offsets up to `offset` of `p` were handled.
    pub fn handled(&mut self, p: i32, offset: i64) {
        if let Some(o) = self.owned.get_mut(&p) {
            o.handled = Some(offset);
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
                for p in ps {
                    if !self.own(p).await {
                        return false;
                    }
                }
                tracing::info!(partitions = ?self.ids(), "assigned");
            }
            RebalanceEvent::Revoked(ps) => {
                for p in ps {
                    if let Some(o) = self.owned.remove(&p) {
                        o.stop().await;
                    }
                }
                tracing::info!(partitions = ?self.ids(), "revoked");
            }
        }
        self.publish();
        true
    }

    /// Takes partition `p`: a new epoch, a trigger and a migrator (replacing old ones).
    /// `false` only on shutdown.
    async fn own(&mut self, p: i32) -> bool {
        if let Some(old) = self.owned.remove(&p) {
            old.stop().await;
        }
        let t = &self.tasks;
        let clock = t.trigger.clock;
        let retry = Retry::new("acquire", &t.token)
            .partition(p)
            .counting(t.metrics.redis_errors.with_label_values(&["acquire"]));
        let Some(epoch) = retry.forever(|| t.store.acquire(p, clock.now_ms())).await else {
            return false;
        };
        let (store, token) = (t.store.clone(), &t.token);
        let trigger = trigger::spawn(
            p,
            epoch,
            t.trigger_store.clone(),
            t.sink.clone(),
            &t.metrics,
            t.trigger.clone(),
            token.child_token(),
        );
        let wake = trigger.wake.clone();
        let on_due = Box::new(move |due| wake.due(due));
        let migrator = migrator::spawn(
            p,
            epoch,
            store,
            t.migrator,
            on_due,
            &t.metrics,
            token.child_token(),
        );
        let o = Owned {
            epoch,
            handled: None,
            seek: None,
            trigger,
            migrator,
        };
        self.owned.insert(p, o);
        true
    }

    /// Publishes the owned partitions (metrics, status).
    pub fn publish(&self) {
        let t = &self.tasks;
        t.metrics.owned_partitions.set(self.owned.len() as i64);
        let mut parts = self.ids();
        parts.sort_unstable();
        t.status.send_modify(|s| {
            s.joined = true;
            s.owned = parts;
        });
    }

    /// Checks that Redis still holds what this instance wrote for `parts`: drops the
    /// partitions another instance took, and replays from Kafka where Redis lost data.
    /// Returns the partitions found as this instance left them.
    pub async fn check(&mut self, parts: &[i32]) -> Vec<i32> {
        let mut changed = false;
        let mut held = Vec::new();
        for &p in parts {
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            if let Some(to) = o.seek {
                self.seek(p, to);
                continue;
            }
            let (epoch, handled) = (o.epoch, o.handled);
            let state = match self.tasks.store.partition_state(p).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(partition = p, error = %e, "ownership check skipped");
                    continue;
                }
            };
            match verdict(epoch, handled, state) {
                Verdict::Held if o.ended() && !self.tasks.token.is_cancelled() => {
                    // Only a fence ends them otherwise; Redis says the epoch is still ours.
                    tracing::error!(
                        partition = p,
                        "the trigger or migrator ended; restarting both"
                    );
                    self.tasks.metrics.task_restarts.inc();
                    if !self.own(p).await {
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
                    changed = true;
                }
                Verdict::Behind(to) => {
                    tracing::warn!(partition = p, ?handled, redis = ?state.applied,
                        "redis lost commands it had applied: replaying them");
                    self.tasks.metrics.replays.inc();
                    self.seek(p, to);
                }
                Verdict::Lost(to) => {
                    tracing::warn!(partition = p, ?state,
                        "redis lost the partition (emptied or restored): new epoch, replaying commands");
                    self.tasks.metrics.replays.inc();
                    if !self.own(p).await {
                        return held;
                    }
                    self.seek(p, to);
                    changed = true;
                }
            }
        }
        if changed {
            self.publish();
        }
        held
    }

    /// Moves the consumer of `p` back to `to`; if librdkafka refuses for now, records of
    /// `p` are skipped until a later check succeeds.
    pub fn seek(&mut self, p: i32, to: Offset) {
        let Some(o) = self.owned.get_mut(&p) else {
            return;
        };
        match self
            .consumer
            .seek(&self.topic, p, to, Duration::from_secs(5))
        {
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

    /// Stops every trigger and migrator (shutdown).
    pub async fn stop_all(&mut self) {
        for (_, o) in self.owned.drain() {
            o.stop().await;
        }
        self.publish();
    }
}
