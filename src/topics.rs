//! Topic declarations (`topics/*.toml`) and `ktimer topics apply`.
//!
//! Topics are created by the program, never by hand. Applying is idempotent: an existing
//! topic is checked, not changed. In particular the partition count of the commands topic
//! is never raised automatically, because that would move timer ids to other partitions.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Errors of loading and applying topic declarations.
#[derive(Debug, thiserror::Error)]
pub enum TopicsError {
    /// The declaration file could not be read or parsed. Not retryable.
    #[error("topic declarations: {0}")]
    Declaration(String),
    /// The broker failed. Usually retryable (broker still starting).
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
}

impl crate::retry::Retryable for TopicsError {
    /// Broker errors may pass; a bad declaration file does not.
    fn is_retryable(&self) -> bool {
        matches!(self, TopicsError::Kafka(_))
    }
}

/// One declared topic.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct TopicSpec {
    /// What ktimer uses it for: commands, results, fired, dead_letter, or a user's callback topic.
    pub role: String,
    /// Topic name.
    pub name: String,
    /// Number of partitions.
    pub partitions: i32,
    /// Replication factor.
    #[serde(default = "one")]
    pub replication_factor: i32,
    /// Topic configs (`retention.ms`, ...).
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

fn one() -> i32 {
    1
}

#[derive(Deserialize)]
struct TopicFile {
    topic: Vec<TopicSpec>,
}

/// The declarations shipped in `topics/ktimer.toml`.
pub fn builtin() -> Vec<TopicSpec> {
    parse(include_str!("../topics/ktimer.toml")).expect("built-in topics/ktimer.toml parses")
}

/// Parses a declaration file's text.
pub fn parse(text: &str) -> Result<Vec<TopicSpec>, TopicsError> {
    toml::from_str::<TopicFile>(text)
        .map(|f| f.topic)
        .map_err(|e| TopicsError::Declaration(e.to_string()))
}

/// Reads a declaration file.
pub fn load(path: &std::path::Path) -> Result<Vec<TopicSpec>, TopicsError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TopicsError::Declaration(format!("{}: {e}", path.display())))?;
    parse(&text)
}

/// What applying did to one topic.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The topic was created.
    Created,
    /// The topic existed with this many partitions (as declared or more).
    Exists(i32),
    /// The topic exists with fewer partitions than declared; left unchanged.
    FewerPartitions(i32),
}

/// Creates the declared topics that are missing and checks the others.
/// `cfg` is a client configuration ([`crate::kafka::client`]).
pub async fn apply(
    cfg: &ClientConfig,
    specs: &[TopicSpec],
) -> Result<Vec<(TopicSpec, Applied)>, TopicsError> {
    let admin: AdminClient<DefaultClientContext> = cfg.create()?;
    let new: Vec<NewTopic> = specs
        .iter()
        .map(|s| {
            let mut t = NewTopic::new(
                &s.name,
                s.partitions,
                TopicReplication::Fixed(s.replication_factor),
            );
            for (k, v) in &s.configs {
                t = t.set(k, v);
            }
            t
        })
        .collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin.create_topics(&new, &opts).await?;
    let meta_client: BaseConsumer = cfg.create()?;
    let mut out = Vec::new();
    for (spec, r) in specs.iter().zip(results) {
        match r {
            Ok(_) => out.push((spec.clone(), Applied::Created)),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {
                let n = partition_count(&meta_client, &spec.name)?;
                let applied = if n >= spec.partitions {
                    Applied::Exists(n)
                } else {
                    Applied::FewerPartitions(n)
                };
                out.push((spec.clone(), applied));
            }
            Err((name, code)) => {
                return Err(TopicsError::Kafka(KafkaError::AdminOp(code)))
                    .inspect_err(|_| tracing::error!(topic = name, ?code, "topic creation failed"))
            }
        }
    }
    Ok(out)
}

/// The number of partitions of `topic` (0 when it does not exist).
pub fn partition_count<X: rdkafka::consumer::ConsumerContext, C: Consumer<X>>(
    client: &C,
    topic: &str,
) -> Result<i32, TopicsError> {
    let md = client.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .map_or(0, |t| t.partitions().len() as i32))
}
