//! Time: the one clock the service reads, and that tests can control.
//!
//! Due times are Unix epoch milliseconds written by other machines, so a fire is due by a
//! clock every instance of the group agrees on: Redis's (`TIME`). A service reads a
//! [`Clock::Reference`]: this host's monotonic clock anchored to Redis's, re-anchored by
//! the Redis probe every half second ([`Reference::anchor`]), so a host whose wall clock is
//! off, or steps, neither fires early nor holds fires. Tests build a [`Clock::Tokio`]: wall
//! time is a fixed start plus the time elapsed on tokio's clock, so under
//! `#[tokio::test(start_paused = true)]` time moves only while every task sleeps, and a
//! sleep ends exactly when it is due. Sleeps always go through tokio's timer, so every
//! clock wakes a task at the same instant it reports.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of wall-clock time.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The system's wall clock.
    #[default]
    System,
    /// The reference clock (Redis's), kept on this host's monotonic clock.
    Reference(Arc<Reference>),
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
            Clock::Reference(r) => r.now_us(Instant::now()),
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

/// The reference clock: Redis's `TIME`, carried between readings by this host's
/// monotonic clock.
///
/// Invariant: never ahead of the reference. An anchor takes Redis's reading as the time
/// at which its reply *arrived* (Redis read its clock before that), so between anchors
/// this clock is behind Redis's by at most the probe's round trip plus the drift of the
/// host's monotonic clock over half a second. Until the first anchor it reads the
/// host's wall clock.
#[derive(Debug)]
pub struct Reference {
    /// The instant the reference's time is counted from.
    origin: Instant,
    /// The reference's time at `origin`, µs since the Unix epoch.
    at_origin_us: AtomicI64,
    /// Whether Redis's clock was read at least once.
    anchored: AtomicBool,
    /// Added to the host's wall clock: a fault for tests (`--clock-skew-ms`), 0 otherwise.
    skew_us: i64,
}

impl Reference {
    /// A reference that reads the host's wall clock (shifted by `skew_ms`) until anchored.
    pub fn new(skew_ms: i64) -> Arc<Reference> {
        let r = Reference {
            origin: Instant::now(),
            at_origin_us: AtomicI64::new(0),
            anchored: AtomicBool::new(false),
            skew_us: skew_ms.saturating_mul(1000),
        };
        r.at_origin_us.store(r.local_us(), Ordering::Relaxed);
        Arc::new(r)
    }

    /// This host's wall clock, µs since the Unix epoch.
    pub fn local_us(&self) -> i64 {
        Clock::System.now_us() + self.skew_us
    }

    /// The reference's time at instant `at`.
    fn now_us(&self, at: Instant) -> i64 {
        let since = at.saturating_duration_since(self.origin).as_micros() as i64;
        self.at_origin_us.load(Ordering::Relaxed) + since
    }

    /// Takes a reading of Redis's clock, `redis_us`, whose reply arrived at `received`.
    pub fn anchor(&self, redis_us: i64, received: Instant) {
        let since = received.saturating_duration_since(self.origin).as_micros() as i64;
        self.at_origin_us.store(redis_us - since, Ordering::Relaxed);
        self.anchored.store(true, Ordering::Relaxed);
    }

    /// Whether Redis's clock was read at least once.
    pub fn anchored(&self) -> bool {
        self.anchored.load(Ordering::Relaxed)
    }

    /// How far the reference is ahead of this host's wall clock, µs (negative: the host's
    /// clock is ahead).
    pub fn offset_us(&self) -> i64 {
        let now = Instant::now();
        self.now_us(now) - self.local_us()
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
    fn a_reference_follows_its_anchor_not_the_hosts_wall_clock() {
        let r = Reference::new(20_000);
        let c = Clock::Reference(r.clone());
        assert!(!r.anchored());
        assert!(
            (c.now_ms() - now_ms() - 20_000).abs() < 1_000,
            "skewed until anchored"
        );
        let t = Instant::now();
        r.anchor(1_000_000_000, t);
        assert!(r.anchored());
        assert_eq!(r.now_us(t), 1_000_000_000);
        assert_eq!(r.now_us(t + Duration::from_millis(250)), 1_000_250_000);
        // A later reading moves it, forwards or back.
        r.anchor(2_000_000_000, t + Duration::from_secs(1));
        assert_eq!(r.now_us(t + Duration::from_secs(2)), 2_001_000_000);
        // Anchored to the real clock: the host's 20 s lead shows as the offset.
        r.anchor(Clock::System.now_us(), Instant::now());
        assert!(
            (r.offset_us() + 20_000_000).abs() < 100_000,
            "{}",
            r.offset_us()
        );
        assert!((c.now_ms() - now_ms()).abs() < 100);
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
