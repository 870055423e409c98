//! Rate limits as pacing (the generic cell rate algorithm, GCRA): each key keeps the
//! theoretical arrival time of its next event. One [`Pacer`] per partition, so a limit
//! split evenly over the partitions holds for the group without coordination (an
//! application's timers spread over the partitions by the hash of their ids).
//!
//! Pure: times are passed in (µs), so the tests control the clock.

use std::collections::HashMap;

/// A rate: `per_second` events, with bursts of up to `burst` events at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Events per second; > 0.
    pub per_second: f64,
    /// Events that may happen at once before pacing starts; >= 1.
    pub burst: f64,
}

impl Rate {
    /// The share of `per_second` one of `partitions` partitions gets, with bursts of
    /// `burst_s` seconds' worth (at least one event).
    pub fn share(per_second: f64, partitions: i32, burst_s: f64) -> Rate {
        let per_second = per_second / partitions.max(1) as f64;
        Rate {
            per_second,
            burst: (per_second * burst_s).max(1.0),
        }
    }

    fn interval_us(self) -> f64 {
        1e6 / self.per_second
    }
}

/// The next-event times of some keys (applications).
///
/// Invariant: a key's time never goes back. An event stamped before the latest one seen
/// of its key counts as at that latest time: records of one partition come in offset
/// order, and a producer whose clock is behind another's must not make its commands look
/// like a burst from the past (nor hold an event for the length of a clock step).
#[derive(Debug, Default)]
pub struct Pacer {
    keys: HashMap<String, Key>,
}

/// One key's theoretical arrival time of its next event, and the latest time seen (µs).
#[derive(Debug, Clone, Copy)]
struct Key {
    tat: f64,
    seen: f64,
}

impl Pacer {
    /// When (µs) an event of `key` that is ready at `now_us` may happen under `rate`; the
    /// slot is booked. Never before `now_us`; after a clock stepped back, the wait is the
    /// one the key's own timeline gives, not the step.
    pub fn slot(&mut self, key: &str, now_us: i64, rate: Rate) -> i64 {
        let t = rate.interval_us();
        let (k, now) = self.key(key, now_us);
        let at = now.max(k.tat - t * (rate.burst - 1.0));
        k.tat = k.tat.max(now) + t;
        now_us + (at - now).ceil() as i64
    }

    /// Whether an event of `key` may happen at `now_us` under `rate`; books it if so.
    pub fn admit(&mut self, key: &str, now_us: i64, rate: Rate) -> bool {
        let t = rate.interval_us();
        let (k, now) = self.key(key, now_us);
        if now < k.tat - t * (rate.burst - 1.0) {
            return false;
        }
        k.tat = k.tat.max(now) + t;
        true
    }

    /// The state of `key` and its time for an event at `now_us` (never before the latest).
    fn key(&mut self, key: &str, now_us: i64) -> (&mut Key, f64) {
        let now = now_us as f64;
        if !self.keys.contains_key(key) {
            self.keys.insert(
                key.to_string(),
                Key {
                    tat: now,
                    seen: now,
                },
            );
        }
        let k = self.keys.get_mut(key).expect("inserted");
        k.seen = k.seen.max(now);
        let now = k.seen;
        (k, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_over_the_rate_are_spaced_out_and_never_early() {
        let mut p = Pacer::default();
        let r = Rate {
            per_second: 1_000.0,
            burst: 2.0,
        };
        // A burst of 2 goes at once, then one per ms.
        let slots: Vec<i64> = (0..5).map(|_| p.slot("a", 10_000, r)).collect();
        assert_eq!(slots, [10_000, 10_000, 11_000, 12_000, 13_000]);
        // Another key is not held back.
        assert_eq!(p.slot("b", 10_000, r), 10_000);
        // After a quiet spell, no debt is kept.
        assert_eq!(p.slot("a", 1_000_000, r), 1_000_000);
    }

    #[test]
    fn admission_refuses_what_is_over_the_rate() {
        let mut p = Pacer::default();
        let r = Rate::share(2_000.0, 2, 1.0); // 1,000/s, bursts of 1,000
        assert_eq!(r.per_second, 1_000.0);
        let admitted = (0..1_500).filter(|_| p.admit("a", 0, r)).count();
        assert_eq!(admitted, 1_000);
        // Half a second later, half a second's worth more.
        let more = (0..1_000).filter(|_| p.admit("a", 500_000, r)).count();
        assert_eq!(more, 500);
        assert!(p.admit("b", 0, r));
    }

    #[test]
    fn an_event_stamped_in_the_past_counts_as_now() {
        // 100/s, bursts of 100: ten commands, then ten from a producer 5 s behind.
        let mut p = Pacer::default();
        let r = Rate::share(100.0, 1, 1.0);
        let now = 1_000_000_000;
        assert!((0..10).all(|_| p.admit("a", now, r)));
        assert!(
            (0..10).all(|_| p.admit("a", now - 5_000_000, r)),
            "skewed producer"
        );
        // A slot asked for with a clock stepped back is not held for the step.
        let mut p = Pacer::default();
        let r = Rate::share(100.0, 1, 0.0); // no burst: one each 10 ms
        assert_eq!(p.slot("a", now, r), now);
        assert_eq!(p.slot("a", now - 5_000_000, r), now - 5_000_000 + 10_000);
    }
}
