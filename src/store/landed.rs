//! The lean acknowledgement of a delivered one-shot fire whose claim took it as fired
//! without writing its record (`claim.lua` answered the record it read; `rec_view`,
//! place.lua, reads such a record fired): the fire moves from the in-flight set to the
//! fired queue, and its timer leaves the deferred set, or enters the dirty set owing a
//! tombstone when a state of it was written (`landed.lua`). No timer's key is written,
//! nothing is decoded in Redis.
//!
//! Invariant: the claim answers a one-shot fire's record exactly when it took the fire as
//! fired; every other fire is acknowledged through `ack.lua`, which decides from the
//! record (also for a fire the claim took, re-driven or dead-lettered: its record is then
//! written, its last fire the one given).

use crate::timer::{Fire, Taken};

/// A delivered one-shot fire the claim took as fired (`landed.lua`).
#[derive(Debug, Clone, PartialEq)]
pub struct Landed {
    /// The in-flight member.
    pub member: String,
    /// The timer id.
    pub timer_id: String,
    /// Whether a state of the timer was written (it owes a tombstone).
    pub written: bool,
    /// When it was produced, Unix epoch ms: the retention of its record runs from it,
    /// and `ack.lua` takes it as the last fire's time, should it decide instead.
    pub fired_ms: i64,
    /// In which delivery attempt.
    pub attempt: i32,
}

/// The lean acknowledgement of `fire` (its claim took it as fired, `taken`), produced at
/// `fired_ms` in attempt `attempt`.
pub fn landed(fire: Fire, taken: Taken, fired_ms: i64, attempt: i32) -> Landed {
    Landed {
        member: fire.member,
        timer_id: fire.timer_id,
        written: taken.written,
        fired_ms,
        attempt,
    }
}

/// The fired queue's entry of the fires of `landed`, as `landed.lua` appends it and the
/// checkpoint's sweep reads it: when the last of them was produced, then their in-flight
/// members, one per line (a timer id holds no control character); empty when none.
pub fn fired_queue_entry(landed: &[&Landed]) -> String {
    let Some(last) = landed.iter().map(|l| l.fired_ms).max() else {
        return String::new();
    };
    let mut entry = last.to_string();
    for l in landed {
        entry.push('\n');
        entry.push_str(&l.member);
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire() -> Fire {
        Fire {
            member: "7:5000:t".into(),
            timer_id: "t".into(),
            version: 7,
            due_ms: 5000,
            def: Default::default(),
            taken: None,
        }
    }

    #[test]
    fn a_fire_owes_a_tombstone_when_a_state_of_its_timer_was_written() {
        let l = landed(fire(), Taken { written: false }, 9000, 2);
        assert_eq!((l.member.as_str(), l.timer_id.as_str()), ("7:5000:t", "t"));
        assert_eq!((l.written, l.fired_ms, l.attempt), (false, 9000, 2));
        assert!(landed(fire(), Taken { written: true }, 9000, 1).written);
    }

    #[test]
    fn the_queue_entry_holds_the_fires_and_when_the_last_was_produced() {
        let at = |member: &str, fired_ms: i64| Landed {
            member: member.into(),
            timer_id: "t".into(),
            written: false,
            fired_ms,
            attempt: 1,
        };
        let (a, c) = (at("1:5:a", 9), at("3:6:c", 7));
        assert_eq!(fired_queue_entry(&[&a, &c]), "9\n1:5:a\n3:6:c");
        assert_eq!(fired_queue_entry(&[]), "", "no fires");
    }
}
