//! What the bench sees: taps on topics (a consumer thread each) and the progress line.

use crate::client::assigned_consumer;
use crate::codec::Codec;
use crate::command::Outcome;
use crate::config::KafkaArgs;
use crate::now_ms;
use crate::sink::headers;
use hdrhistogram::Histogram;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counters of the running phase, printed once a second.
#[derive(Debug, Default)]
pub struct Progress {
    phase: Mutex<(String, i64)>,
    /// Records the phase produces in all.
    pub total: AtomicU64,
    /// Records produced so far.
    pub produced: AtomicU64,
    /// Command results received so far.
    pub answered: AtomicU64,
    /// Fired (or piped) records received so far.
    pub received: AtomicU64,
}

impl Progress {
    /// Starts phase `name` of `total` records: counters back to 0.
    pub fn phase(&self, name: &str, total: usize) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = (name.to_string(), now_ms());
        self.total.store(total as u64, Ordering::Relaxed);
        for c in [&self.produced, &self.answered, &self.received] {
            c.store(0, Ordering::Relaxed);
        }
    }

    fn line(&self) -> String {
        let (name, since) = self.phase.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let secs = (now_ms() - since) as f64 / 1000.0;
        let total = self.total.load(Ordering::Relaxed);
        let produced = self.produced.load(Ordering::Relaxed);
        format!(
            "[{name} {secs:5.1}s] produced {produced}/{total} ({:.1}k/s) answered {} received {}",
            produced as f64 / secs.max(0.001) / 1000.0,
            self.answered.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }

    /// Prints the progress line to stderr every second until `stop` is cancelled.
    pub fn print_every_second(
        self: Arc<Self>,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => eprintln!("{}", self.line()),
                }
            }
        })
    }
}

/// Takes the records a [`Tap`] receives.
pub trait Handler: Send + 'static {
    /// One record, received at `recv_ms`; returns true when the handler has seen all it expects.
    fn take(&mut self, msg: &BorrowedMessage<'_>, recv_ms: i64) -> bool;
}

/// A consumer thread reading every partition of one topic from its current end.
pub struct Tap<H> {
    stop: Arc<AtomicBool>,
    join: tokio::task::JoinHandle<anyhow::Result<H>>,
}

impl<H: Handler> Tap<H> {
    /// Assigns a consumer at the end of `topic` (positions resolved before it returns:
    /// nothing produced later is missed) and feeds `handler` from a blocking thread.
    pub fn start(kafka: &KafkaArgs, topic: &str, mut handler: H) -> anyhow::Result<Tap<H>> {
        let consumer: BaseConsumer = assigned_consumer(kafka, &[topic.to_string()], false)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let join = tokio::task::spawn_blocking(move || {
            while !s.load(Ordering::Relaxed) {
                match consumer.poll(Duration::from_millis(50)) {
                    Some(Ok(m)) if handler.take(&m, now_ms()) => break,
                    Some(Err(e)) => tracing::debug!(error = %e, "bench consumer"),
                    _ => {}
                }
            }
            Ok(handler)
        });
        Ok(Tap { stop, join })
    }

    /// Waits until the handler has seen all it expects or `deadline` passes; returns
    /// the handler and whether it completed.
    pub async fn finish(mut self, deadline: tokio::time::Instant) -> anyhow::Result<(H, bool)> {
        match tokio::time::timeout_at(deadline, &mut self.join).await {
            Ok(r) => Ok((r??, true)),
            Err(_) => {
                self.stop.store(true, Ordering::Relaxed);
                Ok((self.join.await??, false))
            }
        }
    }
}

/// Counts the command results of the timers whose id starts with a prefix.
pub struct Answers {
    prefix: String,
    expected: usize,
    codec: Arc<Codec>,
    rt: tokio::runtime::Handle,
    progress: Arc<Progress>,
    /// Commands accepted.
    pub accepted: usize,
    /// Commands answered otherwise: reason -> count.
    pub refused: BTreeMap<String, usize>,
    /// When the last result was received, Unix ms.
    pub last_ms: i64,
}

impl Answers {
    /// Expects `expected` results of timers `prefix*`.
    pub fn new(
        prefix: &str,
        expected: usize,
        codec: Arc<Codec>,
        progress: Arc<Progress>,
    ) -> Answers {
        Answers {
            prefix: prefix.to_string(),
            expected,
            codec,
            rt: tokio::runtime::Handle::current(),
            progress,
            accepted: 0,
            refused: BTreeMap::new(),
            last_ms: 0,
        }
    }

    /// Results received.
    pub fn answered(&self) -> usize {
        self.accepted + self.refused.values().sum::<usize>()
    }
}

impl Handler for Answers {
    fn take(&mut self, msg: &BorrowedMessage<'_>, recv_ms: i64) -> bool {
        if !msg
            .key()
            .is_some_and(|k| k.starts_with(self.prefix.as_bytes()))
        {
            return false;
        }
        let decoded = self
            .rt
            .block_on(self.codec.decode_result(msg.payload().unwrap_or_default()));
        match decoded {
            Ok(r) if r.outcome == Outcome::Accepted => self.accepted += 1,
            Ok(r) => {
                let why = format!("{}: {}", r.outcome.as_str(), r.reason.unwrap_or_default());
                *self.refused.entry(why).or_default() += 1;
            }
            Err(e) => {
                *self
                    .refused
                    .entry(format!("undecodable result: {e}"))
                    .or_default() += 1
            }
        }
        self.last_ms = recv_ms;
        self.progress.answered.fetch_add(1, Ordering::Relaxed);
        self.answered() >= self.expected
    }
}

/// Checks the fired records of the timers `prefix{i}` against their due times.
pub struct Fires {
    prefix: String,
    dues: Arc<Vec<i64>>,
    counts: Vec<u32>,
    progress: Arc<Progress>,
    /// Timers fired at least once.
    pub unique: usize,
    /// Records beyond the first of a timer.
    pub duplicates: usize,
    /// Records produced or received before their due time.
    pub early: usize,
    /// Records whose key is not one of the run's timers, or without a fire time.
    pub foreign: usize,
    /// Fire lateness (ktimer's produce time minus due), ms, of each timer's first record.
    pub fire_lateness: Histogram<u64>,
    /// Delivery lateness (received by the bench minus due), ms, of each first record.
    pub delivery_lateness: Histogram<u64>,
    /// Last fire time of a first record, Unix ms.
    pub last_fired_ms: i64,
    /// When the last first record was received, Unix ms.
    pub last_received_ms: i64,
}

impl Fires {
    /// Expects one record of each timer `prefix{i}`, due at `dues[i]`.
    pub fn new(prefix: &str, dues: Arc<Vec<i64>>, progress: Arc<Progress>) -> Fires {
        Fires {
            prefix: prefix.to_string(),
            counts: vec![0; dues.len()],
            dues,
            progress,
            unique: 0,
            duplicates: 0,
            early: 0,
            foreign: 0,
            fire_lateness: lateness_histogram(),
            delivery_lateness: lateness_histogram(),
            last_fired_ms: 0,
            last_received_ms: 0,
        }
    }

    /// Timers that never fired.
    pub fn missing(&self) -> usize {
        self.counts.len() - self.unique
    }

    fn index(&self, msg: &BorrowedMessage<'_>) -> Option<usize> {
        let rest = msg.key()?.strip_prefix(self.prefix.as_bytes())?;
        let i: usize = std::str::from_utf8(rest).ok()?.parse().ok()?;
        (i < self.counts.len()).then_some(i)
    }
}

/// A histogram of ms from 0 to a day at 3 significant digits (larger values count as a
/// day; `Histogram::new` would saturate at its initial 2,047 instead).
fn lateness_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 86_400_000, 3).expect("valid bounds")
}

/// The decimal value of header `name`.
fn header_ms(msg: &BorrowedMessage<'_>, name: &str) -> Option<i64> {
    let h = msg.headers()?;
    h.iter()
        .find(|h| h.key == name)
        .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok())
}

impl Handler for Fires {
    fn take(&mut self, msg: &BorrowedMessage<'_>, recv_ms: i64) -> bool {
        let (Some(i), Some(fired)) = (self.index(msg), header_ms(msg, headers::FIRED_MS)) else {
            self.foreign += 1;
            return false;
        };
        let due = self.dues[i];
        if fired < due || recv_ms < due {
            self.early += 1;
        }
        self.counts[i] += 1;
        if self.counts[i] > 1 {
            self.duplicates += 1;
            return false;
        }
        self.unique += 1;
        self.progress.received.fetch_add(1, Ordering::Relaxed);
        self.fire_lateness
            .saturating_record((fired - due).max(0) as u64);
        self.delivery_lateness
            .saturating_record((recv_ms - due).max(0) as u64);
        self.last_fired_ms = self.last_fired_ms.max(fired);
        self.last_received_ms = self.last_received_ms.max(recv_ms);
        self.unique == self.counts.len()
    }
}

/// Counts records (the baseline pipe's output).
pub struct Count {
    expected: usize,
    progress: Arc<Progress>,
    /// Records received.
    pub received: usize,
    /// When the last was received, Unix ms.
    pub last_ms: i64,
}

impl Count {
    /// Expects `expected` records.
    pub fn new(expected: usize, progress: Arc<Progress>) -> Count {
        Count {
            expected,
            progress,
            received: 0,
            last_ms: 0,
        }
    }
}

impl Handler for Count {
    fn take(&mut self, _: &BorrowedMessage<'_>, recv_ms: i64) -> bool {
        self.received += 1;
        self.last_ms = recv_ms;
        self.progress.received.fetch_add(1, Ordering::Relaxed);
        self.received >= self.expected
    }
}
