//! The bench's takeover phase (`--takeover`): once the pending timers are in, the
//! instances are stopped and as many new ones started on the same topics, group and
//! Redis; the report says how long the new ones took to own every partition (the
//! group's rebalance, the broker's part) and to take each partition (ktimer's part: a
//! few keys read and the epoch moved, whatever the partition holds).

use super::observe::Progress;
use super::setup::Env;
use crate::config::BenchArgs;
use serde::Serialize;
use std::sync::Arc;
use tokio::time::Instant;

/// What the takeover phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct TakeoverReport {
    /// Pending timers the partitions held.
    pub timers: usize,
    /// From stopping the old instances until the new ones owned every partition, ms.
    pub owned_after_ms: u64,
    /// The longest any partition took from its assignment until its trigger started, ms.
    pub taken_max_ms: u64,
    /// Partitions taken without a rebuild (a rebuild is not a takeover: it means Redis
    /// did not hold what the old owner left).
    pub taken: usize,
    /// Partitions.
    pub partitions: usize,
}

/// Stops the instances, starts them again and measures the takeover of `timers`.
pub async fn takeover_phase(
    env: &mut Env,
    args: &BenchArgs,
    timers: usize,
    progress: &Arc<Progress>,
) -> anyhow::Result<TakeoverReport> {
    progress.phase("takeover", timers);
    let started = Instant::now();
    let statuses = env.restart(args).await?;
    let owned_after_ms = started.elapsed().as_millis() as u64;
    let taken: Vec<u64> = statuses
        .iter()
        .flat_map(|s| s.taken_ms.values().copied())
        .collect();
    Ok(TakeoverReport {
        timers,
        owned_after_ms,
        taken_max_ms: taken.iter().copied().max().unwrap_or(0),
        taken: taken.len(),
        partitions: args.partitions as usize,
    })
}
