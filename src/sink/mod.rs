//! The producer side: fired records, command results and dead letters.
//!
//! One idempotent producer (`acks=all`, configured in [`crate::kafka::producer`]) serves
//! the whole instance. Sending only enqueues ([`send::enqueue`], which waits while the
//! producer's queue is full); the returned [`DeliveryFuture`] resolves when the broker
//! acknowledged the record, and only then may the caller forget it (acknowledge the
//! fire, store the command offset): rust-rdkafka's `examples/at_least_once.rs` recipe.
//! What a fire's record holds is built, pure, in [`record`].

pub mod record;
pub mod send;

pub use record::{headers, Stamp};
pub use send::{delivered, enqueue};

use crate::codec::{Codec, CodecError};
use crate::command::{CommandResult, DeliveryMode};
use crate::retry::Retryable;
use crate::timer::Fire;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use record::header;
use std::borrow::Cow;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Errors of producing.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The broker or the client failed; see [`Retryable::is_retryable`].
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// The record could not be encoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The producer went away before the record was acknowledged (shutdown). Retryable.
    #[error("the producer was dropped before the delivery was acknowledged")]
    Canceled,
}

impl SinkError {
    fn code(&self) -> Option<RDKafkaErrorCode> {
        match self {
            SinkError::Kafka(e) => e.rdkafka_error_code(),
            _ => None,
        }
    }

    /// Whether the broker refused the record for what it is (too large, invalid): sending
    /// it again cannot succeed.
    pub fn does_not_fit(&self) -> bool {
        use RDKafkaErrorCode as C;
        matches!(
            self.code(),
            Some(C::MessageSizeTooLarge | C::InvalidRecord | C::InvalidMessageSize)
        )
    }

    /// What kind of failure this is, for the delivery policy of a fire.
    pub fn failure(&self) -> Failure {
        use RDKafkaErrorCode as C;
        if !self.is_retryable() {
            return Failure::Refused;
        }
        match self.code() {
            _ if matches!(self, SinkError::Canceled) => Failure::Outage,
            Some(
                C::MessageTimedOut
                | C::AllBrokersDown
                | C::BrokerTransportFailure
                | C::Resolve
                | C::OperationTimedOut
                | C::TimedOutQueue
                | C::QueueFull
                | C::RequestTimedOut
                | C::NetworkException
                | C::LeaderNotAvailable
                | C::NotLeaderForPartition
                | C::BrokerNotAvailable
                | C::ReplicaNotAvailable
                | C::NotEnoughReplicas
                | C::NotEnoughReplicasAfterAppend
                | C::KafkaStorageError
                | C::FencedLeaderEpoch
                | C::UnknownLeaderEpoch
                | C::ProducerFenced
                | C::InvalidProducerEpoch
                | C::PurgeQueue
                | C::PurgeInflight,
            ) => Failure::Outage,
            _ => Failure::Transient,
        }
    }

    /// Whether the broker fenced the producer itself (every later record fails too).
    fn producer_fenced(&self) -> bool {
        use RDKafkaErrorCode as C;
        matches!(
            self.code(),
            Some(C::ProducerFenced | C::InvalidProducerEpoch)
        )
    }
}

impl Retryable for SinkError {
    /// Most broker errors are transient from ktimer's point of view (leader moves,
    /// timeouts, broker down); a record that does not fit or a topic that does not exist
    /// is not.
    fn is_retryable(&self) -> bool {
        use RDKafkaErrorCode as C;
        match self {
            SinkError::Kafka(_) => {
                !self.does_not_fit()
                    && !matches!(
                        self.code(),
                        Some(
                            C::UnknownTopic
                                | C::UnknownTopicOrPartition
                                | C::TopicAuthorizationFailed
                        )
                    )
            }
            SinkError::Codec(e) => e.is_retryable(),
            SinkError::Canceled => true,
        }
    }
}

/// How a delivery failed, which decides whether a fire may end on the dead-letter topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The broker or the path to it is down, slow or moving leaders: it says nothing about
    /// the record, so the fire waits for the broker however long that takes.
    Outage,
    /// Some other retryable error: the fire gets its delivery attempts.
    Transient,
    /// The broker will never take this record (too large, no such topic, not allowed).
    Refused,
}

/// Topic names the sink writes to.
#[derive(Debug, Clone)]
pub struct SinkTopics {
    /// Default callback topic.
    pub fired: String,
    /// Command results.
    pub results: String,
    /// Undecodable commands and undeliverable fires.
    pub dead_letter: String,
    /// Timer states and checkpoints (compacted; partitioned like the commands topic).
    pub state: String,
}

/// The producer of everything ktimer writes to Kafka.
pub struct Sink {
    /// The producer, and when it last replaced a failed one ([`Sink::heal`]).
    producer: RwLock<(FutureProducer, Option<Instant>)>,
    /// Its configuration, to build a replacement.
    cfg: ClientConfig,
    instance: String,
    codec: Arc<Codec>,
    /// Topic names.
    pub topics: SinkTopics,
}

impl Sink {
    /// Creates the producer from `cfg` (see [`crate::kafka::producer`]).
    pub fn new(
        cfg: &ClientConfig,
        codec: Arc<Codec>,
        topics: SinkTopics,
    ) -> Result<Sink, SinkError> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "localhost".into());
        Ok(Sink {
            producer: RwLock::new((cfg.create()?, None)),
            cfg: cfg.clone(),
            instance: format!("{}/{}", host.trim(), std::process::id()),
            codec,
            topics,
        })
    }

    /// The current producer (a cheap handle).
    fn producer(&self) -> FutureProducer {
        self.producer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Replaces the producer after delivery error `e` if it failed for good: librdkafka
    /// reports a fatal error, or the broker fenced it (ProducerFenced, which Tansu answers
    /// for ever after an idempotent epoch bump); without this every later record would
    /// fail. What it held (purged: an outage's failure) is retried by its owners: fires
    /// stay in flight in Redis, results are re-sent by the answer stage. Call after a
    /// failed delivery; cheap otherwise.
    pub fn heal(&self, e: &SinkError) {
        use rdkafka::producer::Producer;
        let reason = match self.producer().client().fatal_error() {
            Some((_, reason)) => reason,
            None if e.producer_fenced() => e.to_string(),
            None => return,
        };
        let mut current = self.producer.write().unwrap_or_else(|e| e.into_inner());
        // Failures of the old producer's records keep arriving: one replacement per 5 s.
        if current
            .1
            .is_some_and(|t| t.elapsed() < Duration::from_secs(5))
        {
            return;
        }
        current.1 = Some(Instant::now());
        match self.cfg.create::<FutureProducer>() {
            Ok(fresh) => {
                tracing::error!(%reason, "the producer failed for good; replaced by a new one");
                let old = std::mem::replace(&mut current.0, fresh);
                // Destroying a producer may wait for its queue: not on a runtime thread.
                std::thread::spawn(move || drop(old));
            }
            Err(e) => {
                tracing::error!(error = %e, "the producer failed for good and a new one could not be built")
            }
        }
    }

    /// Enqueues the record of `fire` (as `stamp` says) to its callback topic.
    pub async fn send_fire(&self, fire: &Fire, stamp: Stamp) -> Result<DeliveryFuture, SinkError> {
        let topic = record::topic(fire, &self.topics.fired);
        let id = record::id(fire);
        let value = self.value(fire, &id, stamp, topic).await?;
        let rec = FutureRecord::to(topic)
            .key(record::key(fire))
            .payload(value.as_ref())
            .headers(record::fire_headers(fire, &id, stamp, &self.instance));
        enqueue(&self.producer(), rec).await
    }

    /// Enqueues the record of `fire` to the dead-letter topic instead, with `reason` and
    /// the callback topic it was meant for in headers. If the record itself is too large,
    /// only the fire's identity goes (the timer's definition stays in Redis for the
    /// retention time).
    pub async fn send_fire_dead_letter(
        &self,
        fire: &Fire,
        stamp: Stamp,
        reason: &str,
    ) -> Result<DeliveryFuture, SinkError> {
        let origin = record::topic(fire, &self.topics.fired);
        let id = record::id(fire);
        let value = self.value(fire, &id, stamp, origin).await?;
        let h = record::fire_headers(fire, &id, stamp, &self.instance)
            .insert(header(headers::REASON, reason))
            .insert(header(headers::ORIGIN, origin));
        let rec = FutureRecord::to(&self.topics.dead_letter)
            .key(record::key(fire))
            .payload(value.as_ref())
            .headers(h);
        match enqueue(&self.producer(), rec).await {
            Err(SinkError::Kafka(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageSizeTooLarge,
            ))) => {
                let rec = FutureRecord::<[u8], [u8]>::to(&self.topics.dead_letter)
                    .key(fire.timer_id.as_bytes())
                    .headers(record::identity_headers(fire, &id, reason, origin));
                enqueue(&self.producer(), rec).await
            }
            other => other,
        }
    }

    /// The value of fire `id`'s record: the raw payload, or its envelope encoded for `topic`.
    async fn value<'a>(
        &self,
        fire: &'a Fire,
        id: &str,
        stamp: Stamp,
        topic: &str,
    ) -> Result<Cow<'a, [u8]>, SinkError> {
        let cb = &fire.def.callback;
        Ok(match cb.mode {
            DeliveryMode::Raw => Cow::Borrowed(cb.payload.as_slice()),
            DeliveryMode::Envelope => {
                let ev = record::envelope(fire, id, stamp);
                Cow::Owned(self.codec.encode_fired(&ev, topic).await?)
            }
        })
    }

    /// Enqueues a command result, keyed by timer id (or the command's record key).
    pub async fn send_result(
        &self,
        key: Option<&[u8]>,
        result: &CommandResult,
        trace: Option<&crate::trace::Context>,
    ) -> Result<DeliveryFuture, SinkError> {
        let value = self
            .codec
            .encode_result(result, &self.topics.results)
            .await?;
        let mut rec = FutureRecord::<[u8], [u8]>::to(&self.topics.results).payload(&value);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        if trace.is_some() {
            rec = rec.headers(record::with_trace(OwnedHeaders::new(), trace));
        }
        enqueue(&self.producer(), rec).await
    }

    /// Enqueues a copy of an undecodable command on the dead-letter topic, with the reason.
    pub async fn send_dead_letter(
        &self,
        key: Option<&[u8]>,
        value: &[u8],
        reason: &str,
        origin: &str,
    ) -> Result<DeliveryFuture, SinkError> {
        let h = OwnedHeaders::new()
            .insert(header(headers::REASON, reason))
            .insert(header(headers::ORIGIN, origin));
        let mut rec = FutureRecord::<[u8], [u8]>::to(&self.topics.dead_letter)
            .payload(value)
            .headers(h);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        enqueue(&self.producer(), rec).await
    }

    /// Enqueues a command again, to partition `partition` of `topic` (its key's), marked
    /// with where it arrived first so it is never forwarded twice.
    pub async fn send_forward(
        &self,
        topic: &str,
        partition: i32,
        key: Option<&[u8]>,
        value: &[u8],
        from: &str,
        trace: Option<&crate::trace::Context>,
    ) -> Result<DeliveryFuture, SinkError> {
        let h = OwnedHeaders::new().insert(header(headers::FORWARDED_FROM, from));
        let h = record::with_trace(h, trace);
        let mut rec = FutureRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .payload(value)
            .headers(h);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        enqueue(&self.producer(), rec).await
    }

    /// Enqueues the command a delayed record became to the commands topic `topic`, keyed
    /// by its timer id (the partitioner picks the partition), marked with the record's
    /// `topic/partition/offset`.
    pub async fn send_delayed(
        &self,
        topic: &str,
        timer_id: &str,
        value: &[u8],
        origin: &str,
    ) -> Result<DeliveryFuture, SinkError> {
        let h = OwnedHeaders::new().insert(header(headers::DELAYED_FROM, origin));
        let rec = FutureRecord::<[u8], [u8]>::to(topic)
            .key(timer_id.as_bytes())
            .payload(value)
            .headers(h);
        enqueue(&self.producer(), rec).await
    }

    /// Enqueues a record of the state topic to `partition` (the commands partition it
    /// mirrors): a timer's state, or its tombstone when `value` is `None`.
    pub async fn send_state(
        &self,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<DeliveryFuture, SinkError> {
        let mut rec = FutureRecord::<[u8], [u8]>::to(&self.topics.state)
            .partition(partition)
            .key(key);
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        enqueue(&self.producer(), rec).await
    }

    /// Waits for all enqueued records to be acknowledged, up to `timeout`.
    pub fn flush(&self, timeout: Duration) {
        use rdkafka::producer::Producer;
        if let Err(e) = self.producer().flush(timeout) {
            tracing::warn!(error = %e, "producer flush incomplete");
        }
    }
}
