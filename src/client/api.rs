//! A client of a ktimer deployment for Rust programs: send a command, or send it and await
//! its result (matched by request id on the results topic).
//!
//! ```no_run
//! # async fn demo(kafka: &ktimer::config::KafkaArgs) -> Result<(), ktimer::client::ClientError> {
//! use ktimer::client::{Client, Command};
//! let client = Client::connect(kafka).await?;
//! let cmd = Command::once("order-42").delay_ms(30_000).payload("close").build();
//! let result = client.call(cmd, std::time::Duration::from_secs(10)).await?;
//! println!("{:?} {:?}", result.outcome, result.state);
//! # Ok(()) }
//! ```

use crate::codec::{Codec, CodecError};
use crate::command::{CommandResult, TimerCommand};
use crate::config::KafkaArgs;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The broker failed or refused. Often retryable (an outage).
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A command could not be encoded, or the schema registry failed.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// Setting up (topics missing, no metadata). Not retryable as is.
    #[error("{0}")]
    Setup(String),
    /// No result within the wait: the command may still be applied later. Retryable:
    /// sending the same command (same request id) again is harmless.
    #[error("no result for request {0} within the wait")]
    Timeout(String),
}

impl crate::retry::Retryable for ClientError {
    fn is_retryable(&self) -> bool {
        matches!(self, ClientError::Kafka(_) | ClientError::Timeout(_))
    }
}

/// Where a command went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The commands topic's partition (its timer's).
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
}

type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<CommandResult>>>>;

/// A connection to a deployment: a producer of commands and, started on the first
/// [`Client::call`], a reader of results.
pub struct Client {
    kafka: KafkaArgs,
    producer: FutureProducer,
    codec: Arc<Codec>,
    /// Commands written as JSON instead of Avro.
    json: bool,
    waiting: Waiting,
    reader: tokio::sync::OnceCell<tokio::task::JoinHandle<()>>,
}

impl Client {
    /// Connects to the deployment `kafka` names (brokers, topics, schema registry).
    pub async fn connect(kafka: &KafkaArgs) -> Result<Client, ClientError> {
        let codec = Codec::new(kafka.schema_registry_url.as_deref())?;
        Ok(Client {
            kafka: kafka.clone(),
            producer: crate::kafka::producer(kafka).create()?,
            codec: Arc::new(codec),
            json: false,
            waiting: Arc::default(),
            reader: tokio::sync::OnceCell::new(),
        })
    }

    /// Writes commands as JSON (for people reading the topic) instead of Avro.
    pub fn json(mut self) -> Client {
        self.json = true;
        self
    }

    /// Produces `cmd` to the commands topic, keyed by its timer id; resolves once the
    /// broker acknowledged it.
    pub async fn send(&self, cmd: &TimerCommand) -> Result<Sent, ClientError> {
        let topic = &self.kafka.commands_topic;
        let value = match self.json {
            true => serde_json::to_vec(cmd).map_err(|e| ClientError::Setup(e.to_string()))?,
            false => self.codec.encode_command(cmd, topic).await?,
        };
        let rec = FutureRecord::to(topic)
            .key(cmd.timer_id.as_bytes())
            .payload(&value);
        let d = self
            .producer
            .send(rec, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)?;
        Ok(Sent {
            partition: d.partition,
            offset: d.offset,
        })
    }

    /// Sends `cmd` and waits (up to `wait`) for its result.
    pub async fn call(
        &self,
        cmd: TimerCommand,
        wait: Duration,
    ) -> Result<CommandResult, ClientError> {
        self.reader.get_or_try_init(|| self.start_reader()).await?;
        let (tx, rx) = oneshot::channel();
        let id = cmd.request_id.clone();
        self.lock().insert(id.clone(), tx);
        let answered = async {
            self.send(&cmd).await?;
            tokio::time::timeout(wait, rx)
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| ClientError::Timeout(id.clone()))
        };
        let r = answered.await;
        self.lock().remove(&id);
        r
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<CommandResult>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the results topic from its current end (positions resolved before any
    /// command is sent), handing each result to whoever waits for its request id.
    async fn start_reader(&self) -> Result<tokio::task::JoinHandle<()>, ClientError> {
        let (k, topic) = (self.kafka.clone(), self.kafka.results_topic.clone());
        let consumer: StreamConsumer =
            tokio::task::spawn_blocking(move || super::assigned_consumer(&k, &[topic], false))
                .await
                .map_err(|e| ClientError::Setup(e.to_string()))?
                .map_err(|e| ClientError::Setup(e.to_string()))?;
        let (codec, waiting) = (self.codec.clone(), self.waiting.clone());
        Ok(tokio::spawn(async move {
            loop {
                let Ok(msg) = consumer.recv().await else {
                    continue;
                };
                let Some(bytes) = msg.payload() else { continue };
                let Ok(r) = codec.decode_result(bytes).await else {
                    continue;
                };
                let Some(id) = r.request_id.clone() else {
                    continue;
                };
                let tx = waiting
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(r);
                }
            }
        }))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.get() {
            reader.abort();
        }
    }
}
