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

use crate::store::{PartitionState, Store};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::time::Duration;
use tokio::sync::mpsc;

/// A change of this instance's partitions, reported by the consumer's rebalance callback.
#[derive(Debug)]
pub enum RebalanceEvent {
    /// These partitions are now ours.
    Assigned(Vec<i32>),
    /// These partitions are no longer ours.
    Revoked(Vec<i32>),
}

/// Consumer context: checks Redis against the committed offsets on assignment and
/// forwards rebalances to the intake loop.
pub struct IntakeContext {
    tx: mpsc::UnboundedSender<RebalanceEvent>,
    store: Store,
    topic: String,
}

/// Creates the consumer context and the receiver of its rebalance events.
pub fn context(
    store: Store,
    topic: &str,
) -> (IntakeContext, mpsc::UnboundedReceiver<RebalanceEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let ctx = IntakeContext {
        tx,
        store,
        topic: topic.to_string(),
    };
    (ctx, rx)
}

impl ClientContext for IntakeContext {}

impl ConsumerContext for IntakeContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let parts = partitions(tpl);
        let (res, ev) = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.set_replay_offsets(consumer, tpl);
                let res = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                (res, RebalanceEvent::Assigned(parts))
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let res = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                (res, RebalanceEvent::Revoked(parts))
            }
            other => {
                tracing::warn!(error = ?other, "rebalance error");
                return;
            }
        };
        if let Err(e) = res {
            tracing::error!(error = %e, event = ?ev, "applying the assignment failed");
        }
        let _ = self.tx.send(ev);
    }
}

impl IntakeContext {
    /// Sets the start offset of every assigned partition whose Redis state is behind the
    /// group's committed offset to the first offset Redis lacks. If Redis cannot be read
    /// now, the intake's periodic check catches up later.
    fn set_replay_offsets(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let parts = partitions(tpl);
        let committed = match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "committed offsets unknown; Redis not checked against them");
                return;
            }
        };
        let applied = match self
            .store
            .applied_offsets_blocking(&parts, Duration::from_secs(2))
        {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "redis not readable during the rebalance; checked later");
                return;
            }
        };
        for (p, handled) in parts.into_iter().zip(applied) {
            let next = committed.find_partition(&self.topic, p).map(|e| e.offset());
            let Some(Offset::Offset(next)) = next else {
                continue;
            };
            if let Some(from) = replay_from(handled, next) {
                tracing::warn!(partition = p, ?handled, committed = next, from = ?from,
                    "redis is behind the committed offset (it lost data): replaying commands");
                if let Err(e) = tpl.set_partition_offset(&self.topic, p, from) {
                    tracing::error!(partition = p, error = %e, "cannot set the replay offset");
                }
            }
        }
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

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
