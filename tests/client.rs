//! The Rust client API against a real broker and a running ktimer: typed commands sent,
//! each call resolving with its own result.

mod common;

use common::TestEnv;
use ktimer::client::{Client, Command};
use ktimer::command::Outcome;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// A one-shot create, a cron create, a pause of an unknown timer and a cancel, each
/// awaited: every call resolves with its own command's result (accepted with the new
/// state, or rejected with the reason), and the one-shot fires with the payload it was
/// given. Ten calls at once resolve each with its own result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_resolves_with_its_commands_result() {
    let env = TestEnv::new("client", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let client = Client::connect(&env.args.kafka).await.expect("client");
    let once = Command::once("cl-once")
        .delay_ms(1_000)
        .payload("hi")
        .raw()
        .build();
    let r = client.call(once.clone(), WAIT).await.expect("result");
    assert_eq!(
        (r.outcome, r.request_id.as_deref()),
        (Outcome::Accepted, Some(once.request_id.as_str()))
    );
    assert_eq!(r.state.as_deref(), Some("SCHEDULED"));
    let cron = Command::cron("cl-cron", "0 30 9 * * Mon-Fri")
        .time_zone("Europe/Berlin")
        .build();
    assert_eq!(
        client.call(cron, WAIT).await.unwrap().outcome,
        Outcome::Accepted
    );
    let r = client
        .call(Command::pause("cl-none").build(), WAIT)
        .await
        .unwrap();
    assert_eq!(r.outcome, Outcome::Rejected);
    assert!(
        r.reason
            .as_deref()
            .unwrap_or_default()
            .contains("unknown timer"),
        "{r:?}"
    );
    let r = client
        .call(Command::cancel("cl-cron").build(), WAIT)
        .await
        .unwrap();
    assert_eq!(
        (r.outcome, r.state.as_deref()),
        (Outcome::Accepted, Some("CANCELLED"))
    );
    let calls = (0..10).map(|i| {
        let cmd = Command::once(&format!("cl-many-{i}"))
            .delay_ms(60_000)
            .build();
        let client = &client;
        async move { (cmd.timer_id.clone(), client.call(cmd, WAIT).await.unwrap()) }
    });
    for (id, r) in futures::future::join_all(calls).await {
        assert_eq!(r.timer_id.as_deref(), Some(id.as_str()));
        assert_eq!(r.outcome, Outcome::Accepted);
    }
    let fire = got
        .fires_until("cl-once", Duration::from_secs(60))
        .await
        .pop()
        .unwrap();
    assert_eq!(fire.payload, b"hi");
    assert!(fire.fired_ms >= fire.due_ms);
    svc.stop().await;
}
