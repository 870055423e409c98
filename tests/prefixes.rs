//! Definition prefixes numbered by the owner against a real redis-server: create.lua
//! writes records ktimer packed whole, their definition's prefix (application and
//! callback topic) as the number the partition's `dp` hash gives it, which the store
//! learnt and keeps. What it learnt can be stale (Redis lost the hash, a rebuild numbered
//! anew): nothing is written under a number that is not the partition's.

mod common;

use common::store::{stored_bytes, World, T0};
use ktimer::codec::{encode_stored, stored_prefix_len};
use ktimer::command::{Callback, CommandKind, TimerCommand};
use ktimer::store::Keys;
use ktimer::timer::{ApplyOutcome, TimerDef};

/// A create of a one-shot timer of `app` sending to callback topic `topic`.
fn once(app: &str, topic: &str, id: &str, at: i64) -> TimerCommand {
    TimerCommand {
        application: app.into(),
        at_ms: Some(at),
        callback: Some(Callback {
            topic: Some(topic.into()),
            payload: b"payload".to_vec(),
            ..Callback::default()
        }),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

/// The stored prefix of a definition of `app` sending to `topic`.
fn prefix(app: &str, topic: &str) -> Vec<u8> {
    let def = TimerDef {
        application: app.into(),
        callback: Callback {
            topic: Some(topic.into()),
            ..Callback::default()
        },
    };
    let bytes = encode_stored(&def).unwrap();
    bytes[..stored_prefix_len(&def)].to_vec()
}

/// The definition prefixes of partition 0 of `w`'s store (`dp`).
fn dp(w: &World) -> String {
    Keys::new(&w.prefix, "cmds", 0).prefixes()
}

/// Redis loses partition 0's prefix numbering (`dp`), and nothing else.
async fn lose_numbering(w: &World) {
    let mut con = w.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(dp(w))
        .query_async(&mut con)
        .await
        .unwrap();
}

/// The number `dp` gives `prefix` in partition 0 of `w`'s store.
async fn number_of(w: &World, prefix: &[u8]) -> Option<i64> {
    let mut con = w.redis().await;
    let dp = dp(w);
    let mut field = b"=".to_vec();
    field.extend_from_slice(prefix);
    redis::cmd("HGET")
        .arg(dp)
        .arg(field)
        .query_async(&mut con)
        .await
        .unwrap()
}

/// Creates `cmds` in one batch (create.lua takes them); each is accepted.
async fn create(w: &mut World, cmds: &[TimerCommand]) {
    let reqs: Vec<_> = cmds.iter().map(|c| w.request(c.clone(), T0)).collect();
    let (applied, _, _) = w.store.apply_writing(&reqs, &[], T0).await.unwrap();
    assert!(applied.iter().all(|a| a.outcome == ApplyOutcome::Accepted));
}

/// The record of `id` holds its definition's prefix as number `n`: the packed array's
/// definition (its seventh item) is `[n, rest]`.
fn holds_number(w: &World, id: &str, n: i64) -> bool {
    let record = stored_bytes(w, id);
    let fields = rmpv::decode::read_value(&mut &record[..]).unwrap();
    let d = &fields.as_array().unwrap()[6];
    d.as_array().and_then(|pair| pair[0].as_i64()) == Some(n)
}

/// The store numbers a prefix once and keeps its number; Redis then loses the `dp`
/// hash and another prefix gets that number (as a rebuild would number them anew). The
/// next create of the first prefix is not written under the stale number: create.lua
/// answers so, apply.lua creates the timer with the partition's numbering, and the
/// store learns it again for the batch after.
#[tokio::test]
async fn a_stale_prefix_number_writes_nothing_under_it() {
    let mut w = World::new("prefixes-stale").await;
    let (a, b) = (prefix("app-a", "topic-a"), prefix("app-b", "topic-b"));
    create(&mut w, &[once("app-a", "topic-a", "x1", T0 + 120_000)]).await;
    assert_eq!(number_of(&w, &a).await, Some(1));
    assert!(holds_number(&w, "x1", 1));

    // Redis loses the numbering; app-b's prefix becomes number 1.
    lose_numbering(&w).await;
    create(&mut w, &[once("app-b", "topic-b", "other", T0 + 120_000)]).await;
    assert_eq!(number_of(&w, &b).await, Some(1));

    create(&mut w, &[once("app-a", "topic-a", "x2", T0 + 120_000)]).await;
    assert_eq!(number_of(&w, &a).await, Some(2), "app-a numbered again");
    let x2 = w.store.timer(0, "x2").await.unwrap().expect("x2");
    let def = x2.def.expect("a definition");
    assert_eq!(def.application, "app-a");
    assert_eq!(def.callback.topic.as_deref(), Some("topic-a"));
    assert!(holds_number(&w, "x2", 2));
    create(&mut w, &[once("app-a", "topic-a", "x3", T0 + 120_000)]).await;
    assert!(holds_number(&w, "x3", 2), "the new number learnt");
    let x3 = w.store.timer(0, "x3").await.unwrap().expect("x3");
    assert_eq!(x3.def.unwrap().callback.topic.as_deref(), Some("topic-a"));
}

/// A partition that numbers no more prefixes (4,096) gets records holding their
/// definitions whole: created, read back and fired with the right callback topic.
#[tokio::test]
async fn a_partition_full_of_prefixes_keeps_new_definitions_whole() {
    let mut w = World::new("prefixes-full").await;
    let mut con = w.redis().await;
    let mut fill = redis::cmd("HSET");
    fill.arg(dp(&w));
    for n in 1..=4096 {
        fill.arg(format!("#{n}")).arg(format!("p{n}"));
        fill.arg(format!("=p{n}")).arg(n);
    }
    let _: () = fill.query_async(&mut con).await.unwrap();
    create(&mut w, &[once("app-a", "topic-a", "whole", T0 + 5_000)]).await;
    assert_eq!(number_of(&w, &prefix("app-a", "topic-a")).await, None);
    let record = stored_bytes(&w, "whole");
    let fields = rmpv::decode::read_value(&mut &record[..]).unwrap();
    assert!(
        fields.as_array().unwrap()[6].is_str(),
        "the definition whole"
    );
    let fired = w.claim(T0 + 5_000, T0 + 5_000).await;
    assert_eq!(fired.fires.len(), 1);
    let def = &fired.fires[0].def;
    assert_eq!(def.callback.topic.as_deref(), Some("topic-a"));
}

/// The numbers learnt go stale while a new prefix is learnt: Redis loses `dp`, then one
/// batch creates a timer of an application whose prefix the store numbered before (1,
/// stale) and one of a new application, which the store numbers first (1 now). The
/// stale number is caught in that batch, whichever timer comes first: both timers name
/// their own topics when they fire.
#[tokio::test]
async fn a_stale_number_and_a_new_prefix_in_one_batch_keep_their_own_topics() {
    for (round, b_first) in [(0, true), (1, false)] {
        let mut w = World::new("prefixes-mixed").await;
        create(&mut w, &[once("app-a", "topic-a", "first", T0 + 300_000)]).await;
        lose_numbering(&w).await;
        let mut batch = vec![
            once("app-b", "topic-b", "b", T0 + 120_000),
            once("app-a", "topic-a", "a", T0 + 120_000),
        ];
        if !b_first {
            batch.reverse();
        }
        create(&mut w, &batch).await;
        let fired = w.claim(T0 + 120_000, T0 + 120_000).await;
        let mut topics: Vec<_> = (fired.fires.iter())
            .map(|f| (f.timer_id.as_str(), f.def.callback.topic.as_deref()))
            .collect();
        topics.sort();
        let want = [("a", Some("topic-a")), ("b", Some("topic-b"))];
        assert_eq!(topics, want, "round {round}");
    }
}
