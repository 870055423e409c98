//! Samples what Redis holds about the owned partitions for the metrics, every few
//! seconds: live timers, and overdue fires (due, not yet claimed: a trigger that stopped
//! or fell behind). One task per instance, off the fire path.

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::status::StatusTx;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// How often the partitions are sampled.
const EVERY: Duration = Duration::from_secs(5);

/// Starts the sampler; it stops with `token`.
pub fn spawn(store: Store, metrics: Arc<Metrics>, status: &StatusTx, token: CancellationToken) {
    let status = status.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(EVERY) => {}
            }
            let owned = status.borrow().owned.clone();
            for p in owned {
                sample(&store, &metrics, p).await;
            }
        }
    });
}

async fn sample(store: &Store, m: &Metrics, partition: i32) {
    let label = [partition.to_string()];
    let label = [label[0].as_str()];
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
