//! Schedule expansion across real DST transitions: exact instants.

use super::*;
use chrono::Datelike;

fn ms(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis()
}

fn spec(cron: &str, tz: &str) -> CronSpec {
    CronSpec::new(cron, tz)
}

/// Every occurrence in (`from`, `to`], as RFC 3339 UTC strings.
fn between(cron: &str, tz: &str, from: &str, to: &str) -> Vec<String> {
    let c = spec(cron, tz).compile("t", None).unwrap();
    let o = c.occurrences(ms(from), ms(to), 10_000);
    o.dues.iter().map(|&d| utc(d)).collect()
}

fn utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[test]
fn new_york_spring_forward_fires_once_right_after_the_jump() {
    // 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z): 02:30 does not exist that day.
    assert_eq!(
        between(
            "0 30 2 * * *",
            "America/New_York",
            "2026-03-06T00:00:00Z",
            "2026-03-10T00:00:00Z"
        ),
        [
            "2026-03-06T07:30:00Z",
            "2026-03-07T07:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z"
        ]
    );
}

#[test]
fn new_york_fall_back_fires_once_in_the_repeated_hour() {
    // 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:30 happens twice; fire the first.
    assert_eq!(
        between(
            "0 30 1 * * *",
            "America/New_York",
            "2026-10-31T00:00:00Z",
            "2026-11-03T00:00:00Z"
        ),
        [
            "2026-10-31T05:30:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-02T06:30:00Z"
        ]
    );
}

#[test]
fn berlin_transitions() {
    // 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z); 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
    assert_eq!(
        between(
            "0 30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T00:00:00Z",
            "2026-03-31T00:00:00Z"
        ),
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    assert_eq!(
        between(
            "0 30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T00:00:00Z",
            "2026-10-27T00:00:00Z"
        ),
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ]
    );
    // Several occurrences inside the gap, and one at the jump itself: one fire.
    assert_eq!(
        between(
            "0 0,20,40 2,3 * * *",
            "Europe/Berlin",
            "2026-03-29T00:00:00Z",
            "2026-03-29T02:00:00Z"
        ),
        [
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:20:00Z",
            "2026-03-29T01:40:00Z"
        ]
    );
}

#[test]
fn interval_schedules_keep_absolute_time_through_transitions() {
    // Hour field `*`: every 30 minutes in absolute time, through both passes of 01:xx...
    assert_eq!(
        between(
            "0 */30 * * * *",
            "America/New_York",
            "2026-11-01T03:59:59Z",
            "2026-11-01T07:00:00Z"
        ),
        [
            "2026-11-01T04:00:00Z",
            "2026-11-01T04:30:00Z",
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:00:00Z"
        ]
    );
    // ... and across the gap, whose local times collapse onto the jump.
    assert_eq!(
        between(
            "0 */30 * * * *",
            "America/New_York",
            "2026-03-08T05:59:59Z",
            "2026-03-08T08:00:00Z"
        ),
        [
            "2026-03-08T06:00:00Z",
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:30:00Z",
            "2026-03-08T08:00:00Z"
        ]
    );
}

#[test]
fn shanghai_has_no_transitions() {
    // 09:00 CST (UTC+8) is 01:00Z every day, including the US and EU transition days.
    for day in ["2026-03-08", "2026-03-29", "2026-10-25", "2026-11-01"] {
        let from = format!("{day}T00:00:00Z");
        let to = format!("{day}T23:59:59Z");
        assert_eq!(
            between("0 0 9 * * *", "Asia/Shanghai", &from, &to),
            [format!("{day}T01:00:00Z")]
        );
    }
}

#[test]
fn windows_compose_without_gaps_or_repeats() {
    // Expanding one occurrence at a time gives exactly the one-pass result, across
    // both New York transitions, for a wall-clock and an interval schedule.
    let ny = "America/New_York";
    let berlin = "Europe/Berlin";
    for (expr, tz, from, to) in [
        (
            "0 */20 1-3 * * *",
            ny,
            "2026-03-08T04:00:00Z",
            "2026-03-08T09:00:00Z",
        ),
        (
            "0 */20 * * * *",
            ny,
            "2026-03-08T04:00:00Z",
            "2026-03-08T09:00:00Z",
        ),
        (
            "0 */20 1-3 * * *",
            ny,
            "2026-11-01T03:00:00Z",
            "2026-11-01T09:00:00Z",
        ),
        (
            "0 */20 * * * *",
            ny,
            "2026-11-01T03:00:00Z",
            "2026-11-01T09:00:00Z",
        ),
        (
            "0 */15 2 * * *",
            berlin,
            "2026-03-28T22:00:00Z",
            "2026-03-29T03:00:00Z",
        ),
        (
            "0 */15 * * * *",
            berlin,
            "2026-10-24T22:00:00Z",
            "2026-10-25T03:00:00Z",
        ),
    ] {
        let c = spec(expr, tz).compile("t", None).unwrap();
        let all = c.occurrences(ms(from), ms(to), 10_000).dues;
        let mut stepped: Vec<i64> = Vec::new();
        let mut after = ms(from);
        loop {
            let o = c.occurrences(after, ms(to), 1);
            stepped.extend(&o.dues);
            if o.dues.is_empty() {
                break;
            }
            after = o.covered_ms;
        }
        assert_eq!(stepped, all, "{expr} from {from}");
    }
}

#[test]
fn five_field_form_uses_unix_weekdays() {
    // 1-5 is Monday to Friday (the cron crate alone would read Sunday to Thursday).
    let c = spec("30 9 * * 1-5", "UTC").compile("t", None).unwrap();
    let o = c.occurrences(ms("2026-11-15T00:00:00Z"), ms("2026-11-22T00:00:00Z"), 100);
    let days: Vec<_> = o
        .dues
        .iter()
        .map(|&d| DateTime::<Utc>::from_timestamp_millis(d).unwrap())
        .collect();
    assert_eq!(days.len(), 5);
    for d in days {
        assert!(d.weekday().number_from_monday() <= 5, "{d}");
        assert_eq!(d.format("%H:%M:%S").to_string(), "09:30:00");
    }
    let sunday = spec("0 12 * * 0", "UTC").compile("t", None).unwrap();
    let o = sunday.occurrences(ms("2026-11-15T00:00:00Z"), ms("2026-11-22T00:00:00Z"), 10);
    assert_eq!(o.dues, [ms("2026-11-15T12:00:00Z")]);
}

#[test]
fn start_end_and_exhaustion() {
    let mut s = spec("*/10 * * * * *", "UTC");
    s.start_ms = Some(ms("2026-01-01T00:00:05Z"));
    s.end_ms = Some(ms("2026-01-01T00:00:40Z"));
    let c = s.compile("t", None).unwrap();
    let o = c.occurrences(ms("2026-01-01T00:00:00Z"), ms("2026-01-01T00:10:00Z"), 100);
    assert_eq!(
        o.dues,
        [10, 20, 30, 40].map(|s| ms("2026-01-01T00:00:00Z") + s * 1000)
    );
    assert!(o.exhausted);
    // A window that ends before end_ms is not exhausted.
    let o = c.occurrences(ms("2026-01-01T00:00:00Z"), ms("2026-01-01T00:00:25Z"), 100);
    assert_eq!(o.dues.len(), 2);
    assert!(!o.exhausted);
    assert_eq!(o.covered_ms, ms("2026-01-01T00:00:25Z"));
    // The cap stops early and says how far it got.
    let o = c.occurrences(ms("2026-01-01T00:00:00Z"), ms("2026-01-01T00:10:00Z"), 3);
    assert_eq!(o.dues.len(), 3);
    assert!(!o.exhausted);
    assert_eq!(o.covered_ms, ms("2026-01-01T00:00:30Z"));
}

#[test]
fn misfire_policies_plan_missed_occurrences() {
    let t0 = ms("2026-01-01T00:00:00Z");
    let now = t0 + 20_500; // every 2 s; 10 occurrences were missed
    let cfg = PlanConfig {
        window_ms: 5_000,
        max_per_pass: 1_000,
        misfire_threshold_ms: 1_000,
    };
    let c = spec("*/2 * * * * *", "UTC").compile("t", None).unwrap();
    let plan = |p| c.plan(t0, now, p, &cfg).dues;
    let secs = |v: Vec<i64>| v.into_iter().map(|d| (d - t0) / 1000).collect::<Vec<_>>();
    assert_eq!(
        secs(plan(MisfirePolicy::FireAll)),
        [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]
    );
    assert_eq!(secs(plan(MisfirePolicy::Skip)), [20, 22, 24]);
    assert_eq!(secs(plan(MisfirePolicy::FireOnce)), [2, 20, 22, 24]);
}

#[test]
fn bad_schedules_are_rejected_with_a_reason() {
    let err = |s: CronSpec| s.compile("t", None).unwrap_err();
    assert!(err(spec("61 * * * * *", "UTC")).contains("invalid cron"));
    assert!(err(spec("* * *", "UTC")).contains("expected 5 fields"));
    assert!(err(spec("0 0 * * 9", "UTC")).contains("out of range"));
    assert!(err(spec("0 * * * * *", "Mars/Olympus")).contains("unknown time zone"));
    let mut s = spec("0 * * * * *", "UTC");
    s.start_ms = Some(10);
    s.end_ms = Some(5);
    assert!(err(s.clone()).contains("before start"));
    s.end_ms = None;
    s.max_fires = Some(0);
    assert!(err(s).contains("max_fires"));
}

#[test]
fn both_day_fields_must_match_and_shorthands_parse() {
    // Friday the 13th, 2026: February, March and November.
    assert_eq!(
        between(
            "0 0 12 13 * Fri",
            "UTC",
            "2026-01-01T00:00:00Z",
            "2026-12-31T00:00:00Z"
        ),
        [
            "2026-02-13T12:00:00Z",
            "2026-03-13T12:00:00Z",
            "2026-11-13T12:00:00Z"
        ]
    );
    assert_eq!(
        between(
            "@daily",
            "Asia/Shanghai",
            "2026-01-01T00:00:00Z",
            "2026-01-02T00:00:00Z"
        ),
        ["2026-01-01T16:00:00Z"]
    );
}

#[test]
fn a_pass_cut_by_its_cap_across_a_gap_covers_only_what_it_returned() {
    // Hourly in Berlin from 23:00 local on 28 March 2026: 00:00, 01:00, then 02:00 (skipped:
    // 03:00) and 03:00 collapse into one fire. A pass capped at 4 returns 3 once the
    // duplicate is gone: the next pass must start after 03:00, not at the window's end
    // (04:00 and every hour after it were skipped).
    let c = spec("0 0 * * * *", "Europe/Berlin")
        .compile("t", None)
        .unwrap();
    let from = ms("2026-03-28T22:00:00Z");
    let until = from + 86_400_000;
    let first = c.occurrences(from, until, 4);
    assert!(!first.exhausted);
    let second = c.occurrences(first.covered_ms, until, 4);
    let all: Vec<String> = first
        .dues
        .iter()
        .chain(&second.dues)
        .map(|&d| utc(d))
        .collect();
    assert_eq!(
        all[..4],
        [
            "2026-03-28T23:00:00Z",
            "2026-03-29T00:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00Z"
        ],
        "{all:?}"
    );
}
