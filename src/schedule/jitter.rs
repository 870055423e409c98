//! Jitter: an occurrence due at `n` fires at `n + offset`, the offset in `[0, jitter)`
//! derived from the timer id and `n` alone (Kafka's murmur2 of `"{id}/{n}"`), so every
//! instance, a retry and a rebuild from the state topic compute the same instant, and
//! a thousand timers on one cron expression spread over the window instead of firing in
//! the same millisecond. A fire is never early with respect to its jittered instant.

use super::MAX_INSTANT_MS;

/// The largest jitter a schedule may ask for: a day.
pub const MAX_JITTER_MS: i64 = 86_400_000;

/// The jitter of one timer.
#[derive(Debug, Clone, PartialEq)]
pub struct Jitter {
    timer_id: String,
    jitter_ms: i64,
}

impl Jitter {
    /// The jitter of `timer_id` for `jitter_ms` (none for `None` or 0), or why it is refused.
    pub fn new(timer_id: &str, jitter_ms: Option<i64>) -> Result<Option<Jitter>, String> {
        match jitter_ms {
            None | Some(0) => Ok(None),
            Some(j) if !(0..=MAX_JITTER_MS).contains(&j) => Err(format!(
                "jitter_ms must be between 0 and {MAX_JITTER_MS} (a day), got {j}"
            )),
            Some(j) => Ok(Some(Jitter {
                timer_id: timer_id.into(),
                jitter_ms: j,
            })),
        }
    }

    /// The instant occurrence `nominal_ms` fires at.
    pub fn at(&self, nominal_ms: i64) -> i64 {
        let key = format!("{}/{nominal_ms}", self.timer_id);
        let h = murmur2::murmur2(key.as_bytes(), murmur2::KAFKA_SEED);
        // jitter_ms <= a day < 2^32: the modulo's bias is below 2 %, and stable.
        let offset = i64::from(h) % self.jitter_ms;
        nominal_ms.saturating_add(offset).min(MAX_INSTANT_MS)
    }

    /// Jitters `dues` (ascending nominal instants) and puts them back in order.
    pub fn apply(&self, dues: &mut [i64]) {
        for d in dues.iter_mut() {
            *d = self.at(*d);
        }
        dues.sort_unstable();
    }
}

/// `due_ms` of timer `timer_id` jittered by up to `jitter_ms` (a one-shot timer's).
pub fn one_shot(timer_id: &str, due_ms: i64, jitter_ms: Option<i64>) -> Result<i64, String> {
    Ok(match Jitter::new(timer_id, jitter_ms)? {
        Some(j) => j.at(due_ms),
        None => due_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_stable_and_within_the_jitter() {
        let j = Jitter::new("order-42", Some(10_000)).unwrap().unwrap();
        for n in [0, 1_000, 1_764_000_000_000] {
            let at = j.at(n);
            assert!((n..n + 10_000).contains(&at), "{n} -> {at}");
            assert_eq!(at, j.at(n), "deterministic");
        }
        // Pinned: the offset is part of the stored schedule's meaning (a rebuild by a
        // newer build must fire at the same instant).
        assert_eq!(j.at(1_764_000_000_000) - 1_764_000_000_000, PINNED);
    }

    const PINNED: i64 = 8_045;

    #[test]
    fn a_thousand_timers_spread_over_the_window() {
        let mut per_second = [0u32; 10];
        for i in 0..1_000 {
            let j = Jitter::new(&format!("t-{i}"), Some(10_000))
                .unwrap()
                .unwrap();
            per_second[(j.at(3_600_000) - 3_600_000) as usize / 1_000] += 1;
        }
        assert!(
            per_second.iter().all(|&n| (60..=140).contains(&n)),
            "{per_second:?}"
        );
    }

    #[test]
    fn no_jitter_and_bad_jitter() {
        assert_eq!(Jitter::new("t", Some(0)).unwrap(), None);
        assert_eq!(one_shot("t", 5, None).unwrap(), 5);
        assert!(Jitter::new("t", Some(-1)).is_err());
        assert!(Jitter::new("t", Some(MAX_JITTER_MS + 1)).is_err());
        let mut dues = [0, 1, 2];
        Jitter::new("t", Some(1_000))
            .unwrap()
            .unwrap()
            .apply(&mut dues);
        assert!(dues.windows(2).all(|w| w[0] <= w[1]), "{dues:?}");
    }
}
