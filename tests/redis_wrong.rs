//! Redis that comes back wrong: emptied, or from an older snapshot. Each scenario runs on
//! servers of its own and checks what the delivery guarantee promises: nothing lost, nothing
//! early, and no fire acknowledged before the last checkpoint fires again. (Redis that
//! evicts, fills up or cannot persist: `redis_full.rs`.)

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
    // A checkpoint of F's partition written after F's fire was acknowledged (one a
    // second), before the three and the 200 are due.
    let limit = Duration::from_millis((t0 + 17_000 - now_ms()).max(0) as u64);
    let f_partition = env.args.kafka.partitioner.partition(b"f", 8);
    env.checkpointed_through(&[f_partition], t0 + 2_000, limit)
        .await;
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
