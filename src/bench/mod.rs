//! `ktimer bench`: measures ktimer end to end on a real broker and Redis.
//!
//! A run has three phases, each with a progress line on stderr:
//! 1. **pending**: `--pending` one-shot timers due 1 to 25 hours ahead (empty payload) are
//!    produced as fast as the producer goes; the command intake rate (accepted results
//!    per second) and Redis `used_memory` per timer are measured. They stay pending
//!    through the next phases (the load the fire test must not feel).
//!    With `--rebuild`, Redis is then emptied and the time the instances take to
//!    rebuild it from the state topic is measured ([`rebuild`]).
//! 2. **fire**: `--timers` timers due `--due spread` (evenly over `--window-ms`) or
//!    `--due burst` (all in one millisecond), produced at `--rate`. The fired records
//!    are read back: fire lateness (ktimer's produce time, header `ktimer-fired-ms`,
//!    minus due), delivery lateness (received minus due), early, missing, duplicates.
//! 3. **baseline** ([`baseline`]): the same number of records shaped like fired records
//!    go through a plain consume-then-produce pipe ([`pipe`]) on the same broker; ktimer's
//!    delivered fire rate is reported as a ratio of the pipe's rate. With pending timers,
//!    as many create commands like theirs go through the same pipe first: the intake
//!    rate is reported as a ratio of that one. Then the producer floor: the fired-shaped
//!    records only produced at the fire phase's pace, ktimer's CPU per fire a multiple
//!    of its CPU per record.
//!
//! The run's topics are fresh (`ktimer-bench-RUN.*`), its instances are started in this
//! process (or `--instances 0` uses running ones), and everything it created is deleted
//! at the end unless `--keep`. The report goes to stdout and to `--out` as JSON plus an
//! SVG histogram. The command fails when a timer fired early or never.

pub mod baseline;
pub mod host;
pub mod instances;
pub mod load;
pub mod nodes;
pub mod observe;
pub mod percentiles;
pub mod pipe;
pub mod produced;
pub mod rebuild;
pub mod report;
pub mod scripts;
pub mod setup;
pub mod span;
pub mod svg;
pub mod takeover;
pub mod targets;

use crate::codec::Codec;
use crate::config::{BenchArgs, BenchDue};
use crate::now_ms;
use crate::shutdown::CancellationToken;
use hdrhistogram::Histogram;
use load::Plan;
use observe::{Answers, Fires, Progress, Tap};
use report::{per_second, BaselineReport, FireReport, PendingReport, Percentiles, Report};
use setup::Env;
use span::Span;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// Pending timers are due between these many ms from now and a day later.
const PENDING_FROM_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// Runs the bench; returns an error if it could not run, or if a timer fired early or
/// never.
pub async fn run(args: BenchArgs, token: CancellationToken) -> anyhow::Result<()> {
    anyhow::ensure!(args.timers > 0, "--timers must be at least 1");
    let run = setup::run_id();
    let mut env = Env::prepare(&args, &run).await?;
    let host_before = host::measure().await;
    let progress = Arc::new(Progress::default());
    let ticker_stop = CancellationToken::new();
    let ticker = progress.clone().print_every_second(ticker_stop.clone());
    let codec = Arc::new(Codec::new(env.kafka.schema_registry_url.as_deref())?);
    let outcome = tokio::select! {
        r = phases(&args, &mut env, &progress, &codec) => r,
        _ = token.cancelled() => Err(anyhow::anyhow!("interrupted")),
    };
    if env.prefix.is_none() && args.pending > 0 && !args.keep {
        // Running instances keep their keys: cancel the pending timers instead.
        if let Err(e) = cancel_pending(&env, args.pending, &progress, &codec).await {
            eprintln!("bench: cancelling the pending timers failed: {e:#}");
        }
    }
    ticker_stop.cancel();
    let _ = ticker.await;
    env.teardown(args.keep).await;
    let (mut report, fire, delivery) = outcome?;
    report.host = Some(host::HostSpeed {
        before_ns: host_before,
        after_ns: host::measure().await,
    });
    let (json, svg) = report.write(&args.out, &fire, &delivery)?;
    print!("{}", report.text());
    println!("report: {} and {}", json.display(), svg.display());
    let f = &report.fire;
    anyhow::ensure!(
        f.early == 0 && f.missing == 0,
        "{} timer(s) fired early and {} never fired",
        f.early,
        f.missing
    );
    Ok(())
}

type Outcome = (Report, Histogram<u64>, Histogram<u64>);

async fn phases(
    args: &BenchArgs,
    env: &mut Env,
    progress: &Arc<Progress>,
    codec: &Arc<Codec>,
) -> anyhow::Result<Outcome> {
    let pending = match args.pending {
        0 => None,
        n => Some(pending_phase(env, args.partitions, n, progress, codec).await?),
    };
    let rebuild = match (&pending, args.rebuild) {
        (Some(p), true) => {
            Some(rebuild::rebuild_phase(env, args.partitions, p.accepted, progress).await?)
        }
        _ => None,
    };
    let takeover = match (&pending, args.takeover) {
        (Some(p), true) => Some(takeover::takeover_phase(env, args, p.accepted, progress).await?),
        _ => None,
    };
    // Lead time: how long producing and applying all commands will take, from the
    // intake rate just measured when there is one.
    let measured = pending.as_ref().map(|p| p.intake_per_s as u64);
    let (fire, fires) = fire_phase(args, env, progress, codec, measured).await?;
    let command_baseline = match (&pending, args.no_baseline) {
        (Some(p), false) => {
            let plan = Plan {
                prefix: format!("b{}-c-", env.run),
                ..pending_plan(env, p.timers)
            };
            let n = p.timers;
            let rate = baseline::command_shaped(env, args, &plan, n, codec, progress).await?;
            Some(BaselineReport {
                records: n,
                rate_per_s: rate,
                ratio: ((p.intake_per_s / rate) * 100.0).round() / 100.0,
            })
        }
        _ => None,
    };
    let offered = match args.due {
        BenchDue::Burst => f64::INFINITY,
        BenchDue::Spread => args.timers as f64 * 1000.0 / args.window_ms.max(1) as f64,
    };
    let delivered = fire.delivery_rate_per_s;
    let (baseline, floor) = baseline::fired(env, args, (delivered, offered), progress).await?;
    let mut report = Report {
        run: env.run.clone(),
        settings: serde_json::json!({
            "brokers": env.kafka.brokers,
            "redis_url": args.redis_url,
            "instances": args.instances,
            "partitions": args.partitions,
            "timers": args.timers,
            "due": args.due,
            "window_ms": args.window_ms,
            "rate": args.rate,
            "via": args.via,
            "bound": args.bound,
            "payload_bytes": args.payload_bytes,
            "pending": args.pending,
            "instance_args": args.instance_args,
            "instance_bin": args.instance_bin,
        }),
        pending,
        rebuild,
        takeover,
        fire,
        baseline,
        floor,
        command_baseline,
        host: None,
        checks: Vec::new(),
    };
    report.judge(args.due == BenchDue::Burst, offered);
    Ok((report, fires.fire_lateness, fires.delivery_lateness))
}

fn pending_plan(env: &Env, n: usize) -> Plan {
    let from = now_ms() + PENDING_FROM_MS;
    Plan {
        prefix: format!("b{}-p-", env.run),
        dues: Arc::new(
            (0..n)
                .map(|i| from + (i as i64 * DAY_MS) / n as i64)
                .collect(),
        ),
        payload: Vec::new(),
        callback: env.callback.clone(),
    }
}

async fn pending_phase(
    env: &Env,
    partitions: i32,
    n: usize,
    progress: &Arc<Progress>,
    codec: &Arc<Codec>,
) -> anyhow::Result<PendingReport> {
    progress.phase("pending", n);
    let span = Span::start(env).await?;
    let plan = pending_plan(env, n);
    let answers = Answers::new(&plan.prefix, n, codec.clone(), progress.clone());
    let tap = Tap::start(&env.kafka, &env.kafka.results_topic, answers)?;
    let produced = load::produce_commands(env, codec, n, 0, progress, |i| plan.create(i)).await?;
    anyhow::ensure!(
        produced.failed == 0,
        "{} pending commands not produced: {:?}",
        produced.failed,
        produced.first_error
    );
    let deadline = Instant::now() + Duration::from_secs(60 + (n / 5_000) as u64);
    let (answers, _) = tap.finish(deadline).await?;
    ensure_accepted(answers.accepted, &answers.refused)?;
    // Memory at rest: once the checkpoints wrote every new timer to the state topic (the
    // dirty set is a passing queue, not what a pending timer costs). Redis's CPU counts
    // that checkpoint work too.
    caught_up(env, partitions, n).await?;
    let costs = span.finish(env, answers.accepted).await?;
    let (before, after) = costs.memory;
    Ok(PendingReport {
        redis_cpu: costs.redis_cpu,
        ktimer_cpu: costs.ktimer_cpu,
        redis_by_script: costs.redis_by_script,
        timers: n,
        accepted: answers.accepted,
        intake_per_s: per_second(answers.accepted, produced.started_ms, answers.last_ms),
        refused: answers.refused,
        redis_bytes_before: before,
        redis_bytes_after: after,
        bytes_per_timer: ((after.saturating_sub(before)) as f64 / answers.accepted.max(1) as f64)
            .round(),
    })
}

/// Fails the run when every command of a phase was refused (nothing would fire), with the
/// reasons the results gave.
fn ensure_accepted(
    accepted: usize,
    refused: &std::collections::BTreeMap<String, usize>,
) -> anyhow::Result<()> {
    let why = report::refusals(refused);
    anyhow::ensure!(
        accepted > 0 || refused.is_empty(),
        "every command was refused: {why}"
    );
    Ok(())
}

/// Cancels the pending timers (on running instances) and waits for the answers.
async fn cancel_pending(
    env: &Env,
    n: usize,
    progress: &Arc<Progress>,
    codec: &Arc<Codec>,
) -> anyhow::Result<()> {
    progress.phase("clean-up", n);
    let plan = pending_plan(env, n);
    let answers = Answers::new(&plan.prefix, n, codec.clone(), progress.clone());
    let tap = Tap::start(&env.kafka, &env.kafka.results_topic, answers)?;
    load::produce_commands(env, codec, n, 0, progress, |i| plan.cancel(i)).await?;
    let (answers, done) = tap.finish(Instant::now() + Duration::from_secs(60)).await?;
    anyhow::ensure!(
        done && answers.accepted == n,
        "{} of {n} pending timers cancelled: {:?}",
        answers.accepted,
        answers.refused
    );
    Ok(())
}

/// Waits until the checkpoints of the instances the bench started wrote every change to
/// the state topic (a phase of `n` timers; running instances are not watched), so the
/// phase's costs count that work.
async fn caught_up(env: &Env, partitions: i32, n: usize) -> anyhow::Result<()> {
    if env.prefix.is_some() {
        let limit = Duration::from_secs(60 + (n / 2_000) as u64);
        env.checkpointed(partitions, limit).await?;
    }
    Ok(())
}

async fn fire_phase(
    args: &BenchArgs,
    env: &Env,
    progress: &Arc<Progress>,
    codec: &Arc<Codec>,
    intake_per_s: Option<u64>,
) -> anyhow::Result<(FireReport, Fires)> {
    let n = args.timers;
    progress.phase("fire", n);
    let intake = intake_per_s.unwrap_or(10_000).max(1_000);
    let per_s = if args.rate > 0 {
        args.rate.min(intake)
    } else {
        intake
    };
    let lead = args
        .lead_ms
        .unwrap_or(n as i64 * 1000 / per_s as i64 + 3_000);
    let start = now_ms();
    let t0 = start + lead;
    let dues: Vec<i64> = match args.due {
        BenchDue::Burst => vec![t0; n],
        BenchDue::Spread => (0..n)
            .map(|i| t0 + i as i64 * args.window_ms / n as i64)
            .collect(),
    };
    let last_due = *dues.last().unwrap_or(&t0);
    let plan = Plan {
        prefix: format!("b{}-f-", env.run),
        dues: Arc::new(dues),
        payload: vec![b'x'; args.payload_bytes],
        callback: env.callback.clone(),
    };
    let answers = Tap::start(
        &env.kafka,
        &env.kafka.results_topic,
        Answers::new(&plan.prefix, n, codec.clone(), progress.clone()),
    )?;
    let fires = Tap::start(
        &env.kafka,
        &env.callback,
        Fires::new(&plan.prefix, plan.dues.clone(), progress.clone()),
    )?;
    let until = |ms: i64| Instant::now() + Duration::from_millis((ms - now_ms()).max(0) as u64);
    // The costs from the first due to the last fire and the checkpoints after it: the
    // fire path's, and how busy the drain kept Redis (the lead before the first due
    // would dilute them). When timers are due before their last commands are produced
    // (`--lead-ms` shorter than producing takes), commands and fires share the span: it
    // runs from the first command, and its costs are per timer, its command and its fire.
    let mixed = lead < (n as u64 * 1000 / per_s) as i64;
    let from_start = match mixed {
        true => Some(Span::start(env).await?),
        false => None,
    };
    let intake = async {
        let produced =
            load::produce_commands(env, codec, n, args.rate, progress, |i| plan.create(i)).await?;
        let (answers, _) = answers.finish(until(last_due + args.timeout_ms)).await?;
        anyhow::Ok((produced, answers))
    };
    let from_due = async {
        tokio::time::sleep_until(until(t0)).await;
        anyhow::Ok(match mixed {
            true => None,
            false => Some(Span::start(env).await?),
        })
    };
    let (intake, from_due) = tokio::join!(intake, from_due);
    let ((produced, answers), span) = (intake?, from_due?.or(from_start));
    ensure_accepted(answers.accepted, &answers.refused)?;
    let span = span.expect("a span starts at the first command or at the first due");
    let (fires, _) = fires.finish(until(last_due + args.timeout_ms)).await?;
    // The costs include what the fires owe the state topic (a tombstone for each timer
    // whose state was written): the span ends once the checkpoints caught up, which in a
    // burst can be seconds after the last fire.
    caught_up(env, args.partitions, n).await?;
    let costs = span.finish(env, fires.unique).await?;
    let report = FireReport {
        timers: n,
        produce_failed: produced.failed,
        accepted: answers.accepted,
        intake_per_s: per_second(answers.accepted, produced.started_ms, answers.last_ms),
        refused: answers.refused.clone(),
        lead_ms: lead,
        answered_before_due_ms: t0 - answers.last_ms,
        fired: fires.unique,
        missing: fires.missing(),
        early: fires.early,
        duplicates: fires.duplicates,
        first_due_ms: t0,
        last_fired_ms: fires.last_fired_ms,
        fire_rate_per_s: per_second(fires.unique, t0, fires.last_fired_ms),
        delivery_rate_per_s: per_second(fires.unique, t0, fires.last_received_ms),
        fire_lateness_ms: Percentiles::of(&fires.fire_lateness),
        delivery_lateness_ms: Percentiles::of(&fires.delivery_lateness),
        per_timer: mixed || answers.last_ms > t0,
        redis_cpu: costs.redis_cpu,
        redis_calls: costs.redis_calls,
        ktimer_cpu: costs.ktimer_cpu,
        redis_by_script: costs.redis_by_script,
        peak_rss_mb: env.instances.peak_rss_mb(),
        records_per_fire: costs.records_per_item,
    };
    Ok((report, fires))
}
