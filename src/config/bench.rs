//! `ktimer bench`'s flags.

use super::KafkaArgs;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Due-time distribution of `ktimer bench`.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchDue {
    /// Due times evenly spread over `--window-ms` (a steady fire rate of timers/window).
    Spread,
    /// Every timer due at the same millisecond (the worst case for a burst).
    Burst,
}

/// `ktimer bench`
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Broker; with `--instances 0` also the commands and results topics of the running
    /// instances (the bench's callback topic is always a fresh one).
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Redis URL (the instances' Redis: memory is measured there).
    #[arg(
        long,
        env = "KTIMER_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// ktimer instances to start (`ktimer run` child processes) on fresh topics; 0 uses the instances
    /// already running on `--commands-topic`.
    #[arg(long, env = "KTIMER_BENCH_INSTANCES", default_value_t = 1)]
    pub instances: usize,
    /// Partitions of the fresh topics.
    #[arg(long, env = "KTIMER_BENCH_PARTITIONS", default_value_t = 4)]
    pub partitions: i32,
    /// Timers of the fire test.
    #[arg(long, env = "KTIMER_BENCH_TIMERS", default_value_t = 100_000)]
    pub timers: usize,
    /// Due-time distribution of the fire test.
    #[arg(long, value_enum, env = "KTIMER_BENCH_DUE", default_value = "burst")]
    pub due: BenchDue,
    /// With `--due spread`: the due times cover this many ms.
    #[arg(long, env = "KTIMER_BENCH_WINDOW_MS", default_value_t = 10_000)]
    pub window_ms: i64,
    /// Commands produced per second; 0 = as fast as the producer goes.
    #[arg(long, env = "KTIMER_BENCH_RATE", default_value_t = 0)]
    pub rate: u64,
    /// How the timers are sent: commands on the commands topic, or plain records with
    /// headers on the delay topic (delivered themselves).
    #[arg(long, value_enum, env = "KTIMER_BENCH_VIA", default_value_t)]
    pub via: super::Via,
    /// Drive an application bound to topics of its own (the instances' applications file
    /// binds `bench` to fresh commands, results, fired and state topics; the shared ones
    /// stay idle): what a bound application costs. Needs started instances.
    #[arg(long, env = "KTIMER_BENCH_BOUND")]
    pub bound: bool,
    /// First due time, ms after the fire test starts producing; default: the time to
    /// produce and apply every command at `--rate` or at the intake rate measured with
    /// the pending timers (10,000/s without), whichever is lower, plus 3 s.
    #[arg(long, env = "KTIMER_BENCH_LEAD_MS")]
    pub lead_ms: Option<i64>,
    /// Payload bytes of each timer.
    #[arg(long, env = "KTIMER_BENCH_PAYLOAD_BYTES", default_value_t = 100)]
    pub payload_bytes: usize,
    /// Pending timers (due in a day, empty payload) loaded before the fire test, to
    /// measure intake and Redis memory per timer; they stay pending during the fire test.
    #[arg(long, env = "KTIMER_BENCH_PENDING", default_value_t = 100_000)]
    pub pending: usize,
    /// After loading the pending timers, empty Redis (FLUSHDB: give the bench a Redis of
    /// its own) and measure how long the instances take to rebuild it from the state
    /// topic. Only with instances the bench starts.
    #[arg(long, env = "KTIMER_BENCH_REBUILD")]
    pub rebuild: bool,
    /// After the pending phase, stop the instances and start as many again, and measure
    /// how long the new ones take to own the partitions (the group's rebalance) and to
    /// take each (the takeover path, which must not grow with the pending timers). Only
    /// with instances the bench starts.
    #[arg(long, env = "KTIMER_BENCH_TAKEOVER")]
    pub takeover: bool,
    /// Skip the pass-through baseline.
    #[arg(long, env = "KTIMER_BENCH_NO_BASELINE")]
    pub no_baseline: bool,
    /// Give up waiting for fires this many ms after the last due time.
    #[arg(long, env = "KTIMER_BENCH_TIMEOUT_MS", default_value_t = 60_000)]
    pub timeout_ms: i64,
    /// Directory of the report (`bench-<run>.json`, `bench-<run>.svg`).
    #[arg(long, env = "KTIMER_BENCH_OUT", default_value = "bench-out")]
    pub out: PathBuf,
    /// Keep the fresh topics and Redis keys afterwards (deleted by default).
    #[arg(long, env = "KTIMER_BENCH_KEEP")]
    pub keep: bool,
    /// Extra flag for the started instances, as `ktimer run` takes it (repeatable),
    /// e.g. `--instance-arg=--claim-batch=5000`.
    #[arg(long = "instance-arg", allow_hyphen_values = true)]
    pub instance_args: Vec<String>,
    /// The ktimer executable the started instances run (default: this one). Another
    /// build's instances, measured by this bench: two builds compared with one yardstick
    /// (a build that does not know this bench's command schema refuses every command: the
    /// run then stops and says why).
    #[arg(long, env = "KTIMER_BENCH_INSTANCE_BIN")]
    pub instance_bin: Option<PathBuf>,
}
