//! What every retry loop of ktimer shares: the backoff, sparse logging, and giving up
//! only on shutdown.

use crate::shutdown::CancellationToken;
use std::time::Duration;

/// Delay before retry number `attempt` (1-based): 100 ms, doubling, at most 2 s.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((50u64 << attempt.clamp(1, 6)).min(2_000))
}

/// Whether failure number `attempt` deserves a log line (1, 2, 4, 8, ...), so a long
/// outage logs a handful of lines instead of one per try.
pub fn worth_logging(attempt: u32) -> bool {
    attempt.is_power_of_two()
}

/// Sleeps [`backoff`]`(attempt)`; returns `false` if `token` was cancelled meanwhile.
pub async fn pause(token: &CancellationToken, attempt: u32) -> bool {
    tokio::select! {
        _ = token.cancelled() => false,
        _ = tokio::time::sleep(backoff(attempt)) => true,
    }
}
