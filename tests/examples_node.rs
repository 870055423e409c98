//! The Node.js examples (`examples/node/`, kafkajs and avsc) against a real broker and a
//! running ktimer: what a Node team would run first. Their output is what the test reads.
//! `npm ci` in `examples/node` installs their packages (scripts/test.sh does).

mod common;

use common::{scripts, TestEnv};
use ktimer::partitioner::Partitioner;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Runs `examples/node/SCRIPT` with `args`; its output, failing the test if it failed.
fn node(script: &str, args: &[&str]) -> String {
    let modules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/node/node_modules/kafkajs"
    );
    assert!(
        std::path::Path::new(modules).exists(),
        "run `npm ci` in examples/node first (scripts/test.sh does)"
    );
    scripts::run("node", "node", script, args)
}

/// The partition `producer.mjs` reports, `-> TOPIC[P]@OFFSET`.
fn partition_of(sent: &str) -> i32 {
    let p = sent.split('[').nth(1).and_then(|x| x.split(']').next());
    p.and_then(|p| p.parse().ok()).expect(sent)
}

/// A one-shot timer in a trace, a cron timer in Europe/Berlin and its cancel, an interval
/// timer with jitter and a fire limit, and a record through the delay topic, all from
/// Node: kafkajs partitions each command where ktimer keeps its timer, ktimer accepts them
/// (`read_results.mjs`), and `consume_fired.mjs` sees each fire once (a redelivered copy
/// skipped on its fire id), the interval's three, the delayed record, and the one-shot's
/// fire as a span of the producer's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_examples_create_cancel_delay_read_and_deduplicate() {
    let env = TestEnv::new("nodeex", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let brokers = env.argv[3].clone();
    let base = ["--brokers", &brokers, "--commands-topic", &k.commands_topic];
    let send = |what: &[&str]| node("producer.mjs", &[&base[..], what].concat());
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let sent = send(&[
        "--traceparent",
        parent,
        "once",
        "node-once",
        "--delay-ms",
        "1500",
        "--payload",
        "hello",
    ]);
    let want = Partitioner::Murmur2.partition(b"node-once", 2);
    assert_eq!(
        partition_of(&sent),
        want,
        "kafkajs partitions as ktimer does"
    );
    send(&[
        "cron",
        "node-cron",
        "--cron",
        "* * * * * *",
        "--time-zone",
        "Europe/Berlin",
        "--payload",
        "tick",
    ]);
    send(&[
        "every",
        "node-every",
        "--every-ms",
        "300",
        "--max-fires",
        "3",
        "--jitter-ms",
        "50",
        "--payload",
        "beat",
    ]);
    node(
        "delay.mjs",
        &[
            "--brokers",
            &brokers,
            "--delay-topic",
            &k.delay_topic,
            "send",
            "--target",
            &k.fired_topic,
            "--delay-ms",
            "1000",
            "--id",
            "node-delayed",
            "--value",
            "later",
        ],
    );
    let fire = got.fires_until("node-cron", MIN).await;
    send(&["cancel", "node-cron"]);
    let group = common::unique("nodeex-results");
    let results = node(
        "read_results.mjs",
        &[
            "--brokers",
            &brokers,
            "--results-topic",
            &k.results_topic,
            "--group",
            &group,
            "--count",
            "5",
        ],
    );
    scripts::assert_lines(
        &results,
        &[
            "result node-once CREATE_ONCE ACCEPTED state=SCHEDULED",
            "result node-cron CREATE_CRON ACCEPTED state=SCHEDULED",
            "result node-every CREATE_CRON ACCEPTED state=SCHEDULED",
            "result node-delayed CREATE_ONCE ACCEPTED state=SCHEDULED",
            "result node-cron CANCEL ACCEPTED state=CANCELLED",
        ],
    );
    // A redelivery of the one-shot's fire: the same record again, headers and all.
    let once = scripts::fire_of(&mut got, &fire, "node-once").await;
    scripts::redeliver(&env, &once).await;
    let fired = node(
        "consume_fired.mjs",
        &[
            "--brokers",
            &brokers,
            "--fired-topic",
            &k.fired_topic,
            "--group",
            &common::unique("nodeex-fired"),
            "--timeout-s",
            "15",
        ],
    );
    let count = |id: &str| {
        let prefix = format!("fired {id} ");
        fired.lines().filter(|l| l.starts_with(&prefix)).count()
    };
    assert_eq!(count("node-once"), 1, "{fired}");
    assert_eq!(count("node-every"), 3, "the interval's max_fires: {fired}");
    assert_eq!(count("node-delayed"), 1, "{fired}");
    assert!(count("node-cron") >= 1, "{fired}");
    let skipped = format!("duplicate skipped {}", once.fire_id);
    assert!(fired.contains(&skipped), "no {skipped:?} in {fired}");
    assert!(
        fired.contains("payload='hello'") && fired.contains("payload='later'"),
        "{fired}"
    );
    let ctx = ktimer::trace::Context::parse(parent, None).unwrap();
    let span = &ctx.child(&once.fire_id)[36..52];
    let traced = format!("trace=0af7651916cd43dd8448eb211c80319c span={span}");
    assert!(fired.contains(&traced), "no {traced:?} in {fired}");
    scripts::assert_never_early(&fired);
    svc.stop().await;
}

/// With a schema registry: `producer.mjs --schema-registry-url` registers the schema under
/// the topic's subject through the registry's REST API and frames the command in the
/// Confluent wire format; ktimer decodes and accepts it and fires the timer, and
/// `read_results.mjs` decodes ktimer's framed result with the writer schema it fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_examples_speak_the_confluent_wire_format_through_a_registry() {
    let url = common::registry::registry().await;
    let env = TestEnv::new("nodereg", 1, &["--schema-registry-url", &url]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let brokers = env.argv[3].clone();
    let registry = ["--schema-registry-url", url.as_str()];
    let base = ["--brokers", &brokers, "--commands-topic", &k.commands_topic];
    let once = [
        "once",
        "node-sr",
        "--delay-ms",
        "500",
        "--payload",
        "via registry",
    ];
    let sent = node(
        "producer.mjs",
        &[&base[..], &registry[..], &once[..]].concat(),
    );
    assert!(sent.contains("(confluent schema-id="), "{sent}");
    let fire = got.fires(1, MIN).await.remove(0);
    assert_eq!(
        (fire.timer_id.as_str(), fire.payload.as_slice()),
        ("node-sr", &b"via registry"[..])
    );
    assert!(fire.fired_ms >= fire.due_ms, "early");
    let group = common::unique("nodereg-results");
    let read = [
        "--results-topic",
        &k.results_topic,
        "--group",
        &group,
        "--count",
        "1",
    ];
    let results = node(
        "read_results.mjs",
        &[&["--brokers", &brokers][..], &read[..], &registry[..]].concat(),
    );
    let line = "result node-sr CREATE_ONCE ACCEPTED state=SCHEDULED";
    assert!(results.contains(line), "no {line:?} in {results}");
    svc.stop().await;
}
