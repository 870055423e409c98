//! `ktimer next`: the next due instants of a repeating schedule (cron or interval, with
//! its jitter), from the code the trigger uses ([`crate::schedule`]), with the zone's wall clock and a note wherever the zone's
//! offset changes (a daylight-saving jump: a skipped local time fires right after the
//! jump; a repeated hour fires once, or twice for schedules whose hour field is `*`).

use crate::calendar::Calendar;
use crate::config::NextArgs;
use crate::schedule::CronSpec;
use chrono::{DateTime, Offset, SecondsFormat};
use std::sync::Arc;

/// One due instant of a preview.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// Unix epoch ms.
    pub due_ms: i64,
    /// The instant on the zone's wall clock, with its offset.
    pub local: String,
    /// Set when the zone's offset differs from the previous due's: the clock moved.
    pub note: Option<String>,
}

/// The first `n` due instants of `spec` of timer `timer_id` (which seeds its jitter),
/// under `calendar` (the one it names), after `after_ms` (what the trigger would fire, none missed), or why the schedule is
/// invalid.
pub fn next(
    spec: &CronSpec,
    timer_id: &str,
    calendar: Option<Arc<Calendar>>,
    after_ms: i64,
    n: usize,
) -> Result<Vec<Due>, String> {
    let compiled = spec.compile(timer_id, calendar)?;
    let mut out: Vec<Due> = Vec::with_capacity(n);
    let mut from = after_ms;
    // Occurrences come in windows (a year at a time), so a sparse schedule is found too.
    const YEAR_MS: i64 = 366 * 86_400_000;
    // The zone's offset at the previous due.
    let mut was = None;
    while out.len() < n {
        let occ = compiled.occurrences(from, from.saturating_add(YEAR_MS), n - out.len());
        for due_ms in occ.dues {
            let t = compiled
                .wall_clock(due_ms)
                .ok_or_else(|| format!("{due_ms} is out of range"))?;
            let now = t.offset().fix();
            let note = was
                .filter(|w| *w != now)
                .map(|w| format!("the clock moved: UTC{w} -> UTC{now}"));
            was = Some(now);
            out.push(Due {
                due_ms,
                local: t.to_rfc3339_opts(SecondsFormat::AutoSi, false),
                note,
            });
        }
        if occ.exhausted {
            break;
        }
        from = occ.covered_ms;
    }
    Ok(out)
}

/// `ktimer next`: prints the next due instants, one per line.
pub fn run(args: NextArgs) -> anyhow::Result<()> {
    let from = args.from_ms.unwrap_or_else(crate::now_ms);
    let spec = CronSpec {
        start_ms: args.start_ms,
        end_ms: args.end_ms,
        every_ms: args.every_ms,
        jitter_ms: args.jitter_ms,
        calendar: args.calendar.clone(),
        calendar_policy: args.defer.then_some(crate::command::CalendarPolicy::Defer),
        ..CronSpec::new(args.cron.as_deref().unwrap_or(""), &args.time_zone)
    }
    .anchored(from)
    .map_err(anyhow::Error::msg)?;
    let calendar = args
        .applications
        .as_ref()
        .and_then(|a| a.calendar_of(&spec));
    let dues =
        next(&spec, &args.timer_id, calendar, from, args.count).map_err(anyhow::Error::msg)?;
    if dues.is_empty() {
        println!("no due instant after {from} ms");
    }
    for d in dues {
        let utc = DateTime::from_timestamp_millis(d.due_ms)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
            .unwrap_or_default();
        let note = d.note.map(|n| format!("   ({n})")).unwrap_or_default();
        println!("{}  {utc}  {}{note}", d.due_ms, d.local);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cron: &str, tz: &str) -> CronSpec {
        CronSpec::new(cron, tz)
    }

    /// 2026-03-28T12:00:00Z: the day before Berlin moves from +01:00 to +02:00 (at 02:00
    /// local on 29 March).
    const BEFORE_SPRING: i64 = 1_774_699_200_000;

    #[test]
    fn a_skipped_local_time_fires_right_after_the_jump_with_a_note() {
        let dues = next(
            &spec("0 30 2 * * *", "Europe/Berlin"),
            "t",
            None,
            BEFORE_SPRING,
            3,
        )
        .unwrap();
        let local: Vec<&str> = dues.iter().map(|d| d.local.as_str()).collect();
        assert_eq!(
            local,
            [
                "2026-03-29T03:00:00+02:00",
                "2026-03-30T02:30:00+02:00",
                "2026-03-31T02:30:00+02:00"
            ]
        );
        assert_eq!(dues[0].note, None, "nothing before it to compare");
        let hourly = next(
            &spec("0 0 * * * *", "Europe/Berlin"),
            "t",
            None,
            BEFORE_SPRING,
            16,
        )
        .unwrap();
        let noted: Vec<_> = hourly.iter().filter_map(|d| d.note.clone()).collect();
        assert_eq!(noted, ["the clock moved: UTC+01:00 -> UTC+02:00"]);
    }

    #[test]
    fn the_preview_is_the_schedules_own_occurrences() {
        let s = spec("*/15 * * * * *", "UTC");
        let dues: Vec<i64> = next(&s, "t", None, 1_000, 5)
            .unwrap()
            .iter()
            .map(|d| d.due_ms)
            .collect();
        assert_eq!(dues, [15_000, 30_000, 45_000, 60_000, 75_000]);
        let once_a_year = spec("0 0 0 1 1 *", "UTC");
        let d = next(&once_a_year, "t", None, 0, 2).unwrap();
        assert_eq!(d.len(), 2, "found across windows: {d:?}");
        let ended = CronSpec {
            end_ms: Some(40_000),
            ..s
        };
        assert_eq!(
            next(&ended, "t", None, 1_000, 5).unwrap().len(),
            2,
            "end_ms stops it"
        );
        assert!(next(&spec("nonsense", "UTC"), "t", None, 0, 1).is_err());
    }
}
