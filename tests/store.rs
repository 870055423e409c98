//! The store's scripts against a real redis-server, with the time as an argument: the
//! lifecycle corners of issue 12 (emptied minutes, max_fires reached by an update, the
//! late FIRE_ONCE fire across a takeover), application ownership, and the records
//! ktimer packs for record.lua, and the definitions a claim answers.

mod common;

use common::store::{bytes, records_lua, stored_bytes, World, T0};
use ktimer::command::{CommandKind, MisfirePolicy, TimerCommand};
use ktimer::store::Ack;
use ktimer::timer::{ApplyOutcome, TimerState};

fn once(id: &str, at: i64) -> TimerCommand {
    TimerCommand {
        application: "app".into(),
        at_ms: Some(at),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

fn cron(kind: CommandKind, id: &str, expr: &str) -> TimerCommand {
    TimerCommand {
        application: "app".into(),
        cron: Some(expr.into()),
        ..TimerCommand::new(kind, id, "r")
    }
}

#[tokio::test]
async fn a_timer_due_after_many_cancelled_minutes_is_still_found() {
    let mut w = World::new("emptied").await;
    // 20 minutes of timers, all cancelled: their minutes are empty now.
    for m in 1..=20 {
        let id = format!("gone-{m}");
        let a = w.apply(once(&id, T0 + m * 60_000 + 5_000), T0).await;
        assert_eq!(a.outcome, ApplyOutcome::Accepted);
        let cancel = TimerCommand {
            application: "app".into(),
            ..TimerCommand::new(CommandKind::Cancel, &id, "c")
        };
        assert_eq!(w.apply(cancel, T0).await.outcome, ApplyOutcome::Accepted);
    }
    let due = T0 + 21 * 60_000 + 10_000;
    w.apply(once("kept", due), T0).await;
    let claimed = w.claim(T0 + 100, T0).await;
    assert!(claimed.fires.is_empty());
    assert_eq!(
        claimed.next_due_ms,
        Some(due),
        "the trigger must learn when the kept timer is due"
    );
    let claimed = w.claim(due, due).await;
    assert_eq!(claimed.fires.len(), 1);
    assert_eq!(claimed.fires[0].timer_id, "kept");
}

#[tokio::test]
async fn an_update_that_reaches_max_fires_completes_the_timer() {
    let mut w = World::new("maxfires").await;
    let create = TimerCommand {
        max_fires: Some(5),
        ..cron(CommandKind::CreateCron, "c", "* * * * * *")
    };
    assert_eq!(w.apply(create, T0).await.outcome, ApplyOutcome::Accepted);
    let first = w.claim(T0, T0).await;
    assert_eq!(first.fires.len(), 1, "the first occurrence, at T0");
    let members: Vec<Ack> = first
        .fires
        .iter()
        .map(|f| Ack::Dropped(f.member.clone()))
        .collect();
    w.store.ack(0, w.epoch, &members).await.unwrap();
    let update = TimerCommand {
        max_fires: Some(1),
        ..cron(CommandKind::Update, "c", "* * * * * *")
    };
    let a = w.apply(update, T0 + 500).await;
    assert_eq!(a.outcome, ApplyOutcome::Accepted);
    assert_eq!(a.state, Some(TimerState::Completed), "{a:?}");
    assert!(a.reason.contains("max_fires"), "{a:?}");
    assert!(w.claim(T0 + 5_000, T0 + 5_000).await.fires.is_empty());
}

#[tokio::test]
async fn the_late_fire_once_fire_survives_a_takeover_before_its_acknowledgement() {
    let mut w = World::new("lateonce").await;
    let create = TimerCommand {
        misfire: Some(MisfirePolicy::FireOnce),
        ..cron(CommandKind::CreateCron, "late", "0 * * * * *")
    };
    // Created ten minutes before anyone claims: ten occurrences were missed by then.
    w.apply(create, T0 - 600_000).await;
    let claimed = w.claim(T0 - 30_000, T0 - 30_000).await;
    let late: Vec<i64> = claimed.fires.iter().map(|f| f.due_ms).collect();
    assert_eq!(late, [T0 - 600_000], "one late fire: the first missed");
    // The owner dies before the broker acknowledged it; a new owner takes over.
    let epoch = w.store.acquire(0, T0).await.unwrap();
    let (next, members) = w.store.in_flight_page(0, 0).await.unwrap();
    assert_eq!(next, 0, "one page");
    let recovered = (w.store)
        .recover(0, epoch, &members, T0 - 10_000, T0)
        .await
        .unwrap();
    let dues: Vec<i64> = recovered.iter().map(|f| f.due_ms).collect();
    assert_eq!(
        dues,
        [T0 - 600_000],
        "the late fire is re-driven, not dropped"
    );
}

#[tokio::test]
async fn a_timer_belongs_to_the_application_that_created_it() {
    let mut w = World::new("owner").await;
    w.apply(once("t", T0 + 60_000), T0).await;
    let from = |app: &str, kind| TimerCommand {
        application: app.into(),
        ..TimerCommand::new(kind, "t", "x")
    };
    for kind in [CommandKind::Cancel, CommandKind::Pause] {
        let a = w.apply(from("other", kind), T0).await;
        assert_eq!(a.outcome, ApplyOutcome::Rejected, "{kind:?}");
        assert_eq!(a.reason, "timer belongs to another application");
        assert_eq!(a.state, Some(TimerState::Scheduled), "unchanged");
    }
    let update = TimerCommand {
        application: "other".into(),
        ..once("t", T0 + 1_000)
    };
    let update = TimerCommand {
        kind: CommandKind::Update,
        ..update
    };
    assert_eq!(w.apply(update, T0).await.outcome, ApplyOutcome::Rejected);
    let a = w.apply(from("app", CommandKind::Cancel), T0).await;
    assert_eq!(a.outcome, ApplyOutcome::Accepted);
    // Cancelled and retained: the id is still the creator's.
    let recreate = TimerCommand {
        application: "other".into(),
        ..once("t", T0 + 1_000)
    };
    assert_eq!(w.apply(recreate, T0).await.outcome, ApplyOutcome::Rejected);
}

/// An apply whose reply was lost (a client-side timeout under load) is sent again: the
/// same record answers what it answered the first time, ACCEPTED, not "applied already"
/// (only another record repeating the request is a duplicate).
#[tokio::test]
async fn the_same_record_applied_again_answers_accepted() {
    let mut w = World::new("again").await;
    let cmd = TimerCommand {
        application: "app".into(),
        at_ms: Some(T0 + 60_000),
        ..TimerCommand::new(CommandKind::CreateOnce, "t", "r")
    };
    let req = w.request(cmd, T0);
    for round in 0..2 {
        let (applied, _) = w
            .store
            .apply(std::slice::from_ref(&req), &[], T0)
            .await
            .unwrap();
        assert_eq!(
            applied[0].outcome,
            ApplyOutcome::Accepted,
            "round {round}: {:?}",
            applied[0]
        );
        assert_eq!(applied[0].version, Some(req.offset));
    }
    let mut later = req.clone();
    later.offset += 1;
    let (applied, _) = w.store.apply(&[later], &[], T0).await.unwrap();
    assert_eq!(
        applied[0].outcome,
        ApplyOutcome::Duplicate,
        "another record with the same request"
    );
    // Fires once.
    assert_eq!(w.claim(T0 + 60_000, T0 + 60_000).await.fires.len(), 1);
}

/// Redis that lost the scripts' library (restarted without its data, or a node added
/// later; here `FUNCTION FLUSH`) gets it loaded again by the next call, which goes on:
/// the timer applied before the loss fires once.
#[tokio::test]
async fn a_redis_that_lost_the_library_gets_it_again_and_the_call_goes_on() {
    let mut w = World::new("relib").await;
    let a = w.apply(once("t", T0 + 1_000), T0).await;
    assert_eq!(a.outcome, ApplyOutcome::Accepted);
    let mut con = w.redis().await;
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    let claimed = w.claim(T0 + 1_000, T0 + 1_000).await;
    assert_eq!(claimed.fires.len(), 1);
    assert_eq!(claimed.fires[0].timer_id, "t");
    let libs: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("ktimer_*")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!libs.is_empty(), "the library is loaded again");
    assert!(w.claim(T0 + 2_000, T0 + 2_000).await.fires.is_empty());
}

/// Fires due and not claimed are overdue: how many, and the oldest.
#[tokio::test]
async fn overdue_counts_due_fires_not_claimed() {
    let mut w = World::new("overdue").await;
    for (id, at) in [("a", 1_000), ("b", 2_000), ("c", 90_000)] {
        w.apply(
            TimerCommand {
                application: "app".into(),
                at_ms: Some(T0 + at),
                ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
            },
            T0,
        )
        .await;
    }
    let o = w.store.overdue(0, T0 + 5_000).await.unwrap();
    assert_eq!((o.count, o.oldest_due_ms), (2, Some(T0 + 1_000)));
    w.claim(T0 + 5_000, T0 + 5_000).await;
    let o = w.store.overdue(0, T0 + 5_000).await.unwrap();
    assert_eq!(
        (o.count, o.oldest_due_ms),
        (0, None),
        "claimed fires are not overdue"
    );
}

/// The record of a new one-shot timer is packed by ktimer, not by record.lua: the bytes
/// stored are what record.lua's rec_pack writes for the fields its rec_get reads from
/// them, and the state answered for the state topic is those fields. Timers due later
/// (a bucket) and within the deferral window (no state owed yet), with the request id
/// equal to the timer id or not.
#[tokio::test]
async fn a_new_timer_packed_by_ktimer_reads_as_record_lua_writes_it() {
    let mut w = World::new("fresh").await;
    let soon = once("soon", T0 + 5_000);
    let mut far = once("far", T0 + 7_200_000);
    far.callback = Some(ktimer::command::Callback {
        topic: Some("orders.reminders".into()),
        payload: vec![7; 300],
        ..Default::default()
    });
    for cmd in [far, soon] {
        let mut req = w.request(cmd, T0);
        let id = req.timer_id.clone();
        if id == "soon" {
            // Its request id is its timer id (rec_pack writes `true` for it).
            req.request_id = id.clone();
        }
        let (applied, _, written) = w.store.apply_writing(&[req], &[], T0).await.unwrap();
        assert_eq!(applied[0].outcome, ApplyOutcome::Accepted, "{applied:?}");
        let stored = records_lua(
            &w,
            &id,
            "local a = rec_raw(ARGV[1]); return cmsgpack.pack(a)",
        );
        let repacked = records_lua(&w, &id, "return rec_pack(ARGV[1], rec_get(ARGV[1]))");
        assert_eq!(
            stored_bytes(&w, &id),
            bytes(&repacked),
            "{id}: rec_pack writes the same"
        );
        assert!(!bytes(&stored).is_empty());
        let read = records_lua(
            &w,
            &id,
            "local out = {}; rec_emit(rec_get(ARGV[1]), out); return out",
        );
        let pairs: Vec<Vec<u8>> = redis::from_redis_value(read).unwrap();
        let fields: std::collections::BTreeMap<String, Vec<u8>> = pairs
            .chunks(2)
            .map(|p| (String::from_utf8(p[0].clone()).unwrap(), p[1].clone()))
            .collect();
        assert!(written.iter().all(|w| w.timers.is_empty()), "{written:?}");
        let answered: Vec<_> = written.iter().flat_map(|w| w.fresh.clone()).collect();
        if id == "soon" {
            assert!(answered.is_empty(), "a deferred timer owes no state yet");
            assert!(!fields.contains_key("p"));
            continue;
        }
        let record = answered[0].1.encode().unwrap();
        let sent = ktimer::codec::decode_timer_state(&record).unwrap();
        let sent: std::collections::BTreeMap<String, Vec<u8>> = sent
            .fields
            .into_iter()
            .map(|(k, v)| (k, v.into_vec()))
            .collect();
        assert_eq!(sent, fields, "the state answered is what rec_get reads");
    }
}

/// The raw bytes Redis holds for timer `id` (its field of the bucket or its own key).
/// A record too large to hold beside its definition and send twice (a large payload) is
/// not answered with its fire, nor recorded done by the claim: ack.lua acknowledges it.
#[tokio::test]
async fn a_large_record_is_not_answered_with_its_fire() {
    let mut w = World::new("large-record").await;
    let mut big = once("big", T0 + 5_000);
    big.callback = Some(ktimer::command::Callback {
        payload: vec![7; 2_000],
        ..Default::default()
    });
    w.apply(big, T0).await;
    w.apply(once("small", T0 + 5_000), T0).await;
    while w.store.promote(0, w.epoch, T0 + 5_000, 100).await.unwrap() {}
    let claimed = w.claim(T0 + 5_000, T0 + 5_000).await;
    let held: std::collections::BTreeMap<_, _> = claimed
        .fires
        .iter()
        .map(|f| (f.timer_id.as_str(), f.taken.is_some()))
        .collect();
    assert_eq!(held, [("big", false), ("small", true)].into());
    for (id, want) in [("big", TimerState::Scheduled), ("small", TimerState::Fired)] {
        let t = w.store.timer(0, id).await.unwrap().expect(id);
        assert_eq!(
            t.state,
            Some(want),
            "{id}: recorded done by the claim only when answered"
        );
    }
}

/// Every fire a claim answers carries the definition its timer was created with, however
/// the claim read it: from the timer's own key, its definition inside the record answered
/// (two applications and callback topics: two definition prefixes in one claim); a
/// record too large to answer (its definition answered apart); a record still in the
/// bucket (not promoted ahead).
#[tokio::test]
async fn every_claimed_fire_carries_the_definition_it_was_created_with() {
    let mut w = World::new("claim-defs").await;
    let (due, late) = (T0 + 5_000, T0 + 180_000);
    let with = |id: &str, app: &str, at: i64, payload: Vec<u8>| {
        let mut c = once(id, at);
        c.application = app.into();
        c.callback = Some(ktimer::command::Callback {
            topic: Some(format!("{app}.callback")),
            headers: [("timer".to_string(), id.to_string())].into(),
            payload,
            ..Default::default()
        });
        c
    };
    let cmds = [
        with("a1", "alpha", due, b"one".to_vec()),
        with("a2", "alpha", due, b"two".to_vec()),
        with("b1", "beta", due, b"three".to_vec()),
        with("big", "beta", due, vec![9; 2_000]),
        with("late", "alpha", late, b"bucket".to_vec()),
    ];
    for c in &cmds {
        w.apply(c.clone(), T0).await;
    }
    while w.store.promote(0, w.epoch, due, 100).await.unwrap() {}
    let claimed = w.claim(late, late).await;
    let fires: std::collections::BTreeMap<_, _> = claimed
        .fires
        .iter()
        .map(|f| (f.timer_id.as_str(), f))
        .collect();
    assert_eq!(fires.len(), cmds.len(), "{:?}", fires.keys());
    for c in &cmds {
        let f = fires[c.timer_id.as_str()];
        let want = c.callback.as_ref().unwrap();
        assert_eq!(f.def.application, c.application, "{}", c.timer_id);
        assert_eq!(f.def.callback.topic, want.topic, "{}", c.timer_id);
        assert_eq!(f.def.callback.headers, want.headers, "{}", c.timer_id);
        assert_eq!(f.def.callback.payload, want.payload, "{}", c.timer_id);
    }
    let held: Vec<_> = fires
        .iter()
        .map(|(id, f)| (*id, f.taken.is_some()))
        .collect();
    let want = [
        ("a1", true),
        ("a2", true),
        ("b1", true),
        ("big", false),
        ("late", false),
    ];
    assert_eq!(held, want, "which fires came with their record");
}
