//! Validation: turns a decoded [`TimerCommand`] into an [`Op`] for the store, or a
//! reason a person can act on.

use crate::command::{Callback, CommandKind, TimerCommand};

/// Limits applied to every command.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest accepted distance between now and a due time, ms.
    pub max_horizon_ms: i64,
    /// Largest accepted payload, bytes.
    pub max_payload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_horizon_ms: 10 * 366 * 24 * 3_600_000,
            max_payload_bytes: 512 * 1024,
        }
    }
}

/// A validated command, ready to be applied to the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create a one-shot timer due at `due_ms`.
    CreateOnce {
        /// Due instant, Unix epoch ms.
        due_ms: i64,
        /// What to deliver.
        def: TimerDef,
    },
    /// Cancel the timer.
    Cancel,
}

/// What a timer delivers when it fires; stored with the timer.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct TimerDef {
    /// Owning application.
    pub application: String,
    /// Callback target and payload.
    pub callback: Callback,
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
    match cmd.kind {
        CommandKind::CreateOnce => {
            let due_ms = due_of(cmd, record_ts_ms)?;
            if due_ms - now_ms > limits.max_horizon_ms {
                return Err(format!(
                    "due time {due_ms} is more than {} days ahead",
                    limits.max_horizon_ms / 86_400_000
                ));
            }
            let callback = cmd.callback.clone().unwrap_or_default();
            check_callback(&callback, limits)?;
            Ok(Op::CreateOnce {
                due_ms,
                def: TimerDef {
                    application: cmd.application.clone(),
                    callback,
                },
            })
        }
        CommandKind::Cancel => Ok(Op::Cancel),
        other => Err(format!(
            "{} is not supported yet by this ktimer version",
            other.as_str()
        )),
    }
}

fn due_of(cmd: &TimerCommand, record_ts_ms: i64) -> Result<i64, String> {
    match (cmd.at_ms, cmd.delay_ms) {
        (Some(_), Some(_)) => Err("set only one of at_ms and delay_ms".into()),
        (None, None) => Err("CREATE_ONCE needs at_ms or delay_ms".into()),
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
        assert!(matches!(
            v(&once(Some(5_000), None)),
            Ok(Op::CreateOnce { due_ms: 5_000, .. })
        ));
        assert!(matches!(
            v(&once(None, Some(20))),
            Ok(Op::CreateOnce { due_ms: 1_020, .. })
        ));
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
}
