//! Faults only a broker can make, injected with librdkafka's mock cluster (in-process):
//! produce and offset-commit errors. Redis is the real shared server.

mod common;

use common::checker::{check, commands, gather, spread, Bounds};
use common::{Servers, TestEnv};
use ktimer::command::Outcome;
use ktimer::now_ms;
use rdkafka::mocking::{MockCluster, MockCoordinator};
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// A mock cluster of three brokers whose test topics and group live on broker 1.
fn cluster(env_name: &str) -> MockCluster<'static, DefaultProducerContext> {
    let mock = MockCluster::new(3).expect("mock cluster");
    for role in ["commands", "results", "fired", "dlq", "state", "delay"] {
        let topic = format!("{env_name}.{role}");
        mock.create_topic(&topic, 2, 1).expect("mock topic");
        for p in 0..2 {
            mock.partition_leader(&topic, p, Some(1)).expect("leader");
        }
    }
    mock
}

async fn env_on(
    mock: &MockCluster<'static, DefaultProducerContext>,
    name: &str,
    extra: &[&str],
) -> TestEnv {
    let servers = Servers {
        redis_url: common::servers().redis_url.clone(),
        brokers: mock.bootstrap_servers(),
    };
    let env = TestEnv::named(&servers, name, 2, extra, false).await;
    mock.coordinator(MockCoordinator::Group(env.args.group_id.clone()), 1)
        .expect("coordinator");
    env
}

/// Creates `n` timers due 16 s ahead over `span_ms`, waits until all are accepted, then
/// until 300 ms before the first is due (when a test injects its fault). The first
/// commands wait for the callback and state topics' limits, which the mock cluster does
/// not answer (5 s each): the fires must still be ahead once accepted.
async fn load_until_due(
    env: &TestEnv,
    got: &mut common::Collected,
    prefix: &str,
    n: usize,
    span_ms: i64,
) -> common::checker::Expected {
    let first_due = now_ms() + 16_000;
    let expected = spread(prefix, n, first_due, span_ms);
    env.send_many(&commands(&expected)).await;
    let rs = got.results(expected.len(), MIN).await;
    assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted));
    assert!(
        now_ms() < first_due - 1_000,
        "accepted too late to test the outage"
    );
    let before = (first_due - 300 - now_ms()).max(0) as u64;
    tokio::time::sleep(Duration::from_millis(before)).await;
    expected
}

/// 7. Produce and offset-commit errors injected while timers fire: nothing is removed
/// from the in-flight set before the broker acknowledged it, so nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_produce_and_commit_errors_lose_nothing() {
    let name = common::unique("mockerr");
    let mock = cluster(&name);
    let env = env_on(&mock, &name, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = spread("m", 1_000, now_ms() + 2_500, 5_000);
    env.send_many(&commands(&expected)).await;
    let rs = got.results(expected.len(), MIN).await;
    assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted));
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(3_000)).await;
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 25],
    );
    mock.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT; 10],
    );
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "7 injected produce and commit errors",
        &expected,
        &fires,
        &Bounds {
            // The idempotent producer retries these itself: no duplicates expected, and
            // 25 errors at librdkafka's retry backoff cost seconds, not more.
            duplicates: 0,
            lateness_ms: 10_000,
        },
    );
    svc.stop().await;
}

/// 8. A broker outage that outlasts `message.timeout.ms`: librdkafka gives up on the
/// records, so ktimer's own delivery retry (attempt count, backoff) takes over. Every
/// timer fires; some fires carry an attempt above 1, which only ktimer's retry writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_message_timeout_goes_through_ktimers_retry() {
    let name = common::unique("mocktimeout");
    let mock = cluster(&name);
    let env = env_on(
        &mock,
        &name,
        &[
            "--kafka-option",
            "message.timeout.ms=1000",
            "--kafka-option",
            "retry.backoff.max.ms=200",
            "--retry-base-ms",
            "200",
            "--retry-max-ms",
            "1000",
            "--max-delivery-attempts",
            "1000",
        ],
    )
    .await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = load_until_due(&env, &mut got, "t", 200, 1_000).await;
    // The leader of every test topic goes away for three times the message timeout.
    mock.broker_down(1).expect("broker down");
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    mock.broker_up(1).expect("broker up");
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "8 outage beyond the message timeout",
        &expected,
        &fires,
        &Bounds {
            duplicates: expected.len(),
            lateness_ms: 30_000,
        },
    );
    let retried = fires
        .iter()
        .filter(|f| f.headers.get("ktimer-attempt").is_some_and(|a| a != "1"))
        .count();
    assert!(retried > 0, "no fire went through ktimer's retry");
    svc.stop().await;
}

/// 9. The callback topic loses its leader for 5 s while 100 fires come due: metadata
/// says LEADER_NOT_AVAILABLE for it and every produce is answered NOT_LEADER_FOR_PARTITION
/// (the mock cluster cannot unset a leader: its Fetch handler crashes on one), so each
/// delivery times out (`message.timeout.ms` 1 s, at most 2 attempts 0.2 s apart). A
/// partition without a leader says nothing about the records: every fire reaches the
/// callback topic once a leader is back, none goes to the dead-letter topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_partition_without_a_leader_sends_no_fire_to_the_dead_letter_topic() {
    let name = common::unique("mocklead");
    let mock = cluster(&name);
    let flags = [
        "--kafka-option",
        "message.timeout.ms=1000",
        "--retry-base-ms",
        "200",
        "--retry-max-ms",
        "200",
        "--max-delivery-attempts",
        "2",
    ];
    let env = env_on(&mock, &name, &flags).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let expected = load_until_due(&env, &mut got, "l", 100, 2_000).await;
    let fired = format!("{name}.fired");
    mock.topic_error(
        &fired,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
    )
    .expect("topic error");
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 100_000],
    );
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    mock.clear_request_errors(RDKafkaApiKey::Produce);
    mock.topic_error(&fired, RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
        .expect("topic error");
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "9 callback partitions without a leader for 5 s",
        &expected,
        &fires,
        &Bounds {
            duplicates: expected.len(),
            lateness_ms: 5_000 + 10_000,
        },
    );
    assert_eq!(svc.fires("dead_lettered"), 0.0, "fires dead-lettered");
    svc.stop().await;
}

/// 10. The commands topic's leader down for three times the message timeout while delayed
/// records are read from the delay topic (led by another broker, its group coordinated
/// there): the commands they become cannot be produced, the delay reader's sessions fail
/// and start again at the first record not acknowledged, and every record is delivered
/// once the broker is back, none early, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_records_read_while_the_commands_topic_is_down_are_not_lost() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;
    let name = common::unique("mockdelay");
    let mock = cluster(&name);
    let delay = format!("{name}.delay");
    for p in 0..2 {
        mock.partition_leader(&delay, p, Some(2)).expect("leader");
    }
    let env = env_on(
        &mock,
        &name,
        &[
            "--kafka-option",
            "message.timeout.ms=1000",
            "--kafka-option",
            "retry.backoff.max.ms=200",
        ],
    )
    .await;
    let group = format!("{}.delay", env.args.group_id);
    mock.coordinator(MockCoordinator::Group(group), 2)
        .expect("coordinator");
    let mut got = env.collect();
    let svc = env.start().await;
    mock.broker_down(1).expect("broker down");
    let ts = now_ms();
    let mut expected = common::checker::Expected::new();
    let target = env.args.kafka.fired_topic.clone();
    let sends: Vec<_> = (0..300)
        .map(|i| {
            let id = format!("d{i}");
            expected.insert(id.clone(), ts + 8_000 + i);
            let h = OwnedHeaders::new()
                .insert(Header {
                    key: "ktimer-delay-ms",
                    value: Some(&(8_000 + i).to_string()),
                })
                .insert(Header {
                    key: "ktimer-target-topic",
                    value: Some(&target),
                })
                .insert(Header {
                    key: "ktimer-timer-id",
                    value: Some(&id),
                });
            (id, h)
        })
        .collect();
    for (id, h) in sends {
        let rec = FutureRecord::<str, [u8]>::to(&delay)
            .key(&id)
            .payload(b"x")
            .timestamp(ts)
            .headers(h);
        env.producer
            .send(rec, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    mock.broker_up(1).expect("broker up");
    let fires = gather(&mut got, &expected, MIN, Duration::from_secs(2)).await;
    check(
        "10 delayed records forwarded through an outage",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 30_000,
        },
    );
    let failed = svc
        .metric("ktimer_kafka_errors_total{op=\"delay_forward\"}")
        .unwrap_or(0.0);
    assert!(
        failed > 0.0,
        "no forwarding failed: the outage did not reach the delay reader"
    );
    svc.stop().await;
}
