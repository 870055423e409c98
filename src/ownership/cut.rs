//! Giving the partitions up while this instance cannot reach Redis.
//!
//! An instance cut from Redis (a network partition between it and Redis, while the rest
//! of the group still reaches both) can neither apply commands nor claim fires: holding
//! its partitions would hold their fires until the cut heals. A probe pings Redis every
//! [`PROBE_EVERY`]; once no ping has been answered for the bound (`--redis-cut-ms`, well
//! under the group's session timeout), the instance gives its partitions up: the apply
//! waiting on Redis is abandoned (its commands are not committed, so the next owner
//! applies them) and the intake leaves the consumer group, which hands the partitions to
//! the other instances at once. Once [`HEALED_AFTER`] pings in a row are answered, the
//! intake joins the group again.
//!
//! Any answer counts, an error reply too (`LOADING`, `OOM`...): Redis is reachable, and
//! every instance would meet the same error, so moving the partitions would not help.
//!
//! The probe asks for Redis's `TIME`, which anchors the service's reference clock
//! ([`crate::clock::Reference`]): fires are due by Redis's clock, whatever this host's.

use crate::clock::Reference;
use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::status::StatusTx;
use crate::store::Store;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the probe pings Redis.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// How long one probe may take before it counts as unanswered.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Answered pings in a row after which a cut counts as healed.
pub const HEALED_AFTER: u32 = 2;

/// A change the probe decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// No answer for the bound: give the partitions up.
    GiveUp,
    /// Answered again: take partitions again.
    Rejoin,
}

/// The probe's rule, pure: when to give up and when to rejoin.
///
/// Invariant: `given_up` turns true only after no ping was answered for `bound` since
/// the last answer, and false only after [`HEALED_AFTER`] answers in a row.
#[derive(Debug)]
pub struct Rule {
    bound: Duration,
    last_answer: Instant,
    answers: u32,
    given_up: bool,
}

impl Rule {
    /// A rule giving up after `bound` without an answer, counting from `now`.
    pub fn new(bound: Duration, now: Instant) -> Rule {
        Rule {
            bound,
            last_answer: now,
            answers: 0,
            given_up: false,
        }
    }

    /// Takes the outcome of a ping finished at `now`.
    pub fn observe(&mut self, now: Instant, answered: bool) -> Option<Change> {
        if answered {
            self.last_answer = now;
            self.answers += 1;
            if self.given_up && self.answers >= HEALED_AFTER {
                self.given_up = false;
                return Some(Change::Rejoin);
            }
            return None;
        }
        self.answers = 0;
        if !self.given_up && now.duration_since(self.last_answer) >= self.bound {
            self.given_up = true;
            return Some(Change::GiveUp);
        }
        None
    }

    /// How long no ping has been answered at `now` (zero right after an answer).
    pub fn silent(&self, now: Instant) -> Duration {
        match self.answers {
            0 => now.duration_since(self.last_answer),
            _ => Duration::ZERO,
        }
    }
}

/// What the intake reads of the probe.
pub struct Cut {
    /// True while the partitions are given up.
    given_up: watch::Sender<bool>,
    /// Cancelled when the partitions are given up (the apply waiting on Redis stops); a
    /// fresh child of the shutdown token after each rejoin.
    apply: Mutex<CancellationToken>,
    shutdown: CancellationToken,
}

impl Cut {
    /// The token an apply retries under: cancelled on shutdown or when giving up.
    pub fn apply_token(&self) -> CancellationToken {
        self.lock().clone()
    }

    /// Whether the partitions are given up now.
    pub fn given_up(&self) -> bool {
        *self.given_up.borrow()
    }

    /// Whether the partitions are given up, as it changes.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.given_up.subscribe()
    }

    fn change(&self, c: Change) {
        let mut apply = self.lock();
        match c {
            Change::GiveUp => apply.cancel(),
            Change::Rejoin => *apply = self.shutdown.child_token(),
        }
        self.given_up.send_replace(c == Change::GiveUp);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancellationToken> {
        self.apply.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads Redis's clock once into `clock`: whether Redis answered.
async fn probe(store: &Store, clock: &Reference, metrics: &Metrics) -> bool {
    match tokio::time::timeout(PROBE_TIMEOUT, store.time()).await {
        Ok(Ok(Some(redis_us))) => {
            clock.anchor(redis_us, Instant::now());
            metrics.clock_offset.set(clock.offset_us() as f64 / 1e6);
            true
        }
        Ok(Ok(None)) => true,
        _ => false,
    }
}

/// Starts the probe of `store` once it read Redis's clock (or failed to, once), giving
/// up after `bound` without an answer; it stops with `token`.
pub async fn spawn(
    store: Store,
    clock: Arc<Reference>,
    bound: Duration,
    metrics: Arc<Metrics>,
    status: StatusTx,
    token: CancellationToken,
) -> Arc<Cut> {
    let cut = Arc::new(Cut {
        given_up: watch::channel(false).0,
        apply: Mutex::new(token.child_token()),
        shutdown: token.clone(),
    });
    let probe_cut = cut.clone();
    if probe(&store, &clock, &metrics).await {
        let offset_ms = clock.offset_us() / 1000;
        if offset_ms.abs() >= 1_000 {
            tracing::warn!(offset_ms, "this host's clock differs from Redis's: fires follow Redis's clock; fix the host's time (NTP)");
        }
    }
    tokio::spawn(async move {
        let mut rule = Rule::new(bound, Instant::now());
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            let answered = probe(&store, &clock, &metrics).await;
            let now = Instant::now();
            let change = rule.observe(now, answered);
            let silent = rule.silent(now);
            metrics.redis_unreachable.set(silent.as_secs_f64());
            if let Some(c) = change {
                report(c, silent, bound);
                probe_cut.change(c);
                status.send_modify(|s| {
                    s.redis_cut = (c == Change::GiveUp).then(|| {
                        format!("Redis has not answered for {} ms: the partitions were given up to the group", silent.as_millis())
                    })
                });
            }
        }
    });
    cut
}

fn report(c: Change, silent: Duration, bound: Duration) {
    match c {
        Change::GiveUp => tracing::error!(
            silent_ms = silent.as_millis() as u64,
            bound_ms = bound.as_millis() as u64,
            "redis unreachable: giving the partitions up to the group until it answers again"
        ),
        Change::Rejoin => tracing::warn!("redis answers again: joining the group"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_after_the_bound_without_an_answer_and_rejoins_after_two_answers() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut r = Rule::new(Duration::from_millis(3_000), t0);
        assert_eq!(r.observe(at(500), true), None);
        assert_eq!(r.observe(at(1_000), false), None);
        assert_eq!(r.silent(at(1_000)), Duration::from_millis(500));
        assert_eq!(
            r.observe(at(3_000), false),
            None,
            "2.5 s since the last answer"
        );
        assert_eq!(r.observe(at(3_500), false), Some(Change::GiveUp));
        assert_eq!(r.observe(at(4_000), false), None, "given up once");
        assert_eq!(r.observe(at(9_000), true), None, "one answer is not enough");
        assert_eq!(r.observe(at(9_500), false), None);
        assert_eq!(r.observe(at(10_000), true), None, "not in a row");
        assert_eq!(r.observe(at(10_500), true), Some(Change::Rejoin));
        assert_eq!(r.silent(at(10_600)), Duration::ZERO);
    }

    #[test]
    fn a_short_silence_changes_nothing() {
        let t0 = Instant::now();
        let mut r = Rule::new(Duration::from_secs(5), t0);
        for ms in (500..4_500).step_by(500) {
            assert_eq!(r.observe(t0 + Duration::from_millis(ms), false), None);
        }
        assert_eq!(r.observe(t0 + Duration::from_millis(5_000), true), None);
        assert_eq!(r.observe(t0 + Duration::from_millis(9_999), false), None);
    }
}
