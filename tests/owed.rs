//! The tombstones landed fires owe (the owed list, `owed.lua`) against a real
//! redis-server, the time as an argument: a checkpoint page answers them whole, a lost
//! page answers them again, and a timer created again after its fire loses the tombstone
//! its earlier fire owed (its new state is written, never followed by that tombstone).

mod common;

use common::store::{claim_promoted, landed, once_of, page_ids as ids, World, T0};
use ktimer::command::TimerCommand;
use ktimer::store::CheckpointPage;

/// A one-shot create of timer `id` of application "app", due at `at`.
fn once(id: &str, at: i64) -> TimerCommand {
    once_of("app", id, at)
}

/// One checkpoint page of up to 100 timers at `now`; confirmed when `confirm`.
async fn page(w: &World, now: i64, confirm: bool) -> CheckpointPage {
    let page = (w.store)
        .checkpoint_page((0, w.epoch, 0), now, (100, 100))
        .await
        .expect("checkpoint");
    if confirm {
        (w.store)
            .checkpointed((0, w.epoch, 0), None)
            .await
            .expect("confirm");
    }
    page
}

/// Creates `ids` due at `due` and writes their states (a confirmed page at T0).
async fn written(w: &mut World, ids: &[&str], due: i64) {
    for id in ids {
        w.apply(once(id, due), T0).await;
    }
    assert_eq!(page(w, T0 + 100, true).await.timers.len(), ids.len());
}

/// Claims the fires due at `due` and lands them (the lean acknowledgement) at `due + 1`;
/// answers how many fired.
async fn fire(w: &World, due: i64) -> usize {
    let claimed = claim_promoted(w, due, due).await;
    let n = claimed.fires.len();
    w.store
        .ack(0, w.epoch, &landed(&claimed, due + 1))
        .await
        .expect("landed");
    n
}

#[tokio::test]
async fn landed_fires_owe_one_tombstone_each_answered_by_the_next_page() {
    let mut w = World::new("owed-whole").await;
    written(&mut w, &["a", "b", "c"], T0 + 20_000).await;
    assert_eq!(fire(&w, T0 + 20_000).await, 3);
    let p = page(&w, T0 + 20_100, true).await;
    assert_eq!(ids(&p), vec![("a", false), ("b", false), ("c", false)]);
    assert_eq!(p.left, 0, "nothing owed any more");
    assert!(page(&w, T0 + 20_200, true).await.timers.is_empty());
}

#[tokio::test]
async fn a_timer_created_again_before_the_page_owes_no_tombstone_of_its_first_fire() {
    let mut w = World::new("owed-revived").await;
    written(&mut w, &["again", "gone"], T0 + 20_000).await;
    assert_eq!(fire(&w, T0 + 20_000).await, 2);
    // `again` is created again (the checkpoint writes its state) before any page.
    w.apply(once("again", T0 + 80_000), T0 + 20_050).await;
    let p = page(&w, T0 + 20_100, true).await;
    assert_eq!(
        ids(&p),
        vec![("again", true), ("gone", false)],
        "again's new state, no tombstone after it; gone's tombstone"
    );
    // Its second fire owes a tombstone again.
    assert_eq!(fire(&w, T0 + 80_000).await, 1);
    assert_eq!(
        ids(&page(&w, T0 + 80_100, true).await),
        vec![("again", false)]
    );
}

#[tokio::test]
async fn a_lost_page_of_owed_tombstones_is_answered_again_each_timer_once() {
    let mut w = World::new("owed-lost").await;
    written(&mut w, &["again", "w1", "w2"], T0 + 20_000).await;
    w.apply(once("w3", T0 + 40_000), T0).await;
    assert_eq!(page(&w, T0 + 200, true).await.timers.len(), 1);
    assert_eq!(fire(&w, T0 + 20_000).await, 3);
    let lost = page(&w, T0 + 20_100, false).await;
    assert_eq!(
        ids(&lost),
        vec![("again", false), ("w1", false), ("w2", false)]
    );

    // `again` is created again and fires with w3 before the lost page is confirmed.
    w.apply(once("again", T0 + 40_000), T0 + 20_200).await;
    assert_eq!(fire(&w, T0 + 40_000).await, 2, "again and w3 fired");
    let p = page(&w, T0 + 40_100, true).await;
    let mut got = ids(&p);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("again", false),
            ("w1", false),
            ("w2", false),
            ("w3", false)
        ],
        "the lost page again, then the new fires; each timer once"
    );
    assert_eq!(p.left, 0);
}

#[tokio::test]
async fn an_entry_older_than_half_the_retention_is_answered_from_the_records() {
    // The store's retention is 60 s: past 30 s, each timer is read (its record may
    // have been deleted and the timer created anew, which no revival notes).
    let mut w = World::new("owed-old").await;
    written(&mut w, &["old", "kept"], T0 + 20_000).await;
    assert_eq!(fire(&w, T0 + 20_000).await, 2);
    let late = T0 + 20_001 + 31_000;
    w.apply(once("kept", late + 60_000), late).await;
    let p = page(&w, late + 100, true).await;
    let mut got = ids(&p);
    got.sort();
    assert_eq!(got, vec![("kept", true), ("old", false)]);
}

#[tokio::test]
async fn a_tombstone_waits_while_the_intake_writes_an_earlier_state_of_its_timer() {
    let mut w = World::new("owed-writing").await;
    written(&mut w, &["t"], T0 + 20_000).await;
    assert_eq!(fire(&w, T0 + 20_000).await, 1);
    assert_eq!(ids(&page(&w, T0 + 20_100, true).await), vec![("t", false)]);
    // Created again, its state written by the intake and not confirmed; then it fires.
    let req = w.request(once("t", T0 + 40_000), T0 + 20_200);
    let (_, _, entries) = w
        .store
        .apply_writing(&[req], &[], T0 + 20_200)
        .await
        .unwrap();
    assert_eq!(fire(&w, T0 + 40_000).await, 1);
    let p = page(&w, T0 + 40_100, true).await;
    assert!(
        ids(&p).is_empty(),
        "held while the intake writes: {:?}",
        ids(&p)
    );
    assert_eq!(p.left, 0, "a checkpoint still completes");
    // The write confirmed, the tombstone follows it.
    w.store
        .written((0, w.epoch), true, entries[0].first)
        .await
        .unwrap();
    assert_eq!(ids(&page(&w, T0 + 40_200, true).await), vec![("t", false)]);
}
