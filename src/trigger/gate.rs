//! Fires made stale by commands, checked just before delivery.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Fires made stale by commands.
///
/// Invariant: after the intake applied a pause, update or cancel of a timer at command
/// offset `o` (its new version), it blocks every fire of that timer with a version below
/// `o` here *before* it sends the command's result; the trigger checks the gate right
/// before each send. So no fire of an older version is produced after the result. An
/// entry lives while the trigger may still hold a fire of that timer in memory, or may
/// still receive one: a claim that started before the entry was blocked may have run in
/// Redis before the command was applied (each entry carries the [`Gate::stamp`] of its
/// block, each claim the stamp of its start).
#[derive(Debug, Default)]
pub struct Gate {
    blocked: Mutex<Blocked>,
}

/// The blocked timers: id to (version, stamp), and the last stamp given.
#[derive(Debug, Default)]
struct Blocked {
    by_id: HashMap<String, (i64, u64)>,
    stamps: u64,
}

impl Gate {
    /// Fires of `timer_id` with a version below `version` must not be delivered.
    pub fn block(&self, timer_id: &str, version: i64) {
        let mut b = self.lock();
        b.stamps += 1;
        let stamp = b.stamps;
        let v = b
            .by_id
            .entry(timer_id.to_string())
            .or_insert((version, stamp));
        *v = (v.0.max(version), stamp);
    }

    /// The stamp of the last block so far: a claim records it when it starts.
    pub fn stamp(&self) -> u64 {
        self.lock().stamps
    }

    /// Whether a fire of `timer_id` at `version` is stale. An extra fire (FIRE_NOW, a
    /// negative version) never is: it was asked for explicitly.
    pub fn blocks(&self, timer_id: &str, version: i64) -> bool {
        version >= 0
            && self
                .lock()
                .by_id
                .get(timer_id)
                .is_some_and(|&(v, _)| version < v)
    }

    /// Forgets entries of timers the trigger holds no fire of, except those blocked after
    /// `claim` (the stamp a claim still running took when it started): its reply may
    /// carry a fire of theirs. Claims that finished were pushed to the ready queue.
    pub fn prune(&self, held: &HashSet<&str>, claim: Option<u64>) {
        self.lock().by_id.retain(|id, &mut (_, stamp)| {
            held.contains(id.as_str()) || claim.is_some_and(|c| stamp > c)
        });
    }

    /// Whether nothing is blocked.
    pub fn is_empty(&self) -> bool {
        self.lock().by_id.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Blocked> {
        self.blocked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_versions_are_blocked_newer_pass() {
        let g = Gate::default();
        assert!(g.is_empty());
        assert!(!g.blocks("t", 5));
        g.block("t", 10);
        assert!(g.blocks("t", 5));
        assert!(g.blocks("t", 9));
        assert!(!g.blocks("t", 10), "the command's own version fires");
        assert!(!g.blocks("other", 1));
        g.block("t", 7); // an older command never lowers the bar
        assert!(g.blocks("t", 9));
    }

    #[test]
    fn entries_live_while_a_fire_of_the_timer_is_held() {
        let g = Gate::default();
        g.block("a", 3);
        g.block("b", 3);
        g.prune(&HashSet::from(["a"]), None);
        assert!(g.blocks("a", 1));
        assert!(!g.blocks("b", 1));
        g.prune(&HashSet::new(), None);
        assert!(g.is_empty());
    }

    #[test]
    fn an_entry_blocked_while_a_claim_runs_outlives_the_claim() {
        let g = Gate::default();
        g.block("before", 3);
        // A claim starts; then a cancel of "x" is applied and blocked.
        let claim = g.stamp();
        g.block("x", 9);
        // Nothing of "x" is held yet, but the claim's reply may carry its old fire.
        g.prune(&HashSet::new(), Some(claim));
        assert!(
            g.blocks("x", 5),
            "pruned while the claim could still return it"
        );
        assert!(
            !g.blocks("before", 1),
            "blocked before the claim started: safe to forget"
        );
        // The claim finished (its fires, if any, are in the ready queue and held).
        g.prune(&HashSet::new(), None);
        assert!(g.is_empty());
    }
}
