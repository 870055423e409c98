//! A timer's history as the admin API reads it from the store, against a real
//! redis-server: commands, rejections and fires, bounded by count and age, the extra fire
//! of a FIRE_NOW, and the short create entry of a new timer (the counts and the listing:
//! `list.rs`).

mod common;

use common::store::{once_of as once, op_of as op, World, T0};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::{Ack, EntryOutcome, History, HistoryEntry};
use ktimer::timer::{ApplyOutcome, TimerState};

/// The acknowledgement of fire `member` produced at `fired_ms` in `attempt` (a dead
/// letter when `dead` says why), as the trigger sends it when it holds no record.
fn produced(member: &str, fired_ms: i64, attempt: i32, dead: Option<&str>) -> Ack {
    Ack::Produced {
        member: member.into(),
        fired_ms,
        attempt,
        dead: dead.map(String::from),
    }
}
#[tokio::test]
async fn a_timer_history_holds_its_commands_rejections_and_fires() {
    let mut w = World::new("history").await;
    let due = T0 + 1_000;
    assert_eq!(
        w.apply(once("app", "h", due), T0).await.outcome,
        ApplyOutcome::Accepted
    );
    // Rejected: it is live. Recorded (its own application's command).
    let again = w.apply(once("app", "h", due), T0 + 10).await;
    assert_eq!(again.outcome, ApplyOutcome::Rejected);
    // Another application's command: rejected, and it must not touch the timer.
    let foreign = w
        .apply(op("intruder", CommandKind::Cancel, "h"), T0 + 20)
        .await;
    assert_eq!(foreign.outcome, ApplyOutcome::Rejected);
    let claimed = w.claim(due, due).await;
    assert_eq!(claimed.fires.len(), 1);
    let ack = produced(&claimed.fires[0].member, due + 3, 1, None);
    assert_eq!(w.store.ack(0, w.epoch, &[ack]).await.unwrap(), 1);

    let t = w.store.timer(0, "h").await.unwrap().expect("timer h");
    assert_eq!(t.state, Some(TimerState::Fired));
    assert_eq!(t.history.len(), 3, "{:?}", t.history);
    let HistoryEntry::Command {
        op,
        outcome,
        at_ms,
        offset,
        request_id,
        ..
    } = &t.history[0]
    else {
        panic!("{:?}", t.history)
    };
    assert_eq!(
        (*op, *outcome, *at_ms, *offset),
        ("create", EntryOutcome::Accepted, T0, 1)
    );
    assert_eq!(request_id, "r1");
    let HistoryEntry::Command {
        outcome,
        reason,
        request_id,
        ..
    } = &t.history[1]
    else {
        panic!("{:?}", t.history)
    };
    assert_eq!(*outcome, EntryOutcome::Rejected);
    assert_eq!(request_id, "r2");
    assert!(
        reason.as_deref().unwrap_or("").contains("scheduled"),
        "{reason:?}"
    );
    let fire = HistoryEntry::Fire {
        fired_ms: due + 3,
        due_ms: due,
        lateness_ms: 3,
        attempt: 1,
        outcome: EntryOutcome::Delivered,
        reason: None,
    };
    assert_eq!(t.history[2], fire);
    assert_eq!(t.last_fire, Some(fire));

    // A dead-lettered fire says why.
    w.apply(once("app", "d", due), T0).await;
    let claimed = w.claim(due, due).await;
    let ack = produced(&claimed.fires[0].member, due + 900, 5, Some("too large"));
    w.store.ack(0, w.epoch, &[ack]).await.unwrap();
    let d = w.store.timer(0, "d").await.unwrap().expect("timer d");
    assert_eq!(d.state, Some(TimerState::DeadLettered));
    let Some(HistoryEntry::Fire {
        attempt,
        outcome,
        reason,
        ..
    }) = d.last_fire
    else {
        panic!("{d:?}")
    };
    assert_eq!((attempt, outcome), (5, EntryOutcome::DeadLettered));
    assert_eq!(reason.as_deref(), Some("too large"));
}

#[tokio::test]
async fn the_history_keeps_the_last_entries_and_drops_old_ones() {
    let mut w = World::new("histbound").await;
    let far = T0 + 3_600_000;
    w.store = w.store.clone().with_history(History {
        entries: 3,
        ttl_ms: 10_000,
    });
    w.apply(once("app", "b", far), T0).await;
    for i in 0..3 {
        w.apply(op("app", CommandKind::Pause, "b"), T0 + 100 + i * 2)
            .await;
        w.apply(op("app", CommandKind::Resume, "b"), T0 + 101 + i * 2)
            .await;
    }
    let t = w.store.timer(0, "b").await.unwrap().unwrap();
    let ops: Vec<_> = t
        .history
        .iter()
        .map(|e| match e {
            HistoryEntry::Command { op, offset, .. } => (*op, *offset),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        ops,
        [("resume", 5), ("pause", 6), ("resume", 7)],
        "the last 3"
    );
    // 10 s later, a command drops every entry older than the TTL.
    w.apply(op("app", CommandKind::Pause, "b"), T0 + 20_000)
        .await;
    let t = w.store.timer(0, "b").await.unwrap().unwrap();
    assert_eq!(t.history.len(), 1, "{:?}", t.history);
    // A store that keeps no history writes none.
    w.store = w.store.clone().with_history(History {
        entries: 0,
        ttl_ms: 10_000,
    });
    w.apply(once("app", "none", far), T0).await;
    assert!(w
        .store
        .timer(0, "none")
        .await
        .unwrap()
        .unwrap()
        .history
        .is_empty());
}

#[tokio::test]
async fn fire_now_adds_one_extra_fire_and_leaves_the_schedule_alone() {
    let mut w = World::new("firenow").await;
    let due = T0 + 600_000;
    w.apply(once("app", "f", due), T0).await;
    let now = T0 + 50;
    let req = w.request(op("app", CommandKind::FireNow, "f"), now);
    let (a, _) = w
        .store
        .apply(std::slice::from_ref(&req), &[], now)
        .await
        .unwrap();
    assert_eq!(a[0].outcome, ApplyOutcome::Accepted, "{a:?}");
    assert_eq!(a[0].state, Some(TimerState::Scheduled));
    // The same record again (a replay) adds nothing.
    let (a, _) = w.store.apply(&[req], &[], now).await.unwrap();
    assert_eq!(a[0].outcome, ApplyOutcome::Duplicate, "{a:?}");

    let c = w.claim(now, now).await;
    assert_eq!(c.fires.len(), 1, "one extra fire: {c:?}");
    let extra = &c.fires[0];
    assert_eq!((extra.timer_id.as_str(), extra.due_ms), ("f", now));
    assert!(extra.version < 0, "its own fire id: {extra:?}");
    // Claimed but not acknowledged: a new owner re-drives it.
    let (_, members) = w.store.in_flight_page(0, 0).await.unwrap();
    let again = w
        .store
        .recover(0, w.epoch, &members, now, now)
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "{again:?}");
    let ack = produced(&extra.member, now + 2, 1, None);
    w.store.ack(0, w.epoch, &[ack]).await.unwrap();

    let t = w.store.timer(0, "f").await.unwrap().unwrap();
    assert_eq!(
        (t.state, t.due_ms),
        (Some(TimerState::Scheduled), Some(due)),
        "schedule unchanged"
    );
    let Some(HistoryEntry::Fire { due_ms, .. }) = &t.last_fire else {
        panic!("{t:?}")
    };
    assert_eq!(*due_ms, now);
    assert!(
        matches!(&t.history[1], HistoryEntry::Command { op: "fire_now", .. }),
        "{:?}",
        t.history
    );
    // The scheduled fire still comes, once, with the timer's own version.
    let c = w.claim(due, due).await;
    assert_eq!(c.fires.len(), 1);
    assert!(c.fires[0].version > 0);

    // Paused or dead-lettered: the extra fire goes out all the same (a re-drive).
    w.apply(once("app", "p", due), T0).await;
    w.apply(op("app", CommandKind::Pause, "p"), T0).await;
    w.apply(once("app", "dl", T0 + 100), T0).await;
    let c = w.claim(T0 + 100, T0 + 100).await;
    let dead = produced(&c.fires[0].member, T0 + 120, 3, Some("refused"));
    w.store.ack(0, w.epoch, &[dead]).await.unwrap();
    for id in ["p", "dl"] {
        let a = w.apply(op("app", CommandKind::FireNow, id), T0 + 200).await;
        assert_eq!(a.outcome, ApplyOutcome::Accepted, "{id}: {a:?}");
    }
    let fired = w.claim_all(T0 + 200).await;
    assert_eq!(fired.keys().collect::<Vec<_>>(), ["dl", "p"], "{fired:?}");
    let unknown = w.apply(op("app", CommandKind::FireNow, "nobody"), T0).await;
    assert_eq!(unknown.outcome, ApplyOutcome::Rejected);
}

#[tokio::test]
async fn a_new_timer_create_entry_survives_the_commands_that_follow() {
    let mut w = World::new("histcreate").await;
    let due = T0 + 600_000;
    w.apply(once("app", "u", due), T0).await;
    let update = TimerCommand {
        at_ms: Some(due + 60_000),
        ..op("app", CommandKind::Update, "u")
    };
    assert_eq!(
        w.apply(update, T0 + 5).await.outcome,
        ApplyOutcome::Accepted
    );
    let t = w.store.timer(0, "u").await.unwrap().unwrap();
    let got: Vec<_> = t
        .history
        .iter()
        .map(|e| match e {
            HistoryEntry::Command {
                op,
                at_ms,
                offset,
                request_id,
                ..
            } => (*op, *at_ms, *offset, request_id.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    let want = [
        ("create", T0, 1, "r1".to_string()),
        ("update", T0 + 5, 2, "r2".to_string()),
    ];
    assert_eq!(got, want);
}
