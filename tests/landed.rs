//! One-shot fires taken as fired by their claim without a write (claim.lua; `rec_view`,
//! place.lua) and acknowledged by `landed.lua` against a real redis-server, the time as
//! an argument: their records read what ack.lua leaves for the same fires, also in one
//! call of several applications; a fire under way refuses commands, a take-over re-drives
//! it, a checkpoint reads it as its timer before the claim, an acknowledgement sent again
//! after the timer was created again changes nothing, and the checkpoint deletes the
//! records once the retention has passed (but not a timer created again).

mod common;

use common::store::{
    bookkeeping, claim_promoted as claim, landed, once_of, op_of, page, page_ids, stored_bytes,
    viewed_bytes, World, T0,
};
use ktimer::command::CommandKind;
use ktimer::store::Ack;
use ktimer::timer::{ApplyOutcome, Fire, TimerState};

/// The acknowledgements ack.lua reads for `fires`, delivered at `at` in attempt 1.
fn produced(fires: &[Fire], at: i64) -> Vec<Ack> {
    let line = |f: &Fire| Ack::Produced {
        member: f.member.clone(),
        fired_ms: at,
        attempt: 1,
        dead: None,
    };
    fires.iter().map(line).collect()
}

/// A fire taken at its claim and acknowledged by landed.lua leaves a record that reads
/// byte for byte what ack.lua writes, and the counts and sets ack.lua leaves, for the
/// same fire produced at its due in attempt 1: two stores take the same commands, one
/// acknowledges by landed.lua, the other by ack.lua; the first writes no record. Timers whose state was written (due in two hours) and not (due
/// in five seconds); a cancel between the claim and the acknowledgement is refused.
#[tokio::test]
async fn a_landed_fire_leaves_what_ack_lua_leaves() {
    let (mut lean, mut by_lua) = (World::new("landed").await, World::new("landed-lua").await);
    for (ids, due) in [(["a", "b"], T0 + 5_000), (["c", "d"], T0 + 7_200_000)] {
        for w in [&mut lean, &mut by_lua] {
            for id in ids {
                w.apply(once_of("app", id, due), T0).await;
            }
            while w.store.promote(0, w.epoch, due, 100).await.unwrap() {}
        }
        let (a, b) = (lean.claim(due, due).await, by_lua.claim(due, due).await);
        assert_eq!((a.fires.len(), b.fires.len()), (2, 2));
        for w in [&mut lean, &mut by_lua] {
            let r = w
                .apply(op_of("app", CommandKind::Cancel, ids[1]), due + 1)
                .await;
            assert_eq!(r.outcome, ApplyOutcome::Rejected, "{}", ids[1]);
            assert!(r.reason.contains("under way"), "{}", r.reason);
        }
        let acks = landed(&a, due);
        for (ack, want) in acks.iter().zip([due > T0 + 60_000; 2]) {
            let Ack::Landed(l) = ack else { unreachable!() };
            assert_eq!(l.written, want, "{}: state written", l.timer_id);
        }
        let n_lean = lean.store.ack(0, lean.epoch, &acks).await.unwrap();
        let n_lua = (by_lua.store)
            .ack(0, by_lua.epoch, &produced(&b.fires, due))
            .await
            .unwrap();
        assert_eq!((n_lean, n_lua), (2, 2), "members that were in flight");
        for id in ids {
            let (s, l) = (viewed_bytes(&lean, id), viewed_bytes(&by_lua, id));
            assert!(!s.is_empty(), "{id}: a record");
            assert_eq!(
                s, l,
                "{id}: the record landed.lua leaves reads as ack.lua's"
            );
            assert_ne!(stored_bytes(&lean, id), l, "{id}: not written");
        }
        assert_eq!(bookkeeping(&lean).await, bookkeeping(&by_lua).await);
    }
    let fired = lean.store.timer(0, "b").await.unwrap().expect("b");
    assert_eq!(
        fired.state,
        Some(TimerState::Fired),
        "the refused cancel left it"
    );
}

/// One landed.lua call with fires of two applications, states written and not, in turns
/// (the call groups them in runs), claimed two hours late and on time: each record, count
/// and set is what ack.lua leaves (a late fire's last fire released at its claim, as
/// ack.lua writes it), and no claim wrote a record.
#[tokio::test]
async fn one_landed_call_of_several_applications_leaves_what_ack_lua_leaves() {
    let (mut lean, mut by_lua) = (World::new("lands").await, World::new("lands-lua").await);
    let (soon, later) = (T0 + 5_000, T0 + 7_200_000);
    let timers = [
        ("a1", "app", soon),
        ("b1", "other", soon),
        ("a2", "app", later),
        ("b2", "other", later),
        ("a3", "app", soon),
    ];
    for w in [&mut lean, &mut by_lua] {
        for (id, app, due) in timers {
            w.apply(once_of(app, id, due), T0).await;
        }
        while w.store.promote(0, w.epoch, later, 100).await.unwrap() {}
    }
    let (a, b) = (
        lean.claim(later, later).await,
        by_lua.claim(later, later).await,
    );
    assert_eq!((a.fires.len(), b.fires.len()), (5, 5));
    let n_lean = (lean.store).ack(0, lean.epoch, &landed(&a, later)).await;
    let n_lua = (by_lua.store)
        .ack(0, by_lua.epoch, &produced(&b.fires, later))
        .await;
    assert_eq!((n_lean.unwrap(), n_lua.unwrap()), (5, 5));
    for (id, _, due) in timers {
        let (s, l) = (viewed_bytes(&lean, id), viewed_bytes(&by_lua, id));
        assert!(!s.is_empty(), "{id}: a record");
        assert_eq!(
            s, l,
            "{id}: the record landed.lua leaves reads as ack.lua's"
        );
        assert_ne!(
            stored_bytes(&lean, id),
            s,
            "{id}: its claim (late: {}) wrote no record",
            due == soon
        );
        let t = lean.store.timer(0, id).await.unwrap().expect(id);
        assert_eq!(t.state, Some(TimerState::Fired), "{id}");
    }
    assert_eq!(bookkeeping(&lean).await, bookkeeping(&by_lua).await);
    let mut con = lean.redis().await;
    let notes: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*:late:*", lean.prefix))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(notes.len(), 1, "the late claims' minute: {notes:?}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&notes[0])
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(ttl > 0, "the late-claim note expires: {ttl}");
}

/// A fire taken as fired by its claim is under way: a cancel, an update and a create
/// of its timer are refused (nothing could stop it any more); the owner dies before
/// producing it, and the next owner's take-over re-drives it; acknowledged through
/// ack.lua in attempt 2, the timer's last fire is that one, and it can be created again.
#[tokio::test]
async fn a_fire_under_way_refuses_commands_and_a_take_over_re_drives_it() {
    let mut w = World::new("under-way").await;
    let due = T0 + 5_000;
    w.apply(once_of("app", "t", due), T0).await;
    let claimed = claim(&w, due, due - 100).await;
    assert_eq!(claimed.fires.len(), 1);
    let mut update = once_of("app", "t", due + 60_000);
    update.kind = CommandKind::Update;
    for cmd in [
        op_of("app", CommandKind::Cancel, "t"),
        op_of("app", CommandKind::Pause, "t"),
        update,
        once_of("app", "t", due + 60_000),
    ] {
        let r = w.apply(cmd, due - 50).await;
        assert_eq!(r.outcome, ApplyOutcome::Rejected, "{}", r.reason);
        assert!(r.reason.contains("under way"), "{}", r.reason);
    }

    w.epoch = w.store.acquire(0, due + 10).await.expect("take over");
    let (_, members) = w.store.in_flight_page(0, 0).await.unwrap();
    assert_eq!(members, [claimed.fires[0].member.clone()]);
    let again = (w.store)
        .recover(0, w.epoch, &members, due - 60_000, due + 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "re-driven");
    assert_eq!(
        format!("{:?}", again[0].def),
        format!("{:?}", claimed.fires[0].def),
        "its definition"
    );
    let ack = Ack::Produced {
        member: again[0].member.clone(),
        fired_ms: due + 20,
        attempt: 2,
        dead: None,
    };
    assert_eq!(w.store.ack(0, w.epoch, &[ack]).await.unwrap(), 1);
    let t = w.store.timer(0, "t").await.unwrap().expect("t");
    assert_eq!(t.state, Some(TimerState::Fired));
    let last = format!("{:?}", t.last_fire.expect("a last fire"));
    let want = format!("fired_ms: {}", due + 20);
    assert!(
        last.contains(&want) && last.contains("attempt: 2"),
        "{last}"
    );
    assert!(bookkeeping(&w).await[4].is_empty(), "nothing in flight");
    let r = w.apply(once_of("app", "t", due + 60_000), due + 30).await;
    assert_eq!(r.outcome, ApplyOutcome::Accepted, "{}", r.reason);
}

/// No checkpoint says done of a fire not yet acknowledged (a tombstone then a lost Redis
/// would lose the fire): a written timer changed since its state was written and then
/// claimed is answered as it was before the claim, scheduled; a deferred one (never
/// written) stays deferred, holding the reflected offset below its command. Once landed:
/// the tombstone, and the offset moves on.
#[tokio::test]
async fn a_checkpoint_reads_a_fire_under_way_as_its_timer_before_the_claim() {
    let mut w = World::new("under-way-ckpt").await;
    let due = T0 + 20_000;
    w.apply(once_of("app", "w", due), T0).await;
    assert_eq!(page_ids(&page(&w, T0 + 100).await), [("w", true)]);
    let mut update = once_of("app", "w", due);
    update.kind = CommandKind::Update;
    assert_eq!(
        w.apply(update, T0 + 200).await.outcome,
        ApplyOutcome::Accepted
    );
    let deferred = w.apply(once_of("app", "d", due), due - 3_000).await;
    assert_eq!(deferred.outcome, ApplyOutcome::Accepted);
    let claimed = claim(&w, due, due).await;
    assert_eq!(claimed.fires.len(), 2);

    let under_way = page(&w, due + 1).await;
    assert_eq!(
        page_ids(&under_way),
        [("w", true)],
        "its state, not a tombstone"
    );
    let fields = &under_way.timers[0].1.as_ref().unwrap().fields;
    assert_eq!(&fields["st"][..], b"scheduled");
    assert!(!fields.contains_key("lx"), "no last fire before it landed");
    assert_eq!(
        under_way.applied,
        w.offset - 1,
        "below the deferred timer's command"
    );

    w.store
        .ack(0, w.epoch, &landed(&claimed, due + 2))
        .await
        .unwrap();
    let after = page(&w, due + 10).await;
    assert_eq!(
        page_ids(&after),
        [("w", false)],
        "the tombstone once it landed"
    );
    assert_eq!(after.applied, w.offset);
}

/// An acknowledgement sent again (its reply was lost) after the timer was created again
/// and the intake wrote the new state itself changes nothing: no tombstone follows the
/// new state.
#[tokio::test]
async fn a_landed_acknowledgement_sent_again_changes_nothing() {
    let mut w = World::new("landed-again").await;
    let due = T0 + 20_000;
    w.apply(once_of("app", "t", due), T0).await;
    assert_eq!(page_ids(&page(&w, T0 + 100).await), [("t", true)]);
    let claimed = claim(&w, due, due).await;
    let acks = landed(&claimed, due + 1);
    assert_eq!(w.store.ack(0, w.epoch, &acks).await.unwrap(), 1);
    assert_eq!(page_ids(&page(&w, due + 2).await), [("t", false)]);
    let again = w.apply(once_of("app", "t", due + 60_000), due + 3).await;
    assert_eq!(again.outcome, ApplyOutcome::Accepted, "{}", again.reason);
    let _ = page(&w, due + 4).await;
    assert_eq!(
        w.store.ack(0, w.epoch, &acks).await.unwrap(),
        0,
        "none in flight"
    );
    assert!(
        bookkeeping(&w).await[2].is_empty(),
        "nothing dirty: {:?}",
        bookkeeping(&w).await
    );
}

/// A fire under way that goes to the dead-letter topic instead (its delivery attempts ran
/// out) is acknowledged through ack.lua: its timer ends dead-lettered with that reason and
/// the fire as its last fire, and nothing stays in flight or deferred.
#[tokio::test]
async fn a_fire_under_way_that_is_dead_lettered_ends_its_timer_dead_lettered() {
    let mut w = World::new("under-way-dead").await;
    let due = T0 + 5_000;
    w.apply(once_of("app", "t", due), T0).await;
    let claimed = claim(&w, due, due).await;
    assert!(
        claimed.fires[0].taken.is_some(),
        "taken as fired at its claim"
    );
    let dead = Ack::Produced {
        member: claimed.fires[0].member.clone(),
        fired_ms: due + 900,
        attempt: 10,
        dead: Some("too large".into()),
    };
    assert_eq!(w.store.ack(0, w.epoch, &[dead]).await.unwrap(), 1);
    let t = w.store.timer(0, "t").await.unwrap().expect("t");
    assert_eq!(t.state, Some(TimerState::DeadLettered));
    assert_eq!(t.dead_letters.last_reason.as_deref(), Some("too large"));
    let last = format!("{:?}", t.last_fire.expect("a last fire"));
    assert!(last.contains("attempt: 10"), "{last}");
    let kept = bookkeeping(&w).await;
    assert!(
        kept[3].is_empty() && kept[4].is_empty(),
        "deferred, in flight: {kept:?}"
    );
}

/// One landed.lua call holding a fire acknowledged already (its reply was lost) and a new
/// one: the new one leaves flight and reads fired, released at its due (taken ahead of
/// it), the other changes nothing, and nothing stays deferred.
#[tokio::test]
async fn a_landed_call_with_a_fire_sent_again_moves_only_the_new_one() {
    let mut w = World::new("landed-mixed").await;
    let due = T0 + 5_000;
    for id in ["a", "b"] {
        w.apply(once_of("app", id, due), T0).await;
    }
    let claimed = claim(&w, due, due).await;
    let acks = landed(&claimed, due + 4);
    let first = acks
        .iter()
        .position(|a| matches!(a, Ack::Landed(l) if l.timer_id == "a"));
    let a_ack = acks[first.unwrap()].clone();
    assert_eq!(w.store.ack(0, w.epoch, &[a_ack]).await.unwrap(), 1);
    assert_eq!(w.store.ack(0, w.epoch, &acks).await.unwrap(), 1, "b alone");
    for id in ["a", "b"] {
        let t = w.store.timer(0, id).await.unwrap().expect(id);
        assert_eq!(t.state, Some(TimerState::Fired), "{id}");
        let last = format!("{:?}", t.last_fire.expect("a last fire"));
        assert!(last.contains(&format!("fired_ms: {due}")), "{last}");
    }
    let kept = bookkeeping(&w).await;
    assert!(kept[3].is_empty() && kept[4].is_empty(), "{kept:?}");
    let k = ktimer::store::Keys::new(&w.prefix, "cmds", 0);
    let queued: i64 = (redis::cmd("LLEN").arg(k.fired_queue()))
        .query_async(&mut w.redis().await)
        .await
        .unwrap();
    assert_eq!(queued, 2, "one queue entry per call");
}
