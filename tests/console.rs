//! The web console in a real browser: headless Chromium, driven over WebDriver by
//! chromedriver (Debian's `chromium` and `chromium-driver`), against a running instance.
//! It finds a timer the test created, pauses it with the button, and the test checks
//! that the timer is paused and does not fire. Screenshots go to `target/console-*.png`.

mod common;

use common::{free_port, once_at, spawn_server, wait_for_port, TestEnv};
use fantoccini::{Client, ClientBuilder, Locator};
use ktimer::now_ms;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// A headless Chromium session through a chromedriver of its own.
async fn browser() -> Client {
    let port = free_port();
    let mut cmd = std::process::Command::new("chromedriver");
    cmd.arg(format!("--port={port}"));
    let log = std::env::temp_dir().join(format!("chromedriver-{port}.log"));
    spawn_server(cmd, log.to_str().unwrap());
    wait_for_port(port, "chromedriver");
    let profile = std::env::temp_dir().join(format!("ktimer-console-{port}"));
    // Without the background flags Chromium keeps calling out to a network it cannot reach.
    let args = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,900",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a chromedriver session (apt-get install chromium chromium-driver)")
}

/// Waits until the element at `css` shows `text`.
async fn until_text(c: &Client, css: &str, text: &str) {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            if e.text().await.unwrap_or_default().trim() == text {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < end,
            "{css} never showed {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("console-{name}.png")), png).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_pauses_a_timer_with_its_button_and_the_timer_does_not_fire() {
    let env = TestEnv::new("console", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let base = format!("http://{}", svc.status.borrow().admin_addr.unwrap());
    let c = browser().await;
    // Created once the browser is up: due soon, so a pause that did not work shows.
    let due = now_ms() + 8_000;
    env.send(&once_at("console-1", due, "x"), Some(0)).await;
    env.send(&once_at("console-2", due + 600_000, "y"), Some(0))
        .await;
    got.results(2, WAIT).await;

    c.goto(&format!("{base}/")).await.unwrap();
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(r#"tr.timer[data-id="console-1"]"#))
        .await
        .expect("the timer in the console's list");
    // Search by prefix, as a person would.
    let prefix = c
        .find(Locator::Css(r#"input[name="prefix"]"#))
        .await
        .unwrap();
    prefix.send_keys("console-1").await.unwrap();
    c.find(Locator::Id("search"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_text(&c, "#timers tr.timer td:nth-child(3)", "SCHEDULED").await;
    screenshot(&c, "list").await;
    c.find(Locator::Css(r#"a.timer-link"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_text(&c, "#timer-state", "SCHEDULED").await;
    // Its next fire, as the admin API previews it (UTC, as the console writes instants).
    let at = chrono::DateTime::from_timestamp_millis(due).unwrap();
    let shown = at.format("%Y-%m-%d %H:%M:%S%.3f").to_string();
    until_text(&c, "#next-fires li:first-child", &shown).await;
    c.find(Locator::Css(r#"button[data-action="pause"]"#))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until_text(&c, "#timer-state", "PAUSED").await;
    until_text(&c, "#next-fires li:first-child", "none").await;
    screenshot(&c, "timer").await;
    assert!(now_ms() < due, "the pause came too late to show anything");
    c.close().await.unwrap();

    // The API agrees, and the timer does not fire: a sentinel due after it fires alone.
    let t: serde_json::Value = reqwest::get(format!("{base}/timers/console-1"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t["state"], "PAUSED", "{t}");
    assert_eq!(t["history"][1]["op"], "pause", "{t}");
    env.send(&once_at("sentinel", due + 500, ""), Some(0)).await;
    let fires = got.fires_until("sentinel", WAIT).await;
    let ids: Vec<_> = fires.iter().map(|f| f.timer_id.as_str()).collect();
    assert_eq!(ids, ["sentinel"], "the paused timer fired");
    svc.stop().await;
}
