//! A poisoned command: one that makes a store function fail the same way on every try.
//! Here the record of the timer it names is planted in Redis as bytes no function can
//! read, and a CANCEL of it arrives among 2,000 creates on the same partition. The
//! partition must go on: every create answered and fired on time, the CANCEL answered
//! REJECTED with the store's error, copied as it arrived to the dead-letter topic, counted
//! by application, nothing else lost.

mod common;

use common::checker::{check, gather, Bounds, Expected};
use common::{cancel, once_at, TestEnv};
use ktimer::command::Outcome;
use ktimer::now_ms;
use rdkafka::message::{Headers, Message};
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
    let k = &env.args.kafka;
    let dlq: rdkafka::consumer::StreamConsumer =
        ktimer::client::assigned_consumer(k, std::slice::from_ref(&k.dead_letter_topic), true)
            .expect("dead-letter consumer");
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
    // Its copy on the dead-letter topic: the record as it arrived, with the reason.
    let m = tokio::time::timeout(Duration::from_secs(30), dlq.recv())
        .await
        .expect("a dead letter within 30 s")
        .expect("dead letter");
    let header = |name: &str| {
        m.headers()
            .and_then(|h| h.iter().find(|x| x.key == name))
            .and_then(|x| x.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    assert_eq!(m.key(), Some(&b"poison"[..]));
    assert_eq!(header("ktimer-reason"), reason, "the result's reason");
    let offset = poisoned[0].offset;
    assert_eq!(
        header("ktimer-origin"),
        format!("{}/0/{offset}", k.commands_topic)
    );
    let sent = ktimer::codec::Codec::new(None)
        .unwrap()
        .encode_command(&cancel("poison"), &k.commands_topic)
        .await
        .unwrap();
    assert_eq!(m.payload(), Some(&sent[..]), "the command as it arrived");

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

/// A fire whose acknowledgement the store fails on every time: timer "victim"'s record is
/// replaced by bytes no function can read after the trigger claimed it (so it fires) and
/// before its acknowledgement, among 500 good timers due around it on the same
/// partition. (Its payload is larger than a claim answers records of, so ack.lua reads
/// its record to acknowledge it; the others' claims recorded them done, and their
/// acknowledgements read no record.) The fires acknowledged with it must be acknowledged, the victim forgotten
/// and counted, and the partition must go on (before: the victim stayed in flight for
/// ever, and every later acknowledgement call of the partition failed with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_whose_acknowledgement_the_store_fails_on_is_forgotten_and_its_partition_goes_on() {
    let env = TestEnv::new("poison-ack", 1, &[]).await;
    let mut got = env.collect();
    let keys = ktimer::store::Keys::new(&env.args.redis_prefix, &env.args.kafka.commands_topic, 0);
    let client = redis::Client::open(env.args.redis_url.as_str()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let svc = env.start().await;
    let first_due = now_ms() + 5_000;
    let victim_due = first_due + 250;
    let mut expected: Expected = (0..500)
        .map(|i| (format!("good-{i}"), first_due + i as i64))
        .collect();
    expected.insert("victim".into(), victim_due);
    let large = "v".repeat(2_000);
    let cmds: Vec<_> = expected
        .iter()
        .map(|(id, due)| once_at(id, *due, if id == "victim" { &large } else { "x" }))
        .collect();
    env.send_many(&cmds).await;
    let results = got.results(cmds.len(), Duration::from_secs(30)).await;
    assert!(results.iter().all(|r| r.outcome == Outcome::Accepted));

    // Claimed (in flight, about 100 ms before its due): its record goes bad now.
    let in_flight = |r: &mut redis::aio::MultiplexedConnection| {
        let mut r = r.clone();
        let key = keys.inflight();
        async move {
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .query_async(&mut r)
                .await
                .unwrap();
            members
        }
    };
    loop {
        let members = in_flight(&mut redis).await;
        if members.iter().any(|m| m.ends_with(":victim")) {
            break;
        }
        assert!(now_ms() < victim_due, "the victim was never seen in flight");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let () = redis::cmd("SET")
        .arg(keys.timer("victim"))
        .arg("not a timer record")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(now_ms() < victim_due, "the record went bad before the fire");

    let fires = gather(
        &mut got,
        &expected,
        Duration::from_secs(30),
        Duration::from_secs(3),
    )
    .await;
    let bounds = Bounds {
        duplicates: 0,
        lateness_ms: 1_000,
    };
    check(
        "a fire whose acknowledgement fails among 500",
        &expected,
        &fires,
        &bounds,
    );
    // Nothing stays in flight: the fires acknowledged with the victim were acknowledged.
    let deadline = now_ms() + 10_000;
    loop {
        let left = in_flight(&mut redis).await;
        if left.is_empty() {
            break;
        }
        assert!(now_ms() < deadline, "still in flight: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counted = svc.metric("ktimer_fires_total{outcome=\"poisoned\"}");
    assert_eq!(counted, Some(1.0), "the forgotten fire is counted");
    svc.stop().await;
}
