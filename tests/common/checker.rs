//! The one checker every fault scenario ends with: every accepted timer fired at least
//! once, none before its due time, duplicates within the scenario's bound, lateness within
//! the fault's duration plus a stated margin. It prints a one-line report and appends it
//! to `$CARGO_TARGET_TMPDIR/faults.jsonl`.

use super::{Collected, Fired};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

/// The timers a scenario created: id -> due ms.
pub type Expected = HashMap<String, i64>;

/// What a scenario may tolerate.
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Most duplicate fires (fires beyond the first of a timer).
    pub duplicates: usize,
    /// Most lateness of a timer's first fire, ms.
    pub lateness_ms: i64,
}

/// What the checker found.
#[derive(Debug, Clone)]
pub struct Report {
    pub timers: usize,
    pub fired: usize,
    pub duplicates: usize,
    pub max_lateness_ms: i64,
    pub p99_lateness_ms: i64,
}

/// Receives fires until every expected timer fired (failing after `limit`), then keeps
/// listening `linger` for late duplicates.
pub async fn gather(
    got: &mut Collected,
    expected: &Expected,
    limit: Duration,
    linger: Duration,
) -> Vec<Fired> {
    let mut fires = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while expected.keys().any(|k| !seen.contains_key(k)) {
        match tokio::time::timeout_at(deadline, got.fired.recv()).await {
            Ok(Some(f)) => {
                *seen.entry(f.timer_id.clone()).or_default() += 1;
                fires.push(f);
            }
            _ => {
                let missing: Vec<_> = expected.keys().filter(|k| !seen.contains_key(*k)).collect();
                panic!(
                    "{} of {} timers never fired within {limit:?}, e.g. {:?}",
                    missing.len(),
                    expected.len(),
                    &missing[..missing.len().min(5)]
                );
            }
        }
    }
    let end = tokio::time::Instant::now() + linger;
    while let Ok(Some(f)) = tokio::time::timeout_at(end, got.fired.recv()).await {
        fires.push(f);
    }
    fires
}

/// Checks `fires` against `expected` and `bounds`; panics with the evidence otherwise.
pub fn check(scenario: &str, expected: &Expected, fires: &[Fired], bounds: &Bounds) -> Report {
    let mut first: HashMap<&str, &Fired> = HashMap::new();
    let mut duplicates = 0;
    for f in fires {
        let Some(&due) = expected.get(&f.timer_id) else {
            continue;
        };
        assert_eq!(
            f.due_ms, due,
            "{scenario}: {} fired with another due",
            f.timer_id
        );
        assert!(
            f.fired_ms >= due && f.received_ms >= due,
            "{scenario}: {} fired {} ms early",
            f.timer_id,
            due - f.fired_ms.min(f.received_ms)
        );
        match first.get(f.timer_id.as_str()) {
            None => {
                first.insert(&f.timer_id, f);
            }
            Some(_) => duplicates += 1,
        }
    }
    let missing = expected.len() - first.len();
    assert_eq!(missing, 0, "{scenario}: {missing} timers never fired");
    let mut late: Vec<i64> = first.values().map(|f| f.fired_ms - f.due_ms).collect();
    late.sort_unstable();
    let max = *late.last().unwrap_or(&0);
    let p99 = late[(late.len() * 99 / 100).min(late.len() - 1)];
    let report = Report {
        timers: expected.len(),
        fired: fires.len(),
        duplicates,
        max_lateness_ms: max,
        p99_lateness_ms: p99,
    };
    let line = format!(
        r#"{{"scenario":"{scenario}","timers":{},"fired":{},"duplicates":{},"duplicate_bound":{},"max_lateness_ms":{},"p99_lateness_ms":{},"lateness_bound_ms":{}}}"#,
        report.timers,
        report.fired,
        report.duplicates,
        bounds.duplicates,
        report.max_lateness_ms,
        report.p99_lateness_ms,
        bounds.lateness_ms
    );
    println!("{line}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults.jsonl");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
    assert!(
        duplicates <= bounds.duplicates,
        "{scenario}: {duplicates} duplicates, more than the bound {}",
        bounds.duplicates
    );
    assert!(
        max <= bounds.lateness_ms,
        "{scenario}: a timer fired {max} ms late, more than the bound {} ms",
        bounds.lateness_ms
    );
    report
}

/// How many expected timers are due within `window_ms` of `at_ms` (the fires that may be
/// in flight when a fault hits at `at_ms`).
pub fn due_near(expected: &Expected, at_ms: i64, window_ms: i64) -> usize {
    expected
        .values()
        .filter(|&&d| (d - at_ms).abs() <= window_ms)
        .count()
}

/// `n` one-shot timers `prefix-i`, due evenly spread from `start_ms` over `span_ms`.
pub fn spread(prefix: &str, n: usize, start_ms: i64, span_ms: i64) -> Expected {
    (0..n)
        .map(|i| {
            (
                format!("{prefix}-{i}"),
                start_ms + span_ms * i as i64 / n.max(1) as i64,
            )
        })
        .collect()
}

/// The create commands of `expected`, in due order.
pub fn commands(expected: &Expected) -> Vec<ktimer::command::TimerCommand> {
    let mut v: Vec<_> = expected.iter().collect();
    v.sort_by_key(|(id, d)| (**d, (*id).clone()));
    v.into_iter()
        .map(|(id, d)| super::once_at(id, *d, "x"))
        .collect()
}

/// Sleeps until the wall clock reads `at_ms`.
pub async fn sleep_until(at_ms: i64) {
    let d = (at_ms - ktimer::now_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(d)).await;
}

/// Sends the timers of `expected` and waits until every command was accepted.
pub async fn load(env: &super::TestEnv, got: &mut Collected, expected: &Expected) {
    env.send_many(&commands(expected)).await;
    let rs = got.results(expected.len(), Duration::from_secs(60)).await;
    let rejected: Vec<_> = rs
        .iter()
        .filter(|r| r.outcome != ktimer::command::Outcome::Accepted)
        .collect();
    assert!(
        rejected.is_empty(),
        "not accepted: {:?}",
        &rejected[..rejected.len().min(3)]
    );
}

/// Receives results (after `results`, already received) until every expected timer was
/// answered as accepted at least once; any other outcome, or a timer not answered within
/// `limit`, fails.
pub async fn all_accepted(
    got: &mut Collected,
    mut results: Vec<ktimer::command::CommandResult>,
    expected: &Expected,
    limit: Duration,
) {
    let mut accepted = std::collections::HashSet::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        for r in results.drain(..) {
            assert_eq!(r.outcome, ktimer::command::Outcome::Accepted, "{r:?}");
            accepted.insert(r.timer_id.unwrap_or_default());
        }
        if expected.keys().all(|k| accepted.contains(k)) {
            return;
        }
        match tokio::time::timeout_at(deadline, got.results.recv()).await {
            Ok(Some(r)) => results.push(r),
            _ => panic!(
                "{} of {} commands never answered as accepted",
                expected.keys().filter(|k| !accepted.contains(*k)).count(),
                expected.len()
            ),
        }
    }
}
