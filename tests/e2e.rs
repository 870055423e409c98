//! End-to-end tests of one-shot timers against a real broker and a real Redis.

mod common;

use common::{cancel, once_at, TestEnv};
use ktimer::command::{fire_id, FiredEvent, Outcome};
use ktimer::now_ms;
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_once_at_the_due_millisecond() {
    let env = TestEnv::new("due", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() + 2_000;
    env.send(&once_at("t-due", due, "hello"), None).await;
    let r = got.results(1, WAIT).await.remove(0);
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    assert_eq!(r.due_ms, Some(due));
    assert_eq!(r.state.as_deref(), Some("SCHEDULED"));

    let f = got.fires(1, WAIT).await.remove(0);
    assert_eq!(f.timer_id, "t-due");
    assert_eq!(f.due_ms, due);
    assert!(f.fired_ms >= due, "fired {} ms early", due - f.fired_ms);
    assert!(
        f.received_ms >= due,
        "received {} ms before due",
        due - f.received_ms
    );
    assert!(f.fired_ms - due <= 50, "fired {} ms late", f.fired_ms - due);
    assert_eq!(f.fire_id, fire_id("t-due", r.version.unwrap(), due));
    assert_eq!(f.key.as_deref(), Some(&b"t-due"[..]));
    // The envelope carries the same identity and the payload.
    let codec = ktimer::codec::Codec::new(None).unwrap();
    let ev: FiredEvent = codec.decode_fired(&f.payload).await.unwrap();
    assert_eq!(
        (ev.fire_id.as_str(), ev.due_ms, ev.attempt),
        (f.fire_id.as_str(), due, 1)
    );
    assert_eq!(ev.payload, b"hello");

    // Exactly once: a later sentinel in the same partition fires, and nothing else did.
    let p = f.partition;
    env.send(&once_at("t-sentinel", now_ms() + 200, ""), Some(p))
        .await;
    let more = got.fires_until("t-sentinel", WAIT).await;
    assert_eq!(more.len(), 1, "unexpected extra fires: {more:?}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_timers_all_fire_exactly_once() {
    let env = TestEnv::new("thousand", 4, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let start = now_ms() + 1_500;
    let n = 1_000;
    let mut due = HashMap::new();
    for i in 0..n {
        let id = format!("k-{i}");
        let at = start + (i as i64 * 3); // spread over 3 s
        due.insert(id.clone(), at);
        env.send(&once_at(&id, at, "x"), None).await;
    }
    let results = got.results(n, WAIT).await;
    assert!(results.iter().all(|r| r.outcome == Outcome::Accepted));
    let fires = got.fires(n, WAIT).await;
    let mut seen = HashMap::new();
    let mut late = Vec::new();
    for f in &fires {
        *seen.entry(f.timer_id.clone()).or_insert(0) += 1;
        assert_eq!(f.due_ms, due[&f.timer_id]);
        assert!(f.fired_ms >= f.due_ms, "{} fired early", f.timer_id);
        late.push(f.fired_ms - f.due_ms);
    }
    assert_eq!(seen.len(), n, "every timer fired");
    assert!(seen.values().all(|&c| c == 1), "no duplicates");
    late.sort();
    eprintln!(
        "1000 timers: lateness p50 {} ms, p99 {} ms, max {} ms",
        late[n / 2],
        late[n * 99 / 100],
        late[n - 1]
    );
    // Nothing more arrives after a sentinel in each partition.
    for p in 0..4 {
        let id = format!("sentinel-{p}");
        env.send(&once_at(&id, now_ms(), ""), Some(p)).await;
    }
    let rest = got.fires(4, WAIT).await;
    assert!(
        rest.iter().all(|f| f.timer_id.starts_with("sentinel-")),
        "{rest:?}"
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_timer_does_not_fire() {
    let env = TestEnv::new("cancel", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() + 1_500;
    env.send(&once_at("doomed", due, ""), Some(0)).await;
    env.send(&cancel("doomed"), Some(0)).await;
    env.send(&cancel("doomed"), Some(0)).await;
    env.send(&cancel("never-created"), Some(0)).await;
    env.send(&once_at("survivor", due + 300, ""), Some(0)).await;
    let r = got.results(5, WAIT).await;
    assert_eq!(r[0].outcome, Outcome::Accepted);
    assert_eq!(
        (r[1].outcome, r[1].state.as_deref()),
        (Outcome::Accepted, Some("CANCELLED"))
    );
    assert_eq!(
        r[2].outcome,
        Outcome::Duplicate,
        "a repeated cancel is harmless"
    );
    assert_eq!(r[3].outcome, Outcome::Rejected);
    assert!(r[3].reason.as_deref().unwrap().contains("unknown timer"));
    // The survivor is due later in the same partition: once it fired, the cancelled one
    // would have fired before it.
    let fires = got.fires_until("survivor", WAIT).await;
    assert_eq!(fires.len(), 1, "the cancelled timer fired: {fires:?}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_due_in_the_past_fires_at_once() {
    let env = TestEnv::new("past", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let due = now_ms() - 10_000;
    let sent = now_ms();
    env.send(&once_at("overdue", due, ""), None).await;
    let f = got.fires(1, WAIT).await.remove(0);
    assert_eq!(f.due_ms, due);
    assert!(f.fired_ms >= sent, "fired before it was sent?");
    assert!(
        f.received_ms - sent < 2_000,
        "took {} ms after the command",
        f.received_ms - sent
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_with_a_reason_and_the_partition_moves_on() {
    let env = TestEnv::new("bad", 1, &["--max-payload-bytes", "2000000"]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    env.send_raw(Some("junk"), &[0xde, 0xad, 0xbe, 0xef], None)
        .await;
    env.send_raw(
        Some("badjson"),
        br#"{"request_id": "r1", "timer_id": "#,
        None,
    )
    .await;
    let mut neg = once_at("neg", 0, "");
    neg.at_ms = None;
    neg.delay_ms = Some(-5);
    env.send(&neg, None).await;
    env.send_raw(
        None,
        br#"{"request_id":"r","timer_id":"nokey","kind":"CREATE_ONCE","delay_ms":1}"#,
        None,
    )
    .await;
    env.send_raw(Some("trunc"), &[0xC3, 0x01, 1, 2], None).await;
    let mut zero = once_at("zero", 0, "");
    zero.at_ms = Some(0);
    let mut overflow = once_at("overflow", 0, "");
    overflow.at_ms = None;
    overflow.delay_ms = Some(i64::MAX);
    let centuries = once_at("centuries", now_ms() + 300 * 366 * 86_400_000, "");
    let mut nowhere = once_at("nowhere", now_ms() + 100, "");
    nowhere.callback.as_mut().unwrap().topic = Some(format!("{}.no-such-topic", env.name));
    let mut huge = once_at("huge", now_ms() + 100, "");
    huge.callback.as_mut().unwrap().payload = vec![b'x'; 999_000];
    let mut badcron = common::cron("badcron", "61 * * * * *", "");
    badcron.time_zone = Some("Mars/Olympus".into());
    let mut badzone = common::cron("badzone", "* * * * * *", "");
    badzone.time_zone = Some("Mars/Olympus".into());
    for c in [
        &zero, &overflow, &centuries, &nowhere, &huge, &badcron, &badzone,
    ] {
        env.send(c, None).await;
    }
    // A valid hand-written JSON command after all of that still works.
    let json = format!(
        r#"{{"request_id":"r-ok","timer_id":"ok","kind":"create_once","at_ms":{},"callback":{{"payload":"fine","mode":"RAW"}}}}"#,
        now_ms() + 100
    );
    env.send_raw(Some("ok"), json.as_bytes(), None).await;
    let r = got.results(13, WAIT).await;
    let reason = |i: usize| r[i].reason.clone().unwrap_or_default();
    for (i, want) in [
        (0, "unrecognised encoding"),
        (1, "invalid JSON"),
        (2, "delay_ms must be between 0"),
        (3, "no key"),
        (4, "truncated"),
        (5, "at_ms must be between 1"),
        (6, "delay_ms must be between 0"),
        (7, "days ahead"),
        (8, "does not exist"),
        (9, "larger than"),
        (10, "cron"),
        (11, "time zone"),
    ] {
        assert_eq!(r[i].outcome, Outcome::Rejected, "{:?}", r[i]);
        assert!(
            reason(i).contains(want),
            "result {i}: {:?} lacks {want:?}",
            reason(i)
        );
    }
    assert_eq!(
        r[0].timer_id.as_deref(),
        Some("junk"),
        "the key identifies undecodable commands"
    );
    assert_eq!(r[12].outcome, Outcome::Accepted, "{:?}", r[12]);
    let f = got.fires(1, WAIT).await.remove(0);
    assert_eq!(
        (f.timer_id.as_str(), f.payload.as_slice()),
        ("ok", &b"fine"[..]),
        "raw mode delivers the payload"
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_due_while_ktimer_is_down_fire_after_restart() {
    let env = TestEnv::new("restart", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let base = now_ms() + 2_000;
    let n = 50;
    for i in 0..n {
        env.send(&once_at(&format!("r-{i}"), base + i as i64 * 20, ""), None)
            .await;
    }
    got.results(n, WAIT).await;
    svc.stop().await;
    let stopped_at = now_ms();
    assert!(
        stopped_at < base,
        "setup too slow: ktimer stopped after the first due time"
    );
    // Stay down until every timer is overdue.
    let down_until = base + n as i64 * 20 + 500;
    tokio::time::sleep(Duration::from_millis((down_until - now_ms()).max(0) as u64)).await;
    let restarted_at = now_ms();
    let svc = env.start().await;
    let fires = got.fires(n, WAIT).await;
    let mut ids: Vec<_> = fires.iter().map(|f| f.timer_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "every timer fired once after the restart");
    for f in &fires {
        assert!(
            f.fired_ms >= restarted_at,
            "{} fired while ktimer was down?",
            f.timer_id
        );
        assert!(f.fired_ms > f.due_ms, "late, never early");
        assert!(f.due_ms > stopped_at, "only timers due while down");
    }
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeliverable_fire_goes_to_the_dead_letter_topic_and_blocks_nothing() {
    use rdkafka::message::{Headers, Message};
    // The doomed timer is accepted; then ktimer's producer is limited to records of
    // 20 kB, and the doomed timer's headers make its record larger than that, a failure
    // no retry can mend.
    let mut env = TestEnv::new("dlq", 1, &[]).await;
    // Due once the first instance stopped (a group join can take several seconds).
    let due = now_ms() + 20_000;
    let doomed = common::undeliverable("doomed", due);
    env.accept_then_limit(&doomed, 20_000).await;
    let mut got = env.collect();
    let k = &env.args.kafka;
    let dlq: rdkafka::consumer::StreamConsumer =
        ktimer::client::assigned_consumer(k, std::slice::from_ref(&k.dead_letter_topic), true)
            .expect("dead-letter consumer");
    let svc = env.start().await;
    let fine_due = (due + 50).max(now_ms() + 1_500);
    env.send(&once_at("fine", fine_due, ""), None).await;
    let rs = got.results(2, WAIT).await;
    assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted), "{rs:?}");

    let f = got.fires(1, WAIT).await.remove(0);
    assert_eq!(f.timer_id, "fine");
    assert!(
        f.fired_ms >= f.due_ms && f.fired_ms - f.due_ms < 200,
        "the other timer was held up: {} ms late",
        f.fired_ms - f.due_ms
    );
    let m = tokio::time::timeout(WAIT, dlq.recv())
        .await
        .expect("a dead letter within 30 s")
        .expect("dead letter");
    let h: HashMap<String, String> = m
        .headers()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x.key.to_string(),
                String::from_utf8_lossy(x.value.unwrap()).into_owned(),
            )
        })
        .collect();
    assert_eq!(h["ktimer-timer-id"], "doomed");
    assert_eq!(h["ktimer-origin"], k.fired_topic);
    assert_eq!(h["ktimer-due-ms"], due.to_string());
    assert!(
        h["ktimer-reason"].contains("not delivered after 1 attempt"),
        "{h:?}"
    );
    assert_eq!(h["ktimer-value-dropped"], "too large");

    let admin = svc.status.borrow().admin_addr.unwrap().to_string();
    let mut state = String::new();
    for _ in 0..50 {
        if let Some((200, body)) = common::world::http_get(&admin, "/timers/doomed") {
            state = body;
            if state.contains("DEAD_LETTERED") {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(state.contains("\"state\":\"DEAD_LETTERED\""), "{state}");
    assert!(state.contains("\"dead_letters\":1"), "{state}");
    svc.stop().await;
}

/// A one-shot timer created again after it fired (the same id, a new request) is
/// accepted and fires again, and the partition's next command is not held up behind it.
/// (With history kept, the default, the create again once failed its Redis script, and
/// the intake retried it for ever: every later command of the partition waited.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_created_again_after_its_fire_fires_again_and_the_partition_moves_on() {
    let env = TestEnv::new("again", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    env.send(&once_at("again", now_ms() + 500, "first"), None)
        .await;
    assert_eq!(got.results(1, WAIT).await[0].outcome, Outcome::Accepted);
    assert_eq!(got.fires(1, WAIT).await[0].timer_id, "again");

    let due = now_ms() + 500;
    let mut again = once_at("again", due, "second");
    again.request_id = "req-again-2".into();
    env.send(&again, None).await;
    env.send(&once_at("after", due, "next"), None).await;
    let results = got.results(2, WAIT).await;
    let outcomes: Vec<_> = results
        .iter()
        .map(|r| (r.timer_id.as_deref().unwrap_or(""), r.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [("again", Outcome::Accepted), ("after", Outcome::Accepted)]
    );
    let mut fired: Vec<_> = got
        .fires(2, WAIT)
        .await
        .into_iter()
        .map(|f| f.timer_id)
        .collect();
    fired.sort();
    assert_eq!(fired, ["after", "again"]);
    svc.stop().await;
}
