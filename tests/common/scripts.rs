//! Running the example scripts (`examples/python/`, `examples/node/`) and checking what
//! they print, the way a user runs them.

use super::{Collected, Fired, TestEnv};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use std::process::Command;
use std::time::Duration;

/// Runs `interpreter examples/DIR/SCRIPT args`; its output, failing the test if it failed.
pub fn run(interpreter: &str, dir: &str, script: &str, args: &[&str]) -> String {
    let path = format!("{}/examples/{dir}/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(interpreter)
        .arg(path)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("{interpreter} runs (scripts/install-deps.sh --for-tests installs it): {e}")
        });
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{script}: {text}");
    assert!(
        out.status.success(),
        "{script} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The fire of `timer_id` among `seen`, else the next one to arrive.
pub async fn fire_of(got: &mut Collected, seen: &[Fired], timer_id: &str) -> Fired {
    match seen.iter().find(|f| f.timer_id == timer_id) {
        Some(f) => f.clone(),
        None => got
            .fires_until(timer_id, Duration::from_secs(60))
            .await
            .pop()
            .unwrap(),
    }
}

/// Produces `f` to the fired topic again, headers and all: a redelivery.
pub async fn redeliver(env: &TestEnv, f: &Fired) {
    let mut headers = OwnedHeaders::new();
    for (name, value) in &f.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    let copy = FutureRecord::to(&env.args.kafka.fired_topic)
        .key(f.key.as_deref().unwrap_or_default())
        .payload(&f.payload)
        .headers(headers);
    env.producer
        .send(copy, Duration::from_secs(10))
        .await
        .expect("copy produced");
}

/// Every `fired ... late=Nms ...` line of a consumer's output says N >= 0.
pub fn assert_never_early(output: &str) {
    for l in output.lines().filter(|l| l.starts_with("fired ")) {
        let late = l.split("late=").nth(1).and_then(|x| x.split("ms").next());
        let late: i64 = late.and_then(|x| x.parse().ok()).expect(l);
        assert!(late >= 0, "early: {l}");
    }
}

/// Every line of `want` is in `output`.
pub fn assert_lines(output: &str, want: &[&str]) {
    for line in want {
        assert!(output.contains(line), "no {line:?} in {output}");
    }
}
