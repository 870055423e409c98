//! A poisoned command: one that makes a store function fail the same way on every try.
//! Here the record of the timer it names is planted in Redis as bytes no function can
//! read, and a CANCEL of it arrives among 2,000 creates on the same partition. The
//! partition must go on: every create answered and fired on time, the CANCEL answered
//! REJECTED with the store's error, counted by application, nothing else lost.

mod common;

use common::checker::{check, gather, Bounds, Expected};
use common::{cancel, once_at, TestEnv};
use ktimer::command::Outcome;
use ktimer::now_ms;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_store_fails_on_is_rejected_and_its_partition_goes_on() {
    let env = TestEnv::new("poison", 1, &[]).await;
    let mut got = env.collect();
    // The record of timer "poison", as no function can read it (not MessagePack).
    let keys = ktimer::store::Keys::new(&env.args.redis_prefix, &env.args.kafka.commands_topic, 0);
    let client = redis::Client::open(env.args.redis_url.as_str()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("SET")
        .arg(keys.timer("poison"))
        .arg("not a timer record")
        .query_async(&mut redis)
        .await
        .unwrap();
    let svc = env.start().await;
    let first_due = now_ms() + 20_000;
    let expected: Expected = (0..2_000)
        .map(|i| (format!("good-{i}"), first_due + i as i64))
        .collect();
    let mut cmds: Vec<_> = (0..2_000)
        .map(|i| once_at(&format!("good-{i}"), first_due + i as i64, "x"))
        .collect();
    cmds.insert(1_000, cancel("poison"));
    env.send_many(&cmds).await;

    let results = got.results(cmds.len(), Duration::from_secs(30)).await;
    let poisoned: Vec<_> = results
        .iter()
        .filter(|r| r.timer_id.as_deref() == Some("poison"))
        .collect();
    assert_eq!(poisoned.len(), 1, "{poisoned:?}");
    assert_eq!(poisoned[0].outcome, Outcome::Rejected, "{poisoned:?}");
    let reason = poisoned[0].reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("the store failed on this command") && reason.contains("user_function"),
        "the reason names the store's error: {reason}"
    );
    let good = results
        .iter()
        .filter(|r| r.timer_id.as_deref() != Some("poison"));
    for r in good {
        assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    }
    let counted = svc.metric("ktimer_poisoned_commands_total{application=\"other\"}");
    assert_eq!(counted, Some(1.0), "counted by application");

    let fires = gather(
        &mut got,
        &expected,
        Duration::from_secs(60),
        Duration::from_secs(1),
    )
    .await;
    let bounds = Bounds {
        duplicates: 0,
        lateness_ms: 1_000,
    };
    check(
        "a poisoned command among 2,000 creates",
        &expected,
        &fires,
        &bounds,
    );
    assert!(
        !fires.iter().any(|f| f.timer_id == "poison"),
        "nothing fires for the poisoned command"
    );
    svc.stop().await;
}
