//! Reading state partitions from an offset to their end: the rebuild reads one from its
//! start, an owner taking partitions reads their last records back (`tail`).

use super::StateError;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::ClientContext;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The longest the state topic may send nothing before a read fails (and is retried).
const STALL: Duration = Duration::from_secs(30);

/// A consumer for [`scan`], of configuration `reader`.
pub fn scanner(reader: &ClientConfig) -> Result<BaseConsumer<EndIsNoError>, StateError> {
    Ok(reader
        .clone()
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .create_with_context(EndIsNoError)?)
}

/// Hands every record of the partitions of `topic` in `from` (partition, first offset),
/// each from its offset to its end, to `each` (partition, key, value); returns how many
/// (blocking). The end is where the broker says a partition ends while fetching (partition
/// EOF), not the listed high watermark: Tansu 0.6 lists the last batch's base offset there.
pub fn scan(
    consumer: &BaseConsumer<EndIsNoError>,
    topic: &str,
    from: &[(i32, i64)],
    mut each: impl FnMut(i32, Option<&[u8]>, Option<&[u8]>) -> Result<(), StateError>,
) -> Result<u64, StateError> {
    let mut tpl = TopicPartitionList::new();
    for &(p, offset) in from {
        // An offset, reset to the earliest if compaction removed it: Offset::Beginning
        // costs an offset look-up first (half a second on Tansu).
        tpl.add_partition_offset(topic, p, Offset::Offset(offset))?;
    }
    consumer.assign(&tpl)?;
    let mut open: HashSet<i32> = from.iter().map(|&(p, _)| p).collect();
    let mut records = 0;
    let mut quiet = Instant::now();
    while !open.is_empty() {
        let Some(m) = consumer.poll(Duration::from_millis(20)) else {
            if quiet.elapsed() > STALL {
                let p = open.iter().next().copied().unwrap_or_default();
                return Err(StateError::Stalled(topic.to_string(), p));
            }
            continue;
        };
        quiet = Instant::now();
        match m {
            Ok(m) => {
                records += 1;
                each(m.partition(), m.key(), m.payload())?;
            }
            Err(KafkaError::PartitionEOF(p)) => {
                open.remove(&p);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(records)
}

/// The reader's context: reaching the end of the partition is how a read ends, not an
/// error worth a log line (librdkafka also reports it as one).
pub struct EndIsNoError;

impl ClientContext for EndIsNoError {
    fn error(&self, error: KafkaError, reason: &str) {
        use rdkafka::types::RDKafkaErrorCode::PartitionEOF;
        let end = match &error {
            KafkaError::PartitionEOF(_) => true,
            KafkaError::Global(code) => *code == PartitionEOF,
            _ => false,
        };
        if !end {
            tracing::warn!(%error, reason, "state topic reader");
        }
    }
}

impl ConsumerContext for EndIsNoError {}
