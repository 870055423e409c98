//! A schedule's occurrences under its exclusion calendar: those inside an exclusion (on
//! the zone's wall clock) are dropped, or deferred to the first local time after it.

use super::{Compiled, Occurrences};
use crate::calendar::Calendar;
use crate::command::CalendarPolicy;

/// Most windows one call looks through for an occurrence the calendar allows (a calendar
/// excluding everything must not loop for ever: the caller asks again from `covered_ms`).
const MAX_WINDOWS: usize = 64;

impl Compiled {
    /// [`Compiled::occurrences`] before the jitter, under calendar `cal`.
    pub(super) fn allowed(
        &self,
        cal: &Calendar,
        policy: CalendarPolicy,
        after_ms: i64,
        until_ms: i64,
        cap: usize,
    ) -> Occurrences {
        let mut out = Occurrences {
            dues: Vec::new(),
            covered_ms: after_ms,
            exhausted: false,
        };
        let mut from = after_ms;
        for _ in 0..MAX_WINDOWS {
            let o = self.nominal(from, until_ms, cap.saturating_sub(out.dues.len()).max(1));
            out.dues
                .extend(o.dues.iter().filter_map(|&d| self.obey(cal, policy, d)));
            out.covered_ms = o.covered_ms;
            out.exhausted = o.exhausted;
            if o.exhausted
                || out.dues.len() >= cap
                || o.covered_ms >= until_ms
                || o.covered_ms <= from
            {
                break;
            }
            from = o.covered_ms;
        }
        out.dues.sort_unstable();
        out.dues.dedup();
        out
    }

    /// Occurrence `due_ms` under the calendar: itself, its deferred instant, or none.
    fn obey(&self, cal: &Calendar, policy: CalendarPolicy, due_ms: i64) -> Option<i64> {
        let local = self.wall_clock(due_ms)?.naive_local();
        let Some(end) = cal.excluded_until(local) else {
            return Some(due_ms);
        };
        match policy {
            CalendarPolicy::Skip => None,
            CalendarPolicy::Defer => Some(self.map(end).0.max(due_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::CronSpec;
    use crate::calendar::{Calendar, Spec};
    use crate::command::CalendarPolicy;
    use chrono::DateTime;
    use std::sync::Arc;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn holidays() -> Arc<Calendar> {
        let spec = Spec {
            dates: vec!["2026-12-25".into()],
            weekly: vec!["Sat-Sun".into()],
            ..Default::default()
        };
        Arc::new(Calendar::parse(&spec).unwrap())
    }

    fn daily(policy: Option<CalendarPolicy>) -> Vec<i64> {
        let spec = CronSpec {
            calendar: Some("holidays".into()),
            calendar_policy: policy,
            ..CronSpec::new("0 0 9 * * *", "Europe/Berlin")
        };
        let c = spec.compile("t", Some(holidays())).unwrap();
        c.occurrences(ms("2026-12-23T00:00:00Z"), ms("2026-12-31T00:00:00Z"), 100)
            .dues
    }

    #[test]
    fn excluded_local_days_are_skipped_in_the_timers_zone() {
        // 09:00 in Berlin is 08:00Z; the 25th is a Friday, the 26th and 27th a weekend.
        let want = [
            "2026-12-23",
            "2026-12-24",
            "2026-12-28",
            "2026-12-29",
            "2026-12-30",
        ]
        .map(|d| ms(&format!("{d}T08:00:00Z")));
        assert_eq!(daily(None), want);
    }

    #[test]
    fn deferred_occurrences_fire_once_right_after_the_exclusion() {
        // Friday's, Saturday's and Sunday's 09:00 all move to Monday 00:00 Berlin (23:00Z
        // on Sunday): one fire.
        let want = [
            "2026-12-23T08:00:00Z",
            "2026-12-24T08:00:00Z",
            "2026-12-27T23:00:00Z",
            "2026-12-28T08:00:00Z",
            "2026-12-29T08:00:00Z",
            "2026-12-30T08:00:00Z",
        ]
        .map(ms);
        assert_eq!(daily(Some(CalendarPolicy::Defer)), want);
    }

    #[test]
    fn a_calendar_must_be_known_and_one_excluding_everything_ends_the_call() {
        let spec = CronSpec {
            calendar: Some("nope".into()),
            ..CronSpec::every(1_000, 0)
        };
        assert!(spec
            .compile("t", None)
            .unwrap_err()
            .contains("unknown calendar"));
        let always = Spec {
            weekly: vec!["Mon-Sun".into()],
            ..Default::default()
        };
        let c = spec
            .compile("t", Some(Arc::new(Calendar::parse(&always).unwrap())))
            .unwrap();
        let o = c.occurrences(0, 10_000_000, 10);
        assert!(
            o.dues.is_empty() && !o.exhausted && o.covered_ms > 0,
            "{o:?}"
        );
    }

    #[test]
    fn a_deferred_occurrence_landing_in_a_dst_gap_fires_right_after_the_jump() {
        // New York springs forward at 02:00 on 2026-03-08: 02:30 does not exist.
        let spec = Spec {
            ranges: vec![["2026-03-07T12:00".into(), "2026-03-08T02:30".into()]],
            ..Default::default()
        };
        let cron = CronSpec {
            calendar: Some("c".into()),
            calendar_policy: Some(CalendarPolicy::Defer),
            ..CronSpec::new("0 0 18 * * *", "America/New_York")
        };
        let c = cron
            .compile("t", Some(Arc::new(Calendar::parse(&spec).unwrap())))
            .unwrap();
        let o = c.occurrences(ms("2026-03-06T00:00:00Z"), ms("2026-03-09T00:00:00Z"), 10);
        // The 6th at 18:00 EST (23:00Z); the 7th's 18:00 deferred to 03:00 EDT on the 8th
        // (07:00Z, right after the jump); the 8th at 18:00 EDT (22:00Z).
        let want = [
            "2026-03-06T23:00:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T22:00:00Z",
        ];
        assert_eq!(o.dues, want.map(ms));
    }
}
