//! The acknowledgements a trigger owes Redis, and when it sends them: a swap or an
//! `ack.lua` call costs Redis about as much per call (the script's prelude, the fence,
//! the counts) as for a hundred fires, so a trigger sends at most one acknowledgement
//! call per [`LINGER_MS`]: the first after a quiet spell at once (a timer created again
//! from its own callback finds its fire acknowledged, as without batching), then, at a
//! steady rate, one batch per [`LINGER_MS`]; at once when [`BATCH`] wait, or when
//! holding them costs something (the budget has no room; a paced application's parked
//! fires wait for its held fires to go).
//!
//! Invariant: batching never delays a fire, only its acknowledgement; a fire delivered
//! and not yet acknowledged stays in flight in Redis, so an owner that stops before the
//! acknowledgement delivers it again (at least once: at most [`LINGER_MS`] of fires more
//! than without batching).

use crate::store::Ack;

/// The least time between two acknowledgement calls of a trigger, in ms.
pub const LINGER_MS: i64 = 20;
/// This many acknowledgements waiting are sent at once.
pub const BATCH: usize = 500;

/// The acknowledgements waiting, in delivery order.
#[derive(Debug, Default)]
pub struct Acks {
    waiting: Vec<Ack>,
    /// When the first of them was delivered, Unix ms (`i64::MIN`: due at once).
    since_ms: Option<i64>,
    /// When the last call took them, Unix ms.
    sent_ms: Option<i64>,
}

impl Acks {
    /// Adds `ack`, delivered at `now_ms`.
    pub fn push(&mut self, ack: Ack, now_ms: i64) {
        self.since_ms.get_or_insert(now_ms);
        self.waiting.push(ack);
    }

    /// Takes every acknowledgement waiting, for a call at `now_ms`.
    pub fn take(&mut self, now_ms: i64) -> Vec<Ack> {
        self.since_ms = None;
        self.sent_ms = Some(now_ms);
        std::mem::take(&mut self.waiting)
    }

    /// Puts back `members` (a call that failed), ahead of those delivered since; they
    /// are due at once.
    pub fn put_back(&mut self, mut members: Vec<Ack>) {
        members.append(&mut self.waiting);
        self.waiting = members;
        self.since_ms = Some(i64::MIN);
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// When the acknowledgements waiting are due (`None`: none waits): at once when
    /// [`BATCH`] wait or `pressed`, else when the first was delivered but not sooner
    /// than [`LINGER_MS`] after the last call.
    pub fn due_at(&self, pressed: bool) -> Option<i64> {
        let since = self.since_ms.filter(|_| !self.waiting.is_empty())?;
        if pressed || self.waiting.len() >= BATCH || since == i64::MIN {
            return Some(i64::MIN);
        }
        let spaced = self
            .sent_ms
            .map_or(i64::MIN, |s| s.saturating_add(LINGER_MS));
        Some(since.max(spaced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(n: usize) -> Ack {
        Ack::Dropped(format!("1:{n}:t{n}"))
    }

    #[test]
    fn one_call_per_linger_the_first_after_a_quiet_spell_at_once() {
        let mut a = Acks::default();
        assert_eq!(a.due_at(true), None, "nothing waits");
        a.push(ack(0), 1_000);
        assert_eq!(a.due_at(false), Some(1_000), "the first call: at once");
        assert_eq!(a.take(1_001).len(), 1);
        a.push(ack(1), 1_005);
        a.push(ack(2), 1_015);
        assert_eq!(
            a.due_at(false),
            Some(1_001 + LINGER_MS),
            "spaced from the last call"
        );
        assert_eq!(a.due_at(true), Some(i64::MIN), "pressed: at once");
        for n in 3..=BATCH {
            a.push(ack(n), 1_016);
        }
        assert_eq!(a.due_at(false), Some(i64::MIN), "a batch: at once");
        assert_eq!(a.take(1_016).len(), BATCH);
        assert_eq!(a.due_at(false), None);
        a.push(ack(7), 2_000);
        assert_eq!(a.due_at(false), Some(2_000), "after a quiet spell: at once");
    }

    #[test]
    fn a_failed_call_puts_its_members_back_first_and_due_at_once() {
        let mut a = Acks::default();
        a.push(ack(0), 1_000);
        let sent = a.take(1_000);
        a.push(ack(1), 1_010);
        a.put_back(sent);
        assert_eq!(a.due_at(false), Some(i64::MIN));
        let order: Vec<String> = a
            .take(1_011)
            .iter()
            .map(|x| x.member().to_string())
            .collect();
        assert_eq!(order, ["1:0:t0", "1:1:t1"]);
    }
}
