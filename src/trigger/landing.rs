//! Delivered fires landing in Redis before the partition's next commands apply.
//!
//! A delivered fire stays under way (in flight) until its acknowledgement reaches Redis,
//! and the trigger holds acknowledgements back to send many in one call
//! (`--ack-every-ms`). A consumer that answers a fire with a command on the same timer
//! (creating it again, cancelling it) would find the fire still under way and its command
//! refused. So the intake asks the partition's trigger to send what it holds back and
//! waits for it ([`Landing::settle`]) before applying a batch: every fire whose delivery
//! the trigger knew of when the batch came is out of flight when the batch applies.
//!
//! Invariant: `landed` counts acknowledgements Redis took, in the order they were
//! queued (the trigger sends them oldest first, all of them in one call), so `landed >=
//! n` means the first `n` queued ones landed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// The most the intake waits for a trigger's acknowledgements before applying anyway
/// (a trigger whose Redis calls fail retries them; its commands are answered as before:
/// a command on a timer whose fire is still under way is refused).
pub const SETTLE_WAIT: Duration = Duration::from_secs(2);

/// The count of acknowledgements a trigger queued and landed, and the intake's request
/// to send them now. Shared by the trigger and the intake.
#[derive(Debug)]
pub struct Landing {
    queued: AtomicU64,
    landed: watch::Sender<u64>,
    asked: AtomicBool,
    notify: Notify,
}

impl Default for Landing {
    fn default() -> Landing {
        Landing {
            queued: AtomicU64::new(0),
            landed: watch::Sender::new(0),
            asked: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }
}

impl Landing {
    /// The trigger queued `n` acknowledgements (fires delivered or dropped).
    pub fn queued(&self, n: usize) {
        self.queued.fetch_add(n as u64, Ordering::SeqCst);
    }

    /// Redis took `n` more acknowledgements (the oldest queued ones).
    pub fn landed(&self, n: usize) {
        self.landed.send_modify(|l| *l += n as u64);
    }

    /// The trigger stopped: nothing more lands, and nobody waits for it.
    pub fn close(&self) {
        self.landed.send_replace(u64::MAX);
    }

    /// Whether the intake asked for the acknowledgements now; clears the request.
    pub fn take_ask(&self) -> bool {
        self.asked.swap(false, Ordering::SeqCst)
    }

    /// Resolves when the intake asks for the acknowledgements now.
    pub async fn asked(&self) {
        self.notify.notified().await
    }

    /// Waits until every acknowledgement queued so far landed, asking the trigger to send
    /// them now; at most `wait`. Answers whether they landed (false: timed out).
    pub async fn settle(&self, wait: Duration) -> bool {
        let want = self.queued.load(Ordering::SeqCst);
        let mut rx = self.landed.subscribe();
        if *rx.borrow() >= want {
            return true;
        }
        self.asked.store(true, Ordering::SeqCst);
        self.notify.notify_one();
        let landed = tokio::time::timeout(wait, rx.wait_for(|&l| l >= want)).await;
        matches!(landed, Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn settling_asks_the_trigger_and_waits_for_what_was_queued_before() {
        let l = Arc::new(Landing::default());
        assert!(l.settle(Duration::ZERO).await, "nothing queued: settled");
        l.queued(3);
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.settle(Duration::from_secs(10)).await }
        });
        l.asked().await;
        assert!(l.take_ask() && !l.take_ask(), "asked once");
        l.queued(2); // queued after the intake asked: not waited for
        l.landed(2);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one of the three still waits");
        l.landed(1);
        assert!(waiting.await.unwrap());
        assert!(
            !l.settle(Duration::from_millis(10)).await,
            "two left: timed out"
        );
        l.close();
        assert!(
            l.settle(Duration::ZERO).await,
            "a stopped trigger is not waited for"
        );
    }
}
