//! Partition ownership: assignment, fencing epochs and detecting that Redis lost data.
//!
//! Kafka decides which instance owns a commands-topic partition; Redis holds, per
//! partition, the owner's epoch, the highest command offset handled and the last
//! checkpoint confirmed in the state topic ([`crate::state`]). Three checks keep them
//! consistent:
//!
//! * **On assignment**: if Redis has nothing of the partition (emptied, or never used),
//!   or its handled offset is behind the group's committed offset (checked in
//!   librdkafka's rebalance callback: a restart from older data while the partition
//!   moved), it is wiped and rebuilt from the state topic, and the commands after the
//!   checkpoint are replayed before it fires.
//! * **On every apply**: the scripts refuse a batch when Redis's applied offset is below
//!   what this owner applied before (Redis lost writes since): the check below runs.
//! * **While owned** (every second, and whenever a script refuses): a higher epoch means
//!   another instance took the partition: stop. A missing or lower epoch, or a checkpoint
//!   older than the last but one, means Redis lost the partition: rebuild it. A handled
//!   offset behind this instance's means Redis lost commands: stop firing, seek back,
//!   replay them, fire again. Applying is idempotent (versions are offsets), so replaying
//!   what Redis still has is harmless.
//!
//! An instance that cannot reach Redis gives its partitions up to the group ([`cut`]).
//!
//! Files: `context` (the consumer's rebalance callback), [`cut`] (the Redis probe),
//! [`partitions`] (the owned
//! partitions: own, rebuild, stop; `partitions/check.rs`: the periodic check, hold, seek),
//! [`tasks`] (what runs per owned partition); this file keeps the pure decisions.

mod context;
pub mod cut;
pub mod partitions;
pub mod tasks;

pub use context::{context, IntakeContext, RebalanceEvent};
pub use partitions::{Owned, Partitions, Survey};
pub use tasks::{Running, Tasks};

use crate::store::{PartitionState, STORE_FORMAT};
use rdkafka::Offset;

/// The first command Redis lacks when it handled up to `handled` and the group committed
/// `next` (the next offset to read); `None` when Redis is not behind, or has nothing of
/// the partition. A partition with `Some` is rebuilt at assignment.
pub fn replay_from(handled: Option<i64>, next: i64) -> Option<Offset> {
    match handled {
        Some(h) if h + 1 < next => Some(Offset::Offset(h + 1)),
        _ => None,
    }
}

/// What the periodic check concluded about an owned partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Redis agrees with this instance.
    Held,
    /// The epoch is ours but Redis lost commands handled since: hold the partition's
    /// tasks and seek back to this offset.
    Behind(Offset),
    /// Redis lost the partition's epoch (emptied or restored from older data), or holds
    /// a checkpoint older than the floor: rebuild it from the state topic.
    Lost,
    /// Another instance took the partition.
    Fenced,
}

/// Whether a partition taken when Redis held `before` of it must first be rebuilt from
/// the state topic: Redis has nothing of it, holds `stale` data (older than the last
/// checkpoint), or keys of another layout version ([`STORE_FORMAT`]: an upgrade).
pub fn needs_rebuild(before: &PartitionState, stale: bool) -> bool {
    before.epoch.is_none() || stale || before.format != Some(STORE_FORMAT)
}

/// Compares what Redis holds with this instance's epoch `ours`, the highest offset it
/// handled since it owns the partition, and the oldest checkpoint Redis may hold
/// (`floor`, see [`crate::state::checkpoint::Confirmed::floor`]).
pub fn verdict(ours: i64, handled: Option<i64>, floor: i64, redis: PartitionState) -> Verdict {
    let from = redis
        .applied
        .map_or(Offset::Beginning, |a| Offset::Offset(a + 1));
    match redis.epoch {
        Some(e) if e > ours => Verdict::Fenced,
        Some(e) if e == ours && redis.checkpoint.unwrap_or(0) < floor => Verdict::Lost,
        Some(e) if e == ours => match (handled, redis.applied) {
            (Some(h), a) if a.is_none_or(|a| a < h) => Verdict::Behind(from),
            _ => Verdict::Held,
        },
        _ => Verdict::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(epoch: Option<i64>, applied: Option<i64>) -> PartitionState {
        PartitionState {
            epoch,
            applied,
            checkpoint: Some(7),
            format: Some(STORE_FORMAT),
        }
    }

    #[test]
    fn a_partition_is_rebuilt_when_redis_has_nothing_stale_data_or_another_layout() {
        assert!(!needs_rebuild(&state(Some(5), Some(9)), false));
        assert!(needs_rebuild(&state(Some(5), Some(9)), true));
        assert!(needs_rebuild(&state(None, None), false));
        let before_version_2 = PartitionState {
            format: None,
            ..state(Some(5), Some(9))
        };
        assert!(needs_rebuild(&before_version_2, false));
        // The layout before this one.
        let previous = PartitionState {
            format: Some(STORE_FORMAT - 1),
            ..state(Some(5), Some(9))
        };
        assert!(needs_rebuild(&previous, false));
    }

    #[test]
    fn replay_starts_after_what_redis_has() {
        assert_eq!(replay_from(Some(9), 10), None);
        assert_eq!(replay_from(Some(9), 8), None);
        assert_eq!(replay_from(Some(4), 10), Some(Offset::Offset(5)));
        assert_eq!(replay_from(None, 10), None);
        assert_eq!(replay_from(None, 0), None);
    }

    #[test]
    fn verdicts() {
        let v = |handled, st| verdict(5, handled, 6, st);
        assert_eq!(v(Some(9), state(Some(5), Some(9))), Verdict::Held);
        assert_eq!(v(None, state(Some(5), None)), Verdict::Held);
        assert_eq!(v(Some(9), state(Some(6), Some(9))), Verdict::Fenced);
        assert_eq!(
            v(Some(9), state(Some(5), Some(7))),
            Verdict::Behind(Offset::Offset(8))
        );
        assert_eq!(v(Some(9), state(None, None)), Verdict::Lost);
        assert_eq!(v(Some(9), state(Some(1), Some(3))), Verdict::Lost);
        // Redis back from data older than the last checkpoint but one.
        let old = PartitionState {
            checkpoint: Some(5),
            ..state(Some(5), Some(9))
        };
        assert_eq!(v(Some(9), old), Verdict::Lost);
        let recent = PartitionState {
            checkpoint: Some(6),
            ..state(Some(5), Some(9))
        };
        assert_eq!(v(Some(9), recent), Verdict::Held);
    }
}
