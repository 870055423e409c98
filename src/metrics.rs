//! Every Prometheus metric of ktimer, defined in one place.
//!
//! Labels are bounded: `outcome`, `partition`, `op`, and `application` only for the
//! applications `--applications` names (all others are `other`); never a timer id.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The service's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    /// Commands processed, by `outcome` (accepted, duplicate, rejected).
    pub commands: IntCounterVec,
    /// Fires, by `outcome` (delivered, retried; stale: dropped before delivery because a
    /// later command changed the timer).
    pub fires: IntCounterVec,
    /// Lateness of fires: produce time minus due time, seconds.
    pub fire_lateness: Histogram,
    /// Partitions of the commands topic this instance owns.
    pub owned_partitions: IntGauge,
    /// Fires claimed and waiting for their due time or the broker's acknowledgement, by `partition`.
    pub in_flight: IntGaugeVec,
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
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("ktimer".into()), None).expect("registry");
        let commands = IntCounterVec::new(
            Opts::new("commands_total", "Timer commands processed, by outcome"),
            &["outcome"],
        )
        .expect("metric");
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
            .buckets(vec![
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 30.0,
                60.0, 300.0,
            ]),
        )
        .expect("metric");
        let owned_partitions = IntGauge::new(
            "owned_partitions",
            "Commands-topic partitions owned by this instance",
        )
        .expect("metric");
        let in_flight = IntGaugeVec::new(
            Opts::new(
                "in_flight_fires",
                "Fires claimed and not yet acknowledged by the broker",
            ),
            &["partition"],
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
        for c in [
            Box::new(task_restarts.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(app_fires.clone()),
            Box::new(app_commands.clone()),
            Box::new(replays.clone()),
            Box::new(commands.clone()),
            Box::new(fires.clone()),
            Box::new(fire_lateness.clone()),
            Box::new(owned_partitions.clone()),
            Box::new(in_flight.clone()),
            Box::new(redis_errors.clone()),
        ] {
            registry.register(c).expect("register metric");
        }
        Metrics {
            registry,
            commands,
            fires,
            fire_lateness,
            owned_partitions,
            in_flight,
            redis_errors,
            replays,
            task_restarts,
            app_fires,
            app_commands,
        }
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
