//! A host whose wall clock is off: fires are due by Redis's clock (`TIME`), which every
//! instance of the group shares, not by the host's. The skew is injected through ktimer's
//! clock (`--clock-skew-ms`); the test's own clock is Redis's (the same host).

mod common;

use common::checker::{check, gather, load, spread, Bounds};
use common::TestEnv;
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// 20 timers due 4 to 6 s ahead, fired by an instance whose clock is `skew_ms` off:
/// none early by Redis's clock, none late by more than `late_ms` (received, by the
/// test's clock), and the offset it reports is the skew. Returns the offset.
async fn fires_by_redis_clock(name: &str, skew_ms: i64) -> f64 {
    let skew = skew_ms.to_string();
    let flags = ["--clock-skew-ms", skew.as_str()];
    let env = TestEnv::new(name, 2, &flags).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("c", 20, now_ms() + 4_000, 2_000);
    load(&env, &mut got, &expected).await;
    let fires = gather(&mut got, &expected, MIN, Duration::from_millis(500)).await;
    let late_ms = 1_000;
    check(
        &format!("a host clock {skew_ms} ms off"),
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: late_ms,
        },
    );
    let received_late = fires.iter().map(|f| f.received_ms - f.due_ms).max();
    assert!(
        received_late.is_some_and(|l| l <= late_ms),
        "received {received_late:?} ms late"
    );
    let offset = svc.metric("ktimer_clock_offset_seconds").expect("offset");
    svc.stop().await;
    offset
}

/// A host 20 s ahead fired every timer at once (20 s early by its neighbours' clock, and
/// its lateness said 0); by Redis's clock it fires each on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_clock_is_ahead_fires_nothing_early() {
    let offset = fires_by_redis_clock("clockahead", 20_000).await;
    assert!((offset + 20.0).abs() < 0.5, "offset {offset} s");
}

/// A host 20 s behind held every fire 20 s; by Redis's clock it fires each on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_clock_is_behind_fires_on_time() {
    let offset = fires_by_redis_clock("clockbehind", -20_000).await;
    assert!((offset - 20.0).abs() < 0.5, "offset {offset} s");
}
