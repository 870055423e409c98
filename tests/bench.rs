//! `ktimer bench`, short runs: it completes, and its counts add up (not its speed).
//!
//! The bench runs as the real binary against the shared broker and Redis; the report it
//! writes is checked against what was asked of it.

mod common;

use common::{servers, unique, TestEnv};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// One run at a time: a run's clean-up deletes its keys from the shared Redis, which a
/// run beside it would count in its memory per pending timer (seen below zero).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `ktimer bench` with `args` on the shared servers, writing into a fresh
/// directory; returns the parsed JSON report and the SVG text.
fn bench(name: &str, args: &[&str]) -> (Value, String) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let s = servers();
    let out = std::env::temp_dir().join(unique(name));
    let status = Command::new(env!("CARGO_BIN_EXE_ktimer"))
        .args([
            "bench",
            "--brokers",
            &s.brokers,
            "--redis-url",
            &s.redis_url,
        ])
        .arg("--out")
        .arg(&out)
        .args(args)
        .env("KTIMER_LOG", "warn")
        .status()
        .expect("ktimer bench runs");
    assert!(status.success(), "ktimer bench failed: {status}");
    let file = |ext: &str| {
        let found: Vec<_> = std::fs::read_dir(&out)
            .expect("report directory")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        assert_eq!(found.len(), 1, "one .{ext} report in {}", out.display());
        std::fs::read_to_string(&found[0]).expect("report readable")
    };
    let report = serde_json::from_str(&file("json")).expect("report is JSON");
    let svg = file("svg");
    let _ = std::fs::remove_dir_all(Path::new(&out));
    (report, svg)
}

fn n(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_spread_run_with_started_instances_and_a_takeover_counts_every_timer() {
    let (r, svg) = bench(
        "bench-spread",
        &[
            "--timers",
            "3000",
            "--due",
            "spread",
            "--window-ms",
            "1500",
            "--pending",
            "2000",
            "--partitions",
            "2",
            "--takeover",
        ],
    );
    assert_eq!(n(&r, "/pending/timers"), 2000.0);
    // New instances took both partitions from the old ones without a rebuild (and then
    // fired every timer of the fire phase below).
    assert_eq!(n(&r, "/takeover/taken"), 2.0, "{r}");
    assert!(n(&r, "/takeover/taken_max_ms") < 1_000.0, "{r}");
    assert!(n(&r, "/takeover/owned_after_ms") >= n(&r, "/takeover/taken_max_ms"));
    assert_eq!(n(&r, "/pending/accepted"), 2000.0, "{r}");
    assert!(n(&r, "/pending/bytes_per_timer") > 0.0, "{r}");
    assert!(n(&r, "/pending/intake_per_s") > 0.0);
    assert_eq!(n(&r, "/fire/timers"), 3000.0);
    assert_eq!(n(&r, "/fire/accepted"), 3000.0, "{r}");
    assert_eq!(n(&r, "/fire/fired"), 3000.0, "{r}");
    assert_eq!(n(&r, "/fire/missing"), 0.0);
    assert_eq!(n(&r, "/fire/early"), 0.0);
    assert_eq!(n(&r, "/fire/duplicates"), 0.0);
    assert_eq!(n(&r, "/fire/fire_lateness_ms/count"), 3000.0);
    assert!(n(&r, "/fire/fire_lateness_ms/max") >= n(&r, "/fire/fire_lateness_ms/p99"));
    assert!(
        n(&r, "/fire/delivery_lateness_ms/p50") >= n(&r, "/fire/fire_lateness_ms/p50"),
        "a record is received after it was produced: {r}"
    );
    assert_eq!(n(&r, "/baseline/records"), 3000.0);
    assert!(n(&r, "/baseline/rate_per_s") > 0.0);
    // The producer floor: as many fired-shaped records at the spread's pace (2,000/s).
    assert_eq!(n(&r, "/floor/records"), 3000.0, "{r}");
    assert_eq!(n(&r, "/floor/rate_per_s"), 2000.0, "{r}");
    assert!(n(&r, "/floor/cpu_us_per_record") > 0.0, "{r}");
    // Timers applied a few seconds before due owe no state: a fire is one record (a
    // checkpoint record per partition and interval may add a few).
    let per_fire = n(&r, "/fire/records_per_fire");
    assert!((1.0..1.05).contains(&per_fire), "{per_fire}: {r}");
    // The instances ran as processes of their own: their CPU and memory are theirs.
    assert!(n(&r, "/pending/ktimer_cpu/us_per_item") > 0.0, "{r}");
    assert!(n(&r, "/fire/ktimer_cpu/us_per_item") > 0.0, "{r}");
    assert!(n(&r, "/fire/peak_rss_mb") > 0.0, "{r}");
    // Redis's time by script, from its slow log (calls of 20 µs or more): the intake
    // created the 2,000 new timers in create.lua calls of up to 200 (about 8 µs apiece).
    let family = |phase: &str, name: &str| {
        r[phase]["redis_by_script"]["families"]
            .as_array()
            .unwrap_or_else(|| panic!("{phase} by script missing: {r}"))
            .iter()
            .find(|f| f["name"] == name)
            .map(|f| (f["calls"].as_u64().unwrap(), f["us"].as_u64().unwrap()))
    };
    let (calls, us) = family("pending", "create").expect("create measured");
    assert!(calls > 0 && us >= 20 * calls, "{calls} calls, {us} µs");
    assert!(r["fire"]["redis_by_script"]["families"].is_array(), "{r}");
    assert!(
        family("pending", "slowlog").is_none(),
        "the bench's own calls are left out"
    );
    let keyspace = r["fire"]["redis_calls"]["keyspace_per_item"].as_f64();
    assert!(
        keyspace.is_some_and(|k| k > 0.0),
        "Redis's own counters give the keyspace operations per fire: {keyspace:?}"
    );
    let checks = r["checks"].as_array().expect("checks");
    assert!(checks
        .iter()
        .any(|c| c["what"] == "no early fire" && c["met"] == true));
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    assert!(
        svg.contains("3000 fired, 0 missing"),
        "the picture's title says what fired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_against_running_instances_fires_every_timer_once() {
    let env = TestEnv::new("bench-running", 2, &[]).await;
    let svc = env.start().await;
    let k = &env.args.kafka;
    let (r, _) = bench(
        "bench-burst",
        &[
            "--instances",
            "0",
            "--commands-topic",
            &k.commands_topic,
            "--results-topic",
            &k.results_topic,
            "--timers",
            "2000",
            "--due",
            "burst",
            "--pending",
            "500",
            "--no-baseline",
            "--partitions",
            "2",
        ],
    );
    assert_eq!(n(&r, "/pending/accepted"), 500.0, "{r}");
    assert_eq!(n(&r, "/fire/fired"), 2000.0, "{r}");
    assert_eq!(n(&r, "/fire/missing"), 0.0);
    assert_eq!(n(&r, "/fire/early"), 0.0);
    assert_eq!(n(&r, "/fire/duplicates"), 0.0);
    assert!(r["baseline"].is_null());
    assert!(
        r["fire"]["ktimer_cpu"].is_null(),
        "no instance of its own to measure"
    );
    assert!(
        r["fire"]["records_per_fire"].is_null(),
        "running instances' topics carry other records: not counted"
    );
    // All were due at the same ms: the latest fire is the largest lateness.
    assert_eq!(
        n(&r, "/fire/fire_lateness_ms/max"),
        n(&r, "/fire/last_fired_ms") - n(&r, "/fire/first_due_ms"),
        "{r}"
    );
    // The bench cancelled its pending timers on the running instance.
    let mut con = redis::Client::open(servers().redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let pattern = format!("{}:*:t:b*-p-*", env.args.redis_prefix);
    let mut states = std::collections::BTreeMap::<String, usize>::new();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut con)
        .await
        .unwrap();
    // Done timers keep a key of their own (`...{topic:P}:t:ID`) until the retention ends.
    let store = ktimer::store::Store::connect(
        &servers().redis_url,
        &env.args.redis_prefix,
        &env.args.kafka.commands_topic,
        60_000,
    )
    .await
    .unwrap();
    for key in &keys {
        let (tag, id) = key.split_once("}:t:").unwrap();
        let p: i32 = tag.rsplit(':').next().unwrap().parse().unwrap();
        let t = store.timer(p, id).await.unwrap().expect(key);
        let st = t.state.map(|s| s.as_str().to_string()).unwrap_or_default();
        *states.entry(st).or_default() += 1;
    }
    assert_eq!(keys.len(), 500, "{states:?}");
    svc.stop().await;
    let cancelled = ktimer::timer::TimerState::Cancelled.as_str();
    assert_eq!(states.get(cancelled), Some(&500), "{states:?}");
}

/// `--bound`: the started instances bind `bench` to topics of its own, and the run goes
/// through them: every timer accepted and fired once, and the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_application_run_fires_every_timer_once() {
    let (r, _) = bench(
        "bench-bound",
        &[
            "--bound",
            "--timers",
            "2000",
            "--pending",
            "500",
            "--no-baseline",
            "--partitions",
            "2",
        ],
    );
    assert_eq!(r["settings"]["bound"], true, "{r}");
    assert_eq!(n(&r, "/pending/accepted"), 500.0, "{r}");
    assert_eq!(n(&r, "/fire/accepted"), 2000.0, "{r}");
    assert_eq!(n(&r, "/fire/fired"), 2000.0, "{r}");
    assert_eq!(n(&r, "/fire/missing"), 0.0);
    assert_eq!(n(&r, "/fire/early"), 0.0);
    assert_eq!(n(&r, "/fire/duplicates"), 0.0);
}

/// Timers due while their commands are still produced (`--lead-ms` shorter than producing
/// takes): the costs span the commands and the fires, per timer, and are not judged
/// against a fire's targets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_applied_while_timers_fire_are_counted_per_timer() {
    let (r, _) = bench(
        "bench-mixed",
        &[
            "--timers",
            "4000",
            "--rate",
            "2000",
            "--lead-ms",
            "300",
            "--due",
            "spread",
            "--window-ms",
            "2000",
            "--pending",
            "0",
            "--no-baseline",
            "--partitions",
            "2",
        ],
    );
    assert_eq!(n(&r, "/fire/fired"), 4000.0, "{r}");
    assert_eq!(n(&r, "/fire/missing") + n(&r, "/fire/early"), 0.0, "{r}");
    assert!(n(&r, "/fire/answered_before_due_ms") < 0.0, "mixed: {r}");
    assert_eq!(r["fire"]["per_timer"], true, "{r}");
    // The span began before the first command: every create went through Redis in it.
    let families = r["fire"]["redis_by_script"]["families"].as_array().unwrap();
    let calls = |name: &str| {
        families
            .iter()
            .filter(|f| f["name"] == name)
            .map(|f| f["calls"].as_f64().unwrap())
            .sum::<f64>()
    };
    assert!(calls("create") > 0.0 && calls("claim") > 0.0, "{r}");
    // Each timer's result and its fire were produced in the span.
    let per_fire = n(&r, "/fire/records_per_fire");
    assert!((2.0..2.05).contains(&per_fire), "{per_fire}: {r}");
    let judged: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["what"].as_str().unwrap())
        .collect();
    assert!(
        !judged.iter().any(|w| w.contains("per fire")),
        "a timer's costs are not judged as a fire's: {judged:?}"
    );
}

/// Timers created more than the deferral window (10 s) before their due have their state
/// written, so each fire owes its tombstone: ktimer produces two records per fire, and
/// the producer floor it is compared with is two records' worth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_timers_fire_with_their_tombstones_against_a_floor_of_two_records() {
    let (r, _) = bench(
        "bench-written",
        &[
            "--timers",
            "1000",
            "--due",
            "spread",
            "--window-ms",
            "1000",
            "--lead-ms",
            "12000",
            "--pending",
            "0",
            "--partitions",
            "1",
        ],
    );
    assert_eq!(n(&r, "/fire/fired"), 1000.0, "{r}");
    assert_eq!(n(&r, "/fire/missing") + n(&r, "/fire/early"), 0.0, "{r}");
    let per_fire = n(&r, "/fire/records_per_fire");
    assert!((2.0..2.05).contains(&per_fire), "{per_fire}: {r}");
    // (How the floor line and the target use it: unit tests of src/bench/baseline.rs.)
    assert!(n(&r, "/floor/cpu_us_per_record") > 0.0, "{r}");
}
