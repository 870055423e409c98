//! Cron rules: the expression's local times on the zone's wall clock, mapped to instants
//! under the DST rules of [`super`]'s module doc; the 5-field form accepted.

use super::{Compiled, Rule, Stop};
use chrono::{DateTime, NaiveDateTime, Offset, TimeZone, Utc};

impl Compiled {
    /// The instants of cron `schedule` from `lower_t` through `upper`, at most `cap`,
    /// ascending, and why the list stopped.
    pub(super) fn cron_dues(
        &self,
        schedule: &cron::Schedule,
        lower_t: DateTime<Utc>,
        upper: i64,
        cap: usize,
    ) -> (Vec<i64>, Stop) {
        let lower = lower_t.timestamp_millis();
        // Start early enough that local times which map forward (a gap) or a second
        // time (an overlap) onto instants >= lower are seen: back by the offset change
        // of the surrounding hours, if any.
        let off = |t: DateTime<Utc>| {
            let o = self.tz.offset_from_utc_datetime(&t.naive_utc());
            o.fix().local_minus_utc()
        };
        let hours = chrono::Duration::hours(3);
        let shift = (off(lower_t) - off(lower_t - hours))
            .abs()
            .max((off(lower_t + hours) - off(lower_t)).abs());
        let start_local = self.local(lower_t)
            - chrono::Duration::seconds(shift as i64)
            - chrono::Duration::milliseconds(1);
        let mut dues = Vec::new();
        let mut stop = Stop::Ended;
        for naive in schedule.after(&start_local.and_utc()) {
            let naive = naive.naive_utc();
            let (first, second) = self.map(naive);
            if first > upper {
                stop = Stop::Upper;
                break;
            }
            for t in [Some(first), second].into_iter().flatten() {
                if t >= lower && t <= upper {
                    dues.push(t);
                }
            }
            // Past an overlap (a single mapping), everything collected precedes what follows.
            if second.is_none() && dues.len() >= cap {
                // (Dues may be fewer once a gap's collapsed duplicates are removed: the
                // window is still covered only up to the last.)
                stop = Stop::Capped;
                break;
            }
        }
        dues.sort_unstable();
        dues.dedup();
        dues.truncate(cap);
        (dues, stop)
    }

    fn local(&self, t: DateTime<Utc>) -> NaiveDateTime {
        t.with_timezone(&self.tz).naive_local()
    }

    /// The instant(s) of a local time under the DST rules of the module doc.
    pub(super) fn map(&self, naive: NaiveDateTime) -> (i64, Option<i64>) {
        use chrono::LocalResult;
        match self.tz.from_local_datetime(&naive) {
            LocalResult::Single(t) => (t.timestamp_millis(), None),
            LocalResult::Ambiguous(a, b) => {
                let wall_clock = matches!(
                    self.rule,
                    Rule::Cron {
                        wall_clock: true,
                        ..
                    }
                );
                (
                    a.timestamp_millis(),
                    (!wall_clock).then(|| b.timestamp_millis()),
                )
            }
            LocalResult::None => (self.after_gap(naive), None),
        }
    }

    /// The first instant whose local time is at or after `naive` (which a gap skipped).
    fn after_gap(&self, naive: NaiveDateTime) -> i64 {
        let target = naive.and_utc().timestamp();
        // Local time minus UTC is within ±26 h everywhere.
        let (mut lo, mut hi) = (target - 26 * 3600, target + 26 * 3600);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let t = DateTime::<Utc>::from_timestamp(mid, 0).unwrap_or_default();
            if self.local(t).and_utc().timestamp() >= target {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo * 1000
    }
}

/// Accepts the 5-field form (minute hour day month weekday, weekday 0-7 with 0 and 7 =
/// Sunday) by adding a seconds field and naming the weekdays; 6 and 7 fields pass as is.
pub(super) fn normalize(expr: &str) -> Result<String, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    match fields.len() {
        1 if fields[0].starts_with('@') => Ok(fields[0].to_string()),
        5 => {
            let dow = unix_weekdays(fields[4])?;
            Ok(format!("0 {} {} {} {} {dow}", fields[0], fields[1], fields[2], fields[3]))
        }
        6 | 7 => Ok(fields.join(" ")),
        n => Err(format!(
            "invalid cron expression {expr:?}: expected 5 fields (min hour day month weekday), 6 with seconds first, or 7 with a year; got {n}"
        )),
    }
}

fn unix_weekdays(field: &str) -> Result<String, String> {
    const NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
    let name = |s: &str| -> Result<String, String> {
        match s.parse::<usize>() {
            Ok(n) if n < NAMES.len() => Ok(NAMES[n].to_string()),
            Ok(n) => Err(format!("weekday {n} is out of range 0-7")),
            Err(_) => Ok(s.to_string()),
        }
    };
    let items = field.split(',').map(|item| {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        let range = range
            .split('-')
            .map(name)
            .collect::<Result<Vec<_>, _>>()?
            .join("-");
        Ok(match step {
            Some(s) => format!("{range}/{s}"),
            None => range,
        })
    });
    Ok(items.collect::<Result<Vec<String>, String>>()?.join(","))
}
