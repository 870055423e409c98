//! The broker bounces with its data: a Tansu that keeps its topics in a SQLite file is
//! SIGKILLed and started again while commands arrive and timers fire. Nothing accepted is
//! lost, nothing fires early, every command is answered. (Tansu built with
//! `--features dynostore,libsql`, which `scripts/install-deps.sh --for-tests` installs.)

mod common;

use common::checker::{check, due_near, gather, sleep_until, Bounds, Expected};
use common::world::World;
use common::TestEnv;
use ktimer::command::Outcome;
use ktimer::now_ms;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// 1,200 timers created in 12 waves over 6 s (due 3 to 15 s after their wave), four
/// partitions, one instance; the broker is SIGKILLed 2.5 s in and restarted 5 s later.
/// Every create is answered (accepted; a replayed one may say duplicate), every timer
/// fires, none early; duplicates stay within the fires due from the kill until the group
/// settled again (seen: none), lateness within the outage plus the group's recovery
/// (seen: 12.4 s, for a 5 s outage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_and_restarted_with_its_data_loses_nothing() {
    let mut w = World::start_persistent("bounce", false);
    let env = TestEnv::on(&w.servers(), "bounce", 4, &["--session-timeout-ms", "6000"]).await;
    let mut got = env.collect();
    let a = env.start().await;
    let t0 = now_ms() + 500;
    let (waves, per_wave, every_ms) = (12, 100, 500);
    let mut expected = Expected::new();
    let mut batches = Vec::new();
    for i in 0..waves {
        let sent_at = t0 + i * every_ms;
        let batch: Vec<_> = (0..per_wave)
            .map(|j| {
                let id = format!("w{i}-{j}");
                let due = sent_at + 3_000 + j * 12_000 / per_wave;
                expected.insert(id.clone(), due);
                common::once_at(&id, due, "x")
            })
            .collect();
        batches.push((sent_at, batch));
    }
    let sending = async {
        for (at, batch) in &batches {
            sleep_until(*at).await;
            env.send_many(batch).await;
        }
    };
    let (kill_at, down_ms) = (t0 + 2_500, 5_000);
    let bounce = async {
        sleep_until(kill_at).await;
        w.broker.kill();
        sleep_until(kill_at + down_ms).await;
        w.broker.restart();
    };
    tokio::join!(sending, bounce);
    answered(&mut got, &expected, 3 * MIN).await;
    let fires = gather(&mut got, &expected, 3 * MIN, Duration::from_secs(5)).await;
    let report = check(
        "the broker killed and restarted with its data",
        &expected,
        &fires,
        &Bounds {
            // At most the fires due from the kill until the group settled again.
            duplicates: due_near(&expected, kill_at + down_ms / 2, down_ms / 2 + 6_000),
            lateness_ms: down_ms + 6_000 + 15_000,
        },
    );
    println!("{report:?}");
    a.stop().await;
}

/// Waits until every create of `expected` was answered, accepted (or, replayed after the
/// bounce, duplicate); a rejection fails.
async fn answered(got: &mut common::Collected, expected: &Expected, limit: Duration) {
    let mut seen: HashSet<String> = HashSet::new();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while seen.len() < expected.len() {
        let r = match tokio::time::timeout_at(deadline, got.results.recv()).await {
            Ok(Some(r)) => r,
            _ => panic!(
                "{} of {} creates never answered",
                expected.len() - seen.len(),
                expected.len()
            ),
        };
        assert_ne!(r.outcome, Outcome::Rejected, "{r:?}");
        *outcomes.entry(format!("{:?}", r.outcome)).or_default() += 1;
        seen.insert(r.timer_id.unwrap_or_default());
    }
    println!("results: {outcomes:?}");
}
