//! Applications bound to topics of their own (`topics` in the applications file): the
//! topic a command is read from proves which application it acts for; each bound
//! application's timer ids, results and fires are its own.

mod common;

use common::{servers, unique, Collected, Fired, TestEnv};
use ktimer::command::{Callback, CommandKind, CommandResult, DeliveryMode, Outcome, TimerCommand};
use ktimer::now_ms;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// The topics of a bound application in a test named `base`.
struct Bound {
    commands: String,
    results: String,
    fired: String,
}

impl Bound {
    fn of(base: &str, app: &str) -> Bound {
        Bound {
            commands: format!("{base}.{app}.commands"),
            results: format!("{base}.{app}.results"),
            fired: format!("{base}.{app}.fired"),
        }
    }
}

/// An environment whose applications file binds `apps`, their topics created by
/// `ktimer topics apply --applications` (the command a deployment runs).
async fn bound_env(name: &str, apps: &[&str]) -> (TestEnv, String) {
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
    let env = TestEnv::named(servers(), &base, 2, &["--applications", &file], true).await;
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
        .args([
            "--brokers",
            &k.brokers,
            "--commands-topic",
            &k.commands_topic,
        ])
        .args([
            "--results-topic",
            &k.results_topic,
            "--fired-topic",
            &k.fired_topic,
        ])
        .args([
            "--dead-letter-topic",
            &k.dead_letter_topic,
            "--state-topic",
            &k.state_topic,
        ])
        .args(["--delay-topic", &k.delay_topic])
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
fn cmd(
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
async fn send_in_order(env: &TestEnv, topic: &str, cmds: &[TimerCommand]) {
    for c in cmds {
        env.send_many_to(topic, std::slice::from_ref(c), None).await;
    }
}

/// The request ids of `cmds`.
fn requests(cmds: &[TimerCommand]) -> BTreeSet<String> {
    cmds.iter().map(|c| c.request_id.clone()).collect()
}

/// Waits for the results of `sent` on one results topic and for the fire of `end` on its
/// fired topic: every result there is one of `sent`'s (none of another lane's).
async fn lane_output(
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

fn outcome_of<'a>(results: &'a [CommandResult], req: &str) -> &'a CommandResult {
    results
        .iter()
        .find(|r| r.request_id.as_deref() == Some(req))
        .expect("result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_applications_act_only_for_themselves_and_each_has_its_own_order_42() {
    let (env, base) = bound_env("tenants", &["orders", "billing"]).await;
    let (orders, billing) = (Bound::of(&base, "orders"), Bound::of(&base, "billing"));
    let k = env.args.kafka.clone();
    let mut got_orders = env.collect_from(&orders.fired, &orders.results);
    let mut got_billing = env.collect_from(&billing.fired, &billing.results);
    let mut got_shared = env.collect();
    let svc = env.start().await;
    let t = now_ms() + 5_000;
    let once = CommandKind::CreateOnce;
    let on_orders = vec![
        cmd("orders", once, "order-42", "o-create", Some(t), "orders"),
        cmd(
            "orders",
            CommandKind::Pause,
            "order-42",
            "o-pause",
            None,
            "",
        ),
        cmd("", CommandKind::Resume, "order-42", "o-resume", None, ""),
        // Whoever may write orders' topic acts for orders only.
        cmd(
            "billing",
            once,
            "order-43",
            "o-as-billing",
            Some(t),
            "forged",
        ),
        cmd("orders", once, "end", "o-end", Some(t + 1_500), "end"),
    ];
    let on_billing = vec![
        cmd(
            "billing",
            once,
            "order-42",
            "b-create",
            Some(t + 300),
            "billing-1",
        ),
        cmd(
            "billing",
            CommandKind::Pause,
            "order-42",
            "b-pause",
            None,
            "",
        ),
        cmd(
            "billing",
            CommandKind::Cancel,
            "order-42",
            "b-cancel",
            None,
            "",
        ),
        cmd(
            "default",
            once,
            "order-42",
            "b-again",
            Some(t + 600),
            "billing-2",
        ),
        cmd("billing", once, "end", "b-end", Some(t + 1_500), "end"),
    ];
    let on_shared = vec![
        cmd(
            "quiet",
            once,
            "order-42",
            "s-create",
            Some(t + 900),
            "shared",
        ),
        // The shared topic cannot act for a bound application.
        cmd("orders", once, "order-44", "s-as-orders", Some(t), "forged"),
        cmd("quiet", once, "end", "s-end", Some(t + 1_500), "end"),
    ];
    tokio::join!(
        send_in_order(&env, &orders.commands, &on_orders),
        send_in_order(&env, &billing.commands, &on_billing),
        send_in_order(&env, &k.commands_topic, &on_shared),
    );

    let (results, fires) = lane_output(&mut got_orders, &on_orders, "end").await;
    for req in ["o-create", "o-pause", "o-resume", "o-end"] {
        let r = outcome_of(&results, req);
        assert_eq!(
            (r.outcome, r.application.as_deref()),
            (Outcome::Accepted, Some("orders")),
            "{r:?}"
        );
    }
    let forged = outcome_of(&results, "o-as-billing");
    assert_eq!(forged.outcome, Outcome::Rejected);
    let why = forged.reason.as_deref().unwrap_or_default();
    assert!(why.contains("belongs to application orders"), "{why}");
    assert_eq!(
        payloads(&fires),
        ["orders", "end"],
        "order-42 resumed fires; the forged create never"
    );
    assert!(fires[0].fired_ms >= t, "never early");

    let (results, fires) = lane_output(&mut got_billing, &on_billing, "end").await;
    assert!(
        results.iter().all(|r| r.outcome == Outcome::Accepted),
        "{results:?}"
    );
    assert!(results
        .iter()
        .all(|r| r.application.as_deref() == Some("billing")));
    assert_eq!(
        payloads(&fires),
        ["billing-2", "end"],
        "the cancelled one never fires"
    );
    assert!(fires[0].fired_ms >= t + 600, "never early");

    let (results, fires) = lane_output(&mut got_shared, &on_shared, "end").await;
    let refused = outcome_of(&results, "s-as-orders");
    assert_eq!(refused.outcome, Outcome::Rejected);
    let why = refused.reason.as_deref().unwrap_or_default();
    assert!(
        why.contains(&format!(
            "bound to its own commands topic {}",
            orders.commands
        )),
        "{why}"
    );
    assert_eq!(
        outcome_of(&results, "s-create").outcome,
        Outcome::Accepted,
        "ids are per lane"
    );
    assert_eq!(payloads(&fires), ["shared", "end"]);
    svc.stop().await;
}

/// The payloads of `fires` in the order received.
fn payloads(fires: &[Fired]) -> Vec<String> {
    fires
        .iter()
        .map(|f| String::from_utf8_lossy(&f.payload).into_owned())
        .collect()
}
