//! The producer side: fired records, command results and dead letters.
//!
//! One idempotent producer (`acks=all`) serves the whole instance. Sending only enqueues;
//! the returned [`DeliveryFuture`] resolves when the broker acknowledged the record, and
//! only then may the caller forget it (acknowledge the fire, commit the command offset).

use crate::codec::{Codec, CodecError};
use crate::command::{fire_id, CommandResult, DeliveryMode, FiredEvent};
use crate::store::Fire;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::future_producer::Delivery;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// Errors of producing.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The broker or the client failed; see [`SinkError::is_retryable`].
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
    /// Whether sending the same record again may succeed. Most broker errors are
    /// transient from ktimer's point of view (leader moves, timeouts, broker down); a
    /// record too large or a topic that does not exist is not.
    pub fn is_retryable(&self) -> bool {
        match self {
            SinkError::Kafka(e) => !matches!(
                e.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::MessageSizeTooLarge
                        | RDKafkaErrorCode::UnknownTopic
                        | RDKafkaErrorCode::UnknownTopicOrPartition
                        | RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::InvalidRecord
                )
            ),
            SinkError::Codec(e) => e.is_retryable(),
            SinkError::Canceled => true,
        }
    }
}

/// Header names set on every fired record.
pub mod headers {
    /// The stable fire id, `timer_id/version/due_ms`: de-duplicate on it.
    pub const FIRE_ID: &str = "ktimer-fire-id";
    /// The timer id.
    pub const TIMER_ID: &str = "ktimer-timer-id";
    /// The timer's application.
    pub const APPLICATION: &str = "ktimer-application";
    /// The due instant, Unix epoch ms (decimal text).
    pub const DUE_MS: &str = "ktimer-due-ms";
    /// When ktimer produced the record, Unix epoch ms (decimal text).
    pub const FIRED_MS: &str = "ktimer-fired-ms";
    /// The delivery attempt, 1 for the first.
    pub const ATTEMPT: &str = "ktimer-attempt";
    /// The instance that produced the record, `host/pid`.
    pub const INSTANCE: &str = "ktimer-instance";
    /// The partition epoch its producer held (owners take ever larger epochs).
    pub const EPOCH: &str = "ktimer-epoch";
}

/// Topic names the sink writes to.
#[derive(Debug, Clone)]
pub struct SinkTopics {
    /// Default callback topic.
    pub fired: String,
    /// Command results.
    pub results: String,
    /// Undecodable commands.
    pub dead_letter: String,
}

/// The producer of everything ktimer writes to Kafka.
pub struct Sink {
    producer: FutureProducer,
    instance: String,
    codec: Arc<Codec>,
    /// Topic names.
    pub topics: SinkTopics,
}

impl Sink {
    /// Creates the idempotent producer; `extra` are additional librdkafka properties.
    pub fn new(
        brokers: &str,
        extra: &[(String, String)],
        codec: Arc<Codec>,
        topics: SinkTopics,
    ) -> Result<Sink, SinkError> {
        let cfg = producer_config(brokers, extra);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "localhost".into());
        Ok(Sink {
            producer: cfg.create()?,
            instance: format!("{}/{}", host.trim(), std::process::id()),
            codec,
            topics,
        })
    }

    /// Enqueues the record of `fire` (as `stamp` says) to its callback topic.
    pub async fn send_fire(&self, fire: &Fire, stamp: Stamp) -> Result<DeliveryFuture, SinkError> {
        let r = self.fire_record(fire, stamp).await?;
        let rec = FutureRecord::to(r.topic)
            .key(r.key)
            .payload(r.value.as_ref())
            .headers(r.headers);
        self.enqueue(rec).await
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
        let r = self.fire_record(fire, stamp).await?;
        let rec = FutureRecord::to(&self.topics.dead_letter)
            .key(r.key)
            .payload(r.value.as_ref())
            .headers(
                r.headers
                    .insert(header("ktimer-reason", reason))
                    .insert(header("ktimer-origin", r.topic)),
            );
        match self.enqueue(rec).await {
            Err(SinkError::Kafka(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageSizeTooLarge,
            ))) => {
                // The record itself is too large: send its identity and the reason only.
                let id = fire_id(&fire.timer_id, fire.version, fire.due_ms);
                let due = fire.due_ms.to_string();
                let h = OwnedHeaders::new()
                    .insert(header(headers::FIRE_ID, &id))
                    .insert(header(headers::TIMER_ID, &fire.timer_id))
                    .insert(header(headers::DUE_MS, &due))
                    .insert(header("ktimer-reason", reason))
                    .insert(header("ktimer-origin", r.topic))
                    .insert(header("ktimer-value-dropped", "too large"));
                let rec = FutureRecord::<[u8], [u8]>::to(&self.topics.dead_letter)
                    .key(fire.timer_id.as_bytes())
                    .headers(h);
                self.enqueue(rec).await
            }
            other => other,
        }
    }

    /// Builds the record of a fire: topic, key, value (raw payload or envelope), headers.
    async fn fire_record<'a>(
        &'a self,
        fire: &'a Fire,
        stamp: Stamp,
    ) -> Result<FireRecord<'a>, SinkError> {
        let Stamp {
            attempt,
            fired_ms,
            epoch,
        } = stamp;
        let cb = &fire.def.callback;
        let topic = cb.topic.as_deref().unwrap_or(&self.topics.fired);
        let id = fire_id(&fire.timer_id, fire.version, fire.due_ms);
        let value = match cb.mode {
            DeliveryMode::Raw => Cow::Borrowed(cb.payload.as_slice()),
            DeliveryMode::Envelope => {
                let ev = FiredEvent {
                    fire_id: id.clone(),
                    timer_id: fire.timer_id.clone(),
                    application: fire.def.application.clone(),
                    version: fire.version,
                    due_ms: fire.due_ms,
                    fired_ms,
                    attempt,
                    payload: cb.payload.clone(),
                };
                Cow::Owned(self.codec.encode_fired(&ev, topic).await?)
            }
        };
        let (due, fired, att, ep) = (
            fire.due_ms.to_string(),
            fired_ms.to_string(),
            attempt.to_string(),
            epoch.to_string(),
        );
        let mut h = OwnedHeaders::new_with_capacity(8 + cb.headers.len())
            .insert(header(headers::FIRE_ID, &id))
            .insert(header(headers::TIMER_ID, &fire.timer_id))
            .insert(header(headers::APPLICATION, &fire.def.application))
            .insert(header(headers::DUE_MS, &due))
            .insert(header(headers::FIRED_MS, &fired))
            .insert(header(headers::ATTEMPT, &att))
            .insert(header(headers::INSTANCE, &self.instance))
            .insert(header(headers::EPOCH, &ep));
        for (k, v) in &cb.headers {
            h = h.insert(header(k, v));
        }
        let key = cb.key.as_deref().unwrap_or(fire.timer_id.as_bytes());
        Ok(FireRecord {
            topic,
            key,
            value,
            headers: h,
        })
    }

    /// Enqueues a command result, keyed by timer id (or the command's record key).
    pub async fn send_result(
        &self,
        key: Option<&[u8]>,
        result: &CommandResult,
    ) -> Result<DeliveryFuture, SinkError> {
        let value = self
            .codec
            .encode_result(result, &self.topics.results)
            .await?;
        let mut rec = FutureRecord::<[u8], [u8]>::to(&self.topics.results).payload(&value);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        self.enqueue(rec).await
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
            .insert(header("ktimer-reason", reason))
            .insert(header("ktimer-origin", origin));
        let mut rec = FutureRecord::<[u8], [u8]>::to(&self.topics.dead_letter)
            .payload(value)
            .headers(h);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        self.enqueue(rec).await
    }

    async fn enqueue(
        &self,
        rec: FutureRecord<'_, [u8], [u8]>,
    ) -> Result<DeliveryFuture, SinkError> {
        enqueue(&self.producer, rec).await
    }

    /// Waits for all enqueued records to be acknowledged, up to `timeout`.
    pub fn flush(&self, timeout: Duration) {
        use rdkafka::producer::Producer;
        if let Err(e) = self.producer.flush(timeout) {
            tracing::warn!(error = %e, "producer flush incomplete");
        }
    }
}

/// The producer configuration of the sink (also the bench's pass-through baseline):
/// idempotent, `acks=all`, 1 ms linger; `extra` properties override.
pub fn producer_config(brokers: &str, extra: &[(String, String)]) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "30000")
        .set("queue.buffering.max.messages", "1000000");
    for (k, v) in extra {
        cfg.set(k, v);
    }
    cfg
}

/// How a fire is being produced.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    /// Delivery attempt, 1 for the first.
    pub attempt: i32,
    /// Produce time, Unix epoch ms.
    pub fired_ms: i64,
    /// The partition epoch the producing trigger holds.
    pub epoch: i64,
}

/// A fire's record before it is enqueued (borrowing from the fire where it can).
struct FireRecord<'a> {
    topic: &'a str,
    key: &'a [u8],
    value: Cow<'a, [u8]>,
    headers: OwnedHeaders,
}

/// Hands `rec` to `producer`, waiting while its queue is full; the future resolves when
/// the broker acknowledged the record.
pub async fn enqueue(
    producer: &FutureProducer,
    mut rec: FutureRecord<'_, [u8], [u8]>,
) -> Result<DeliveryFuture, SinkError> {
    loop {
        match producer.send_result(rec) {
            Ok(f) => return Ok(f),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Waits for a delivery and flattens its errors.
pub async fn delivered(f: DeliveryFuture) -> Result<Delivery, SinkError> {
    match f.await {
        Ok(Ok(d)) => Ok(d),
        Ok(Err((e, _))) => Err(e.into()),
        Err(_) => Err(SinkError::Canceled),
    }
}

fn header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a str> {
    Header {
        key,
        value: Some(value),
    }
}
