//! What a one-shot timer's record reads once its fire was taken by its claim and landed
//! without a write (claim.lua, landed.lua; `rec_view`, place.lua; `late.lua`), against a
//! real redis-server, the time as an argument: released at its due, or at the claim that
//! took it when that claim was late (a backlog), and deleted by the checkpoint once the
//! retention has passed (but not a timer created again).

mod common;

use common::store::{
    claim_promoted as claim, landed, once_of, page, stored_bytes, viewed_bytes, World, T0,
};
use ktimer::store::HistoryEntry;
use ktimer::timer::{ApplyOutcome, TimerState};

/// A backlog drained by several claims, each over a second late: every fire reads
/// released at the claim that took it (the fires share their due, so only the order of
/// their ids tells the claims apart), and a fire claimed on time after them reads
/// released within a second of its due; no record was written, and the checkpoint deletes
/// them all once the retention has passed.
#[tokio::test]
async fn a_backlogs_fires_read_released_at_the_claim_that_took_them() {
    let mut w = World::new("backlog").await;
    let (due, on_time) = (T0 + 5_000, T0 + 40_000);
    let ids: Vec<String> = (0..10).map(|i| format!("t{i:02}")).collect();
    for id in &ids {
        w.apply(once_of("app", id, due), T0).await;
    }
    w.apply(once_of("app", "u", on_time), T0).await;
    while w.store.promote(0, w.epoch, on_time, 100).await.unwrap() {}
    // Three claims 10 s, 12 s and 35.2 s after the due, of 3, 4 and the rest.
    let mut taken = Vec::new();
    for (now, limit) in [(due + 10_000, 3), (due + 12_000, 4), (on_time + 200, 100)] {
        let mut window = common::store::window(on_time, now - 1_000, now);
        window.limit = limit;
        let c = w.store.claim(0, w.epoch, window).await.expect("claim");
        let acks = landed(&c, now + 5);
        assert_eq!(
            w.store.ack(0, w.epoch, &acks).await.unwrap() as usize,
            c.fires.len()
        );
        taken.extend(c.fires.iter().map(|f| (f.timer_id.clone(), now)));
    }
    let order: Vec<&str> = taken.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        order[..10],
        ids.iter().map(|s| s.as_str()).collect::<Vec<_>>()[..]
    );
    assert_eq!(order[10..], ["u"]);
    for (id, claimed_at) in &taken {
        assert_ne!(
            stored_bytes(&w, id),
            viewed_bytes(&w, id),
            "{id}: no record written"
        );
        let t = w.store.timer(0, id).await.unwrap().expect(id);
        let Some(HistoryEntry::Fire {
            fired_ms, due_ms, ..
        }) = t.last_fire
        else {
            panic!("{id}: a last fire: {:?}", t.last_fire);
        };
        if id == "u" {
            assert!(
                (on_time..=on_time + 1_000).contains(&fired_ms),
                "u: {fired_ms}"
            );
        } else {
            assert_eq!(
                (fired_ms, due_ms),
                (*claimed_at, due),
                "{id}: released at its claim"
            );
        }
    }
    // Unwritten, they are deleted by the checkpoint once the retention (60 s) has passed.
    let _ = page(&w, on_time + 200 + 5 + 60_001).await;
    for (id, _) in &taken {
        assert!(
            stored_bytes(&w, id).is_empty(),
            "{id}: deleted after the retention"
        );
    }
}

/// Fires acknowledged by landed.lua leave their records unwritten until the retention
/// (60 s here) has passed: a checkpoint before it deletes nothing and the timer reads
/// fired, at that fire; the first checkpoint after it deletes the record and empties the
/// fired queue, but leaves a timer created again under the same id meanwhile.
#[tokio::test]
async fn a_checkpoint_deletes_unwritten_fired_records_after_the_retention() {
    let mut w = World::new("landed-sweep").await;
    let due = T0 + 5_000;
    for id in ["gone", "again"] {
        w.apply(once_of("app", id, due), T0).await;
    }
    let claimed = claim(&w, due, due).await;
    assert_eq!(claimed.fires.len(), 2);
    assert_eq!(
        w.store
            .ack(0, w.epoch, &landed(&claimed, due + 3))
            .await
            .unwrap(),
        2
    );
    let recreated = w
        .apply(once_of("app", "again", due + 600_000), due + 10)
        .await;
    assert_eq!(
        recreated.outcome,
        ApplyOutcome::Accepted,
        "{}",
        recreated.reason
    );

    let _ = page(&w, due + 59_000).await;
    let t = w
        .store
        .timer(0, "gone")
        .await
        .unwrap()
        .expect("kept for the retention");
    assert_eq!(t.state, Some(TimerState::Fired));
    let last = format!("{:?}", t.last_fire.expect("a last fire"));
    assert!(last.contains(&format!("fired_ms: {due}")), "{last}");

    let _ = page(&w, due + 3 + 60_001).await;
    assert!(w.store.timer(0, "gone").await.unwrap().is_none(), "deleted");
    assert!(stored_bytes(&w, "gone").is_empty());
    let again = w
        .store
        .timer(0, "again")
        .await
        .unwrap()
        .expect("created again");
    assert_eq!(again.state, Some(TimerState::Scheduled));
    let k = ktimer::store::Keys::new(&w.prefix, "cmds", 0);
    let queued: i64 = (redis::cmd("LLEN").arg(k.fired_queue()))
        .query_async(&mut w.redis().await)
        .await
        .unwrap();
    assert_eq!(queued, 0, "the fired queue emptied");
}
