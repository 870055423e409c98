//! Redis is a cache of Kafka: emptied, or back from older data, it is rebuilt from the
//! state topic and the commands after the last checkpoint, with every timer in its
//! current state. Each scenario owns its servers (`common::world`).

mod common;

use common::checker::{check, commands, due_near, gather, sleep_until, spread, Bounds, Expected};
use common::world::World;
use common::{cancel, cron, lifecycle, once_at, Fired, TestEnv};
use ktimer::command::{CommandKind, MisfirePolicy, Outcome, TimerCommand};
use ktimer::now_ms;
use std::collections::HashMap;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);
/// Fires acknowledged this long before Redis lost its data may fire again: one
/// checkpoint interval (1 s) plus the time a checkpoint takes to be written.
const CHECKPOINT_BOUND_MS: i64 = 2_500;

/// Whether a command took effect: accepted, or found applied already (an apply retried
/// after Redis timed out, or replayed after a loss, answers DUPLICATE).
fn applied(o: Outcome) -> bool {
    matches!(o, Outcome::Accepted | Outcome::Duplicate)
}

/// Sends `cmds` and waits until each was answered and took effect.
async fn send_expect(env: &TestEnv, got: &mut common::Collected, cmds: &[TimerCommand]) {
    env.send_many(cmds).await;
    let rs = got.results(cmds.len(), MIN).await;
    let bad: Vec<_> = rs.iter().filter(|r| !applied(r.outcome)).collect();
    assert!(
        bad.is_empty(),
        "not accepted: {:?}",
        &bad[..bad.len().min(3)]
    );
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn update_at(id: &str, at_ms: i64) -> TimerCommand {
    TimerCommand {
        at_ms: Some(at_ms),
        ..lifecycle(CommandKind::Update, id, "update")
    }
}

/// Fires per timer id.
fn by_timer(fires: &[Fired]) -> HashMap<&str, Vec<&Fired>> {
    let mut m: HashMap<&str, Vec<&Fired>> = HashMap::new();
    for f in fires {
        m.entry(f.timer_id.as_str()).or_default().push(f);
    }
    m
}

/// Redis emptied (FLUSHALL) while timers exist in every state, with a commands log of
/// 15,000 commands before them: after the rebuild nothing cancelled or paused fires,
/// updated timers fire on their new schedule only, fired ones fire again only within the
/// checkpoint bound, a FIRE_ALL cron does not re-plan its past, a completed cron stays
/// completed, nothing is lost and nothing is early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_emptied_restores_every_timer_in_its_current_state() {
    let w = World::start("rebuild", false);
    let env = TestEnv::on(&w.servers(), "rebuild", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    // The long log: 10,000 timers an hour away, half of them cancelled.
    let hour = now_ms() + 3_600_000;
    let filler = ids("filler", 10_000);
    let creates: Vec<_> = filler.iter().map(|id| once_at(id, hour, "f")).collect();
    send_expect(&env, &mut got, &creates).await;
    let cancels: Vec<_> = filler.iter().step_by(2).map(|id| cancel(id)).collect();
    send_expect(&env, &mut got, &cancels).await;

    let t0 = now_ms();
    let flush = t0 + 9_000;
    let mut every = cron("every", "* * * * * *", "e");
    every.misfire = Some(MisfirePolicy::FireAll);
    let mut maxed = cron("maxed", "* * * * * *", "m");
    maxed.max_fires = Some(2);
    let early = ids("fired", 200);
    let later = ids("later", 200);
    let (cancelled, paused, updated) =
        (ids("cancelled", 50), ids("paused", 50), ids("updated", 50));
    let mut cmds = vec![every, maxed, cron("cron-paused", "* * * * * *", "p")];
    for (i, id) in early.iter().enumerate() {
        cmds.push(once_at(id, t0 + 1_000 + 30 * i as i64, "x"));
    }
    for (i, id) in later.iter().enumerate() {
        cmds.push(once_at(id, flush + 3_000 + 15 * i as i64, "x"));
    }
    for id in cancelled.iter().chain(&paused).chain(&updated) {
        cmds.push(once_at(id, flush + 3_000, "x"));
    }
    send_expect(&env, &mut got, &cmds).await;
    let mut changes = vec![lifecycle(CommandKind::Pause, "cron-paused", "pause")];
    changes.extend(cancelled.iter().map(|id| cancel(id)));
    changes.extend(
        paused
            .iter()
            .map(|id| lifecycle(CommandKind::Pause, id, "pause")),
    );
    changes.extend(updated.iter().map(|id| update_at(id, flush + 8_000)));
    send_expect(&env, &mut got, &changes).await;
    let paused_at = now_ms();

    sleep_until(flush).await;
    w.redis.flushall().await;
    let flushed = now_ms();
    // Every `later` timer (due up to flush + 6 s) and the updated ones (flush + 8 s).
    let mut fires = Vec::new();
    while now_ms() < flush + 14_000 {
        if let Ok(Some(f)) =
            tokio::time::timeout(Duration::from_millis(200), got.fired.recv()).await
        {
            fires.push(f);
        }
    }
    let after: Vec<Fired> = fires
        .iter()
        .filter(|f| f.fired_ms > flushed)
        .cloned()
        .collect();
    eprintln!("{} fires, {} after the flush", fires.len(), after.len());
    let m = by_timer(&fires);
    let count = |id: &str| m.get(id).map_or(0, Vec::len);
    for f in &fires {
        assert!(f.fired_ms >= f.due_ms, "early: {f:?}");
    }
    for id in cancelled.iter().chain(&paused) {
        assert_eq!(count(id), 0, "{id} fired: {:?}", m.get(id.as_str()));
    }
    for id in &later {
        assert_eq!(count(id), 1, "{id}: {:?}", m.get(id.as_str()));
    }
    for id in &updated {
        let fs = m.get(id.as_str()).expect("updated timer fired");
        assert!(fs.iter().all(|f| f.due_ms == flush + 8_000), "{id}: {fs:?}");
    }
    // One-shots that fired before the flush fire again only within the checkpoint bound.
    let again = early.iter().filter(|id| count(id) > 1).count();
    let in_bound = early
        .iter()
        .enumerate()
        .filter(|(i, _)| t0 + 1_000 + 30 * *i as i64 > flushed - CHECKPOINT_BOUND_MS)
        .count();
    assert!(early.iter().all(|id| count(id) >= 1), "a fired timer lost");
    assert!(again <= in_bound, "{again} fired twice, bound {in_bound}");
    // The FIRE_ALL cron: every second fired, none before the bound twice.
    let every = m.get("every").expect("the cron fired");
    let mut per_due: HashMap<i64, usize> = HashMap::new();
    every
        .iter()
        .for_each(|f| *per_due.entry(f.due_ms).or_default() += 1);
    let twice: Vec<_> = per_due
        .iter()
        .filter(|(d, n)| **n > 1 && **d < flushed - CHECKPOINT_BOUND_MS)
        .collect();
    assert!(twice.is_empty(), "FIRE_ALL re-planned its past: {twice:?}");
    let first = *per_due.keys().min().unwrap();
    let missing: Vec<i64> = (0..)
        .map(|k| first + 1_000 * k)
        .take_while(|d| *d < flush + 12_000)
        .filter(|d| !per_due.contains_key(d))
        .collect();
    assert!(missing.is_empty(), "cron occurrences lost: {missing:?}");
    assert_eq!(count("maxed"), 2, "{:?}", m.get("maxed"));
    let late_paused = m.get("cron-paused").map_or(0, |fs| {
        fs.iter().filter(|f| f.fired_ms > paused_at + 50).count()
    });
    assert_eq!(late_paused, 0, "a paused cron fired");
    svc.stop().await;
}

/// Sends the creates of `expected` in chunks of 100 every 100 ms (a stream), calling
/// `at(chunk)` before each chunk; returns the timers accepted, after every command was
/// answered.
async fn stream(
    env: &TestEnv,
    got: &mut common::Collected,
    expected: &Expected,
    mut at: impl FnMut(usize),
) -> Expected {
    let cmds = commands(expected);
    for (i, chunk) in cmds.chunks(100).enumerate() {
        at(i);
        env.send_many(chunk).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Results of earlier commands replayed after a loss may come too: only these count.
    let mut answered: HashMap<String, Outcome> = HashMap::new();
    let deadline = tokio::time::Instant::now() + MIN * 2;
    while answered.len() < expected.len() {
        let r = tokio::time::timeout_at(deadline, got.results.recv()).await;
        let Ok(Some(r)) = r else {
            panic!(
                "only {} of {} commands answered",
                answered.len(),
                expected.len()
            );
        };
        if let Some(id) = r.timer_id.filter(|id| expected.contains_key(id)) {
            answered.entry(id).or_insert(r.outcome);
        }
    }
    answered
        .into_iter()
        .filter(|(_, o)| applied(*o))
        .map(|(id, _)| {
            let due = expected[&id];
            (id, due)
        })
        .collect()
}

/// Redis (AOF, fsync every second) SIGKILLed under a stream of creates and restarted
/// from its AOF, after `flushed_before`: an earlier FLUSHALL and rebuild. Every command is
/// answered and every accepted timer fires.
async fn killed_under_creates(name: &str, flushed_before: bool) {
    let mut w = World::start(name, true);
    let env = TestEnv::on(&w.servers(), name, 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    if flushed_before {
        // A long log (the replay takes seconds), then the flush.
        let log = spread("log", 20_000, now_ms() + 3_600_000, 2_000);
        send_expect(&env, &mut got, &commands(&log)).await;
        let mut redis = redis::Client::open(w.redis.url()).unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut redis).unwrap();
        // The stream (and the kill, a second into it) meet the replay under way.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let expected = spread("s", 3_000, now_ms() + 8_000, 4_000);
    let (mut fault, mut back) = (0, 0);
    let accepted = stream(&env, &mut got, &expected, |chunk| {
        if chunk == 10 {
            fault = now_ms();
            w.redis.kill();
        }
        if chunk == 15 {
            w.redis.restart();
            back = now_ms();
        }
    })
    .await;
    assert!(
        accepted.len() >= expected.len() * 9 / 10,
        "only {} accepted",
        accepted.len()
    );
    let fires = gather(&mut got, &accepted, MIN * 2, Duration::from_secs(2)).await;
    check(
        name,
        &accepted,
        &fires,
        &Bounds {
            duplicates: due_near(&accepted, fault, 2_500),
            lateness_ms: (back - fault).max(0) + 10_000,
        },
    );
    svc.stop().await;
}

/// Redis emptied and rebuilt, then killed and restarted from its AOF under a stream of
/// creates (once: none of the 3,000 following commands was answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_emptied_then_restarted_from_its_aof_under_creates() {
    killed_under_creates("aof-after-flush", true).await;
}

/// Partial loss: Redis SIGKILLed under a steady stream of creates with `appendfsync
/// everysec` loses up to a second of writes, applied commands among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_creates_loses_the_last_second() {
    killed_under_creates("everysec", false).await;
}

/// Partial loss, deterministic: Redis comes back from a snapshot taken before the last
/// 500 commands were applied (and several checkpoints ago), and before 300 timers fired.
/// Every accepted timer fires, and those that fired before do not fire again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_back_from_an_older_snapshot_loses_nothing() {
    let mut w = World::start("snapshot", false);
    let env = TestEnv::on(&w.servers(), "snapshot", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let before = spread("before", 1_000, now_ms() + 12_000, 3_000);
    let early = spread("early", 300, now_ms() + 1_000, 500);
    send_expect(&env, &mut got, &commands(&before)).await;
    send_expect(&env, &mut got, &commands(&early)).await;
    let mut redis = redis::Client::open(w.redis.url()).unwrap();
    let _: () = redis::cmd("SAVE").query(&mut redis).unwrap();
    // The last writes: 500 more timers, then a few checkpoints.
    let after = spread("after", 500, now_ms() + 12_000, 3_000);
    send_expect(&env, &mut got, &commands(&after)).await;
    // The early ones fired long before the loss (beyond the checkpoint bound).
    tokio::time::sleep(Duration::from_secs(6)).await;
    w.redis.kill();
    w.redis.restart();
    let back = now_ms();
    let expected: Expected = before.into_iter().chain(after).chain(early).collect();
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "redis back from an older snapshot",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: (back + 5_000 - expected.values().min().unwrap()).max(1_000),
        },
    );
    svc.stop().await;
}

/// Retention: the commands are gone from the commands topic long before the timers are
/// due, and Redis is emptied. Every timer still fires, on time.
///
/// Tansu's in-memory storage implements neither retention nor DeleteRecords (a `todo!()`
/// that kills the broker), and deleting the topic under a consumer crashes librdkafka
/// 2.12's metadata cache. So the instance is stopped and started again on a new, empty
/// commands topic with the same state topic: from ktimer's side that is a commands topic
/// whose every record was deleted (and its Redis keys, tagged by topic, are empty too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_deleted_by_retention_then_redis_emptied() {
    let w = World::start("retention", false);
    let env = TestEnv::on(&w.servers(), "retention", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("r", 1_000, now_ms() + 15_000, 3_000);
    send_expect(&env, &mut got, &commands(&expected)).await;
    // A checkpoint covers them (written every second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    svc.stop().await;
    let mut redis = redis::Client::open(w.redis.url()).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut redis).unwrap();
    let mut args = env.args.clone();
    args.kafka.commands_topic = format!("{}.commands-after-retention", env.name);
    let spec = ktimer::topics::TopicSpec {
        role: "test".into(),
        name: args.kafka.commands_topic.clone(),
        partitions: 2,
        replication_factor: 1,
        configs: Default::default(),
    };
    ktimer::topics::apply(&ktimer::kafka::client(&args.kafka), &[spec])
        .await
        .expect("create the new commands topic");
    let after = TestEnv {
        args,
        name: env.name.clone(),
        argv: env.argv.clone(),
        producer: env.producer.clone(),
    };
    let svc = after.start().await;
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "commands deleted by retention, then redis emptied",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 1_000,
        },
    );
    svc.stop().await;
}
