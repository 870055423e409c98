//! The bench's pass-through baselines: the same broker, a plain consume-then-produce pipe
//! ([`super::pipe`]), no Redis. One pipes records shaped like fired records (the fire
//! rate's physical limit), the other the very command records the pending phase sends
//! (the intake's).

use super::load::{self, Plan};
use super::observe::{Count, Progress, Tap};
use super::pipe;
use super::report::per_second;
use super::setup::Env;
use crate::codec::Codec;
use crate::config::BenchArgs;
use crate::now_ms;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// Pipes `--timers` records shaped like fired records; returns the rate (records/s).
pub async fn fired_shaped(
    env: &Env,
    args: &BenchArgs,
    progress: &Arc<Progress>,
) -> anyhow::Result<f64> {
    let n = args.timers;
    progress.phase("baseline", n);
    let payload = vec![b'x'; args.payload_bytes];
    let prefix = format!("b{}-x-", env.run);
    let filled = pipe::fill(&env.kafka, &env.pipe_in, n, &prefix, &payload, progress).await?;
    anyhow::ensure!(
        filled.failed == 0,
        "baseline input not produced: {:?}",
        filled.first_error
    );
    run_pipe(env, args, (&env.pipe_in, &env.pipe_out), n, progress).await
}

/// Pipes `n` create commands of `plan` (encoded as the pending phase encodes them);
/// returns the rate (records/s).
pub async fn command_shaped(
    env: &Env,
    args: &BenchArgs,
    plan: &Plan,
    n: usize,
    codec: &Codec,
    progress: &Arc<Progress>,
) -> anyhow::Result<f64> {
    progress.phase("command baseline", n);
    let (from, to) = (&env.command_pipe.0, &env.command_pipe.1);
    let producer = load::producer(&env.kafka)?;
    let topic = env.kafka.commands_topic.as_str();
    let filled = load::produce(&producer, from, n, 0, progress, |i| {
        let cmd = plan.create(i);
        async move {
            let value = codec.encode_command(&cmd, topic).await?;
            Ok(load::Rec {
                key: cmd.timer_id,
                value: Some(value),
                headers: None,
            })
        }
    })
    .await?;
    anyhow::ensure!(
        filled.failed == 0,
        "command baseline input not produced: {:?}",
        filled.first_error
    );
    run_pipe(env, args, (from, to), n, progress).await
}

/// Runs the pipe over `n` records and counts them out; the rate from its start to the
/// last record received.
async fn run_pipe(
    env: &Env,
    args: &BenchArgs,
    (from, to): (&str, &str),
    n: usize,
    progress: &Arc<Progress>,
) -> anyhow::Result<f64> {
    let count = Tap::start(&env.kafka, to, Count::new(n, progress.clone()))?;
    let start = now_ms();
    let limit = Duration::from_millis(args.timeout_ms.max(1) as u64);
    tokio::time::timeout(limit, pipe::run(&env.kafka, from, to, n))
        .await
        .map_err(|_| anyhow::anyhow!("the baseline pipe did not finish within {limit:?}"))??;
    let (count, done) = count.finish(Instant::now() + limit).await?;
    anyhow::ensure!(
        done,
        "the baseline pipe delivered {} of {n} records",
        count.received
    );
    Ok(per_second(n, start, count.last_ms))
}
