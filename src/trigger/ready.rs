//! The ready queue: claimed fires waiting in memory for their send time (never early).

use crate::timer::Fire;
use std::collections::{BTreeMap, HashSet};

/// A claimed fire waiting for its send time.
#[derive(Clone)]
pub struct Pending {
    /// The fire.
    pub fire: Fire,
    /// Its delivery attempt, 1 for the first.
    pub attempt: i32,
    /// Set when the fire goes to the dead-letter topic instead: why.
    pub dead: Option<String>,
    /// Whether its application's delivery rate limit gave it its send time already.
    pub paced: bool,
    /// When its last attempt was produced, Unix ms (0 before the first).
    pub fired_ms: i64,
}

/// Claimed fires by send time, then arrival order. Each is boxed: taking the first one
/// shifts the rest of its B-tree node, pointers rather than whole fires.
#[derive(Default)]
pub struct Ready {
    queue: BTreeMap<(i64, u64), Box<Pending>>,
    seq: u64,
}

impl Ready {
    /// Queues `p` to be sent at `at_ms`.
    pub fn push(&mut self, at_ms: i64, p: Pending) {
        self.seq += 1;
        self.queue.insert((at_ms, self.seq), Box::new(p));
    }

    /// The earliest fire whose send time is at or before `now_ms`.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<Pending> {
        let entry = self.queue.first_entry()?;
        (entry.key().0 <= now_ms).then(|| *entry.remove())
    }

    /// Whether a fire's send time has come by `now_ms`.
    pub fn has_due(&self, now_ms: i64) -> bool {
        self.next_at().is_some_and(|t| t <= now_ms)
    }

    /// The earliest send time.
    pub fn next_at(&self) -> Option<i64> {
        self.queue.keys().next().map(|k| k.0)
    }

    /// How many fires wait.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// The timers the queue holds a fire of.
    pub fn timer_ids(&self) -> HashSet<&str> {
        self.queue
            .values()
            .map(|p| p.fire.timer_id.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(id: &str, due_ms: i64) -> Pending {
        Pending {
            fired_ms: 0,
            fire: Fire {
                member: format!("1:{due_ms}:{id}"),
                timer_id: id.into(),
                version: 1,
                due_ms,
                def: Default::default(),
                taken: None,
            },
            attempt: 1,
            dead: None,
            paced: false,
        }
    }

    #[test]
    fn the_ready_queue_never_hands_out_a_fire_early() {
        let mut r = Ready::default();
        r.push(2_000, pending("b", 2_000));
        r.push(1_000, pending("a", 1_000));
        r.push(2_000, pending("c", 2_000));
        assert_eq!(r.next_at(), Some(1_000));
        assert!(r.pop_due(999).is_none());
        assert!(!r.has_due(999));
        assert_eq!(r.pop_due(1_000).unwrap().fire.timer_id, "a");
        assert!(r.pop_due(1_999).is_none());
        // Same send time: in arrival order.
        assert_eq!(r.pop_due(5_000).unwrap().fire.timer_id, "b");
        assert_eq!(r.timer_ids(), HashSet::from(["c"]));
        assert_eq!(r.pop_due(5_000).unwrap().fire.timer_id, "c");
        assert_eq!(r.len(), 0);
    }
}
