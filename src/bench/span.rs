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
}

impl Span {
    /// Starts a span now.
    pub async fn start(env: &Env) -> anyhow::Result<Span> {
        Ok(Span {
            redis: env.nodes.sample().await?,
            ktimer: env.instances.cpu(),
            clock: ScriptClock::start(&env.nodes).await,
            started: Instant::now(),
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
        Ok(Costs {
            redis_cpu: nodes::cpu_between(&self.redis, &after, items, elapsed_ms),
            redis_calls: nodes::calls_between(&self.redis, &after, items),
            ktimer_cpu,
            redis_by_script,
            memory: (memory(&self.redis), memory(&after)),
        })
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
