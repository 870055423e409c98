//! Redis that comes back wrong: emptied, from an older snapshot, or evicting keys. Each
//! scenario runs on servers of its own and checks what the delivery guarantee promises:
//! nothing lost, nothing early, and no fire acknowledged before the last checkpoint fires
//! again.

mod common;

use common::checker::{check, gather, sleep_until, spread, Bounds, Expected};
use common::world::World;
use common::{lifecycle, once_at, TestEnv};
use ktimer::command::{CommandKind, Outcome};
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

fn flushall(url: &str) {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
}

/// A fired timer fires again after Redis is emptied? The order of the report: 200 one-shot
/// timers due 10 s ahead, one due 2 s ahead (F), three due 8 s ahead, then 20,000 creates
/// due an hour ahead; F fires; the three are cancelled, paused and updated; seconds later
/// Redis is emptied (FLUSHALL). The 200 short timers are deferred (never written to the
/// state topic), so the last checkpoint's command offset stays before them and the
/// rebuild replays F's create; F's fire was acknowledged and the checkpoint's fire
/// watermark covers it: it must not fire again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_acknowledged_before_redis_was_emptied_is_not_replayed() {
    let w = World::start("flushall", false);
    let env = TestEnv::on(&w.servers(), "flushall", 8, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let t0 = now_ms();
    let mut expected: Expected = spread("later", 200, t0 + 10_000, 0);
    let three = spread("three", 3, t0 + 8_000, 0);
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
    let updated_due = t0 + 14_000;
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
    let refused: Vec<_> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Accepted)
        .collect();
    assert!(refused.is_empty(), "not accepted: {:?}", &refused[..1]);
    // Several checkpoints after F's fire was acknowledged, before the 200 are due.
    sleep_until(f_at + 4_000).await;
    let flushed = now_ms();
    assert!(
        flushed < t0 + 9_500,
        "the intake took too long: the flush at +{} ms comes after the 200 timers' fires",
        flushed - t0
    );
    flushall(&w.redis.url());
    expected.insert(ids[2].clone(), updated_due);
    expected.insert("f".into(), t0 + 2_000);
    let mut fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    fires.extend(fired_f);
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
