//! The targets (`burst_checks`, `fire_path_checks`), judged on figures made up for the purpose.

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

#[test]
fn the_fire_path_is_judged_by_its_shape() {
    let judged = |f: FirePath| {
        let mut c = Vec::new();
        fire_path_checks(&mut c, &f);
        c.into_iter().map(|c| (c.what, c.met)).collect::<Vec<_>>()
    };
    let burst = |timers, redis_us, keyspace, ktimer_us| FirePath {
        burst: true,
        timers,
        redis_us,
        keyspace,
        ktimer_us: Some(ktimer_us),
        floor_us: Some(5.0),
    };
    let v = judged(burst(100_000, 5.0, 3.0, 10.0));
    assert_eq!(v[0], ("Redis CPU <= 5 µs per fire".into(), true));
    assert!(v.iter().all(|(_, met)| *met), "{v:?}");
    let v = judged(burst(100_000, 5.1, 3.01, 10.1));
    assert!(v.iter().all(|(_, met)| !*met), "{v:?}");
    let v = judged(burst(1_000_000, 7.0, 2.0, 9.0));
    assert_eq!(v[0], ("Redis CPU <= 7 µs per fire".into(), true));
    let steady = |ktimer_us, floor_us| FirePath {
        burst: false,
        timers: 100_000,
        redis_us: 8.0,
        keyspace: 2.5,
        ktimer_us: Some(ktimer_us),
        floor_us,
    };
    let v = judged(steady(22.5, Some(15.0)));
    assert_eq!(v[0], ("Redis CPU <= 8 µs per fire".into(), true));
    assert_eq!(
        v[2],
        (
            "ktimer CPU per fire <= 1.5 times the producer floor".into(),
            true
        )
    );
    assert!(!judged(steady(22.6, Some(15.0)))[2].1);
    assert_eq!(judged(steady(22.6, None)).len(), 2, "no floor, no ratio");
}
