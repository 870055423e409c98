//! The commands consumer's context: checks Redis against the committed offsets on
//! assignment and forwards rebalances to the intake loop.

use super::replay_from;
use crate::metrics::Metrics;
use crate::store::Store;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A change of this instance's partitions, reported by the consumer's rebalance callback.
#[derive(Debug)]
pub enum RebalanceEvent {
    /// These partitions are now ours; `true` for those whose Redis data is behind the
    /// group's committed offset (Redis lost writes: they are rebuilt, not trusted).
    Assigned(Vec<(i32, bool)>),
    /// These partitions are no longer ours.
    Revoked(Vec<i32>),
}

/// Consumer context: checks Redis against the committed offsets on assignment and
/// forwards rebalances to the intake loop.
pub struct IntakeContext {
    tx: mpsc::UnboundedSender<RebalanceEvent>,
    store: Store,
    topic: String,
    metrics: Arc<Metrics>,
}

/// Creates the consumer context and the receiver of its rebalance events.
pub fn context(
    store: Store,
    topic: &str,
    metrics: Arc<Metrics>,
) -> (IntakeContext, mpsc::UnboundedReceiver<RebalanceEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let ctx = IntakeContext {
        tx,
        store,
        topic: topic.to_string(),
        metrics,
    };
    (ctx, rx)
}

impl ClientContext for IntakeContext {
    /// librdkafka's statistics (every `statistics.interval.ms`): the consumer lag of each
    /// assigned commands-topic partition.
    fn stats(&self, stats: Statistics) {
        let Some(topic) = stats.topics.get(&self.topic) else {
            return;
        };
        for (p, s) in &topic.partitions {
            if *p < 0 {
                continue;
            }
            let lag = (self.metrics.consumer_lag)
                .with_label_values(&crate::metrics::slot(&self.topic, *p));
            if s.consumer_lag >= 0 {
                lag.set(s.consumer_lag);
            }
        }
    }
}

impl ConsumerContext for IntakeContext {
    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, _: &TopicPartitionList) {
        if let Err(e) = result {
            self.metrics
                .kafka_errors
                .with_label_values(&["commit"])
                .inc();
            tracing::debug!(error = %e, "offset commit failed");
        }
    }

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
                let behind = self.behind_committed(consumer, tpl);
                let parts = parts
                    .into_iter()
                    .map(|p| (p, behind.contains(&p)))
                    .collect();
                let res = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                (res, RebalanceEvent::Assigned(parts))
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                for p in &parts {
                    let l = crate::metrics::slot(&self.topic, *p);
                    let _ = self.metrics.consumer_lag.remove_label_values(&l);
                }
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
    /// The assigned partitions whose Redis state is behind the group's committed offset
    /// (they are rebuilt, and the rebuild says where to read from). If Redis cannot be
    /// read now, the intake's periodic check catches up later.
    fn behind_committed(
        &self,
        consumer: &BaseConsumer<Self>,
        tpl: &TopicPartitionList,
    ) -> Vec<i32> {
        let mut behind = Vec::new();
        let parts = partitions(tpl);
        let committed = match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "committed offsets unknown; Redis not checked against them");
                return behind;
            }
        };
        let applied = match self
            .store
            .applied_offsets_blocking(&parts, Duration::from_secs(2))
        {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "redis not readable during the rebalance; checked later");
                return behind;
            }
        };
        for (p, handled) in parts.into_iter().zip(applied) {
            let next = committed.find_partition(&self.topic, p).map(|e| e.offset());
            let Some(Offset::Offset(next)) = next else {
                continue;
            };
            if let Some(from) = replay_from(handled, next) {
                tracing::warn!(partition = p, ?handled, committed = next, from = ?from,
                    "redis is behind the committed offset (it lost data): rebuilding the partition");
                behind.push(p);
            }
        }
        behind
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}
