//! A shared service (issue 12) against a real broker and Redis: no command stalls a
//! partition or reaches across applications.

mod common;

use common::{cancel, once_at, TestEnv};
use ktimer::command::{DeliveryMode, Outcome, TimerCommand};
use ktimer::now_ms;
use ktimer::partitioner::Partitioner;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_record_key_gets_a_short_result_and_the_partition_moves_on() {
    let env = TestEnv::new("hugekey", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    // A short timer id under a 600 KB key: answering with the key, the id and the reason
    // in full made a result the broker refuses, retried for ever.
    let key = "k".repeat(600_000);
    let cmd = cancel("short");
    let bytes = ktimer::codec::Codec::new(None)
        .unwrap()
        .encode_command(&cmd, "x")
        .await
        .unwrap();
    env.send_raw(Some(&key), &bytes, None).await;
    env.send(&once_at("after", now_ms() + 200, "p"), None).await;
    let r = got.results(2, WAIT).await;
    assert_eq!(r[0].outcome, Outcome::Rejected, "{:?}", r[0].reason);
    let reason = r[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("differs from timer_id"), "{reason}");
    assert!(
        reason.len() < 1_000,
        "the echoed key is cut: {}",
        reason.len()
    );
    assert_eq!(r[1].outcome, Outcome::Accepted);
    let f = got.fires(1, WAIT).await;
    assert_eq!(f[0].timer_id, "after");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_application_cannot_touch_a_timer_nor_write_to_ktimers_topics() {
    let env = TestEnv::new("owner", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() + 1_500;
    env.send(&once_at("mine", due, "p"), None).await;
    let mut theirs = cancel("mine");
    theirs.application = "intruder".into();
    env.send(&theirs, None).await;
    let mut forged = once_at("forged", now_ms() + 100, "fake result");
    let cb = forged.callback.as_mut().unwrap();
    cb.topic = Some(env.args.kafka.results_topic.clone());
    cb.mode = DeliveryMode::Raw;
    env.send(&forged, None).await;
    let r = got.results(3, WAIT).await;
    assert_eq!(r[0].outcome, Outcome::Accepted);
    assert_eq!(r[1].outcome, Outcome::Rejected);
    assert_eq!(
        r[1].reason.as_deref(),
        Some("timer belongs to another application")
    );
    assert_eq!(r[2].outcome, Outcome::Rejected);
    assert!(
        r[2].reason
            .as_deref()
            .unwrap_or("")
            .contains("ktimer's own"),
        "{:?}",
        r[2].reason
    );
    let f = got.fires(1, WAIT).await;
    assert_eq!(f[0].timer_id, "mine", "the owner's timer still fires");
    assert!(f[0].received_ms >= due);
    svc.stop().await;
}

/// A producer of `env`'s commands hashing keys with librdkafka's `partitioner`.
fn producer(partitioner: &str) -> rdkafka::producer::FutureProducer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &common::servers().brokers)
        .set("partitioner", partitioner)
        .create()
        .expect("producer")
}

async fn produce(env: &TestEnv, p: &rdkafka::producer::FutureProducer, cmd: &TimerCommand) {
    let bytes = ktimer::codec::Codec::new(None)
        .unwrap()
        .encode_command(cmd, "x")
        .await
        .unwrap();
    let rec = rdkafka::producer::FutureRecord::to(&env.args.kafka.commands_topic)
        .key(&cmd.timer_id)
        .payload(&bytes);
    p.send(rec, Duration::from_secs(10)).await.expect("produce");
}

/// A timer id whose murmur2 and CRC32 partitions differ among `n`.
fn split_key(n: i32) -> String {
    (0..)
        .map(|i| format!("order-{i}"))
        .find(|k| {
            Partitioner::Murmur2.partition(k.as_bytes(), n)
                != Partitioner::Crc32.partition(k.as_bytes(), n)
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_a_crc32_producer_reaches_a_timer_a_java_style_producer_created() {
    let env = TestEnv::new("router", 4, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let (java, librdkafka) = (producer("murmur2_random"), producer("consistent_random"));
    let id = split_key(4);
    let home = Partitioner::Murmur2.partition(id.as_bytes(), 4);
    let due = now_ms() + 2_000;
    produce(&env, &java, &once_at(&id, due, "cancelled")).await;
    produce(&env, &librdkafka, &cancel(&id)).await;
    // A sentinel in the same partition, due after the cancelled timer.
    let sentinel = (0..)
        .map(|i| format!("sentinel-{i}"))
        .find(|k| Partitioner::Murmur2.partition(k.as_bytes(), 4) == home)
        .unwrap();
    produce(&env, &java, &once_at(&sentinel, due + 500, "s")).await;
    let r = got.results(3, WAIT).await;
    let of = |req: &str| {
        r.iter()
            .find(|x| x.request_id.as_deref() == Some(req))
            .unwrap()
    };
    let created = of(&format!("req-{id}"));
    assert_eq!(created.outcome, Outcome::Accepted);
    assert_eq!(
        created.partition, home,
        "librdkafka's murmur2 and ktimer's agree"
    );
    let cancelled = of(&format!("cancel-{id}"));
    assert_eq!(
        cancelled.outcome,
        Outcome::Accepted,
        "{:?}",
        cancelled.reason
    );
    assert_eq!(
        cancelled.partition, home,
        "forwarded to the timer's partition"
    );
    let f = got.fires_until(&sentinel, WAIT).await;
    let ids: Vec<&str> = f.iter().map(|x| x.timer_id.as_str()).collect();
    assert_eq!(ids, [sentinel.as_str()], "the cancelled timer did not fire");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misrouted_command_is_rejected_with_the_partitioner_to_use_when_asked() {
    let env = TestEnv::new("misrouted", 4, &["--misrouted", "reject"]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let id = split_key(4);
    produce(
        &env,
        &producer("consistent_random"),
        &once_at(&id, now_ms() + 100, "x"),
    )
    .await;
    let r = got.results(1, WAIT).await;
    assert_eq!(r[0].outcome, Outcome::Rejected);
    let reason = r[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("murmur2_random"), "{reason}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_pause_during_a_claim_strands_no_fire() {
    let env = TestEnv::new("pause", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() + 3_000;
    for i in 0..8 {
        env.send(&once_at(&format!("p{i}"), due, "x"), None).await;
    }
    got.results(8, WAIT).await;
    // What a fork for a snapshot of a large dataset does: writes stall for 800 ms, from
    // just before the claim (100 ms ahead of the due time). The claim's reply times out
    // (500 ms) while Redis still runs it when the pause ends.
    let client = redis::Client::open(common::servers().redis_url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    tokio::time::sleep(Duration::from_millis((due - 150 - now_ms()).max(0) as u64)).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(800)
        .arg("WRITE")
        .query_async(&mut conn)
        .await
        .unwrap();
    let f = got.fires(8, WAIT).await;
    let mut ids: Vec<&str> = f.iter().map(|x| x.timer_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8, "every timer fired: {ids:?}");
    for x in &f {
        assert!(x.received_ms >= due, "never early");
        assert!(
            x.received_ms < due + 5_000,
            "re-driven within seconds: {}",
            x.received_ms - due
        );
    }
    svc.stop().await;
}
