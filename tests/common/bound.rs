//! Applications bound to topics of their own in tests: the applications file, its
//! topics created by `ktimer topics apply --applications`, commands per lane and what
//! each lane's results and fired topics received.

use super::{servers, unique, Collected, Fired, Servers, TestEnv};
use ktimer::command::{Callback, CommandKind, CommandResult, DeliveryMode, TimerCommand};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

/// How long a test waits for results and fires.
pub const MIN: Duration = Duration::from_secs(60);

/// The topics of a bound application in a test named `base`.
pub struct Bound {
    pub commands: String,
    pub results: String,
    pub fired: String,
}

impl Bound {
    pub fn of(base: &str, app: &str) -> Bound {
        Bound {
            commands: format!("{base}.{app}.commands"),
            results: format!("{base}.{app}.results"),
            fired: format!("{base}.{app}.fired"),
        }
    }
}

/// An environment whose applications file binds `apps`, their topics created by
/// `ktimer topics apply --applications` (the command a deployment runs).
pub async fn bound_env(name: &str, apps: &[&str]) -> (TestEnv, String) {
    bound_env_on(servers(), name, apps).await
}

/// Like [`bound_env`], with more `ktimer run` flags.
pub async fn bound_env_with(name: &str, apps: &[&str], extra: &[&str]) -> (TestEnv, String) {
    bound_env_full(servers(), name, apps, extra).await
}

/// Like [`bound_env`], on the given servers.
pub async fn bound_env_on(s: &Servers, name: &str, apps: &[&str]) -> (TestEnv, String) {
    bound_env_full(s, name, apps, &[]).await
}

async fn bound_env_full(
    s: &Servers,
    name: &str,
    apps: &[&str],
    extra: &[&str],
) -> (TestEnv, String) {
    let base = unique(name);
    let mut text = String::new();
    for app in apps {
        let b = Bound::of(&base, app);
        text += &format!(
            "[applications.{app}.topics]\ncommands = \"{}\"\nresults = \"{}\"\nfired = \"{}\"\n",
            b.commands, b.results, b.fired
        );
    }
    let file = std::env::temp_dir().join(format!("{base}.toml"));
    std::fs::write(&file, text).unwrap();
    let file = file.to_string_lossy().into_owned();
    let env = TestEnv::named(
        s,
        &base,
        2,
        &[&["--applications", file.as_str()], extra].concat(),
        true,
    )
    .await;
    let k = &env.args.kafka;
    let out = Command::new(env!("CARGO_BIN_EXE_ktimer"))
        .args([
            "topics",
            "apply",
            "--partitions",
            "2",
            "--applications",
            &file,
        ])
        .args(["--brokers", &k.brokers])
        .args(env.topic_flags())
        .output()
        .expect("ktimer topics apply");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for app in apps {
        let state = format!("{}.state", Bound::of(&base, app).commands);
        assert!(
            said.contains(&state),
            "the state topic {state} is created: {said}"
        );
    }
    (env, base)
}

/// A command of `app` (`""`: none named) with request id `req`, delivering `payload` raw.
pub fn cmd(
    app: &str,
    kind: CommandKind,
    id: &str,
    req: &str,
    at_ms: Option<i64>,
    payload: &str,
) -> TimerCommand {
    let mut c = TimerCommand::new(kind, id, req);
    c.application = app.into();
    c.at_ms = at_ms;
    if kind == CommandKind::CreateOnce {
        c.callback = Some(Callback {
            payload: payload.as_bytes().to_vec(),
            mode: DeliveryMode::Raw,
            ..Default::default()
        });
    }
    c
}

/// Sends `cmds` to `topic` one after the other (each acknowledged before the next).
pub async fn send_in_order(env: &TestEnv, topic: &str, cmds: &[TimerCommand]) {
    for c in cmds {
        env.send_many_to(topic, std::slice::from_ref(c), None).await;
    }
}

/// The request ids of `cmds`.
pub fn requests(cmds: &[TimerCommand]) -> BTreeSet<String> {
    cmds.iter().map(|c| c.request_id.clone()).collect()
}

/// Waits for the results of `sent` on one results topic and for the fire of `end` on its
/// fired topic: every result there is one of `sent`'s (none of another lane's).
pub async fn lane_output(
    got: &mut Collected,
    sent: &[TimerCommand],
    end: &str,
) -> (Vec<CommandResult>, Vec<Fired>) {
    let results = got.results(sent.len(), MIN).await;
    let seen: BTreeSet<String> = results
        .iter()
        .map(|r| r.request_id.clone().unwrap_or_default())
        .collect();
    assert_eq!(seen, requests(sent), "exactly this lane's results");
    let fires = got.fires_until(end, MIN).await;
    (results, fires)
}

pub fn outcome_of<'a>(results: &'a [CommandResult], req: &str) -> &'a CommandResult {
    results
        .iter()
        .find(|r| r.request_id.as_deref() == Some(req))
        .expect("result")
}

/// The payloads of `fires` in the order received.
pub fn payloads(fires: &[Fired]) -> Vec<String> {
    fires
        .iter()
        .map(|f| String::from_utf8_lossy(&f.payload).into_owned())
        .collect()
}

/// The lanes of the rebuild test: (application, commands topic, fired topic, results
/// topic, state topic).
pub fn lanes_of(env: &TestEnv, base: &str) -> Vec<(String, String, String, String, String)> {
    let k = &env.args.kafka;
    let mut all = vec![(
        "quiet".to_string(),
        k.commands_topic.clone(),
        k.fired_topic.clone(),
        k.results_topic.clone(),
        k.state_topic.clone(),
    )];
    for app in ["orders", "billing"] {
        let b = Bound::of(base, app);
        let state = format!("{}.state", b.commands);
        all.push((app.to_string(), b.commands, b.fired, b.results, state));
    }
    all
}
