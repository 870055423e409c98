//! Time: the one clock the service reads, and that tests can control.
//!
//! Due times are Unix epoch milliseconds written by other machines, so production reads
//! the system's wall clock ([`Clock::System`]). Tests build a [`Clock::Tokio`]: wall time
//! is a fixed start plus the time elapsed on tokio's clock, so under
//! `#[tokio::test(start_paused = true)]` time moves only while every task sleeps, and a
//! sleep ends exactly when it is due. Sleeps always go through tokio's timer, so both
//! clocks wake a task at the same instant they report.

use std::time::Duration;

/// A source of wall-clock time.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    /// The system's wall clock.
    #[default]
    System,
    /// `start_us` plus the time elapsed on tokio's clock since `at` (paused in tests).
    Tokio {
        /// Wall-clock microseconds at `at`.
        start_us: i64,
        /// tokio's instant when the clock was made.
        at: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that follows tokio's (pausable) clock, starting at `start_ms`.
    pub fn tokio(start_ms: i64) -> Clock {
        Clock::Tokio {
            start_us: start_ms.saturating_mul(1000),
            at: tokio::time::Instant::now(),
        }
    }

    /// Now, Unix epoch microseconds.
    pub fn now_us(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0),
            Clock::Tokio { start_us, at } => start_us + at.elapsed().as_micros() as i64,
        }
    }

    /// Now, Unix epoch milliseconds (floored: never ahead of the real time).
    pub fn now_ms(&self) -> i64 {
        self.now_us().div_euclid(1000)
    }

    /// How long until millisecond `ms` begins, rounded up to the microsecond, so a sleep
    /// of this length never ends before `ms` (zero when `ms` has begun).
    pub fn until(&self, ms: i64) -> Duration {
        let left = ms.saturating_mul(1000).saturating_sub(self.now_us());
        Duration::from_micros(left.max(0) as u64)
    }

    /// Sleeps until millisecond `ms` has begun on this clock.
    pub async fn sleep_until(&self, ms: i64) {
        loop {
            let left = self.until(ms);
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left).await;
        }
    }
}

/// Now on the system's wall clock, Unix epoch milliseconds.
pub fn now_ms() -> i64 {
    Clock::System.now_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let c = Clock::tokio(1_000);
        assert_eq!(c.now_ms(), 1_000);
        tokio::time::advance(Duration::from_micros(2_500)).await;
        assert_eq!(c.now_us(), 1_002_500);
        assert_eq!(c.now_ms(), 1_002);
        assert_eq!(c.until(1_002), Duration::ZERO);
        assert_eq!(c.until(1_003), Duration::from_micros(500));
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_until_never_ends_early() {
        let c = Clock::tokio(5_000);
        c.sleep_until(5_250).await;
        assert_eq!(c.now_ms(), 5_250);
        c.sleep_until(4_000).await; // past: returns at once
        assert_eq!(c.now_ms(), 5_250);
    }

    #[test]
    fn system_clock_is_the_wall_clock() {
        let a = now_ms();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((wall - a).abs() < 1_000, "{wall} vs {a}");
    }
}
