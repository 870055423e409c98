//! Applications bound to topics of their own (`topics` in the applications file): the
//! topic a command is read from proves which application it acts for; each bound
//! application's timer ids, results and fires are its own.

mod common;

use common::bound::*;
use ktimer::command::{CommandKind, Outcome};
use ktimer::now_ms;

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
