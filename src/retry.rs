//! The one retry helper and the one backoff of ktimer.
//!
//! Every loop that waits for something outside the process (Redis, the broker, the
//! schema registry) goes through [`Retry::run`]: it retries with [`Backoff`], counts the
//! failures in a metric, logs a handful of lines for a long outage instead of one per try,
//! and gives up only on shutdown or on an error the caller calls fatal. Delivery retries of
//! the trigger, which are scheduled rather than awaited, use the same [`Backoff`].

use crate::shutdown::{within_deadline, CancellationToken, CALL_GRACE};
use prometheus::IntCounter;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// Errors that know whether the same call may succeed later.
pub trait Retryable {
    /// Whether trying again may succeed (connection trouble, a server loading...).
    fn is_retryable(&self) -> bool;
}

/// Exponential backoff: `base` for the first retry, doubling, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the first retry.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Backoff {
    /// The backoff of calls to Redis, the broker and the registry: 100 ms, doubling, at most 2 s.
    pub const DEFAULT: Backoff = Backoff {
        base: Duration::from_millis(100),
        max: Duration::from_secs(2),
    };

    /// Delay before retry number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }
}

/// The longest a call keeps failing without a log line: an outage says every few
/// seconds what is waiting for it.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// Whether failure number `attempt` deserves a log line (1, 2, 4, 8, ...), beside one
/// every [`LOG_EVERY`].
pub fn worth_logging(attempt: u32) -> bool {
    attempt.is_power_of_two()
}

/// Why [`Retry::run`] stopped without a result.
#[derive(Debug)]
pub enum Stopped<E> {
    /// The token was cancelled.
    Shutdown,
    /// The call failed with an error the caller called fatal.
    Fatal(E),
}

/// A retry policy: what is retried (for logs), until when, and how failures are counted.
#[derive(Clone)]
pub struct Retry {
    what: &'static str,
    partition: Option<i32>,
    token: CancellationToken,
    backoff: Backoff,
    errors: Option<IntCounter>,
}

impl Retry {
    /// Retries `what` with [`Backoff::DEFAULT`] until it succeeds or `token` is cancelled.
    pub fn new(what: &'static str, token: &CancellationToken) -> Retry {
        Retry {
            what,
            partition: None,
            token: token.clone(),
            backoff: Backoff::DEFAULT,
            errors: None,
        }
    }

    /// Names the partition in the log lines.
    pub fn partition(mut self, p: i32) -> Retry {
        self.partition = Some(p);
        self
    }

    /// Counts every failure in `counter`.
    pub fn counting(mut self, counter: IntCounter) -> Retry {
        self.errors = Some(counter);
        self
    }

    /// Calls `f` until it succeeds; errors for which `fatal` is true end the retrying. A
    /// call still running when the token is cancelled gets [`CALL_GRACE`] to finish,
    /// then is dropped (a task stopped while Redis or the broker does not answer must
    /// not wait out the call's timeout).
    pub async fn run<T, E, F, Fut>(
        &self,
        fatal: impl Fn(&E) -> bool,
        mut f: F,
    ) -> Result<T, Stopped<E>>
    where
        E: Display + Retryable,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempts = self.attempts();
        loop {
            let Some(called) = within_deadline(f(), &self.token, CALL_GRACE).await else {
                return Err(Stopped::Shutdown);
            };
            match called {
                Ok(v) => return Ok(v),
                Err(e) if fatal(&e) => return Err(Stopped::Fatal(e)),
                Err(e) if !attempts.failed(&e).await => return Err(Stopped::Shutdown),
                Err(_) => {}
            }
        }
    }

    /// Calls `f` until it succeeds, whatever the error; `None` only on shutdown.
    pub async fn forever<T, E, F, Fut>(&self, f: F) -> Option<T>
    where
        E: Display + Retryable,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run(|_| false, f).await.ok()
    }

    /// The failures of one retried call, for loops that cannot hand the call over as a
    /// closure (it borrows the loop's state mutably).
    pub fn attempts(&self) -> Attempts<'_> {
        Attempts {
            retry: self,
            failures: 0,
            logged: None,
        }
    }
}

/// Failures counted by [`Retry::attempts`].
pub struct Attempts<'a> {
    retry: &'a Retry,
    failures: u32,
    /// When the last failure was logged.
    logged: Option<tokio::time::Instant>,
}

impl Attempts<'_> {
    /// Records failure `e` (metric, a log line for failures 1, 2, 4, 8... and at least one
    /// every [`LOG_EVERY`]) and sleeps its backoff; `false` if the token was cancelled
    /// meanwhile.
    pub async fn failed<E: Display + Retryable>(&mut self, e: &E) -> bool {
        let r = self.retry;
        if let Some(c) = &r.errors {
            c.inc();
        }
        self.failures += 1;
        let attempt = self.failures;
        let now = tokio::time::Instant::now();
        let quiet = self.logged.is_some_and(|t| now - t >= LOG_EVERY);
        if worth_logging(attempt) || quiet {
            self.logged = Some(now);
            let (what, partition) = (r.what, r.partition);
            if e.is_retryable() {
                tracing::warn!(what, ?partition, error = %e, attempt, "failed; retrying");
            } else {
                tracing::error!(what, ?partition, error = %e, attempt, "failed; retrying");
            }
        }
        tokio::select! {
            _ = r.token.cancelled() => false,
            _ = tokio::time::sleep(r.backoff.delay(attempt)) => true,
        }
    }

    /// The call succeeded: the next failure starts the backoff again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[derive(Debug)]
    struct Oops(bool);
    impl Display for Oops {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "oops")
        }
    }
    impl Retryable for Oops {
        fn is_retryable(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let ms = |a| Backoff::DEFAULT.delay(a).as_millis();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(4), ms(5), ms(6)],
            [100, 200, 400, 800, 1600, 2000]
        );
        assert_eq!(ms(1_000), 2_000);
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(30),
        };
        assert_eq!(b.delay(9).as_millis(), 25_600);
        assert_eq!(b.delay(10).as_millis(), 30_000);
        assert_eq!(b.delay(0).as_millis(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_with_backoff_until_success() {
        let token = CancellationToken::new();
        let counter = IntCounter::new("t", "t").unwrap();
        let r = Retry::new("test", &token).counting(counter.clone());
        let start = Instant::now();
        let mut calls = 0;
        let got = r
            .forever(|| {
                calls += 1;
                let n = calls;
                async move {
                    if n < 4 {
                        Err(Oops(true))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(got, Some(4));
        assert_eq!(counter.get(), 3);
        // 100 + 200 + 400 ms of backoff, measured on tokio's paused clock.
        assert_eq!(start.elapsed(), Duration::from_millis(700));
    }

    #[tokio::test(start_paused = true)]
    async fn fatal_errors_and_shutdown_stop_retrying() {
        let token = CancellationToken::new();
        let r = Retry::new("test", &token);
        let fatal = r
            .run(
                |e: &Oops| !e.is_retryable(),
                || async { Err::<(), _>(Oops(false)) },
            )
            .await;
        assert!(matches!(fatal, Err(Stopped::Fatal(Oops(false)))));
        let t = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            t.cancel();
        });
        let start = Instant::now();
        let stopped = r
            .run(|_| false, || async { Err::<(), _>(Oops(true)) })
            .await;
        assert!(matches!(stopped, Err(Stopped::Shutdown)));
        assert_eq!(start.elapsed(), Duration::from_millis(250));
    }
}
