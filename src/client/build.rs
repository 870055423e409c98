//! Typed builders of timer commands (pure): one constructor per command kind, then the
//! options that kind takes.
//!
//! ```
//! use ktimer::client::Command;
//! let cmd = Command::once("order-42").delay_ms(30_000).payload("close").raw().build();
//! assert_eq!(cmd.timer_id, "order-42");
//! ```

use crate::command::{Callback, CommandKind, DeliveryMode, MisfirePolicy, TimerCommand};

/// A command being built; [`Command::build`] gives the [`TimerCommand`].
#[derive(Debug, Clone, PartialEq)]
pub struct Command(TimerCommand);

impl Command {
    fn new(kind: CommandKind, timer_id: &str) -> Command {
        let request = format!("r-{}", super::unique());
        Command(TimerCommand {
            sent_at_ms: Some(crate::now_ms()),
            ..TimerCommand::new(kind, timer_id, &request)
        })
    }

    /// A one-shot timer; give it [`Command::at_ms`] or [`Command::delay_ms`].
    pub fn once(timer_id: &str) -> Command {
        Command::new(CommandKind::CreateOnce, timer_id).with_callback()
    }

    /// A cron timer firing at every occurrence of `expr` (with seconds), in UTC unless
    /// [`Command::time_zone`] says otherwise.
    pub fn cron(timer_id: &str, expr: &str) -> Command {
        let mut c = Command::new(CommandKind::CreateCron, timer_id).with_callback();
        c.0.cron = Some(expr.into());
        c
    }

    /// A repeating timer firing every `every_ms` from its anchor ([`Command::start_ms`];
    /// default one interval after ktimer accepts the command), without drift.
    pub fn every(timer_id: &str, every_ms: i64) -> Command {
        Command::new(CommandKind::CreateCron, timer_id)
            .with_callback()
            .every_ms(every_ms)
    }

    /// Replaces a timer's schedule (and its callback, when one is given).
    pub fn update(timer_id: &str) -> Command {
        Command::new(CommandKind::Update, timer_id)
    }

    /// Pauses a scheduled timer.
    pub fn pause(timer_id: &str) -> Command {
        Command::new(CommandKind::Pause, timer_id)
    }

    /// Resumes a paused timer.
    pub fn resume(timer_id: &str) -> Command {
        Command::new(CommandKind::Resume, timer_id)
    }

    /// Cancels a timer.
    pub fn cancel(timer_id: &str) -> Command {
        Command::new(CommandKind::Cancel, timer_id)
    }

    /// One extra fire now.
    pub fn fire_now(timer_id: &str) -> Command {
        Command::new(CommandKind::FireNow, timer_id)
    }

    fn with_callback(mut self) -> Command {
        self.callback();
        self
    }

    fn callback(&mut self) -> &mut Callback {
        self.0.callback.get_or_insert_with(|| Callback {
            topic: None,
            key: None,
            headers: Default::default(),
            payload: Vec::new(),
            mode: DeliveryMode::Envelope,
        })
    }

    /// The owning application (default `default`).
    pub fn application(mut self, app: &str) -> Command {
        self.0.application = app.into();
        self
    }

    /// The request id echoed in the result (default: a fresh one).
    pub fn request_id(mut self, id: &str) -> Command {
        self.0.request_id = id.into();
        self
    }

    /// Due at this instant, Unix ms.
    pub fn at_ms(mut self, ms: i64) -> Command {
        self.0.at_ms = Some(ms);
        self
    }

    /// Due this long after the command record's timestamp, ms.
    pub fn delay_ms(mut self, ms: i64) -> Command {
        self.0.delay_ms = Some(ms);
        self
    }

    /// A cron expression (for [`Command::update`]).
    pub fn cron_expr(mut self, expr: &str) -> Command {
        self.0.cron = Some(expr.into());
        self
    }

    /// An interval, ms (for [`Command::update`]; [`Command::every`] sets it).
    pub fn every_ms(mut self, ms: i64) -> Command {
        self.0.every_ms = Some(ms);
        self
    }

    /// Each fire up to this many ms after its due time (at most a day), by an offset
    /// fixed by the timer id and the occurrence: spreads timers on one schedule.
    pub fn jitter_ms(mut self, ms: i64) -> Command {
        self.0.jitter_ms = Some(ms);
        self
    }

    /// Repeating: obey exclusion calendar `name` (of ktimer's applications file),
    /// skipping the occurrences it excludes.
    pub fn calendar(mut self, name: &str) -> Command {
        self.0.calendar = Some(name.into());
        self
    }

    /// Repeating: fire the occurrences the calendar excludes right after the exclusion
    /// instead of skipping them.
    pub fn defer_excluded(mut self) -> Command {
        self.0.calendar_policy = Some(crate::command::CalendarPolicy::Defer);
        self
    }

    /// The cron expression's IANA time zone.
    pub fn time_zone(mut self, tz: &str) -> Command {
        self.0.time_zone = Some(tz.into());
        self
    }

    /// Repeating: no fire before this instant, Unix ms; an interval's anchor.
    pub fn start_ms(mut self, ms: i64) -> Command {
        self.0.start_ms = Some(ms);
        self
    }

    /// Repeating: no fire after this instant, Unix ms.
    pub fn end_ms(mut self, ms: i64) -> Command {
        self.0.end_ms = Some(ms);
        self
    }

    /// Repeating: stop after this many fires.
    pub fn max_fires(mut self, n: i64) -> Command {
        self.0.max_fires = Some(n);
        self
    }

    /// Cron: what to do with occurrences missed while ktimer was down.
    pub fn misfire(mut self, policy: MisfirePolicy) -> Command {
        self.0.misfire = Some(policy);
        self
    }

    /// The bytes to deliver.
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Command {
        self.callback().payload = payload.into();
        self
    }

    /// Deliver the payload itself as the record's value (not the `FiredEvent` envelope).
    pub fn raw(mut self) -> Command {
        self.callback().mode = DeliveryMode::Raw;
        self
    }

    /// Deliver to this topic (default: ktimer's fired topic).
    pub fn topic(mut self, topic: &str) -> Command {
        self.callback().topic = Some(topic.into());
        self
    }

    /// The fired record's key (default: the timer id).
    pub fn key(mut self, key: &str) -> Command {
        self.callback().key = Some(key.into());
        self
    }

    /// An extra header of the fired record.
    pub fn header(mut self, name: &str, value: &str) -> Command {
        self.callback().headers.insert(name.into(), value.into());
        self
    }

    /// The command.
    pub fn build(self) -> TimerCommand {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_builds_the_command_ktimer_reads() {
        let once = Command::once("a")
            .delay_ms(500)
            .payload("p")
            .raw()
            .topic("t")
            .build();
        assert_eq!(
            (once.kind, once.delay_ms),
            (CommandKind::CreateOnce, Some(500))
        );
        let cb = once.callback.unwrap();
        assert_eq!(
            (cb.payload, cb.mode, cb.topic),
            (b"p".to_vec(), DeliveryMode::Raw, Some("t".into()))
        );
        let cron = Command::cron("c", "0 30 9 * * Mon-Fri")
            .time_zone("Europe/Berlin")
            .build();
        assert_eq!(cron.cron.as_deref(), Some("0 30 9 * * Mon-Fri"));
        assert_eq!(cron.time_zone.as_deref(), Some("Europe/Berlin"));
        let cancel = Command::cancel("c").application("orders").build();
        assert_eq!(
            (cancel.kind, cancel.application.as_str()),
            (CommandKind::Cancel, "orders")
        );
        assert!(cancel.callback.is_none(), "a cancel carries no callback");
        let update = Command::update("c")
            .cron_expr("* * * * * *")
            .payload("new")
            .build();
        assert_eq!(update.callback.unwrap().payload, b"new".to_vec());
        let every = Command::every("e", 250)
            .start_ms(1_000)
            .jitter_ms(50)
            .build();
        assert_eq!(
            (
                every.kind,
                every.every_ms,
                every.start_ms,
                every.jitter_ms,
                every.cron
            ),
            (
                CommandKind::CreateCron,
                Some(250),
                Some(1_000),
                Some(50),
                None
            )
        );
        let (a, b) = (Command::pause("x").build(), Command::pause("x").build());
        assert_ne!(a.request_id, b.request_id, "fresh request ids");
    }
}
