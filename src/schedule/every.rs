//! Interval schedules: the instants `anchor + k * every` (k >= 0), each computed from the
//! anchor, so a timer firing every 250 ms for a week is still on its grid (no drift from
//! late fires or rounding).

use super::{Rule, Stop, MAX_INSTANT_MS};

/// The rule of an interval of `every_ms` anchored at `start_ms` (its first instant).
pub(super) fn rule(every_ms: i64, start_ms: Option<i64>) -> Result<Rule, String> {
    if !(1..=MAX_INSTANT_MS).contains(&every_ms) {
        return Err(format!(
            "every_ms must be between 1 and {MAX_INSTANT_MS}, got {every_ms}"
        ));
    }
    let Some(anchor_ms) = start_ms else {
        return Err("an interval needs its anchor, start_ms".into());
    };
    Ok(Rule::Every {
        every_ms,
        anchor_ms,
    })
}

/// The instants of the grid from `lower` through `upper` (both at or after the anchor),
/// at most `cap`, ascending, and why the list stopped.
pub(super) fn dues(
    anchor: i64,
    every: i64,
    lower: i64,
    upper: i64,
    cap: usize,
) -> (Vec<i64>, Stop) {
    // The first k with anchor + k * every >= lower (lower >= anchor: the anchor is start_ms).
    let from = lower.saturating_sub(anchor).max(0);
    let mut k = from / every + i64::from(from % every != 0);
    let mut dues = Vec::new();
    loop {
        let Some(d) = k.checked_mul(every).and_then(|o| o.checked_add(anchor)) else {
            return (dues, Stop::Ended);
        };
        if d > upper {
            return (dues, Stop::Upper);
        }
        if dues.len() >= cap {
            return (dues, Stop::Capped);
        }
        dues.push(d);
        k += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::CronSpec;

    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn each_instant_is_the_anchor_plus_whole_intervals() {
        let c = CronSpec::every(250, 1_000).compile("t", None).unwrap();
        let o = c.occurrences(0, 2_000, 100);
        assert_eq!(o.dues, [1_000, 1_250, 1_500, 1_750, 2_000]);
        assert!(!o.exhausted);
        // A window starting between two instants, a week on: still on the grid.
        let week = 7 * DAY_MS;
        let o = c.occurrences(week + 1_100, week + 1_600, 100);
        assert_eq!(o.dues, [week + 1_250, week + 1_500]);
        assert_eq!(o.covered_ms, week + 1_600);
    }

    #[test]
    fn a_long_interval_lands_exactly() {
        let h36 = 36 * 3_600_000;
        let c = CronSpec::every(h36, 5).compile("t", None).unwrap();
        let o = c.occurrences(5, 10 * DAY_MS, 100);
        assert_eq!(
            o.dues,
            [
                5 + h36,
                5 + 2 * h36,
                5 + 3 * h36,
                5 + 4 * h36,
                5 + 5 * h36,
                5 + 6 * h36
            ]
        );
    }

    #[test]
    fn the_cap_the_end_and_the_last_instant_bound_it() {
        let c = CronSpec::every(10, 0).compile("t", None).unwrap();
        let o = c.occurrences(-1, 1_000, 3);
        assert_eq!(
            (o.dues.as_slice(), o.covered_ms, o.exhausted),
            (&[0, 10, 20][..], 20, false)
        );
        let ended = CronSpec {
            end_ms: Some(35),
            ..CronSpec::every(10, 0)
        };
        let o = ended
            .compile("t", None)
            .unwrap()
            .occurrences(15, 1_000, 100);
        assert_eq!((o.dues.as_slice(), o.exhausted), (&[20, 30][..], true));
        let far = CronSpec::every(super::MAX_INSTANT_MS, 1)
            .compile("t", None)
            .unwrap();
        let o = far.occurrences(1, i64::MAX, 10);
        assert_eq!((o.dues.as_slice(), o.exhausted), (&[][..], true));
    }

    #[test]
    fn nonsense_intervals_are_refused() {
        assert!(CronSpec::every(0, 0).compile("t", None).is_err());
        assert!(CronSpec {
            start_ms: None,
            ..CronSpec::every(5, 0)
        }
        .compile("t", None)
        .is_err());
        let both = CronSpec {
            cron: "* * * * * *".into(),
            ..CronSpec::every(5, 0)
        };
        assert!(both.compile("t", None).unwrap_err().contains("not both"));
    }
}
