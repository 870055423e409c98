//! The domain types the flow passes along: record -> intake -> store -> trigger -> sink.
//!
//! [`validate`](crate::validate) turns a decoded command into an [`Op`]; the intake wraps
//! it in an [`ApplyRequest`]; the store answers an [`Applied`] (its outcome parsed once,
//! in the store) and later hands the trigger the [`Fire`]s that are due; the sink turns a
//! fire into a record. Nothing here talks to Redis or Kafka.

use crate::command::{Callback, Outcome};
pub use crate::schedule::MAX_INSTANT_MS;
use crate::schedule::{CronSpec, Occurrences};

/// A validated command, ready to be applied to the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create a timer.
    Create {
        /// When it fires.
        schedule: Schedule,
        /// What to deliver.
        def: TimerDef,
    },
    /// Replace a timer's schedule, and its callback when `def` is given.
    Update {
        /// The new schedule.
        schedule: Schedule,
        /// The new definition; `None` keeps the current one.
        def: Option<TimerDef>,
    },
    /// Pause the timer: no fires until resumed.
    Pause,
    /// Resume a paused timer: occurrences from `origin_ms` on.
    Resume {
        /// The resume command's record timestamp.
        origin_ms: i64,
    },
    /// Cancel the timer.
    Cancel,
    /// One extra fire at `at_ms` (when ktimer accepted the command), its own fire id,
    /// the schedule unchanged.
    FireNow {
        /// When it is due.
        at_ms: i64,
    },
}

impl Op {
    /// The definition this op stores, if it stores one (create, update with a callback).
    pub fn def(&self) -> Option<&TimerDef> {
        match self {
            Op::Create { def, .. } => Some(def),
            Op::Update { def, .. } => def.as_ref(),
            _ => None,
        }
    }

    /// [`Op::def`], to change.
    pub fn def_mut(&mut self) -> Option<&mut TimerDef> {
        match self {
            Op::Create { def, .. } => Some(def),
            Op::Update { def, .. } => def.as_mut(),
            _ => None,
        }
    }
}

/// When a timer fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// Once, at `due_ms`.
    Once {
        /// Due instant, Unix epoch ms.
        due_ms: i64,
    },
    /// On a cron schedule; `first` holds the occurrences of the current window.
    Cron {
        /// The schedule as given (boxed: a one-shot's schedule is a number).
        spec: Box<CronSpec>,
        /// The occurrences to materialise now.
        first: Occurrences,
        /// The first occurrence, also when it lies beyond the window.
        next_ms: Option<i64>,
    },
}

impl Schedule {
    /// The first due instant, if any.
    pub fn first_due(&self) -> Option<i64> {
        match self {
            Schedule::Once { due_ms } => Some(*due_ms),
            Schedule::Cron { next_ms, .. } => *next_ms,
        }
    }
}

/// What a timer delivers when it fires; stored with the timer (`schemas/stored_timer.avsc`).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename = "StoredTimer")]
pub struct TimerDef {
    /// Owning application.
    pub application: String,
    /// Callback target and payload.
    pub callback: Callback,
}

/// A command ready to apply: the validated op plus where it came from.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// Commands-topic partition.
    pub partition: i32,
    /// The partition epoch this instance holds.
    pub epoch: i64,
    /// Commands-topic offset; becomes the timer version.
    pub offset: i64,
    /// Timer id.
    pub timer_id: String,
    /// Request id.
    pub request_id: String,
    /// The application that sent the command; a timer belongs to the one that created it.
    pub application: String,
    /// Most live (scheduled or paused) timers the application may have in the
    /// partition: a create beyond it is rejected. `None`: no limit.
    pub max_pending: Option<u64>,
    /// The application's fires are rate-limited: its pending fires go to its parked set
    /// (`claim.lua`), claimed at its pace, not to the minute slices.
    pub paced: bool,
    /// What to do.
    pub op: Op,
}

/// What the store did with one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Applied.
    Accepted,
    /// Applied before (same request id, or the timer is at a newer version): no change.
    Duplicate,
    /// Refused; the reason says why.
    Rejected,
    /// The partition's epoch moved: another instance owns it, nothing was applied.
    Fenced,
    /// A store script failed on this command itself, the same way on every try (a record
    /// it cannot read, a value it cannot handle): isolated from its batch, not applied,
    /// answered rejected with the error.
    Poisoned,
}

impl ApplyOutcome {
    /// The outcome the command's result carries; `None` for [`ApplyOutcome::Fenced`]
    /// (such a command is not answered: its new owner answers it).
    pub fn result(self) -> Option<Outcome> {
        match self {
            ApplyOutcome::Accepted => Some(Outcome::Accepted),
            ApplyOutcome::Duplicate => Some(Outcome::Duplicate),
            ApplyOutcome::Rejected | ApplyOutcome::Poisoned => Some(Outcome::Rejected),
            ApplyOutcome::Fenced => None,
        }
    }
}

/// What applying a command did, and the timer as it stands after.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// What the store did.
    pub outcome: ApplyOutcome,
    /// Timer version, if the timer exists.
    pub version: Option<i64>,
    /// Timer state, if the timer exists.
    pub state: Option<TimerState>,
    /// Timer due ms, if the timer exists.
    pub due_ms: Option<i64>,
    /// Why, when rejected or a duplicate; empty otherwise.
    pub reason: String,
}

impl Applied {
    /// A command a store script failed on with `error`, every time ([`ApplyOutcome::Poisoned`]).
    pub fn poisoned(error: &dyn std::fmt::Display) -> Applied {
        Applied {
            outcome: ApplyOutcome::Poisoned,
            version: None,
            state: None,
            due_ms: None,
            reason: format!(
                "the store failed on this command, the same way on every try, so it was not \
                 applied (the other commands of its partition were): {error}"
            ),
        }
    }

    /// A command the store did not apply because the partition is fenced.
    pub fn fenced() -> Applied {
        Applied {
            outcome: ApplyOutcome::Fenced,
            version: None,
            state: None,
            due_ms: None,
            reason: "partition epoch moved: another instance owns it".into(),
        }
    }
}

/// The state of a timer. Stored in lower case in Redis, upper case in results and the
/// admin API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TimerState {
    /// Waiting for its next fire.
    Scheduled,
    /// Paused: no fires until resumed.
    Paused,
    /// Cancelled.
    Cancelled,
    /// A one-shot timer that fired.
    Fired,
    /// A cron timer past its last occurrence (end, max fires).
    Completed,
    /// A one-shot timer whose fire went to the dead-letter topic.
    DeadLettered,
}

impl TimerState {
    /// Every state, live ones first.
    pub const ALL: [TimerState; 6] = [
        TimerState::Scheduled,
        TimerState::Paused,
        TimerState::Cancelled,
        TimerState::Fired,
        TimerState::Completed,
        TimerState::DeadLettered,
    ];

    /// The name stored in Redis by the Lua scripts.
    pub fn stored(self) -> &'static str {
        match self {
            TimerState::Scheduled => "scheduled",
            TimerState::Paused => "paused",
            TimerState::Cancelled => "cancelled",
            TimerState::Fired => "fired",
            TimerState::Completed => "completed",
            TimerState::DeadLettered => "dead_lettered",
        }
    }

    /// Parses the name stored in Redis.
    pub fn from_stored(s: &str) -> Option<TimerState> {
        TimerState::ALL.into_iter().find(|t| t.stored() == s)
    }

    /// Parses the name carried in results (`SCHEDULED`...), in any case.
    pub fn parse(s: &str) -> Option<TimerState> {
        TimerState::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
    }

    /// The name carried in results and shown by the admin port (`SCHEDULED`...).
    pub fn as_str(self) -> &'static str {
        match self {
            TimerState::Scheduled => "SCHEDULED",
            TimerState::Paused => "PAUSED",
            TimerState::Cancelled => "CANCELLED",
            TimerState::Fired => "FIRED",
            TimerState::Completed => "COMPLETED",
            TimerState::DeadLettered => "DEAD_LETTERED",
        }
    }
}

/// A fire claimed from the store, to be delivered at `due_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fire {
    /// The in-flight member, `version:due:id`; the handle to acknowledge it.
    pub member: String,
    /// Timer id.
    pub timer_id: String,
    /// Timer version.
    pub version: i64,
    /// Due instant, Unix epoch ms.
    pub due_ms: i64,
    /// What to deliver.
    pub def: TimerDef,
    /// Set when the claim took the fire as fired without writing the timer's record (a
    /// scheduled one-shot timer read from its own key; the record reads fired from then
    /// on): its acknowledgement only takes it out of flight (`store::landed`).
    pub taken: Option<Taken>,
}

/// What a claim read of a one-shot timer whose fire it took as fired ([`Fire::taken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// Whether a state of the timer was written (its record's `p`): it owes a tombstone.
    pub written: bool,
}

/// The result of a claim: fires to deliver and when the next one is due.
#[derive(Debug)]
pub struct Claimed {
    /// Claimed fires, in due order.
    pub fires: Vec<Fire>,
    /// Due ms of the earliest fire still in the slices.
    pub next_due_ms: Option<i64>,
    /// Due members whose timer record was gone (evicted, or deleted outside ktimer):
    /// fires lost, counted so that an operator sees them.
    pub vanished: u64,
    /// Whether the claim stopped at its limits (count or bytes): more may be due now.
    pub full: bool,
    /// Applications with fires parked in Redis after the claim (their quota was used
    /// up), and how many each.
    pub parked: Vec<(String, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_stored_names() {
        for s in TimerState::ALL {
            assert_eq!(TimerState::from_stored(s.stored()), Some(s));
            assert_eq!(s.as_str(), s.stored().to_uppercase());
        }
        assert_eq!(TimerState::from_stored("SCHEDULED"), None);
    }

    #[test]
    fn fenced_commands_get_no_result() {
        assert_eq!(ApplyOutcome::Fenced.result(), None);
        assert_eq!(ApplyOutcome::Accepted.result(), Some(Outcome::Accepted));
        assert_eq!(Applied::fenced().outcome, ApplyOutcome::Fenced);
    }
}

/// A timer's fields as Redis holds them (names in [`crate::store::keys::field`]); the
/// value of its record in the state topic (`schemas/timer_state.avsc`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename = "TimerState")]
pub struct TimerFields {
    /// Field name to value, as in the timer's hash.
    pub fields: std::collections::BTreeMap<String, serde_bytes::ByteBuf>,
}

/// A partition's checkpoint in the state topic (`schemas/checkpoint.avsc`): every timer
/// record before it reflects the commands up to `commands_offset`, and every fire due at
/// or before `acked_through_ms` was acknowledged except those `in_flight`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// Grows by one per checkpoint of the partition; Redis keeps the last confirmed one.
    pub sequence: i64,
    /// The owner's epoch when it was written.
    pub epoch: i64,
    /// Highest commands-topic offset reflected; -1 for none.
    pub commands_offset: i64,
    /// Every fire due at or before this instant was acknowledged, except `in_flight`.
    pub acked_through_ms: i64,
    /// Fire members (`version:due:id`) claimed and not acknowledged.
    pub in_flight: Vec<String>,
    /// When it was written, Unix ms.
    pub written_at_ms: i64,
    /// Highest commands-topic offset applied when `acked_through_ms` was read (at least
    /// `commands_offset`; -1 unknown): a command at or below it whose fire is due at or
    /// before `acked_through_ms`, and not in flight, was fired and acknowledged, so its
    /// replay after a rebuild must not fire it again.
    #[serde(default = "unknown_offset")]
    pub applied_offset: i64,
}

/// A checkpoint written before [`Checkpoint::applied_offset`] existed.
fn unknown_offset() -> i64 {
    -1
}
