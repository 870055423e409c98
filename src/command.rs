//! The wire types of ktimer, mirroring `schemas/*.avsc`.
//!
//! [`TimerCommand`], [`CommandResult`] and [`FiredEvent`] serialize to the Avro
//! schemas in `schemas/` and, for hand-written commands, to JSON. [`crate::validate`]
//! turns a decoded command into a [`crate::timer::Op`] the store can apply.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a command asks for. Mirrors the Avro enum `io.ktimer.CommandKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CommandKind {
    /// Create a one-shot timer (at an instant or after a delay).
    #[serde(alias = "create_once")]
    CreateOnce,
    /// Create a cron timer.
    #[serde(alias = "create_cron")]
    CreateCron,
    /// Pause a timer.
    #[serde(alias = "pause")]
    Pause,
    /// Resume a paused timer.
    #[serde(alias = "resume")]
    Resume,
    /// Change a timer's schedule, payload or callback.
    #[serde(alias = "update")]
    Update,
    /// Cancel a timer.
    #[serde(alias = "cancel")]
    Cancel,
    /// One extra fire now, with its own fire id; the schedule stays as it is. Re-drives
    /// a dead-lettered timer (while Redis still holds it, `--retention-ms`).
    #[serde(alias = "fire_now")]
    FireNow,
}

impl CommandKind {
    /// The Avro symbol, as carried in results.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandKind::CreateOnce => "CREATE_ONCE",
            CommandKind::CreateCron => "CREATE_CRON",
            CommandKind::Pause => "PAUSE",
            CommandKind::Resume => "RESUME",
            CommandKind::Update => "UPDATE",
            CommandKind::Cancel => "CANCEL",
            CommandKind::FireNow => "FIRE_NOW",
        }
    }
}

/// Misfire (catch-up) policy of cron timers. Mirrors `io.ktimer.MisfirePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MisfirePolicy {
    /// One late fire, then continue on schedule.
    FireOnce,
    /// Every missed occurrence, in order.
    FireAll,
    /// Drop missed occurrences.
    Skip,
}

/// What a repeating timer does with an occurrence its calendar excludes. Mirrors
/// `io.ktimer.CalendarPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CalendarPolicy {
    /// The occurrence does not fire.
    #[default]
    Skip,
    /// It fires at the first local time after the exclusion.
    Defer,
}

/// How a fire is delivered. Mirrors `io.ktimer.DeliveryMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeliveryMode {
    /// A [`FiredEvent`] record wraps the payload.
    #[default]
    #[serde(alias = "envelope")]
    Envelope,
    /// The payload itself is the record value (a scheduled message).
    #[serde(alias = "raw")]
    Raw,
}

/// Where and what to deliver when a timer fires. Mirrors `io.ktimer.Callback`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Callback {
    /// Callback topic; the service's fired topic when `None`.
    #[serde(default)]
    pub topic: Option<String>,
    /// Record key of the fired record; the timer id when `None`. Text in JSON.
    #[serde(default, with = "opt_bytes")]
    pub key: Option<Vec<u8>>,
    /// Extra headers of the fired record.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Payload delivered when the timer fires. Text in JSON.
    #[serde(default, with = "bytes")]
    pub payload: Vec<u8>,
    /// Envelope or raw payload.
    #[serde(default)]
    pub mode: DeliveryMode,
}

/// A timer command. Mirrors `io.ktimer.TimerCommand`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimerCommand {
    /// Producer-chosen id of this request, echoed in the result.
    pub request_id: String,
    /// Timer id; also the Kafka record key.
    pub timer_id: String,
    /// Owning application (tenant).
    #[serde(default = "default_application")]
    pub application: String,
    /// What the command asks for.
    pub kind: CommandKind,
    /// One-shot: due instant, Unix epoch ms.
    #[serde(default)]
    pub at_ms: Option<i64>,
    /// One-shot: delay from the command record's timestamp, ms.
    #[serde(default)]
    pub delay_ms: Option<i64>,
    /// Cron expression.
    #[serde(default)]
    pub cron: Option<String>,
    /// IANA time zone of the cron expression.
    #[serde(default)]
    pub time_zone: Option<String>,
    /// Cron: no fire before this instant.
    #[serde(default)]
    pub start_ms: Option<i64>,
    /// Cron: no fire after this instant.
    #[serde(default)]
    pub end_ms: Option<i64>,
    /// Cron: stop after this many fires.
    #[serde(default)]
    pub max_fires: Option<i64>,
    /// Cron: misfire policy.
    #[serde(default)]
    pub misfire: Option<MisfirePolicy>,
    /// Delivery target and payload.
    #[serde(default)]
    pub callback: Option<Callback>,
    /// When the producer sent it (informational).
    #[serde(default)]
    pub sent_at_ms: Option<i64>,
    /// Repeating: fire every this many ms from `start_ms` (default: one interval after
    /// the command), instead of `cron`.
    #[serde(default)]
    pub every_ms: Option<i64>,
    /// Any timer: each fire up to this many ms later than its due time, by an offset
    /// fixed by the timer id and the occurrence.
    #[serde(default)]
    pub jitter_ms: Option<i64>,
    /// Repeating: the exclusion calendar (of the applications file) it obeys.
    #[serde(default)]
    pub calendar: Option<String>,
    /// Repeating: skip (default) or defer the occurrences `calendar` excludes.
    #[serde(default)]
    pub calendar_policy: Option<CalendarPolicy>,
}

impl TimerCommand {
    /// A command of `kind` for `timer_id`, application `default`, every optional field empty.
    pub fn new(kind: CommandKind, timer_id: &str, request_id: &str) -> TimerCommand {
        TimerCommand {
            request_id: request_id.into(),
            timer_id: timer_id.into(),
            application: default_application(),
            kind,
            at_ms: None,
            delay_ms: None,
            cron: None,
            time_zone: None,
            start_ms: None,
            end_ms: None,
            max_fires: None,
            misfire: None,
            callback: None,
            sent_at_ms: None,
            every_ms: None,
            jitter_ms: None,
            calendar: None,
            calendar_policy: None,
        }
    }
}

fn default_application() -> String {
    "default".to_string()
}

/// The outcome of a command. Mirrors `io.ktimer.Outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// Applied.
    Accepted,
    /// Applied earlier already; nothing changed.
    Duplicate,
    /// Not applied; `reason` says why.
    Rejected,
}

impl Outcome {
    /// The Avro symbol.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "ACCEPTED",
            Outcome::Duplicate => "DUPLICATE",
            Outcome::Rejected => "REJECTED",
        }
    }

    /// The metric label (`accepted`, `duplicate`, `rejected`).
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Duplicate => "duplicate",
            Outcome::Rejected => "rejected",
        }
    }
}

/// The answer to one command. Mirrors `io.ktimer.CommandResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    /// Request id, when the command could be decoded.
    pub request_id: Option<String>,
    /// Timer id (or the record key when the command could not be decoded).
    pub timer_id: Option<String>,
    /// Application of the command.
    pub application: Option<String>,
    /// Command kind symbol.
    pub kind: Option<String>,
    /// Accepted, duplicate or rejected.
    pub outcome: Outcome,
    /// Why it was rejected.
    pub reason: Option<String>,
    /// Timer state after the command.
    pub state: Option<String>,
    /// Timer version after the command.
    pub version: Option<i64>,
    /// Timer's next due instant.
    pub due_ms: Option<i64>,
    /// Commands-topic partition.
    pub partition: i32,
    /// Commands-topic offset.
    pub offset: i64,
    /// When ktimer processed it.
    pub processed_at_ms: i64,
}

impl CommandResult {
    /// A REJECTED answer to the record at `partition`/`offset`, processed at
    /// `processed_at_ms`; its ids and reason still unset.
    pub fn rejected(partition: i32, offset: i64, processed_at_ms: i64) -> CommandResult {
        CommandResult {
            request_id: None,
            timer_id: None,
            application: None,
            kind: None,
            outcome: Outcome::Rejected,
            reason: None,
            state: None,
            version: None,
            due_ms: None,
            partition,
            offset,
            processed_at_ms,
        }
    }

    /// Copies the identity of `cmd` (request and timer id, application, kind).
    pub fn describe(&mut self, cmd: &TimerCommand) {
        self.request_id = Some(cmd.request_id.clone());
        self.timer_id = Some(cmd.timer_id.clone());
        self.application = Some(cmd.application.clone());
        self.kind = Some(cmd.kind.as_str().to_string());
    }
}

/// The envelope delivered on fire in [`DeliveryMode::Envelope`]. Mirrors `io.ktimer.FiredEvent`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FiredEvent {
    /// `timer_id/version/due_ms`: stable across retries and replays.
    pub fire_id: String,
    /// Timer id.
    pub timer_id: String,
    /// Application.
    pub application: String,
    /// Timer version that fired.
    pub version: i64,
    /// Due instant, Unix epoch ms.
    pub due_ms: i64,
    /// When ktimer produced the record, Unix epoch ms.
    pub fired_ms: i64,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// The timer's payload.
    #[serde(with = "bytes")]
    pub payload: Vec<u8>,
}

/// The stable fire id: `timer_id/version/due_ms`.
pub fn fire_id(timer_id: &str, version: i64, due_ms: i64) -> String {
    format!("{timer_id}/{version}/{due_ms}")
}

/// Serde helpers for `bytes` fields: Avro bytes, or UTF-8 text (or a byte array) in JSON.
mod bytes {
    use serde::{de, Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_any(BytesVisitor)
    }

    pub(super) struct BytesVisitor;

    impl<'de> de::Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("bytes, a string or an array of bytes")
        }
        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
            Ok(v)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.as_bytes().to_vec())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

/// Serde helpers for optional `bytes` fields.
mod opt_bytes {
    use serde::{de, Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&serde_bytes_ref(b)),
            None => s.serialize_none(),
        }
    }

    struct BytesRef<'a>(&'a [u8]);
    impl serde::Serialize for BytesRef<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }
    fn serde_bytes_ref(b: &[u8]) -> BytesRef<'_> {
        BytesRef(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        d.deserialize_option(OptVisitor)
    }

    struct OptVisitor;
    impl<'de> de::Visitor<'de> for OptVisitor {
        type Value = Option<Vec<u8>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("null or bytes")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(super::bytes::BytesVisitor).map(Some)
        }
    }
}
