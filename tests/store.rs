//! The store's scripts against a real redis-server, with the time as an argument: the
//! lifecycle corners of issue 12 (emptied minutes, max_fires reached by an update, the
//! late FIRE_ONCE fire across a takeover) and application ownership.

mod common;

use common::store::{World, T0};
use ktimer::command::{CommandKind, MisfirePolicy, TimerCommand};
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
    let members: Vec<String> = first.fires.iter().map(|f| f.member.clone()).collect();
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

/// Live timers are fields of bucket hashes that split as timers are added (linear
/// hashing, `record.lua`): every timer stays findable across the splits, a cancel moves
/// it out of its bucket, and each live one fires once.
#[tokio::test]
async fn timers_stay_findable_while_their_buckets_split() {
    let mut w = World::new("buckets").await;
    let n = 3_000;
    let ids: Vec<String> = (0..n).map(|i| format!("order:{i}")).collect();
    for chunk in ids.chunks(500) {
        let reqs: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(j, id)| w.request(once(id, T0 + 60_000 + (j as i64 % 120) * 1_000), T0))
            .collect();
        let (applied, _) = w.store.apply(&reqs, &[], T0).await.unwrap();
        assert!(applied.iter().all(|a| a.outcome == ApplyOutcome::Accepted));
    }
    for id in ids.iter().step_by(3) {
        let cancel = TimerCommand {
            application: "app".into(),
            ..TimerCommand::new(CommandKind::Cancel, id, "c")
        };
        assert_eq!(w.apply(cancel, T0).await.outcome, ApplyOutcome::Accepted);
    }
    let meta_key = w.store.keys(0).record_meta();
    let mut con = w.redis().await;
    let (level, live): (i64, i64) = redis::cmd("HMGET")
        .arg(&meta_key)
        .arg("L")
        .arg("n")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(
        level >= 2,
        "3,000 timers split the 8 first buckets: level {level}"
    );
    assert_eq!(live, 2_000, "live records counted");
    for (i, id) in ids.iter().enumerate() {
        let t = w.store.timer(0, id).await.unwrap().expect(id);
        let want = if i % 3 == 0 {
            TimerState::Cancelled
        } else {
            TimerState::Scheduled
        };
        assert_eq!(t.state, Some(want), "{id}");
    }
    let fired = w.claim_all(T0 + 60_000 + 120_000).await;
    assert_eq!(fired.len(), 2_000);
    assert!(fired
        .iter()
        .all(|(id, &k)| k == 1 && !ids.iter().step_by(3).any(|c| c == id)));
}

/// The migrator promotes one-shot timers due within a minute out of the record buckets
/// into keys of their own (`promote.lua`), a page at a time; a timer created due soon
/// after that goes straight to its own key; far ones stay in the buckets; all fire once.
#[tokio::test]
async fn timers_due_soon_are_promoted_out_of_the_buckets() {
    let mut w = World::new("promote").await;
    let near: Vec<String> = (0..500).map(|i| format!("near-{i}")).collect();
    let far: Vec<String> = (0..500).map(|i| format!("far-{i}")).collect();
    let mut reqs = Vec::new();
    for (ids, due) in [(&near, T0 + 30_000), (&far, T0 + 7_200_000)] {
        for id in ids {
            reqs.push(w.request(once(id, due), T0));
        }
    }
    w.store.apply(&reqs, &[], T0).await.unwrap();
    let mut con = w.redis().await;
    let k = w.store.keys(0);
    let own = |ids: &[String]| -> Vec<String> { ids.iter().map(|id| k.timer(id)).collect() };
    let in_buckets = |mut con: redis::aio::MultiplexedConnection| {
        let meta = k.record_meta();
        async move {
            let n: Option<i64> = redis::cmd("HGET")
                .arg(meta)
                .arg("n")
                .query_async(&mut con)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(
        in_buckets(con.clone()).await,
        Some(1_000),
        "all in buckets before promotion"
    );
    let mut calls = 0;
    while w.store.promote(0, w.epoch, T0 + 60_000, 100).await.unwrap() {
        calls += 1;
        assert!(calls < 20, "promotion does not end");
    }
    assert!(
        calls >= 4,
        "500 members at 100 per call take several calls: {calls}"
    );
    let promoted: i64 = redis::cmd("EXISTS")
        .arg(own(&near))
        .query_async(&mut con)
        .await
        .unwrap();
    let stayed: i64 = redis::cmd("EXISTS")
        .arg(own(&far))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!((promoted, stayed), (500, 0));
    assert_eq!(
        in_buckets(con.clone()).await,
        Some(500),
        "the far ones stay in buckets"
    );
    let per_minute: Vec<(i64, i64)> = redis::cmd("HGETALL")
        .arg(format!("{}bm", k.base()))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        per_minute,
        vec![((T0 + 7_200_000) / 60_000, 500)],
        "bucket records per minute: the promoted minute has none left"
    );
    // Created after the promotion, due soon: its own key at once.
    w.apply(once("late", T0 + 40_000), T0).await;
    let late: i64 = redis::cmd("EXISTS")
        .arg(k.timer("late"))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(late, 1);
    let mut fired = w.claim_all(T0 + 60_000).await;
    for (id, n) in w.claim_all(T0 + 7_200_000).await {
        *fired.entry(id).or_default() += n;
    }
    assert_eq!(fired.len(), 1_001);
    assert!(fired.values().all(|&n| n == 1));
}
