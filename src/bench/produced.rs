//! Records the started instances produce beside their fires over a span: their results
//! and state records (a written timer's tombstone after its fire), counted from the end
//! offsets of those topics. A fire whose timer owes a tombstone costs ktimer two produced
//! records, so the producer floor ([`super::baseline`]) is compared per record produced.

use crate::config::KafkaArgs;
use crate::{kafka, topics};
use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::Duration;

/// How long one offsets request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The sum of the end offsets of the results and state topics of `kafka`: compared at a
/// span's start and end, the records produced to them meanwhile.
pub async fn side_records(kafka: &KafkaArgs) -> anyhow::Result<i64> {
    let cfg = kafka::reader(kafka, "ktimer-bench-offsets");
    let topics = [kafka.results_topic.clone(), kafka.state_topic.clone()];
    tokio::task::spawn_blocking(move || {
        let client: BaseConsumer = cfg.create().context("the offsets reader")?;
        let mut sum = 0;
        for topic in &topics {
            sum += end_offsets(&client, topic)?;
        }
        Ok(sum)
    })
    .await?
}

/// The sum of the end offsets of every partition of `topic`.
fn end_offsets(client: &BaseConsumer, topic: &str) -> anyhow::Result<i64> {
    let partitions =
        topics::partition_count(client, topic).with_context(|| format!("partitions of {topic}"))?;
    let mut sum = 0;
    for p in 0..partitions {
        let (_, high) = client
            .fetch_watermarks(topic, p, TIMEOUT)
            .with_context(|| format!("end offset of {topic}/{p}"))?;
        sum += high;
    }
    Ok(sum)
}
