//! The delay topic's header contract, pure: a Kafka record whose `ktimer-*` headers say
//! when and where becomes a timer command (a one-shot timer that delivers the record
//! itself, or a cancel), or a reason it cannot. No Avro, no client library: any producer
//! that can set headers uses it.
//!
//! | header                | meaning                                                          |
//! |-----------------------|------------------------------------------------------------------|
//! | `ktimer-target-topic` | where the record goes (required unless a tombstone)              |
//! | `ktimer-delay-ms`     | deliver this many ms after the record's timestamp                |
//! | `ktimer-at-ms`        | deliver at this Unix epoch ms instead (exactly one of the two)   |
//! | `ktimer-timer-id`     | the timer's id (default `topic/partition/offset` of the record)  |
//! | `ktimer-application`  | the application (default `default`)                              |
//!
//! A record with a null value (a tombstone) cancels the timer its `ktimer-timer-id` names.
//! Every other `ktimer-*` header is dropped; the rest are delivered with the record.

use crate::command::{Callback, CommandKind, DeliveryMode, TimerCommand};
use crate::validate::echo;
use std::collections::BTreeMap;

/// Header names of the contract.
pub mod names {
    /// Delivery instant, Unix epoch ms (decimal text).
    pub const AT_MS: &str = "ktimer-at-ms";
    /// Delay from the record's timestamp, ms (decimal text).
    pub const DELAY_MS: &str = "ktimer-delay-ms";
    /// The topic the record is delivered to.
    pub const TARGET_TOPIC: &str = "ktimer-target-topic";
    /// The timer id (also the fired record's `ktimer-timer-id`).
    pub const TIMER_ID: &str = crate::sink::headers::TIMER_ID;
    /// The application (also the fired record's `ktimer-application`).
    pub const APPLICATION: &str = crate::sink::headers::APPLICATION;
    /// What every control header starts with.
    pub const PREFIX: &str = "ktimer-";
    /// Every header of the contract (`asyncapi.yaml` describes them; tests/asyncapi.rs).
    pub const ALL: [&str; 5] = [TARGET_TOPIC, AT_MS, DELAY_MS, TIMER_ID, APPLICATION];
}

/// How far before the record's timestamp `ktimer-at-ms` may lie: further back is refused
/// (seconds sent for milliseconds, or a stale instant), nearer fires at once.
pub const MAX_PAST_MS: i64 = 3_600_000;

/// A record of the delay topic, as the consumer read it.
#[derive(Debug, Clone)]
pub struct DelayRecord<'a> {
    /// Where it was read: topic, partition, offset.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (create or log-append time), Unix epoch ms.
    pub timestamp_ms: i64,
    /// Its key.
    pub key: Option<&'a [u8]>,
    /// Its value; `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// Its headers in order: name, value (`None`: a null header value).
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

impl DelayRecord<'_> {
    /// `topic/partition/offset`: the record's identity, its request id, and its timer id
    /// when the headers name none (so a record read twice is the same command).
    pub fn origin(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
    }
}

/// A record that cannot become a command: the command as far as it was read (ids, kind)
/// for the result, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The ids and kind the result reports.
    pub command: Box<TimerCommand>,
    /// Why, for a person.
    pub reason: String,
}

/// The control headers of a record, each at most once, and the others.
#[derive(Default)]
struct Split<'a> {
    control: BTreeMap<&'a str, &'a [u8]>,
    headers: BTreeMap<String, String>,
}

/// The command record `r` asks for: a one-shot RAW create delivering its key, value and
/// headers to the target topic, or a cancel (a tombstone); else a refusal.
pub fn command(r: &DelayRecord) -> Result<TimerCommand, Refusal> {
    let origin = r.origin();
    let kind = match r.value {
        Some(_) => CommandKind::CreateOnce,
        None => CommandKind::Cancel,
    };
    let mut cmd = TimerCommand::new(kind, &origin, &origin);
    cmd.sent_at_ms = Some(r.timestamp_ms);
    let refuse = |cmd: &TimerCommand, reason: String| Refusal {
        command: Box::new(cmd.clone()),
        reason,
    };
    let split = split(&r.headers).map_err(|e| refuse(&cmd, e))?;
    if let Some(id) = split.control.get(names::TIMER_ID) {
        cmd.timer_id = text(names::TIMER_ID, id).map_err(|e| refuse(&cmd, e))?;
    }
    if let Some(app) = split.control.get(names::APPLICATION) {
        cmd.application = text(names::APPLICATION, app).map_err(|e| refuse(&cmd, e))?;
    }
    let Some(value) = r.value else {
        if !split.control.contains_key(names::TIMER_ID) {
            let why = format!(
                "a tombstone cancels the timer its {} header names; this one names none",
                names::TIMER_ID
            );
            return Err(refuse(&cmd, why));
        }
        return Ok(cmd);
    };
    cmd.at_ms = Some(due(r.timestamp_ms, &split.control).map_err(|e| refuse(&cmd, e))?);
    let Some(target) = split.control.get(names::TARGET_TOPIC) else {
        let why = format!("a delayed record needs the {} header", names::TARGET_TOPIC);
        return Err(refuse(&cmd, why));
    };
    cmd.callback = Some(Callback {
        topic: Some(text(names::TARGET_TOPIC, target).map_err(|e| refuse(&cmd, e))?),
        key: r.key.map(<[u8]>::to_vec),
        headers: split.headers,
        payload: value.to_vec(),
        mode: DeliveryMode::Raw,
    });
    Ok(cmd)
}

/// The delay-topic record that asks for `cmd`, a one-shot create or a cancel: its value
/// (`None`: a tombstone) and headers, the inverse of [`command`] (`ktimer send --via
/// delay-topic`, the bench). A create without a callback topic targets `fired_topic`;
/// the record's key (the delivered key) is the callback's, else the timer id.
pub fn record_of(cmd: &TimerCommand, fired_topic: &str) -> Result<Delayable, String> {
    let mut headers = vec![
        (names::TIMER_ID.to_string(), cmd.timer_id.clone()),
        (names::APPLICATION.to_string(), cmd.application.clone()),
    ];
    // Keyed by the timer id unless the callback names a key: a timer's records then share
    // a delay partition, and a cancel cannot overtake the record it cancels.
    let id_key = Some(cmd.timer_id.as_bytes().to_vec());
    if cmd.kind == CommandKind::Cancel {
        return Ok(Delayable {
            key: id_key,
            value: None,
            headers,
        });
    }
    let (CommandKind::CreateOnce, Some(cb)) = (cmd.kind, &cmd.callback) else {
        return Err(format!(
            "the delay topic takes one-shot creates (with a callback) and cancels, not {}",
            cmd.kind.as_str()
        ));
    };
    if cb.mode != DeliveryMode::Raw {
        return Err("the delay topic delivers the record itself: RAW mode only".into());
    }
    let when = match (cmd.at_ms, cmd.delay_ms) {
        (Some(at), None) => (names::AT_MS, at),
        (None, Some(d)) => (names::DELAY_MS, d),
        _ => return Err("a one-shot timer needs one of at_ms and delay_ms".into()),
    };
    headers.push((when.0.to_string(), when.1.to_string()));
    let target = cb.topic.as_deref().unwrap_or(fired_topic);
    headers.push((names::TARGET_TOPIC.to_string(), target.to_string()));
    headers.extend(cb.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(Delayable {
        key: cb.key.clone().or(id_key),
        value: Some(cb.payload.clone()),
        headers,
    })
}

/// A record for the delay topic ([`record_of`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Delayable {
    /// Its key: the delivered record's.
    pub key: Option<Vec<u8>>,
    /// Its value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Its headers, the control headers first.
    pub headers: Vec<(String, String)>,
}

impl Delayable {
    /// Its headers as a Kafka record carries them.
    pub fn kafka_headers(&self) -> rdkafka::message::OwnedHeaders {
        let h = rdkafka::message::OwnedHeaders::new_with_capacity(self.headers.len());
        self.headers
            .iter()
            .fold(h, |h, (k, v)| h.insert(crate::sink::record::header(k, v)))
    }
}

/// Separates the control headers from the ones delivered; refuses a header the
/// delivered record could not carry as it came (null, not UTF-8, repeated).
fn split<'a>(headers: &[(&'a str, Option<&'a [u8]>)]) -> Result<Split<'a>, String> {
    let mut out = Split::default();
    for (name, value) in headers {
        if let Some(known) = control(name) {
            let v = value.unwrap_or_default();
            if out.control.insert(known, v).is_some() {
                return Err(format!("header {name} appears more than once"));
            }
            continue;
        }
        if name.starts_with(names::PREFIX) {
            // ktimer's own headers of an earlier delivery: dropped, set anew on this one.
            continue;
        }
        let Some(v) = value else {
            return Err(format!(
                "header {} has a null value; delayed records carry text headers",
                echo(name.as_bytes())
            ));
        };
        let Ok(v) = std::str::from_utf8(v) else {
            return Err(format!(
                "header {} is not UTF-8 text; delayed records carry text headers",
                echo(name.as_bytes())
            ));
        };
        if out
            .headers
            .insert(name.to_string(), v.to_string())
            .is_some()
        {
            return Err(format!(
                "header {} appears more than once; delayed records carry each header once",
                echo(name.as_bytes())
            ));
        }
    }
    Ok(out)
}

/// The contract's name for header `name`, if it is a control header.
fn control(name: &str) -> Option<&'static str> {
    [
        names::AT_MS,
        names::DELAY_MS,
        names::TARGET_TOPIC,
        names::TIMER_ID,
        names::APPLICATION,
    ]
    .into_iter()
    .find(|n| *n == name)
}

/// Header `name`'s value as text.
fn text(name: &str, v: &[u8]) -> Result<String, String> {
    match std::str::from_utf8(v) {
        Ok(s) => Ok(s.to_string()),
        Err(_) => Err(format!("header {name} is not UTF-8 text: {}", echo(v))),
    }
}

/// Header `name`'s value as a decimal integer.
fn number(name: &str, v: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("header {name} is not a decimal integer: {}", echo(v)))
}

/// The due instant: `ktimer-at-ms`, or `ktimer-delay-ms` after the record's timestamp.
fn due(timestamp_ms: i64, control: &BTreeMap<&str, &[u8]>) -> Result<i64, String> {
    match (control.get(names::AT_MS), control.get(names::DELAY_MS)) {
        (Some(_), Some(_)) => Err(format!(
            "set one of {} and {}, not both",
            names::AT_MS,
            names::DELAY_MS
        )),
        (None, None) => Err(format!(
            "a delayed record needs {} or {}",
            names::DELAY_MS,
            names::AT_MS
        )),
        (Some(at), None) => {
            let at = number(names::AT_MS, at)?;
            if at < timestamp_ms.saturating_sub(MAX_PAST_MS) {
                return Err(format!(
                    "{} {at} is more than {} s before the record's timestamp {timestamp_ms} (milliseconds, not seconds?)",
                    names::AT_MS,
                    MAX_PAST_MS / 1000
                ));
            }
            Ok(at)
        }
        (None, Some(d)) => {
            let d = number(names::DELAY_MS, d)?;
            if d < 0 {
                return Err(format!("{} must not be negative, got {d}", names::DELAY_MS));
            }
            timestamp_ms
                .checked_add(d)
                .ok_or_else(|| format!("{} {d} overflows the due time", names::DELAY_MS))
        }
    }
}

#[cfg(test)]
#[path = "contract_tests.rs"]
mod tests;
