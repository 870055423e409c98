//! Scaling out and failing over (child processes on a shared broker and Redis):
//! - a rolling restart of three instances under a steady fire rate: fires of partitions
//!   that did not move stay on time; every fire arrives, none early;
//! - kill -9 of an instance: the gap until the first fire of its partitions by their new
//!   owner is bounded by the session timeout.
//!
//! `KTIMER_TEST_RATE` sets the rolling restart's fire rate (default 1,000/s; the README's
//! figures use 5,000/s with `KTIMER_TEST_BIN=target/release/ktimer`).

mod common;

use common::checker::{gather, load, spread, Expected};
use common::child::ChildProcess;
use common::{Fired, TestEnv};
use ktimer::now_ms;
use ktimer::partitioner::Partitioner;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);
const SESSION: &[&str] = &["--session-timeout-ms", "6000"];

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ktimer-scale-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Ownership samples: (time ms, partition -> owner slot) every 50 ms.
type Timeline = Arc<Mutex<Vec<(i64, HashMap<i32, usize>)>>>;

/// Samples who owns what until `stop` says so; `slots` are the instances' admin ports.
fn watch(slots: Arc<Mutex<Vec<Option<u16>>>>, stop: Arc<Mutex<bool>>) -> Timeline {
    let line: Timeline = Arc::default();
    let out = line.clone();
    std::thread::spawn(move || {
        while !*stop.lock().unwrap() {
            let ports = slots.lock().unwrap().clone();
            let mut owners = HashMap::new();
            for (slot, port) in ports.iter().enumerate() {
                let Some(port) = port else { continue };
                let addr = format!("127.0.0.1:{port}");
                if let Some((200, body)) = common::world::http_get(&addr, "/status") {
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                    for p in v["owned"].as_array().into_iter().flatten() {
                        owners.insert(p.as_i64().unwrap() as i32, slot);
                    }
                }
            }
            out.lock().unwrap().push((now_ms(), owners));
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    line
}

/// Whether partition `p` had one owner throughout `[from, to]`.
fn steady(line: &[(i64, HashMap<i32, usize>)], p: i32, from: i64, to: i64) -> bool {
    let owners: Vec<Option<usize>> = line
        .iter()
        .filter(|(t, _)| (from..=to).contains(t))
        .map(|(_, o)| o.get(&p).copied())
        .collect();
    !owners.is_empty() && owners.iter().all(|o| o.is_some() && *o == owners[0])
}

fn percentile(v: &mut [i64], q: f64) -> i64 {
    v.sort_unstable();
    v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

/// Waits until the instances own every partition, evenly (the cooperative protocol may
/// take several rounds to get there).
async fn settled(children: &[&ChildProcess], partitions: usize) {
    let deadline = tokio::time::Instant::now() + MIN;
    loop {
        let owned: Vec<usize> = children
            .iter()
            .map(|c| c.owned().map_or(0, |o| o.len()))
            .collect();
        let fair = partitions / children.len();
        if owned.iter().sum::<usize>() == partitions && owned.iter().all(|&n| n >= fair) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group did not settle: {owned:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM `child` (off the runtime's threads) and waits for its exit.
async fn terminate(mut child: ChildProcess) {
    let (st, took) = tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();
    assert!(st.success(), "exited with {st} after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_keeps_unmoved_partitions_on_time() {
    let rate: usize = std::env::var("KTIMER_TEST_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1_000);
    let parts = 6;
    let d = dir("rolling");
    let env = TestEnv::new("rolling", parts, SESSION).await;
    let mut got = env.collect();
    let spawn = |i: usize, round: usize| {
        ChildProcess::spawn(&env, &[], &d.join(format!("{i}-{round}.log")))
    };
    let mut kids: Vec<ChildProcess> = (0..3).map(|i| spawn(i, 0)).collect();
    for k in &kids {
        k.ready(MIN).await;
    }
    settled(&kids.iter().collect::<Vec<_>>(), parts as usize).await;
    let slots = Arc::new(Mutex::new(
        kids.iter().map(|k| Some(k.admin_port)).collect::<Vec<_>>(),
    ));
    let stop = Arc::new(Mutex::new(false));
    let line = watch(slots.clone(), stop.clone());

    // A steady `rate` over 60 s, starting once every command is in.
    let n = rate * 60;
    let start = now_ms() + 5_000 + (n as i64 / 5);
    let expected: Expected = spread("r", n, start, 60_000);
    load(&env, &mut got, &expected).await;
    assert!(now_ms() < start, "loaded before the first due time");
    common::checker::sleep_until(start + 5_000).await;

    // Each instance in turn: SIGTERM, start again, wait until the group settled, 4 s.
    let mut changes = Vec::new();
    for i in 0..3 {
        changes.push(now_ms());
        slots.lock().unwrap()[i] = None;
        // Stopped, then started again (a new instance joining while the old one is still
        // leaving can leave Tansu 0.6's group without a rebalance for good).
        terminate(kids.remove(i)).await;
        kids.insert(i, spawn(i, 1));
        kids[i].ready(MIN).await;
        slots.lock().unwrap()[i] = Some(kids[i].admin_port);
        settled(&kids.iter().collect::<Vec<_>>(), parts as usize).await;
        changes.push(now_ms());
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    let fires: Vec<Fired> = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(2)).await;
    *stop.lock().unwrap() = true;
    let line = line.lock().unwrap().clone();

    let mut first: HashMap<&str, &Fired> = HashMap::new();
    let mut duplicates = 0;
    for f in &fires {
        assert!(
            f.fired_ms >= expected[&f.timer_id],
            "{} fired early",
            f.timer_id
        );
        if first.insert(&f.timer_id, f).is_some() {
            duplicates += 1;
        }
    }
    assert_eq!(first.len(), n, "every timer fired");
    let (mut moved, mut unmoved) = (Vec::new(), Vec::new());
    for f in first.values() {
        let p = Partitioner::Murmur2.partition(f.timer_id.as_bytes(), parts);
        let late = f.fired_ms - f.due_ms;
        if steady(&line, p, f.due_ms - 2_000, f.due_ms + 500) {
            unmoved.push(late);
        } else {
            moved.push(late);
        }
    }
    let (mc, uc) = (moved.len(), unmoved.len());
    let (m99, mmax) = (percentile(&mut moved, 0.99), percentile(&mut moved, 1.0));
    let (u99, umax) = (
        percentile(&mut unmoved, 0.99),
        percentile(&mut unmoved, 1.0),
    );
    println!(
        "rolling restart at {rate}/s: {n} fires, {duplicates} duplicates; moved partitions {mc} fires p99 {m99} ms max {mmax} ms; unmoved {uc} fires p99 {u99} ms max {umax} ms; restarts took {:?} ms",
        changes.chunks(2).map(|c| c[1] - c[0]).collect::<Vec<_>>()
    );
    assert!(
        uc > n / 2,
        "most fires were of partitions that stayed put ({uc} of {n})"
    );
    assert!(
        u99 <= 100 && umax <= 1_000,
        "unmoved partitions late: p99 {u99} ms, max {umax} ms"
    );
    // SIGTERM drains: a fire handed to the broker is acknowledged before the exit.
    assert!(duplicates <= rate / 10, "{duplicates} duplicates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_new_owner_fires_within_the_session_timeout() {
    let parts = 4;
    let d = dir("kill9");
    let env = TestEnv::new("gap", parts, SESSION).await;
    let mut got = env.collect();
    let a = ChildProcess::spawn(&env, &[], &d.join("a.log"));
    a.ready(MIN).await;
    let b = ChildProcess::spawn(&env, &[], &d.join("b.log"));
    b.ready(MIN).await;
    settled(&[&a, &b], parts as usize).await;
    // One fire every 5 ms for 30 s.
    let expected = spread("g", 6_000, now_ms() + 4_000, 30_000);
    load(&env, &mut got, &expected).await;
    common::checker::sleep_until(expected.values().min().unwrap() + 5_000).await;
    let lost = a.owned().expect("a answers");
    assert!(!lost.is_empty());
    let kill = now_ms();
    let mut a = a;
    tokio::task::spawn_blocking(move || a.kill9())
        .await
        .unwrap();
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(2)).await;
    let first_after = fires
        .iter()
        .filter(|f| f.fired_ms > kill)
        .filter(|f| lost.contains(&Partitioner::Murmur2.partition(f.timer_id.as_bytes(), parts)))
        .map(|f| f.fired_ms)
        .min()
        .expect("the killed instance's partitions fired again");
    let gap = first_after - kill;
    let mut seen = std::collections::HashSet::new();
    for f in &fires {
        assert!(f.fired_ms >= f.due_ms, "{} fired early", f.timer_id);
        seen.insert(f.timer_id.as_str());
    }
    assert_eq!(seen.len(), expected.len(), "every timer fired");
    println!("kill -9: partitions {lost:?} fired again {gap} ms after the kill (session timeout 6000 ms)");
    assert!(
        gap >= 1_000,
        "the killed instance's partitions stopped firing for a while: {gap} ms"
    );
    assert!(
        gap <= 6_000 + 5_000,
        "gap {gap} ms: session timeout 6 s + rebalance"
    );
}
