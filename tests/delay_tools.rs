//! The delay topic from the command line: the kcat example of docs/delay.md (a producer
//! ktimer did not write) and `ktimer send --via delay-topic`. (The delay topic itself:
//! `delay.rs`.)

mod common;

use common::TestEnv;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// `ktimer send --via delay-topic` sends a plain record with the contract's headers (and
/// prints them); it arrives itself, RAW, with the custom header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ktimer_send_via_the_delay_topic_sends_a_plain_record() {
    let env = TestEnv::new("delay-send", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ktimer"))
        .args(["send", "--via", "delay-topic", "--brokers", &k.brokers])
        .args([
            "--delay-topic",
            &k.delay_topic,
            "--fired-topic",
            &k.fired_topic,
        ])
        .args([
            "--timer-id",
            "via-cli",
            "--delay-ms",
            "700",
            "--payload",
            "hi",
        ])
        .args(["--header", "origin=cli"])
        .output()
        .expect("ktimer send runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!("ktimer-delay-ms=700 ktimer-target-topic={}", k.fired_topic);
    assert!(text.contains(&want), "{text}");
    let f = got.fires(1, MIN).await.remove(0);
    assert_eq!(
        (f.timer_id.as_str(), &f.payload[..]),
        ("via-cli", &b"hi"[..])
    );
    assert_eq!(f.headers["origin"], "cli");
    assert!(f.fired_ms >= f.due_ms);
    svc.stop().await;
}

/// The command-line example of docs/delay.md, with kcat (a producer ktimer did not write):
/// a record delayed with `-H` headers arrives itself; a tombstone (`-Z -K:`, a key and an
/// empty value sent as null) with the id cancels another before its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kcat_example_delays_and_cancels_a_record() {
    let env = TestEnv::new("delay-kcat", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let k = &env.args.kafka;
    let kcat = |input: &str, args: &[&str]| {
        let mut child = std::process::Command::new("kcat")
            .args(["-P", "-b", &k.brokers, "-t", &k.delay_topic])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("kcat runs (scripts/install-deps.sh --for-tests installs it)");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "kcat failed");
    };
    let target = format!("ktimer-target-topic={}", k.fired_topic);
    kcat(
        "later\n",
        &[
            "-k",
            "r-7",
            "-H",
            "ktimer-delay-ms=3000",
            "-H",
            &target,
            "-H",
            "ktimer-timer-id=reminder-7",
        ],
    );
    kcat(
        "reminder-7:\n",
        &["-Z", "-K:", "-H", "ktimer-timer-id=reminder-7"],
    );
    kcat(
        "{\"order\": 42}\n",
        &[
            "-k",
            "order-42",
            "-H",
            "ktimer-delay-ms=1000",
            "-H",
            &target,
            "-H",
            "trace-id=4bf92f35",
        ],
    );
    let r = got.results(3, MIN).await;
    let cancel = r.iter().find(|r| r.kind.as_deref() == Some("CANCEL"));
    assert_eq!(
        cancel.and_then(|r| r.state.as_deref()),
        Some("CANCELLED"),
        "{r:?}"
    );
    let f = got.fires(1, MIN).await.remove(0);
    assert_eq!(f.key.as_deref(), Some(&b"order-42"[..]));
    assert_eq!(f.payload, b"{\"order\": 42}");
    assert_eq!(f.headers["trace-id"], "4bf92f35");
    assert!(f.fired_ms >= f.due_ms);
    let more = tokio::time::timeout(Duration::from_secs(4), got.fired.recv()).await;
    assert!(
        more.is_err(),
        "the cancelled record was delivered: {more:?}"
    );
    svc.stop().await;
}
