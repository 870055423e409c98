//! Command-line configuration. Every flag can also be set by an environment variable.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

mod bench;
mod check;
mod client;
mod next;
mod timers;

pub use bench::{BenchArgs, BenchDue};
pub use check::CheckArgs;
pub use client::{SendArgs, SendFormat, SendKind, SendMisfire, TailArgs, Via};
pub use next::NextArgs;
pub use timers::{TimersAction, TimersArgs};

/// ktimer: a Kafka-native distributed timer service.
///
/// Producers send timer commands to the commands topic; ktimer fires each timer at its
/// due millisecond by producing a record to the timer's callback topic, and answers every
/// command on the results topic.
#[derive(Debug, Parser)]
#[command(name = "ktimer", version, about, long_about)]
pub struct Cli {
    /// Log filter (tracing-subscriber EnvFilter syntax), e.g. `info` or `ktimer=debug`.
    #[arg(long, env = "KTIMER_LOG", default_value = "info", global = true)]
    pub log: String,
    /// Log lines as text or as JSON objects (one per line, with structured fields).
    #[arg(
        long,
        env = "KTIMER_LOG_FORMAT",
        value_enum,
        default_value_t,
        global = true
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the timer service (one member of the consumer group).
    Run(RunArgs),
    /// Manage the topics declared in topics/.
    #[command(subcommand)]
    Topics(TopicsCommand),
    /// Produce a timer command built from flags or read from a JSON file.
    Send(SendArgs),
    /// Print fired records and command results in a readable form.
    Tail(TailArgs),
    /// Look up, list and act on timers through an instance's admin API.
    Timers(TimersArgs),
    /// Measure intake rate, fire rate, lateness and Redis memory per timer on fresh
    /// topics, against a pass-through baseline; writes a JSON report and a histogram.
    Bench(BenchArgs),
    /// Check a deployment before the first timer: the broker, the topics (partitions,
    /// compaction, retention), Redis (version, eviction policy, persistence) and the clock;
    /// one line per check with ok, warn or fail and the fix. Exits 1 on a failure.
    Check(CheckArgs),
    /// Print the next due instants of a cron or interval schedule (with its jitter and
    /// calendar) in its time zone, as the service
    /// computes them (daylight-saving changes noted).
    Next(NextArgs),
}

/// `ktimer topics ...`
#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Create the declared topics that are missing and check the others (idempotent).
    Apply(TopicsApplyArgs),
}

/// Where the broker is and which topics ktimer uses.
#[derive(Debug, Clone, Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KTIMER_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Topic the timer commands are produced to (key = timer id).
    #[arg(long, env = "KTIMER_COMMANDS_TOPIC", default_value = "ktimer.commands")]
    pub commands_topic: String,
    /// Topic of command results.
    #[arg(long, env = "KTIMER_RESULTS_TOPIC", default_value = "ktimer.results")]
    pub results_topic: String,
    /// Default callback topic of fired timers.
    #[arg(long, env = "KTIMER_FIRED_TOPIC", default_value = "ktimer.fired")]
    pub fired_topic: String,
    /// Topic for commands that cannot be decoded and fires that cannot be delivered (a
    /// copy, with the reason in the `ktimer-reason` header).
    #[arg(
        long,
        env = "KTIMER_DEAD_LETTER_TOPIC",
        default_value = "ktimer.dead-letter"
    )]
    pub dead_letter_topic: String,
    /// Compacted topic of timer states and checkpoints, partitioned like the commands
    /// topic: Redis is rebuilt from it (docs/guarantees.md).
    #[arg(long, env = "KTIMER_STATE_TOPIC", default_value = "ktimer.state")]
    pub state_topic: String,
    /// Topic of delayed records: a record with the `ktimer-delay-ms` (or `ktimer-at-ms`)
    /// and `ktimer-target-topic` headers is delivered, itself, to the target topic at its
    /// time (docs/delay.md). Empty: not read.
    #[arg(long, env = "KTIMER_DELAY_TOPIC", default_value = "ktimer.delay")]
    pub delay_topic: String,
    /// Confluent schema registry URL; without it Avro uses single-object encoding.
    #[arg(long, env = "KTIMER_SCHEMA_REGISTRY_URL")]
    pub schema_registry_url: Option<String>,
    /// Extra librdkafka property for every client, `key=value` (repeatable; comma-separated in the variable).
    #[arg(long = "kafka-option", env = "KTIMER_KAFKA_OPTIONS", value_delimiter = ',', value_parser = parse_kv)]
    pub kafka_options: Vec<(String, String)>,
    /// How a timer id maps to a commands partition (ktimer's producers use it too).
    #[arg(long, env = "KTIMER_PARTITIONER", value_enum, default_value_t)]
    pub partitioner: crate::partitioner::Partitioner,
}

impl KafkaArgs {
    /// Each topic ktimer itself reads or writes, by its role in `topics/` (the delay
    /// topic only when it is read).
    pub fn roles(&self) -> Vec<(&'static str, &str)> {
        let mut roles = vec![
            ("commands", self.commands_topic.as_str()),
            ("results", &self.results_topic),
            ("fired", &self.fired_topic),
            ("dead_letter", &self.dead_letter_topic),
            ("state", &self.state_topic),
        ];
        if !self.delay_topic.is_empty() {
            roles.push(("delay", &self.delay_topic));
        }
        roles
    }
}

/// `ktimer run`
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Broker and topics.
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Redis URL.
    #[arg(
        long,
        env = "KTIMER_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// Prefix of every Redis key.
    #[arg(long, env = "KTIMER_REDIS_PREFIX", default_value = "ktimer")]
    pub redis_prefix: String,
    /// How long Redis may not answer this instance before it gives its partitions up to
    /// the group (leaves it, and joins again once Redis answers): keep it well under
    /// `--session-timeout-ms`, so that a fire due during such a cut is late by about this
    /// plus a rebalance.
    #[arg(long, env = "KTIMER_REDIS_CUT_MS", default_value_t = 5_000,
        value_parser = clap::value_parser!(u64).range(1_000..=3_600_000))]
    pub redis_cut_ms: u64,
    /// Shifts this host's wall clock as ktimer reads it, in milliseconds (negative: behind):
    /// a fault to test that fires follow Redis's clock, not the host's.
    #[arg(
        long,
        env = "KTIMER_CLOCK_SKEW_MS",
        default_value_t = 0,
        hide = true,
        allow_hyphen_values = true
    )]
    pub clock_skew_ms: i64,
    /// Consumer group of the ktimer instances.
    #[arg(long, env = "KTIMER_GROUP_ID", default_value = "ktimer")]
    pub group_id: String,
    /// How long the group waits for a silent instance (killed, frozen, cut off) before
    /// its partitions move to the others: the failover time after a kill -9. The broker
    /// bounds it (Kafka's group.min.session.timeout.ms, 6 s by default).
    #[arg(long, env = "KTIMER_SESSION_TIMEOUT_MS", default_value_t = 10_000,
        value_parser = clap::value_parser!(u32).range(1_000..=3_600_000))]
    pub session_timeout_ms: u32,
    /// How partitions are spread over the instances. `cooperative-sticky` moves only
    /// the partitions that must move when an instance joins or leaves; the others keep
    /// firing through the rebalance. Every instance of a group must use the same.
    #[arg(long, env = "KTIMER_ASSIGNMENT", value_enum, default_value_t)]
    pub assignment: crate::assignment::Assignment,
    /// Address of the HTTP admin port (metrics, health, the admin API); `off` to disable.
    #[arg(long, env = "KTIMER_ADMIN_ADDR", default_value = "127.0.0.1:9464", value_parser = parse_addr)]
    pub admin_addr: AdminAddr,
    /// Admin API token, `SECRET` (every application) or `APP=SECRET` (that application's
    /// timers only), at least 16 characters (repeatable; comma-separated in the
    /// variable). With tokens, every timer route needs `Authorization: Bearer SECRET`;
    /// without, a non-loopback admin address refuses writes.
    #[arg(
        long = "admin-token",
        env = "KTIMER_ADMIN_TOKENS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub admin_tokens: Vec<crate::admin::access::Token>,
    /// How long an admin write waits for its command's result before answering 202.
    #[arg(long, env = "KTIMER_ADMIN_WAIT_MS", default_value_t = 10_000)]
    pub admin_wait_ms: u64,
    /// Claim fires this many ms before they are due, then wait for the due ms in memory.
    #[arg(long, env = "KTIMER_CLAIM_AHEAD_MS", default_value_t = 100)]
    pub claim_ahead_ms: i64,
    /// Acknowledge delivered fires in Redis this many ms after the first of a batch was
    /// delivered (at once when a claim's worth waits, and when commands of the partition
    /// arrive: they apply once the fires delivered before them are acknowledged): fewer,
    /// fuller calls at a steady rate. The price: a crash may deliver the fires of the
    /// last this-many ms again. 0: as soon as the broker answers.
    #[arg(long, env = "KTIMER_ACK_EVERY_MS", default_value_t = 50)]
    pub ack_every_ms: i64,
    /// Most fires claimed from Redis in one call.
    #[arg(long, env = "KTIMER_CLAIM_BATCH", default_value_t = 2000)]
    pub claim_batch: usize,
    /// Most fires the instance holds in memory (claimed, not yet acknowledged); claims
    /// wait while it is reached, the fires staying due in Redis.
    #[arg(long, env = "KTIMER_MAX_HELD_FIRES", default_value_t = 50_000)]
    pub max_held_fires: usize,
    /// Most bytes of fires (payloads, headers, keys) the instance holds in memory.
    #[arg(long, env = "KTIMER_MAX_HELD_BYTES", default_value_t = 64 << 20)]
    pub max_held_bytes: usize,
    /// Longest a trigger sleeps without being woken (safety net, not a poll interval).
    #[arg(long, env = "KTIMER_MAX_IDLE_MS", default_value_t = 5000)]
    pub max_idle_ms: i64,
    /// Most command records handled per batch.
    #[arg(long, env = "KTIMER_INTAKE_BATCH", default_value_t = 1000)]
    pub intake_batch: usize,
    /// How long fired and cancelled timers stay in Redis for look-up and de-duplication.
    #[arg(long, env = "KTIMER_RETENTION_MS", default_value_t = 86_400_000)]
    pub retention_ms: i64,
    /// Entries of each timer's history kept (its commands and fires; the admin API's
    /// `/timers/ID/history`); 0 keeps none.
    #[arg(long, env = "KTIMER_HISTORY_ENTRIES", default_value_t = 20)]
    pub history_entries: u32,
    /// History entries older than this are dropped (when the timer's record is written).
    #[arg(long, env = "KTIMER_HISTORY_TTL_MS", default_value_t = 7 * 86_400_000)]
    pub history_ttl_ms: i64,
    /// Largest accepted payload.
    #[arg(long, env = "KTIMER_MAX_PAYLOAD_BYTES", default_value_t = 512 * 1024)]
    pub max_payload_bytes: usize,
    /// A command that arrived in another partition than its key's: forward or reject it.
    #[arg(long, env = "KTIMER_MISROUTED", value_enum, default_value_t)]
    pub misrouted: crate::partitioner::Misrouted,
    /// TOML file of the callback topics each application may deliver to (docs/commands.md: allow-list).
    #[arg(long, env = "KTIMER_CALLBACK_ALLOW_LIST", value_parser = crate::allow::AllowList::load)]
    pub callback_allow_list: Option<std::sync::Arc<crate::allow::AllowList>>,
    /// TOML file of per-application limits: delivery and intake rates, pending timers,
    /// delivery attempts and backoff, callback topics (docs/operations.md: applications). Read again
    /// on SIGHUP.
    #[arg(long, env = "KTIMER_APPLICATIONS", value_parser = crate::apps::Apps::load)]
    pub applications: Option<crate::apps::Apps>,
    /// Largest accepted distance to a due time, in days.
    #[arg(long, env = "KTIMER_MAX_HORIZON_DAYS", default_value_t = 3660)]
    pub max_horizon_days: i64,
    /// First delivery retry delay; doubles per attempt.
    #[arg(long, env = "KTIMER_RETRY_BASE_MS", default_value_t = 100)]
    pub retry_base_ms: i64,
    /// Largest delivery retry delay.
    #[arg(long, env = "KTIMER_RETRY_MAX_MS", default_value_t = 30_000)]
    pub retry_max_ms: i64,
    /// Delivery attempts of a fire before it goes to the dead-letter topic with the
    /// reason (one-shot timers then show state DEAD_LETTERED). With the default backoff,
    /// 10 attempts span about a minute.
    #[arg(long, env = "KTIMER_MAX_DELIVERY_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..))]
    pub max_delivery_attempts: i32,
    /// On SIGTERM/SIGINT, the longest the drain may take (stop claiming, finish in-flight
    /// deliveries, commit offsets, leave the group) before the process exits anyway.
    #[arg(long, env = "KTIMER_SHUTDOWN_TIMEOUT_MS", default_value_t = 15_000)]
    pub shutdown_timeout_ms: u64,
    /// How often each partition's changed timers and fire watermark are checkpointed to
    /// the state topic; fires acknowledged within one interval before Redis loses data
    /// fire again after the rebuild.
    #[arg(long, env = "KTIMER_CHECKPOINT_INTERVAL_MS", default_value_t = 1_000,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_interval_ms: u64,
    /// Cron occurrences are materialised into Redis this far ahead (ms).
    #[arg(long, env = "KTIMER_CRON_WINDOW_MS", default_value_t = 3_600_000)]
    pub cron_window_ms: i64,
    /// Most occurrences of one cron timer materialised in one pass (bounds the memory of
    /// timers that fire every second; the window is extended when half used).
    #[arg(long, env = "KTIMER_CRON_MAX_PER_PASS", default_value_t = 1_000)]
    pub cron_max_per_pass: usize,
    /// A cron occurrence more than this late (ktimer was down, the partition moved) was
    /// missed: the timer's misfire policy decides whether it fires.
    #[arg(long, env = "KTIMER_MISFIRE_THRESHOLD_MS", default_value_t = 1_000)]
    pub misfire_threshold_ms: i64,
}

/// `ktimer topics apply`
#[derive(Debug, Clone, Args)]
pub struct TopicsApplyArgs {
    /// Broker and topic names (a declared topic's name is replaced by the flag of its role).
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Declaration file; the built-in topics/ktimer.toml when absent.
    #[arg(long, env = "KTIMER_TOPICS_FILE")]
    pub file: Option<PathBuf>,
    /// Override the partition count of every declared topic.
    #[arg(long, env = "KTIMER_TOPIC_PARTITIONS")]
    pub partitions: Option<i32>,
    /// The applications file (`ktimer run --applications`): each bound application's
    /// topics are created too, declared like the shared topic of the same role.
    #[arg(long, env = "KTIMER_APPLICATIONS", value_parser = crate::apps::Apps::load)]
    pub applications: Option<crate::apps::Apps>,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// The admin listen address, or none (`off`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdminAddr(pub Option<SocketAddr>);

fn parse_addr(s: &str) -> Result<AdminAddr, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(AdminAddr(None));
    }
    s.parse()
        .map(|a| AdminAddr(Some(a)))
        .map_err(|e| format!("{s:?}: {e}"))
}
