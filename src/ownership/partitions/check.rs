//! The periodic check of the owned partitions against Redis (fenced, behind, lost), and
//! holding a partition's tasks while the commands Redis lost are replayed.

use super::Partitions;
use crate::ownership::{verdict, Verdict};
use rdkafka::consumer::Consumer;
use rdkafka::Offset;
use std::time::Duration;

/// How long the check waits for one partition's state: a check is skipped, never waited
/// for, so the intake stays free to give its partitions up when Redis is cut off.
const CHECK_READ: Duration = Duration::from_secs(1);

impl Partitions {
    /// Checks that Redis still holds what this instance wrote for `parts`: drops the
    /// partitions another instance took, replays from Kafka what Redis lost, rebuilds
    /// what it lost entirely, restarts tasks that ended. Returns the partitions found as
    /// this instance left them.
    pub async fn check(&mut self, parts: &[i32]) -> Vec<i32> {
        let mut changed = false;
        let mut held = Vec::new();
        if !self.retry_unavailable().await {
            return held;
        }
        for &p in parts {
            if self.still_draining(p).await {
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
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            let now = self.tasks.trigger.clock.now_ms();
            let (epoch, handled, floor) = (o.epoch, o.handled, o.floor(now));
            let read = self.tasks.store.partition_state(p);
            let state = match tokio::time::timeout(CHECK_READ, read).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(partition = p, error = %e, "ownership check skipped");
                    continue;
                }
                // Redis does not answer: the rest would wait too (the probe handles a cut).
                Err(_) => break,
            };
            match verdict(epoch, handled, floor, state) {
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
                    tracing::warn!(partition = p, ?handled, redis = ?state.applied, floor,
                        checkpoint = ?state.checkpoint,
                        "redis lost commands it had applied: replaying them before firing again");
                    self.tasks.metrics.replays.inc();
                    self.hold(p, handled).await;
                    self.seek(p, to);
                }
                Verdict::Lost => {
                    tracing::warn!(partition = p, ?state, floor,
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
}
