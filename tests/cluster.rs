//! ktimer on a real Redis Cluster (Debian's redis-server, `redis-cli --cluster create`):
//! a primary killed while timers fire fails over to its replica, and a partition's slot
//! moved to another primary while timers fire (ASK, MOVED, TRYAGAIN). Nothing lost,
//! nothing early. The end-to-end tests also run on a cluster: `scripts/test.sh` runs
//! `tests/e2e.rs` and `tests/cron.rs` again with `KTIMER_TEST_REDIS_CLUSTER=1`.

mod common;

use common::checker::{check, due_near, gather, load, sleep_until, spread, Bounds};
use common::cluster::Cluster;
use common::{servers, Servers, TestEnv};
use ktimer::now_ms;
use ktimer::store::Keys;
use std::time::{Duration, Instant};

const MIN: Duration = Duration::from_secs(60);

fn dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ktimer-cluster-{}-{name}", std::process::id()))
}

/// The key of `partition`'s epoch (every key of the partition is in its slot).
fn partition_key(env: &TestEnv, partition: i32) -> String {
    Keys::new(
        &env.args.redis_prefix,
        &env.args.kafka.commands_topic,
        partition,
    )
    .epoch()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_while_timers_fire_fails_over_and_nothing_is_lost() {
    let mut cluster = Cluster::start(&dir("failover"), 3, 1, 1_000);
    let s = Servers {
        redis_url: cluster.url(),
        brokers: servers().brokers.clone(),
    };
    let env = TestEnv::on(&s, "failover", 4, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("f", 2_000, now_ms() + 3_000, 10_000);
    load(&env, &mut got, &expected).await;
    sleep_until(expected.values().min().unwrap() + 3_000).await;

    let key = partition_key(&env, 0);
    let victim = cluster.primary_of(&key);
    let fault = now_ms();
    let (cluster, failover_ms) = tokio::task::spawn_blocking(move || {
        cluster.kill(victim);
        let started = Instant::now();
        cluster.wait_ok(Duration::from_secs(30));
        (cluster, started.elapsed().as_millis() as i64)
    })
    .await
    .unwrap();
    let promoted = cluster.primary_of(&key);
    assert_ne!(
        promoted, victim,
        "partition 0's slot is served by a new primary"
    );

    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(3)).await;
    // Replication is asynchronous: the promoted replica may miss the last acknowledgements
    // (those fires go again) and the last commands (replayed). Fires due while the slot had
    // no primary are late by about the failover.
    let r = check(
        "cluster: primary killed, replica promoted",
        &expected,
        &fires,
        &Bounds {
            duplicates: due_near(&expected, fault, 2_500),
            lateness_ms: failover_ms + 5_000,
        },
    );
    println!("failover took {failover_ms} ms; {r:?}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_slot_moved_while_timers_fire_loses_nothing() {
    let cluster = Cluster::start(&dir("reshard"), 3, 0, 2_000);
    let s = Servers {
        redis_url: cluster.url(),
        brokers: servers().brokers.clone(),
    };
    let env = TestEnv::on(&s, "reshard", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    // Timers due over 12 s, and more far in the future so the slot holds many keys.
    let expected = spread("r", 3_000, now_ms() + 3_000, 12_000);
    load(&env, &mut got, &expected).await;
    sleep_until(expected.values().min().unwrap() + 2_000).await;

    let key = partition_key(&env, 0);
    let slot = cluster.slot_of(&key);
    let from = cluster.primary_of_slot(slot);
    let to = cluster
        .primaries()
        .into_iter()
        .find(|&p| p != from)
        .expect("another primary");
    // Move the slot slowly (batches of 50 keys, 20 ms apart) while its timers fire.
    let (cluster, n) = tokio::task::spawn_blocking(move || {
        let n = cluster.move_slot(slot, to, 50, Duration::from_millis(20));
        (cluster, n)
    })
    .await
    .unwrap();
    assert!(n > 100, "the slot held the partition's keys ({n} moved)");
    assert_eq!(cluster.primary_of_slot(slot), to);

    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(3)).await;
    let r = check(
        "cluster: partition slot resharded",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 2_000,
        },
    );
    println!("moved {n} keys of slot {slot}; {r:?}");
    svc.stop().await;
}
