//! Upgrading across store layouts: an instance that takes a partition whose keys were
//! written by an older layout rebuilds it from the state topic instead of misreading them.

mod common;

use common::checker::{check, gather, load, spread, Bounds};
use common::world::World;
use common::TestEnv;
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// An upgrade from the layout before version 2 (one hash per timer): an instance that
/// takes a partition whose keys carry no layout version wipes them and rebuilds the
/// partition from the state topic, instead of reading hashes as packed strings (WRONGTYPE
/// on every claim, and nothing fires).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_an_older_layout_are_rebuilt_on_takeover() {
    let w = World::start("upgrade", false);
    let env = TestEnv::on(&w.servers(), "upgrade", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let timers = spread("old", 400, now_ms() + 15_000, 3_000);
    load(&env, &mut got, &timers).await;
    let store = ktimer::store::Store::connect(
        &w.redis.url(),
        &env.args.redis_prefix,
        &env.args.kafka.commands_topic,
        60_000,
    )
    .await
    .unwrap();
    // Every timer written to the state topic (as an older version would have, too).
    let deadline = now_ms() + 30_000;
    while store.unwritten(0).await.unwrap() + store.unwritten(1).await.unwrap() > 0 {
        assert!(now_ms() < deadline, "checkpoints did not catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    svc.stop().await;
    // Redis as the older layout left it: a hash per timer, no layout version.
    let mut redis = redis::Client::open(w.redis.url()).unwrap();
    for p in 0..2 {
        let k = store.keys(p);
        let _: () = redis::cmd("DEL").arg(k.format()).query(&mut redis).unwrap();
    }
    for id in timers.keys() {
        let p = env.args.kafka.partitioner.partition(id.as_bytes(), 2);
        let key = store.keys(p).timer(id);
        let _: () = redis::cmd("DEL").arg(&key).query(&mut redis).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&key)
            .arg("v")
            .arg(1)
            .arg("st")
            .arg("scheduled")
            .query(&mut redis)
            .unwrap();
    }
    let svc = env.start().await;
    let fires = gather(&mut got, &timers, MIN, Duration::from_secs(2)).await;
    check(
        "keys of an older layout",
        &timers,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 1_000,
        },
    );
    svc.stop().await;
}
