//! The migrator: one task per owned partition that keeps cron occurrences materialised
//! and promotes the one-shot timers due in the next [`PROMOTE_AHEAD_MS`] from the compact
//! record buckets to keys of their own (the fire path then reads and writes each fire's
//! record with one call; see `store/record.lua`).
//!
//! Cron timers are expanded into the minute slices for a window ahead (`--cron-window-ms`,
//! at most `--cron-max-per-pass` occurrences per timer per pass). The cron index scores
//! each scheduled cron timer by when its window is half used; the migrator wakes every
//! second (or at once when the intake resumed a timer), extends every window that is
//! due, and reports the earliest occurrence it stored (the owner wakes the partition's
//! trigger with it; the migrator knows nothing of the trigger). Creating or updating a timer materialises its first window in the
//! same atomic step as the command, so no fire ever waits for the migrator; a timer that
//! fires every second is materialised hundreds of fires ahead.
//!
//! Occurrences missed while nobody owned the partition are planned under the timer's
//! misfire policy (see [`crate::schedule::Compiled::plan`]).

use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::retry::{Retry, Stopped};
use crate::schedule::{Occurrences, PlanConfig};
use crate::shutdown::{CancellationToken, Stoppable};
use crate::store::{CronDue, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Most cron timers extended in one Redis call.
const BATCH: usize = 200;
/// Longest sleep between two looks at the cron index.
const IDLE: Duration = Duration::from_secs(1);
/// One-shot timers due within this are promoted out of the record buckets.
pub const PROMOTE_AHEAD_MS: i64 = 120_000;
/// Most slice members one promotion call looks at (a few ms of Redis).
const PROMOTE_BUDGET: usize = 1_000;

/// Migrator tuning.
#[derive(Debug, Clone)]
pub struct MigratorConfig {
    /// Window, cap per pass, misfire threshold.
    pub plan: PlanConfig,
    /// The clock.
    pub clock: Clock,
    /// The applications file in force: the exclusion calendars timers name.
    pub apps: crate::apps::Apps,
}

/// Called with the earliest occurrence a pass stored.
pub type OnDue = Box<dyn Fn(i64) + Send + Sync>;

/// The intake's handle on a running migrator.
pub struct MigratorHandle {
    /// Makes the migrator look at the cron index now (a timer was resumed).
    pub wake: Arc<Notify>,
    task: Stoppable,
}

impl MigratorHandle {
    /// Whether the migrator ended (it only does when fenced or stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the migrator and waits for it.
    pub async fn stop(self) {
        self.task.stop().await;
    }
}

/// Starts the migrator of `partition` holding `epoch`; `on_due` hears of every pass's
/// earliest new occurrence.
pub fn spawn(
    partition: i32,
    epoch: i64,
    store: Store,
    cfg: MigratorConfig,
    on_due: OnDue,
    metrics: &Metrics,
    token: CancellationToken,
) -> MigratorHandle {
    let wake = Arc::new(Notify::new());
    let retry = Retry::new("migrator", &token)
        .partition(partition)
        .counting(metrics.redis_errors.with_label_values(&["migrate"]));
    let m = Migrator {
        partition,
        epoch,
        store,
        plan: cfg.plan,
        clock: cfg.clock,
        apps: cfg.apps,
        on_due,
        retry,
        wake: wake.clone(),
        token: token.clone(),
    };
    MigratorHandle {
        wake,
        task: Stoppable::spawn(token, m.run()),
    }
}

struct Migrator {
    partition: i32,
    epoch: i64,
    store: Store,
    plan: PlanConfig,
    clock: Clock,
    apps: crate::apps::Apps,
    on_due: OnDue,
    retry: Retry,
    wake: Arc<Notify>,
    token: CancellationToken,
}

impl Migrator {
    async fn run(self) {
        while !self.token.is_cancelled() {
            match self.retry.run(StoreError::is_fenced, || self.step()).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(Stopped::Shutdown) => return,
                Err(Stopped::Fatal(_)) => {
                    tracing::warn!(
                        partition = self.partition,
                        "migrator stopped: partition lost"
                    );
                    return;
                }
            }
            tokio::select! {
                _ = self.token.cancelled() => {}
                _ = tokio::time::sleep(IDLE) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Promotes the timers due soon and extends the cron windows that are due; `true`
    /// when there may be more right away.
    async fn step(&self) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let more = self
            .store
            .promote(
                self.partition,
                self.epoch,
                now + PROMOTE_AHEAD_MS,
                PROMOTE_BUDGET,
            )
            .await?;
        Ok(self.extend(now).await? || more)
    }

    /// Extends the cron windows that are due; `true` when there may be more.
    async fn extend(&self, now: i64) -> Result<bool, StoreError> {
        let due = self
            .store
            .cron_due(self.partition, self.epoch, now, BATCH)
            .await?;
        if due.is_empty() {
            return Ok(false);
        }
        let full = due.len() >= BATCH;
        let batch: Vec<_> = due
            .into_iter()
            .map(|d| {
                let o = self.occurrences(&d, now);
                (d, o)
            })
            .collect();
        self.store
            .materialize(self.partition, self.epoch, &batch, now)
            .await?;
        if let Some(first) = batch.iter().filter_map(|(_, o)| o.dues.first()).min() {
            (self.on_due)(*first);
        }
        Ok(full)
    }

    /// The calendar `spec` of `d` names, from the applications file in force. One the
    /// file no longer defines is left out (the timer fires on every occurrence rather
    /// than stop: it was accepted with it), loudly.
    fn calendar(
        &self,
        d: &CronDue,
        spec: &crate::schedule::CronSpec,
    ) -> Option<Arc<crate::calendar::Calendar>> {
        let name = spec.calendar.as_deref()?;
        let found = self.apps.calendar_of(spec);
        if found.is_none() {
            tracing::error!(partition = self.partition, timer_id = %d.timer_id, calendar = name,
                "the calendar this timer names is no longer in the applications file; its occurrences fire unexcluded");
        }
        Some(found.unwrap_or_else(|| Arc::new(crate::calendar::Calendar::empty())))
    }

    /// The next window of `d`, planned at `now` under its misfire policy.
    fn occurrences(&self, d: &CronDue, now: i64) -> Occurrences {
        let compiled = match &d.spec {
            Ok(spec) => spec
                .compile(&d.timer_id, self.calendar(d, spec))
                .map(|c| (c, spec.misfire)),
            Err(e) => Err(e.to_string()),
        };
        match compiled {
            Ok((c, misfire)) => c.plan(d.covered_ms, now, misfire, &self.plan),
            Err(e) => {
                // Cannot happen for a schedule validated at intake; complete the timer
                // rather than retry it forever.
                tracing::error!(partition = self.partition, timer_id = %d.timer_id, error = %e,
                    "stored cron schedule unreadable; completing the timer");
                Occurrences {
                    dues: vec![],
                    covered_ms: d.covered_ms,
                    exhausted: true,
                }
            }
        }
    }
}
