//! Validation: turns a decoded [`TimerCommand`] into an [`Op`] for the store, or a
//! reason a person can act on. Pure: no I/O, the time is an argument.

use crate::command::{Callback, CommandKind, MisfirePolicy, TimerCommand};
use crate::schedule::{CronSpec, PlanConfig};
use crate::timer::{Op, Schedule, TimerDef};

/// Limits applied to every command, and how cron schedules are materialised.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted distance between now and a due time, ms.
    pub max_horizon_ms: i64,
    /// Largest accepted payload, bytes.
    pub max_payload_bytes: usize,
    /// Cron materialisation window and misfire threshold.
    pub plan: PlanConfig,
}

impl From<&crate::config::RunArgs> for Limits {
    fn from(a: &crate::config::RunArgs) -> Limits {
        Limits {
            max_horizon_ms: a.max_horizon_days.saturating_mul(86_400_000),
            max_payload_bytes: a.max_payload_bytes,
            plan: a.into(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_horizon_ms: 10 * 366 * 24 * 3_600_000,
            max_payload_bytes: 512 * 1024,
            plan: PlanConfig::default(),
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
                "the record key ({:?}) differs from timer_id ({:?}); the key must be the timer id so every command of a timer lands in its partition",
                String::from_utf8_lossy(k),
                cmd.timer_id
            ))
        }
        Some(_) => {}
    }
    let def = |required: bool| -> Result<Option<TimerDef>, String> {
        let Some(callback) = cmd
            .callback
            .clone()
            .or_else(|| required.then(Callback::default))
        else {
            return Ok(None);
        };
        check_callback(&callback, limits)?;
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
            "UPDATE needs the new schedule: cron (with its options) or at_ms/delay_ms, not both"
                .into(),
        ),
        None => cron_fields,
    };
    if !cron {
        if cron_fields {
            return Err("cron, time_zone, start_ms, end_ms, max_fires and misfire apply to cron timers; a one-shot timer always fires, late if it must".into());
        }
        let due_ms = due_of(cmd, record_ts_ms)?;
        if due_ms - now_ms > limits.max_horizon_ms {
            return Err(format!(
                "due time {due_ms} is more than {} days ahead",
                limits.max_horizon_ms / 86_400_000
            ));
        }
        return Ok(Schedule::Once { due_ms });
    }
    if once_fields {
        return Err("at_ms and delay_ms apply to one-shot timers; a cron timer takes cron".into());
    }
    let Some(expr) = cmd.cron.clone() else {
        return Err("CREATE_CRON needs cron".into());
    };
    let spec = CronSpec {
        cron: expr,
        time_zone: cmd.time_zone.clone().unwrap_or_else(|| "UTC".into()),
        start_ms: cmd.start_ms,
        end_ms: cmd.end_ms,
        max_fires: cmd.max_fires,
        misfire: cmd.misfire.unwrap_or(MisfirePolicy::FireOnce),
    };
    let compiled = spec.compile()?;
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
        let later = compiled.occurrences(first.covered_ms, first.covered_ms + CENTURY_MS, 1);
        later.dues.first().copied()
    });
    Ok(Schedule::Cron {
        spec,
        first,
        next_ms,
    })
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

fn check_id(field: &str, v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if v.len() > 256 {
        return Err(format!("{field} is longer than 256 bytes"));
    }
    if v.chars().any(char::is_control) {
        return Err(format!("{field} must not contain control characters"));
    }
    Ok(())
}

fn check_callback(cb: &Callback, limits: &Limits) -> Result<(), String> {
    if let Some(topic) = &cb.topic {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
            return Err(format!(
                "callback topic {topic:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])"
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn once(at: Option<i64>, delay: Option<i64>) -> TimerCommand {
        TimerCommand {
            application: "a".into(),
            at_ms: at,
            delay_ms: delay,
            ..TimerCommand::new(CommandKind::CreateOnce, "t", "r")
        }
    }

    #[test]
    fn due_times() {
        let l = Limits::default();
        let v = |c: &TimerCommand| validate(c, Some(b"t"), 1_000, 1_000, &l);
        let due = |c: &TimerCommand| match v(c) {
            Ok(Op::Create { schedule, .. }) => schedule.first_due(),
            other => panic!("{other:?}"),
        };
        assert_eq!(due(&once(Some(5_000), None)), Some(5_000));
        assert_eq!(due(&once(None, Some(20))), Some(1_020));
        assert!(v(&once(Some(0), None)).unwrap_err().contains("positive"));
        assert!(v(&once(None, Some(-1))).unwrap_err().contains("negative"));
        assert!(v(&once(None, None)).unwrap_err().contains("needs"));
        assert!(v(&once(Some(1), Some(1))).unwrap_err().contains("only one"));
        assert!(v(&once(None, Some(i64::MAX)))
            .unwrap_err()
            .contains("overflows"));
        assert!(v(&once(Some(i64::MAX), None))
            .unwrap_err()
            .contains("days ahead"));
    }

    #[test]
    fn key_must_be_timer_id() {
        let l = Limits::default();
        let c = once(Some(5), None);
        assert!(validate(&c, None, 0, 0, &l).unwrap_err().contains("no key"));
        assert!(validate(&c, Some(b"x"), 0, 0, &l)
            .unwrap_err()
            .contains("differs"));
    }

    fn cron_cmd(kind: CommandKind, expr: &str) -> TimerCommand {
        TimerCommand {
            cron: Some(expr.into()),
            ..TimerCommand::new(kind, "t", "r")
        }
    }

    #[test]
    fn cron_and_lifecycle_commands() {
        let l = Limits::default();
        let now = 1_800_000_000_000; // a whole second
        let v = |c: &TimerCommand| validate(c, Some(b"t"), now, now, &l);
        match v(&cron_cmd(CommandKind::CreateCron, "*/5 * * * * *")) {
            Ok(Op::Create {
                schedule: Schedule::Cron { spec, first, .. },
                ..
            }) => {
                assert_eq!(spec.time_zone, "UTC");
                assert_eq!(spec.misfire, MisfirePolicy::FireOnce);
                // From the record's timestamp on (inclusive), an hour ahead.
                assert_eq!(first.dues.first(), Some(&now));
                assert_eq!(first.dues.len(), 721);
            }
            other => panic!("{other:?}"),
        }
        let err = |c: TimerCommand| v(&c).unwrap_err();
        assert!(err(cron_cmd(CommandKind::CreateCron, "nope")).contains("invalid cron"));
        assert!(err(TimerCommand {
            time_zone: Some("Europe/Nowhere".into()),
            ..cron_cmd(CommandKind::CreateCron, "* * * * *")
        })
        .contains("unknown time zone"));
        assert!(err(TimerCommand {
            start_ms: Some(now + 10),
            end_ms: Some(now),
            ..cron_cmd(CommandKind::CreateCron, "* * * * *")
        })
        .contains("before start"));
        assert!(err(TimerCommand {
            end_ms: Some(now - 1),
            ..cron_cmd(CommandKind::CreateCron, "* * * * *")
        })
        .contains("no occurrence"));
        assert!(err(TimerCommand {
            at_ms: Some(now),
            ..cron_cmd(CommandKind::CreateCron, "* * * * *")
        })
        .contains("one-shot"));
        assert!(err(TimerCommand {
            misfire: Some(MisfirePolicy::Skip),
            ..once(Some(now), None)
        })
        .contains("cron timers"));
        assert!(err(TimerCommand::new(CommandKind::CreateCron, "t", "r")).contains("needs cron"));
        // UPDATE takes one schedule, of either kind; the callback is optional.
        assert!(err(TimerCommand::new(CommandKind::Update, "t", "r")).contains("UPDATE needs"));
        assert!(matches!(
            v(&cron_cmd(CommandKind::Update, "0 * * * * *")),
            Ok(Op::Update {
                schedule: Schedule::Cron { .. },
                def: None
            })
        ));
        assert!(matches!(
            v(&TimerCommand {
                kind: CommandKind::Update,
                ..once(None, Some(5))
            }),
            Ok(Op::Update {
                schedule: Schedule::Once { due_ms },
                def: None
            }) if due_ms == now + 5
        ));
        assert_eq!(
            v(&TimerCommand::new(CommandKind::Resume, "t", "r")),
            Ok(Op::Resume { origin_ms: now })
        );
    }
}
