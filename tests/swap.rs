//! Acknowledging fires by record swaps (swap.lua) against a real redis-server: a swap
//! leaves what ack.lua leaves for the same acknowledgements, also when one call carries
//! fires of several applications, some whose states were written and some not.

mod common;

use common::store::{bookkeeping, stored_bytes, World, T0};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::Ack;
use ktimer::timer::TimerState;

/// The acknowledgements ack.lua reads for `fires`, delivered at `at`.
fn produced(fires: &[ktimer::timer::Fire], at: i64) -> Vec<Ack> {
    let line = |f: &ktimer::timer::Fire| Ack::Produced {
        member: f.member.clone(),
        fired_ms: at,
        attempt: 1,
        dead: None,
    };
    fires.iter().map(line).collect()
}

fn once(id: &str, at: i64) -> TimerCommand {
    TimerCommand {
        application: "app".into(),
        at_ms: Some(at),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

/// A delivered one-shot fire acknowledged by a record swap (the trigger holds the record
/// its claim read) leaves byte for byte the record, and the counts and sets, that
/// ack.lua leaves for the same acknowledgement: two stores take the same commands, one
/// acknowledges by swaps, the other by ack.lua. Timers whose state was written (due in
/// two hours) and not (due in five seconds), and one cancelled between its claim and its
/// acknowledgement (Redis answers the swap back; ack.lua decides).
#[tokio::test]
async fn a_fire_acknowledged_by_a_swap_leaves_what_ack_lua_leaves() {
    let (mut by_swap, mut by_lua) = (World::new("swap").await, World::new("swap-lua").await);
    for (ids, due) in [(["a", "b"], T0 + 5_000), (["c", "d"], T0 + 7_200_000)] {
        for w in [&mut by_swap, &mut by_lua] {
            for id in ids {
                w.apply(once(id, due), T0).await;
            }
            while w.store.promote(0, w.epoch, due, 100).await.unwrap() {}
        }
        let (a, b) = (by_swap.claim(due, due).await, by_lua.claim(due, due).await);
        assert_eq!((a.fires.len(), b.fires.len()), (2, 2));
        let mut cancel = TimerCommand::new(CommandKind::Cancel, ids[1], "x");
        cancel.application = "app".into();
        for w in [&mut by_swap, &mut by_lua] {
            w.apply(cancel.clone(), due + 1).await;
        }
        let swaps: Vec<Ack> = a
            .fires
            .iter()
            .map(|f| {
                let read = f.record.clone().expect("the record read from its own key");
                let s = ktimer::store::swap(f, read, due + 2, 1).expect("a one-shot record");
                assert_eq!(
                    s.written,
                    due > T0 + 60_000,
                    "{}: state written",
                    f.timer_id
                );
                Ack::Swap(s)
            })
            .collect();
        let lines = produced(&b.fires, due + 2);
        let n_swap = by_swap.store.ack(0, by_swap.epoch, &swaps).await.unwrap();
        let n_lua = by_lua.store.ack(0, by_lua.epoch, &lines).await.unwrap();
        assert_eq!(n_swap, n_lua, "members still in flight");
        for id in ids {
            let (s, l) = (stored_bytes(&by_swap, id), stored_bytes(&by_lua, id));
            assert!(!s.is_empty(), "{id}: a record");
            assert_eq!(s, l, "{id}: the record left by the swap is ack.lua's");
        }
        assert_eq!(bookkeeping(&by_swap).await, bookkeeping(&by_lua).await);
    }
    let fired = by_swap.store.timer(0, "a").await.unwrap().expect("a");
    assert_eq!(fired.state, Some(TimerState::Fired));
}

/// One swap call with fires of two applications, states written and not, in turns (the
/// call groups them in runs): each record, count and set is what ack.lua leaves.
#[tokio::test]
async fn one_swap_call_of_several_applications_leaves_what_ack_lua_leaves() {
    let (mut by_swap, mut by_lua) = (World::new("swaps").await, World::new("swaps-lua").await);
    let (soon, later) = (T0 + 5_000, T0 + 7_200_000);
    let timers = [
        ("a1", "app", soon),
        ("b1", "other", soon),
        ("a2", "app", later),
        ("b2", "other", later),
        ("a3", "app", soon),
    ];
    for w in [&mut by_swap, &mut by_lua] {
        for (id, app, due) in timers {
            let mut c = once(id, due);
            c.application = app.into();
            w.apply(c, T0).await;
        }
        while w.store.promote(0, w.epoch, later, 100).await.unwrap() {}
    }
    let (a, b) = (
        by_swap.claim(later, later).await,
        by_lua.claim(later, later).await,
    );
    assert_eq!((a.fires.len(), b.fires.len()), (5, 5));
    let mut swaps = Vec::new();
    for f in &a.fires {
        let read = f.record.clone().expect("the record read from its own key");
        let s = ktimer::store::swap(f, read, later + 2, 1).expect("a one-shot record");
        assert_eq!(
            s.written,
            f.due_ms == later,
            "{}: state written",
            f.timer_id
        );
        swaps.push(Ack::Swap(s));
    }
    let lines = produced(&b.fires, later + 2);
    let n_swap = by_swap.store.ack(0, by_swap.epoch, &swaps).await.unwrap();
    let n_lua = by_lua.store.ack(0, by_lua.epoch, &lines).await.unwrap();
    assert_eq!(n_swap, n_lua, "members still in flight");
    for (id, _, _) in timers {
        let (s, l) = (stored_bytes(&by_swap, id), stored_bytes(&by_lua, id));
        assert!(!s.is_empty(), "{id}: a record");
        assert_eq!(s, l, "{id}: the record left by the swap is ack.lua's");
        let t = by_swap.store.timer(0, id).await.unwrap().expect(id);
        assert_eq!(t.state, Some(TimerState::Fired), "{id}");
    }
    assert_eq!(bookkeeping(&by_swap).await, bookkeeping(&by_lua).await);
}
