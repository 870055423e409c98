//! When a trigger must claim next, and the rule that wakes it early.

use std::sync::atomic::{AtomicI64, Ordering};
use tokio::sync::Notify;

/// Tells a trigger when it must claim next. Shared by the intake, the migrator and the
/// trigger.
///
/// Invariant (the "wake only if earlier" rule, as in mini-redis's `db.rs`): the planned
/// claim time only moves earlier from outside the trigger, and the trigger is notified
/// exactly when a new fire is due before the claim it planned; storing a later fire never
/// disturbs its sleep.
#[derive(Debug)]
pub struct Wake {
    at: AtomicI64,
    notify: Notify,
    /// The configured claim margin, ms.
    base: i64,
    /// The slowest recent round trip of the trigger's Redis calls, ms (decaying).
    round_trip: AtomicI64,
}

/// The most a round trip counts for the claim margin, ms.
const MAX_ROUND_TRIP_MS: i64 = 2_000;

impl Wake {
    /// A wake for a trigger that claims fires `ahead_ms` (plus the round trips, see
    /// [`Wake::ahead`]) before they are due; it claims at once when started.
    pub fn new(ahead_ms: i64) -> Wake {
        Wake {
            at: AtomicI64::new(i64::MIN),
            notify: Notify::new(),
            base: ahead_ms,
            round_trip: AtomicI64::new(0),
        }
    }

    /// How long before a fire is due the trigger claims it, ms: the configured margin
    /// plus two of the slowest recent Redis round trips (a claim may wait for the call
    /// before it, then takes its own), so a slow link to Redis makes no fire late.
    pub fn ahead(&self) -> i64 {
        self.base + 2 * self.round_trip.load(Ordering::Relaxed)
    }

    /// A Redis call of the trigger took `ms`: it counts at once if slower than the
    /// slowest recent one, which otherwise loses a tenth per call.
    pub fn took(&self, ms: i64) {
        let old = self.round_trip.load(Ordering::Relaxed);
        let new = ms.clamp(0, MAX_ROUND_TRIP_MS).max(old - old / 10 - 1);
        self.round_trip.store(new.max(0), Ordering::Relaxed);
    }

    /// A fire due at `due_ms` was stored: wake the trigger if it planned to claim later.
    pub fn due(&self, due_ms: i64) {
        let t = due_ms.saturating_sub(self.ahead());
        if t < self.at.fetch_min(t, Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// When the trigger plans to claim next, Unix ms.
    pub fn claim_at(&self) -> i64 {
        self.at.load(Ordering::SeqCst)
    }

    /// If the claim time has come by `now_ms`: clears the plan (so a fire stored during
    /// the claim moves it again) and returns `true`.
    pub fn take_if_due(&self, now_ms: i64) -> bool {
        if self.at.load(Ordering::SeqCst) > now_ms {
            return false;
        }
        self.at.store(i64::MAX, Ordering::SeqCst);
        true
    }

    /// Plans the next claim no later than `at_ms` (an earlier plan stays).
    pub fn plan(&self, at_ms: i64) {
        self.at.fetch_min(at_ms, Ordering::SeqCst);
    }

    /// A claim failed: claim again at the next chance.
    pub fn claim_again(&self) {
        self.at.store(i64::MIN, Ordering::SeqCst);
    }

    /// Resolves when [`Wake::due`] found an earlier fire.
    pub async fn notified(&self) {
        self.notify.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use std::sync::Arc;
    use std::time::Duration;

    /// Sleeps like the trigger does: until the planned claim, or until woken.
    async fn sleep(wake: &Wake, clock: &Clock) -> &'static str {
        tokio::select! {
            _ = clock.sleep_until(wake.claim_at()) => "slept",
            _ = wake.notified() => "woken",
        }
    }

    #[test]
    fn slow_round_trips_widen_the_claim_margin_until_they_pass() {
        let w = Wake::new(100);
        assert_eq!(w.ahead(), 100);
        w.took(200);
        assert_eq!(w.ahead(), 500);
        w.took(1);
        assert_eq!(w.ahead(), 100 + 2 * 179);
        (0..100).for_each(|_| w.took(1));
        assert!(w.ahead() <= 102, "{}", w.ahead());
        w.took(60_000);
        assert_eq!(w.ahead(), 100 + 2 * MAX_ROUND_TRIP_MS);
    }

    #[tokio::test(start_paused = true)]
    async fn only_an_earlier_fire_wakes_the_trigger() {
        let clock = Clock::tokio(0);
        let wake = Arc::new(Wake::new(100));
        assert!(wake.take_if_due(0), "a new trigger claims at once");
        wake.plan(10_000);
        let w = wake.clone();
        let sleeper = tokio::spawn(async move { (sleep(&w, &clock).await, clock.now_ms()) });
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        wake.due(50_000); // later than planned: no wake-up, and the plan stays
        assert_eq!(wake.claim_at(), 10_000);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        wake.due(5_100); // earlier: claim at 5,000 (100 ms ahead), wake now
        assert_eq!(wake.claim_at(), 5_000);
        assert_eq!(sleeper.await.unwrap(), ("woken", 2_000));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_wake_up_the_trigger_sleeps_until_its_plan() {
        let clock = Clock::tokio(0);
        let wake = Wake::new(100);
        wake.take_if_due(0);
        wake.plan(3_000);
        assert_eq!(sleep(&wake, &clock).await, "slept");
        assert_eq!(clock.now_ms(), 3_000);
        assert!(!wake.take_if_due(2_999));
        assert!(wake.take_if_due(3_000));
        assert_eq!(wake.claim_at(), i64::MAX, "cleared while claiming");
        wake.due(4_000); // stored during the claim: the next plan is no later
        wake.plan(9_000);
        assert_eq!(wake.claim_at(), 3_900);
        wake.claim_again();
        assert!(wake.take_if_due(i64::MIN + 1));
    }
}
