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
//! An interval schedule (`every_ms`) fires at its anchor (`start_ms`) plus whole
//! intervals, each instant computed from the anchor (never from the last fire), so it
//! does not drift ([`every`]). Either kind may spread its fires with a jitter: each
//! occurrence fires a deterministic offset later, derived from the timer id and the
//! occurrence ([`jitter`]), so a retry or a rebuild fires it at the same instant.
//!
//! [`Compiled::plan`] computes the occurrences of a window and applies the misfire policy
//! to the ones that were missed.

use crate::calendar::Calendar;
use crate::command::{CalendarPolicy, MisfirePolicy};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use cron::TimeUnitSpec;
use serde::{Deserialize, Serialize};
use std::str::FromStr;
use std::sync::Arc;

mod every;
mod excluded;
pub mod jitter;
mod wall;

/// The latest instant ktimer accepts: 9999-12-31T23:59:59.999Z. Every instant a command
/// names is checked against it (and against 0) before any arithmetic. (Here, where the
/// schedules that compute instants live; `timer` re-exports it.)
pub const MAX_INSTANT_MS: i64 = 253_402_300_799_999;

/// A repeating timer's schedule, as given in the command (stored as JSON with the
/// timer): a cron expression, or an interval (`every_ms`, anchored at `start_ms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronSpec {
    /// The expression as given (6 or 7 fields with seconds, or the 5-field form); empty
    /// for an interval.
    #[serde(default)]
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
    /// An interval instead of `cron`: fires at `start_ms + k * every_ms` (k >= 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<i64>,
    /// Each occurrence fires up to this much later: a deterministic offset in
    /// `[0, jitter_ms)` of the timer id and the occurrence ([`jitter`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<i64>,
    /// The exclusion calendar it obeys ([`crate::calendar`]), by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    /// What an excluded occurrence does (default: skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar_policy: Option<CalendarPolicy>,
}

/// How a schedule produces its instants.
#[derive(Debug, Clone)]
enum Rule {
    /// A cron expression on the zone's wall clock.
    Cron {
        schedule: Box<cron::Schedule>,
        /// False for interval-like expressions (hour field `*`): they fire in both passes
        /// of a repeated hour.
        wall_clock: bool,
    },
    /// Every `every_ms` from `anchor_ms`.
    Every { every_ms: i64, anchor_ms: i64 },
}

/// Why a rule stopped listing instants.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    /// Past the window's upper bound.
    Upper,
    /// At the cap.
    Capped,
    /// The rule has no more instants, ever.
    Ended,
}

/// A parsed [`CronSpec`] of one timer, ready to compute occurrences.
#[derive(Debug, Clone)]
pub struct Compiled {
    rule: Rule,
    tz: Tz,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    jitter: Option<jitter::Jitter>,
    calendar: Option<(Arc<Calendar>, CalendarPolicy)>,
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
            every_ms: None,
            jitter_ms: None,
            calendar: None,
            calendar_policy: None,
        }
    }

    /// Every `every_ms` from `start_ms`, in UTC, otherwise as [`CronSpec::new`].
    pub fn every(every_ms: i64, start_ms: i64) -> CronSpec {
        CronSpec {
            every_ms: Some(every_ms),
            start_ms: Some(start_ms),
            ..CronSpec::new("", "UTC")
        }
    }

    /// An interval without `start_ms` anchored one interval after `origin_ms` (the
    /// service's rule, from the command's record timestamp, so a replay computes the same
    /// grid); any other schedule as it is.
    pub fn anchored(mut self, origin_ms: i64) -> Result<CronSpec, String> {
        if let (Some(every), None) = (self.every_ms.filter(|e| *e > 0), self.start_ms) {
            let start = origin_ms
                .checked_add(every)
                .filter(|s| *s <= MAX_INSTANT_MS);
            self.start_ms = Some(start.ok_or_else(|| {
                format!("every_ms {every} puts the first fire past {MAX_INSTANT_MS}")
            })?);
        }
        Ok(self)
    }

    /// Parses the schedule and the zone for timer `timer_id` (whose id seeds the
    /// jitter), with `calendar`, the definition of the calendar it names (the caller
    /// looks it up: the applications file in force); the error says what is wrong.
    pub fn compile(
        &self,
        timer_id: &str,
        calendar: Option<Arc<Calendar>>,
    ) -> Result<Compiled, String> {
        let rule = self.rule()?;
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
        let jitter = jitter::Jitter::new(timer_id, self.jitter_ms)?;
        let calendar = match (&self.calendar, calendar) {
            (None, _) => None,
            (Some(name), None) => return Err(format!(
                "unknown calendar {name:?} (define it under [calendars.{name}] in the applications file)"
            )),
            (Some(_), Some(c)) => Some((c, self.calendar_policy.unwrap_or_default())),
        };
        Ok(Compiled {
            rule,
            tz,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            jitter,
            calendar,
        })
    }

    /// The cron expression or the interval, exactly one of them.
    fn rule(&self) -> Result<Rule, String> {
        match (self.every_ms, self.cron.trim().is_empty()) {
            (Some(_), false) => Err("set cron or every_ms, not both".into()),
            (Some(every_ms), true) => every::rule(every_ms, self.start_ms),
            (None, true) => Err("a repeating timer needs cron or every_ms".into()),
            (None, false) => {
                let expr = wall::normalize(&self.cron)?;
                let schedule = cron::Schedule::from_str(&expr)
                    .map_err(|e| format!("invalid cron expression {:?}: {e}", self.cron))?;
                Ok(Rule::Cron {
                    wall_clock: !schedule.hours().is_all(),
                    schedule: Box::new(schedule),
                })
            }
        }
    }
}

impl Compiled {
    /// Occurrences strictly after `after_ms` and at or before `until_ms`, at most `cap`
    /// (the window bounds the nominal instants; the dues are jittered, in order).
    pub fn occurrences(&self, after_ms: i64, until_ms: i64, cap: usize) -> Occurrences {
        let mut o = match &self.calendar {
            None => self.nominal(after_ms, until_ms, cap),
            Some((c, policy)) => self.allowed(c, *policy, after_ms, until_ms, cap),
        };
        if let Some(j) = &self.jitter {
            j.apply(&mut o.dues);
        }
        o
    }

    /// [`Compiled::occurrences`] without the jitter.
    fn nominal(&self, after_ms: i64, until_ms: i64, cap: usize) -> Occurrences {
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
        let cap = cap.max(1);
        let (dues, stop) = match &self.rule {
            Rule::Cron { schedule, .. } => self.cron_dues(schedule, lower_t, upper, cap),
            Rule::Every {
                every_ms,
                anchor_ms,
            } => every::dues(*anchor_ms, *every_ms, lower, upper, cap),
        };
        let covered_ms = match (stop == Stop::Capped || dues.len() >= cap, dues.last()) {
            (true, Some(&last)) => last,
            _ => until_ms.max(after_ms),
        };
        let exhausted = match stop {
            Stop::Upper => beyond_end,
            Stop::Capped => false,
            Stop::Ended => true,
        };
        Occurrences {
            exhausted: exhausted && dues.len() < cap,
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
}

fn instant(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

#[cfg(test)]
mod tests;
