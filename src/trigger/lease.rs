//! How long a successful epoch-checked Redis call vouches for owning a partition.

use std::time::Duration;
use tokio::time::Instant;

/// The lease of every trigger. Must stay well below the group's session timeout minus
/// the heartbeat interval (10 s - 3 s by default).
pub const LEASE: Duration = Duration::from_millis(2_000);

/// Ownership vouched for by the last epoch-checked call, counted from when that call was
/// *issued*: a reply read after a freeze (GC, SIGSTOP, a stalled VM) says nothing about
/// the time of the freeze, so an instance frozen past the session timeout finds its lease
/// expired and re-checks the epoch before producing what it still holds in memory.
#[derive(Debug)]
pub struct Lease {
    confirmed: Instant,
    length: Duration,
}

impl Lease {
    /// A lease of `length`, vouched for now (the trigger just took its epoch).
    pub fn new(length: Duration) -> Lease {
        Lease {
            confirmed: Instant::now(),
            length,
        }
    }

    /// Marks the start of an epoch-checked call; pass it to [`Lease::confirm`] once the
    /// call succeeded.
    pub fn issue(&self) -> Instant {
        Instant::now()
    }

    /// An epoch-checked call issued at `issued` succeeded.
    pub fn confirm(&mut self, issued: Instant) {
        self.confirmed = self.confirmed.max(issued);
    }

    /// Whether the ownership is still vouched for.
    pub fn valid(&self) -> bool {
        self.confirmed.elapsed() < self.length
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_counts_from_when_the_call_was_issued() {
        let mut lease = Lease::new(LEASE);
        tokio::time::advance(Duration::from_millis(1_500)).await;
        let issued = lease.issue();
        // The call's reply arrives after a 1.9 s freeze.
        tokio::time::advance(Duration::from_millis(1_900)).await;
        lease.confirm(issued);
        assert!(lease.valid(), "1.9 s after the issue");
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(!lease.valid(), "2 s after the issue, not after the reply");
        let old = issued;
        lease.confirm(lease.issue());
        lease.confirm(old); // a late confirmation never moves the lease back
        assert!(lease.valid());
    }
}
