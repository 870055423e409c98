//! Samples what Redis holds about the owned partitions for the metrics, every few
//! seconds: live timers, and overdue fires (due, not yet claimed: a trigger that stopped
//! or fell behind); whether Redis may evict ktimer's keys or evicted keys
//! ([`crate::store::guard`]). One task per instance, off the fire path.

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::status::StatusTx;
use crate::store::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How often the partitions are sampled.
const EVERY: Duration = Duration::from_secs(5);

/// Starts the sampler; it stops with `token`.
pub fn spawn(store: Store, metrics: Arc<Metrics>, status: &StatusTx, token: CancellationToken) {
    let publish = status.clone();
    let status = status.subscribe();
    tokio::spawn(async move {
        let mut evicted = HashMap::new();
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(EVERY) => {}
            }
            watch_eviction(&store, &metrics, &publish, &mut evicted).await;
            let lanes = status.borrow().lanes.clone();
            for (topic, owned) in lanes {
                let store = store.for_topic(&topic);
                for p in owned {
                    sample(&store, &metrics, p).await;
                }
            }
        }
    });
}

/// Reads every primary's eviction policy and counter (`evicted`: the counter last seen
/// per primary): an evicting policy, or keys evicted since the last sample, make the
/// instance unready, set the metrics and log an error.
async fn watch_eviction(
    store: &Store,
    m: &Metrics,
    status: &StatusTx,
    evicted: &mut HashMap<String, u64>,
) {
    let primaries = match store.eviction().await {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(error = %e, "redis eviction settings not sampled");
            return;
        }
    };
    let mut problems = Vec::new();
    for (node, e) in &primaries {
        problems.extend(e.refusal(node));
        let seen = evicted.insert(node.clone(), e.evicted_keys);
        let grew = seen.map_or(0, |before| e.evicted_keys.saturating_sub(before));
        if grew > 0 {
            m.redis_evicted_keys.inc_by(grew);
            problems.push(format!(
                "Redis {node} evicted {grew} keys in the last {} s: timers may be lost; \
                 set maxmemory-policy noeviction and raise maxmemory",
                EVERY.as_secs()
            ));
        }
    }
    m.redis_may_evict
        .set(primaries.iter().any(|(_, e)| e.may_evict()) as i64);
    for p in &problems {
        tracing::error!(problem = %p, "redis may lose timers");
    }
    let why = (!problems.is_empty()).then(|| problems.join("; "));
    status.send_if_modified(|s| {
        let changed = s.redis_unsafe != why;
        s.redis_unsafe = why;
        changed
    });
}

async fn sample(store: &Store, m: &Metrics, partition: i32) {
    let label = crate::metrics::slot(store.topic(), partition);
    let now = Clock::System.now_ms();
    match store.live_timers(partition).await {
        Ok(live) => m.pending.with_label_values(&label).set(live.values().sum()),
        Err(e) => tracing::debug!(partition, error = %e, "pending timers not sampled"),
    }
    match store.overdue(partition, now).await {
        Ok(o) => {
            m.overdue.with_label_values(&label).set(o.count as i64);
            let age = o.oldest_due_ms.map_or(0, |d| (now - d).max(0));
            m.overdue_age
                .with_label_values(&label)
                .set(age as f64 / 1000.0);
        }
        Err(e) => tracing::debug!(partition, error = %e, "overdue fires not sampled"),
    }
}
