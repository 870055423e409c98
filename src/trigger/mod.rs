//! The trigger: one task per owned partition that fires its timers at the due millisecond.
//!
//! The task sleeps until the next claim time (the next due time minus `claim_ahead`), or
//! until the intake wakes it because an earlier timer arrived ([`Wake`]); there is no
//! polling interval. A claim moves due fires atomically into the in-flight set; the task
//! then waits in memory for each fire's due millisecond, enqueues its record, and only
//! after the broker acknowledged it removes it from the in-flight set (batched). A fire
//! is never produced before its due time: the clock is read after every wake.
//!
//! On start the task re-drives whatever the partition has in flight (a previous owner
//! crashed or lost the partition). Slices of earlier minutes are claimed first, so a
//! backlog left by downtime drains in due order.
//!
//! Just before a fire is handed to the producer, the [`Gate`] is checked (a pause, update
//! or cancel applied after the claim makes it stale) and the [`lease::Lease`] (a frozen
//! instance that lost its partition does not produce it).
//!
//! What a trigger holds in memory is bounded: the instance's [`budget::Budget`] (fires
//! and bytes) gates every claim and take-over, and a rate-limited application's due
//! backlog beyond a few seconds of its pace stays parked in Redis (`paced`).
//!
//! Files: [`wake`] (when to claim), `plan` (the claim and wake times, pure), [`gate`]
//! (stale fires), [`lease`] (fencing between Redis calls), [`fence`] (a producer that
//! stopped answering: no claims, and the next owner waits for what it holds),
//! [`budget`] (the bound on held fires), `paced` (the quotas of paced applications),
//! `ready` (fires waiting for their send time), `delivery` (send, retry or dead letter),
//! `calls` (claims and acknowledgements beside the sending), [`landing`] (what the
//! intake waits for: delivered fires out of flight before commands apply), `poison` (an
//! acknowledgement the store fails on every time, isolated), `recover` (the take-over of
//! the in-flight set), `task` (the loop).

pub mod budget;
mod calls;
mod delivery;
pub mod fence;
pub mod gate;
pub mod landing;
pub mod lease;
mod paced;
mod plan;
mod poison;
mod ready;
mod recover;
mod task;
pub mod wake;

pub use gate::Gate;
pub use landing::Landing;
pub use lease::LEASE;
pub use wake::Wake;

use crate::apps::Apps;
use crate::clock::Clock;
use crate::config::RunArgs;
use crate::metrics::Metrics;
use crate::retry::Backoff;
use crate::shutdown::{CancellationToken, Stoppable};
use crate::sink::Sink;
use crate::state::checkpoint::Confirmed;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// Trigger tuning.
#[derive(Debug, Clone)]
pub struct TriggerConfig {
    /// Claim fires this many ms before they are due (then wait in memory).
    pub claim_ahead_ms: i64,
    /// Most fires claimed in one Redis call.
    pub claim_batch: usize,
    /// Delivered fires wait this long for their acknowledgement to be sent with others.
    pub ack_every_ms: i64,
    /// Longest sleep without a wake-up (a safety net, not a polling interval).
    pub max_idle_ms: i64,
    /// Delays between delivery attempts of a fire.
    pub delivery_backoff: Backoff,
    /// Delivery attempts of a fire before it goes to the dead-letter topic (an error the
    /// broker will never accept, such as a record too large, sends it there at once).
    pub max_attempts: i32,
    /// A cron occurrence claimed more than this late was missed (its misfire policy applies).
    pub misfire_threshold_ms: i64,
    /// How long an epoch-checked call vouches for ownership ([`LEASE`]).
    pub lease: Duration,
    /// The clock.
    pub clock: Clock,
    /// The partition's last checkpoint confirmed (shared with its checkpoint task; one
    /// per partition, set when its tasks start): claims from a Redis that came back older
    /// than [`Confirmed::floor`] are refused.
    pub checkpoint: Arc<Confirmed>,
    /// Per-application delivery rate limits, attempts and backoff.
    pub apps: Apps,
    /// Partitions of the commands topic (each takes an even share of a rate limit).
    pub partitions: i32,
    /// The instance's bound on fires held in memory, shared by its triggers.
    pub budget: Arc<budget::Budget>,
}

impl From<&RunArgs> for TriggerConfig {
    fn from(a: &RunArgs) -> TriggerConfig {
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        TriggerConfig {
            claim_ahead_ms: a.claim_ahead_ms,
            claim_batch: a.claim_batch,
            ack_every_ms: a.ack_every_ms.max(0),
            max_idle_ms: a.max_idle_ms,
            delivery_backoff: Backoff {
                base: ms(a.retry_base_ms),
                max: ms(a.retry_max_ms),
            },
            max_attempts: a.max_delivery_attempts,
            misfire_threshold_ms: a.misfire_threshold_ms,
            lease: LEASE,
            clock: Clock::System,
            checkpoint: Arc::default(),
            apps: a.applications.clone().unwrap_or_default(),
            partitions: 1,
            budget: budget::Budget::new(a.max_held_fires, a.max_held_bytes),
        }
    }
}

/// The intake's handle on a running trigger.
pub struct TriggerHandle {
    /// Wakes the trigger for earlier timers.
    pub wake: Arc<Wake>,
    /// Fires made stale by commands.
    pub gate: Arc<Gate>,
    /// Delivered fires' acknowledgements, which the intake waits for before applying.
    pub landing: Arc<Landing>,
    task: Stoppable,
}

impl TriggerHandle {
    /// Whether the trigger ended (it only does when fenced or stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the trigger and waits for it to hand back what it holds.
    pub async fn stop(self) {
        self.task.stop().await;
    }
}

/// Starts the trigger of `partition` holding `epoch`; it stops when `token` is cancelled
/// or the partition is fenced.
pub fn spawn(
    partition: i32,
    epoch: i64,
    store: Store,
    sink: Arc<Sink>,
    metrics: &Metrics,
    cfg: TriggerConfig,
    token: CancellationToken,
) -> TriggerHandle {
    let on_own_thread = !matches!(cfg.clock, Clock::Tokio { .. });
    let t = task::Trigger::new(partition, epoch, store, sink, metrics, cfg, token.clone());
    let (wake, gate, landing) = (t.wake.clone(), t.gate.clone(), t.landing.clone());
    let task = if on_own_thread {
        Stoppable::spawn_on(runtime(), token, t.run())
    } else {
        Stoppable::spawn(token, t.run())
    };
    TriggerHandle {
        wake,
        gate,
        landing,
        task,
    }
}

/// The runtime every trigger of the process runs on: a thread of its own, so a busy main
/// runtime (decoding commands, encoding checkpoints, serving the admin port) never holds
/// up a due fire. (A trigger on a test clock stays on the test's runtime.)
fn runtime() -> &'static tokio::runtime::Handle {
    static RT: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the trigger runtime starts");
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("ktimer-trigger".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .expect("the trigger thread starts");
        handle
    })
}
