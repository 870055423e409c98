//! Fires in the producer that the broker has not answered: an instance cut from the
//! broker but not from Redis would otherwise go on claiming (its lease is renewed through
//! Redis), and what it enqueued would reach the broker whenever the link heals, perhaps
//! after the partition's next owner answered a CANCEL of that timer.
//!
//! The rule, written once here: while the producer has not answered any fire of the
//! partition for [`STUCK_AFTER`], the trigger claims nothing new and keeps its epoch in
//! the partition's drain set ([`crate::store::Store::mark_draining`], refreshed every
//! [`MARK_EVERY`], gone [`MARK_TTL`] after the last refresh). A trigger that stops (the
//! partition revoked or fenced) with fires still in the producer hands them to [`hold`],
//! which keeps the mark until each one was answered (delivered, or failed at the
//! producer's message timeout) and then removes it. The next owner applies no command of
//! the partition while the drain set exists (`ownership::partitions`).
//!
//! What stays open: a fire already written to a socket when the link broke can still
//! land after the producer gave it up (the kernel retransmits it), and an instance cut
//! from Redis as well cannot keep its mark: the next owner waits [`MARK_TTL`] only.

use super::task::{Sending, Trigger};
use crate::store::Store;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

/// The producer is stuck when it answered no fire for this long while some wait.
pub const STUCK_AFTER: Duration = Duration::from_millis(1_000);
/// How often a stuck trigger refreshes its mark.
pub const MARK_EVERY: Duration = Duration::from_millis(500);
/// How long a mark outlives its last refresh.
pub const MARK_TTL: Duration = Duration::from_millis(2_000);

/// When the producer last answered a fire of the partition, and when the mark was last
/// refreshed.
#[derive(Debug)]
pub struct Fence {
    answered: Instant,
    marked: Option<Instant>,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            answered: Instant::now(),
            marked: None,
        }
    }
}

impl Fence {
    /// A fire was handed to the producer; `idle` if none was waiting for an answer.
    pub fn sent(&mut self, idle: bool) {
        if idle {
            self.answered = Instant::now();
        }
    }

    /// The producer answered a fire (delivered or failed).
    pub fn answered(&mut self) {
        self.answered = Instant::now();
    }

    /// Whether the producer is stuck, with `waiting` fires unanswered.
    pub fn stuck(&self, waiting: usize) -> bool {
        waiting > 0 && self.answered.elapsed() >= STUCK_AFTER
    }

    /// Whether the mark is due for a refresh (stuck, and not refreshed for
    /// [`MARK_EVERY`]); if so, counts it as refreshed now.
    pub fn mark_due(&mut self, waiting: usize) -> bool {
        let due = self.stuck(waiting) && self.marked.is_none_or(|t| t.elapsed() >= MARK_EVERY);
        if due {
            self.marked = Some(Instant::now());
        }
        due
    }

    /// Whether this trigger marked the partition since it started.
    pub fn ever_marked(&self) -> bool {
        self.marked.is_some()
    }
}

impl Trigger {
    /// Fires still in the producer keep the partition's drain mark until answered
    /// ([`hold`]); a mark left from a stuck time that ended is removed.
    pub(super) fn hand_over(&mut self) {
        let (store, p, epoch) = (self.store.clone(), self.partition, self.epoch);
        if !self.sending.is_empty() {
            let sending = std::mem::take(&mut self.sending);
            tokio::spawn(hold(store, p, epoch, sending));
        } else if self.fence.ever_marked() {
            tokio::spawn(async move { store.unmark_draining(p, epoch).await });
        }
    }

    /// While the producer answers no fire, refreshes the partition's drain mark.
    pub(super) fn mark_if_stuck(&mut self) {
        if self.fence.mark_due(self.sending.len()) {
            mark(&self.store, self.partition, self.epoch);
        }
    }
}

/// Refreshes the mark of `epoch` once, in the background (never holding up a fire).
pub fn mark(store: &Store, partition: i32, epoch: i64) {
    let store = store.clone();
    tokio::spawn(async move {
        let marked = store.mark_draining(partition, epoch, MARK_TTL);
        if let Ok(Err(e)) = tokio::time::timeout(MARK_EVERY, marked).await {
            tracing::debug!(partition, error = %e, "drain mark not refreshed");
        }
    });
}

/// Keeps `epoch`'s mark on the partition until the producer answered every fire in
/// `sending` (each resolves by the producer's message timeout at the latest), then
/// removes it. Runs after the trigger stopped; what the answers say is left to the next
/// owner (the fires are still in flight in Redis).
pub async fn hold(
    store: Store,
    partition: i32,
    epoch: i64,
    mut sending: FuturesUnordered<Sending>,
) {
    let n = sending.len();
    let started = Instant::now();
    tracing::warn!(
        partition,
        fires = n,
        "partition given up with fires the broker has not answered: its next owner applies \
         no command until the producer answered them"
    );
    let mut tick = tokio::time::interval(MARK_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => mark(&store, partition, epoch),
            next = sending.next() => if next.is_none() { break },
        }
    }
    if let Err(e) = store.unmark_draining(partition, epoch).await {
        tracing::debug!(partition, error = %e, "drain mark left to expire");
    }
    let waited_ms = started.elapsed().as_millis() as u64;
    tracing::info!(
        partition,
        fires = n,
        waited_ms,
        "the producer answered the fires of a partition given up"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_producer_that_stops_answering_is_stuck_after_a_second_and_marked_every_half() {
        let mut f = Fence::default();
        f.sent(true);
        assert!(!f.stuck(1));
        tokio::time::advance(STUCK_AFTER).await;
        assert!(!f.stuck(0), "nothing waiting: not stuck");
        assert!(f.stuck(1));
        assert!(f.mark_due(1));
        assert!(!f.mark_due(1), "refreshed just now");
        tokio::time::advance(MARK_EVERY).await;
        assert!(f.mark_due(1));
        f.answered();
        assert!(!f.stuck(1) && !f.mark_due(1), "an answer unsticks it");
        f.sent(false);
        tokio::time::advance(STUCK_AFTER).await;
        assert!(f.stuck(2), "sending more does not reset the wait");
        assert!(f.ever_marked());
    }
}
