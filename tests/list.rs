//! The store's listing and counts against a real redis-server: the counts per application
//! and state, and the paged, filtered listing of a partition's timers (the admin API's
//! `/timers`), which misses no timer while others move between pages.

mod common;

use common::store::{once_of as once, op_of as op, World, T0};
use ktimer::command::CommandKind;
use ktimer::store::ListFilter;
use ktimer::timer::TimerState;
use std::collections::BTreeMap;

/// Every timer a listing with `f` answers, page after page: id -> times listed.
async fn list_all(w: &World, f: &ListFilter) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (next, page) = w.store.list_page(0, &cursor, f).await.expect("list");
        pages += 1;
        for t in page {
            *seen.entry(t.timer_id).or_default() += 1;
        }
        match next {
            Some(n) => cursor = n,
            None => break,
        }
        assert!(pages < 1000, "the cursor does not end");
    }
    seen
}

#[tokio::test]
async fn counts_and_listing_follow_applications_states_and_prefixes() {
    let mut w = World::new("listing").await;
    let far = T0 + 600_000;
    // Enough timers for the bucket to outgrow the compact encoding, and for the
    // listing to take several pages.
    for i in 0..400 {
        w.apply(once("app", &format!("o-{i}"), far + i), T0).await;
    }
    for i in 0..5 {
        w.apply(once("other", &format!("x-{i}"), far), T0).await;
    }
    w.apply(once("app", "soon", T0 + 1_000), T0).await;
    w.apply(op("app", CommandKind::Pause, "o-1"), T0).await;
    w.apply(op("app", CommandKind::Cancel, "o-2"), T0).await;
    let fired = w.claim_all(T0 + 1_000).await;
    assert_eq!(fired.len(), 1);
    let c = w.claim(T0 + 1_000, T0 + 1_000).await;
    assert!(c.fires.is_empty());

    let counts = w.store.state_counts(0).await.unwrap();
    let n = |app: &str, st| counts.get(&(app.to_string(), st)).copied().unwrap_or(0);
    assert_eq!(n("app", TimerState::Scheduled), 399, "{counts:?}");
    assert_eq!(n("app", TimerState::Paused), 1);
    assert_eq!(n("app", TimerState::Cancelled), 1);
    assert_eq!(n("other", TimerState::Scheduled), 5);

    let all = ListFilter {
        limit: 25,
        ..Default::default()
    };
    let listed = list_all(&w, &all).await;
    assert_eq!(listed.len(), 406, "every timer");
    assert!(listed.values().all(|n| *n == 1), "none twice");
    let app = ListFilter {
        application: Some("other".into()),
        ..all.clone()
    };
    assert_eq!(list_all(&w, &app).await.len(), 5);
    let paused = ListFilter {
        state: Some(TimerState::Paused),
        ..all.clone()
    };
    assert_eq!(
        list_all(&w, &paused).await.into_keys().collect::<Vec<_>>(),
        ["o-1"]
    );
    let prefix = ListFilter {
        id_prefix: "o-1".into(),
        ..all.clone()
    };
    // o-1, o-10..o-19, o-100..o-199
    assert_eq!(list_all(&w, &prefix).await.len(), 111);
    let (_, first) = w
        .store
        .list_page(0, "", &ListFilter { limit: 3, ..all })
        .await
        .unwrap();
    assert!(
        first.len() >= 3 && first.len() < 100,
        "a page is about the limit: {}",
        first.len()
    );
}

/// A listing in pages lists every timer present and not moved for the whole listing, while
/// other timers leave the bucket between its pages (cancelled here; fired or promoted in
/// service), in the bucket's compact encoding (one scan step answers all its fields) and in
/// its hash-table encoding.
#[tokio::test]
async fn a_listing_misses_no_timer_while_others_leave_the_bucket_between_pages() {
    for (name, n) in [("page-small", 60), ("page-large", 1_500)] {
        let mut w = World::new(name).await;
        let far = T0 + 600_000;
        for i in 0..n {
            w.apply(once("app", &format!("t-{i}"), far + i), T0).await;
        }
        let f = ListFilter {
            limit: 10,
            ..Default::default()
        };
        let mut seen = BTreeMap::new();
        let mut gone = Vec::new();
        let mut cursor = String::new();
        for pages in 0.. {
            assert!(pages < 1_000, "the cursor does not end");
            let (next, page) = w.store.list_page(0, &cursor, &f).await.expect("list");
            // Two timers already listed leave the bucket before the next page.
            for t in page.iter().take(2) {
                if !gone.contains(&t.timer_id) {
                    w.apply(op("app", CommandKind::Cancel, &t.timer_id), T0)
                        .await;
                    gone.push(t.timer_id.clone());
                }
            }
            for t in page {
                *seen.entry(t.timer_id).or_insert(0) += 1;
            }
            match next {
                Some(c) => cursor = c,
                None => break,
            }
        }
        let missed: Vec<String> = (0..n)
            .map(|i| format!("t-{i}"))
            .filter(|id| !seen.contains_key(id))
            .collect();
        assert!(
            missed.is_empty(),
            "{name}: present all along, not listed: {missed:?}"
        );
    }
}
