//! The admin API's write path: every write is a command produced to the commands topic
//! (Kafka stays the one write path), answered with its result once an instance applied
//! it. A reader tails the results topic from its end and hands each result to the
//! request waiting for it. It starts with the first write that waits (an instance nobody
//! writes through reads nothing), and decodes only the results of timers some request
//! waits for (results are keyed by timer id).

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
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// How long a write waits for the results reader to start before answering 503.
const READER_START: Duration = Duration::from_secs(10);

/// Why the write path could not start.
#[derive(Debug, thiserror::Error)]
pub enum CommandsError {
    /// The results reader could not be created (the topic is missing, the broker is
    /// down).
    #[error("reading the results topic: {0}")]
    Results(String),
}

impl Retryable for CommandsError {
    fn is_retryable(&self) -> bool {
        true
    }
}

/// Requests waiting for a result: timer id -> (request id, where the result goes).
type ByTimer = HashMap<String, Vec<(String, oneshot::Sender<CommandResult>)>>;
type Waiters = Arc<Mutex<ByTimer>>;

/// Sends commands and waits for their results.
pub struct Commands {
    producer: FutureProducer,
    codec: Arc<Codec>,
    kafka: KafkaArgs,
    waiters: Waiters,
    ready: watch::Receiver<bool>,
    ready_tx: Mutex<Option<watch::Sender<bool>>>,
    started: Once,
    token: CancellationToken,
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
    /// The write path of `kafka`'s topics; the results reader, once started, runs until
    /// `token` is cancelled.
    pub fn new(
        kafka: &KafkaArgs,
        codec: Arc<Codec>,
        token: CancellationToken,
    ) -> anyhow::Result<Commands> {
        let (ready_tx, ready) = watch::channel(false);
        Ok(Commands {
            producer: crate::kafka::producer(kafka).create()?,
            codec,
            kafka: kafka.clone(),
            waiters: Arc::default(),
            ready,
            ready_tx: Mutex::new(Some(ready_tx)),
            started: Once::new(),
            token,
        })
    }

    /// Produces `cmd` (keyed by its timer id) and, when `wait` is some, waits that long
    /// for its result.
    pub async fn send(&self, cmd: &TimerCommand, wait: Option<Duration>) -> Result<Sent, ApiError> {
        let rx = match wait {
            Some(_) => Some(self.wait_for(cmd).await?),
            None => None,
        };
        let value = self
            .codec
            .encode_command(cmd, &self.kafka.commands_topic)
            .await
            .map_err(|e| ApiError::unavailable(format!("encoding the command: {e}")))?;
        let rec = FutureRecord::to(&self.kafka.commands_topic)
            .key(cmd.timer_id.as_bytes())
            .payload(&value);
        let delivered = self.producer.send(rec, Duration::from_secs(30)).await;
        if let Err((e, _)) = delivered {
            self.forget(cmd);
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
                self.forget(cmd);
                Ok(accepted)
            }
        }
    }

    /// Registers a wait for `cmd`'s result, the results reader positioned (started by
    /// the first wait).
    async fn wait_for(
        &self,
        cmd: &TimerCommand,
    ) -> Result<oneshot::Receiver<CommandResult>, ApiError> {
        self.started.call_once(|| {
            let tx = self.ready_tx.lock().ok().and_then(|mut t| t.take());
            if let Some(tx) = tx {
                let (k, codec, w) = (self.kafka.clone(), self.codec.clone(), self.waiters.clone());
                tokio::spawn(read_results(k, codec, w, tx, self.token.clone()));
            }
        });
        let mut ready = self.ready.clone();
        let up = tokio::time::timeout(READER_START, ready.wait_for(|r| *r)).await;
        if !matches!(up, Ok(Ok(_))) {
            return Err(ApiError::unavailable(
                "the results topic cannot be read yet",
            ));
        }
        let (tx, rx) = oneshot::channel();
        let mut w = lock(&self.waiters);
        w.entry(cmd.timer_id.clone())
            .or_default()
            .push((cmd.request_id.clone(), tx));
        Ok(rx)
    }

    /// Drops the wait for `cmd`'s result.
    fn forget(&self, cmd: &TimerCommand) {
        let mut w = lock(&self.waiters);
        if let Some(list) = w.get_mut(&cmd.timer_id) {
            list.retain(|(rq, _)| *rq != cmd.request_id);
            if list.is_empty() {
                w.remove(&cmd.timer_id);
            }
        }
    }
}

fn lock(w: &Waiters) -> std::sync::MutexGuard<'_, ByTimer> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// Tails the results topic from its end and answers the waiting requests.
async fn read_results(
    kafka: KafkaArgs,
    codec: Arc<Codec>,
    waiters: Waiters,
    ready: watch::Sender<bool>,
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
        // Only results of timers somebody waits for are decoded.
        let key = msg.key().and_then(|k| std::str::from_utf8(k).ok());
        if !key.is_some_and(|k| lock(&waiters).contains_key(k)) {
            continue;
        }
        let Some(Ok(result)) = (match msg.payload() {
            Some(bytes) => Some(codec.decode_result(bytes).await),
            None => None,
        }) else {
            continue;
        };
        deliver(&waiters, result);
    }
}

/// Hands `result` to the request that waits for it, if any.
fn deliver(waiters: &Waiters, result: CommandResult) {
    let (Some(id), Some(rq)) = (result.timer_id.clone(), result.request_id.clone()) else {
        return;
    };
    let mut w = lock(waiters);
    let Some(list) = w.get_mut(&id) else { return };
    let Some(i) = list.iter().position(|(r, _)| *r == rq) else {
        return;
    };
    let (_, tx) = list.swap_remove(i);
    if list.is_empty() {
        w.remove(&id);
    }
    drop(w);
    let _ = tx.send(result);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Outcome;

    fn result(timer: &str, rq: &str) -> CommandResult {
        CommandResult {
            request_id: Some(rq.into()),
            timer_id: Some(timer.into()),
            application: None,
            kind: None,
            outcome: Outcome::Accepted,
            reason: None,
            state: None,
            version: None,
            due_ms: None,
            partition: 0,
            offset: 7,
            processed_at_ms: 0,
        }
    }

    #[test]
    fn a_result_goes_to_the_request_that_waits_for_it() {
        let w: Waiters = Arc::default();
        let (tx1, mut rx1) = oneshot::channel();
        let (tx2, mut rx2) = oneshot::channel();
        lock(&w).insert("t".into(), vec![("r1".into(), tx1), ("r2".into(), tx2)]);
        deliver(&w, result("t", "r2"));
        assert_eq!(rx2.try_recv().unwrap().request_id.as_deref(), Some("r2"));
        assert!(rx1.try_recv().is_err(), "r1 still waits");
        deliver(&w, result("t", "other"));
        deliver(&w, result("u", "r1"));
        assert!(rx1.try_recv().is_err(), "not for r1");
        deliver(&w, result("t", "r1"));
        assert!(rx1.try_recv().is_ok());
        assert!(lock(&w).is_empty(), "no waiter left behind");
    }
}
