//! Every librdkafka configuration of ktimer, built in one place from [`KafkaArgs`].
//!
//! The user's `--kafka-option key=value` properties are applied last, so they override
//! any default set here (security settings, timeouts, batching).

use crate::config::{KafkaArgs, RunArgs};
use rdkafka::ClientConfig;

/// The brokers and the user's options: for admin, metadata and plain clients.
pub fn client(kafka: &KafkaArgs) -> ClientConfig {
    with_user_options(base(kafka), kafka)
}

/// The producer of fired records, results and dead letters (also the bench's
/// pass-through baseline): idempotent, `acks=all`, 5 ms linger, a deep local queue.
/// (A 1 ms linger sends a produce request per partition and millisecond at a steady
/// 10,000 fires/s: measured, it doubled ktimer's CPU per fire (63 against 31 µs, most of
/// it librdkafka's broker thread) and the delivery lateness (p99 62-85 against 30 ms);
/// the fire lateness, which the 5 ms do not touch, improved with the CPU freed.)
pub fn producer(kafka: &KafkaArgs) -> ClientConfig {
    let mut cfg = base(kafka);
    cfg.set("enable.idempotence", "true")
        .set("partitioner", kafka.partitioner.librdkafka())
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .set("queue.buffering.max.messages", "1000000");
    with_user_options(cfg, kafka)
}

/// A producer of many records at once (the bench's load): idempotent, batching more.
pub fn bulk_producer(kafka: &KafkaArgs) -> ClientConfig {
    let mut cfg = base(kafka);
    cfg.set("enable.idempotence", "true")
        .set("partitioner", kafka.partitioner.librdkafka())
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000");
    with_user_options(cfg, kafka)
}

/// The commands consumer of the run's group. Offsets are stored by hand only after a
/// command was applied and its result acknowledged (`enable.auto.offset.store=false`),
/// then committed in the background: rust-rdkafka's `examples/at_least_once.rs`.
/// Heartbeats go every tenth of the session timeout, so a rebalance reaches the members
/// quickly.
pub fn commands_consumer(args: &RunArgs) -> ClientConfig {
    let mut cfg = base(&args.kafka);
    let session = args.session_timeout_ms;
    cfg.set("group.id", &args.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .set("session.timeout.ms", session.to_string())
        .set("heartbeat.interval.ms", (session / 10).max(100).to_string())
        .set(
            "partition.assignment.strategy",
            args.assignment.librdkafka(),
        )
        .set("statistics.interval.ms", "5000");
    with_user_options(cfg, &args.kafka)
}

/// The delay topic's consumer: group `<group>.delay` (its rebalances never move the
/// timer partitions of the commands consumer's group); offsets stored by hand once the
/// command a record became (or its refusal) was acknowledged, then committed in the
/// background, as for the commands consumer.
pub fn delay_consumer(args: &RunArgs) -> ClientConfig {
    let mut cfg = base(&args.kafka);
    let session = args.session_timeout_ms;
    cfg.set("group.id", format!("{}.delay", args.group_id))
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("session.timeout.ms", session.to_string())
        .set("heartbeat.interval.ms", (session / 10).max(100).to_string());
    with_user_options(cfg, &args.kafka)
}

/// A consumer that reads partitions it assigns itself (`ktimer tail`, the bench's
/// observers): group `group_id` is only a name, nothing is committed.
pub fn reader(kafka: &KafkaArgs, group_id: &str) -> ClientConfig {
    let mut cfg = base(kafka);
    cfg.set("group.id", group_id)
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10");
    with_user_options(cfg, kafka)
}

/// The largest record the producer sends: the user's `message.max.bytes`, if set.
pub fn producer_max_bytes(kafka: &KafkaArgs) -> Option<usize> {
    kafka
        .kafka_options
        .iter()
        .rev()
        .find(|(key, _)| key == "message.max.bytes")
        .and_then(|(_, v)| v.parse().ok())
}

fn base(kafka: &KafkaArgs) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &kafka.brokers);
    cfg
}

fn with_user_options(mut cfg: ClientConfig, kafka: &KafkaArgs) -> ClientConfig {
    for (k, v) in &kafka.kafka_options {
        cfg.set(k, v);
    }
    cfg
}

/// The headers of `m` as (name, value) pairs, a null value as empty.
pub fn header_pairs(m: &impl rdkafka::message::Message) -> impl Iterator<Item = (&str, &[u8])> {
    use rdkafka::message::Headers;
    m.headers()
        .into_iter()
        .flat_map(|h| h.iter())
        .map(|x| (x.key, x.value.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        kafka: KafkaArgs,
    }

    fn kafka(argv: &[&str]) -> KafkaArgs {
        Args::parse_from([&["test"], argv].concat()).kafka
    }

    #[test]
    fn user_options_override_the_defaults() {
        let k = kafka(&["--brokers", "b:1", "--kafka-option", "linger.ms=20"]);
        let p = producer(&k);
        assert_eq!(p.get("bootstrap.servers"), Some("b:1"));
        assert_eq!(p.get("linger.ms"), Some("20"));
        assert_eq!(p.get("enable.idempotence"), Some("true"));
        let run = run_args(&["--brokers", "b:1", "--kafka-option", "linger.ms=20"]);
        let c = commands_consumer(&run);
        assert_eq!(c.get("group.id"), Some("ktimer"));
        assert_eq!(c.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(c.get("linger.ms"), Some("20"));
        assert_eq!(client(&k).get("group.id"), None);
    }

    fn run_args(argv: &[&str]) -> RunArgs {
        let argv = [&["ktimer", "run"], argv].concat();
        match crate::config::Cli::parse_from(argv).command {
            crate::config::Command::Run(r) => r,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_session_timeout_sets_the_heartbeat_and_options_still_win() {
        let c = commands_consumer(&run_args(&["--session-timeout-ms", "6000"]));
        assert_eq!(c.get("session.timeout.ms"), Some("6000"));
        assert_eq!(c.get("heartbeat.interval.ms"), Some("600"));
        assert_eq!(
            c.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        let c = commands_consumer(&run_args(&[
            "--assignment",
            "range",
            "--kafka-option",
            "heartbeat.interval.ms=50",
        ]));
        assert_eq!(c.get("partition.assignment.strategy"), Some("range"));
        assert_eq!(c.get("heartbeat.interval.ms"), Some("50"));
        assert!(
            crate::config::Cli::try_parse_from(["ktimer", "run", "--session-timeout-ms", "5"])
                .is_err()
        );
    }

    #[test]
    fn the_producer_limit_is_the_last_one_given() {
        let k = kafka(&[
            "--kafka-option",
            "message.max.bytes=10",
            "--kafka-option",
            "message.max.bytes=20",
        ]);
        assert_eq!(producer_max_bytes(&k), Some(20));
        assert_eq!(producer_max_bytes(&kafka(&[])), None);
    }
}
