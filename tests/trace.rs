//! W3C trace context across the delay, against a real broker and Redis: a command's
//! `traceparent`/`tracestate` record headers come back on its result, and every fire of
//! its timer is a child span of it (same trace id, a span id of the fire's own, derived
//! from the fire id: the same after Redis was emptied and the timer rebuilt from the state
//! topic); a delay-topic record's context travels the same way.

mod common;

use common::world::World;
use common::{cron, once_at, Fired, TestEnv};
use ktimer::codec::Codec;
use ktimer::command::{CommandResult, TimerCommand};
use ktimer::now_ms;
use ktimer::trace::Context;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const ONCE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CRON: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const DELAYED: &str = "00-11111111111111111111111111111111-2222222222222222-00";

/// Produces `cmd` to the commands topic with `headers`.
async fn send_with(env: &TestEnv, cmd: &TimerCommand, headers: &[(&str, &str)]) {
    let topic = &env.args.kafka.commands_topic;
    let value = Codec::new(None)
        .unwrap()
        .encode_command(cmd, topic)
        .await
        .unwrap();
    produce(env, topic, Some(&cmd.timer_id), &value, headers).await;
}

async fn produce(env: &TestEnv, topic: &str, key: Option<&str>, value: &[u8], hs: &[(&str, &str)]) {
    let mut h = OwnedHeaders::new();
    for (k, v) in hs {
        h = h.insert(Header {
            key: k,
            value: Some(*v),
        });
    }
    let mut rec = FutureRecord::<str, [u8]>::to(topic)
        .payload(value)
        .headers(h);
    if let Some(k) = key {
        rec = rec.key(k);
    }
    env.producer
        .send(rec, WAIT)
        .await
        .map_err(|(e, _)| e)
        .expect("produce");
}

/// The next `n` results with their trace headers (traceparent, tracestate).
async fn traced_results(
    consumer: &StreamConsumer,
    n: usize,
) -> Vec<(CommandResult, Option<String>, Option<String>)> {
    let codec = Codec::new(None).unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let m = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .expect("a result")
            .unwrap();
        let r = codec
            .decode_result(m.payload().unwrap_or_default())
            .await
            .unwrap();
        let header = |name: &str| {
            let h = m.headers()?;
            let x = h.iter().find(|x| x.key == name)?;
            Some(String::from_utf8_lossy(x.value?).into_owned())
        };
        out.push((r, header("traceparent"), header("tracestate")));
    }
    out
}

/// The fire is a child span of `parent`: its traceparent is the one its fire id names.
fn assert_child(f: &Fired, parent: &str) {
    let want = Context::parse(parent, None).unwrap().child(&f.fire_id);
    assert_eq!(f.headers.get("traceparent"), Some(&want), "{f:?}");
    assert_eq!(&want[3..35], &parent[3..35], "same trace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_and_fires_carry_the_commands_trace_also_after_a_rebuild() {
    // Servers of its own: Redis is emptied below.
    let w = World::start("trace", false);
    let env = TestEnv::on(&w.servers(), "trace", 2, &[]).await;
    let k = &env.args.kafka;
    let mut got = env.collect();
    let results: StreamConsumer =
        ktimer::client::assigned_consumer(k, std::slice::from_ref(&k.results_topic), true).unwrap();
    let svc = env.start().await;
    let t0 = now_ms();
    let state = [
        ("traceparent", ONCE),
        ("tracestate", "rojo=00f067aa0ba902b7"),
    ];
    send_with(&env, &once_at("tr-once", t0 + 3_000, "o"), &state).await;
    // Fires after Redis is emptied: rebuilt from the state topic with its context.
    send_with(&env, &once_at("tr-late", t0 + 20_000, "l"), &state).await;
    let every = TimerCommand {
        cron: None,
        every_ms: Some(400),
        max_fires: Some(3),
        ..cron("tr-cron", "", "c")
    };
    send_with(&env, &every, &[("traceparent", CRON)]).await;
    let delayed = [
        ("ktimer-delay-ms", "2000"),
        ("ktimer-target-topic", k.fired_topic.as_str()),
        ("ktimer-timer-id", "tr-delayed"),
        ("traceparent", DELAYED),
    ];
    produce(&env, &k.delay_topic, Some("d"), b"d", &delayed).await;

    let answered = traced_results(&results, 4).await;
    let by_id: HashMap<String, _> = answered
        .into_iter()
        .map(|(r, p, s)| (r.timer_id.clone().unwrap(), (p, s)))
        .collect();
    assert_eq!(
        by_id["tr-once"],
        (Some(ONCE.into()), Some(state[1].1.into()))
    );
    assert_eq!(by_id["tr-cron"], (Some(CRON.into()), None));
    assert_eq!(by_id["tr-delayed"].0.as_deref(), Some(DELAYED));

    let fires = got.fires(5, WAIT).await;
    let of = |id: &str| {
        fires
            .iter()
            .filter(|f| f.timer_id == id)
            .collect::<Vec<_>>()
    };
    assert_child(of("tr-once")[0], ONCE);
    assert_eq!(
        of("tr-once")[0]
            .headers
            .get("tracestate")
            .map(String::as_str),
        Some(state[1].1)
    );
    assert_child(of("tr-delayed")[0], DELAYED);
    let cron_fires = of("tr-cron");
    assert_eq!(cron_fires.len(), 3, "{fires:?}");
    for f in &cron_fires {
        assert_child(f, CRON);
    }
    assert_ne!(
        cron_fires[0].headers["traceparent"],
        cron_fires[1].headers["traceparent"]
    );

    // tr-late's state is in a checkpoint written after the fires above; then Redis loses
    // everything, the instance rebuilds, and tr-late fires in its trace.
    let last = fires.iter().map(|f| f.due_ms).max().unwrap();
    env.checkpointed_through(&[0, 1], last, WAIT).await;
    w.redis.flushall().await;
    let f = got.fires_until("tr-late", 2 * WAIT).await.pop().unwrap();
    assert_child(&f, ONCE);
    assert_eq!(
        f.headers.get("tracestate").map(String::as_str),
        Some(state[1].1)
    );
    svc.stop().await;
}
