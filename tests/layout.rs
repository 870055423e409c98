//! The store's layout against a real redis-server, with the time as an argument: the
//! bucket of pending records as it grows past Redis's compact encoding, promotion of the
//! timers due soon to keys of their own, and definition prefixes shared by the records
//! (`record.lua`, `place.lua`).

mod common;

use common::store::{World, T0};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::Ack;
use ktimer::timer::{ApplyOutcome, TimerState};

fn once(id: &str, at: i64) -> TimerCommand {
    TimerCommand {
        application: "app".into(),
        at_ms: Some(at),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

/// Live timers are fields of the partition's bucket (`place.lua`), one hash that Redis
/// turns into a hash table as it grows: every timer stays findable across the change of
/// encoding, a cancel moves it out of the bucket, and each live one fires once.
#[tokio::test]
async fn timers_stay_findable_while_the_bucket_grows() {
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
    let bucket = w.store.keys(0).bucket();
    let mut con = w.redis().await;
    let live: i64 = redis::cmd("HLEN")
        .arg(&bucket)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(live, 2_000, "the live timers are the bucket's fields");
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(&bucket)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        encoding, "hashtable",
        "2,000 fields outgrow the compact encoding"
    );
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

/// The migrator promotes one-shot timers due within a minute out of the bucket
/// into keys of their own (`promote.lua`), a page at a time; a timer created due soon
/// after that goes straight to its own key; far ones stay in the bucket; all fire once.
#[tokio::test]
async fn timers_due_soon_are_promoted_out_of_the_bucket() {
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
        let bucket = k.bucket();
        async move {
            let n: i64 = redis::cmd("HLEN")
                .arg(bucket)
                .query_async(&mut con)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(
        in_buckets(con.clone()).await,
        1_000,
        "all in the bucket before promotion"
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
        500,
        "the far ones stay in the bucket"
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

/// A timer of application `app` with callback `topic` and its own key, header and payload.
fn defined(id: &str, app: &str, topic: Option<String>, at: i64) -> TimerCommand {
    let callback = ktimer::command::Callback {
        topic,
        key: Some(format!("k-{id}").into_bytes()),
        headers: [("h".to_string(), id.to_string())].into(),
        payload: id.as_bytes().to_vec(),
        ..Default::default()
    };
    TimerCommand {
        application: app.into(),
        at_ms: Some(at),
        callback: Some(callback),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

#[tokio::test]
async fn records_share_definition_prefixes_and_fire_with_their_whole_definition() {
    let mut w = World::new("prefixes").await;
    let mut sent = std::collections::BTreeMap::new();
    // 4 applications x (a named topic, the default topic), due in buckets and soon; then
    // 4,100 topics of one application: past the 4,096 prefixes, definitions stay whole.
    let mut cmds: Vec<TimerCommand> = (0..400)
        .map(|i| {
            let topic = (i % 2 == 0).then(|| format!("callbacks.app-{}", i % 8 / 2));
            let due = T0 + if i % 3 == 0 { 30_000 } else { 3_600_000 };
            defined(&format!("t{i}"), &format!("app-{}", i % 8 / 2), topic, due)
        })
        .collect();
    cmds.extend((0..4_100).map(|i| {
        defined(
            &format!("x{i}"),
            "many",
            Some(format!("topic-{i}")),
            T0 + 3_600_000,
        )
    }));
    for chunk in cmds.chunks(500) {
        let reqs: Vec<_> = chunk.iter().map(|c| w.request(c.clone(), T0)).collect();
        let (applied, _) = w.store.apply(&reqs, &[], T0).await.expect("apply");
        assert!(applied.iter().all(|a| a.outcome == ApplyOutcome::Accepted));
        sent.extend(chunk.iter().map(|c| (c.timer_id.clone(), c.clone())));
    }
    let mut con = w.redis().await;
    let prefixes: i64 = redis::cmd("HLEN")
        .arg(format!("{}dp", w.store.keys(0).base()))
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        prefixes,
        2 * 4_096,
        "8 shared prefixes, then topics up to the bound"
    );
    let view = w.store.timer(0, "x4099").await.unwrap().expect("stored");
    let def = view.def.expect("a whole definition");
    assert_eq!(def.callback.topic.as_deref(), Some("topic-4099"));
    let mut fired = 0;
    for upto in [T0 + 60_000, T0 + 3_600_000] {
        loop {
            let fires = w.claim(upto, upto).await.fires;
            if fires.is_empty() {
                break;
            }
            for f in &fires {
                let c = &sent[&f.timer_id];
                assert_eq!(f.def.application, c.application, "{}", f.timer_id);
                assert_eq!(Some(&f.def.callback), c.callback.as_ref(), "{}", f.timer_id);
                fired += 1;
            }
            let members: Vec<Ack> = fires
                .iter()
                .map(|f| Ack::Dropped(f.member.clone()))
                .collect();
            w.store.ack(0, w.epoch, &members).await.unwrap();
        }
    }
    assert_eq!(fired, 4_500);
}
