//! What the broker says about callback topics: whether they exist and how large a
//! record they accept. The intake rejects a timer whose callback topic is unknown or
//! whose callback (payload, key and headers) the topic would refuse, instead of failing
//! at its due time, and one whose state record the state topic would refuse even without
//! its history (it could never be checkpointed, and a rebuild would lose it).
//!
//! Answers are cached (a known topic for a minute, an unknown one for a few seconds, so
//! a topic created after a rejection is picked up soon), at most [`CACHED_TOPICS`] of
//! them: commands naming ever new topics cannot grow the cache without bound. When the broker cannot answer,
//! the command is not rejected: the timer is accepted and, should delivery fail at its
//! due time, the fire goes to the dead-letter topic with the reason.

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest record the producer sends (librdkafka's `message.max.bytes` default),
/// used when the topic's own limit cannot be read.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1_000_000;

/// Room kept for ktimer's headers and the envelope around a callback's payload, key and
/// headers.
const RECORD_OVERHEAD_BYTES: usize = 2_048;

/// Room kept in a timer's state record beside its callback: its ids, schedule and
/// counters (each id is at most a few hundred bytes). Its history is not counted: a
/// checkpoint writes a state without it when the whole record is refused.
pub const STATE_OVERHEAD_BYTES: usize = 4_096;

/// Most topics whose facts are cached.
pub const CACHED_TOPICS: usize = 10_000;

/// What is known about a topic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TopicInfo {
    /// The topic exists and accepts records up to this size.
    Exists {
        /// Its `max.message.bytes` (capped by the producer's limit).
        max_record_bytes: usize,
    },
    /// The broker says there is no such topic.
    Missing,
    /// The broker could not be asked.
    Unknown,
}

/// Cached topic facts.
pub struct Catalog {
    consumer: Arc<BaseConsumer>,
    admin: AdminClient<DefaultClientContext>,
    cache: Mutex<TopicCache>,
    producer_max: usize,
}

/// Topic facts with the time they were learnt; bounded by [`CACHED_TOPICS`].
#[derive(Default)]
struct TopicCache {
    map: HashMap<String, (Instant, TopicInfo)>,
}

impl TopicCache {
    /// How long an answer holds: a topic that exists for a minute, others a few seconds.
    fn ttl(info: TopicInfo) -> Duration {
        match info {
            TopicInfo::Exists { .. } => Duration::from_secs(60),
            _ => Duration::from_secs(5),
        }
    }

    /// The fact about `topic` still valid at `now`.
    fn get(&self, topic: &str, now: Instant) -> Option<TopicInfo> {
        let &(at, info) = self.map.get(topic)?;
        (now.duration_since(at) < Self::ttl(info)).then_some(info)
    }

    /// Records a fact learnt at `now`; when full, forgets the expired facts first, then
    /// every fact (the next look-ups ask the broker again).
    fn insert(&mut self, topic: &str, info: TopicInfo, now: Instant) {
        if self.map.len() >= CACHED_TOPICS && !self.map.contains_key(topic) {
            self.map
                .retain(|_, &mut (at, i)| now.duration_since(at) < Self::ttl(i));
            if self.map.len() >= CACHED_TOPICS {
                self.map.clear();
            }
        }
        self.map.insert(topic.to_string(), (now, info));
    }
}

impl Catalog {
    /// Clients for `cfg` (brokers and user options). `producer_max` is the producer's
    /// `message.max.bytes`.
    pub fn new(
        cfg: &ClientConfig,
        producer_max: usize,
    ) -> Result<Catalog, rdkafka::error::KafkaError> {
        Ok(Catalog {
            consumer: Arc::new(cfg.create()?),
            admin: cfg.create()?,
            cache: Mutex::new(TopicCache::default()),
            producer_max,
        })
    }

    /// Why a callback of `callback_bytes` (payload, key and headers) for `topic` would
    /// never be delivered, if it would not.
    pub async fn refuses(&self, topic: &str, callback_bytes: usize) -> Option<String> {
        match self.info(topic).await {
            TopicInfo::Missing => Some(format!("callback topic {topic:?} does not exist")),
            TopicInfo::Exists { max_record_bytes }
                if callback_bytes + RECORD_OVERHEAD_BYTES > max_record_bytes =>
            {
                Some(format!(
                    "payload, key and headers of {callback_bytes} bytes are larger than callback topic {topic:?} accepts ({max_record_bytes} bytes per record, {RECORD_OVERHEAD_BYTES} kept for ktimer's headers and envelope)"
                ))
            }
            _ => None,
        }
    }

    /// Why the state record of a timer with a callback of `callback_bytes` would not fit
    /// `state_topic` even without its history, if it would not.
    pub async fn refuses_state(&self, state_topic: &str, callback_bytes: usize) -> Option<String> {
        match self.info(state_topic).await {
            TopicInfo::Exists { max_record_bytes }
                if callback_bytes + STATE_OVERHEAD_BYTES > max_record_bytes =>
            {
                Some(format!(
                    "payload, key and headers of {callback_bytes} bytes make a timer state larger than the state topic {state_topic:?} accepts ({max_record_bytes} bytes per record, {STATE_OVERHEAD_BYTES} kept for the timer's other fields)"
                ))
            }
            _ => None,
        }
    }

    /// The (cached) facts about `topic`.
    pub async fn info(&self, topic: &str) -> TopicInfo {
        let cache = || self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(info) = cache().get(topic, Instant::now()) {
            return info;
        }
        let info = self.ask(topic).await;
        cache().insert(topic, info, Instant::now());
        info
    }

    async fn ask(&self, topic: &str) -> TopicInfo {
        let consumer = self.consumer.clone();
        let t = topic.to_string();
        let meta = tokio::task::spawn_blocking(move || {
            consumer
                .fetch_metadata(Some(&t), Duration::from_secs(5))
                .map(|m| {
                    m.topics()
                        .iter()
                        .find(|x| x.name() == t)
                        .map(|x| (x.error(), x.partitions().len()))
                })
        })
        .await;
        match meta {
            Ok(Ok(Some((None, n)))) if n > 0 => {}
            Ok(Ok(Some((Some(e), _))))
                if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition =>
            {
                return TopicInfo::Missing
            }
            Ok(Ok(None)) => return TopicInfo::Missing,
            other => {
                tracing::debug!(topic, result = ?other.map(|r| r.map(|_| ())), "topic metadata unavailable");
                return TopicInfo::Unknown;
            }
        }
        TopicInfo::Exists {
            max_record_bytes: self.max_record_bytes(topic).await.min(self.producer_max),
        }
    }

    /// The topic's `max.message.bytes`, or the producer's limit if it cannot be read.
    async fn max_record_bytes(&self, topic: &str) -> usize {
        let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(5)));
        let res = self
            .admin
            .describe_configs(&[ResourceSpecifier::Topic(topic)], &opts)
            .await;
        let found = res.ok().and_then(|rs| {
            rs.into_iter().flatten().find_map(|r| {
                r.get("max.message.bytes")
                    .and_then(|e| e.value.as_deref())
                    .and_then(|v| v.parse::<usize>().ok())
            })
        });
        found.unwrap_or(DEFAULT_MAX_RECORD_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_forgets_rather_than_grows() {
        let mut c = TopicCache::default();
        let t0 = Instant::now();
        let known = TopicInfo::Exists {
            max_record_bytes: 1,
        };
        c.insert("kept", known, t0);
        for i in 0..3 * CACHED_TOPICS {
            c.insert(&format!("missing-{i}"), TopicInfo::Missing, t0);
            assert!(c.map.len() <= CACHED_TOPICS);
        }
        assert_eq!(c.get("missing-29999", t0), Some(TopicInfo::Missing));
        assert_eq!(c.get("missing-29999", t0 + Duration::from_secs(6)), None);
        // Full of facts from t0: ten seconds on, the expired ones go, the rest stays.
        let mut c = TopicCache::default();
        c.insert("kept", known, t0);
        for i in 1..CACHED_TOPICS {
            c.insert(&format!("missing-{i}"), TopicInfo::Missing, t0);
        }
        let later = t0 + Duration::from_secs(10);
        c.insert("new", TopicInfo::Missing, later);
        assert_eq!(c.map.len(), 2);
        assert_eq!(c.get("kept", later), Some(known));
    }
}
