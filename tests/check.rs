//! `ktimer check` against a sound deployment and deliberately broken ones: the binary's
//! lines and exit code, on a real broker and a real Redis.

mod common;

use common::world::World;
use common::TestEnv;
use std::process::Command;

/// Runs `ktimer check` on `env`'s topics and the world's Redis: exit code and output.
fn check(env: &TestEnv, w: &World) -> (i32, String) {
    check_with(env, w, &[])
}

/// Like [`check`], with more flags.
fn check_with(env: &TestEnv, w: &World, extra: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ktimer"))
        .args(["check", "--brokers", &w.servers().brokers])
        .args(extra)
        .args(["--redis-url", &w.redis.url(), "--timeout-s", "10"])
        .args(env.topic_flags())
        .env("KTIMER_LOG", "error")
        .output()
        .expect("ktimer check runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{text}");
    (out.status.code().unwrap_or(-1), text)
}

/// `ktimer topics apply` for `env`'s topics on the world's broker, with more flags.
fn apply_topics(w: &World, env: &TestEnv, extra: &[&str]) {
    let applied = Command::new(env!("CARGO_BIN_EXE_ktimer"))
        .args(["topics", "apply", "--brokers", &w.servers().brokers])
        .args(extra)
        .args(env.topic_flags())
        .output()
        .expect("ktimer topics apply runs");
    assert!(applied.status.success(), "{applied:?}");
}

fn spec(name: &str, configs: &[(&str, &str)]) -> ktimer::topics::TopicSpec {
    ktimer::topics::TopicSpec {
        role: "test".into(),
        name: name.into(),
        partitions: 4,
        replication_factor: 1,
        configs: configs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn lines<'a>(text: &'a str, level: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(level)).collect()
}

/// Topics made by `ktimer topics apply` and a Redis that does not evict: no failure, exit
/// 0 (the test Redis has no AOF: a warning); with a schema registry, its subjects are
/// named (one missing: a warning) and one that does not answer is a failure. Then the broken ones: a state topic that is
/// not compacted, a missing topic, an evicting Redis: each a `fail` line naming it and
/// the fix, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_a_sound_deployment_and_names_what_is_broken() {
    let w = World::start("check", false);
    let good = TestEnv::named(&w.servers(), &common::unique("check"), 4, &[], false).await;
    let k = &good.args.kafka;
    apply_topics(&w, &good, &[]);
    let (code, text) = check(&good, &w);
    assert_eq!(code, 0, "{text}");
    assert!(lines(&text, "fail").is_empty(), "{text}");
    assert!(
        text.contains("compacted") && text.contains("noeviction"),
        "{text}"
    );
    assert_eq!(lines(&text, "warn").len(), 1, "only the AOF: {text}");

    // A schema registry with the commands topic's subject and not the results topic's.
    let subjects = vec![format!("{}-value", k.commands_topic)];
    let app = axum::Router::new().route(
        "/subjects",
        axum::routing::get(move || {
            let s = subjects.clone();
            async move { axum::Json(s) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (code, text) = check_with(&good, &w, &["--schema-registry-url", &url]);
    assert_eq!(code, 0, "{text}");
    let registered = format!(
        "ok    schema registry subject {}-value: registered",
        k.commands_topic
    );
    assert!(text.contains(&registered), "{text}");
    let missing = format!(
        "warn  schema registry subject {}-value: not registered",
        k.results_topic
    );
    assert!(text.contains(&missing), "{text}");
    // One that does not answer.
    let gone = format!("http://127.0.0.1:{}", common::free_port());
    let (code, text) = check_with(&good, &w, &["--schema-registry-url", &gone]);
    assert_eq!(code, 1, "{text}");
    assert!(
        lines(&text, "fail")
            .iter()
            .any(|l| l.contains("schema registry")),
        "{text}"
    );

    // A state topic that deletes by age instead of compacting.
    let plain = TestEnv::named(&w.servers(), &common::unique("check-plain"), 4, &[], false).await;
    let k = &plain.args.kafka;
    let topics = [
        &k.commands_topic,
        &k.results_topic,
        &k.fired_topic,
        &k.dead_letter_topic,
        &k.delay_topic,
    ];
    let mut specs: Vec<_> = topics.iter().map(|t| spec(t, &[])).collect();
    specs.push(spec(&k.state_topic, &[("cleanup.policy", "delete")]));
    ktimer::topics::apply(&ktimer::kafka::client(k), &specs)
        .await
        .expect("topics");
    let (code, text) = check(&plain, &w);
    assert_eq!(code, 1, "{text}");
    let fails = lines(&text, "fail");
    assert!(
        fails.len() == 1 && fails[0].contains("(state)") && fails[0].contains("cleanup.policy"),
        "{text}"
    );

    // A topic missing.
    let mut missing =
        TestEnv::named(&w.servers(), &common::unique("check-gone"), 4, &[], false).await;
    missing.args.kafka = good.args.kafka.clone();
    missing.args.kafka.fired_topic = "check-never-created".into();
    let (code, text) = check(&missing, &w);
    assert_eq!(code, 1, "{text}");
    let fails = lines(&text, "fail");
    assert!(
        fails.len() == 1 && fails[0].contains("check-never-created"),
        "{text}"
    );

    // An evicting Redis.
    let mut con = redis::Client::open(w.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut con)
        .unwrap();
    let (code, text) = check(&good, &w);
    assert_eq!(code, 1, "{text}");
    let fails = lines(&text, "fail");
    assert!(
        fails.len() == 1 && fails[0].contains("allkeys-lru"),
        "{text}"
    );
}

/// With the applications file, each bound application's topics are checked beside the
/// shared ones: all sound after `ktimer topics apply --applications`; an application
/// bound to topics nobody created fails, its commands topic named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_covers_every_bound_applications_topics() {
    let w = World::start("check-bound", false);
    let env = TestEnv::named(&w.servers(), &common::unique("checkb"), 4, &[], false).await;
    let k = &env.args.kafka;
    let bind = |apps: &[&str]| {
        let text: String = apps
            .iter()
            .map(|a| {
                let t = format!("{}.{a}", k.commands_topic);
                format!(
                    "[applications.{a}.topics]\ncommands = \"{t}\"\nresults = \"{t}.results\"\n"
                )
            })
            .collect();
        let file = std::env::temp_dir().join(format!("{}-{}.toml", k.commands_topic, apps.len()));
        std::fs::write(&file, text).unwrap();
        file.to_string_lossy().into_owned()
    };
    let (orders, both) = (bind(&["orders"]), bind(&["orders", "ghost"]));
    apply_topics(&w, &env, &["--applications", &orders]);
    let (code, text) = check_with(&env, &w, &["--applications", &orders]);
    assert_eq!(code, 0, "{text}");
    let state = format!(
        "topic {}.orders.state (state): 8 partitions, compacted",
        k.commands_topic
    );
    assert!(
        text.contains(&state),
        "the bound state topic is judged: {text}"
    );
    let (code, text) = check_with(&env, &w, &["--applications", &both]);
    assert_eq!(code, 1, "{text}");
    let ghost = format!("topic {}.ghost (commands)", k.commands_topic);
    assert!(
        lines(&text, "fail")
            .iter()
            .any(|l| l.contains(&ghost) && l.contains("missing")),
        "{text}"
    );
}
