//! The fault-injection suite: each scenario runs a load of one-shot timers through one
//! fault, on servers of its own, and ends with the shared checker
//! (`common::checker::check`): every accepted timer fired at least once, none early,
//! duplicates within the scenario's bound, lateness within the fault's duration plus a
//! stated margin. Reports go to stdout and `$CARGO_TARGET_TMPDIR/faults.jsonl`.

mod common;

use common::checker::{
    all_accepted, check, commands, due_near, gather, load, sleep_until, spread, Bounds,
};
use common::child::ChildProcess;
use common::world::World;
use common::TestEnv;
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);
/// Failover in seconds, not tens: a 6 s session timeout.
const FAST: &[&str] = &["--session-timeout-ms", "6000"];
const SESSION_MS: i64 = 6_000;

/// Waits until the instances own `partitions` partitions between them.
async fn settled(instances: &[&ChildProcess], partitions: f64) {
    let deadline = tokio::time::Instant::now() + MIN;
    while tokio::time::Instant::now() < deadline {
        let owned: f64 = instances
            .iter()
            .map(|i| i.metric("ktimer_owned_partitions").unwrap_or(0.0))
            .sum();
        if owned == partitions {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the group did not settle on {partitions} partitions");
}

/// 1. kill -9 an instance while it is firing; the other takes over its partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_firing_the_other_instance_takes_over() {
    let w = World::start("kill9", false);
    let env = TestEnv::on(&w.servers(), "kill9", 4, FAST).await;
    let mut got = env.collect();
    let mut a = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    let b = ChildProcess::spawn(&env, &[], &w.dir.join("b.log"));
    b.ready(MIN).await;
    settled(&[&a, &b], 4.0).await;
    let expected = spread("k", 2_000, now_ms() + 4_000, 8_000);
    load(&env, &mut got, &expected).await;
    sleep_until(now_ms().max(expected.values().min().unwrap() + 3_000)).await;
    let fault = now_ms();
    a.kill9();
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(2)).await;
    check(
        "1 kill -9 while firing",
        &expected,
        &fires,
        &Bounds {
            duplicates: due_near(&expected, fault, 1_000),
            lateness_ms: SESSION_MS + 15_000,
        },
    );
}

/// 2. Instances join and leave repeatedly while timers fall due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalances_under_load() {
    let w = World::start("rebalance", false);
    let env = TestEnv::on(&w.servers(), "rebalance", 4, FAST).await;
    let mut got = env.collect();
    let mut a = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    let expected = spread("r", 3_000, now_ms() + 3_000, 20_000);
    load(&env, &mut got, &expected).await;
    let mut changes = Vec::new();
    let b = ChildProcess::spawn(&env, &[], &w.dir.join("b.log"));
    changes.push(now_ms());
    b.ready(MIN).await;
    settled(&[&a, &b], 4.0).await;
    let mut c = ChildProcess::spawn(&env, &[], &w.dir.join("c.log"));
    changes.push(now_ms());
    c.ready(MIN).await;
    settled(&[&a, &b, &c], 4.0).await;
    changes.push(now_ms());
    let (st, _) = a.terminate();
    assert!(st.success(), "a exited with {st}");
    settled(&[&b, &c], 4.0).await;
    changes.push(now_ms());
    let (st, _) = c.terminate();
    assert!(st.success(), "c exited with {st}");
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(2)).await;
    let near: usize = changes.iter().map(|&t| due_near(&expected, t, 1_000)).sum();
    check(
        "2 rebalances under load",
        &expected,
        &fires,
        &Bounds {
            duplicates: near,
            lateness_ms: SESSION_MS + 15_000,
        },
    );
}

/// 3. An instance frozen (SIGSTOP) past the session timeout, then thawed: once another
/// instance took one of its partitions, it fires nothing more under its old epoch
/// (fencing). A partition nobody took during the freeze is still legitimately its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_instance_never_fires_after_losing_its_partitions() {
    let w = World::start("sigstop", false);
    let env = TestEnv::on(&w.servers(), "sigstop", 4, FAST).await;
    let mut got = env.collect();
    let a = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    let b = ChildProcess::spawn(&env, &[], &w.dir.join("b.log"));
    b.ready(MIN).await;
    settled(&[&a, &b], 4.0).await;
    let expected = spread("s", 2_000, now_ms() + 3_000, 20_000);
    load(&env, &mut got, &expected).await;
    sleep_until(expected.values().min().unwrap() + 2_000).await;
    let frozen = now_ms();
    a.freeze();
    tokio::time::sleep(Duration::from_millis(SESSION_MS as u64 + 6_000)).await;
    let thawed = now_ms();
    a.thaw();
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    // An epoch is the instant (ms) it was taken (`max(old + 1, now)`), and fired records
    // land in the partition of the same number as their command. Fencing means: no
    // record of the thawed instance under an epoch that a newer one had replaced by then.
    let epoch = |f: &common::Fired| f.headers["ktimer-epoch"].parse::<i64>().unwrap();
    let mut epochs: std::collections::HashMap<i32, Vec<i64>> = Default::default();
    for f in &fires {
        epochs.entry(f.partition).or_default().push(epoch(f));
    }
    assert!(
        epochs.values().flatten().any(|&e| e > frozen && e < thawed),
        "no partition was taken over while the instance was frozen: the scenario tested nothing"
    );
    let a_id = format!("/{}", a.pid());
    let stale: Vec<_> = fires
        .iter()
        .filter(|f| f.headers["ktimer-instance"].ends_with(&a_id))
        .filter(|f| {
            epochs[&f.partition]
                .iter()
                .any(|&newer| newer > epoch(f) && newer <= f.fired_ms)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "the thawed instance fired under an epoch another owner had replaced: {:?}",
        &stale[..stale.len().min(3)]
    );
    check(
        "3 SIGSTOP past the session timeout",
        &expected,
        &fires,
        &Bounds {
            duplicates: due_near(&expected, frozen, 1_000) + due_near(&expected, thawed, 1_000),
            lateness_ms: thawed - frozen + 15_000,
        },
    );
}

/// 4. Redis killed and restarted from its append-only file (fsync every second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_from_its_aof_while_firing() {
    let mut w = World::start("aof", true);
    let env = TestEnv::on(&w.servers(), "aof", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("a", 2_000, now_ms() + 3_000, 8_000);
    load(&env, &mut got, &expected).await;
    sleep_until(expected.values().min().unwrap() + 3_000).await;
    let fault = now_ms();
    w.redis.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.redis.restart();
    let back = now_ms();
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "4 redis restarted from AOF",
        &expected,
        &fires,
        &Bounds {
            // everysec: up to ~2 s of writes (claims, acks) can be lost.
            duplicates: due_near(&expected, fault, 2_500),
            lateness_ms: back - fault + 5_000,
        },
    );
    svc.stop().await;
}

/// 5. Redis restarted empty: detected, and rebuilt from the state topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_is_detected_and_replayed() {
    let mut w = World::start("empty", false);
    let env = TestEnv::on(&w.servers(), "empty", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("e", 1_000, now_ms() + 3_000, 8_000);
    load(&env, &mut got, &expected).await;
    sleep_until(expected.values().min().unwrap() + 3_000).await;
    let fault = now_ms();
    w.redis.kill();
    w.redis.restart();
    let back = now_ms();
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(3)).await;
    // The state topic's last checkpoint says which fired: only those acknowledged within
    // about a checkpoint interval before the loss fire again.
    check(
        "5 redis restarted empty",
        &expected,
        &fires,
        &Bounds {
            duplicates: due_near(&expected, fault, 2_500),
            lateness_ms: back - fault + 10_000,
        },
    );
    svc.stop().await;
}

/// 6. The broker frozen longer than the session timeout, then back. The freeze also
/// outlasts the producer's `message.timeout.ms` (5 s here): librdkafka gives records up,
/// its idempotent producer bumps its epoch, which Tansu answers with ProducerFenced for
/// good; ktimer replaces the failed producer and its own retry carries the records over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_unavailable_longer_than_the_session_timeout() {
    let w = World::start("broker", false);
    let flags = [FAST, &["--kafka-option", "message.timeout.ms=5000"]].concat();
    let env = TestEnv::on(&w.servers(), "broker", 2, &flags).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("b", 1_000, now_ms() + 3_000, 15_000);
    load(&env, &mut got, &expected).await;
    sleep_until(expected.values().min().unwrap() + 2_000).await;
    let fault = now_ms();
    w.broker.freeze();
    tokio::time::sleep(Duration::from_millis(SESSION_MS as u64 + 3_000)).await;
    w.broker.thaw();
    let back = now_ms();
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    let during = expected
        .values()
        .filter(|&&d| d >= fault - 1_000 && d <= back + 1_000)
        .count();
    check(
        "6 broker unavailable past the session timeout",
        &expected,
        &fires,
        &Bounds {
            duplicates: during,
            lateness_ms: back - fault + SESSION_MS + 15_000,
        },
    );
    svc.stop().await;
}

/// 8. The service down while timers fall due: all fire after the start, in due order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downtime_backlog_fires_in_due_order() {
    let w = World::start("downtime", false);
    let env = TestEnv::on(&w.servers(), "downtime", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("d", 500, now_ms() + 2_500, 3_000);
    load(&env, &mut got, &expected).await;
    svc.stop().await;
    let down = now_ms();
    sleep_until(expected.values().max().unwrap() + 1_000).await;
    let svc = env.start().await;
    let up = now_ms();
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(1)).await;
    let dues: Vec<i64> = fires.iter().map(|f| f.due_ms).collect();
    let out_of_order = dues.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(
        out_of_order, 0,
        "the backlog fired out of due order: {dues:?}"
    );
    check(
        "8 downtime backlog",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: up - down + 10_000,
        },
    );
    svc.stop().await;
}

/// 9. Redis stalls while claimed fires are due: a script keeps it busy for 600 ms (as a
/// long checkpoint page or a saturated machine would), starting just before the first of
/// 40 fires 10 ms apart, all claimed beforehand (`--claim-ahead-ms 1000`). The trigger's
/// acknowledgement (and any claim) waits for Redis, but the sending does not: every fire
/// goes out on time. (When the acknowledgement was awaited between sends, the fires after
/// the first waited for the stall to end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_does_not_hold_up_fires_already_claimed() {
    let env = TestEnv::new("stall", 1, &["--claim-ahead-ms", "1000"]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let start = now_ms() + 3_000;
    for i in 0..40 {
        let id = format!("stall-{i}");
        env.send(&common::once_at(&id, start + i * 10, ""), None)
            .await;
    }
    let accepted = got.results(40, MIN).await;
    assert!(accepted
        .iter()
        .all(|r| r.state.as_deref() == Some("SCHEDULED")));
    let redis_url = common::servers().redis_url.clone();
    sleep_until(start - 20).await;
    let stall = tokio::task::spawn_blocking(move || {
        let mut con = redis::Client::open(redis_url)
            .unwrap()
            .get_connection()
            .unwrap();
        let busy = "local t = redis.call('TIME'); local t0 = t[1] * 1e6 + t[2]; \
            repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - t0 > 600000; return 1";
        let began = now_ms();
        let _: i64 = redis::cmd("EVAL").arg(busy).arg(0).query(&mut con).unwrap();
        (began, now_ms())
    });
    let fires = got.fires(40, MIN).await;
    let (began, ended) = stall.await.unwrap();
    assert!(
        began <= start && ended >= start + 390,
        "the stall ({began}..{ended}) must cover the fires ({start}..{})",
        start + 390
    );
    let late: Vec<i64> = fires.iter().map(|f| f.fired_ms - f.due_ms).collect();
    println!("fire lateness during a 600 ms Redis stall: {late:?}");
    assert!(late.iter().all(|&l| l >= 0), "early: {late:?}");
    assert!(
        late.iter().all(|&l| l <= 100),
        "fires held up by the stall: {late:?}"
    );
    svc.stop().await;
}

/// 10. Redis goes back to a snapshot it took a moment before, losing the writes since,
/// while a stream of creates is being applied (as a primary restarted from an older
/// RDB, or a failover to a lagging replica, would). One batch is in Redis and the next
/// is prepared behind it. The first is refused (Redis is behind what this owner
/// applied) and the partitions are read again from where Redis stands; the second must
/// be dropped, not applied ahead of that replay (nor seek past it). Every command is
/// answered as accepted, and every timer fires once: none was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_back_to_an_older_snapshot_while_commands_stream_in() {
    let mut w = World::start("snapshot", false);
    let env = TestEnv::on(&w.servers(), "snapshot", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("m", 20_000, now_ms() + 30_000, 5_000);
    env.send_many(&commands(&expected)).await;
    // The intake is under way: a tenth answered. Redis saves what it holds now (SAVE
    // blocks it for a moment), then applies at least 2,000 more commands (their results
    // come after the apply), then comes back without them.
    let mut results = got.results(2_000, MIN).await;
    let mut con = redis::Client::open(w.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    results.extend(got.results(2_000, MIN).await);
    while let Ok(r) = got.results.try_recv() {
        results.push(r);
    }
    let answered = results.len();
    w.redis.kill();
    w.redis.restart();
    let fault = now_ms();
    // Results trail the apply by a couple of batches (the intake's batch: 1,000).
    println!("the fault came after {answered} commands were answered");
    assert!(
        answered + 4_000 < expected.len(),
        "the fault came too late to hit the intake: {answered} answered"
    );
    all_accepted(&mut got, results, &expected, 2 * MIN).await;
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    check(
        "10 redis back to an older snapshot while commands stream in",
        &expected,
        &fires,
        &Bounds {
            // Nothing was due before the fault: each timer fires once.
            duplicates: due_near(&expected, fault, 2_500),
            lateness_ms: 10_000,
        },
    );
    svc.stop().await;
}
