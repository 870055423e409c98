//! A measured span of a bench phase: what Redis and the started instances spent from its
//! start to its end (CPU, Redis's calls and its time per script), per item of the phase.

use super::nodes::{self, Calls, NodeCpu, Sample};
use super::scripts::{ByScript, ScriptClock};
use super::setup::Env;
use tokio::time::Instant;

/// A span under way: the samples taken at its start and the script clock running.
pub struct Span {
    redis: Vec<Sample>,
    ktimer: Option<Sample>,
    clock: anyhow::Result<ScriptClock>,
    started: Instant,
    /// The started instances' results and state records so far (none: not counted).
    side: Option<i64>,
}

/// What a span cost, per item.
pub struct Costs {
    /// CPU of each Redis primary.
    pub redis_cpu: Vec<NodeCpu>,
    /// Redis commands.
    pub redis_calls: Calls,
    /// CPU of the started instances (none when the bench started none).
    pub ktimer_cpu: Option<NodeCpu>,
    /// Redis's execution time per script family (none when the slow log was refused).
    pub redis_by_script: Option<ByScript>,
    /// Redis's `used_memory` at the start and at the end, all primaries, bytes.
    pub memory: (u64, u64),
    /// Records the started instances produced per item (a fire: itself, and the results
    /// and state records produced meanwhile), when counted.
    pub records_per_item: Option<f64>,
}

impl Span {
    /// Starts a span now.
    pub async fn start(env: &Env) -> anyhow::Result<Span> {
        Ok(Span {
            redis: env.nodes.sample().await?,
            ktimer: env.instances.cpu(),
            clock: ScriptClock::start(&env.nodes).await,
            started: Instant::now(),
            side: side_records(env).await,
        })
    }

    /// Ends the span; its costs per one of `items`.
    pub async fn finish(self, env: &Env, items: usize) -> anyhow::Result<Costs> {
        let elapsed_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let redis_by_script = by_script(self.clock, items).await;
        let after = env.nodes.sample().await?;
        let ktimer_cpu = match (self.ktimer, env.instances.cpu()) {
            (Some(b), Some(a)) => nodes::cpu_between(&[b], &[a], items, elapsed_ms).pop(),
            _ => None,
        };
        let memory = |s: &[Sample]| s.iter().map(|s| s.used_memory).sum();
        let side = match (self.side, side_records(env).await) {
            (Some(b), Some(a)) if items > 0 => Some((a - b) as f64 / items as f64),
            _ => None,
        };
        Ok(Costs {
            redis_cpu: nodes::cpu_between(&self.redis, &after, items, elapsed_ms),
            redis_calls: nodes::calls_between(&self.redis, &after, items),
            ktimer_cpu,
            redis_by_script,
            memory: (memory(&self.redis), memory(&after)),
            records_per_item: side.map(|s| ((1.0 + s) * 100.0).round() / 100.0),
        })
    }
}

/// The started instances' results and state records so far
/// ([`super::produced::side_records`]); none for running instances (their topics carry
/// other traffic) or when the broker did not answer (with a warning).
async fn side_records(env: &Env) -> Option<i64> {
    env.prefix.as_ref()?;
    match super::produced::side_records(&env.kafka).await {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("bench: records produced beside the fires not counted: {e:#}");
            None
        }
    }
}

/// What the script clock measured, per one of `items`; none (with a warning) when the
/// slow log could not be used (a Redis that refuses CONFIG SET).
async fn by_script(clock: anyhow::Result<ScriptClock>, items: usize) -> Option<ByScript> {
    let measured = match clock {
        Ok(c) => c.finish(items).await,
        Err(e) => Err(e),
    };
    match measured {
        Ok((families, missed)) => Some(ByScript { families, missed }),
        Err(e) => {
            eprintln!("bench: Redis time per script not measured: {e:#}");
            None
        }
    }
}
