//! Wires one instance together: store, sink, consumer, admin port, intake. Wiring only:
//! every part is built from the command line by its own module.

use crate::admin::access::Access;
use crate::admin::commands::Commands;
use crate::admin::{self, AdminState};
use crate::catalog::{self, Catalog};
use crate::clock::{Clock, Reference};
use crate::codec::Codec;
use crate::config::RunArgs;
use crate::intake::Intake;
use crate::kafka;
use crate::metrics::Metrics;
use crate::migrator::MigratorConfig;
use crate::ownership::{self, IntakeContext, Partitions, Tasks};
use crate::retry::Retry;
use crate::shutdown::CancellationToken;
use crate::sink::{Sink, SinkTopics};
use crate::state::checkpoint::CheckpointConfig;
use crate::status::{Status, StatusTx};
use crate::store::tune::{self, Tuned};
use crate::store::Store;
use crate::topics;
use crate::trigger::TriggerConfig;
use anyhow::Context;
use rdkafka::consumer::StreamConsumer;
use std::net::SocketAddr;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The rebalance events of the commands consumer.
type Events = mpsc::UnboundedReceiver<ownership::RebalanceEvent>;

/// Runs one ktimer instance until `token` is cancelled, then drains and returns.
/// Its [`Status`] is published on `status`.
pub async fn run(
    args: RunArgs,
    token: CancellationToken,
    status: watch::Sender<Status>,
) -> anyhow::Result<()> {
    let status: StatusTx = Arc::new(status);
    let k = &args.kafka;
    let metrics = Arc::new(Metrics::new());
    let codec = Arc::new(Codec::new(k.schema_registry_url.as_deref())?);
    let Some(store) = connect_store(&args, &token).await? else {
        return Ok(());
    };
    let store = store
        .instrumented(metrics.redis_calls.clone())
        .with_history(crate::store::History {
            entries: args.history_entries,
            ttl_ms: args.history_ttl_ms,
        });
    let topics = SinkTopics {
        fired: k.fired_topic.clone(),
        results: k.results_topic.clone(),
        dead_letter: k.dead_letter_topic.clone(),
        state: k.state_topic.clone(),
    };
    let sink = Arc::new(Sink::new(&kafka::producer(k), codec.clone(), topics)?);
    let Some((consumer, events, partitions)) =
        commands_consumer(&args, &store, &metrics, &token).await?
    else {
        return Ok(());
    };
    if let Some(apps) = &args.applications {
        crate::apps::reload_on_sighup(apps.clone(), token.clone());
    }
    if let Some(addr) = args.admin_addr.0 {
        let state = AdminState {
            metrics: metrics.clone(),
            store: store.clone(),
            status: status.clone(),
            partitions: AtomicI32::new(partitions),
            partitioner: k.partitioner,
            access: Access::new(args.admin_tokens.clone(), addr.ip().is_loopback()),
            commands: Some(Commands::new(k, codec.clone(), token.clone())?),
            wait: Duration::from_millis(args.admin_wait_ms),
        };
        serve_admin(addr, state, &token, &status).await?;
    }
    let max = kafka::producer_max_bytes(k).unwrap_or(catalog::DEFAULT_MAX_RECORD_BYTES);
    let catalog = Catalog::new(&kafka::client(k), max).context("creating the metadata clients")?;
    let retune = args.redis_tune;
    crate::sampler::spawn(
        store.clone(),
        metrics.clone(),
        &status,
        retune,
        token.clone(),
    );
    let reference = Reference::new(args.clock_skew_ms);
    let clock = Clock::Reference(reference.clone());
    let cut = ownership::cut::spawn(
        store.clone(),
        reference,
        Duration::from_millis(args.redis_cut_ms),
        metrics.clone(),
        status.clone(),
        token.clone(),
    )
    .await;
    let waits = Arc::new(crate::intake::watch::Waits::default());
    crate::intake::watch::spawn(
        waits.clone(),
        metrics.clone(),
        status.clone(),
        token.clone(),
    );
    let tasks = Tasks {
        trigger_store: store.dedicated().await?,
        store: store.clone(),
        sink: sink.clone(),
        metrics: metrics.clone(),
        trigger: TriggerConfig {
            partitions,
            clock: clock.clone(),
            ..(&args).into()
        },
        migrator: MigratorConfig {
            plan: (&args).into(),
            clock: clock.clone(),
        },
        checkpoint: CheckpointConfig {
            interval: Duration::from_millis(args.checkpoint_interval_ms),
            page: crate::state::checkpoint::PAGE,
            in_flight: 1_000,
            clock: clock.clone(),
        },
        state: (
            k.state_topic.clone(),
            kafka::reader(k, &format!("{}-rebuild", args.group_id)),
        ),
        token: token.clone(),
        status,
    };
    let delay = (!k.delay_topic.is_empty()).then(|| {
        crate::delay::Delay {
            consumer: kafka::delay_consumer(&args),
            topic: k.delay_topic.clone(),
            commands_topic: k.commands_topic.clone(),
            sink: sink.clone(),
            codec: codec.clone(),
            metrics: metrics.clone(),
            clock: clock.clone(),
            token: token.clone(),
        }
        .spawn()
    });
    let intake = Intake {
        partitions: Partitions::new(consumer.clone(), &k.commands_topic, tasks),
        catalog: Arc::new(catalog),
        consumer,
        events,
        topic: k.commands_topic.clone(),
        store,
        sink: sink.clone(),
        codec,
        metrics,
        limits: (&args).into(),
        batch: args.intake_batch,
        token: token.clone(),
        clock,
        routing: (k.partitioner, args.misrouted),
        partition_count: partitions,
        intake_pacer: Default::default(),
        waits: waits.clone(),
        cut,
    };
    tracing::info!(topic = %k.commands_topic, partitions, group = %args.group_id, "ktimer running");
    intake.run().await?;
    if let Some(delay) = delay {
        // (It stops on the same token, after handing what it read to the producer.)
        let _ = delay.await;
    }
    sink.flush(Duration::from_secs(5));
    tracing::info!("ktimer stopped");
    Ok(())
}

/// The commands consumer with its rebalance events, and the topic's partition count,
/// once the broker answers; `None` on shutdown.
async fn commands_consumer(
    args: &RunArgs,
    store: &Store,
    metrics: &Arc<Metrics>,
    token: &CancellationToken,
) -> anyhow::Result<Option<(Arc<StreamConsumer<IntakeContext>>, Events, i32)>> {
    let k = &args.kafka;
    let (ctx, events) = ownership::context(store.clone(), &k.commands_topic, metrics.clone());
    let consumer: StreamConsumer<IntakeContext> = kafka::commands_consumer(args)
        .create_with_context(ctx)
        .context("creating the consumer")?;
    let consumer = Arc::new(consumer);
    let Some(partitions) = broker_metadata(&consumer, &k.commands_topic, token).await else {
        return Ok(None);
    };
    anyhow::ensure!(
        partitions > 0,
        "the commands topic {:?} does not exist; create it with `ktimer topics apply`",
        k.commands_topic
    );
    let state = topics::partition_count(&*consumer, &k.state_topic)?;
    anyhow::ensure!(
        state == partitions,
        "the state topic {:?} has {state} partitions, the commands topic {partitions}: they must \
         match (a missing one is created by `ktimer topics apply`)",
        k.state_topic
    );
    Ok(Some((consumer, events, partitions)))
}

/// The partition count of `topic`, retrying (with a log line every few seconds) while the
/// broker cannot be reached: an instance may start before its broker (compose,
/// Kubernetes). `None` on shutdown.
async fn broker_metadata(
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

/// Binds the admin port and publishes its address.
async fn serve_admin(
    addr: SocketAddr,
    state: AdminState,
    token: &CancellationToken,
    status: &StatusTx,
) -> anyhow::Result<()> {
    let bound = admin::serve(addr, Arc::new(state), token.clone())
        .await
        .with_context(|| format!("binding the admin port {addr}"))?;
    tracing::info!(%bound, "admin port listening");
    status.send_modify(|s| s.admin_addr = Some(bound));
    Ok(())
}

/// Connects to Redis, retrying until it answers; `None` on shutdown. Refuses a Redis
/// that may evict ktimer's keys ([`crate::store::guard`]).
async fn connect_store(args: &RunArgs, token: &CancellationToken) -> anyhow::Result<Option<Store>> {
    let (url, prefix, topic) = (
        &args.redis_url,
        &args.redis_prefix,
        &args.kafka.commands_topic,
    );
    let Some(store) = Retry::new("redis connect", token)
        .forever(|| Store::connect(url, prefix, topic, args.retention_ms))
        .await
    else {
        return Ok(None);
    };
    let primaries = Retry::new("redis settings", token)
        .forever(|| store.eviction())
        .await
        .unwrap_or_default();
    if let Some(why) = primaries.iter().find_map(|(node, e)| e.refusal(node)) {
        anyhow::bail!("{why}");
    }
    if args.redis_tune {
        match store.tune_encoding().await {
            Ok(Tuned::Already) => {}
            Ok(Tuned::Raised(from)) => tracing::info!(
                from,
                to = tune::HASH_VALUE_BYTES,
                "raised Redis hash-max-listpack-value (--redis-tune)"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "could not raise Redis hash-max-listpack-value: pending timers take about twice the memory (--redis-tune false silences this)"
            ),
        }
    }
    Ok(Some(store))
}
