//! Builders of the timer commands the tests send.

use ktimer::command::{Callback, CommandKind, TimerCommand};

/// A one-shot create command due at `at_ms`, with `payload`.
pub fn once_at(timer_id: &str, at_ms: i64, payload: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        at_ms: Some(at_ms),
        callback: Some(Callback {
            payload: payload.as_bytes().to_vec(),
            ..Default::default()
        }),
        ..TimerCommand::new(
            CommandKind::CreateOnce,
            timer_id,
            &format!("req-{timer_id}"),
        )
    }
}

/// A one-shot create whose fired record (26 kB of payload and headers) a producer with
/// `message.max.bytes=20000` refuses. The intake refuses it under that limit; accepted
/// before the limit was lowered ([`super::TestEnv::accept_then_limit`]), no retry can
/// deliver it, so it is dead-lettered.
pub fn undeliverable(timer_id: &str, at_ms: i64) -> TimerCommand {
    let mut doomed = once_at(timer_id, at_ms, "");
    let cb = doomed.callback.as_mut().unwrap();
    cb.payload = vec![b'p'; 10_000];
    cb.headers = (0..4)
        .map(|i| (format!("h{i}"), "v".repeat(4_000)))
        .collect();
    doomed
}

/// A cancel command.
pub fn cancel(timer_id: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        ..TimerCommand::new(CommandKind::Cancel, timer_id, &format!("cancel-{timer_id}"))
    }
}

/// A cron create command delivering `payload` raw, every occurrence of `cron` (UTC).
pub fn cron(timer_id: &str, cron: &str, payload: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        cron: Some(cron.into()),
        callback: Some(Callback {
            payload: payload.as_bytes().to_vec(),
            mode: ktimer::command::DeliveryMode::Raw,
            ..Default::default()
        }),
        ..TimerCommand::new(
            CommandKind::CreateCron,
            timer_id,
            &format!("req-{timer_id}"),
        )
    }
}

/// A command of `kind` (pause, resume, cancel...) for `timer_id`; `tag` makes the request id.
pub fn lifecycle(kind: CommandKind, timer_id: &str, tag: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        ..TimerCommand::new(kind, timer_id, &format!("{tag}-{timer_id}"))
    }
}
