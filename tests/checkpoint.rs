//! checkpoint.lua's page rules against a real redis-server, the time as an argument:
//! which page lists the fires in flight and where the fire watermark stops, the
//! tombstones of a page of timers that fired (read without decoding their records), and
//! the timers a page puts aside while the intake writes their state.

mod common;

use common::store::{once_of, page_ids as ids, World, T0};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::{Ack, CheckpointPage};

/// A one-shot create of timer `id` of application "app", due at `at`.
fn once(id: &str, at: i64) -> TimerCommand {
    once_of("app", id, at)
}

/// One page of at most `timers` timers listing at most `flight` in-flight members,
/// confirmed.
async fn page(w: &World, now: i64, timers: usize, flight: usize) -> CheckpointPage {
    let page = w
        .store
        .checkpoint_page((0, w.epoch, 0), now, (timers, flight))
        .await
        .expect("checkpoint");
    w.store
        .checkpointed((0, w.epoch, 0), None)
        .await
        .expect("confirm");
    page
}

/// The acknowledgements of every fire of `claimed`, delivered at `at` (through `ack.lua`).
fn delivered(claimed: &ktimer::timer::Claimed, at: i64) -> Vec<Ack> {
    claimed
        .fires
        .iter()
        .map(|f| Ack::Produced {
            member: f.member.clone(),
            fired_ms: at,
            attempt: 1,
            dead: None,
        })
        .collect()
}

/// Applies `cmd` at `now` with the intake writing its state, and confirms the write.
async fn apply_written(w: &mut World, cmd: TimerCommand, now: i64) {
    let req = w.request(cmd, now);
    let (_, _, entries) = w.store.apply_writing(&[req], &[], now).await.unwrap();
    assert_eq!(entries.len(), 1, "the intake writes its state");
    w.store
        .written((0, w.epoch), true, entries[0].first)
        .await
        .unwrap();
}

/// Only the page that completes a checkpoint (none left dirty) lists the fires in flight:
/// its watermark is the one recorded. Every page stops the watermark below the first
/// in-flight member beyond the listed ones, read alone.
#[tokio::test]
async fn only_the_last_page_lists_the_fires_in_flight_and_the_watermark_stops_below_the_rest() {
    let mut w = World::new("ckpt-flight").await;
    for (i, id) in ["f1", "f2", "f3"].iter().enumerate() {
        w.apply(once(id, T0 + 1_000 + i as i64), T0).await;
    }
    for id in ["d1", "d2", "d3"] {
        w.apply(once(id, T0 + 60_000), T0).await;
    }
    let now = T0 + 1_500;
    let claimed = w.claim(T0 + 1_002, now).await;
    assert_eq!(claimed.fires.len(), 3, "three fires in flight");
    let members: Vec<String> = claimed.fires.iter().map(|f| f.member.clone()).collect();

    let first = page(&w, now, 2, 2).await;
    assert!(first.left > 0, "a page of two leaves a dirty timer");
    assert_eq!(first.timers.len(), 2);
    assert!(first.in_flight.is_empty(), "not the last page: {first:?}");
    assert_eq!(
        first.acked_through_ms,
        T0 + 1_001,
        "below the third fire in flight, the first not listed"
    );

    let last = page(&w, now, 2, 2).await;
    assert_eq!(last.left, 0);
    assert_eq!(last.timers.len(), 1);
    assert_eq!(last.in_flight, members[..2], "the first two, in due order");
    assert_eq!(last.acked_through_ms, T0 + 1_001);

    // All listed: the watermark is now (the slices' first member is due later).
    let all = page(&w, now, 2, 3).await;
    assert_eq!(all.in_flight, members);
    assert_eq!(all.acked_through_ms, now);
}

/// A page of timers that fired answers a tombstone for each whose state was written and
/// nothing for the others, and a timer created again after its fire is answered whole.
#[tokio::test]
async fn a_page_of_fired_timers_answers_tombstones_for_the_written_ones_only() {
    let mut w = World::new("ckpt-tomb").await;
    // Due beyond the deferral window: written by a checkpoint, then owing a tombstone.
    for id in ["w1", "w2", "again"] {
        w.apply(once(id, T0 + 20_000), T0).await;
    }
    let written = page(&w, T0 + 100, 100, 100).await;
    assert_eq!(written.timers.len(), 3, "their states are written");
    // Due within it and cancelled: never written, so it owes nothing.
    w.apply(once("never", T0 + 5_000), T0 + 100).await;
    let cancel = TimerCommand {
        application: "app".into(),
        ..TimerCommand::new(CommandKind::Cancel, "never", "r2")
    };
    w.apply(cancel, T0 + 200).await;

    let claimed = w.claim(T0 + 20_000, T0 + 20_000).await;
    let acks = delivered(&claimed, T0 + 20_001);
    assert_eq!(acks.len(), 3, "the three written timers fired");
    w.store.ack(0, w.epoch, &acks).await.expect("ack");
    // `again` is created again after its fire: its new state, not a tombstone.
    w.apply(once("again", T0 + 90_000), T0 + 20_002).await;

    let page = page(&w, T0 + 20_100, 100, 100).await;
    assert_eq!(
        ids(&page),
        vec![("again", true), ("w1", false), ("w2", false)],
        "tombstones for w1 and w2, the new state of again, nothing for never"
    );
    assert_eq!(page.left, 0);
}

/// A written timer that fired owes its tombstone, which a page answers without reading
/// the timer; created again after the fire, with the intake writing its new state
/// itself, it must be answered whole: a tombstone after its new state would delete the
/// new timer from the state topic (and from every rebuild).
#[tokio::test]
async fn a_timer_created_again_and_written_by_the_intake_is_not_tombstoned() {
    let mut w = World::new("ckpt-tomb-again").await;
    for id in ["w1", "again"] {
        w.apply(once(id, T0 + 20_000), T0).await;
    }
    assert_eq!(page(&w, T0 + 100, 100, 100).await.timers.len(), 2);
    let claimed = w.claim(T0 + 20_000, T0 + 20_000).await;
    let acks = delivered(&claimed, T0 + 20_001);
    assert_eq!(acks.len(), 2, "both fired");
    w.store.ack(0, w.epoch, &acks).await.expect("ack");
    // Created again, its state written by the intake (and confirmed) before the page.
    apply_written(&mut w, once("again", T0 + 90_000), T0 + 20_002).await;

    let page = page(&w, T0 + 20_100, 100, 100).await;
    assert_eq!(
        ids(&page),
        vec![("again", true), ("w1", false)],
        "a tombstone for w1; again answered whole, never a tombstone"
    );
    assert_eq!(page.left, 0);
}

/// A checkpoint gets past dirty timers whose earlier state the intake is still writing:
/// they wait aside (not answered, their commands not reflected) until the write is
/// confirmed, while the timers behind them are written and the checkpoint completes.
/// (Left in the dirty set, they took every page again: a checkpoint whose page size
/// they filled never completed, and its task spun, deaf to shutdown.)
#[tokio::test]
async fn a_checkpoint_gets_past_timers_waiting_for_the_intakes_write() {
    let mut w = World::new("blocked").await;
    let ids_ab = ["a1", "a2", "a3"];
    let mut reqs = Vec::new();
    for id in ids_ab {
        reqs.push(w.request(once(id, T0 + 60_000), T0));
    }
    let (_, _, ab) = w.store.apply_writing(&reqs, &[], T0).await.unwrap();
    assert_eq!(ab.len(), 1, "one apply call");
    // Each changes again before the intake confirmed its first state; then a timer the
    // checkpoint writes.
    let first_cancel = w.offset + 1;
    for id in ids_ab {
        let cancel = TimerCommand {
            application: "app".into(),
            ..TimerCommand::new(CommandKind::Cancel, id, "r2")
        };
        w.apply(cancel, T0).await;
    }
    w.apply(once("b", T0 + 120_000), T0).await;

    let mut answered = Vec::new();
    let mut pages = 0;
    loop {
        let page = page(&w, T0 + 100, 2, 1000).await;
        answered.extend(ids(&page).into_iter().map(|(id, _)| id.to_string()));
        pages += 1;
        assert!(page.applied < first_cancel, "a waiting command reflected");
        if page.left == 0 {
            break;
        }
        assert!(pages < 5, "the checkpoint never completes: {page:?}");
    }
    assert_eq!(answered, ["b"], "only the timer not waiting is written");

    w.store
        .written((0, w.epoch), true, ab[0].first)
        .await
        .unwrap();
    let page = page(&w, T0 + 200, 1000, 1000).await;
    assert_eq!(
        ids(&page),
        vec![("a1", false), ("a2", false), ("a3", false)],
        "once written, their cancellations follow"
    );
    assert_eq!(page.applied, w.offset);
}

/// A page decides a fired timer's tombstone from its record's first bytes (the version,
/// a command offset, then the state): at every width of the version a done one-shot
/// timer is answered a tombstone and a cron that fired (live, dirty since its fire
/// alone, like the done ones) its state. The crons' offsets hold bytes that are done
/// states' codes, so a version misread as its state would tombstone a live timer.
#[tokio::test]
async fn a_fired_timer_is_tombstoned_by_its_head_and_a_live_cron_is_not_at_any_width() {
    let mut w = World::new("ckpt-width").await;
    // A fixint; uint 8, 16, 32 and 64 (0x0405, 0x03040506, 0x0304050603).
    let offsets = [5_i64, 200, 1_029, 50_595_078, 12_952_208_899];
    for off in offsets {
        w.offset = off - 1;
        let every_second = common::commands::cron(&format!("c{off}"), "* * * * * *", "tick");
        w.apply(every_second, T0).await;
        w.apply(once(&format!("o{off}"), T0 + 20_000), T0).await;
    }
    assert_eq!(page(&w, T0 + 100, 100, 100).await.timers.len(), 10);
    let claimed = w.claim(T0 + 20_000, T0 + 20_000).await;
    let acks = delivered(&claimed, T0 + 20_001);
    let fired: std::collections::BTreeSet<&str> =
        claimed.fires.iter().map(|f| f.timer_id.as_str()).collect();
    assert_eq!(fired.len(), 10, "every timer fired: {fired:?}");
    w.store.ack(0, w.epoch, &acks).await.expect("ack");
    // Each is read from its own key (where the head is read).
    for off in offsets {
        for id in [format!("c{off}"), format!("o{off}")] {
            let own = common::store::records_lua(
                &w,
                &id,
                "return redis.call('EXISTS', REC.base .. 't:' .. ARGV[1])",
            );
            assert_eq!(own, redis::Value::Int(1), "{id} in its own key");
        }
    }

    let page = page(&w, T0 + 20_100, 100, 100).await;
    let mut want: Vec<(String, bool)> = offsets
        .iter()
        .flat_map(|off| [(format!("c{off}"), true), (format!("o{off}"), false)])
        .collect();
    want.sort();
    let got: Vec<(String, bool)> = ids(&page)
        .into_iter()
        .map(|(id, s)| (id.to_string(), s))
        .collect();
    assert_eq!(
        got, want,
        "tombstones for the one-shots, states for the crons"
    );
}

/// Pages are bounded by bytes as well as by count: 300 timers of 8 kB each, asked for
/// pages of up to 500 timers, come in pages of about `PAGE_BYTES` (before: one page of
/// 2.4 MB, a call holding the partition's other calls), every timer answered once.
#[tokio::test]
async fn a_page_of_large_timers_is_bounded_by_bytes() {
    let mut w = World::new("ckpt-bytes").await;
    for i in 0..300 {
        let mut c = once(&format!("big-{i}"), T0 + 600_000);
        c.callback = Some(ktimer::command::Callback {
            payload: vec![b'x'; 8 * 1024],
            ..Default::default()
        });
        w.apply(c, T0).await;
    }
    let most = ktimer::store::PAGE_BYTES / (8 * 1024) + 1;
    let mut seen = std::collections::BTreeSet::new();
    let mut pages = 0;
    loop {
        let p = page(&w, T0, 500, 0).await;
        pages += 1;
        assert!(
            p.timers.len() <= most,
            "a page of {} timers of 8 kB, over {} bytes",
            p.timers.len(),
            ktimer::store::PAGE_BYTES
        );
        for (id, _) in &p.timers {
            assert!(seen.insert(id.clone()), "{id} answered twice");
        }
        if p.left == 0 {
            break;
        }
        assert!(pages < 20, "the pages do not end");
    }
    assert_eq!(seen.len(), 300, "every timer answered");
    assert!(pages >= 4, "{pages} pages");
}

/// The dirty set holds three kinds of member in its order: timers changed by a command
/// (scored by its offset), written one-shot timers a fire made done (their tombstones owed,
/// read without their scores) and timers a fire changed (scored 'inf'). Pages of two cut
/// across each kind: every timer is answered once, in the set's order (a page removes its
/// members from the set by rank), tombstones for the one-shots only.
#[tokio::test]
async fn pages_across_commands_tombstones_and_fires_answer_each_timer_once_in_order() {
    let mut w = World::new("ckpt-bands").await;
    for id in ["o1", "o2", "o3"] {
        w.apply(once(id, T0 + 20_000), T0).await;
    }
    for id in ["c1", "c2"] {
        w.apply(common::commands::cron(id, "* * * * * *", "tick"), T0)
            .await;
    }
    assert_eq!(page(&w, T0 + 100, 100, 100).await.timers.len(), 5);
    let claimed = w.claim(T0 + 20_000, T0 + 20_000).await;
    let fired: std::collections::BTreeSet<&str> =
        claimed.fires.iter().map(|f| f.timer_id.as_str()).collect();
    assert_eq!(
        fired.len(),
        5,
        "the one-shots and the crons fired: {fired:?}"
    );
    let acks = delivered(&claimed, T0 + 20_001);
    w.store.ack(0, w.epoch, &acks).await.expect("ack");
    // Created after the fires: dirty at their commands' offsets, first in the set.
    for id in ["n1", "n2"] {
        w.apply(once(id, T0 + 600_000), T0 + 20_002).await;
    }

    // (Pages sorted by id; the crons follow the tombstones in the set.)
    let want: [(&[(&str, bool)], u64); 4] = [
        (&[("n1", true), ("n2", true)], 5),
        (&[("o1", false), ("o2", false)], 3),
        (&[("c1", true), ("o3", false)], 1),
        (&[("c2", true)], 0),
    ];
    for (i, (expected, left)) in want.iter().enumerate() {
        let p = page(&w, T0 + 20_100, 2, 100).await;
        assert_eq!(ids(&p), expected.to_vec(), "page {i}");
        assert_eq!(p.left, *left, "left after page {i}");
    }
}

/// A page whose records were never confirmed is answered again by the next page, with the
/// tombstones owed since, each timer once: also one owed twice, in the lost page and again
/// after it was created, written and fired anew (the page's tombstones are otherwise
/// answered as one list, unread).
#[tokio::test]
async fn a_lost_page_of_tombstones_is_answered_again_each_timer_once() {
    let mut w = World::new("ckpt-tomb-lost").await;
    for id in ["again", "w1", "w2"] {
        w.apply(once(id, T0 + 20_000), T0).await;
    }
    w.apply(once("w3", T0 + 40_000), T0).await;
    assert_eq!(page(&w, T0 + 100, 100, 100).await.timers.len(), 4);
    let claimed = w.claim(T0 + 20_000, T0 + 20_000).await;
    w.store
        .ack(0, w.epoch, &delivered(&claimed, T0 + 20_001))
        .await
        .expect("ack");
    let lost = w
        .store
        .checkpoint_page((0, w.epoch, 0), T0 + 20_100, (100, 100))
        .await
        .expect("checkpoint");
    assert_eq!(
        ids(&lost),
        vec![("again", false), ("w1", false), ("w2", false)],
        "the lost page's tombstones"
    );

    // `again` is created again (its state written by the intake), then it and w3 fire.
    apply_written(&mut w, once("again", T0 + 40_000), T0 + 20_200).await;
    let claimed = w.claim(T0 + 40_000, T0 + 40_000).await;
    assert_eq!(claimed.fires.len(), 2, "again and w3 fired");
    w.store
        .ack(0, w.epoch, &delivered(&claimed, T0 + 40_001))
        .await
        .expect("ack");

    let page = page(&w, T0 + 40_100, 100, 100).await;
    assert_eq!(
        ids(&page),
        vec![
            ("again", false),
            ("w1", false),
            ("w2", false),
            ("w3", false)
        ],
        "the lost page again, then w3; again once"
    );
    assert_eq!(page.left, 0);
}
