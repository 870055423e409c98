//! Partition ownership: assignment, fencing epochs and detecting that Redis lost data.
//!
//! Kafka decides which instance owns a commands-topic partition; Redis holds, per
//! partition, the owner's epoch and the highest command offset handled. Two checks keep
//! them consistent:
//!
//! * **On assignment** (inside librdkafka's rebalance callback, before fetching starts):
//!   if Redis's handled offset is behind the group's committed offset, Redis lost writes
//!   (restart without persistence, a failover that dropped the last second), so the
//!   partition is assigned at the first offset Redis lacks and those commands are
//!   replayed. Applying is idempotent, so replaying what Redis still has is harmless.
//! * **While owned** (every second, and whenever a script answers "fenced"): the epoch
//!   and handled offset are read back. A higher epoch means another instance took the
//!   partition: stop. A missing or lower epoch, or a handled offset behind what this
//!   instance handled, means Redis lost data under us: take a new epoch, restart the
//!   trigger and seek back to replay.
//!
//! Files: `context` (the consumer's rebalance callback), [`partitions`] (the owned
//! partitions with their trigger and migrator: own, check, seek, stop); this file keeps
//! the pure decisions.

mod context;
pub mod partitions;

pub use context::{context, IntakeContext, RebalanceEvent};
pub use partitions::{Owned, Partitions};

use crate::store::PartitionState;
use rdkafka::Offset;

/// Where to start consuming when Redis handled up to `handled` and the group committed
/// `next` (the next offset to read); `None` when Redis is not behind.
pub fn replay_from(handled: Option<i64>, next: i64) -> Option<Offset> {
    match handled {
        None if next > 0 => Some(Offset::Beginning),
        Some(h) if h + 1 < next => Some(Offset::Offset(h + 1)),
        _ => None,
    }
}

/// What the periodic check concluded about an owned partition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Redis agrees with this instance.
    Held,
    /// The epoch is ours but Redis lost commands handled since: seek back to this offset.
    Behind(Offset),
    /// Redis lost the partition's epoch (emptied or restored from older data): take a new
    /// epoch, restart the trigger, and seek back to this offset.
    Lost(Offset),
    /// Another instance took the partition.
    Fenced,
}

/// Compares what Redis holds with this instance's epoch `ours` and the highest offset it
/// handled since it owns the partition.
pub fn verdict(ours: i64, handled: Option<i64>, redis: PartitionState) -> Verdict {
    let from = redis
        .applied
        .map_or(Offset::Beginning, |a| Offset::Offset(a + 1));
    match redis.epoch {
        Some(e) if e > ours => Verdict::Fenced,
        Some(e) if e == ours => match (handled, redis.applied) {
            (Some(h), a) if a.is_none_or(|a| a < h) => Verdict::Behind(from),
            _ => Verdict::Held,
        },
        _ => Verdict::Lost(from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(epoch: Option<i64>, applied: Option<i64>) -> PartitionState {
        PartitionState { epoch, applied }
    }

    #[test]
    fn replay_starts_after_what_redis_has() {
        assert_eq!(replay_from(Some(9), 10), None);
        assert_eq!(replay_from(Some(9), 8), None);
        assert_eq!(replay_from(Some(4), 10), Some(Offset::Offset(5)));
        assert_eq!(replay_from(None, 10), Some(Offset::Beginning));
        assert_eq!(replay_from(None, 0), None);
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(5, Some(9), state(Some(5), Some(9))), Verdict::Held);
        assert_eq!(verdict(5, None, state(Some(5), None)), Verdict::Held);
        assert_eq!(
            verdict(5, Some(9), state(Some(6), Some(9))),
            Verdict::Fenced
        );
        assert_eq!(
            verdict(5, Some(9), state(Some(5), Some(7))),
            Verdict::Behind(Offset::Offset(8))
        );
        assert_eq!(
            verdict(5, Some(9), state(None, None)),
            Verdict::Lost(Offset::Beginning)
        );
        assert_eq!(
            verdict(5, Some(9), state(Some(1), Some(3))),
            Verdict::Lost(Offset::Offset(4))
        );
    }
}
