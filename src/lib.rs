//! ktimer: a Kafka-native distributed timer service.
//!
//! Producers send timer commands (Avro or JSON) to the commands topic, keyed by timer id.
//! Each instance of the consumer group owns some partitions of that topic; a partition is
//! the unit of ownership (the "bucket"), so the group coordinator decides who fires what.
//!
//! Layout, one module per concern:
//! - [`config`]: the command line (clap; every flag has an environment variable).
//! - [`command`]: the wire types (mirroring `schemas/*.avsc`); [`validate`]: checks.
//! - [`schedule`]: cron expressions, time zones, DST rules, misfire planning.
//! - [`codec`]: Confluent Avro, Avro single-object and JSON encodings.
//! - [`intake`]: consumes commands, applies them, answers each, commits offsets after.
//! - [`catalog`]: callback topics' existence and record size limits (checked at intake).
//! - [`ownership`]: partition assignment, fencing epochs, replay when Redis lost data.
//! - [`store`]: Redis keys, minute slices and the Lua scripts (`src/store/*.lua`).
//! - [`trigger`]: one task per owned partition, firing timers at the due millisecond.
//! - [`migrator`]: one task per owned partition, materialising cron occurrences ahead.
//! - [`sink`]: the idempotent producer of fired records, results and dead letters.
//! - [`admin`]: HTTP `/metrics`, health, readiness and timer look-up.
//! - [`metrics`]: every Prometheus metric; [`shutdown`]: the cancellation token;
//!   [`retry`]: the backoff every retry loop shares.
//! - [`topics`]: topic declarations (`topics/`) and `ktimer topics apply`.
//! - [`service`]: wires it all; [`client`]: `ktimer send` and `ktimer tail`.
//! - [`bench`]: `ktimer bench`, throughput and lateness against a pass-through baseline.
//!
//! Delivery is at-least-once and never early: a fire is claimed into an in-flight set
//! before it is produced and leaves it only when the broker acknowledged the record; a
//! command's offset is committed only after Redis applied it and its result was
//! acknowledged.

pub mod admin;
pub mod bench;
pub mod catalog;
pub mod client;
pub mod codec;
pub mod command;
pub mod config;
pub mod intake;
pub mod metrics;
pub mod migrator;
pub mod ownership;
pub mod retry;
pub mod schedule;
pub mod service;
pub mod shutdown;
pub mod sink;
pub mod store;
pub mod topics;
pub mod trigger;
pub mod validate;

/// Wall-clock now, Unix epoch milliseconds (floored: never ahead of the real time).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
