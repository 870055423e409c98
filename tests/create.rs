//! create.lua (a run of new one-shot timers, the intake's common command) and the claim's
//! slices against a real redis-server: create.lua leaves what apply.lua leaves for the
//! same commands; a timer Redis holds goes back to apply.lua, which decides; a claim cut
//! short leaves the rest due.

mod common;

use common::store::{World, T0};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::Keys;
use ktimer::timer::{ApplyOutcome, ApplyRequest};
use std::collections::BTreeMap;

fn once(app: &str, id: &str, at: i64) -> TimerCommand {
    TimerCommand {
        application: app.into(),
        at_ms: Some(at),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

/// Every key of `w`'s store and what it holds, the store's prefix left out of the names.
async fn dump(w: &World) -> BTreeMap<String, String> {
    let mut con = w.redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*", w.prefix))
        .query_async(&mut con)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut con)
            .await
            .unwrap();
        let mut read = match kind.as_str() {
            "string" => redis::cmd("GET"),
            "hash" => redis::cmd("HGETALL"),
            "zset" => redis::cmd("ZRANGE"),
            other => panic!("{key}: a {other}"),
        };
        read.arg(&key);
        if kind == "zset" {
            read.arg(0).arg(-1).arg("WITHSCORES");
        }
        let v: redis::Value = read.query_async(&mut con).await.unwrap();
        let v = match (kind.as_str(), v) {
            // (A hash's fields in no set order.)
            ("hash", redis::Value::Array(items)) => {
                let mut pairs: Vec<_> = items.chunks(2).map(|p| format!("{p:?}")).collect();
                pairs.sort();
                pairs.join(",")
            }
            (_, v) => format!("{v:?}"),
        };
        let name = key.replacen(&w.prefix, "", 1);
        if name.ends_with(":writing") {
            // (Entries are named by the first offset of each script call: calls differ.)
            let mut ids: Vec<String> = redis::cmd("HVALS")
                .arg(&key)
                .query_async::<Vec<String>>(&mut con)
                .await
                .unwrap()
                .iter()
                .flat_map(|v| v.split('\n').map(String::from).collect::<Vec<_>>())
                .collect();
            ids.sort();
            out.insert(name, ids.join(","));
            continue;
        }
        out.insert(name, v);
    }
    out
}

/// The same commands through create.lua (no pending limit) and through apply.lua (a
/// limit no create reaches): the same answers, the same states to write, and the same
/// keys and contents, byte for byte: records in the bucket and in own keys, slices and
/// their index, deferred, dirty and writing entries (their ids: calls name them by their
/// first offsets, and the calls differ), counts, the applied offset. Timers due within
/// the deferral window, at its edge, in the next minutes and in an hour, of two
/// applications in turn; the caller writing the states, then the checkpoint.
#[tokio::test]
async fn new_timers_written_by_create_lua_are_what_apply_lua_writes() {
    let (mut fast, mut slow) = (World::new("create").await, World::new("create-apply").await);
    let cmds = [
        once("a", "soon-1", T0 + 3_000),
        once("a", "soon-2", T0 + 4_000),
        // The last instant deferred (now + 10 s), and the first not.
        once("a", "edge-1", T0 + 10_000),
        once("a", "edge-2", T0 + 10_001),
        once("a", "next-1", T0 + 70_000),
        once("b", "next-2", T0 + 75_000),
        once("b", "hour-1", T0 + 3_600_000),
        once("a", "hour-2", T0 + 3_600_001),
    ];
    for (round, writing) in [(0, true), (1, false)] {
        let mut batches: Vec<Vec<ApplyRequest>> = Vec::new();
        for (w, limit) in [(&mut fast, None), (&mut slow, Some(1_000_000))] {
            let reqs = cmds.iter().map(|c| {
                let mut c = c.clone();
                c.timer_id = format!("{}-{round}", c.timer_id);
                ApplyRequest {
                    max_pending: limit,
                    ..w.request(c, T0)
                }
            });
            batches.push(reqs.collect());
        }
        let mut answers = Vec::new();
        for (w, reqs) in [(&fast, &batches[0]), (&slow, &batches[1])] {
            let (applied, written) = match writing {
                true => {
                    let (a, _, written) = w.store.apply_writing(reqs, &[], T0).await.unwrap();
                    (a, written)
                }
                false => (w.store.apply(reqs, &[], T0).await.unwrap().0, vec![]),
            };
            assert!(applied.iter().all(|a| a.outcome == ApplyOutcome::Accepted));
            // Each entry of states to write is the one Redis names by its first offset.
            let k = Keys::new(&w.prefix, "cmds", 0);
            let mut con = w.redis().await;
            for e in &written {
                let ids: String = redis::cmd("HGET")
                    .arg(k.writing())
                    .arg(e.first)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                let sent: Vec<_> = e.fresh.iter().map(|(id, _)| id.as_str()).collect();
                assert_eq!(
                    ids.split('\n').collect::<Vec<_>>(),
                    sent,
                    "entry {}",
                    e.first
                );
                assert!(
                    e.timers.is_empty(),
                    "new timers' states are built by ktimer"
                );
            }
            let states: Vec<_> = written.into_iter().flat_map(|e| e.fresh).collect();
            answers.push((applied, format!("{states:?}")));
        }
        assert_eq!(answers[0], answers[1], "round {round}: answers and states");
        assert_eq!(dump(&fast).await, dump(&slow).await, "round {round}: Redis");
    }
}

/// A create of a timer Redis holds (one-shot creates sent to create.lua) is answered
/// back and applied by apply.lua: rejected while the timer is scheduled, and counted
/// once; the rest of the run is created. The same batch again (a reply lost, a retry)
/// answers the same and counts nothing twice.
#[tokio::test]
async fn a_timer_redis_holds_goes_back_to_apply_lua() {
    let mut w = World::new("create-back").await;
    let first = [
        w.request(once("a", "x", T0 + 70_000), T0),
        w.request(once("a", "y", T0 + 80_000), T0),
    ];
    let (applied, _, _) = w.store.apply_writing(&first, &[], T0).await.unwrap();
    assert!(applied.iter().all(|a| a.outcome == ApplyOutcome::Accepted));
    let again = [
        w.request(once("a", "x", T0 + 90_000), T0),
        w.request(once("a", "z", T0 + 90_000), T0),
    ];
    let k = Keys::new(&w.prefix, "cmds", 0);
    let mut con = w.redis().await;
    for attempt in 0..2 {
        let (applied, _, written) = w.store.apply_writing(&again, &[], T0).await.unwrap();
        assert_eq!(
            applied[0].outcome,
            ApplyOutcome::Rejected,
            "attempt {attempt}"
        );
        assert!(
            applied[0].reason.contains("scheduled"),
            "{}",
            applied[0].reason
        );
        assert_eq!(
            applied[0].version,
            Some(first[0].offset),
            "x keeps its version"
        );
        assert_eq!(
            applied[1].outcome,
            ApplyOutcome::Accepted,
            "attempt {attempt}"
        );
        assert_eq!(applied[1].version, Some(again[1].offset));
        let live: i64 = redis::cmd("HGET")
            .arg(k.apps())
            .arg("a")
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(
            live, 3,
            "attempt {attempt}: x, y and z live, each counted once"
        );
        let states: Vec<_> = written.iter().flat_map(|w| &w.fresh).collect();
        if attempt == 0 {
            assert_eq!(states.len(), 1, "z's state to write: {written:?}");
            assert_eq!(states[0].0, "z");
        }
    }
    let x = w.store.timer(0, "x").await.unwrap().expect("x");
    assert_eq!(
        x.due_ms,
        Some(T0 + 70_000),
        "x is as its first create made it"
    );
}

/// A claim cut short by its byte budget (one fire per claim here) leaves the members it did
/// not go through due in their slices, and each fire in flight is scored by its due (the
/// checkpoint's watermark reads those scores): one-shot timers in their own keys (the
/// claim's lean path), in the bucket (its full path) and an extra fire (FIRE_NOW), each
/// claimed once, in due order, none lost.
#[tokio::test]
async fn a_claim_cut_short_by_its_byte_budget_leaves_the_rest_due() {
    let mut w = World::new("claim-budget").await;
    let mut due = std::collections::BTreeMap::new();
    for i in 0..4 {
        let id = format!("own-{i}");
        w.apply(once("app", &id, T0 + 5_000 + i), T0).await;
        due.insert(id, T0 + 5_000 + i);
    }
    for i in 0..2 {
        let id = format!("bucket-{i}");
        w.apply(once("app", &id, T0 + 65_000 + i), T0).await;
        due.insert(id, T0 + 65_000 + i);
    }
    while w.store.promote(0, w.epoch, T0 + 5_000, 100).await.unwrap() {}
    let fire = TimerCommand {
        application: "app".into(),
        ..TimerCommand::new(CommandKind::FireNow, "bucket-1", "fire")
    };
    assert_eq!(
        w.apply(fire, T0 + 6_000).await.outcome,
        ApplyOutcome::Accepted
    );
    let upto = T0 + 70_000;
    let mut window = common::store::window(upto, upto - 60_000, upto);
    window.max_bytes = 1;
    let k = ktimer::store::Keys::new(&w.prefix, "cmds", 0);
    let mut con = w.redis().await;
    let mut claimed = Vec::new();
    for _ in 0..20 {
        let c = w.store.claim(0, w.epoch, window.clone()).await.unwrap();
        if c.fires.is_empty() {
            break;
        }
        assert_eq!(
            c.fires.len(),
            1,
            "one fire per claim within a 1-byte budget"
        );
        assert!(c.full, "a claim stopped by its budget says so");
        for f in c.fires {
            let score: f64 = redis::cmd("ZSCORE")
                .arg(k.inflight())
                .arg(&f.member)
                .query_async(&mut con)
                .await
                .unwrap();
            assert_eq!(score as i64, f.due_ms, "in-flight score of {}", f.member);
            claimed.push((f.due_ms, f.timer_id));
        }
    }
    let extra = claimed.iter().filter(|(_, id)| id == "bucket-1").count();
    assert_eq!(
        extra, 2,
        "bucket-1 fires on its due and once more: {claimed:?}"
    );
    let mut sorted = claimed.clone();
    sorted.sort();
    assert_eq!(claimed, sorted, "fires come in due order");
    let ids: std::collections::BTreeSet<_> = claimed.iter().map(|(_, id)| id.clone()).collect();
    assert_eq!(ids, due.keys().cloned().collect(), "every timer fired");
    assert_eq!(
        claimed.len(),
        due.len() + 1,
        "each once, the extra fire besides"
    );
    for (d, id) in &claimed {
        assert!(
            *d == due[id] || id == "bucket-1",
            "{id} claimed as due at {d}"
        );
    }
}

/// A one-shot timer created again after it fired (create.lua holds a record of it, so
/// apply.lua decides) is accepted, and keeps its first life's history: that create at
/// its own time, offset and request, then the fire, then the new create. (The first
/// create is stored in its short form, which is expanded from the version and due it
/// describes, not the new timer's.)
#[tokio::test]
async fn a_timer_created_again_after_its_fire_keeps_the_history_of_its_first_life() {
    use ktimer::store::{Ack, EntryOutcome, HistoryEntry};
    let mut w = World::new("again").await;
    let due = T0 + 1_000;
    w.apply(once("app", "a", due), T0).await;
    let claimed = w.claim(due, due).await;
    assert_eq!(claimed.fires.len(), 1);
    let ack = Ack::Produced {
        member: claimed.fires[0].member.clone(),
        fired_ms: due + 3,
        attempt: 1,
        dead: None,
    };
    w.store.ack(0, w.epoch, &[ack]).await.expect("ack");
    let again = w.apply(once("app", "a", T0 + 90_000), due + 10).await;
    assert_eq!(again.outcome, ApplyOutcome::Accepted, "{again:?}");

    let t = w.store.timer(0, "a").await.unwrap().expect("timer a");
    let seen: Vec<(i64, &str, i64, &str)> = t
        .history
        .iter()
        .map(|e| match e {
            HistoryEntry::Command {
                at_ms,
                op,
                outcome,
                offset,
                request_id,
                ..
            } => {
                assert_eq!(*outcome, EntryOutcome::Accepted);
                (*at_ms, *op, *offset, request_id.as_str())
            }
            HistoryEntry::Fire {
                fired_ms, due_ms, ..
            } => (*fired_ms, "fire", *due_ms, ""),
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (T0, "create", 1, "r1"),
            (due + 3, "fire", due, ""),
            (due + 10, "create", 2, "r2"),
        ]
    );
}
