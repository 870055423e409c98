//! Redis that comes back wrong: emptied, from an older snapshot, or evicting keys. Each
//! scenario runs on servers of its own and checks what the delivery guarantee promises:
//! nothing lost, nothing early, and no fire acknowledged before the last checkpoint fires
//! again.

mod common;

use common::checker::{check, gather, sleep_until, spread, Bounds, Expected};
use common::child::ChildProcess;
use common::world::World;
use common::{lifecycle, once_at, TestEnv};
use ktimer::command::{CommandKind, Outcome};
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// A connection to the Redis at `url`.
fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn flushall(url: &str) {
    let mut con = connect(url);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
}

/// A fired timer fires again after Redis is emptied? The order of the report: 200 one-shot
/// timers due 20 s ahead, one due 2 s ahead (F), three due 18 s ahead, then 20,000 creates
/// due an hour ahead; F fires; the three are cancelled, paused and updated; once a
/// checkpoint on the state topic covers F's fire, Redis is emptied (FLUSHALL). The 200
/// short timers are deferred (never written to the state topic), so the last checkpoint's
/// command offset stays before them and the rebuild replays F's create; F's fire was
/// acknowledged and the checkpoint's fire watermark covers it: it must not fire again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_acknowledged_before_redis_was_emptied_is_not_replayed() {
    let w = World::start("flushall", false);
    let env = TestEnv::on(&w.servers(), "flushall", 8, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let t0 = now_ms();
    let mut expected: Expected = spread("later", 200, t0 + 20_000, 0);
    let three = spread("three", 3, t0 + 18_000, 0);
    let mut first = common::checker::commands(&expected);
    first.push(once_at("f", t0 + 2_000, "x"));
    first.extend(common::checker::commands(&three));
    env.send_many(&first).await;
    let far = common::checker::commands(&spread("far", 20_000, t0 + 3_600_000, 60_000));
    env.send_many(&far).await;
    let fired_f = got.fires_until("f", MIN).await;
    let f_at = fired_f.last().unwrap().fired_ms;
    let mut ids: Vec<&String> = three.keys().collect();
    ids.sort();
    let updated_due = t0 + 24_000;
    let mut update = once_at(ids[2], updated_due, "x");
    update.kind = CommandKind::Update;
    update.request_id = format!("update-{}", ids[2]);
    let changes = [
        lifecycle(CommandKind::Cancel, ids[0], "cancel"),
        lifecycle(CommandKind::Pause, ids[1], "pause"),
        update,
    ];
    env.send_many(&changes).await;
    // Every command answered: the 204 short ones, the 20,000 and the three changes.
    let results = got.results(204 + 20_000 + 3, 2 * MIN).await;
    let answered = now_ms();
    let refused: Vec<_> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Accepted)
        .collect();
    assert!(refused.is_empty(), "not accepted: {:?}", &refused[..1]);
    // A checkpoint written after F's fire was acknowledged (one a second), before the
    // three and the 200 are due.
    let limit = Duration::from_millis((t0 + 17_000 - now_ms()).max(0) as u64);
    env.checkpointed_through(t0 + 2_000, limit).await;
    let flushed = now_ms();
    println!(
        "F fired at +{} ms, the 20,207 commands were answered by +{} ms, the flush at +{} ms",
        f_at - t0,
        answered - t0,
        flushed - t0
    );
    flushall(&w.redis.url());
    expected.insert(ids[2].clone(), updated_due);
    let mut fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    fires.extend(fired_f);
    expected.insert("f".into(), t0 + 2_000);
    let again = fires.iter().filter(|f| f.timer_id == "f").count();
    assert_eq!(again, 1, "F fired {again} times");
    for id in &ids[..2] {
        assert!(
            fires.iter().all(|f| &f.timer_id != *id),
            "{id} fired, although it was cancelled or paused"
        );
    }
    check(
        "redis emptied after a fire was acknowledged",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 10_000,
        },
    );
    svc.stop().await;
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

/// A one-shot timer paused before its due, resumed once the checkpoints' fire watermark
/// has passed that due, and Redis emptied right after the resume was answered: the
/// rebuild restores the timer paused (or, from a later checkpoint, pending or in flight)
/// and replays the resume. Its fire is not lost (the suspicion: restored fired by the
/// watermark while the replayed resume counts as a duplicate), and nothing fires before
/// the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_past_due_timer_fires_after_redis_is_emptied() {
    let w = World::start("resume", false);
    let env = TestEnv::on(&w.servers(), "resume", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let t0 = now_ms();
    env.send(&once_at("t", t0 + 1_000, "x"), None).await;
    env.send(&lifecycle(CommandKind::Pause, "t", "pause"), None)
        .await;
    let paused = got.results(2, MIN).await;
    assert!(
        paused.iter().all(|r| r.outcome == Outcome::Accepted),
        "{paused:?}"
    );
    // Checkpoints (one a second) move the watermark past the paused timer's due.
    sleep_until(t0 + 4_000).await;
    let resumed_at = now_ms();
    env.send(&lifecycle(CommandKind::Resume, "t", "resume"), None)
        .await;
    let r = got.results(1, MIN).await.remove(0);
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    flushall(&w.redis.url());
    env.send(&once_at("sentinel", now_ms() + 3_000, "x"), None)
        .await;
    let fires = got.fires_until("sentinel", MIN).await;
    let t: Vec<_> = fires.iter().filter(|f| f.timer_id == "t").collect();
    assert!(!t.is_empty(), "the resumed timer's fire was lost");
    assert!(t.len() <= 2, "fired {} times", t.len());
    assert!(
        t.iter().all(|f| f.fired_ms >= resumed_at),
        "fired before its resume: {t:?}"
    );
    svc.stop().await;
}

/// Redis back from an older snapshot across an owner change (a host reboot): 300 timers
/// created, Redis saves them (SAVE), all 300 fire, the instance stops (SIGTERM), Redis
/// restarts from that RDB and a new instance starts. Redis holds an older checkpoint than
/// the state topic's last: the partition is rebuilt, and no timer fires again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_back_from_an_older_snapshot_across_an_owner_change() {
    let mut w = World::start("rdb", false);
    let env = TestEnv::on(&w.servers(), "rdb", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("r", 300, now_ms() + 3_000, 2_000);
    common::checker::load(&env, &mut got, &expected).await;
    let mut con = connect(&w.redis.url());
    let _: () = redis::cmd("SAVE").query(&mut con).unwrap();
    let fires = gather(&mut got, &expected, MIN, Duration::from_millis(100)).await;
    // Checkpoints record the fires (one a second), then the owner leaves.
    sleep_until(fires.iter().map(|f| f.fired_ms).max().unwrap() + 3_000).await;
    svc.stop().await;
    w.redis.kill();
    w.redis.restart();
    let svc = env.start().await;
    // A timer due after every one of the 300: once it fired, the trigger has claimed
    // everything due before it.
    env.send(&once_at("sentinel", now_ms() + 1_000, "x"), None)
        .await;
    let after = got.fires_until("sentinel", MIN).await;
    let again: Vec<_> = after.iter().filter(|f| f.timer_id != "sentinel").collect();
    assert!(
        again.is_empty(),
        "{} of 300 timers fired again after Redis came back from the snapshot, e.g. {:?}",
        again.len(),
        again.first().map(|f| &f.timer_id)
    );
    svc.stop().await;
}

/// The intake after Redis is emptied and rebuilt, then killed and restarted from its AOF
/// while creates stream in and the rebuilt partitions replay (one instance, 8 partitions,
/// a child process: run it on a release build with `KTIMER_TEST_BIN`): every command is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_intake_answers_after_a_rebuild_then_an_aof_restart_under_creates() {
    let mut w = World::start("aofrebuild", true);
    let env = TestEnv::on(&w.servers(), "aofrebuild", 8, &[]).await;
    let mut got = env.collect();
    let svc = ChildProcess::spawn(&env, &[], &w.dir.join("a.log"));
    svc.ready(MIN).await;
    let t0 = now_ms();
    let mut first = common::checker::commands(&spread("soon", 200, t0 + 10_000, 0));
    first.extend(common::checker::commands(&spread(
        "far",
        20_000,
        t0 + 3_600_000,
        60_000,
    )));
    env.send_many(&first).await;
    got.results(first.len(), 2 * MIN).await;
    flushall(&w.redis.url());
    let expected = spread("stream", 3_000, now_ms() + 3_600_000, 60_000);
    let cmds = common::checker::commands(&expected);
    let producer = env.producer.clone();
    let topic = env.args.kafka.commands_topic.clone();
    let streaming = tokio::spawn(async move {
        let codec = ktimer::codec::Codec::new(None).unwrap();
        for chunk in cmds.chunks(100) {
            for c in chunk {
                let bytes = codec.encode_command(c, &topic).await.unwrap();
                let rec = rdkafka::producer::FutureRecord::<str, [u8]>::to(&topic)
                    .key(&c.timer_id)
                    .payload(&bytes);
                producer
                    .send(rec, Duration::from_secs(30))
                    .await
                    .map_err(|(e, _)| e)
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // While the partitions are rebuilt and their commands replayed: once the first
    // command after the flush is answered (a replayed one, answered again, or a new one).
    let mut results = got.results(1, MIN).await;
    while let Ok(r) = got.results.try_recv() {
        results.push(r);
    }
    w.redis.kill();
    w.redis.restart();
    println!(
        "redis restarted from its AOF after {} results",
        results.len()
    );
    streaming.await.unwrap();
    common::checker::all_accepted(&mut got, results, &expected, MIN).await;
    let mut svc = svc;
    let (st, _) = svc.terminate();
    assert!(st.success(), "ktimer exited with {st}");
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

/// `hash-max-listpack-value`, raised with CONFIG SET at start (`--redis-tune`), is lost when
/// Redis restarts without it in its configuration: pending timers then take about twice
/// the memory. A running instance raises it again within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listpack_setting_is_raised_again_after_a_redis_restart() {
    let mut w = World::start("listpack", false);
    let env = TestEnv::on(&w.servers(), "listpack", 1, &[]).await;
    let svc = env.start().await;
    let setting = |url: &str| -> u64 {
        let mut con = connect(url);
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("hash-max-listpack-value")
            .query(&mut con)
            .unwrap();
        pair[1].parse().unwrap()
    };
    assert_eq!(setting(&w.redis.url()), 1024, "raised at start");
    w.redis.kill();
    w.redis.restart();
    assert!(
        setting(&w.redis.url()) < 1024,
        "a restarted Redis has its default"
    );
    let url = w.redis.url();
    eventually(
        Duration::from_secs(30),
        "hash-max-listpack-value raised again",
        || {
            let now = setting(&url);
            (now < 1024).then(|| format!("still {now}"))
        },
    )
    .await;
    svc.stop().await;
}
