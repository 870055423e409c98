//! Records larger than the topics accept: refused when the command arrives; and a timer
//! whose state record the producer refuses anyway (a limit lowered since): the
//! partition's checkpoints go on (its state is written without its history, or left out
//! with an error).

mod common;

use common::{lifecycle, once_at, TestEnv};
use ktimer::command::{CommandKind, Outcome};
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

/// Under a 200 kB record limit, a callback whose headers make its fired record too large
/// for the callback topic, and one that fits there but whose timer state would not fit the
/// state topic even without its history, are both rejected when they arrive, each with its
/// reason (the intake counted only the payload and accepted both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_whose_records_would_not_fit_are_refused_at_intake() {
    let limits = [
        "--kafka-option",
        "message.max.bytes=200000",
        "--max-payload-bytes",
        "150000",
    ];
    let env = TestEnv::new("intakesize", 1, &limits).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() + 3_600_000;
    let with_headers = |id: &str, n: usize, each: usize| {
        let mut t = once_at(id, due, &"p".repeat(150_000));
        t.callback.as_mut().unwrap().headers = (0..n)
            .map(|i| (format!("h{i}"), "v".repeat(each)))
            .collect();
        t
    };
    // 150 kB + 60 kB: over the callback topic's limit.
    env.send(&with_headers("callback", 15, 4_000), None).await;
    // 150 kB + 46.5 kB: fits the callback topic (2 kB kept for ktimer's headers), not a
    // state record (4 kB kept for the timer's other fields).
    env.send(&with_headers("state", 12, 3_875), None).await;
    env.send(&once_at("small", due, "x"), None).await;
    let results = got.results(3, MIN).await;
    let outcome = |id: &str| {
        let r = results.iter().find(|r| r.timer_id.as_deref() == Some(id));
        let r = r.expect(id);
        (r.outcome, r.reason.clone().unwrap_or_default())
    };
    let (o, why) = outcome("callback");
    assert!(
        o == Outcome::Rejected && why.contains("callback topic"),
        "{o:?} {why}"
    );
    let (o, why) = outcome("state");
    assert!(
        o == Outcome::Rejected && why.contains("state topic"),
        "{o:?} {why}"
    );
    assert_eq!(outcome("small").0, Outcome::Accepted);
    svc.stop().await;
}

/// A timer of 100 kB of payload and 240 kB of headers accepted under the default limits;
/// then the record limit is lowered to 200 kB and the timer paused: its state record,
/// refused by the producer on every retry, held the partition's checkpoints back for
/// good. A normal timer sent after it must be in a checkpoint within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_timer_state_does_not_stop_the_checkpoints() {
    let mut env = TestEnv::new("statesize", 1, &["--max-payload-bytes", "150000"]).await;
    let due = now_ms() + 3_600_000;
    let mut big = once_at("big", due, &"p".repeat(100_000));
    big.callback.as_mut().unwrap().headers = (0..60)
        .map(|i| (format!("h{i}"), "v".repeat(4_000)))
        .collect();
    env.accept_then_limit(&big, 200_000).await;
    let mut got = env.collect();
    let svc = env.start().await;
    env.send(&lifecycle(CommandKind::Pause, "big", "pause"), None)
        .await;
    env.send(&once_at("small", due, "x"), None).await;
    let results = got.results(3, MIN).await;
    assert!(
        results.iter().all(|r| r.outcome == Outcome::Accepted),
        "{results:?}"
    );
    let small_offset = 2;
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
