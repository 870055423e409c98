//! Fires made stale by commands, checked just before delivery.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Fires made stale by commands.
///
/// Invariant: after the intake applied a pause, update or cancel of a timer at command
/// offset `o` (its new version), it blocks every fire of that timer with a version below
/// `o` here *before* it sends the command's result; the trigger checks the gate right
/// before each send. So no fire of an older version is produced after the result. An
/// entry lives while the trigger may still hold a fire of that timer in memory.
#[derive(Debug, Default)]
pub struct Gate {
    blocked: Mutex<HashMap<String, i64>>,
}

impl Gate {
    /// Fires of `timer_id` with a version below `version` must not be delivered.
    pub fn block(&self, timer_id: &str, version: i64) {
        let mut b = self.lock();
        let v = b.entry(timer_id.to_string()).or_insert(version);
        *v = (*v).max(version);
    }

    /// Whether a fire of `timer_id` at `version` is stale. An extra fire (FIRE_NOW, a
    /// negative version) never is: it was asked for explicitly.
    pub fn blocks(&self, timer_id: &str, version: i64) -> bool {
        version >= 0 && self.lock().get(timer_id).is_some_and(|&v| version < v)
    }

    /// Forgets entries of timers the trigger holds no fire of. Claims that ran before a
    /// command was applied have been pushed to the ready queue by then, so this is safe.
    pub fn prune(&self, held: &HashSet<&str>) {
        self.lock().retain(|id, _| held.contains(id.as_str()));
    }

    /// Whether nothing is blocked.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
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
        g.prune(&HashSet::from(["a"]));
        assert!(g.blocks("a", 1));
        assert!(!g.blocks("b", 1));
        g.prune(&HashSet::new());
        assert!(g.is_empty());
    }
}
