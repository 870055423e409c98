//! Partitions taken but unusable: their state-topic partition is missing (the state
//! topic deleted, or partitions added to the commands topic and not to the state topic),
//! so Redis cannot be rebuilt for them. Such a partition holds only itself: its records
//! are read but neither applied nor committed (the next owner, or this instance once the
//! state partition exists, reads them again), while the others go on. It is retried
//! every [`RETRY_EVERY`]; `ktimer_partitions_unavailable` counts them.

use super::Partitions;
use std::time::{Duration, Instant};

/// How often an unavailable partition is tried again.
const RETRY_EVERY: Duration = Duration::from_secs(10);

/// Why a taken partition cannot be used, and when to try it again.
#[derive(Debug)]
pub(super) struct Unavailable {
    reason: String,
    retry_at: Instant,
}

impl Unavailable {
    /// Whether it is to be tried again at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.retry_at <= now
    }
}

impl Partitions {
    /// Why partition `p` of the state topic cannot be read, if it is missing; `None`
    /// when it exists, or when the broker cannot say now (the rebuild retries that).
    pub(super) async fn state_partition_missing(&self, p: i32) -> Option<String> {
        let (c, topic) = (self.consumer.clone(), self.tasks.state.0.clone());
        let t = topic.clone();
        let count = tokio::task::spawn_blocking(move || crate::topics::partition_count(&*c, &t))
            .await
            .ok()?
            .ok()?;
        (count <= p).then(|| match count {
            0 => format!("the state topic {topic:?} does not exist"),
            n => format!("the state topic {topic:?} has {n} partitions, none for partition {p}"),
        })
    }

    /// Marks `p` unavailable for `reason` (its records are not applied until it is not).
    pub(super) fn set_unavailable(&mut self, p: i32, reason: String) {
        tracing::error!(partition = p, %reason,
            "partition unavailable: Redis cannot be rebuilt for it; the other partitions go on. \
             Create the missing state topic or partitions (`ktimer topics apply`, the same \
             partition count as the commands topic); it is retried every 10 s");
        self.owned.remove(&p);
        let retry_at = Instant::now() + RETRY_EVERY;
        self.unavailable.insert(p, Unavailable { reason, retry_at });
        self.gauge_unavailable();
    }

    /// Forgets `p` (revoked, or taken after all).
    pub(super) fn forget_unavailable(&mut self, p: i32) {
        if self.unavailable.remove(&p).is_some() {
            self.gauge_unavailable();
        }
    }

    /// Takes again the unavailable partitions whose retry time came; `false` only on
    /// shutdown.
    pub(super) async fn retry_unavailable(&mut self) -> bool {
        let now = Instant::now();
        let due: Vec<i32> = (self.unavailable.iter())
            .filter(|(_, u)| u.due(now))
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            if let Some(why) = self.state_partition_missing(p).await {
                let u = self.unavailable.get_mut(&p).expect("listed");
                u.retry_at = Instant::now() + RETRY_EVERY;
                tracing::debug!(partition = p, reason = %why, was = %u.reason, "still unavailable");
                continue;
            }
            self.forget_unavailable(p);
            tracing::info!(
                partition = p,
                "state partition found: taking the partition again"
            );
            if !self.own(p, true).await {
                return false;
            }
            self.publish();
        }
        true
    }

    fn gauge_unavailable(&self) {
        let n = self.unavailable.len() as i64;
        self.tasks
            .metrics
            .partitions_unavailable
            .with_label_values(&[&self.topic])
            .set(n);
    }
}
