//! The state topic's last checkpoint of partitions about to be taken, against what Redis
//! holds of them.

use super::Partitions;
use crate::retry::Retry;
use crate::state::tail::last_checkpoints;
use std::collections::HashMap;

impl Partitions {
    /// The state topic's last checkpoint sequence of each of `ps` (`None`: it has none),
    /// read at once. `None` only on shutdown.
    pub(super) async fn read_tails(&self, ps: &[i32]) -> Option<HashMap<i32, Option<i64>>> {
        let (topic, reader) = &self.tasks.state;
        let found = Retry::new("state tail", &self.tasks.token)
            .forever(|| last_checkpoints(reader, topic, ps))
            .await?;
        Some(
            ps.iter()
                .map(|&p| (p, found.get(&p).map(|c| c.sequence)))
                .collect(),
        )
    }

    /// Whether Redis, holding `before` of partition `p`, must be rebuilt: `stale`
    /// already, or its checkpoint sequence is older than the state topic's last (`tail`,
    /// if read already): Redis restarted from an older snapshot; without a rebuild every
    /// fire acknowledged since would fire again. `None` only on shutdown.
    pub(super) async fn behind_state_topic(
        &self,
        p: i32,
        before: &crate::store::PartitionState,
        stale: bool,
        tail: Option<Option<i64>>,
    ) -> Option<bool> {
        if stale || before.epoch.is_none() {
            return Some(stale);
        }
        let last = match tail {
            Some(last) => last,
            None => self.read_tails(&[p]).await?.remove(&p).flatten(),
        };
        let redis = before.checkpoint.unwrap_or(0);
        // One behind is trusted: the last checkpoint's delivery report may have been lost
        // (a broker outage, a crash before Redis confirmed it), and what an older snapshot
        // one checkpoint back could refire is the documented bound (one interval of fires).
        let behind = last.is_some_and(|s| s > redis + 1);
        if behind {
            tracing::warn!(
                partition = p,
                redis,
                state_topic = ?last,
                "redis holds an older checkpoint than the state topic (back from an older \
                 snapshot): rebuilding the partition"
            );
        }
        Some(behind)
    }
}
