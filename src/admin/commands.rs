//! The admin API's write path: every write is a command produced to the commands topic
//! (Kafka stays the one write path), answered with its result once an instance applied
//! it. A reader tails the results topic from its end and hands each result to the
//! request waiting for it.

use super::error::ApiError;
use crate::codec::Codec;
use crate::command::{CommandResult, TimerCommand};
use crate::config::KafkaArgs;
use crate::retry::{Retry, Retryable};
use crate::shutdown::CancellationToken;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Why the write path could not start.
#[derive(Debug, thiserror::Error)]
pub enum CommandsError {
    /// The results reader or the producer could not be created (the topic is missing,
    /// the broker is down).
    #[error("reading the results topic: {0}")]
    Results(String),
}

impl Retryable for CommandsError {
    fn is_retryable(&self) -> bool {
        true
    }
}

type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<CommandResult>>>>;

/// Sends commands and waits for their results.
pub struct Commands {
    producer: FutureProducer,
    codec: Arc<Codec>,
    topic: String,
    waiters: Waiters,
    ready: tokio::sync::watch::Receiver<bool>,
}

/// What became of a command sent.
pub enum Sent {
    /// Its result.
    Result(CommandResult),
    /// Produced; no result within the wait (or none asked for).
    Accepted {
        /// Its request id, to find its result on the results topic.
        request_id: String,
    },
}

impl Commands {
    /// The write path of `kafka`'s topics; the results reader starts in the background
    /// and runs until `token` is cancelled.
    pub fn start(
        kafka: &KafkaArgs,
        codec: Arc<Codec>,
        token: CancellationToken,
    ) -> anyhow::Result<Commands> {
        let producer: FutureProducer = crate::kafka::producer(kafka).create()?;
        let waiters: Waiters = Arc::default();
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        tokio::spawn(read_results(
            kafka.clone(),
            codec.clone(),
            waiters.clone(),
            ready_tx,
            token,
        ));
        Ok(Commands {
            producer,
            codec,
            topic: kafka.commands_topic.clone(),
            waiters,
            ready,
        })
    }

    /// Produces `cmd` (keyed by its timer id) and, when `wait` is some, waits that long
    /// for its result.
    pub async fn send(&self, cmd: &TimerCommand, wait: Option<Duration>) -> Result<Sent, ApiError> {
        let rx = match wait {
            Some(_) => {
                if !*self.ready.borrow() {
                    let mut ready = self.ready.clone();
                    let up = tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r));
                    if !matches!(up.await, Ok(Ok(_))) {
                        return Err(ApiError::unavailable(
                            "the results topic cannot be read yet",
                        ));
                    }
                }
                let (tx, rx) = oneshot::channel();
                self.lock().insert(cmd.request_id.clone(), tx);
                Some(rx)
            }
            None => None,
        };
        let value = self
            .codec
            .encode_command(cmd, &self.topic)
            .await
            .map_err(|e| ApiError::unavailable(format!("encoding the command: {e}")))?;
        let rec = FutureRecord::to(&self.topic)
            .key(cmd.timer_id.as_bytes())
            .payload(&value);
        let delivered = self.producer.send(rec, Duration::from_secs(30)).await;
        if let Err((e, _)) = delivered {
            self.lock().remove(&cmd.request_id);
            return Err(ApiError::unavailable(format!("producing the command: {e}")));
        }
        let accepted = Sent::Accepted {
            request_id: cmd.request_id.clone(),
        };
        let (Some(rx), Some(wait)) = (rx, wait) else {
            return Ok(accepted);
        };
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => Ok(Sent::Result(result)),
            _ => {
                self.lock().remove(&cmd.request_id);
                Ok(accepted)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<CommandResult>>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Tails the results topic from its end and answers the waiting requests.
async fn read_results(
    kafka: KafkaArgs,
    codec: Arc<Codec>,
    waiters: Waiters,
    ready: tokio::sync::watch::Sender<bool>,
    token: CancellationToken,
) {
    let topics = [kafka.results_topic.clone()];
    let consumer = Retry::new("admin results reader", &token)
        .forever(|| {
            let (kafka, topics) = (kafka.clone(), topics.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    crate::client::assigned_consumer::<StreamConsumer>(&kafka, &topics, false)
                })
                .await
                .map_err(|e| CommandsError::Results(e.to_string()))?
                .map_err(|e| CommandsError::Results(format!("{e:#}")))
            }
        })
        .await;
    let Some(consumer) = consumer else { return };
    ready.send_replace(true);
    loop {
        let msg = tokio::select! {
            _ = token.cancelled() => return,
            m = consumer.recv() => m,
        };
        let Ok(msg) = msg else { continue };
        let Some(bytes) = msg.payload() else { continue };
        let Ok(result) = codec.decode_result(bytes).await else {
            continue;
        };
        let Some(rq) = result.request_id.clone() else {
            continue;
        };
        let tx = waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&rq);
        if let Some(tx) = tx {
            let _ = tx.send(result);
        }
    }
}
