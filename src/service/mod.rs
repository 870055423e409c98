//! Wires one instance together: store, admin port, and per lane ([`crate::lanes`]: the
//! shared commands topic and each bound application's) a producer, a consumer in the
//! group and an intake ([`lane`]). Wiring only: every part is built from the command
//! line by its own module.

mod lane;

use crate::admin::access::Access;
use crate::admin::lanes::AdminLanes;
use crate::admin::{self, AdminState};
use crate::catalog::{self, Catalog};
use crate::clock::{Clock, Reference};
use crate::codec::Codec;
use crate::config::RunArgs;
use crate::intake::Intake;
use crate::kafka;
use crate::lanes::Lanes;
use crate::metrics::Metrics;
use crate::ownership;
use crate::retry::Retry;
use crate::shutdown::CancellationToken;
use crate::status::{Status, StatusTx};
use crate::store::Store;
use anyhow::Context;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The rebalance events of a commands consumer.
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
    let apps = args.applications.clone().unwrap_or_default().current();
    let lanes = Arc::new(Lanes::new(k, &apps).map_err(anyhow::Error::msg)?);
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
    if let Some(apps) = &args.applications {
        crate::apps::reload_on_sighup(apps.clone(), token.clone());
    }
    let max = kafka::producer_max_bytes(k).unwrap_or(catalog::DEFAULT_MAX_RECORD_BYTES);
    let catalog = Catalog::new(&kafka::client(k), max).context("creating the metadata clients")?;
    crate::sampler::spawn(store.clone(), metrics.clone(), &status, token.clone());
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
    let shared = lane::Shared {
        args: args.clone(),
        lanes: lanes.clone(),
        store: store.clone(),
        metrics: metrics.clone(),
        codec: codec.clone(),
        catalog: Arc::new(catalog),
        clock: clock.clone(),
        cut,
        waits,
        status: status.clone(),
        token: token.clone(),
    };
    let mut intakes = Vec::new();
    let mut sinks = Vec::new();
    for l in lanes.all() {
        let sink = lane::sink(&shared, l)?;
        sinks.push(sink.clone());
        let Some(intake) = lane::intake(&shared, l.clone(), sink).await? else {
            return Ok(());
        };
        intakes.push(intake);
    }
    let sink = sinks[0].clone();
    if let Some(addr) = args.admin_addr.0 {
        let counts: Vec<i32> = intakes.iter().map(|i| i.partition_count).collect();
        let write = Some((k, codec.clone(), token.clone()));
        let state = AdminState {
            metrics: metrics.clone(),
            lanes: AdminLanes::new(&lanes, &store, &counts, write)?,
            status: status.clone(),
            partitioner: k.partitioner,
            access: Access::new(args.admin_tokens.clone(), addr.ip().is_loopback()),
            wait: Duration::from_millis(args.admin_wait_ms),
            apps: args.applications.clone().unwrap_or_default(),
        };
        serve_admin(addr, state, &token, &status).await?;
    }
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
    tracing::info!(lanes = lanes.all().len(), group = %args.group_id, "ktimer running");
    let ran = futures::future::join_all(intakes.into_iter().map(Intake::run)).await;
    if let Some(delay) = delay {
        // (It stops on the same token, after handing what it read to the producer.)
        let _ = delay.await;
    }
    for sink in &sinks {
        sink.flush(Duration::from_secs(5));
    }
    tracing::info!("ktimer stopped");
    ran.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(())
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
    Ok(Some(store))
}
