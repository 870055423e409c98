//! Cron schedules: parsing, time zones, DST rules and the occurrences to materialise.
//!
//! Expressions are evaluated on the *local wall clock* of the timer's IANA zone and each
//! local occurrence is then mapped to an instant:
//!
//! - a local time that exists once maps to that instant;
//! - a local time inside a skipped interval (spring forward) maps to the first instant
//!   after the jump, so it fires once, right after the clock moved; several occurrences
//!   inside the gap collapse into that one fire;
//! - a local time that exists twice (fall back) maps to its first instant only, so it
//!   fires once; except for expressions whose hour field is `*` (interval schedules such
//!   as "every 5 seconds"), which keep firing in absolute time through the repeated hour,
//!   like cronie's and Vixie cron's wildcard jobs.
//!
//! [`CronSpec::plan`] computes the occurrences of a window and applies the misfire policy
//! to the ones that were missed.

use crate::command::MisfirePolicy;
use chrono::{DateTime, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use cron::TimeUnitSpec;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// The latest instant ktimer accepts: 9999-12-31T23:59:59.999Z. Every instant a command
/// names is checked against it (and against 0) before any arithmetic. (Here, where the
/// schedules that compute instants live; `timer` re-exports it.)
pub const MAX_INSTANT_MS: i64 = 253_402_300_799_999;

/// A cron timer's schedule, as given in the command (stored as JSON with the timer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronSpec {
    /// The expression as given (6 or 7 fields with seconds, or the 5-field form).
    pub cron: String,
    /// IANA zone name.
    pub time_zone: String,
    /// No fire before this instant.
    pub start_ms: Option<i64>,
    /// No fire after this instant.
    pub end_ms: Option<i64>,
    /// Stop after this many fires.
    pub max_fires: Option<i64>,
    /// What to do with missed occurrences.
    pub misfire: MisfirePolicy,
}

/// A parsed [`CronSpec`], ready to compute occurrences.
#[derive(Debug, Clone)]
pub struct Compiled {
    schedule: cron::Schedule,
    tz: Tz,
    /// False for interval schedules (hour field `*`): they fire in both passes of a
    /// repeated hour.
    wall_clock: bool,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
}

/// Occurrences computed for a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrences {
    /// Due instants (Unix ms), ascending.
    pub dues: Vec<i64>,
    /// Every occurrence up to this instant is in `dues` (or was before `after`).
    pub covered_ms: i64,
    /// No occurrence exists after `covered_ms`.
    pub exhausted: bool,
}

/// How far ahead and how much to materialise, and when an occurrence counts as missed.
#[derive(Debug, Clone, Copy)]
pub struct PlanConfig {
    /// Occurrences are materialised this far ahead of now.
    pub window_ms: i64,
    /// Most occurrences of one timer materialised in one pass.
    pub max_per_pass: usize,
    /// An occurrence more than this late when it is materialised or claimed was missed.
    pub misfire_threshold_ms: i64,
}

impl From<&crate::config::RunArgs> for PlanConfig {
    fn from(a: &crate::config::RunArgs) -> PlanConfig {
        PlanConfig {
            window_ms: a.cron_window_ms,
            max_per_pass: a.cron_max_per_pass,
            misfire_threshold_ms: a.misfire_threshold_ms,
        }
    }
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            window_ms: 3_600_000,
            max_per_pass: 1_000,
            misfire_threshold_ms: 1_000,
        }
    }
}

impl CronSpec {
    /// Expression `cron` in zone `time_zone`, without bounds or a fire limit, missed
    /// occurrences fired once (what a command that names none gets).
    pub fn new(cron: &str, time_zone: &str) -> CronSpec {
        CronSpec {
            cron: cron.into(),
            time_zone: time_zone.into(),
            start_ms: None,
            end_ms: None,
            max_fires: None,
            misfire: MisfirePolicy::FireOnce,
        }
    }

    /// Parses the expression and the zone; the error says what is wrong.
    pub fn compile(&self) -> Result<Compiled, String> {
        let expr = normalize(&self.cron)?;
        let schedule = cron::Schedule::from_str(&expr)
            .map_err(|e| format!("invalid cron expression {:?}: {e}", self.cron))?;
        let tz = Tz::from_str(&self.time_zone).map_err(|_| {
            format!(
                "unknown time zone {:?} (use an IANA name such as Europe/Berlin)",
                self.time_zone
            )
        })?;
        let bound = MAX_INSTANT_MS;
        for (field, v) in [("start_ms", self.start_ms), ("end_ms", self.end_ms)] {
            if v.is_some_and(|v| !(0..=bound).contains(&v)) {
                return Err(format!("{field} must be between 0 and {bound}"));
            }
        }
        if let (Some(s), Some(e)) = (self.start_ms, self.end_ms) {
            if e < s {
                return Err(format!("end_ms {e} is before start_ms {s}"));
            }
        }
        if let Some(m) = self.max_fires {
            if m <= 0 {
                return Err(format!("max_fires must be positive, got {m}"));
            }
        }
        Ok(Compiled {
            wall_clock: !schedule.hours().is_all(),
            schedule,
            tz,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
        })
    }
}

impl Compiled {
    /// Occurrences strictly after `after_ms` and at or before `until_ms`, at most `cap`.
    pub fn occurrences(&self, after_ms: i64, until_ms: i64, cap: usize) -> Occurrences {
        // Within [0, MAX_INSTANT_MS], so the hour arithmetic below stays in chrono's range.
        let bound = MAX_INSTANT_MS;
        let lower = after_ms
            .saturating_add(1)
            .max(self.start_ms.unwrap_or(0))
            .max(0);
        let upper = until_ms.min(self.end_ms.unwrap_or(i64::MAX)).min(bound);
        let beyond_end = self.end_ms.is_some_and(|e| e <= until_ms) || until_ms >= bound;
        let empty = |exhausted| Occurrences {
            dues: vec![],
            covered_ms: until_ms.max(after_ms),
            exhausted,
        };
        let (Some(lower_t), Some(_)) = (instant(lower), instant(upper)) else {
            return empty(true);
        };
        if lower > upper {
            return empty(beyond_end);
        }
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
        let mut exhausted = true;
        // Whether the loop stopped at the cap (dues may be fewer once a gap's collapsed
        // duplicates are removed: the window is still covered only up to the last).
        let mut capped = false;
        for naive in self.schedule.after(&start_local.and_utc()) {
            let naive = naive.naive_utc();
            let (first, second) = self.map(naive);
            if first > upper {
                exhausted = beyond_end;
                break;
            }
            for t in [Some(first), second].into_iter().flatten() {
                if t >= lower && t <= upper {
                    dues.push(t);
                }
            }
            // Past an overlap (a single mapping), everything collected precedes what follows.
            if second.is_none() && dues.len() >= cap {
                exhausted = false;
                capped = true;
                break;
            }
        }
        dues.sort_unstable();
        dues.dedup();
        if dues.len() > cap {
            dues.truncate(cap);
        }
        let covered_ms = match (capped || dues.len() >= cap, dues.last()) {
            (true, Some(&last)) => last,
            _ => until_ms.max(after_ms),
        };
        Occurrences {
            exhausted: exhausted && !capped && dues.len() < cap,
            dues,
            covered_ms,
        }
    }

    /// The occurrences of the window (`after_ms`, `now_ms + window`], with the misfire
    /// policy applied to those more than the threshold before `now_ms`.
    pub fn plan(
        &self,
        after_ms: i64,
        now_ms: i64,
        policy: MisfirePolicy,
        cfg: &PlanConfig,
    ) -> Occurrences {
        let until = now_ms.saturating_add(cfg.window_ms);
        // Saturating: `now_ms` is the clock in the service, but any i64 must plan.
        let before_missed = now_ms
            .saturating_sub(cfg.misfire_threshold_ms)
            .saturating_sub(1);
        let cap = cfg.max_per_pass.max(1);
        match policy {
            MisfirePolicy::FireAll => self.occurrences(after_ms, until, cap),
            MisfirePolicy::Skip => self.occurrences(after_ms.max(before_missed), until, cap),
            MisfirePolicy::FireOnce => {
                let first = self.occurrences(after_ms, before_missed, 1);
                let mut rest = self.occurrences(after_ms.max(before_missed), until, cap);
                if let Some(&d) = first.dues.first() {
                    rest.dues.insert(0, d);
                    rest.dues.truncate(cap);
                }
                rest
            }
        }
    }

    /// Instant `ms` on the wall clock of the schedule's zone; `None` outside chrono's range.
    pub fn wall_clock(&self, ms: i64) -> Option<DateTime<Tz>> {
        Some(instant(ms)?.with_timezone(&self.tz))
    }

    fn local(&self, t: DateTime<Utc>) -> NaiveDateTime {
        t.with_timezone(&self.tz).naive_local()
    }

    /// The instant(s) of a local time under the DST rules of the module doc.
    fn map(&self, naive: NaiveDateTime) -> (i64, Option<i64>) {
        use chrono::LocalResult;
        match self.tz.from_local_datetime(&naive) {
            LocalResult::Single(t) => (t.timestamp_millis(), None),
            LocalResult::Ambiguous(a, b) => (
                a.timestamp_millis(),
                (!self.wall_clock).then(|| b.timestamp_millis()),
            ),
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

fn instant(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

/// Accepts the 5-field form (minute hour day month weekday, weekday 0-7 with 0 and 7 =
/// Sunday) by adding a seconds field and naming the weekdays; 6 and 7 fields pass as is.
fn normalize(expr: &str) -> Result<String, String> {
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

#[cfg(test)]
mod tests;
