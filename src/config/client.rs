//! `ktimer send` and `ktimer tail`: the command-line client's flags.

use super::{parse_kv, KafkaArgs};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Kind of command `ktimer send` builds from flags.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SendKind {
    /// A one-shot timer (needs --at-ms or --delay-ms).
    Once,
    /// A cron timer (needs --cron).
    Cron,
    /// An interval timer (needs --every-ms; anchored at --start-ms, default one interval
    /// from when ktimer accepts it).
    Every,
    /// Replace the schedule (--cron or --at-ms/--delay-ms) of --timer-id; with
    /// --payload/--callback-topic/--raw/--header also its callback.
    Update,
    /// Pause --timer-id.
    Pause,
    /// Resume --timer-id.
    Resume,
    /// Cancel --timer-id.
    Cancel,
    /// One extra fire of --timer-id now (the schedule unchanged; re-drives a dead letter).
    FireNow,
}

/// Misfire policy flag of `ktimer send`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SendMisfire {
    /// One late fire, then on schedule (the default).
    FireOnce,
    /// Every missed occurrence, in order.
    FireAll,
    /// Drop missed occurrences.
    Skip,
}

/// Where `ktimer send` (and `ktimer bench`) put timers.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// Timer commands on the commands topic (Avro or JSON).
    #[default]
    Commands,
    /// Plain records with `ktimer-*` headers on the delay topic, delivered themselves
    /// (one-shot timers and cancels; RAW delivery).
    DelayTopic,
}

/// Encoding `ktimer send` writes.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq)]
pub enum SendFormat {
    /// Avro (Confluent wire format with a registry, single-object encoding without).
    Avro,
    /// JSON text.
    Json,
}

/// `ktimer send`
#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// Broker and topics.
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Read commands from this JSON file (an object, an array, or one object per line; `-` for stdin).
    #[arg(long, env = "KTIMER_SEND_FILE")]
    pub file: Option<PathBuf>,
    /// Kind of command to build from flags.
    #[arg(long, value_enum, default_value = "once")]
    pub kind: SendKind,
    /// Timer id (default: a fresh id).
    #[arg(long)]
    pub timer_id: Option<String>,
    /// Application (tenant).
    #[arg(long, env = "KTIMER_APPLICATION", default_value = "default")]
    pub application: String,
    /// Due instant, Unix epoch ms.
    #[arg(long, conflicts_with = "delay_ms")]
    pub at_ms: Option<i64>,
    /// Delay from now, ms.
    #[arg(long)]
    pub delay_ms: Option<i64>,
    /// Cron expression: `sec min hour day month weekday [year]` or the 5-field form.
    #[arg(long)]
    pub cron: Option<String>,
    /// Interval timer: fire every this many ms, without drift.
    #[arg(long)]
    pub every_ms: Option<i64>,
    /// Any timer: each fire up to this many ms later, by an offset fixed per timer and fire.
    #[arg(long)]
    pub jitter_ms: Option<i64>,
    /// Repeating: the exclusion calendar (of ktimer's applications file) it obeys.
    #[arg(long)]
    pub calendar: Option<String>,
    /// Repeating: fire what --calendar excludes right after the exclusion (default: skip).
    #[arg(long, requires = "calendar")]
    pub defer_excluded: bool,
    /// IANA time zone of --cron (default UTC).
    #[arg(long)]
    pub time_zone: Option<String>,
    /// Repeating: no fire before this instant (Unix ms); an interval's first fire.
    #[arg(long)]
    pub start_ms: Option<i64>,
    /// Repeating: no fire after this instant (Unix ms).
    #[arg(long)]
    pub end_ms: Option<i64>,
    /// Repeating: stop after this many fires.
    #[arg(long)]
    pub max_fires: Option<i64>,
    /// Cron: what to do with occurrences missed while ktimer could not fire.
    #[arg(long, value_enum)]
    pub misfire: Option<SendMisfire>,
    /// Callback topic (default: the service's fired topic).
    #[arg(long)]
    pub callback_topic: Option<String>,
    /// Payload text.
    #[arg(long, default_value = "")]
    pub payload: String,
    /// Deliver the raw payload instead of the FiredEvent envelope.
    #[arg(long)]
    pub raw: bool,
    /// Extra header of the fired record, `key=value` (repeatable).
    #[arg(long = "header", value_parser = parse_kv)]
    pub headers: Vec<(String, String)>,
    /// Send this many timers (ids suffixed -1, -2, ...), each due `--spread-ms` after the previous.
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Spacing of due times with --count.
    #[arg(long, default_value_t = 0)]
    pub spread_ms: i64,
    /// Encoding to write.
    #[arg(long, value_enum, env = "KTIMER_SEND_FORMAT", default_value = "avro")]
    pub format: SendFormat,
    /// Send timer commands, or plain delayed records with headers to the delay topic
    /// (--delay-topic; one-shot timers and cancels, delivered RAW).
    #[arg(long, value_enum, env = "KTIMER_SEND_VIA", default_value_t)]
    pub via: Via,
}

/// `ktimer tail`
#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    /// Broker and topics.
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Topics to read (default: the fired and results topics).
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    /// Start from the beginning instead of the end.
    #[arg(long)]
    pub from_beginning: bool,
    /// Exit after this many records.
    #[arg(long)]
    pub count: Option<u64>,
    /// Exit after this many ms without a record.
    #[arg(long)]
    pub idle_exit_ms: Option<u64>,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
}
