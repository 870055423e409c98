//! `ktimer send --via delay-topic`: timers as plain records with `ktimer-*` headers on the
//! delay topic (what any producer can send without a schema), printed with their headers.

use crate::command::TimerCommand;
use crate::config::KafkaArgs;
use crate::delay::contract::record_of;
use crate::kafka;
use anyhow::Context;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::Duration;

/// Produces each of `cmds` (one-shot creates and cancels) to the delay topic as the
/// record that asks for it.
pub async fn send(k: &KafkaArgs, cmds: &[TimerCommand]) -> anyhow::Result<()> {
    anyhow::ensure!(
        !k.delay_topic.is_empty(),
        "--via delay-topic needs --delay-topic"
    );
    let producer: FutureProducer = kafka::producer(k).create()?;
    for cmd in cmds {
        let d = record_of(cmd, &k.fired_topic).map_err(anyhow::Error::msg)?;
        let mut rec = FutureRecord::<[u8], [u8]>::to(&k.delay_topic).headers(d.kafka_headers());
        if let Some(key) = &d.key {
            rec = rec.key(key);
        }
        if let Some(value) = &d.value {
            rec = rec.payload(value);
        }
        let sent = producer
            .send(rec, Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .with_context(|| format!("sending {} to {}", cmd.timer_id, k.delay_topic))?;
        let shown: Vec<String> = d.headers.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let what = if d.value.is_some() {
            "record"
        } else {
            "tombstone"
        };
        println!(
            "sent {what} timer={} -> {}[{}]@{} headers: {}",
            cmd.timer_id,
            k.delay_topic,
            sent.partition,
            sent.offset,
            shown.join(" ")
        );
    }
    Ok(())
}
