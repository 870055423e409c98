//! Every Prometheus metric of ktimer, defined in one place.
//!
//! Labels are bounded: `outcome`, `partition`, `op`, and `application` only for the
//! applications `--applications` names (all others are `other`); never a timer id.

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Buckets of the fire lateness histogram, seconds: 0.5 ms to 60 s.
pub const LATENESS_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of call latencies (Redis calls, intake batches), seconds: 0.1 ms to 10 s.
const CALL_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

/// The labels of a per-partition series: the commands topic, the partition. (Each lane
/// of [`crate::lanes`] has a commands topic of its own.)
const SLOT: &[&str] = &["topic", "partition"];

/// The label values of partition `partition` of commands topic `topic` ([`SLOT`]).
pub fn slot(topic: &str, partition: i32) -> [String; 2] {
    [topic.to_string(), partition.to_string()]
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("metric")
}

fn gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("metric")
}

fn histogram(name: &str, help: &str, buckets: &[f64], labels: &[&str]) -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .expect("metric")
}

/// The service's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    /// Commands processed, by `kind` (CREATE_ONCE, ..., `unknown` when undecodable) and
    /// `outcome` (accepted, duplicate, rejected, forwarded, unanswerable).
    pub commands: IntCounterVec,
    /// Fires, by `outcome` (delivered, retried, dead_lettered; stale: dropped before
    /// delivery because a later command changed the timer; vanished: due, but the timer's
    /// record was gone from Redis: lost; poisoned: delivered, but its acknowledgement made
    /// the store fail every time: forgotten).
    pub fires: IntCounterVec,
    /// Lateness of fires: produce time minus due time, seconds.
    pub fire_lateness: Histogram,
    /// Partitions of the commands topic this instance owns.
    pub owned_partitions: IntGaugeVec,
    /// Fires claimed and waiting for their due time or the broker's acknowledgement, by `partition`.
    pub in_flight: IntGaugeVec,
    /// Due fires of paced applications parked in Redis (over the trigger's quota), by
    /// `partition`, as of the last claim.
    pub parked: IntGaugeVec,
    /// Redis calls that failed, by `op`.
    pub redis_errors: IntCounterVec,
    /// Times Redis was found to have lost data and commands were replayed from Kafka.
    pub replays: IntCounter,
    /// Times a partition's trigger or migrator had ended while the partition was held,
    /// and both were restarted.
    pub task_restarts: IntCounter,
    /// Per application (named in `--applications`, else `other`): fires by `outcome`
    /// (delivered; throttled: held back by the delivery rate limit).
    pub app_fires: IntCounterVec,
    /// Per application: commands by `outcome` (accepted, duplicate, rejected; throttled:
    /// rejected by the intake rate limit; full: rejected by the pending timer limit).
    pub app_commands: IntCounterVec,
    /// Live (scheduled or paused) timers, by `partition` (owned ones; sampled).
    pub pending: IntGaugeVec,
    /// Fires due and not yet claimed, by `partition` (sampled).
    pub overdue: IntGaugeVec,
    /// Age of the oldest fire due and not yet claimed, seconds, by `partition` (sampled).
    pub overdue_age: GaugeVec,
    /// 1 while the partition's trigger runs, 0 while it does not (replaying, ended), by
    /// `partition` (owned ones).
    pub trigger_alive: IntGaugeVec,
    /// Rebalance events, by `event` (assigned, revoked).
    pub rebalances: IntCounterVec,
    /// Commands-topic consumer lag (records not yet consumed), by `partition`.
    pub consumer_lag: IntGaugeVec,
    /// Time to handle one intake batch (decode, validate, apply, enqueue results), seconds.
    pub intake_batch: Histogram,
    /// Commands a store script failed on every time, answered rejected and skipped, by
    /// `application` (named in `--applications`, else other).
    pub poisoned: IntCounterVec,
    /// Time to take the partitions of one assignment (new epochs, rebuilds) until their
    /// tasks start or wait for their replay, seconds.
    pub takeover: Histogram,
    /// Redis call latency, seconds, by `op`.
    pub redis_calls: HistogramVec,
    /// Failed Kafka operations, by `op` (fire, result, state, commit, consume).
    pub kafka_errors: IntCounterVec,
    /// 1 while a Redis primary's `maxmemory-policy` may evict ktimer's keys (sampled).
    pub redis_may_evict: IntGauge,
    /// Keys Redis evicted while this instance watched (sampled from `INFO stats`).
    pub redis_evicted_keys: IntCounter,
    /// Seconds the intake has waited for one thing (Redis, the answer stage, a rebuild)
    /// once that is 10 s or more; 0 otherwise.
    pub intake_stalled: prometheus::Gauge,
    /// Seconds since Redis last answered this instance's probe (0 while it answers); past
    /// `--redis-cut-ms` the instance gives its partitions up.
    pub redis_unreachable: prometheus::Gauge,
    /// Redis's clock minus this host's wall clock, seconds (fires follow Redis's).
    pub clock_offset: prometheus::Gauge,
    /// Partitions taken whose state-topic partition is missing (nothing applied).
    pub partitions_unavailable: IntGaugeVec,
    /// Partitions taken whose commands wait for the previous owner's producer.
    pub partitions_waiting: IntGaugeVec,
    /// Records read from the delay topic, by `outcome` (forwarded: a command on the
    /// commands topic; refused: answered rejected by the header contract).
    pub delayed_records: IntCounterVec,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("ktimer".into()), None).expect("registry");
        let commands = counter(
            "commands_total",
            "Timer commands processed, by kind and outcome",
            &["kind", "outcome"],
        );
        let fires = IntCounterVec::new(
            Opts::new("fires_total", "Timer fires, by outcome"),
            &["outcome"],
        )
        .expect("metric");
        let fire_lateness = Histogram::with_opts(
            HistogramOpts::new(
                "fire_lateness_seconds",
                "Fire time minus due time (never negative)",
            )
            .buckets(LATENESS_BUCKETS.to_vec()),
        )
        .expect("metric");
        let owned_partitions = gauge(
            "owned_partitions",
            "Commands-topic partitions owned by this instance, per commands topic",
            &["topic"],
        );
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "in_flight_fires",
                "Fires claimed and not yet acknowledged by the broker",
            ),
            SLOT,
        )
        .expect("metric");
        let parked = IntGaugeVec::new(
            Opts::new(
                "parked_fires",
                "Due fires of rate-limited applications waiting in Redis for their turn",
            ),
            SLOT,
        )
        .expect("metric");
        let redis_errors = IntCounterVec::new(
            Opts::new("redis_errors_total", "Failed Redis calls, by operation"),
            &["op"],
        )
        .expect("metric");
        let replays = IntCounter::new(
            "redis_replays_total",
            "Times Redis had lost data: a partition rebuilt from the state topic, or lost commands replayed",
        )
        .expect("metric");
        let task_restarts = IntCounter::new(
            "task_restarts_total",
            "Partition tasks (trigger, migrator, checkpoints) found ended while held, and restarted",
        )
        .expect("metric");
        let app_fires = IntCounterVec::new(
            Opts::new(
                "application_fires_total",
                "Fires per application (named in --applications, else other), by outcome",
            ),
            &["application", "outcome"],
        )
        .expect("metric");
        let app_commands = IntCounterVec::new(
            Opts::new(
                "application_commands_total",
                "Commands per application (named in --applications, else other), by outcome",
            ),
            &["application", "outcome"],
        )
        .expect("metric");
        let p = SLOT;
        let pending = gauge(
            "pending_timers",
            "Live (scheduled or paused) timers of an owned partition",
            p,
        );
        let overdue = gauge(
            "overdue_fires",
            "Fires due and not yet claimed, per owned partition",
            p,
        );
        let overdue_age = GaugeVec::new(
            Opts::new(
                "overdue_oldest_seconds",
                "Age of the oldest fire due and not yet claimed, per owned partition",
            ),
            p,
        )
        .expect("metric");
        let trigger_alive = gauge(
            "trigger_alive",
            "1 while an owned partition's trigger runs, 0 while it does not (replaying, ended)",
            p,
        );
        let rebalances = counter("rebalances_total", "Rebalance events, by event", &["event"]);
        let consumer_lag = gauge(
            "consumer_lag",
            "Commands-topic records not yet consumed, per assigned partition",
            p,
        );
        let intake_batch = Histogram::with_opts(
            HistogramOpts::new(
                "intake_batch_seconds",
                "Time to handle one batch of commands (decode, validate, apply, enqueue results)",
            )
            .buckets(CALL_BUCKETS.to_vec()),
        )
        .expect("metric");
        let poisoned = counter(
            "poisoned_commands_total",
            "Commands a store script failed on every time: answered rejected and skipped, by \
             application (named in --applications, else other)",
            &["application"],
        );
        let takeover = Histogram::with_opts(
            HistogramOpts::new(
                "takeover_seconds",
                "Time to take the partitions of one assignment (new epochs, rebuilds) until \
                 their tasks start or wait for their replay",
            )
            .buckets(CALL_BUCKETS.to_vec()),
        )
        .expect("metric");
        let redis_calls = histogram(
            "redis_call_seconds",
            "Redis call latency, by operation",
            &CALL_BUCKETS,
            &["op"],
        );
        let kafka_errors = counter(
            "kafka_errors_total",
            "Failed Kafka operations, by operation",
            &["op"],
        );
        let redis_may_evict = IntGauge::new(
            "redis_may_evict",
            "1 while a Redis primary's maxmemory-policy may evict ktimer's keys (must be noeviction)",
        )
        .expect("metric");
        let redis_evicted_keys = IntCounter::new(
            "redis_evicted_keys_total",
            "Keys Redis evicted while this instance watched: timers may be lost",
        )
        .expect("metric");
        let intake_stalled = prometheus::Gauge::new(
            "intake_stalled_seconds",
            "Seconds the intake has waited for one thing (Redis, the answer stage, a rebuild), once 10 or more",
        )
        .expect("metric");
        let redis_unreachable = prometheus::Gauge::new(
            "redis_unreachable_seconds",
            "Seconds since Redis last answered this instance's probe; past --redis-cut-ms its partitions are given up",
        )
        .expect("metric");
        let clock_offset = prometheus::Gauge::new(
            "clock_offset_seconds",
            "Redis's clock minus this host's wall clock; fires are due by Redis's clock",
        )
        .expect("metric");
        let partitions_unavailable = gauge(
            "partitions_unavailable",
            "Partitions taken whose state-topic partition is missing: none of their commands is applied",
            &["topic"],
        );
        let partitions_waiting = gauge(
            "partitions_waiting_previous_owner",
            "Partitions taken whose commands wait until the previous owner's producer answered the fires it holds",
            &["topic"],
        );
        let delayed_records = counter(
            "delayed_records_total",
            "Records read from the delay topic, by outcome (forwarded as a command, refused)",
            &["outcome"],
        );
        for c in [
            Box::new(task_restarts.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(delayed_records.clone()),
            Box::new(partitions_waiting.clone()),
            Box::new(redis_unreachable.clone()),
            Box::new(clock_offset.clone()),
            Box::new(partitions_unavailable.clone()),
            Box::new(intake_stalled.clone()),
            Box::new(redis_may_evict.clone()),
            Box::new(redis_evicted_keys.clone()),
            Box::new(pending.clone()),
            Box::new(overdue.clone()),
            Box::new(overdue_age.clone()),
            Box::new(trigger_alive.clone()),
            Box::new(rebalances.clone()),
            Box::new(consumer_lag.clone()),
            Box::new(intake_batch.clone()),
            Box::new(takeover.clone()),
            Box::new(poisoned.clone()),
            Box::new(redis_calls.clone()),
            Box::new(kafka_errors.clone()),
            Box::new(app_fires.clone()),
            Box::new(app_commands.clone()),
            Box::new(replays.clone()),
            Box::new(commands.clone()),
            Box::new(fires.clone()),
            Box::new(fire_lateness.clone()),
            Box::new(owned_partitions.clone()),
            Box::new(in_flight.clone()),
            Box::new(parked.clone()),
            Box::new(redis_errors.clone()),
        ] {
            registry.register(c).expect("register metric");
        }
        Metrics {
            registry,
            delayed_records,
            commands,
            fires,
            fire_lateness,
            owned_partitions,
            in_flight,
            parked,
            redis_errors,
            replays,
            task_restarts,
            app_fires,
            app_commands,
            pending,
            overdue,
            overdue_age,
            trigger_alive,
            rebalances,
            consumer_lag,
            intake_batch,
            takeover,
            poisoned,
            redis_calls,
            kafka_errors,
            redis_may_evict,
            redis_evicted_keys,
            intake_stalled,
            redis_unreachable,
            clock_offset,
            partitions_unavailable,
            partitions_waiting,
        }
    }

    /// Drops the per-partition series of `partition` of `topic` (no longer owned).
    pub fn forget_partition(&self, topic: &str, partition: i32) {
        let p = slot(topic, partition);
        let _ = self.pending.remove_label_values(&p);
        let _ = self.overdue.remove_label_values(&p);
        let _ = self.overdue_age.remove_label_values(&p);
        let _ = self.trigger_alive.remove_label_values(&p);
        let _ = self.in_flight.remove_label_values(&p);
        let _ = self.parked.remove_label_values(&p);
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
