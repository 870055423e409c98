//! Exclusion calendars: named sets of local times in which a repeating timer does not
//! fire (holidays, maintenance windows, weekends). Defined in the applications file,
//! reloaded with it on SIGHUP:
//!
//! ```toml
//! [calendars.holidays-de]
//! dates = ["2026-12-25", "2026-12-26", "2027-01-01"]     # whole days
//! ranges = [["2026-12-24T12:00", "2026-12-27"]]          # [from, to), a date is its midnight
//! weekly = ["Sat-Sun", "Mon 00:00-06:00"]                # days, or a window of a day
//! ```
//!
//! Every time is read on the wall clock of the timer's own zone. A timer naming a calendar
//! skips its occurrences inside it, or (`calendar_policy = DEFER`) fires them at the first
//! local time after the exclusion (several deferred onto one instant fire once).

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Weekday};

/// A calendar as written in the file.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Whole local days, `YYYY-MM-DD`.
    #[serde(default)]
    pub dates: Vec<String>,
    /// `[from, to)` local ranges, each end `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS]`.
    #[serde(default)]
    pub ranges: Vec<[String; 2]>,
    /// Weekly exclusions: `Sat`, `Sat-Sun`, or a day's window `Mon 00:00-06:00`.
    #[serde(default)]
    pub weekly: Vec<String>,
}

/// A parsed calendar.
#[derive(Debug, Clone, PartialEq)]
pub struct Calendar {
    dates: Vec<NaiveDate>,
    ranges: Vec<(NaiveDateTime, NaiveDateTime)>,
    /// A weekday and the window of it, `[from, to)` (to = `None`: through midnight).
    weekly: Vec<(Weekday, NaiveTime, Option<NaiveTime>)>,
}

impl Calendar {
    /// Parses `spec`; the error names what is wrong.
    pub fn parse(spec: &Spec) -> Result<Calendar, String> {
        let dates = spec
            .dates
            .iter()
            .map(|d| date(d))
            .collect::<Result<_, _>>()?;
        let mut ranges = Vec::new();
        for [from, to] in &spec.ranges {
            let (f, t) = (instant(from)?, instant(to)?);
            if t <= f {
                return Err(format!("range [{from}, {to}) is empty"));
            }
            ranges.push((f, t));
        }
        let mut weekly = Vec::new();
        for w in &spec.weekly {
            weekly.extend(weekly_entry(w)?);
        }
        Ok(Calendar {
            dates,
            ranges,
            weekly,
        })
    }

    /// A calendar excluding nothing.
    pub fn empty() -> Calendar {
        Calendar {
            dates: Vec::new(),
            ranges: Vec::new(),
            weekly: Vec::new(),
        }
    }

    /// When the exclusion holding local time `t` ends (the first local time after it that
    /// no entry excludes), or `None` when `t` is not excluded.
    pub fn excluded_until(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut end = self.end_of_entry(t)?;
        // Adjacent entries (a weekend then a holiday Monday) chain; bounded for safety.
        for _ in 0..1_000 {
            match self.end_of_entry(end) {
                Some(later) if later > end => end = later,
                _ => break,
            }
        }
        Some(end)
    }

    /// The end of the latest-ending entry holding `t`.
    fn end_of_entry(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        let midnight = |d: NaiveDate| d.and_time(NaiveTime::MIN);
        let next_midnight = midnight(t.date() + Duration::days(1));
        let days = self
            .dates
            .iter()
            .filter(|d| **d == t.date())
            .map(|_| next_midnight);
        let ranges = self
            .ranges
            .iter()
            .filter(|(f, e)| *f <= t && t < *e)
            .map(|(_, e)| *e);
        let weeks = self
            .weekly
            .iter()
            .filter(|(day, from, to)| {
                *day == t.weekday() && *from <= t.time() && to.is_none_or(|to| t.time() < to)
            })
            .map(|(_, _, to)| to.map_or(next_midnight, |to| t.date().and_time(to)));
        days.chain(ranges).chain(weeks).max()
    }
}

fn date(s: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
        .map_err(|e| format!("{s:?} is not a date YYYY-MM-DD: {e}"))
}

/// A date (its midnight) or a local date and time.
fn instant(s: &str) -> Result<NaiveDateTime, String> {
    let s = s.trim();
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_time(NaiveTime::MIN));
    }
    ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .ok_or_else(|| format!("{s:?} is not YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]"))
}

/// `Sat`, `Sat-Sun` (a cycle: `Fri-Mon` is four days), or `Mon 00:00-06:00`.
fn weekly_entry(s: &str) -> Result<Vec<(Weekday, NaiveTime, Option<NaiveTime>)>, String> {
    let (days, window) = match s.trim().split_once(' ') {
        Some((d, w)) => (d, Some(w.trim())),
        None => (s.trim(), None),
    };
    let day = |d: &str| {
        d.parse::<Weekday>()
            .map_err(|_| format!("{d:?} in {s:?} is not a weekday (Mon ... Sun)"))
    };
    let (first, last) = match days.split_once('-') {
        Some((a, b)) => (day(a)?, day(b)?),
        None => (day(days)?, day(days)?),
    };
    let (from, to) = match window {
        None => (NaiveTime::MIN, None),
        Some(w) => {
            let (f, t) = w
                .split_once('-')
                .ok_or_else(|| format!("{s:?}: a window is HH:MM-HH:MM"))?;
            let time = |x: &str| {
                NaiveTime::parse_from_str(x.trim(), "%H:%M")
                    .map_err(|e| format!("{x:?} in {s:?} is not HH:MM: {e}"))
            };
            let to = match t.trim() {
                "24:00" => None,
                t => Some(time(t)?),
            };
            let from = time(f)?;
            if to.is_some_and(|to| to <= from) {
                return Err(format!("{s:?}: the window is empty"));
            }
            (from, to)
        }
    };
    let mut out = vec![(first, from, to)];
    let mut d = first;
    while d != last {
        d = d.succ();
        out.push((d, from, to));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> NaiveDateTime {
        instant(s).unwrap()
    }

    fn cal(dates: &[&str], ranges: &[[&str; 2]], weekly: &[&str]) -> Calendar {
        Calendar::parse(&Spec {
            dates: dates.iter().map(|s| s.to_string()).collect(),
            ranges: ranges
                .iter()
                .map(|[a, b]| [a.to_string(), b.to_string()])
                .collect(),
            weekly: weekly.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn dates_ranges_and_weekly_windows_exclude_and_end() {
        // 2026-12-25 is a Friday.
        let c = cal(
            &["2026-12-25"],
            &[["2026-12-31T18:00", "2027-01-01T06:00"]],
            &["Sat-Sun", "Mon 00:00-06:00"],
        );
        assert_eq!(c.excluded_until(at("2026-12-24T23:59")), None);
        // Friday's holiday chains into the weekend and Monday's early window.
        assert_eq!(
            c.excluded_until(at("2026-12-25T09:00")),
            Some(at("2026-12-28T06:00"))
        );
        assert_eq!(c.excluded_until(at("2026-12-28T06:00")), None);
        assert_eq!(c.excluded_until(at("2026-12-31T17:59")), None);
        assert_eq!(
            c.excluded_until(at("2026-12-31T23:00")),
            Some(at("2027-01-01T06:00"))
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let bad = |s: Spec| Calendar::parse(&s).unwrap_err();
        assert!(bad(Spec {
            dates: vec!["25.12.2026".into()],
            ..Default::default()
        })
        .contains("25.12.2026"));
        assert!(bad(Spec {
            weekly: vec!["Caturday".into()],
            ..Default::default()
        })
        .contains("weekday"));
        assert!(bad(Spec {
            weekly: vec!["Mon 06:00-05:00".into()],
            ..Default::default()
        })
        .contains("empty"));
        assert!(bad(Spec {
            ranges: vec![["2027-01-02".into(), "2027-01-01".into()]],
            ..Default::default()
        })
        .contains("empty"));
        let fri_mon = cal(&[], &[], &["Fri-Mon"]);
        assert_eq!(fri_mon.weekly.len(), 4, "a cycle through the weekend");
        let evening = cal(&[], &[], &["Fri 18:00-24:00"]);
        assert_eq!(
            evening.excluded_until(at("2026-12-25T19:00")),
            Some(at("2026-12-26T00:00"))
        );
    }
}
