//! Watching the intake for a stall. The intake marks what it waits for (a batch in Redis,
//! the answer stage, taking partitions, the ownership check and its rebuilds) while it
//! waits; a task reports any wait longer than [`STALLED`]: the metric
//! `ktimer_intake_stalled_seconds`, `/readyz` 503 with what it waits for, and a log line
//! every few seconds. A stall of the whole intake is then never silent.

use crate::metrics::Metrics;
use crate::retry::LOG_EVERY;
use crate::shutdown::CancellationToken;
use crate::status::StatusTx;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A wait longer than this is a stall.
pub const STALLED: Duration = Duration::from_secs(10);

/// The intake's open waits.
#[derive(Debug, Default)]
pub struct Waits {
    next: AtomicU64,
    open: Mutex<HashMap<u64, (&'static str, Instant)>>,
}

/// One open wait; it ends when dropped.
#[derive(Debug)]
pub struct Wait {
    waits: Arc<Waits>,
    id: u64,
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.waits.open.lock().expect("waits").remove(&self.id);
    }
}

impl Waits {
    /// Marks that the intake waits for `what` until the returned [`Wait`] is dropped.
    pub fn begin(self: &Arc<Self>, what: &'static str) -> Wait {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        self.open.lock().expect("waits").insert(id, (what, started));
        Wait {
            waits: self.clone(),
            id,
        }
    }

    /// The longest open wait at `now`: what it waits for, and for how long.
    pub fn longest(&self, now: Instant) -> Option<(&'static str, Duration)> {
        let open = self.open.lock().expect("waits");
        let oldest = open.values().min_by_key(|(_, since)| *since)?;
        Some((oldest.0, now.saturating_duration_since(oldest.1)))
    }
}

/// Starts the watchdog of `waits`; it stops with `token`.
pub fn spawn(waits: Arc<Waits>, metrics: Arc<Metrics>, status: StatusTx, token: CancellationToken) {
    tokio::spawn(async move {
        let mut logged: Option<Instant> = None;
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let now = Instant::now();
            let stall = waits.longest(now).filter(|(_, d)| *d >= STALLED);
            metrics
                .intake_stalled
                .set(stall.map_or(0.0, |(_, d)| d.as_secs_f64().floor()));
            let why = stall
                .map(|(what, d)| format!("the intake has waited {} s for {what}", d.as_secs()));
            if let Some(why) = &why {
                if logged.is_none_or(|t| now - t >= LOG_EVERY) {
                    tracing::warn!(stalled = %why, "intake stalled");
                    logged = Some(now);
                }
            } else {
                logged = None;
            }
            status.send_if_modified(|s| {
                let changed = s.intake_stalled != why;
                s.intake_stalled = why;
                changed
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_open_wait_is_reported_until_it_ends() {
        let waits = Arc::new(Waits::default());
        assert_eq!(waits.longest(Instant::now()), None);
        let first = waits.begin("Redis to apply a batch");
        let second = waits.begin("the answer stage");
        let later = Instant::now() + Duration::from_secs(12);
        let (what, d) = waits.longest(later).unwrap();
        assert_eq!(what, "Redis to apply a batch");
        assert!(d >= Duration::from_secs(12));
        drop(first);
        assert_eq!(waits.longest(later).unwrap().0, "the answer stage");
        drop(second);
        assert_eq!(waits.longest(later), None);
    }
}
