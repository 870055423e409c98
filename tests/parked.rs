//! Parking against a real redis-server (claim.lua): a paced application's due fires over
//! its quota wait in Redis, not in the trigger; a command on a parked timer acts on it
//! as on a pending one; parked fires hold the checkpoint's watermark back.

mod common;

use common::store::{World, T0};
use ktimer::command::{Callback, CommandKind, MisfirePolicy, TimerCommand};
use ktimer::store::ClaimWindow;
use ktimer::timer::{ApplyOutcome, Claimed};
use std::collections::BTreeMap;

fn once(app: &str, id: &str, at: i64, payload: &str) -> TimerCommand {
    TimerCommand {
        application: app.into(),
        at_ms: Some(at),
        callback: Some(Callback {
            payload: payload.into(),
            ..Default::default()
        }),
        ..TimerCommand::new(CommandKind::CreateOnce, id, &format!("c-{id}"))
    }
}

fn command(kind: CommandKind, app: &str, id: &str, tag: &str) -> TimerCommand {
    TimerCommand {
        application: app.into(),
        ..TimerCommand::new(kind, id, &format!("{tag}-{id}"))
    }
}

/// Claims what is due by `now` with `quotas`.
async fn claim(w: &World, now: i64, quotas: &[(&str, usize)]) -> Claimed {
    claim_bytes(w, now, quotas, usize::MAX).await
}

/// Claims what is due by `now` with `quotas`, answering at most about `max_bytes`.
async fn claim_bytes(w: &World, now: i64, quotas: &[(&str, usize)], max_bytes: usize) -> Claimed {
    let window = ClaimWindow {
        upto_ms: now,
        limit: 1_000,
        max_bytes,
        quotas: quotas.iter().map(|(a, q)| (a.to_string(), *q)).collect(),
        missed_before_ms: now - 60_000,
        now_ms: now,
        checkpoint: 0,
    };
    w.store.claim(0, w.epoch, window).await.expect("claim")
}

fn ids(c: &Claimed) -> Vec<String> {
    c.fires.iter().map(|f| f.timer_id.clone()).collect()
}

/// A paced backlog of large fires takes at most half of a claim's room: another
/// application's fire due meanwhile is in the same claim, not behind the backlog.
#[tokio::test]
async fn a_large_parked_backlog_leaves_room_in_a_claim_for_other_fires() {
    let mut w = World::new("parked-room").await;
    let big = "p".repeat(1_000);
    for i in 0..50 {
        w.apply(once("paced", &format!("p-{i}"), T0 + 1_000 + i, &big), T0)
            .await;
    }
    w.apply(once("other", "q-0", T0 + 2_000, "y"), T0).await;
    // The application has no quota left when its fires fall due: all of them are parked.
    let c = claim(&w, T0 + 1_500, &[("paced", 0)]).await;
    assert!(c.fires.is_empty(), "{:?}", ids(&c));
    assert_eq!(c.parked, vec![("paced".to_string(), 50)]);
    let c = claim_bytes(&w, T0 + 5_000, &[("paced", 1_000)], 8_000).await;
    let got = ids(&c);
    assert!(got.contains(&"q-0".to_string()), "{got:?}");
    let paced = got.iter().filter(|id| id.starts_with("p-")).count();
    assert!(
        (1..=5).contains(&paced),
        "{paced} paced fires in 8 kB: {got:?}"
    );
    assert!(c.full, "more is due");
    assert_eq!(c.parked, vec![("paced".to_string(), 50 - paced as u64)]);
}

#[tokio::test]
async fn a_paced_backlog_is_parked_and_claimed_at_its_quota() {
    let mut w = World::new("parked").await;
    for i in 0..10 {
        w.apply(once("paced", &format!("p-{i}"), T0 + 1_000 + i, "x"), T0)
            .await;
    }
    for i in 0..3 {
        w.apply(once("other", &format!("q-{i}"), T0 + 2_000, "y"), T0)
            .await;
    }
    let now = T0 + 5_000;
    let c = claim(&w, now, &[("paced", 4)]).await;
    assert_eq!(ids(&c), ["p-0", "p-1", "p-2", "p-3", "q-0", "q-1", "q-2"]);
    assert_eq!(c.parked, vec![("paced".to_string(), 6)]);
    assert!(!c.full);

    // The watermark of a checkpoint stays below the first parked fire.
    let page = w
        .store
        .checkpoint_page((0, w.epoch, 0), now, (100, 100))
        .await
        .unwrap();
    assert!(
        page.acked_through_ms < T0 + 1_004,
        "watermark {} passed a parked fire",
        page.acked_through_ms - T0
    );

    // A cancel of a parked timer removes it; an update to the same due replaces it.
    let cancel = command(CommandKind::Cancel, "paced", "p-5", "x");
    assert_eq!(w.apply(cancel, now).await.outcome, ApplyOutcome::Accepted);
    let mut update = once("paced", "p-6", T0 + 1_006, "new");
    update.kind = CommandKind::Update;
    update.request_id = "u-p-6".into();
    assert_eq!(w.apply(update, now).await.outcome, ApplyOutcome::Accepted);
    let pause = command(CommandKind::Pause, "paced", "p-7", "x");
    assert_eq!(w.apply(pause, now).await.outcome, ApplyOutcome::Accepted);

    let mut fired: BTreeMap<String, usize> = BTreeMap::new();
    let mut payloads = BTreeMap::new();
    for _ in 0..5 {
        let c = claim(&w, now, &[("paced", 2)]).await;
        for f in c.fires {
            *fired.entry(f.timer_id.clone()).or_default() += 1;
            payloads.insert(f.timer_id, f.def.callback.payload);
        }
    }
    let expected: BTreeMap<String, usize> = ["p-4", "p-6", "p-8", "p-9"]
        .into_iter()
        .map(|id| (id.to_string(), 1))
        .collect();
    assert_eq!(
        fired, expected,
        "each parked fire once; cancelled and paused none"
    );
    assert_eq!(payloads["p-6"], b"new", "the update's definition");
    let c = claim(&w, now, &[("paced", 2)]).await;
    assert!(c.fires.is_empty() && c.parked.is_empty(), "{:?}", c.parked);
}

#[tokio::test]
async fn parked_fires_of_an_application_no_longer_paced_drain_at_once() {
    let mut w = World::new("unpaced").await;
    for i in 0..6 {
        w.apply(once("app", &format!("a-{i}"), T0 + 1_000, ""), T0)
            .await;
    }
    let now = T0 + 2_000;
    let c = claim(&w, now, &[("app", 1)]).await;
    assert_eq!(
        (c.fires.len(), c.parked.clone()),
        (1, vec![("app".to_string(), 5)])
    );
    // Its limit was removed from the applications file: no quota any more.
    let c = claim(&w, now, &[]).await;
    assert_eq!(c.fires.len(), 5);
    assert!(c.parked.is_empty());
}

#[tokio::test]
async fn a_default_quota_paces_every_application_not_named() {
    let mut w = World::new("default").await;
    for app in ["x", "y", "vip"] {
        for i in 0..3 {
            w.apply(once(app, &format!("{app}-{i}"), T0 + 1_000, ""), T0)
                .await;
        }
    }
    let c = claim(&w, T0 + 2_000, &[("*", 1), ("vip", usize::MAX)]).await;
    let mut got = ids(&c);
    got.sort();
    assert_eq!(got, ["vip-0", "vip-1", "vip-2", "x-0", "y-0"]);
    let mut parked = c.parked.clone();
    parked.sort();
    assert_eq!(parked, vec![("x".to_string(), 2), ("y".to_string(), 2)]);
}

#[tokio::test]
async fn a_parked_cron_occurrence_fires_however_long_it_waited() {
    let mut w = World::new("parkedcron").await;
    let create = TimerCommand {
        application: "paced".into(),
        cron: Some("* * * * * *".into()),
        misfire: Some(MisfirePolicy::Skip),
        ..TimerCommand::new(CommandKind::CreateCron, "tick", "c")
    };
    assert_eq!(w.apply(create, T0).await.outcome, ApplyOutcome::Accepted);
    let c = claim(&w, T0 + 3_000, &[("paced", 1)]).await;
    let dues = |c: &Claimed| c.fires.iter().map(|f| f.due_ms - T0).collect::<Vec<_>>();
    assert_eq!(
        dues(&c),
        [0],
        "the occurrence at creation, then one a second"
    );
    assert_eq!(c.parked, vec![("paced".to_string(), 3)]);
    // Two minutes on, the parked occurrences were on time when parked: only their
    // delivery was paced, so the skip policy does not drop them.
    let c = claim(&w, T0 + 120_000, &[("paced", 3)]).await;
    assert_eq!(dues(&c), [1_000, 2_000, 3_000]);
}

#[tokio::test]
async fn a_paced_application_s_timers_wait_in_its_parked_set_from_the_start() {
    let mut w = World::new("parkedapply").await;
    for (id, at) in [
        ("soon", T0 + 1_000),
        ("later", T0 + 9_000),
        ("gone", T0 + 5_000),
    ] {
        let mut req = w.request(once("paced", id, at, ""), T0);
        req.paced = true;
        let (applied, _) = w.store.apply(&[req], &[], T0).await.expect("apply");
        assert_eq!(applied[0].outcome, ApplyOutcome::Accepted);
    }
    let cancel = command(CommandKind::Cancel, "paced", "gone", "x");
    assert_eq!(w.apply(cancel, T0).await.outcome, ApplyOutcome::Accepted);
    // Not in any minute slice: a claim without quotas still finds them, at their time.
    let c = claim(&w, T0 + 2_000, &[("paced", 10)]).await;
    assert_eq!(ids(&c), ["soon"]);
    assert!(c.parked.is_empty(), "nothing else due: {:?}", c.parked);
    assert_eq!(c.next_due_ms, Some(T0 + 9_000), "the parked set's next due");
    // Over the quota when due: counted as due and parked.
    let c = claim(&w, T0 + 9_500, &[("paced", 0)]).await;
    assert!(c.fires.is_empty());
    assert_eq!(c.parked, vec![("paced".to_string(), 1)]);
    let c = claim(&w, T0 + 9_500, &[("paced", 1)]).await;
    assert_eq!(ids(&c), ["later"]);
    let c = claim(&w, T0 + 60_000, &[]).await;
    assert!(
        c.fires.is_empty() && c.next_due_ms.is_none(),
        "the cancelled one never fires"
    );
}
