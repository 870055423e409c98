//! The bench's pass-through baselines: the same broker, a plain consume-then-produce pipe
//! ([`super::pipe`]), no Redis. One pipes records shaped like fired records (the fire
//! rate's physical limit), the other the very command records the pending phase sends
//! (the intake's). Beside them the producer floor: the same fired-shaped records only
//! produced, at the fire phase's pace, with ktimer's producer settings, and the CPU this
//! process spent on it: the least a fire can cost ktimer on this machine at that rate.

use super::instances::cpu_s;
use super::load::{self, Plan};
use super::observe::{Count, Progress, Tap};
use super::pipe;
use super::report::{per_second, BaselineReport};
use super::setup::Env;
use crate::codec::Codec;
use crate::config::BenchArgs;
use crate::kafka;
use anyhow::Context;
use serde::Serialize;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// The producer floor: fired-shaped records produced alone at the fire phase's pace.
#[derive(Debug, Clone, Serialize)]
pub struct FloorReport {
    /// Records produced.
    pub records: usize,
    /// Their pace, per second (0: as fast as the producer took them, a burst's).
    pub rate_per_s: u64,
    /// CPU of this process per record, µs: producing, the delivery reports, librdkafka's
    /// threads (the bench does nothing else meanwhile).
    pub cpu_us_per_record: f64,
}

impl FloorReport {
    /// The least a fire costs ktimer, µs: the floor per record times the records ktimer
    /// produced per fire (`records_per_fire`: a fire, and the tombstone of a timer whose
    /// state was written; one when not measured).
    pub fn per_fire(&self, records_per_fire: Option<f64>) -> f64 {
        self.cpu_us_per_record * records_per_fire.unwrap_or(1.0)
    }

    /// Its report line, with ktimer's CPU per fire (`ktimer_us`) as a multiple of the
    /// floor per fire ([`FloorReport::per_fire`]).
    pub fn line(&self, ktimer_us: Option<f64>, records_per_fire: Option<f64>) -> String {
        let pace = match self.rate_per_s {
            0 => "as fast as it goes".to_string(),
            r => format!("at {r}/s"),
        };
        let per_fire = self.per_fire(records_per_fire);
        let records = records_per_fire.map_or(String::new(), |r| {
            format!("; ktimer produced {r:.2} records per fire: {per_fire:.1} µs per fire")
        });
        let ratio = ktimer_us.map_or(String::new(), |k| {
            format!("; ktimer per fire / floor = {:.1}", k / per_fire)
        });
        format!(
            "producer floor {} fired-shaped records {pace} with ktimer's producer settings: {:.1} µs of CPU per record{records}{ratio}",
            self.records, self.cpu_us_per_record
        )
    }
}

/// The fire phase's baselines (none with `--no-baseline`): the pipe, its rate against
/// the fires delivered at `delivered_per_s`, and the producer floor at the offered rate
/// (`offered_per_s`; infinite for a burst: unpaced).
pub async fn fired(
    env: &Env,
    args: &BenchArgs,
    (delivered_per_s, offered_per_s): (f64, f64),
    progress: &Arc<Progress>,
) -> anyhow::Result<(Option<BaselineReport>, Option<FloorReport>)> {
    if args.no_baseline {
        return Ok((None, None));
    }
    let rate = fired_shaped(env, args, progress).await?;
    let pipe = BaselineReport {
        records: args.timers,
        rate_per_s: rate,
        ratio: ((delivered_per_s / rate) * 100.0).round() / 100.0,
    };
    let pace = if offered_per_s.is_finite() {
        offered_per_s.round() as u64
    } else {
        0
    };
    Ok((
        Some(pipe),
        Some(producer_floor(env, args, pace, progress).await?),
    ))
}

/// Produces `--timers` fired-shaped records at `pace` per second (0: unpaced) with
/// ktimer's own producer ([`kafka::producer`]) and measures this process's CPU.
async fn producer_floor(
    env: &Env,
    args: &BenchArgs,
    pace: u64,
    progress: &Arc<Progress>,
) -> anyhow::Result<FloorReport> {
    let n = args.timers;
    progress.phase("producer floor", n);
    let producer = kafka::producer(&env.kafka)
        .create()
        .context("creating the floor's producer")?;
    let payload = vec![b'x'; args.payload_bytes];
    let prefix = format!("b{}-y-", env.run);
    let me = std::process::id();
    let before = cpu_s(me);
    let to = (env.pipe_in.as_str(), pace);
    let filled = pipe::fill(&producer, to, n, &prefix, &payload, progress).await?;
    let used = cpu_s(me) - before;
    anyhow::ensure!(
        filled.failed == 0,
        "producer floor: {} records not produced: {:?}",
        filled.failed,
        filled.first_error
    );
    Ok(FloorReport {
        records: n,
        rate_per_s: pace,
        cpu_us_per_record: (used * 1e6 / n.max(1) as f64 * 10.0).round() / 10.0,
    })
}

/// Pipes `--timers` records shaped like fired records; returns the rate (records/s).
async fn fired_shaped(
    env: &Env,
    args: &BenchArgs,
    progress: &Arc<Progress>,
) -> anyhow::Result<f64> {
    let n = args.timers;
    progress.phase("baseline", n);
    let payload = vec![b'x'; args.payload_bytes];
    let prefix = format!("b{}-x-", env.run);
    let producer = &env.commands;
    let to = (env.pipe_in.as_str(), 0);
    let filled = pipe::fill(producer, to, n, &prefix, &payload, progress).await?;
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
    let producer = &env.commands;
    let topic = env.kafka.commands_topic.as_str();
    let filled = load::produce(producer, from, n, 0, progress, |i| {
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

/// Runs the pipe over `n` records and counts them out; the rate from its first record
/// consumed to the last received.
async fn run_pipe(
    env: &Env,
    args: &BenchArgs,
    (from, to): (&str, &str),
    n: usize,
    progress: &Arc<Progress>,
) -> anyhow::Result<f64> {
    let count = Tap::start(&env.kafka, to, Count::new(n, progress.clone()))?;
    let limit = Duration::from_millis(args.timeout_ms.max(1) as u64);
    let piped = pipe::run(&env.kafka, &env.pipe_producer, (from, to), n);
    let start = tokio::time::timeout(limit, piped)
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

#[cfg(test)]
mod tests {
    use super::FloorReport;

    #[test]
    fn the_floor_line_says_its_pace_and_ktimers_multiple_of_it() {
        let f = |rate_per_s| FloorReport {
            records: 100_000,
            rate_per_s,
            cpu_us_per_record: 12.5,
        };
        let paced = f(10_000).line(Some(25.0), None);
        assert!(paced.contains("at 10000/s"), "{paced}");
        assert!(paced.contains("12.5 µs of CPU per record"), "{paced}");
        assert!(paced.ends_with("ktimer per fire / floor = 2.0"), "{paced}");
        // A fire with its tombstone: two records, the floor per fire twice as high.
        let two = f(10_000).line(Some(25.0), Some(2.0));
        assert!(
            two.contains("2.00 records per fire: 25.0 µs per fire"),
            "{two}"
        );
        assert!(two.ends_with("ktimer per fire / floor = 1.0"), "{two}");
        let burst = f(0).line(None, None);
        assert!(burst.contains("as fast as it goes"), "{burst}");
        assert!(!burst.contains("floor ="), "{burst}");
    }
}
