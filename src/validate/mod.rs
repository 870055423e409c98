//! Validation: turns a decoded [`TimerCommand`] into an [`Op`] for the store, or a
//! reason a person can act on. Pure: no I/O, the time is an argument.

use crate::allow::AllowList;
use crate::command::{Callback, CommandKind, MisfirePolicy, TimerCommand};
use crate::schedule::{jitter, CronSpec, PlanConfig};
use crate::timer::{Op, Schedule, TimerDef};
use std::sync::Arc;

pub mod tenancy;

pub use crate::timer::MAX_INSTANT_MS;

/// Longest id (timer, request, application), bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Longest cron expression, bytes.
pub const MAX_CRON_BYTES: usize = 256;
/// Longest time zone name, bytes.
pub const MAX_ZONE_BYTES: usize = 64;
/// Most fires a cron timer may be limited to.
pub const MAX_FIRES: i64 = 1_000_000_000;
/// Longest callback record key, bytes.
pub const MAX_KEY_BYTES: usize = 4096;
/// Most callback headers.
pub const MAX_HEADERS: usize = 64;
/// Longest callback header name, bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 256;
/// Longest callback header value, bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;
/// How much of a value a reason echoes.
const ECHO_BYTES: usize = 64;

/// Limits applied to every command, and how cron schedules are materialised.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted distance between now and a due time, ms.
    pub max_horizon_ms: i64,
    /// Largest accepted payload, bytes.
    pub max_payload_bytes: usize,
    /// Cron materialisation window and misfire threshold.
    pub plan: PlanConfig,
    /// ktimer's own topics but the fired topic (commands, results, dead letter, state,
    /// delay): never callback topics.
    pub own_topics: Vec<String>,
    /// Where each application may deliver, when an allow-list is configured.
    pub allow: Option<Arc<AllowList>>,
    /// Per-application settings; their `callbacks` apply when there is no `allow`.
    pub apps: crate::apps::Apps,
    /// The default callback topic (ktimer's fired topic), open to every application.
    pub fired_topic: String,
}

impl From<&crate::config::RunArgs> for Limits {
    fn from(a: &crate::config::RunArgs) -> Limits {
        Limits {
            max_horizon_ms: a.max_horizon_days.saturating_mul(86_400_000),
            max_payload_bytes: a.max_payload_bytes,
            plan: a.into(),
            own_topics: a
                .kafka
                .roles()
                .into_iter()
                .filter(|(role, _)| *role != "fired")
                .map(|(_, name)| name.to_string())
                .collect(),
            allow: a.callback_allow_list.clone(),
            apps: a.applications.clone().unwrap_or_default(),
            fired_topic: a.kafka.fired_topic.clone(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_horizon_ms: 10 * 366 * 24 * 3_600_000,
            max_payload_bytes: 512 * 1024,
            plan: PlanConfig::default(),
            own_topics: ["ktimer.commands", "ktimer.results", "ktimer.dead-letter"]
                .map(String::from)
                .to_vec(),
            allow: None,
            apps: Default::default(),
            fired_topic: "ktimer.fired".into(),
        }
    }
}

/// Checks `cmd` (read from a record with `key` and timestamp `record_ts_ms`) at `now_ms`.
///
/// The record key must be the timer id: the key decides the partition, and a command
/// landing in another partition than its timer would act on nothing.
pub fn validate(
    cmd: &TimerCommand,
    key: Option<&[u8]>,
    record_ts_ms: i64,
    now_ms: i64,
    limits: &Limits,
) -> Result<Op, String> {
    check_id("timer_id", &cmd.timer_id)?;
    check_id("request_id", &cmd.request_id)?;
    check_id("application", &cmd.application)?;
    match key {
        None => return Err("the record has no key; the key must be the timer id".into()),
        Some(k) if k != cmd.timer_id.as_bytes() => {
            return Err(format!(
                "the record key ({}) differs from timer_id ({}); the key must be the timer id so every command of a timer lands in its partition",
                echo(k),
                echo(cmd.timer_id.as_bytes())
            ))
        }
        Some(_) => {}
    }
    check_numbers(cmd, record_ts_ms)?;
    let def = |required: bool| -> Result<Option<TimerDef>, String> {
        let Some(callback) = cmd
            .callback
            .clone()
            .or_else(|| required.then(Callback::default))
        else {
            return Ok(None);
        };
        check_callback(&callback, limits)?;
        check_allowed(&cmd.application, &callback, limits)?;
        Ok(Some(TimerDef {
            application: cmd.application.clone(),
            callback,
        }))
    };
    let schedule = |kind: Option<CommandKind>| schedule_of(cmd, kind, record_ts_ms, now_ms, limits);
    match cmd.kind {
        CommandKind::CreateOnce | CommandKind::CreateCron => Ok(Op::Create {
            schedule: schedule(Some(cmd.kind))?,
            def: def(true)?.unwrap_or_default(),
        }),
        CommandKind::Update => Ok(Op::Update {
            schedule: schedule(None)?,
            def: def(false)?,
        }),
        CommandKind::Pause => Ok(Op::Pause),
        CommandKind::Resume => Ok(Op::Resume {
            origin_ms: record_ts_ms,
        }),
        CommandKind::Cancel => Ok(Op::Cancel),
        CommandKind::FireNow => Ok(Op::FireNow { at_ms: now_ms }),
    }
}

/// The schedule a create (of `kind`) or an update (`None`: whichever fields are set) asks for.
fn schedule_of(
    cmd: &TimerCommand,
    kind: Option<CommandKind>,
    record_ts_ms: i64,
    now_ms: i64,
    limits: &Limits,
) -> Result<Schedule, String> {
    let cron_fields = cmd.cron.is_some()
        || cmd.every_ms.is_some()
        || cmd.calendar.is_some()
        || cmd.calendar_policy.is_some()
        || cmd.time_zone.is_some()
        || cmd.start_ms.is_some()
        || cmd.end_ms.is_some()
        || cmd.max_fires.is_some()
        || cmd.misfire.is_some();
    let once_fields = cmd.at_ms.is_some() || cmd.delay_ms.is_some();
    let cron = match kind {
        Some(CommandKind::CreateCron) => true,
        Some(_) => false,
        None if cron_fields == once_fields => return Err(
            "UPDATE needs the new schedule: cron or every_ms (with their options) or at_ms/delay_ms, not both"
                .into(),
        ),
        None => cron_fields,
    };
    if !cron {
        if cron_fields {
            return Err("cron, every_ms, time_zone, start_ms, end_ms, max_fires, misfire and calendar apply to repeating timers; a one-shot timer always fires, late if it must".into());
        }
        let due_ms = jitter::one_shot(&cmd.timer_id, due_of(cmd, record_ts_ms)?, cmd.jitter_ms)?;
        if due_ms.saturating_sub(now_ms) > limits.max_horizon_ms {
            return Err(format!(
                "due time {due_ms} is more than {} days ahead",
                limits.max_horizon_ms / 86_400_000
            ));
        }
        return Ok(Schedule::Once { due_ms });
    }
    if once_fields {
        return Err(
            "at_ms and delay_ms apply to one-shot timers; a repeating timer takes cron or every_ms"
                .into(),
        );
    }
    let spec = repeating_spec(cmd, record_ts_ms)?;
    let compiled = spec.compile(&cmd.timer_id, limits.apps.calendar_of(&spec))?;
    let after = record_ts_ms.max(spec.start_ms.unwrap_or(i64::MIN)) - 1;
    let first = compiled.plan(after, now_ms, spec.misfire, &limits.plan);
    if first.dues.is_empty() && first.exhausted {
        return Err(format!(
            "the schedule has no occurrence after {}",
            after + 1
        ));
    }
    const CENTURY_MS: i64 = 100 * 366 * 86_400_000;
    let next_ms = first.dues.first().copied().or_else(|| {
        let later = compiled.occurrences(
            first.covered_ms,
            first.covered_ms.saturating_add(CENTURY_MS),
            1,
        );
        later.dues.first().copied()
    });
    Ok(Schedule::Cron {
        spec: Box::new(spec),
        first,
        next_ms,
    })
}

/// The schedule of a repeating timer: its cron expression, or its interval anchored at
/// `start_ms` (default one interval after the command's record timestamp).
fn repeating_spec(cmd: &TimerCommand, record_ts_ms: i64) -> Result<CronSpec, String> {
    CronSpec {
        cron: cmd.cron.clone().unwrap_or_default(),
        time_zone: cmd.time_zone.clone().unwrap_or_else(|| "UTC".into()),
        start_ms: cmd.start_ms,
        end_ms: cmd.end_ms,
        max_fires: cmd.max_fires,
        misfire: cmd.misfire.unwrap_or(MisfirePolicy::FireOnce),
        every_ms: cmd.every_ms,
        jitter_ms: cmd.jitter_ms,
        calendar: cmd.calendar.clone(),
        calendar_policy: cmd.calendar_policy,
    }
    .anchored(record_ts_ms)
}

fn due_of(cmd: &TimerCommand, record_ts_ms: i64) -> Result<i64, String> {
    match (cmd.at_ms, cmd.delay_ms) {
        (Some(_), Some(_)) => Err("set only one of at_ms and delay_ms".into()),
        (None, None) => Err("a one-shot timer needs at_ms or delay_ms".into()),
        (Some(at), None) if at <= 0 => Err(format!(
            "at_ms must be a positive Unix epoch millisecond instant, got {at}"
        )),
        (Some(at), None) => Ok(at),
        (None, Some(d)) if d < 0 => Err(format!("delay_ms must not be negative, got {d}")),
        (None, Some(d)) => record_ts_ms
            .checked_add(d)
            .ok_or_else(|| format!("delay_ms {d} overflows the due time")),
    }
}

/// At most [`ECHO_BYTES`] of `v` for a reason, saying how long it was when cut.
pub fn echo(v: &[u8]) -> String {
    let text = String::from_utf8_lossy(&v[..v.len().min(ECHO_BYTES)]);
    match v.len() > ECHO_BYTES {
        true => format!("{text:?}... ({} bytes)", v.len()),
        false => format!("{text:?}"),
    }
}

/// Bounds every number of the command before any arithmetic uses it.
fn check_numbers(cmd: &TimerCommand, record_ts_ms: i64) -> Result<(), String> {
    let instant = |field: &str, v: Option<i64>, min: i64| match v {
        Some(x) if !(min..=MAX_INSTANT_MS).contains(&x) => Err(format!(
            "{field} must be between {min} and {MAX_INSTANT_MS} (9999-12-31T23:59:59.999Z), got {x}"
        )),
        _ => Ok(()),
    };
    instant("at_ms", cmd.at_ms, 1)?;
    instant("delay_ms", cmd.delay_ms, 0)?;
    instant("start_ms", cmd.start_ms, 0)?;
    instant("end_ms", cmd.end_ms, 0)?;
    instant("the record timestamp", Some(record_ts_ms), 0)?;
    if let Some(m) = cmd.max_fires.filter(|m| !(1..=MAX_FIRES).contains(m)) {
        return Err(format!(
            "max_fires must be between 1 and {MAX_FIRES}, got {m}"
        ));
    }
    let long = |field: &str, v: &Option<String>, max: usize| match v {
        Some(s) if s.len() > max => {
            Err(format!("{field} is longer than {max} bytes ({})", s.len()))
        }
        _ => Ok(()),
    };
    long("cron", &cmd.cron, MAX_CRON_BYTES)?;
    long("time_zone", &cmd.time_zone, MAX_ZONE_BYTES)
}

fn check_id(field: &str, v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if v.len() > MAX_ID_BYTES {
        return Err(format!(
            "{field} is longer than {MAX_ID_BYTES} bytes ({})",
            v.len()
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

/// The callback topic is not one of ktimer's own, and the allow-list lets the
/// application deliver there.
fn check_allowed(app: &str, cb: &Callback, limits: &Limits) -> Result<(), String> {
    let Some(topic) = cb.topic.as_deref().filter(|t| *t != limits.fired_topic) else {
        return Ok(());
    };
    if limits.own_topics.iter().any(|t| t == topic) {
        return Err(format!(
            "callback topic {} is one of ktimer's own topics (commands, results, dead letter, state, delay)",
            echo(topic.as_bytes())
        ));
    }
    let apps = limits.apps.current();
    let list = limits.allow.as_deref().or(apps.callbacks());
    match list {
        Some(allow) if !allow.permits(app, topic) => Err(format!(
            "application {} may not deliver to {} (callback allow-list)",
            echo(app.as_bytes()),
            echo(topic.as_bytes())
        )),
        _ => Ok(()),
    }
}

fn check_callback(cb: &Callback, limits: &Limits) -> Result<(), String> {
    if let Some(topic) = &cb.topic {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
            return Err(format!(
                "callback topic {} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])",
                echo(topic.as_bytes())
            ));
        }
    }
    if cb.payload.len() > limits.max_payload_bytes {
        return Err(format!(
            "payload of {} bytes exceeds the limit of {} bytes",
            cb.payload.len(),
            limits.max_payload_bytes
        ));
    }
    if cb.headers.keys().any(|k| k.starts_with("ktimer-")) {
        return Err("header names starting with ktimer- are reserved".into());
    }
    if cb.key.as_ref().is_some_and(|k| k.len() > MAX_KEY_BYTES) {
        return Err(format!(
            "the callback key is longer than {MAX_KEY_BYTES} bytes"
        ));
    }
    if cb.headers.len() > MAX_HEADERS {
        return Err(format!("more than {MAX_HEADERS} callback headers"));
    }
    for (k, v) in &cb.headers {
        if k.is_empty() || k.len() > MAX_HEADER_NAME_BYTES {
            return Err(format!(
                "header name {} must be 1 to {MAX_HEADER_NAME_BYTES} bytes",
                echo(k.as_bytes())
            ));
        }
        if v.len() > MAX_HEADER_VALUE_BYTES {
            return Err(format!(
                "header {} has a value longer than {MAX_HEADER_VALUE_BYTES} bytes",
                echo(k.as_bytes())
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
