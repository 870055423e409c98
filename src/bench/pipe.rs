//! The pass-through baseline: a plain consume-then-produce pipe of records shaped like
//! fired records, with ktimer's own producer settings, on the same broker.
//!
//! It is what a fire would cost if ktimer did nothing but pass a record through Kafka:
//! ktimer's fire rate divided by the pipe's is the fraction of that physical limit it
//! reaches.

use super::load::{self, Produced, Rec};
use super::observe::Progress;
use crate::client::assigned_consumer;
use crate::config::KafkaArgs;
use crate::sink::{delivered, enqueue, headers};
use anyhow::Context;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

/// Fills `topic` with `n` records like the fired records of timers `prefix{i}` (same
/// key, `payload`, and the eight ktimer headers) through `producer`, at most `rate` per
/// second (0: as fast as it takes them).
pub async fn fill(
    producer: &FutureProducer,
    (topic, rate): (&str, u64),
    n: usize,
    prefix: &str,
    payload: &[u8],
    progress: &Progress,
) -> anyhow::Result<Produced> {
    let now = crate::now_ms().to_string();
    load::produce(producer, topic, n, rate, progress, |i| {
        let key = format!("{prefix}{i}");
        let fire_id = format!("{key}/{i}/{now}");
        let h = [
            (headers::FIRE_ID, fire_id.as_str()),
            (headers::TIMER_ID, key.as_str()),
            (headers::APPLICATION, "default"),
            (headers::DUE_MS, now.as_str()),
            (headers::FIRED_MS, now.as_str()),
            (headers::ATTEMPT, "1"),
            (headers::INSTANCE, "bench/0"),
            (headers::EPOCH, now.as_str()),
        ]
        .into_iter()
        .fold(OwnedHeaders::new_with_capacity(8), |h, (key, v)| {
            h.insert(Header {
                key,
                value: Some(v),
            })
        });
        let value = payload.to_vec();
        async move {
            Ok(Rec {
                key,
                value: Some(value),
                headers: Some(h),
            })
        }
    })
    .await
}

/// Copies the first `n` records of `from` to `to` (key, value, headers) with `producer`
/// (ktimer's producer settings, made before: [`load::ready`]), and returns once the
/// broker acknowledged all of them: when it took the first one from `from`, Unix ms (a
/// pipe's rate runs from there: not its consumer's start, which ktimer's warm intake
/// never pays).
pub async fn run(
    kafka: &KafkaArgs,
    producer: &FutureProducer,
    (from, to): (&str, &str),
    n: usize,
) -> anyhow::Result<i64> {
    let consumer: StreamConsumer = assigned_consumer(kafka, &[from.to_string()], true)?;
    let mut acks = FuturesUnordered::new();
    let mut failed = 0usize;
    let mut first_ms = None;
    for _ in 0..n {
        let m = consumer.recv().await.context("the pipe's consumer")?;
        first_ms.get_or_insert_with(crate::now_ms);
        let mut rec = FutureRecord::<[u8], [u8]>::to(to)
            .key(m.key().unwrap_or_default())
            .payload(m.payload().unwrap_or_default());
        if let Some(h) = m.headers() {
            rec = rec.headers(h.detach());
        }
        let sent = enqueue(producer, rec)
            .await
            .context("the pipe's producer")?;
        acks.push(delivered(sent));
        while let Some(Some(r)) = acks.next().now_or_never() {
            failed += usize::from(r.is_err());
        }
    }
    while let Some(r) = acks.next().await {
        failed += usize::from(r.is_err());
    }
    anyhow::ensure!(failed == 0, "the pipe failed to produce {failed} records");
    Ok(first_ms.unwrap_or_else(crate::now_ms))
}
