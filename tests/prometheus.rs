//! ktimer's metrics read back through a real Prometheus (Debian's `prometheus`, started on
//! loopback, scraping a running instance every second): the fire counter and the lateness
//! histogram of timers the test fired.

mod common;

use common::world::http_get;
use common::{free_port, once_at, spawn_server, wait_for_port, TestEnv};
use ktimer::now_ms;
use std::process::Command as Proc;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Percent-encodes a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant query, if Prometheus has a result.
fn query(addr: &str, q: &str) -> Option<f64> {
    let (code, body) = http_get(addr, &format!("/api/v1/query?query={}", encode(q)))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    assert_eq!(code, 200, "{body}");
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_reads_the_fire_counter_and_the_lateness_histogram() {
    let env = TestEnv::new("prom", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let admin = svc.status.borrow().admin_addr.expect("admin port");
    let dir = std::env::temp_dir().join(format!("ktimer-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ktimer\n    static_configs:\n      - targets: [\"{admin}\"]\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let mut prom = Proc::new("prometheus");
    prom.args([
        &format!("--config.file={}", config.display()),
        &format!("--storage.tsdb.path={}", dir.join("data").display()),
        &format!("--web.listen-address=127.0.0.1:{port}"),
    ]);
    spawn_server(prom, dir.join("prometheus.log").to_str().unwrap());
    wait_for_port(port, "prometheus");
    let addr = format!("127.0.0.1:{port}");

    let n = 50;
    let due = now_ms() + 2_000;
    for i in 0..n {
        env.send(&once_at(&format!("p-{i}"), due + i as i64 * 10, ""), None)
            .await;
    }
    let fires = got.fires(n, MIN).await;
    let worst = fires.iter().map(|f| f.fired_ms - f.due_ms).max().unwrap();

    // Wait until a scrape after the last fire reached Prometheus.
    let delivered = r#"sum(ktimer_fires_total{job="ktimer",outcome="delivered"})"#;
    let deadline = tokio::time::Instant::now() + MIN;
    while query(&addr, delivered) != Some(n as f64) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus never saw {n} fires: {:?}",
            query(&addr, delivered)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let count = query(&addr, "sum(ktimer_fire_lateness_seconds_count)").unwrap();
    assert_eq!(count, n as f64, "one lateness sample per fire");
    // Every fire is in the bucket of its lateness: the +Inf bucket holds all, and the
    // bucket above the worst lateness too.
    let bound = ktimer::metrics::LATENESS_BUCKETS
        .iter()
        .copied()
        .find(|b| *b * 1000.0 >= worst as f64)
        .expect("a bucket above the worst lateness");
    let within = query(
        &addr,
        &format!("sum(ktimer_fire_lateness_seconds_bucket{{le=\"{bound}\"}})"),
    )
    .unwrap();
    assert_eq!(
        within, n as f64,
        "all {n} fires within {bound} s (worst {worst} ms)"
    );
    let p99 = query(
        &addr,
        "histogram_quantile(0.99, sum by (le) (ktimer_fire_lateness_seconds_bucket))",
    )
    .unwrap();
    println!("prometheus: {count} fires, lateness p99 {p99} s (worst measured {worst} ms)");
    assert!(
        p99 <= bound,
        "p99 {p99} s above the bucket of the worst fire {bound} s"
    );
    svc.stop().await;
}

/// The sum of a metric's samples whose line starts with `name` (any labels).
fn metric(text: &str, name: &str) -> Option<f64> {
    let vals: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!vals.is_empty()).then(|| vals.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_partition_gauges_describe_what_the_instance_holds() {
    let env = TestEnv::new("gauges", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let admin = svc
        .status
        .borrow()
        .admin_addr
        .expect("admin port")
        .to_string();
    let far = now_ms() + 3_600_000;
    for i in 0..30 {
        env.send(&once_at(&format!("g-{i}"), far, ""), None).await;
    }
    got.results(30, MIN).await;
    // Sampled every 5 s: wait for a sample that saw all 30.
    let deadline = tokio::time::Instant::now() + MIN;
    let text = loop {
        let (_, text) = http_get(&admin, "/metrics").expect("metrics");
        if metric(&text, "ktimer_pending_timers") == Some(30.0) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pending never 30:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(metric(&text, "ktimer_owned_partitions"), Some(2.0));
    assert_eq!(
        metric(&text, "ktimer_trigger_alive"),
        Some(2.0),
        "both triggers run"
    );
    assert_eq!(metric(&text, "ktimer_overdue_fires"), Some(0.0));
    assert_eq!(
        metric(&text, "ktimer_rebalances_total"),
        Some(1.0),
        "one assignment"
    );
    assert!(metric(&text, "ktimer_intake_batch_seconds_count").unwrap() >= 1.0);
    assert!(
        text.contains("ktimer_redis_call_seconds_count{op=\"apply\"}"),
        "apply calls timed"
    );
    assert!(text.contains("ktimer_commands_total{kind=\"CREATE_ONCE\",outcome=\"accepted\"} 30"));
    // The consumer's statistics arrive every 5 s: the lag of the consumed partitions is 0.
    let deadline = tokio::time::Instant::now() + MIN;
    loop {
        let (_, text) = http_get(&admin, "/metrics").expect("metrics");
        if text.contains("ktimer_consumer_lag{") {
            assert_eq!(metric(&text, "ktimer_consumer_lag"), Some(0.0), "{text}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no consumer lag reported"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    svc.stop().await;
}
