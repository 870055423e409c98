//! The bench's load: timer commands produced at a chosen rate, to the commands topic or
//! as delayed records to the delay topic.

use super::observe::Progress;
use crate::codec::Codec;
use crate::command::{Callback, CommandKind, DeliveryMode, TimerCommand};
use crate::config::{KafkaArgs, Via};
use crate::delay::contract::record_of;
use crate::kafka;
use crate::now_ms;
use crate::sink::{delivered, enqueue};
use anyhow::Context;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A set of one-shot timers: ids `prefix{i}`, due at `dues[i]`, delivering `payload`
/// raw to `callback`.
pub struct Plan {
    /// Timer id prefix.
    pub prefix: String,
    /// Due time of each timer, Unix ms.
    pub dues: Arc<Vec<i64>>,
    /// Payload of every timer.
    pub payload: Vec<u8>,
    /// Callback topic.
    pub callback: String,
}

impl Plan {
    /// The create command of timer `i`.
    pub fn create(&self, i: usize) -> TimerCommand {
        let id = format!("{}{i}", self.prefix);
        let mut cmd = TimerCommand::new(CommandKind::CreateOnce, &id, &id);
        cmd.at_ms = Some(self.dues[i]);
        cmd.callback = Some(Callback {
            topic: Some(self.callback.clone()),
            payload: self.payload.clone(),
            mode: DeliveryMode::Raw,
            ..Callback::default()
        });
        cmd
    }

    /// The cancel command of timer `i`.
    pub fn cancel(&self, i: usize) -> TimerCommand {
        let id = format!("{}{i}", self.prefix);
        TimerCommand::new(CommandKind::Cancel, &id, &format!("{id}-cancel"))
    }
}

/// How producing went.
#[derive(Debug)]
pub struct Produced {
    /// When the first command was produced, Unix ms.
    pub started_ms: i64,
    /// When the broker had acknowledged the last, Unix ms.
    pub finished_ms: i64,
    /// Commands the broker did not take, and the first error.
    pub failed: usize,
    /// The first production error.
    pub first_error: Option<String>,
}

/// The bench's producer of commands (idempotent, batching).
pub fn producer(kafka: &KafkaArgs) -> anyhow::Result<FutureProducer> {
    kafka::bulk_producer(kafka)
        .create()
        .context("creating the bench producer")
}

/// `producer`, once it read the metadata of `topics`. The bench makes its producers so,
/// once per run, before any timed phase: a fresh producer's first records waited 0.5 to
/// 1 s for the broker (its producer id, the topic's leader), which a short `--lead-ms`
/// counted as late fires, and a pipe's rate as slowness.
pub async fn ready(producer: FutureProducer, topics: &[&str]) -> anyhow::Result<FutureProducer> {
    use rdkafka::producer::Producer;
    for topic in topics {
        let (p, t) = (producer.clone(), topic.to_string());
        tokio::task::spawn_blocking(move || {
            p.client()
                .fetch_metadata(Some(&t), Duration::from_secs(10))
                .map(|_| ())
        })
        .await?
        .with_context(|| format!("reading the metadata of {topic}"))?;
    }
    Ok(producer)
}

/// One record to produce.
pub struct Rec {
    /// Key.
    pub key: String,
    /// Value; `None`: a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers, if any.
    pub headers: Option<OwnedHeaders>,
}

/// Produces `n` commands `make(i)` with the run's producer (`env.commands`) via the
/// commands topic (encoded as `codec` encodes them) or the delay topic (as plain records
/// with headers), as `env.via` says, at most `rate` per second (0: as fast as the
/// producer takes them), and waits until the broker acknowledged them all.
pub async fn produce_commands(
    env: &super::setup::Env,
    codec: &Codec,
    n: usize,
    rate: u64,
    progress: &Progress,
    make: impl Fn(usize) -> TimerCommand,
) -> anyhow::Result<Produced> {
    let (producer, kafka) = (&env.commands, &env.kafka);
    if env.via == Via::DelayTopic {
        let topic = kafka.delay_topic.as_str();
        return produce(producer, topic, n, rate, progress, |i| {
            let rec = delayed(&make(i), &kafka.fired_topic);
            async move { rec }
        })
        .await;
    }
    let topic = kafka.commands_topic.as_str();
    produce(producer, topic, n, rate, progress, |i| {
        let cmd = make(i);
        async move {
            let value = codec.encode_command(&cmd, topic).await?;
            Ok(Rec {
                key: cmd.timer_id,
                value: Some(value),
                headers: None,
            })
        }
    })
    .await
}

/// The delay-topic record of `cmd`, keyed by its timer id (also the delivered key).
fn delayed(cmd: &TimerCommand, fired_topic: &str) -> anyhow::Result<Rec> {
    let d = record_of(cmd, fired_topic).map_err(anyhow::Error::msg)?;
    Ok(Rec {
        key: cmd.timer_id.clone(),
        headers: Some(d.kafka_headers()),
        value: d.value,
    })
}

/// Produces `n` records `make(i)` to `topic`, at most `rate` per second (0: as fast as
/// the producer takes them), and waits until the broker acknowledged them all.
pub async fn produce<F>(
    producer: &FutureProducer,
    topic: &str,
    n: usize,
    rate: u64,
    progress: &Progress,
    make: impl Fn(usize) -> F,
) -> anyhow::Result<Produced>
where
    F: std::future::Future<Output = anyhow::Result<Rec>>,
{
    let mut acks = FuturesUnordered::new();
    let mut out = Produced {
        started_ms: now_ms(),
        finished_ms: 0,
        failed: 0,
        first_error: None,
    };
    let settle = |r: Result<_, _>, out: &mut Produced| {
        if let Err(e) = r {
            out.failed += 1;
            out.first_error.get_or_insert_with(|| format!("{e}"));
        }
    };
    let start = tokio::time::Instant::now();
    // Paced in steps of a millisecond's records (as a trigger sends, a due ms at a time),
    // at most 64.
    let step = (rate as usize / 1000).clamp(1, 64);
    for i in 0..n {
        if rate > 0 && i % step == 0 {
            let at = start + Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::time::sleep_until(at).await;
        }
        let r = make(i).await?;
        let mut rec = FutureRecord::<[u8], [u8]>::to(topic).key(r.key.as_bytes());
        if let Some(v) = &r.value {
            rec = rec.payload(v);
        }
        if let Some(h) = r.headers {
            rec = rec.headers(h);
        }
        let sent = enqueue(producer, rec).await.context("producing")?;
        acks.push(delivered(sent));
        progress.produced.fetch_add(1, Ordering::Relaxed);
        while let Some(Some(r)) = acks.next().now_or_never() {
            settle(r, &mut out);
        }
    }
    while let Some(r) = acks.next().await {
        settle(r, &mut out);
    }
    out.finished_ms = now_ms();
    Ok(out)
}
