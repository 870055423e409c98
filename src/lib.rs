//! ktimer: a Kafka-native distributed timer service.
//!
//! Producers send timer commands (Avro or JSON) to the commands topic, keyed by timer id.
//! Each instance of the consumer group owns some partitions of that topic; a partition is
//! the unit of ownership (the "bucket"), so the group coordinator decides who fires what.
//!
//! The layout follows a command through the service:
//!
//! ```text
//! record --> intake: prepare --> apply --> answer      (results topic, then offsets)
//!                               |
//!                             store (Redis, Lua)  <-- ownership (epochs, replay)
//!                               |
//!            migrator --> trigger: wake, gate, lease, delivery --> sink (callback topic)
//! ```
//!
//! - [`command`]: the wire types (mirroring `schemas/*.avsc`); [`codec`]: Confluent Avro,
//!   Avro single-object and JSON encodings; [`fingerprint`]: the specification's
//!   single-object fingerprint (Parsing Canonical Form).
//! - [`validate`]: a decoded command becomes an operation, or a reason (pure; every number
//!   and size bounded); [`allow`]: the per-application callback allow-list; [`apps`]:
//!   per-application limits (`--applications`, reloaded on SIGHUP); [`pace`]: rate
//!   limits as pacing;
//!   [`partitioner`]: the one key-to-partition mapping (misrouted commands are forwarded);
//!   [`schedule`]: cron expressions and intervals, jitter, time zones, DST rules, misfire
//!   planning (pure); [`calendar`]: exclusion calendars (pure);
//!   [`preview`]: `ktimer next`, a schedule's next due instants from the same code.
//! - [`timer`]: the domain types the flow passes along (operation, schedule, stored
//!   definition, apply request and its typed outcome, the claimed fire).
//! - [`intake`]: consumes commands; `prepare` (decode, validate, deliverability), `apply`
//!   (Redis, fencing, waking triggers), `answer` (results, then offsets), `states` (the
//!   state records of the timers changed, written with the results), `watch` (what the
//!   intake waits for: a stall shows in a metric, `/readyz` and the log).
//! - [`delay`]: the delay topic: a record whose headers say when and where becomes a
//!   timer command (`contract`, pure) forwarded to the commands topic, delivered itself
//!   at its time.
//! - [`catalog`]: callback topics' existence and record size limits (checked at intake).
//! - [`ownership`]: the consumer's rebalance callback, the owned partitions with their
//!   tasks, fencing epochs, replay when Redis lost data, waiting for a previous owner's
//!   producer (`drain`); `cut`: the Redis probe that gives the partitions up to the group
//!   while Redis is out of reach.
//! - [`store`]: one Redis server or a Redis Cluster (`conn`), keys and field names, where
//!   a timer lives and how it is packed (`record.lua`, prepended to the scripts), one file
//!   per script family (apply, fires, cron, epoch, state) and a typed view; `guard`: the
//!   eviction policy refused at start and watched; the Lua scripts are `src/store/*.lua`.
//! - [`state`]: the state topic: checkpoints, the rebuild, the last checkpoint read back
//!   when partitions are taken (`tail`), one reader of state partitions (`scan`).
//! - [`trigger`]: one task per owned partition firing timers at the due millisecond
//!   (`wake`, `gate`, `lease`, `fence`, `delivery`, `recover`, `task`); [`migrator`]: one task per owned
//!   partition materialising cron occurrences ahead and promoting timers due soon out of
//!   the bucket of pending records.
//! - [`sink`]: the idempotent producer (`record`: pure record building, `send`:
//!   back-pressure and delivery).
//! - [`admin`]: HTTP `/metrics`, health, readiness and timer look-up; [`status`]: what an
//!   instance reports about itself.
//! - [`config`]: the command line (clap; every flag has an environment variable);
//!   [`assignment`]: the group's partition assignment strategy (a setting);
//!   [`kafka`]: every librdkafka configuration; [`metrics`]: every Prometheus metric;
//!   [`sampler`]: per-partition gauges read from Redis (pending, overdue);
//!   [`shutdown`]: the cancellation token; [`retry`]: the one retry helper and backoff;
//!   [`clock`]: the clock tests can pause.
//! - [`topics`]: topic declarations (`topics/`) and `ktimer topics apply`.
//! - [`service`]: wires one instance; [`client`]: `ktimer send` and `ktimer tail`;
//!   [`check`]: `ktimer check`, the preflight of a deployment;
//!   [`bench`]: `ktimer bench`, throughput and lateness against a pass-through baseline.
//!
//! Delivery is at-least-once and never early: a fire is claimed into an in-flight set
//! before it is produced and leaves it only when the broker acknowledged the record; a
//! command's offset is committed only after Redis applied it and its result was
//! acknowledged.

pub mod admin;
pub mod allow;
pub mod apps;
pub mod assignment;
pub mod bench;
pub mod calendar;
pub mod catalog;
pub mod check;
pub mod client;
pub mod clock;
pub mod codec;
pub mod command;
pub mod config;
pub mod delay;
pub mod fingerprint;
pub mod intake;
pub mod kafka;
pub mod lanes;
pub mod metrics;
pub mod migrator;
pub mod ownership;
pub mod pace;
pub mod partitioner;
pub mod preview;
pub mod retry;
pub mod sampler;
pub mod schedule;
pub mod service;
pub mod shutdown;
pub mod sink;
pub mod state;
pub mod status;
pub mod store;
pub mod timer;
pub mod topics;
pub mod trace;
pub mod trigger;
pub mod validate;

pub use clock::now_ms;
