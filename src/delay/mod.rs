//! The delay topic: delayed delivery of any Kafka record, driven by headers.
//!
//! A record whose headers say when and where ([`contract`], pure) becomes a timer
//! command, forwarded to the commands topic keyed by its timer id: from there on it is a
//! timer like any other (the same partition owner, store, limits, history, state topic
//! and rebuild; the commands topic is its source of truth), delivered at its time as the
//! record itself (RAW mode: the same key, value and headers). A record the contract
//! refuses is answered REJECTED on the results topic instead, and nothing is delivered.
//!
//! At least once, in order: a record's offset is stored only once what it became was
//! acknowledged by the broker, and offsets are stored in record order (rust-rdkafka's
//! `examples/at_least_once.rs`). A failed produce ends the session: what was handed to
//! the producer is waited for, and the next session starts again at the first record
//! not acknowledged. A record forwarded twice is one command twice (the same request
//! id): the second is answered as a duplicate and changes nothing.

pub mod contract;

use crate::clock::Clock;
use crate::codec::{Codec, CodecError};
use crate::command::CommandResult;
use crate::metrics::Metrics;
use crate::retry::{Retry, Retryable};
use crate::shutdown::CancellationToken;
use crate::sink::{delivered, Sink, SinkError};
use contract::DelayRecord;
use futures::stream::{FuturesOrdered, StreamExt};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::DeliveryFuture;
use rdkafka::ClientConfig;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Most records handed to the producer and not yet acknowledged (back-pressure).
const MAX_IN_FLIGHT: usize = 10_000;
/// How long a stopping session waits for the records it handed to the producer.
const DRAIN: Duration = Duration::from_secs(10);

/// Why a session of the delay reader ended; every one is retried.
#[derive(Debug, thiserror::Error)]
pub enum DelayError {
    /// The consumer could not be created or subscribe.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// A command or result could not be produced.
    #[error("producing: {0}")]
    Sink(#[from] SinkError),
    /// A command could not be encoded (the schema registry is out of reach).
    #[error("encoding: {0}")]
    Codec(#[from] CodecError),
    /// The topic is not there (yet).
    #[error("the delay topic {0:?} does not exist; `ktimer topics apply` creates it")]
    Missing(String),
}

impl Retryable for DelayError {
    fn is_retryable(&self) -> bool {
        true
    }
}

/// The delay reader of one instance.
pub struct Delay {
    /// The consumer's configuration ([`crate::kafka::delay_consumer`]).
    pub consumer: ClientConfig,
    /// The delay topic.
    pub topic: String,
    /// Where the commands go.
    pub commands_topic: String,
    /// The producer.
    pub sink: Arc<Sink>,
    /// Encodes the commands (Confluent with a registry, single-object without).
    pub codec: Arc<Codec>,
    /// `delayed_records_total`.
    pub metrics: Arc<Metrics>,
    /// The time of refusals.
    pub clock: Clock,
    /// Stops the reader (it drains first).
    pub token: CancellationToken,
}

/// A record on its way: where it was read, once acknowledged.
type Pending = Pin<Box<dyn Future<Output = Result<(i32, i64), SinkError>> + Send>>;

impl Delay {
    /// Runs the reader on its own task until the token is cancelled.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run())
    }

    /// Sessions one after the other, with the one backoff between failed ones.
    async fn run(self) {
        let failures = self
            .metrics
            .kafka_errors
            .with_label_values(&["delay_forward"]);
        let retry = Retry::new("delay topic", &self.token).counting(failures);
        let mut attempts = retry.attempts();
        loop {
            match self.session().await {
                Ok(()) => return,
                Err(e) if !attempts.failed(&e).await => return,
                Err(_) => {}
            }
        }
    }

    /// One consumer's life: reads, forwards and stores offsets until shutdown (`Ok`) or
    /// a failure.
    async fn session(&self) -> Result<(), DelayError> {
        let consumer: Arc<StreamConsumer> = Arc::new(self.consumer.create()?);
        let (c, topic) = (consumer.clone(), self.topic.clone());
        let count =
            tokio::task::spawn_blocking(move || crate::topics::partition_count(&*c, &topic))
                .await
                .expect("metadata fetch");
        if !matches!(count, Ok(n) if n > 0) {
            return Err(DelayError::Missing(self.topic.clone()));
        }
        consumer.subscribe(&[&self.topic])?;
        tracing::info!(topic = %self.topic, "reading delayed records");
        let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
        let mut failed = None;
        while failed.is_none() {
            tokio::select! {
                biased;
                _ = self.token.cancelled() => break,
                Some(done) = pending.next(), if !pending.is_empty() => match done {
                    Ok((p, o)) => self.store(&consumer, p, o),
                    Err(e) => failed = Some(e.into()),
                },
                m = consumer.recv(), if pending.len() < MAX_IN_FLIGHT => match m {
                    Ok(m) => match self.forward(&m).await {
                        Ok(f) => {
                            let (p, o) = (m.partition(), m.offset());
                            pending.push_back(Box::pin(async move { delivered(f).await.map(|_| (p, o)) }));
                        }
                        Err(e) => failed = Some(e),
                    },
                    Err(e) => self.consume_error(&e),
                },
            }
        }
        self.drain(&consumer, pending, failed.is_none()).await;
        let _ = consumer.commit_consumer_state(CommitMode::Sync);
        failed.map_or(Ok(()), Err)
    }

    /// Waits (at most [`DRAIN`]) for what was handed to the producer; stores offsets in
    /// order while `storing` and every acknowledgement succeeded.
    async fn drain(
        &self,
        consumer: &StreamConsumer,
        mut pending: FuturesOrdered<Pending>,
        mut storing: bool,
    ) {
        let drained = async {
            while let Some(done) = pending.next().await {
                match done {
                    Ok((p, o)) if storing => self.store(consumer, p, o),
                    _ => storing = false,
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN, drained).await;
    }

    /// The record at `partition`/`offset` is done with.
    fn store(&self, consumer: &StreamConsumer, partition: i32, offset: i64) {
        // Fails only for a partition no longer assigned: its new reader starts at the
        // last offset committed and forwards the record again (a duplicate).
        let _ = consumer.store_offset(&self.topic, partition, offset);
    }

    fn consume_error(&self, e: &KafkaError) {
        self.metrics
            .kafka_errors
            .with_label_values(&["delay_consume"])
            .inc();
        tracing::warn!(topic = %self.topic, error = %e, "reading the delay topic");
    }

    /// Hands the command record `m` becomes, or its refusal, to the producer.
    async fn forward(&self, m: &BorrowedMessage<'_>) -> Result<DeliveryFuture, DelayError> {
        let now = self.clock.now_ms();
        let headers = m
            .headers()
            .map_or_else(Vec::new, |h| h.iter().map(|x| (x.key, x.value)).collect());
        let r = DelayRecord {
            topic: m.topic(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis().unwrap_or(now),
            key: m.key(),
            value: m.payload(),
            headers,
        };
        match contract::command(&r) {
            Ok(cmd) => {
                let value = self
                    .codec
                    .encode_command(&cmd, &self.commands_topic)
                    .await?;
                let origin = r.origin();
                let f =
                    self.sink
                        .send_delayed(&self.commands_topic, &cmd.timer_id, &value, &origin);
                let f = f.await?;
                self.metrics
                    .delayed_records
                    .with_label_values(&["forwarded"])
                    .inc();
                Ok(f)
            }
            Err(refusal) => {
                let cmd = &refusal.command;
                let trace = crate::trace::Context::of(
                    r.headers.iter().map(|(k, v)| (*k, v.unwrap_or_default())),
                );
                let mut result = CommandResult::rejected(r.partition, r.offset, now);
                result.describe(cmd);
                result.reason = Some(refusal.reason);
                let f = self
                    .sink
                    .send_result(Some(cmd.timer_id.as_bytes()), &result, trace.as_ref())
                    .await?;
                self.metrics
                    .delayed_records
                    .with_label_values(&["refused"])
                    .inc();
                Ok(f)
            }
        }
    }
}
