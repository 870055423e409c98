//! The bench's rebuild phase (`--rebuild`): once the pending timers are checkpointed to
//! the state topic, Redis is emptied and the time until every partition was rebuilt
//! (from the emptying, so detection is included) is measured, then the restored timers
//! are counted.

use super::observe::Progress;
use super::setup::Env;
use crate::store::Keys;
use anyhow::Context;
use redis::AsyncCommands;
use serde::Serialize;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// What the rebuild phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct RebuildReport {
    /// Pending timers that were accepted before Redis was emptied.
    pub timers: usize,
    /// Timer hashes found in Redis after the rebuild.
    pub restored: usize,
    /// From FLUSHDB until every partition recorded its checkpoint again, ms.
    pub elapsed_ms: u64,
    /// Restored timers per second.
    pub per_s: f64,
}

/// Waits for the checkpoints, empties Redis, and measures the rebuild of `timers`.
pub async fn rebuild_phase(
    env: &Env,
    partitions: i32,
    timers: usize,
    progress: &Arc<Progress>,
) -> anyhow::Result<RebuildReport> {
    let prefix = env
        .prefix
        .as_deref()
        .context("--rebuild needs instances the bench starts")?;
    let keys: Vec<Keys> = (0..partitions)
        .map(|p| Keys::new(prefix, &env.kafka.commands_topic, p))
        .collect();
    let client = redis::Client::open(env.redis_url.as_str())
        .ok()
        .filter(|_| !env.redis_url.contains(','))
        .context("--rebuild measures a single Redis server (not a cluster)")?;
    let mut c = client.get_multiplexed_async_connection().await?;
    progress.phase("rebuild", timers);
    // Every change written to the state topic, then one more checkpoint.
    env.checkpointed(partitions, Duration::from_secs(120))
        .await?;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let started = Instant::now();
    let _: () = redis::cmd("FLUSHDB")
        .arg("ASYNC")
        .query_async(&mut c)
        .await?;
    let deadline = started + Duration::from_secs(600);
    loop {
        let mut p = redis::pipe();
        for k in &keys {
            p.exists(k.checkpoint());
        }
        let done: Vec<bool> = p.query_async(&mut c).await?;
        if done.iter().all(|&d| d) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the rebuild did not finish in 600 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    let mut restored = 0;
    for k in &keys {
        // Timers in the bucket are its fields; every other has a key.
        let live: usize = c.hlen(k.bucket()).await?;
        restored += live;
        let opts = redis::ScanOptions::default()
            .with_pattern(format!("{}t:*", k.base()))
            .with_count(10_000);
        let mut it: redis::AsyncIter<String> = c.scan_options(opts).await?;
        while let Some(_key) = futures::StreamExt::next(&mut it).await {
            restored += 1;
        }
    }
    Ok(RebuildReport {
        timers,
        restored,
        elapsed_ms: elapsed.as_millis() as u64,
        per_s: (restored as f64 / elapsed.as_secs_f64().max(0.001)).round(),
    })
}
