//! The network fails between one instance and Redis, or the broker, while the rest of
//! the group reaches everything: a TCP proxy the test controls stands between that
//! instance and Redis, or the instance runs on a second host (a network namespace) that
//! loses the broker and keeps Redis.

mod common;

use common::checker::{check, due_near, gather, load, sleep_until, spread, Bounds};
use common::child::ChildProcess;
use common::netns::Netns;
use common::proxy::Proxy;
use common::world::World;
use common::TestEnv;
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Waits until `ok` holds, failing after `limit` with what `ok` last said.
async fn eventually(limit: Duration, what: &str, mut ok: impl FnMut() -> Option<String>) {
    let end = tokio::time::Instant::now() + limit;
    loop {
        let Some(not_yet) = ok() else { return };
        assert!(tokio::time::Instant::now() < end, "{what}: {not_yet}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Two instances; one is cut from Redis for 20 s (connections held open, nothing passes)
/// while 200 timers come due in every partition. It gives its partitions up once Redis
/// has not answered for `--redis-cut-ms` (5 s): the other fires them, late by less than
/// the session timeout plus a few seconds (it held them for the whole cut, fires 20 s
/// late); none is lost or early. Once the cut heals, it joins the group again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_cut_from_redis_gives_its_partitions_up_and_rejoins() {
    let session_ms = 6_000;
    let w = World::start("rediscut", false);
    let flags = ["--session-timeout-ms", "6000"];
    let env = TestEnv::on(&w.servers(), "rediscut", 4, &flags).await;
    let mut got = env.collect();
    let proxy = Proxy::start(w.redis.port).await;
    let mut via_proxy = env.args.clone();
    via_proxy.redis_url = proxy.redis_url();
    let a = env.start_with(via_proxy).await;
    let b = env.start().await;
    let owned = |s: &ktimer::status::Status| s.owned.len();
    eventually(MIN, "both instances own partitions", || {
        let (na, nb) = (owned(&a.status.borrow()), owned(&b.status.borrow()));
        (na == 0 || na + nb != 4).then(|| format!("a owns {na}, b owns {nb}"))
    })
    .await;
    let t0 = now_ms();
    let expected = spread("cut", 200, t0 + 4_000, 14_000);
    load(&env, &mut got, &expected).await;
    let cut_at = t0 + 3_000;
    sleep_until(cut_at).await;
    proxy.cut();
    let heal_at = cut_at + 20_000;
    let fires = tokio::spawn(async move {
        let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
        (fires, expected)
    });
    sleep_until(heal_at).await;
    proxy.heal();
    let (fires, expected) = fires.await.unwrap();
    let report = check(
        "an instance cut from redis for 20 s",
        &expected,
        &fires,
        &Bounds {
            duplicates: due_near(&expected, cut_at, 3_000),
            lateness_ms: session_ms + 5_000,
        },
    );
    println!("{report:?}");
    eventually(MIN, "the cut instance joined the group again", || {
        let na = owned(&a.status.borrow());
        (na == 0).then(|| "it owns nothing".to_string())
    })
    .await;
    a.stop().await;
    b.stop().await;
}

/// An instance started while its broker does not answer yet (compose, Kubernetes start
/// everything at once) waits for it and says so in its log, instead of exiting at its
/// first metadata fetch (it did, after 10 s). It is not ready meanwhile (its admin port
/// opens once Redis and the broker answered); once the broker answers it joins the group
/// and fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_before_its_broker_answers_waits_for_it() {
    let w = World::start("latebroker", false);
    let env = TestEnv::on(&w.servers(), "latebroker", 1, &[]).await;
    let mut got = env.collect();
    w.broker.freeze();
    let log = w.dir.join("a.log");
    let mut a = common::child::ChildProcess::spawn(&env, &[], &log);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    eventually(MIN, "a log line about the broker", || {
        assert!(a.alive(), "ktimer exited: {}", said());
        let text = said();
        (!text.contains("broker metadata")).then(|| text.lines().last().unwrap_or("").to_string())
    })
    .await;
    assert!(
        !matches!(a.get("/readyz"), Some((200, _))),
        "ready before the broker answered"
    );
    w.broker.thaw();
    a.ready(MIN).await;
    env.send(&common::once_at("after", now_ms() + 1_000, "x"), None)
        .await;
    got.fires_until("after", MIN).await;
}

/// The broker stops answering for 5 s (less than the session timeout: the group holds;
/// `KTIMER_TEST_OUTAGE_S` sets another length)
/// while 20 fires come due; each delivery attempt times out (`message.timeout.ms` 1 s, at
/// most 2 attempts, 0.5 s apart: the default 10 attempts over a minute, scaled down). An
/// outage says nothing about the records: every fire reaches its callback topic once the
/// broker answers again, none goes to the dead-letter topic (they did, after 2 attempts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_sends_no_fire_to_the_dead_letter_topic() {
    let w = World::start("outage", false);
    let flags = [
        "--max-delivery-attempts",
        "2",
        "--retry-max-ms",
        "500",
        "--kafka-option",
        "message.timeout.ms=1000",
    ];
    let env = TestEnv::on(&w.servers(), "outage", 1, &flags).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let t0 = now_ms();
    let expected = spread("o", 20, t0 + 4_000, 2_000);
    load(&env, &mut got, &expected).await;
    // KTIMER_TEST_OUTAGE_S=300 runs the several-minute variant.
    let silent_ms: i64 = std::env::var("KTIMER_TEST_OUTAGE_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        * 1000;
    sleep_until(t0 + 3_000).await;
    w.broker.freeze();
    sleep_until(t0 + 3_000 + silent_ms).await;
    w.broker.thaw();
    let wait = MIN + Duration::from_millis(silent_ms as u64);
    let fires = gather(&mut got, &expected, wait, Duration::from_secs(1)).await;
    // The first fire was due 1 s into the silence; the backoff is capped at 0.5 s. Past
    // the session timeout (6 s) the group re-forms once the broker answers: fires resumed
    // about 18 s after it did (librdkafka reconnects, Tansu rebalances).
    let resume_ms = if silent_ms < 6_000 { 10_000 } else { 25_000 };
    check(
        &format!("the broker silent for {} s", silent_ms / 1000),
        &expected,
        &fires,
        &Bounds {
            duplicates: expected.len(),
            lateness_ms: silent_ms - 1_000 + resume_ms,
        },
    );
    assert_eq!(svc.fires("dead_lettered"), 0.0, "fires dead-lettered");
    svc.stop().await;
}

/// Every Redis round trip of one instance takes 200 ms longer (the proxy holds each byte
/// 100 ms each way) while 1,000 timers come due over 4 s: no Redis call fails (a claim
/// that timed out would send the trigger into a rescan of its in-flight set), none is
/// early or repeated, and fires go on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_to_redis_fails_no_call_and_fires_on_time() {
    let w = World::start("slowlink", false);
    let env = TestEnv::on(&w.servers(), "slowlink", 4, &[]).await;
    let mut got = env.collect();
    let proxy = Proxy::start(w.redis.port).await;
    // KTIMER_TEST_RTT_MS sets another added round trip.
    let rtt: u64 = std::env::var("KTIMER_TEST_RTT_MS").map_or(200, |v| v.parse().unwrap());
    proxy.slow_down(Duration::from_millis(rtt));
    let mut via_proxy = env.args.clone();
    via_proxy.redis_url = proxy.redis_url();
    let svc = env.start_with(via_proxy).await;
    let expected = spread("s", 1_000, now_ms() + 10_000, 4_000);
    load(&env, &mut got, &expected).await;
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(1)).await;
    check(
        "200 ms added to every Redis round trip",
        &expected,
        &fires,
        // The trigger claims two round trips earlier: half the fires go within 1 ms of
        // due, the slowest 0.15 s late (all 0.5 s late when it claimed 100 ms ahead
        // whatever the link).
        &Bounds {
            duplicates: 0,
            lateness_ms: 300,
        },
    );
    let mut late: Vec<i64> = fires.iter().map(|f| f.fired_ms - f.due_ms).collect();
    late.sort_unstable();
    println!(
        "lateness p50 {} p90 {} ms",
        late[late.len() / 2],
        late[late.len() * 9 / 10]
    );
    let errors = svc.metric("ktimer_redis_errors_total");
    assert_eq!(errors.unwrap_or(0.0), 0.0, "failed Redis calls");
    svc.stop().await;
}

/// Two instances; the one that owns the partition runs on a second host, which loses the
/// broker but keeps Redis (a blackhole route: connections held open, nothing passes). Its
/// trigger still reaches Redis, so it could go on claiming while nothing it produces gets
/// out, and what it enqueued stays in its producer until the link heals. The other
/// instance takes the partition after the session timeout and answers a CANCEL of 20
/// every-second cron timers; the link heals 6 s later. A fire the cut instance had
/// enqueued must not reach the fired topic after that CANCEL was answered (on main, its
/// queued occurrences arrived once the link healed, after the answers), it stops
/// claiming soon after its producer stops answering, and the one-shot timers due during
/// the cut all fire, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_cut_from_the_broker_stops_and_its_queued_fires_never_follow_a_cancel() {
    let ns = Netns::new();
    let w = World::start_on("brokercut", false, Some(&ns.host_ip), &ns.broker_ip);
    let env = TestEnv::on(
        &w.servers(),
        "brokercut",
        1,
        &["--session-timeout-ms", "6000"],
    )
    .await;
    let mut got = env.collect();
    let a = ChildProcess::spawn_in(&ns.exec(), &ns.ip, &env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    eventually(
        MIN,
        "the instance on the second host owns the partition",
        || {
            let owned = a.owned();
            (owned != Some(vec![0])).then(|| format!("it owns {owned:?}"))
        },
    )
    .await;
    let b = env.start().await;
    let crons: Vec<String> = (0..20).map(|i| format!("every-second-{i}")).collect();
    let creates: Vec<_> = crons
        .iter()
        .map(|id| common::cron(id, "* * * * * *", "c"))
        .collect();
    env.send_many(&creates).await;
    got.results(crons.len(), MIN).await;
    let t0 = now_ms();
    let expected = spread("once", 100, t0 + 3_000, 9_000);
    load(&env, &mut got, &expected).await;
    let cut_at = now_ms();
    let cpu_before = thread_cpu_ms(a.pid(), "ktimer-trigger");
    ns.cut_broker();
    eventually(MIN, "the other instance took the partition", || {
        let owned = b.status.borrow().owned.clone();
        (owned != vec![0]).then(|| format!("it owns {owned:?}"))
    })
    .await;
    let taken_at = now_ms();
    // A trigger that may not claim must not spin meanwhile either.
    // A trigger that may not claim must not spin meanwhile either (its thread's CPU;
    // librdkafka's broker thread busies itself with the blackholed route).
    let cpu = thread_cpu_ms(a.pid(), "ktimer-trigger") - cpu_before;
    assert!(
        cpu < 1_000,
        "the cut instance's trigger used {cpu} ms of CPU in {} ms",
        taken_at - cut_at
    );
    let waiting = || b.metric("ktimer_partitions_waiting_previous_owner");
    eventually(
        Duration::from_secs(5),
        "the new owner reports the partition waiting",
        || (waiting() != Some(1.0)).then(|| format!("{:?}", waiting())),
    )
    .await;
    let cancels: Vec<_> = crons.iter().map(|id| common::cancel(id)).collect();
    env.send_many(&cancels).await;
    let heal_at = taken_at + 6_000;
    let ns = std::sync::Arc::new(ns);
    let healing = tokio::spawn({
        let ns = ns.clone();
        async move {
            sleep_until(heal_at).await;
            ns.heal_broker();
        }
    });
    let answers = got.results(crons.len(), MIN).await;
    let answered_at = now_ms();
    healing.await.unwrap();
    for r in &answers {
        assert_eq!(r.outcome, ktimer::command::Outcome::Accepted, "{r:?}");
    }
    assert_eq!(
        waiting(),
        Some(0.0),
        "the partition no longer waits once answered"
    );
    // The cut instance's producer gives what it holds up after its message timeout (30 s).
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(35)).await;
    let is_cron = |f: &&common::Fired| f.timer_id.starts_with("every-second-");
    let after: Vec<_> = fires
        .iter()
        .filter(is_cron)
        .filter(|f| f.received_ms > answered_at)
        .collect();
    // What the cut instance enqueued after the cut (its fires name it: `host/pid`).
    let me = format!("/{}", a.pid());
    let by_a: Vec<_> = fires
        .iter()
        .filter(|f| {
            f.headers
                .get("ktimer-instance")
                .is_some_and(|i| i.ends_with(&me))
        })
        .filter(|f| f.fired_ms > cut_at)
        .collect();
    let last_enqueued = by_a.iter().map(|f| f.fired_ms - cut_at).max();
    let last_received = by_a.iter().map(|f| f.received_ms - cut_at).max();
    println!(
        "cut at +0; taken at +{} ms; cancels answered at +{} ms (link healed at +{} ms); \
         cron fires after the answers: {}; the cut instance's fires enqueued after the cut: \
         {} (last enqueued at +{last_enqueued:?} ms, received at +{last_received:?} ms); \
         its trigger's CPU from the cut to the take-over: {cpu} ms",
        taken_at - cut_at,
        answered_at - cut_at,
        heal_at - cut_at,
        after.len(),
        by_a.len(),
    );
    // It claims nothing once its producer answered nothing for a second (and sends what
    // it claimed before, ahead of their due time by the claim margin).
    assert!(
        last_enqueued.is_none_or(|ms| ms <= 2_500),
        "the cut instance went on enqueueing fires until +{last_enqueued:?} ms"
    );
    assert!(
        after.is_empty(),
        "{} fires of cancelled timers arrived after the CANCEL was answered, e.g. {:?}",
        after.len(),
        after.first()
    );
    let ones: Vec<_> = fires.iter().filter(|f| !is_cron(f)).cloned().collect();
    let report = check(
        "an instance cut from the broker",
        &expected,
        &ones,
        &Bounds {
            duplicates: due_near(&expected, cut_at, 10_000),
            lateness_ms: 6_000 + 10_000,
        },
    );
    println!("{report:?}");
    let said = std::fs::read_to_string(w.dir.join("a.log")).unwrap_or_default();
    for l in said.lines().filter(|l| {
        l.contains("producer") || l.contains("SESSTMOUT") || l.contains("trigger stopped")
    }) {
        println!("a: {l}");
    }
    b.stop().await;
    drop(a);
}

/// CPU time (user and system) the threads named `name` of process `pid` used so far, ms.
fn thread_cpu_ms(pid: u32, name: &str) -> i64 {
    let mut ms = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process runs") {
        let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
        // `tid (comm) state ...`: utime and stime are the 12th and 13th fields after the
        // name, in clock ticks (100 per second).
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if !head.ends_with(&format!("({name}")) {
            continue;
        }
        let f: Vec<i64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        ms += (f[10] + f[11]) * 10;
    }
    ms
}
