//! Applications bound to topics of their own (`topics` in the applications file): the
//! topic a command is read from proves which application it acts for; each bound
//! application's timer ids, results and fires are its own.

mod common;

use common::world::World;
use common::{servers, unique, Collected, Fired, Servers, TestEnv};
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
    bound_env_on(servers(), name, apps).await
}

/// Like [`bound_env`], on the given servers.
async fn bound_env_on(s: &Servers, name: &str, apps: &[&str]) -> (TestEnv, String) {
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
    let env = TestEnv::named(s, &base, 2, &["--applications", &file], true).await;
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

/// The lanes of the rebuild test: (application, commands topic, fired topic, results
/// topic, state topic).
fn lanes_of(env: &TestEnv, base: &str) -> Vec<(String, String, String, String, String)> {
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

/// Redis emptied (FLUSHALL) while two bound applications and the shared topic each hold
/// timers of the same ids in every state: each lane is rebuilt from its own state topic,
/// every timer in its state and lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_emptied_rebuilds_each_lane_from_its_own_state_topic() {
    let w = World::start("tenants-rebuild", false);
    let (env, base) = bound_env_on(&w.servers(), "tenants-rebuild", &["orders", "billing"]).await;
    let lanes = lanes_of(&env, &base);
    let mut got: Vec<Collected> = lanes.iter().map(|l| env.collect_from(&l.2, &l.3)).collect();
    let svc = env.start().await;
    let t0 = now_ms();
    let (fired_due, due) = (t0 + 1_000, t0 + 12_000);
    let once = CommandKind::CreateOnce;
    for (i, (app, commands, ..)) in lanes.iter().enumerate() {
        let cmds = vec![
            cmd(
                app,
                once,
                "f",
                &format!("{app}-f"),
                Some(fired_due),
                &format!("{app}-f"),
            ),
            cmd(
                app,
                once,
                "s",
                &format!("{app}-s"),
                Some(due),
                &format!("{app}-s"),
            ),
            cmd(
                app,
                once,
                "p",
                &format!("{app}-p"),
                Some(due),
                &format!("{app}-p"),
            ),
            cmd(
                app,
                once,
                "c",
                &format!("{app}-c"),
                Some(due),
                &format!("{app}-c"),
            ),
            cmd(
                app,
                CommandKind::Pause,
                "p",
                &format!("{app}-pause"),
                None,
                "",
            ),
            cmd(
                app,
                CommandKind::Cancel,
                "c",
                &format!("{app}-cancel"),
                None,
                "",
            ),
        ];
        send_in_order(&env, commands, &cmds).await;
        let rs = got[i].results(cmds.len(), MIN).await;
        assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted), "{rs:?}");
    }
    for (i, (app, _, _, _, state)) in lanes.iter().enumerate() {
        let f = got[i].fires_until("f", MIN).await;
        assert_eq!(payloads(&f), [format!("{app}-f")]);
        let p = env.args.kafka.partitioner.partition(b"f", 2);
        env.checkpointed_through_on(state, &[p], fired_due, MIN)
            .await;
    }
    w.redis.flushall().await;
    assert!(now_ms() < due - 3_000, "flushed well before the due time");

    // After the rebuild: the paused timer is paused, of its application, in its lane
    // (resumed now, it fires at its due time; a timer restored in another lane would be
    // unknown here, of another application REJECTED); the scheduled one fires; the
    // cancelled and the fired one (tombstones in the state topic) do not.
    for (i, (app, commands, ..)) in lanes.iter().enumerate() {
        let after = vec![
            cmd(
                app,
                CommandKind::Resume,
                "p",
                &format!("{app}-resume"),
                None,
                "",
            ),
            cmd(
                app,
                once,
                "end",
                &format!("{app}-end"),
                Some(due + 1_000),
                "end",
            ),
        ];
        send_in_order(&env, commands, &after).await;
        let rs = got[i].results(after.len(), MIN).await;
        let resumed = outcome_of(&rs, &format!("{app}-resume"));
        assert_eq!(resumed.outcome, Outcome::Accepted, "{app}: {resumed:?}");
    }
    for (i, (app, ..)) in lanes.iter().enumerate() {
        let fires = got[i].fires_until("end", MIN).await;
        let mut seen = payloads(&fires);
        seen.sort();
        // "f" fired before the flush; once more only if acknowledged after the checkpoint
        // read back, which the wait above rules out.
        let mut expected = ["end".to_string(), format!("{app}-p"), format!("{app}-s")];
        expected.sort();
        assert_eq!(seen, expected, "{app}");
        assert!(fires.iter().all(|f| f.fired_ms >= f.due_ms), "never early");
    }
    assert!(
        svc.metric("ktimer_redis_replays_total").unwrap_or(0.0) >= 3.0,
        "every lane rebuilt"
    );
    svc.stop().await;
}

/// Timers an application created on the shared topic before it was bound keep firing
/// there and can be cancelled there; nothing new is created for it on the shared topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_created_before_the_binding_keep_firing_and_can_be_cancelled() {
    let (env, base) = bound_env("tenants-upgrade", &["orders"]).await;
    let mut before = env.args.clone();
    before.applications = None;
    let mut got = env.collect();
    let svc = env.start_with(before).await;
    let t = now_ms() + 8_000;
    let once = CommandKind::CreateOnce;
    let k = env.args.kafka.clone();
    let old = vec![
        cmd("orders", once, "legacy-1", "l1", Some(t), "legacy-1"),
        cmd("orders", once, "legacy-2", "l2", Some(t), "legacy-2"),
    ];
    send_in_order(&env, &k.commands_topic, &old).await;
    let rs = got.results(old.len(), MIN).await;
    assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted), "{rs:?}");
    svc.stop().await;

    // Bound from now on.
    let svc = env.start().await;
    let orders = Bound::of(&base, "orders");
    let later = vec![
        cmd(
            "orders",
            CommandKind::Cancel,
            "legacy-2",
            "l2-cancel",
            None,
            "",
        ),
        cmd("orders", once, "legacy-3", "l3", Some(t), "legacy-3"),
        cmd("quiet", once, "end", "end", Some(t + 1_000), "end"),
    ];
    send_in_order(&env, &k.commands_topic, &later).await;
    let rs = got.results(later.len(), MIN).await;
    assert_eq!(
        outcome_of(&rs, "l2-cancel").outcome,
        Outcome::Accepted,
        "{rs:?}"
    );
    let refused = outcome_of(&rs, "l3");
    assert_eq!(refused.outcome, Outcome::Rejected);
    let why = refused.reason.as_deref().unwrap_or_default();
    assert!(why.contains(&orders.commands), "{why}");
    let fires = got.fires_until("end", MIN).await;
    assert_eq!(
        payloads(&fires),
        ["legacy-1", "end"],
        "legacy-1 fires, legacy-2 cancelled"
    );
    assert!(fires[0].fired_ms >= t, "never early");
    svc.stop().await;
}
