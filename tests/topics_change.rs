//! Topics that change under a running instance: one partition's trouble never stops
//! the others, and the operator has a way out.

mod common;

use common::checker::{check, gather, spread, Bounds, Expected};
use common::world::World;
use common::TestEnv;
use ktimer::now_ms;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// The timers of `all` whose key goes to a partition other than `p` of `n`.
fn not_in(all: &Expected, p: i32, n: i32) -> Expected {
    let by = ktimer::partitioner::Partitioner::Murmur2;
    all.iter()
        .filter(|(id, _)| by.partition(id.as_bytes(), n) != p)
        .map(|(id, due)| (id.clone(), *due))
        .collect()
}

/// The state topic is deleted, then Redis loses partition 0 (its keys deleted): that
/// partition cannot be rebuilt. The three others go on applying and firing (the rebuild
/// was retried for ever inside the intake, which answered nothing more); partition 0
/// shows as unavailable, and once the state topic exists again (`ktimer topics apply`)
/// it is rebuilt from its commands and its timers fire too.
///
/// Tansu creates a deleted topic again on the next produce to it (a checkpoint of
/// another partition, once its fires were acknowledged), so the commands are sent only
/// after partition 0 was found unavailable (nothing is produced to the state topic
/// while the partitions are idle); otherwise partition 0 might be rebuilt at once from
/// an empty topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_cannot_be_rebuilt_holds_only_itself() {
    let w = World::start("nostate", false);
    let env = TestEnv::on(&w.servers(), "nostate", 4, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", w.servers().brokers)
        .create()
        .unwrap();
    let state = env.args.kafka.state_topic.clone();
    let gone = admin
        .delete_topics(&[&state], &AdminOptions::new())
        .await
        .unwrap();
    assert!(gone.iter().all(|r| r.is_ok()), "{gone:?}");
    let mut con = redis::Client::open(w.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let pattern = format!(
        "{}:{{{}:0}}:*",
        env.args.redis_prefix, env.args.kafka.commands_topic
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut con).unwrap();
    assert!(!keys.is_empty(), "no keys of partition 0 ({pattern})");
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut con).unwrap();
    let deadline = tokio::time::Instant::now() + MIN;
    while svc.metric("ktimer_partitions_unavailable") != Some(1.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "partition 0 never reported unavailable"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = spread("n", 40, now_ms() + 6_000, 2_000);
    let others = not_in(&all, 0, 4);
    assert!(others.len() < all.len());
    env.send_many(&common::checker::commands(&all)).await;
    let rs = got.results(others.len(), MIN).await;
    assert!(rs.iter().all(|r| r.partition != 0), "partition 0 answered");
    let fires = gather(&mut got, &others, MIN, Duration::from_millis(500)).await;
    check(
        "partition 0 cannot be rebuilt",
        &others,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 1_000,
        },
    );
    let unavailable = svc.metric("ktimer_partitions_unavailable");
    assert_eq!(unavailable, Some(1.0), "partition 0 no longer reported");
    // The way out: the state topic again; partition 0 is rebuilt from its commands.
    let spec = ktimer::topics::TopicSpec {
        role: "state".into(),
        name: state.clone(),
        partitions: 4,
        replication_factor: 1,
        configs: Default::default(),
    };
    ktimer::topics::apply(&ktimer::kafka::client(&env.args.kafka), &[spec])
        .await
        .expect("state topic again");
    let zero: Expected = all
        .iter()
        .filter(|(id, _)| !others.contains_key(*id))
        .map(|(id, due)| (id.clone(), *due))
        .collect();
    let late = gather(&mut got, &zero, MIN, Duration::from_millis(500)).await;
    check(
        "partition 0 rebuilt once the state topic is back",
        &zero,
        &late,
        &Bounds {
            duplicates: 0,
            lateness_ms: 30_000,
        },
    );
    svc.stop().await;
}
