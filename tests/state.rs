//! The checkpoint and restore scripts against a real redis-server, with the time as an
//! argument: what a checkpoint writes and defers, and how a restore applies the fire
//! watermark (the rules the rebuild relies on).

mod common;

use common::store::{once_of, page_ids as ids, window, World, T0};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::{Ack, CheckpointPage, Restore, Store};
use ktimer::timer::TimerState;

/// What the tests below add to the store harness.
trait Checkpoints {
    async fn checkpoint(&self, now: i64) -> CheckpointPage;
    async fn fire(&self, at: i64) -> Vec<String>;
}

impl Checkpoints for World {
    async fn checkpoint(&self, now: i64) -> CheckpointPage {
        let page = self
            .store
            .checkpoint_page((0, self.epoch, 0), now, (1000, 1000))
            .await
            .expect("checkpoint");
        self.store
            .checkpointed((0, self.epoch, 0), Some(1))
            .await
            .expect("confirm");
        page
    }

    /// Claims and acknowledges every fire due up to `at`; returns the timer ids.
    async fn fire(&self, at: i64) -> Vec<String> {
        let c = self
            .store
            .claim(0, self.epoch, window(at, at - 1000, at))
            .await
            .expect("claim");
        let members: Vec<Ack> = c
            .fires
            .iter()
            .map(|f| Ack::Dropped(f.member.clone()))
            .collect();
        self.store.ack(0, self.epoch, &members).await.expect("ack");
        c.fires.into_iter().map(|f| f.timer_id).collect()
    }
}

/// A one-shot create of timer `id` of application "app", due at `at`.
fn once(id: &str, at: i64) -> TimerCommand {
    once_of("app", id, at)
}

#[tokio::test]
async fn a_checkpoint_defers_timers_due_soon_and_owes_tombstones_only_for_written_ones() {
    let mut w = World::new("ckpt").await;
    w.apply(once("soon", T0 + 5_000), T0).await;
    let soon = w.offset;
    w.apply(once("far", T0 + 60_000), T0).await;
    let page = w.checkpoint(T0 + 100).await;
    assert_eq!(ids(&page), vec![("far", true)], "the soon one is deferred");
    assert_eq!(page.left, 0);
    assert_eq!(
        page.applied,
        soon - 1,
        "a rebuild replays the deferred timer's command"
    );
    assert_eq!(page.acked_through_ms, T0 + 100, "nothing was due: now");

    assert_eq!(w.fire(T0 + 5_000).await, vec!["soon"]);
    let page = w.checkpoint(T0 + 5_100).await;
    assert!(
        page.timers.is_empty(),
        "a deferred timer that fired owes nothing"
    );
    assert_eq!(page.applied, 2, "nothing deferred any more");

    assert_eq!(w.fire(T0 + 60_000).await, vec!["far"]);
    let page = w.checkpoint(T0 + 60_100).await;
    assert_eq!(
        ids(&page),
        vec![("far", false)],
        "a written timer that fired: tombstone"
    );
    assert_eq!(page.acked_through_ms, T0 + 60_100);
}

#[tokio::test]
async fn a_deferred_timer_waits_while_the_fire_path_is_behind_and_is_written_once_it_passed_it() {
    let mut w = World::new("grace").await;
    w.apply(once("stuck", T0 + 2_000), T0).await;
    assert!(w.checkpoint(T0 + 100).await.timers.is_empty());
    // Not claimed 5 s after its due: the trigger is behind (a burst draining). Writing
    // it now would cost the fire path a state record and a tombstone; it stays deferred.
    let page = w.checkpoint(T0 + 7_001).await;
    assert!(
        page.timers.is_empty(),
        "deferred while its fire waits behind others: {:?}",
        ids(&page)
    );
    assert_eq!(page.applied, 0, "a rebuild still replays its command");
    assert_eq!(
        page.acked_through_ms,
        T0 + 1_999,
        "below the fire not yet claimed"
    );
    // Claimed but never acknowledged (its delivery keeps failing): the fire path moved
    // past it, so 5 s after its due it is written after all.
    let claimed = w
        .store
        .claim(0, w.epoch, window(T0 + 7_001, T0, T0 + 7_001))
        .await
        .expect("claim");
    assert_eq!(claimed.fires.len(), 1);
    let page = w.checkpoint(T0 + 7_001).await;
    assert_eq!(ids(&page), vec![("stuck", true)]);
    assert_eq!(page.applied, 1);
    assert_eq!(page.in_flight.len(), 1, "listed in flight");
    assert_eq!(page.acked_through_ms, T0 + 7_001);
}

/// Deferred timers whose records vanished (evicted, or deleted outside ktimer) can never
/// fire: they stop holding the checkpoint's offset at the next checkpoint (all of them,
/// more than one read of the deferred set's head takes), while the deferred timer after
/// them still holds it until it fired.
#[tokio::test]
async fn deferred_timers_whose_records_vanished_stop_holding_the_checkpoint() {
    let mut w = World::new("vanished").await;
    let gone: Vec<String> = (0..40).map(|i| format!("gone-{i}")).collect();
    for id in &gone {
        w.apply(once(id, T0 + 2_000), T0).await;
    }
    w.apply(once("kept", T0 + 3_000), T0).await;
    let kept = w.offset;
    let page = w.checkpoint(T0 + 100).await;
    assert_eq!(page.applied, kept - 41, "all deferred: none reflected");
    let k = ktimer::store::Keys::new(&w.prefix, "cmds", 0);
    let mut deleted = 0;
    for id in &gone {
        let (own, bucket): (i64, i64) = redis::pipe()
            .del(k.timer(id))
            .hdel(k.bucket(), id)
            .query_async(&mut w.redis().await)
            .await
            .unwrap();
        deleted += own + bucket;
    }
    assert_eq!(deleted, 40, "their records were deleted");
    let page = w.checkpoint(T0 + 200).await;
    assert!(page.timers.is_empty(), "nothing is owed for them");
    assert_eq!(
        page.applied,
        kept - 1,
        "only the timer that can still fire holds it"
    );
    assert_eq!(w.fire(T0 + 3_000).await, vec!["kept"]);
    assert_eq!(w.checkpoint(T0 + 3_100).await.applied, kept);
}

#[tokio::test]
async fn a_restore_applies_the_fire_watermark_and_the_in_flight_list() {
    let mut w = World::new("source").await;
    for (id, at) in [("fired", 20_000), ("flying", 21_000), ("later", 30_000)] {
        w.apply(once(id, T0 + at), T0).await;
    }
    w.apply(
        TimerCommand {
            application: "app".into(),
            cron: Some("*/5 * * * * *".into()),
            ..TimerCommand::new(CommandKind::CreateCron, "cron", "r")
        },
        T0,
    )
    .await;
    let page = w.checkpoint(T0 + 100).await;
    let fields = |id: &str| {
        page.timers
            .iter()
            .find(|t| t.0 == id)
            .unwrap()
            .1
            .clone()
            .unwrap()
    };
    let restore = |id: &str, in_flight: Vec<i64>| Restore {
        timer_id: id.into(),
        in_flight,
        fields: fields(id),
    };
    // Restored elsewhere under "every fire due up to T0+25s was acknowledged, except the
    // in-flight fire of `flying`".
    let r = World::new("target").await;
    let timers = [
        restore("fired", vec![]),
        restore("flying", vec![T0 + 21_000]),
        restore("later", vec![]),
        restore("cron", vec![]),
    ];
    let last = ktimer::store::Restored {
        applied: 4,
        sequence: 7,
        checkpoint: None,
    };
    let n = r
        .store
        .restore(0, r.epoch, &timers, T0 + 25_000, Some(&last))
        .await
        .expect("restore");
    assert_eq!(n, 4);
    let state = r.store.partition_state(0).await.unwrap();
    assert_eq!((state.applied, state.checkpoint), (Some(4), Some(7)));
    let view = |id: &str| {
        let store = r.store.clone();
        let id = id.to_string();
        async move { store.timer(0, &id).await.unwrap().unwrap() }
    };
    assert_eq!(view("fired").await.state, Some(TimerState::Fired));
    assert_eq!(view("later").await.state, Some(TimerState::Scheduled));
    // Live timers per application are counted again: flying, later and cron.
    let live = |s: Store| async move { s.live_timers(0).await.unwrap().get("app").copied() };
    assert_eq!(live(r.store.clone()).await, Some(3));
    // The same restore again (a retry after its reply was lost, Redis killed mid-call):
    // nothing changes, nothing is counted twice.
    let again = r
        .store
        .restore(0, r.epoch, &timers, T0 + 25_000, Some(&last))
        .await
        .expect("the restore retried");
    assert_eq!(again, 4);
    assert_eq!(live(r.store.clone()).await, Some(3));
    let counts = r.store.state_counts(0).await.unwrap();
    let scheduled = counts.get(&("app".to_string(), TimerState::Scheduled));
    assert_eq!(scheduled, Some(&3), "{counts:?}");
    let (_, flying) = r.store.in_flight_page(0, 0).await.unwrap();
    assert_eq!(flying.len(), 1);
    assert!(flying[0].ends_with(":flying"), "{flying:?}");
    // Nothing of the past fires again from the slices; the later one-shot does.
    assert_eq!(r.fire(T0 + 29_999).await, Vec::<String>::new());
    assert_eq!(r.fire(T0 + 30_000).await, vec!["later"]);
    assert_eq!(live(r.store.clone()).await, Some(2), "the later one fired");
    // The cron goes on from the watermark: its next window starts after T0+25s.
    let due = r.store.cron_due(0, r.epoch, T0 + 25_000, 10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].covered_ms, T0 + 25_000);
}

#[tokio::test]
async fn a_claim_from_redis_older_than_the_checkpoint_floor_is_refused() {
    let mut w = World::new("older").await;
    w.apply(once("t", T0 + 1_000), T0).await;
    w.checkpoint(T0).await; // Redis holds checkpoint 1
    let claim = |checkpoint| ktimer::store::ClaimWindow {
        checkpoint,
        ..window(T0 + 1_000, T0, T0 + 1_000)
    };
    let refused = w.store.claim(0, w.epoch, claim(2)).await;
    assert!(matches!(&refused, Err(e) if e.is_fenced()), "{refused:?}");
    let claimed = w
        .store
        .claim(0, w.epoch, claim(1))
        .await
        .expect("Redis holds the floor");
    assert_eq!(claimed.fires.len(), 1);
}

/// The intake writes the states of the timers it changes itself (`apply_writing`): until
/// it confirms them, a checkpoint neither answers those timers (a fire's tombstone must not
/// precede their record) nor reflects their commands; a write that failed goes back to
/// the checkpoints, and one never confirmed is handed over with the partition.
#[tokio::test]
async fn states_the_intake_writes_hold_the_checkpoint_until_confirmed() {
    let mut w = World::new("writing").await;
    let write = |w: &mut World, id: &str, due: i64| w.request(once(id, due), T0);
    let req = write(&mut w, "a", T0 + 60_000);
    let a = req.offset;
    let (applied, _, written) = w.store.apply_writing(&[req], &[], T0).await.unwrap();
    assert_eq!(applied[0].state, Some(TimerState::Scheduled));
    assert_eq!(written.len(), 1);
    assert!(
        written[0].timers.is_empty(),
        "a new timer's state is built by ktimer"
    );
    let (id, state) = &written[0].fresh[0];
    let fields = state.fields();
    assert_eq!(
        ktimer::codec::decode_timer_state(&state.encode().unwrap()).unwrap(),
        fields,
        "its record holds its fields"
    );
    assert_eq!((id.as_str(), written[0].epoch), ("a", w.epoch));
    assert_eq!(fields.fields["st"].as_ref(), b"scheduled");
    assert_eq!(
        fields.fields["p"].as_ref(),
        b"1",
        "it owes a tombstone when it ends"
    );

    let page = w.checkpoint(T0 + 100).await;
    assert_eq!(
        ids(&page),
        vec![],
        "the intake writes it, not the checkpoint"
    );
    assert_eq!(
        page.applied,
        a - 1,
        "its command is not reflected before the write"
    );

    assert_eq!(w.fire(T0 + 60_000).await, vec!["a"]);
    let page = w.checkpoint(T0 + 60_100).await;
    assert_eq!(
        ids(&page),
        vec![],
        "its tombstone waits for the intake's record"
    );
    assert_eq!((page.left, page.applied), (0, a - 1));

    w.store
        .written((0, w.epoch), true, written[0].first)
        .await
        .unwrap();
    let page = w.checkpoint(T0 + 60_200).await;
    assert_eq!(ids(&page), vec![("a", false)], "then the tombstone follows");
    assert_eq!(page.applied, a);

    let req = write(&mut w, "b", T0 + 120_000);
    let (_, _, b) = w.store.apply_writing(&[req], &[], T0).await.unwrap();
    w.store
        .written((0, w.epoch), false, b[0].first)
        .await
        .unwrap();
    let page = w.checkpoint(T0 + 60_300).await;
    assert_eq!(
        ids(&page),
        vec![("b", true)],
        "a failed write is the checkpoint's again"
    );
    assert_eq!(page.applied, w.offset);

    let req = write(&mut w, "c", T0 + 120_000);
    let (_, _, c) = w.store.apply_writing(&[req], &[], T0).await.unwrap();
    let old = w.epoch;
    w.epoch = w.store.acquire(0, T0 + 60_400).await.unwrap();
    let page = w.checkpoint(T0 + 60_400).await;
    assert_eq!(
        ids(&page),
        vec![("c", true)],
        "the new owner writes what was not confirmed"
    );
    assert_eq!(page.applied, w.offset);
    let late = w.store.written((0, old), true, c[0].first).await;
    assert!(
        late.is_err_and(|e| e.is_fenced()),
        "the old owner's confirmation is fenced"
    );
}
