//! A timer whose state record the producer refuses (larger than the state topic accepts):
//! the partition's checkpoints go on (its state is written without its history, or left
//! out with an error).

mod common;

use common::{once_at, TestEnv};
use ktimer::command::Outcome;
use ktimer::now_ms;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// The state topic's last checkpoint of partition 0.
async fn last_checkpoint(env: &TestEnv) -> Option<ktimer::timer::Checkpoint> {
    let k = &env.args.kafka;
    let reader = ktimer::kafka::reader(k, &format!("{}-probe", env.name));
    let mut found = ktimer::state::tail::last_checkpoints(&reader, &k.state_topic, &[0])
        .await
        .expect("state topic read");
    found.remove(&0)
}

/// 100 kB of payload and 240 kB of headers under a 200 kB record limit: the intake counts
/// only the payload, so the timer is accepted (its fire goes to the dead-letter topic), and
/// its state record, refused by the producer on every retry, held the partition's
/// checkpoints back for good. A normal timer sent after it must be in a checkpoint within
/// seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_timer_state_does_not_stop_the_checkpoints() {
    let limits = [
        "--kafka-option",
        "message.max.bytes=200000",
        "--max-payload-bytes",
        "150000",
    ];
    let env = TestEnv::new("statesize", 1, &limits).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() + 3_600_000;
    let mut big = once_at("big", due, &"p".repeat(100_000));
    big.callback.as_mut().unwrap().headers = (0..60)
        .map(|i| (format!("h{i}"), "v".repeat(4_000)))
        .collect();
    env.send(&big, None).await;
    env.send(&once_at("small", due, "x"), None).await;
    let results = got.results(2, MIN).await;
    assert!(
        results.iter().all(|r| r.outcome == Outcome::Accepted),
        "{results:?}"
    );
    let small_offset = 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let reflected = last_checkpoint(&env).await.map(|c| c.commands_offset);
        if reflected >= Some(small_offset) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no checkpoint reflects the command after the oversized timer within 20 s (last: {reflected:?})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    svc.stop().await;
}
