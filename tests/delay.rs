//! Delayed delivery through the delay topic: plain records (no schema, no ktimer client)
//! with `ktimer-*` headers, produced by a plain librdkafka producer, delivered themselves
//! to their target topic at their time, never early, once.

mod common;

use common::checker::{check, gather, Bounds, Expected};
use common::world::World;
use common::{Collected, TestEnv};
use ktimer::command::{CommandResult, Outcome};
use ktimer::now_ms;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// A record for the delay topic: key, value (`None`: a tombstone), headers.
struct Delayed<'a> {
    key: Option<&'a str>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a str, String)>,
}

impl<'a> Delayed<'a> {
    /// A record delivered to `target` `delay_ms` after its timestamp.
    fn after(delay_ms: i64, target: &str, value: &'a [u8]) -> Delayed<'a> {
        Delayed {
            key: None,
            value: Some(value),
            headers: vec![
                ("ktimer-delay-ms", delay_ms.to_string()),
                ("ktimer-target-topic", target.to_string()),
            ],
        }
    }

    fn header(mut self, name: &'a str, value: &str) -> Delayed<'a> {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// Produces `records` to the delay topic's partition 0, stamped `ts` (ms), in order.
async fn send(env: &TestEnv, records: &[Delayed<'_>], ts: i64) {
    let topic = &env.args.kafka.delay_topic;
    let sends = records.iter().map(|r| {
        let mut h = OwnedHeaders::new();
        for (k, v) in &r.headers {
            h = h.insert(Header {
                key: k,
                value: Some(v.as_str()),
            });
        }
        let mut rec = FutureRecord::<str, [u8]>::to(topic)
            .partition(0)
            .timestamp(ts)
            .headers(h);
        if let Some(k) = r.key {
            rec = rec.key(k);
        }
        if let Some(v) = r.value {
            rec = rec.payload(v);
        }
        env.producer.send(rec, Duration::from_secs(30))
    });
    for r in futures::future::join_all(sends).await {
        r.map_err(|(e, _)| e).expect("produce");
    }
}

/// The results of `n` commands, by timer id.
async fn results(got: &mut Collected, n: usize) -> Vec<CommandResult> {
    got.results(n, MIN).await
}

/// A plain producer's record (bytes that are no Avro, a string key, two custom headers)
/// with a delay and a target: the target receives the same key, value and headers at the
/// due millisecond (the record's timestamp plus the delay), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_record_is_delivered_itself_at_its_time_once() {
    let env = TestEnv::new("delay-plain", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let value: &[u8] = &[0x00, 0x9f, 0x92, 0x96, b'{', 0xff];
    let ts = now_ms();
    let mut rec = Delayed::after(1_500, &env.args.kafka.fired_topic, value)
        .header("trace-id", "4bf92f3577b34da6")
        .header("content-type", "application/x-custom");
    rec.key = Some("order-7");
    send(&env, &[rec], ts).await;
    let r = results(&mut got, 1).await.remove(0);
    let origin = format!("{}/0/0", env.args.kafka.delay_topic);
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    assert_eq!(r.request_id.as_deref(), Some(origin.as_str()));
    assert_eq!(r.due_ms, Some(ts + 1_500));
    let f = got.fires(1, MIN).await.remove(0);
    assert_eq!(f.key.as_deref(), Some(&b"order-7"[..]));
    assert_eq!(f.payload, value);
    assert_eq!(f.headers["trace-id"], "4bf92f3577b34da6");
    assert_eq!(f.headers["content-type"], "application/x-custom");
    assert!(!f.headers.contains_key("ktimer-delay-ms"));
    assert!(!f.headers.contains_key("ktimer-target-topic"));
    assert_eq!(
        (f.timer_id.as_str(), f.due_ms),
        (origin.as_str(), ts + 1_500)
    );
    assert!(
        f.fired_ms >= ts + 1_500,
        "early by {} ms",
        ts + 1_500 - f.fired_ms
    );
    println!("delivered {} ms after its due time", f.fired_ms - f.due_ms);
    let again = tokio::time::timeout(Duration::from_secs(3), got.fired.recv()).await;
    assert!(again.is_err(), "delivered twice: {again:?}");
    // A delayed record is a timer: the admin API finds it by its id (slashes encoded).
    let admin = svc
        .status
        .borrow()
        .admin_addr
        .expect("admin port")
        .to_string();
    let path = format!("/timers/{}", origin.replace('/', "%2F"));
    let (code, body) = common::world::http_get(&admin, &path).expect("admin answers");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("FIRED") || body.contains("fired"), "{body}");
    svc.stop().await;
}

/// 10,000 delayed records due over 5 s, through one instance: each delivered once,
/// none early; the lateness is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_delayed_records_over_five_seconds_are_delivered_once() {
    let env = TestEnv::new("delay-many", 4, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let target = env.args.kafka.fired_topic.clone();
    let ts = now_ms();
    let ids: Vec<String> = (0..10_000).map(|i| format!("d-{i}")).collect();
    let mut expected = Expected::new();
    let records: Vec<Delayed> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let delay = 3_000 + (i as i64 * 5_000) / 10_000;
            expected.insert(id.clone(), ts + delay);
            Delayed::after(delay, &target, b"x").header("ktimer-timer-id", id)
        })
        .collect();
    send(&env, &records, ts).await;
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    let report = check(
        "10,000 delayed records over 5 s",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 10_000,
        },
    );
    println!(
        "lateness p99 {} ms, max {} ms",
        report.p99_lateness_ms, report.max_lateness_ms
    );
    svc.stop().await;
}

/// A tombstone with the timer's id cancels it before its time; one sent after the fire
/// is answered with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_cancels_and_one_after_the_fire_is_answered() {
    let env = TestEnv::new("delay-cancel", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let target = env.args.kafka.fired_topic.clone();
    let ts = now_ms();
    let tombstone = |id| Delayed {
        key: None,
        value: None,
        headers: vec![("ktimer-timer-id", String::from(id))],
    };
    let early = Delayed::after(500, &target, b"early").header("ktimer-timer-id", "early");
    let later = Delayed::after(4_000, &target, b"later").header("ktimer-timer-id", "later");
    send(&env, &[early, later, tombstone("later")], ts).await;
    let r = results(&mut got, 3).await;
    assert!(r.iter().all(|r| r.outcome == Outcome::Accepted), "{r:?}");
    assert_eq!(r[2].state.as_deref(), Some("CANCELLED"), "{:?}", r[2]);
    let f = got.fires(1, MIN).await.remove(0);
    assert_eq!(f.timer_id, "early");
    send(&env, &[tombstone("early")], now_ms()).await;
    let late = results(&mut got, 1).await.remove(0);
    assert_eq!(late.outcome, Outcome::Rejected, "{late:?}");
    assert!(
        late.reason.as_deref().unwrap_or_default().contains("fired"),
        "{late:?}"
    );
    // Past the cancelled timer's due time, nothing more arrived.
    let quiet = ts + 4_000 + 2_000 - now_ms();
    let more =
        tokio::time::timeout(Duration::from_millis(quiet.max(0) as u64), got.fired.recv()).await;
    assert!(more.is_err(), "delivered after its cancel: {more:?}");
    svc.stop().await;
}

/// Records without a target, with an unparsable delay, and aimed at ktimer's results
/// topic: each answered REJECTED with its reason, none delivered, and the record after
/// them on the same partition is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_headers_are_rejected_and_the_partition_moves_on() {
    let env = TestEnv::new("delay-bad", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let untargeted = Delayed {
        key: None,
        value: Some(b"x"),
        headers: vec![("ktimer-delay-ms", "100".into())],
    };
    let mut unparsable = Delayed::after(0, &k.fired_topic, b"x");
    unparsable.headers[0].1 = "in a minute".into();
    let at_results = Delayed::after(100, &k.results_topic, b"x");
    let good = Delayed::after(100, &k.fired_topic, b"good").header("ktimer-timer-id", "good");
    send(&env, &[untargeted, unparsable, at_results, good], now_ms()).await;
    let mut r = results(&mut got, 4).await;
    r.sort_by_key(|r| r.request_id.clone());
    let reasons: Vec<&str> = r[..3]
        .iter()
        .map(|r| r.reason.as_deref().unwrap_or(""))
        .collect();
    assert!(
        r[..3].iter().all(|r| r.outcome == Outcome::Rejected),
        "{r:?}"
    );
    assert!(
        reasons[0].contains("needs the ktimer-target-topic header"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("not a decimal integer"), "{reasons:?}");
    assert!(
        reasons[2].contains("one of ktimer's own topics"),
        "{reasons:?}"
    );
    assert_eq!(r[3].outcome, Outcome::Accepted, "{:?}", r[3]);
    let f = got.fires(1, MIN).await.remove(0);
    assert_eq!(f.timer_id, "good");
    let more = tokio::time::timeout(Duration::from_secs(2), got.fired.recv()).await;
    assert!(more.is_err(), "a refused record was delivered: {more:?}");
    svc.stop().await;
}

/// Redis emptied while 2,000 delayed records wait: every one is delivered, none early
/// (their commands are on the commands topic, from which Redis is rebuilt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_records_waiting_when_redis_is_emptied_are_all_delivered() {
    let w = World::start("delay-flush", false);
    let env = TestEnv::on(&w.servers(), "delay-flush", 4, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let target = env.args.kafka.fired_topic.clone();
    let ts = now_ms();
    let mut expected = Expected::new();
    let ids: Vec<String> = (0..2_000).map(|i| format!("w-{i}")).collect();
    let records: Vec<Delayed> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let delay = 8_000 + i as i64;
            expected.insert(id.clone(), ts + delay);
            Delayed::after(delay, &target, b"w").header("ktimer-timer-id", id)
        })
        .collect();
    send(&env, &records, ts).await;
    let r = results(&mut got, 2_000).await;
    assert!(
        r.iter().all(|r| r.outcome == Outcome::Accepted),
        "{:?}",
        r.iter().find(|r| r.outcome != Outcome::Accepted)
    );
    assert!(
        now_ms() < ts + 8_000,
        "the records were answered only after their due time"
    );
    let mut con = redis::Client::open(w.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let fires = gather(&mut got, &expected, 2 * MIN, Duration::from_secs(3)).await;
    check(
        "redis emptied while delayed records wait",
        &expected,
        &fires,
        &Bounds {
            duplicates: 0,
            lateness_ms: 10_000,
        },
    );
    // The fault reached the rebuild: the instance noticed the emptied Redis and replayed.
    let replays = svc.metric("ktimer_redis_replays_total").unwrap_or(0.0);
    assert!(
        replays >= 1.0,
        "the emptied Redis was not noticed (no replay)"
    );
    svc.stop().await;
}
