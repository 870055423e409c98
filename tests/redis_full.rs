//! Redis that fills up, evicts keys or cannot persist: ktimer refuses an evicting Redis at
//! start, reports keys evicted under it and the fires they cost, and stalls its intake
//! visibly (nothing lost) while Redis refuses writes. Each scenario runs on servers of its
//! own. (Redis that comes back wrong, emptied or from older data: `redis_wrong.rs`.)

mod common;

use common::checker::{check, gather, spread, Bounds};
use common::child::ChildProcess;
use common::world::World;
use common::{once_at, TestEnv};
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// A connection to the Redis at `url`.
fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn config_set(con: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(con)
        .unwrap();
}

/// Writes keys of 10 kB until Redis refuses one (full) or `enough` holds.
fn fill(con: &mut redis::Connection, enough: impl Fn(&mut redis::Connection) -> bool) {
    let filler = vec![b'x'; 10_000];
    for i in 0.. {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .query(con);
        if set.is_err() || enough(con) {
            return;
        }
    }
}

/// Polls `ok` every 250 ms until it holds; fails with `what` after `limit`.
async fn eventually(limit: Duration, what: &str, mut ok: impl FnMut() -> Option<String>) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let Some(not_yet) = ok() else {
            return;
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {limit:?}: {not_yet}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    let line = info.lines().find(|l| l.starts_with(&format!("{field}:")));
    line.and_then(|l| l.split_once(':')?.1.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
}

/// A Redis whose `maxmemory-policy` may evict keys is refused at start, with the setting
/// and its fix in the error (it used to run on, and lose timers without a trace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_refused_at_start() {
    let w = World::start("evicting", false);
    let mut con = connect(&w.redis.url());
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    let env = TestEnv::on(&w.servers(), "evicting", 1, &[]).await;
    let (tx, _rx) = tokio::sync::watch::channel(Default::default());
    let token = ktimer::shutdown::CancellationToken::new();
    let run = ktimer::service::run(env.args.clone(), token.clone(), tx);
    let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
    token.cancel();
    let err = ended
        .expect("ktimer still running on an evicting Redis after 30 s")
        .expect_err("ktimer ran on an evicting Redis");
    let why = format!("{err:#}");
    assert!(
        why.contains("allkeys-lru") && why.contains("maxmemory-policy noeviction"),
        "{why}"
    );
}

/// Keys evicted anyway (the policy changed under a running instance, then memory filled
/// up with other keys): the instance reports it in its metrics and `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_evicted_under_a_running_instance_are_reported() {
    let w = World::start("evicted", false);
    let env = TestEnv::on(&w.servers(), "evicted", 2, &[]).await;
    let mut got = env.collect();
    let a = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    let expected = spread("ev", 2_000, now_ms() + 3_600_000, 60_000);
    common::checker::load(&env, &mut got, &expected).await;
    assert_eq!(a.metric("ktimer_redis_evicted_keys_total"), Some(0.0));
    let mut con = connect(&w.redis.url());
    let used = info_field(&mut con, "memory", "used_memory");
    config_set(&mut con, "maxmemory-policy", "allkeys-lru");
    config_set(&mut con, "maxmemory", &(used + (4 << 20)).to_string());
    fill(&mut con, |con| info_field(con, "stats", "evicted_keys") > 0);
    eventually(Duration::from_secs(30), "eviction reported", || {
        let evicted = a.metric("ktimer_redis_evicted_keys_total").unwrap_or(0.0);
        let ready = a.get("/readyz");
        let shown = evicted > 0.0 && matches!(&ready, Some((503, why)) if why.contains("evicted"));
        (!shown).then(|| format!("{evicted} evicted, /readyz {ready:?}"))
    })
    .await;
    assert_eq!(a.metric("ktimer_redis_may_evict"), Some(1.0));
}

/// Timer records deleted behind ktimer's back (evicted, or removed by hand) while their
/// fires wait in the minute slices: the lost fires are counted
/// (`ktimer_fires_total{outcome="vanished"}`, alert KtimerFiresVanished), not dropped
/// silently, and nothing else is disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_whose_timer_records_vanished_are_counted() {
    let w = World::start("vanished", false);
    let env = TestEnv::on(&w.servers(), "vanished", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let doomed = spread("gone", 20, now_ms() + 4_000, 500);
    common::checker::load(&env, &mut got, &doomed).await;
    let mut con = connect(&w.redis.url());
    // A partition this small keeps each record under a key of its own.
    let records: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*:t:gone-*", env.args.redis_prefix))
        .query(&mut con)
        .unwrap();
    assert_eq!(records.len(), 20, "{records:?}");
    let _: () = redis::cmd("DEL").arg(&records).query(&mut con).unwrap();
    env.send(&once_at("sentinel", now_ms() + 6_000, "x"), None)
        .await;
    let fires = got.fires_until("sentinel", MIN).await;
    assert_eq!(fires.len(), 1, "fired without a record: {fires:?}");
    assert_eq!(svc.fires("vanished"), 20.0, "lost fires not counted");
    svc.stop().await;
}

/// Redis full (`maxmemory` reached, `noeviction`): every write is refused with OOM. The
/// intake stops taking commands and says so (`/readyz` 503, the stall metric), loses
/// nothing, and carries on by itself once Redis accepts writes again: every command is
/// answered, every timer fires, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_stalls_the_intake_visibly_and_nothing_is_lost() {
    let w = World::start("oom", false);
    let env = TestEnv::on(&w.servers(), "oom", 2, &[]).await;
    let mut got = env.collect();
    let a = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    let mut con = connect(&w.redis.url());
    let used = info_field(&mut con, "memory", "used_memory");
    config_set(&mut con, "maxmemory", &(used + (2 << 20)).to_string());
    fill(&mut con, |_| false);
    let expected = spread("full", 500, now_ms() + 40_000, 5_000);
    env.send_many(&common::checker::commands(&expected)).await;
    eventually(MIN, "a full Redis shown", || {
        let stalled = a.metric("ktimer_intake_stalled_seconds").unwrap_or(0.0);
        let ready = a.get("/readyz");
        let shown = stalled >= 10.0 && matches!(&ready, Some((503, why)) if why.contains("Redis"));
        (!shown).then(|| format!("stalled {stalled} s, /readyz {ready:?}"))
    })
    .await;
    assert!(
        got.results.try_recv().is_err(),
        "a command was answered while Redis refused every write"
    );
    config_set(&mut con, "maxmemory", "0");
    common::checker::all_accepted(&mut got, Vec::new(), &expected, MIN).await;
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(1)).await;
    check(
        "redis full, then writable again",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 1_000,
        },
    );
    assert_eq!(a.metric("ktimer_intake_stalled_seconds"), Some(0.0));
}

/// Redis unable to persist (a snapshot failed: its directory became unwritable, as on a
/// full disk; `stop-writes-on-bgsave-error yes`): every write is refused with MISCONF. The
/// intake stops taking commands and says so (`/readyz` 503, the stall metric); once a
/// snapshot succeeds again, every command is answered and every timer fires, the ones due
/// meanwhile late, none early, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_cannot_persist_stalls_the_intake_visibly_and_nothing_is_lost() {
    let w = World::start("misconf", false);
    let env = TestEnv::on(&w.servers(), "misconf", 2, &[]).await;
    let mut got = env.collect();
    let a = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    a.ready(MIN).await;
    let early = spread("due", 100, now_ms() + 6_000, 4_000);
    common::checker::load(&env, &mut got, &early).await;
    let mut con = connect(&w.redis.url());
    config_set(&mut con, "save", "3600 1");
    config_set(&mut con, "dir", "/proc");
    let failed: redis::RedisResult<String> = redis::cmd("BGSAVE").query(&mut con);
    eventually(Duration::from_secs(10), "the snapshot failed", || {
        let ok = info_field(&mut con, "persistence", "rdb_bgsave_in_progress") == 0;
        let status: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .unwrap();
        let err = status.contains("rdb_last_bgsave_status:err");
        (!(ok && err)).then(|| format!("BGSAVE {failed:?}, {status}"))
    })
    .await;
    let refused: redis::RedisResult<()> = redis::cmd("SET").arg("probe").arg("1").query(&mut con);
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("MISCONF")),
        "{refused:?}"
    );
    let later = spread("later", 300, now_ms() + 40_000, 5_000);
    env.send_many(&common::checker::commands(&later)).await;
    eventually(MIN, "a Redis refusing writes shown", || {
        let stalled = a.metric("ktimer_intake_stalled_seconds").unwrap_or(0.0);
        let ready = a.get("/readyz");
        let shown = stalled >= 10.0 && matches!(&ready, Some((503, why)) if why.contains("Redis"));
        (!shown).then(|| format!("stalled {stalled} s, /readyz {ready:?}"))
    })
    .await;
    assert!(
        got.results.try_recv().is_err(),
        "a command was answered while Redis refused every write"
    );
    config_set(&mut con, "dir", w.dir.to_str().unwrap());
    let _: String = redis::cmd("BGSAVE").query(&mut con).unwrap();
    common::checker::all_accepted(&mut got, Vec::new(), &later, MIN).await;
    let mut expected = early;
    expected.extend(later);
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(1)).await;
    check(
        "redis not persisting, then persisting again",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 30_000,
        },
    );
    assert_eq!(a.metric("ktimer_intake_stalled_seconds"), Some(0.0));
}
