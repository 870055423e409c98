//! The Python examples (`examples/python/`, confluent-kafka and fastavro) against a real
//! broker and a running ktimer: what a Python team would run first. Their output is what
//! the test reads.

mod common;

use common::{scripts, TestEnv};
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Runs `examples/python/SCRIPT` with `args`; its output, failing the test if it failed.
fn python(script: &str, args: &[&str]) -> String {
    scripts::run("python3", "python", script, args)
}

/// A one-shot timer, a cron timer in Europe/Berlin and its cancel, an interval timer with
/// jitter and a fire limit, produced by
/// `producer.py` (single-object Avro with fastavro's fingerprints, murmur2 partitioning):
/// ktimer accepts all three (`read_results.py`), the one-shot fires once and the cron fires
/// until cancelled (`consume_fired.py`), and a copy of the one-shot's fired record (a
/// redelivery) is skipped on its fire id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_examples_create_cancel_read_and_deduplicate() {
    let env = TestEnv::new("pyex", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let brokers = env.argv[3].clone();
    let base = ["--brokers", &brokers, "--commands-topic", &k.commands_topic];
    let send = |what: &[&str]| python("producer.py", &[&base[..], what].concat());
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    send(&[
        "--traceparent",
        parent,
        "once",
        "py-once",
        "--delay-ms",
        "1500",
        "--payload",
        "hello",
    ]);
    send(&[
        "cron",
        "py-cron",
        "--cron",
        "* * * * * *",
        "--time-zone",
        "Europe/Berlin",
        "--payload",
        "tick",
    ]);
    send(&[
        "every",
        "py-every",
        "--every-ms",
        "300",
        "--max-fires",
        "3",
        "--jitter-ms",
        "50",
        "--payload",
        "beat",
    ]);
    let fire = got.fires_until("py-cron", MIN).await;
    send(&["cancel", "py-cron"]);
    let group = common::unique("pyex-results");
    let results = python(
        "read_results.py",
        &[
            "--brokers",
            &brokers,
            "--results-topic",
            &k.results_topic,
            "--group",
            &group,
            "--count",
            "4",
        ],
    );
    scripts::assert_lines(
        &results,
        &[
            "result py-once CREATE_ONCE ACCEPTED state=SCHEDULED",
            "result py-cron CREATE_CRON ACCEPTED state=SCHEDULED",
            "result py-every CREATE_CRON ACCEPTED state=SCHEDULED",
            "result py-cron CANCEL ACCEPTED state=CANCELLED",
        ],
    );
    // A redelivery of the one-shot's fire: the same record again, headers and all.
    let once = scripts::fire_of(&mut got, &fire, "py-once").await;
    scripts::redeliver(&env, &once).await;
    let group = common::unique("pyex-fired");
    let fired = python(
        "consume_fired.py",
        &[
            "--brokers",
            &brokers,
            "--fired-topic",
            &k.fired_topic,
            "--group",
            &group,
            "--timeout-s",
            "15",
        ],
    );
    let lines: Vec<&str> = fired.lines().collect();
    let once_fires = lines
        .iter()
        .filter(|l| l.starts_with("fired py-once "))
        .count();
    let cron_fires = lines
        .iter()
        .filter(|l| l.starts_with("fired py-cron "))
        .count();
    assert_eq!(once_fires, 1, "{fired}");
    let every_fires = lines
        .iter()
        .filter(|l| l.starts_with("fired py-every "))
        .count();
    assert_eq!(every_fires, 3, "the interval's max_fires: {fired}");
    assert!(cron_fires >= 1, "{fired}");
    let skipped = format!("duplicate skipped {}", once.fire_id);
    assert!(fired.contains(&skipped), "no {skipped:?} in {fired}");
    assert!(fired.contains("payload='hello'"), "{fired}");
    // The fire continues the producer's trace, as a span of its own.
    let ctx = ktimer::trace::Context::parse(parent, None).unwrap();
    let span = &ctx.child(&once.fire_id)[36..52];
    let traced = format!("trace=4bf92f3577b34da6a3ce929d0e0e4736 span={span}");
    assert!(fired.contains(&traced), "no {traced:?} in {fired}");
    scripts::assert_never_early(&fired);
    svc.stop().await;
}

/// With a schema registry: `producer.py --schema-registry-url` encodes with confluent-kafka's
/// own AvroSerializer (the Confluent wire format, schema registered under the topic's
/// subject), ktimer decodes and accepts it and fires the timer, and `read_results.py`
/// decodes ktimer's result with confluent-kafka's AvroDeserializer: both directions
/// checked against an implementation that is not ktimer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_examples_speak_the_confluent_wire_format_through_a_registry() {
    let url = common::registry::registry().await;
    let env = TestEnv::new("pyreg", 1, &["--schema-registry-url", &url]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let brokers = env.argv[3].clone();
    let registry = ["--schema-registry-url", url.as_str()];
    let sent = python(
        "producer.py",
        &[
            &["--brokers", &brokers, "--commands-topic", &k.commands_topic],
            &registry[..],
            &[
                "once",
                "py-sr",
                "--delay-ms",
                "500",
                "--payload",
                "via registry",
            ],
        ]
        .concat(),
    );
    assert!(sent.contains("(confluent schema-id=1)"), "{sent}");
    let fire = got.fires(1, MIN).await.remove(0);
    assert_eq!(fire.timer_id, "py-sr");
    assert_eq!(fire.payload, b"via registry");
    assert!(fire.fired_ms >= fire.due_ms, "early");
    let group = common::unique("pyreg-results");
    let results = python(
        "read_results.py",
        &[
            &["--brokers", &brokers, "--results-topic", &k.results_topic],
            &["--group", &group, "--count", "1"],
            &registry[..],
        ]
        .concat(),
    );
    let line = "result py-sr CREATE_ONCE ACCEPTED state=SCHEDULED";
    assert!(results.contains(line), "no {line:?} in {results}");
    svc.stop().await;
}

/// `delay.py` (confluent-kafka, no schema, headers only) delays a record with a key, a
/// value that is no Avro and a custom header: it arrives itself at its time, and the id a
/// record names cancels it (a tombstone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_delay_example_delays_and_cancels_a_plain_record() {
    let env = TestEnv::new("pydelay", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let brokers = env.argv[3].clone();
    let base = ["--brokers", &brokers, "--delay-topic", &k.delay_topic];
    let delay = |what: &[&str]| python("delay.py", &[&base[..], what].concat());
    let target = k.fired_topic.as_str();
    let sent = delay(&[
        "send",
        "--target",
        target,
        "--delay-ms",
        "1500",
        "--key",
        "order-42",
        "--value",
        "{\"order\": 42}",
        "--header",
        "trace-id=4bf92f35",
    ]);
    let origin = sent
        .split_whitespace()
        .nth(1)
        .expect("sent TOPIC/P/O")
        .to_string();
    delay(&[
        "send",
        "--target",
        target,
        "--delay-ms",
        "60000",
        "--id",
        "py-later",
    ]);
    delay(&["cancel", "py-later"]);
    let results = got.results(3, MIN).await;
    let cancel = results.iter().find(|r| r.kind.as_deref() == Some("CANCEL"));
    assert_eq!(
        cancel.and_then(|r| r.state.as_deref()),
        Some("CANCELLED"),
        "{results:?}"
    );
    let f = got.fires(1, MIN).await.remove(0);
    assert_eq!(f.timer_id, origin);
    assert_eq!(f.key.as_deref(), Some(&b"order-42"[..]));
    assert_eq!(f.payload, b"{\"order\": 42}");
    assert_eq!(f.headers["trace-id"], "4bf92f35");
    assert!(
        f.fired_ms >= f.due_ms,
        "early by {} ms",
        f.due_ms - f.fired_ms
    );
    svc.stop().await;
}
