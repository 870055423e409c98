//! A shared service (issue 12) against a real broker and Redis: no command stalls a
//! partition or reaches across applications.

mod common;

use common::{cancel, once_at, TestEnv};
use ktimer::command::{DeliveryMode, Outcome};
use ktimer::now_ms;
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
