//! Wires the service together: store, sink, intake with its triggers, admin port.

use crate::admin::{self, AdminState};
use crate::catalog::{self, Catalog};
use crate::codec::Codec;
use crate::config::{KafkaArgs, RunArgs};
use crate::intake::Intake;
use crate::metrics::Metrics;
use crate::ownership::{self, IntakeContext};
use crate::retry;
use crate::schedule::PlanConfig;
use crate::shutdown::CancellationToken;
use crate::sink::{Sink, SinkTopics};
use crate::store::Store;
use crate::topics;
use crate::trigger::TriggerConfig;
use crate::validate::Limits;
use anyhow::Context;
use rdkafka::consumer::StreamConsumer;
use rdkafka::ClientConfig;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A client config with the brokers and the user's extra librdkafka options.
pub fn client_config(kafka: &KafkaArgs) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &kafka.brokers);
    for (k, v) in &kafka.kafka_options {
        cfg.set(k, v);
    }
    cfg
}

/// What a running instance reports about itself (admin readiness, tests, embedding).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// The admin port's bound address, once listening.
    pub admin_addr: Option<SocketAddr>,
    /// Whether the instance has joined the consumer group (got its first assignment).
    pub joined: bool,
    /// The commands-topic partitions it owns.
    pub owned: Vec<i32>,
}

/// Runs one ktimer instance until `token` is cancelled, then drains and returns.
/// Its [`Status`] is published on `status`.
pub async fn run(
    args: RunArgs,
    token: CancellationToken,
    status: watch::Sender<Status>,
) -> anyhow::Result<()> {
    let status = Arc::new(status);
    let k = &args.kafka;
    let metrics = Arc::new(Metrics::new());
    let codec = Arc::new(Codec::new(k.schema_registry_url.as_deref())?);
    let Some(store) = connect_store(&args, &token).await else {
        return Ok(());
    };
    let sink = Arc::new(Sink::new(
        &k.brokers,
        &k.kafka_options,
        codec.clone(),
        SinkTopics {
            fired: k.fired_topic.clone(),
            results: k.results_topic.clone(),
            dead_letter: k.dead_letter_topic.clone(),
        },
    )?);
    let (ctx, events) = ownership::context(store.clone(), &k.commands_topic);
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &k.brokers)
        .set("group.id", &args.group_id)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "10")
        .set("session.timeout.ms", "10000");
    for (key, v) in &k.kafka_options {
        cfg.set(key, v);
    }
    let consumer: Arc<StreamConsumer<IntakeContext>> = Arc::new(
        cfg.create_with_context(ctx)
            .context("creating the consumer")?,
    );
    let partitions = topics::partition_count(consumer.as_ref(), &k.commands_topic)?;
    anyhow::ensure!(
        partitions > 0,
        "the commands topic {:?} does not exist; create it with `ktimer topics apply`",
        k.commands_topic
    );
    let state = Arc::new(AdminState {
        metrics: metrics.clone(),
        store: store.clone(),
        status: status.clone(),
        partitions: AtomicI32::new(partitions),
    });
    if let Some(addr) = args.admin_addr.0 {
        let bound = admin::serve(addr, state.clone(), token.clone())
            .await
            .with_context(|| format!("binding the admin port {addr}"))?;
        tracing::info!(%bound, "admin port listening");
        status.send_modify(|s| s.admin_addr = Some(bound));
    }
    let producer_max = k
        .kafka_options
        .iter()
        .rev()
        .find(|(key, _)| key == "message.max.bytes")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(catalog::DEFAULT_MAX_RECORD_BYTES);
    let catalog = Arc::new(
        Catalog::new(&client_config(k), producer_max).context("creating the metadata clients")?,
    );
    let intake = Intake {
        catalog,
        consumer,
        events,
        topic: k.commands_topic.clone(),
        store,
        sink: sink.clone(),
        codec,
        metrics,
        limits: Limits {
            max_horizon_ms: args.max_horizon_days.saturating_mul(86_400_000),
            max_payload_bytes: args.max_payload_bytes,
            plan: PlanConfig {
                window_ms: args.cron_window_ms,
                max_per_pass: args.cron_max_per_pass,
                misfire_threshold_ms: args.misfire_threshold_ms,
            },
        },
        trigger: TriggerConfig {
            claim_ahead_ms: args.claim_ahead_ms,
            claim_batch: args.claim_batch,
            max_idle_ms: args.max_idle_ms,
            retry_base_ms: args.retry_base_ms,
            retry_max_ms: args.retry_max_ms,
            max_attempts: args.max_delivery_attempts,
            misfire_threshold_ms: args.misfire_threshold_ms,
        },
        batch: args.intake_batch,
        token: token.clone(),
        status,
    };
    tracing::info!(topic = %k.commands_topic, partitions, group = %args.group_id, "ktimer running");
    intake.run().await?;
    sink.flush(Duration::from_secs(5));
    tracing::info!("ktimer stopped");
    Ok(())
}

/// Connects to Redis, retrying until it answers; `None` on shutdown.
async fn connect_store(args: &RunArgs, token: &CancellationToken) -> Option<Store> {
    let mut attempt = 0u32;
    loop {
        match Store::connect(
            &args.redis_url,
            &args.redis_prefix,
            &args.kafka.commands_topic,
            args.retention_ms,
        )
        .await
        {
            Ok(s) => return Some(s),
            Err(e) => {
                attempt += 1;
                if retry::worth_logging(attempt) {
                    tracing::warn!(url = %args.redis_url, error = %e, attempt, "redis not reachable; retrying");
                }
            }
        }
        if !retry::pause(token, attempt).await {
            return None;
        }
    }
}
