//! One lane's part of an instance ([`crate::lanes`]): its consumer in the group, its
//! producer, the tasks of its owned partitions and its intake. Every lane is built the
//! same way; the shared lane is only the first.

use super::Events;
use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::codec::Codec;
use crate::config::RunArgs;
use crate::intake::watch::Waits;
use crate::intake::Intake;
use crate::kafka;
use crate::lanes::{Lane, Lanes};
use crate::metrics::Metrics;
use crate::migrator::MigratorConfig;
use crate::ownership::cut::Cut;
use crate::ownership::{self, IntakeContext, Partitions, Tasks};
use crate::retry::Retry;
use crate::shutdown::CancellationToken;
use crate::sink::Sink;
use crate::state::checkpoint::CheckpointConfig;
use crate::status::StatusTx;
use crate::store::Store;
use crate::topics;
use crate::trigger::TriggerConfig;
use crate::validate::Limits;
use anyhow::Context;
use rdkafka::consumer::StreamConsumer;
use std::sync::Arc;
use std::time::Duration;

/// What every lane of an instance shares.
pub(super) struct Shared {
    /// The command line.
    pub args: RunArgs,
    /// Every lane (the rule of [`crate::validate::tenancy`] needs them all).
    pub lanes: Arc<Lanes>,
    /// Redis (a lane takes it for its commands topic, [`Store::for_topic`]).
    pub store: Store,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Command decoding.
    pub codec: Arc<Codec>,
    /// Callback topic facts.
    pub catalog: Arc<Catalog>,
    /// The clock.
    pub clock: Clock,
    /// Whether Redis is out of reach: every lane's intake gives its partitions up.
    pub cut: Arc<Cut>,
    /// What the intakes wait for.
    pub waits: Arc<Waits>,
    /// Where the instance's state is published.
    pub status: StatusTx,
    /// Shutdown.
    pub token: CancellationToken,
}

/// The producer of `lane` (its results, fires, states and dead letters).
pub(super) fn sink(sh: &Shared, lane: &Lane) -> anyhow::Result<Arc<Sink>> {
    let producer = kafka::producer(&sh.args.kafka);
    Ok(Arc::new(Sink::new(
        &producer,
        sh.codec.clone(),
        lane.sink_topics(),
    )?))
}

/// The intake of `lane`, producing with `sink`, once the broker answers; `None` on
/// shutdown.
pub(super) async fn intake(
    sh: &Shared,
    lane: Arc<Lane>,
    sink: Arc<Sink>,
) -> anyhow::Result<Option<Intake>> {
    let args = &sh.args;
    let store = sh.store.for_topic(&lane.commands);
    let Some((consumer, events, partitions)) = consumer(sh, &lane, &store).await? else {
        return Ok(None);
    };
    let clock = sh.clock.clone();
    let tasks = Tasks {
        trigger_store: store.dedicated().await?,
        store: store.clone(),
        sink: sink.clone(),
        metrics: sh.metrics.clone(),
        trigger: TriggerConfig {
            partitions,
            clock: clock.clone(),
            ..args.into()
        },
        migrator: MigratorConfig {
            plan: args.into(),
            clock: clock.clone(),
            apps: args.applications.clone().unwrap_or_default(),
        },
        checkpoint: CheckpointConfig {
            interval: Duration::from_millis(args.checkpoint_interval_ms),
            page: crate::state::checkpoint::PAGE,
            in_flight: 1_000,
            clock: clock.clone(),
        },
        state: (
            lane.state.clone(),
            kafka::reader(&args.kafka, &format!("{}-rebuild", args.group_id)),
        ),
        shared: lane.application.is_none(),
        token: sh.token.clone(),
        status: sh.status.clone(),
    };
    let mut limits: Limits = args.into();
    limits.own_topics = sh.lanes.own_topics(&lane, &args.kafka.roles());
    limits.fired_topic = lane.fired.clone();
    tracing::info!(lane = %lane.name(), partitions, group = %args.group_id, "lane running");
    Ok(Some(Intake {
        partitions: Partitions::new(consumer.clone(), &lane.commands, tasks),
        catalog: sh.catalog.clone(),
        consumer,
        events,
        topic: lane.commands.clone(),
        lane,
        lanes: sh.lanes.clone(),
        store,
        sink,
        codec: sh.codec.clone(),
        metrics: sh.metrics.clone(),
        limits,
        batch: args.intake_batch,
        token: sh.token.clone(),
        clock,
        routing: (args.kafka.partitioner, args.misrouted),
        partition_count: partitions,
        intake_pacer: Default::default(),
        waits: sh.waits.clone(),
        cut: sh.cut.clone(),
    }))
}

/// The consumer of `lane`'s commands topic (in the instance's group) with its rebalance
/// events, and the topic's partition count, once the broker answers; `None` on shutdown.
async fn consumer(
    sh: &Shared,
    lane: &Lane,
    store: &Store,
) -> anyhow::Result<Option<(Arc<StreamConsumer<IntakeContext>>, Events, i32)>> {
    let (ctx, events) = ownership::context(store.clone(), &lane.commands, sh.metrics.clone());
    let consumer: StreamConsumer<IntakeContext> = kafka::commands_consumer(&sh.args)
        .create_with_context(ctx)
        .context("creating the consumer")?;
    let consumer = Arc::new(consumer);
    let Some(partitions) = partition_count(&consumer, &lane.commands, &sh.token).await else {
        return Ok(None);
    };
    anyhow::ensure!(
        partitions > 0,
        "the commands topic {:?} does not exist; create it with `ktimer topics apply`",
        lane.commands
    );
    let state = topics::partition_count(&*consumer, &lane.state)?;
    anyhow::ensure!(
        state == partitions,
        "the state topic {:?} has {state} partitions, the commands topic {:?} {partitions}: they must \
         match (a missing one is created by `ktimer topics apply`)",
        lane.state,
        lane.commands
    );
    Ok(Some((consumer, events, partitions)))
}

/// The partition count of `topic`, retrying (with a log line every few seconds) while the
/// broker cannot be reached: an instance may start before its broker (compose,
/// Kubernetes). `None` on shutdown.
async fn partition_count(
    consumer: &Arc<StreamConsumer<IntakeContext>>,
    topic: &str,
    token: &CancellationToken,
) -> Option<i32> {
    Retry::new("broker metadata (is the broker up?)", token)
        .forever(|| {
            let (c, t) = (consumer.clone(), topic.to_string());
            async move {
                tokio::task::spawn_blocking(move || topics::partition_count(&*c, &t))
                    .await
                    .expect("metadata fetch")
            }
        })
        .await
}
