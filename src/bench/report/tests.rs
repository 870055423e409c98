//! The burst's targets (`burst_checks`), judged on figures made up for the purpose.

use super::*;

fn judged(b: Burst) -> Vec<(String, bool)> {
    let mut c = Vec::new();
    burst_checks(&mut c, &b);
    c.into_iter().map(|c| (c.what, c.met)).collect()
}

#[test]
fn a_burst_is_judged_by_its_size_against_the_pipe() {
    let small = |ratio, max| Burst {
        timers: 100_000,
        max_lateness_ms: max,
        ratio: Some(ratio),
        peak_rss_mb: Some(150.0),
    };
    let met = |v: Vec<(String, bool)>| v.into_iter().map(|(_, m)| m).collect::<Vec<_>>();
    assert_eq!(met(judged(small(0.9, 2000))), [true, true]);
    assert_eq!(met(judged(small(0.89, 2001))), [false, false]);
    let big = |ratio, rss| Burst {
        timers: 1_000_000,
        max_lateness_ms: 30_000,
        ratio: Some(ratio),
        peak_rss_mb: Some(rss),
    };
    let v = judged(big(0.75, 1024.0));
    assert_eq!(v.len(), 2, "no 2 s bound for a million: {v:?}");
    assert!(v[0].0.starts_with("1M burst fire rate >= 0.75"));
    assert_eq!(met(v), [true, true]);
    assert_eq!(met(judged(big(0.74, 1025.0))), [false, false]);
    let between = Burst {
        timers: 500_000,
        max_lateness_ms: 0,
        ratio: Some(1.0),
        peak_rss_mb: None,
    };
    assert!(
        judged(between).is_empty(),
        "no target between the two sizes"
    );
}
