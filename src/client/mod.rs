//! Clients: a typed API for Rust programs ([`Command`] builders in `build`, a [`Client`]
//! that sends them and awaits their results in `api`), and the command-line tools built on
//! it: `ktimer send` (produce commands, or delayed records: `delayed`) and `ktimer tail`
//! (read what fired).

mod api;
mod build;
mod delayed;

pub use api::{Client, ClientError, Sent};
pub use build::Command;

use crate::codec::Codec;
use crate::command::{
    CalendarPolicy, Callback, CommandKind, CommandResult, DeliveryMode, MisfirePolicy, TimerCommand,
};
use crate::config::{KafkaArgs, SendArgs, SendFormat, SendKind, SendMisfire, TailArgs, Via};
use crate::kafka;
use crate::now_ms;
use crate::sink::headers;
use anyhow::Context;
use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::io::Read;
use std::time::Duration;

/// `ktimer send`: produces commands and prints where they went (with `--wait-ms`, their
/// results too), through [`Client`].
pub async fn send(args: SendArgs) -> anyhow::Result<()> {
    let mut client = Client::connect(&args.kafka).await?;
    if args.format == SendFormat::Json {
        client = client.json();
    }
    let cmds = match &args.file {
        Some(path) => read_commands(path)?,
        None => commands_from_flags(&args)?,
    };
    if args.via == Via::DelayTopic {
        return delayed::send(&args.kafka, &cmds).await;
    }
    let topic = &args.kafka.commands_topic;
    let sends = cmds.iter().map(|cmd| client.send(cmd));
    let sent = futures::future::join_all(sends).await;
    for (cmd, d) in cmds.iter().zip(sent) {
        let d = d.with_context(|| format!("sending {}", cmd.timer_id))?;
        let due = match (cmd.at_ms, cmd.delay_ms) {
            (Some(at), _) => format!(" due={}", clock(at)),
            (None, Some(d)) => format!(" due=+{d}ms"),
            _ => String::new(),
        };
        println!(
            "sent {} timer={} request={}{due} -> {topic}[{}]@{}",
            cmd.kind.as_str(),
            cmd.timer_id,
            cmd.request_id,
            d.partition,
            d.offset
        );
    }
    Ok(())
}

/// A string unique to this process and moment (request ids, reader group names).
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{:x}{:08x}{}",
        now_ms(),
        nanos ^ std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn commands_from_flags(a: &SendArgs) -> anyhow::Result<Vec<TimerCommand>> {
    let base_id = a
        .timer_id
        .clone()
        .unwrap_or_else(|| format!("t-{}", unique()));
    let kind = match a.kind {
        SendKind::Once => CommandKind::CreateOnce,
        SendKind::Cron | SendKind::Every => CommandKind::CreateCron,
        SendKind::Update => CommandKind::Update,
        SendKind::Pause => CommandKind::Pause,
        SendKind::Resume => CommandKind::Resume,
        SendKind::Cancel => CommandKind::Cancel,
        SendKind::FireNow => CommandKind::FireNow,
    };
    let creates = matches!(kind, CommandKind::CreateOnce | CommandKind::CreateCron);
    if !creates && a.timer_id.is_none() {
        anyhow::bail!("--kind {} needs --timer-id", kind.as_str().to_lowercase());
    }
    if kind == CommandKind::CreateOnce && a.at_ms.is_none() && a.delay_ms.is_none() {
        anyhow::bail!("a one-shot timer needs --at-ms or --delay-ms");
    }
    if matches!(a.kind, SendKind::Cron) && a.cron.is_none() {
        anyhow::bail!("a cron timer needs --cron");
    }
    if matches!(a.kind, SendKind::Every) && a.every_ms.is_none() {
        anyhow::bail!("an interval timer needs --every-ms");
    }
    let schedules = matches!(kind, CommandKind::Update) || creates;
    let new_callback = creates
        || a.callback_topic.is_some()
        || !a.payload.is_empty()
        || a.raw
        || !a.headers.is_empty();
    let now = now_ms();
    let cmds = (0..a.count.max(1))
        .map(|i| {
            let timer_id = if a.count > 1 {
                format!("{base_id}-{}", i + 1)
            } else {
                base_id.clone()
            };
            let shift = a.spread_ms * i64::from(i);
            let when = |v: Option<i64>| v.filter(|_| schedules);
            TimerCommand {
                application: a.application.clone(),
                at_ms: when(a.at_ms.map(|t| t + shift)),
                delay_ms: when(a.delay_ms.map(|d| d + shift)),
                cron: a.cron.clone().filter(|_| schedules),
                every_ms: when(a.every_ms),
                jitter_ms: when(a.jitter_ms),
                calendar: a.calendar.clone().filter(|_| schedules),
                calendar_policy: (schedules && a.defer_excluded).then_some(CalendarPolicy::Defer),
                time_zone: a.time_zone.clone().filter(|_| schedules),
                start_ms: when(a.start_ms),
                end_ms: when(a.end_ms),
                max_fires: when(a.max_fires),
                misfire: a.misfire.filter(|_| schedules).map(|m| match m {
                    SendMisfire::FireOnce => MisfirePolicy::FireOnce,
                    SendMisfire::FireAll => MisfirePolicy::FireAll,
                    SendMisfire::Skip => MisfirePolicy::Skip,
                }),
                callback: (schedules && new_callback).then(|| Callback {
                    topic: a.callback_topic.clone(),
                    key: None,
                    headers: a.headers.iter().cloned().collect(),
                    payload: a.payload.clone().into_bytes(),
                    mode: if a.raw || a.via == Via::DelayTopic {
                        DeliveryMode::Raw
                    } else {
                        DeliveryMode::Envelope
                    },
                }),
                sent_at_ms: Some(now),
                ..TimerCommand::new(kind, &timer_id, &format!("r-{}", unique()))
            }
        })
        .collect();
    Ok(cmds)
}

/// Reads commands from JSON: one object, an array, or one object per line.
fn read_commands(path: &std::path::Path) -> anyhow::Result<Vec<TimerCommand>> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return Ok(serde_json::from_str(trimmed)?);
    }
    serde_json::Deserializer::from_str(trimmed)
        .into_iter::<TimerCommand>()
        .map(|r| r.context("invalid command JSON"))
        .collect()
}

/// `ktimer tail`: prints fired records and results until the count or idle limit.
pub async fn tail(args: TailArgs) -> anyhow::Result<()> {
    let k = &args.kafka;
    let codec = Codec::new(k.schema_registry_url.as_deref())?;
    let topics = if args.topics.is_empty() {
        vec![k.fired_topic.clone(), k.results_topic.clone()]
    } else {
        args.topics.clone()
    };
    let consumer: StreamConsumer = assigned_consumer(k, &topics, args.from_beginning)?;
    eprintln!("tailing {} (ctrl-c to stop)", topics.join(", "));
    let mut seen = 0u64;
    let idle = Duration::from_millis(args.idle_exit_ms.unwrap_or(u64::MAX / 4));
    loop {
        let msg = match tokio::time::timeout(idle, consumer.recv()).await {
            Err(_) => break,
            Ok(m) => m?,
        };
        let line = describe(&codec, &msg, &k.results_topic, now_ms()).await;
        if args.json {
            println!("{}", line.json);
        } else {
            println!("{}", line.text);
        }
        seen += 1;
        if args.count.is_some_and(|c| seen >= c) {
            break;
        }
    }
    Ok(())
}

/// A consumer assigned to every partition of `topics` at their end (or beginning),
/// with the positions resolved before it returns: nothing produced later is missed.
pub fn assigned_consumer<C: Consumer + FromClientConfig>(
    k: &KafkaArgs,
    topics: &[String],
    from_beginning: bool,
) -> anyhow::Result<C> {
    let group = format!("ktimer-tail-{}", unique());
    let consumer: C = kafka::reader(k, &group).create()?;
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        let md = consumer.fetch_metadata(Some(t), Duration::from_secs(10))?;
        let parts: Vec<i32> = md
            .topics()
            .iter()
            .flat_map(|mt| mt.partitions().iter().map(|p| p.id()))
            .collect();
        anyhow::ensure!(!parts.is_empty(), "topic {t:?} does not exist");
        for p in parts {
            let (low, high) = consumer.fetch_watermarks(t, p, Duration::from_secs(10))?;
            let at = if from_beginning { low } else { high };
            tpl.add_partition_offset(t, p, Offset::Offset(at))?;
        }
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

/// One record, described for people and for scripts.
pub struct Described {
    /// Human-readable line.
    pub text: String,
    /// JSON line.
    pub json: serde_json::Value,
}

/// Describes a fired record or a command result received at `received_ms`.
pub async fn describe<M: Message>(
    codec: &Codec,
    msg: &M,
    results_topic: &str,
    received_ms: i64,
) -> Described {
    if msg.topic() == results_topic {
        return match codec.decode_result(msg.payload().unwrap_or_default()).await {
            Ok(r) => describe_result(&r),
            Err(e) => undecodable(msg, &e.to_string()),
        };
    }
    let h = |name: &str| -> Option<String> {
        msg.headers()?
            .iter()
            .find(|x| x.key == name)
            .and_then(|x| x.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let num = |name: &str| h(name).and_then(|v| v.parse::<i64>().ok());
    let (Some(due), Some(fired)) = (num(headers::DUE_MS), num(headers::FIRED_MS)) else {
        return undecodable(msg, "no ktimer headers");
    };
    let payload = msg.payload().unwrap_or_default();
    let body = match codec.decode_fired(payload).await {
        Ok(ev) => ev.payload,
        Err(_) => payload.to_vec(),
    };
    let text_payload = String::from_utf8_lossy(&body);
    let timer = h(headers::TIMER_ID).unwrap_or_default();
    let fire_id = h(headers::FIRE_ID).unwrap_or_default();
    Described {
        text: format!(
            "FIRED  {timer:<24} due {} fired +{}ms received +{}ms payload {:?} ({}[{}]@{})",
            clock(due),
            fired - due,
            received_ms - due,
            text_payload,
            msg.topic(),
            msg.partition(),
            msg.offset()
        ),
        json: serde_json::json!({
            "type": "fired", "timer_id": timer, "fire_id": fire_id, "due_ms": due,
            "fired_ms": fired, "received_ms": received_ms, "payload": text_payload,
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        }),
    }
}

fn describe_result(r: &CommandResult) -> Described {
    let mut text = format!(
        "RESULT {:<24} {} {}",
        r.timer_id.as_deref().unwrap_or("?"),
        r.kind.as_deref().unwrap_or("?"),
        r.outcome.as_str()
    );
    if let Some(s) = &r.state {
        text.push_str(&format!(" state={s}"));
    }
    if let Some(d) = r.due_ms {
        text.push_str(&format!(" due {}", clock(d)));
    }
    if let Some(reason) = &r.reason {
        text.push_str(&format!(" reason: {reason}"));
    }
    Described {
        text,
        json: serde_json::json!({
            "type": "result", "request_id": r.request_id, "timer_id": r.timer_id,
            "kind": r.kind, "outcome": r.outcome, "reason": r.reason, "state": r.state,
            "version": r.version, "due_ms": r.due_ms, "partition": r.partition, "offset": r.offset,
        }),
    }
}

fn undecodable<M: Message>(msg: &M, why: &str) -> Described {
    Described {
        text: format!(
            "OTHER  {}[{}]@{}: {why}",
            msg.topic(),
            msg.partition(),
            msg.offset()
        ),
        json: serde_json::json!({"type": "other", "topic": msg.topic(), "reason": why}),
    }
}

/// `HH:MM:SS.mmmZ` of a Unix ms instant.
fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}
