//! The intake: consumes timer commands, applies them, answers each with a result.
//!
//! Per batch of records, along the flow, one file each:
//! - [`prepare`]: decode, validate, check the callback topic would accept the fires;
//! - [`apply`]: apply the valid commands to Redis in one pipeline of Lua calls (one
//!   atomic, idempotent call per partition and up to 100 commands, storing the applied
//!   offset), handle fencing, and wake the partitions' triggers. One batch is in Redis
//!   while the loop reads and prepares the next and enqueues the results of the one
//!   before; the next is revised (fenced partitions dropped, floors raised) before it
//!   is applied, and anything that changes the partitions (rebalance, ownership check,
//!   shutdown) first lands the batches in flight;
//! - [`poison`]: a command that makes a store script fail on every try is isolated from
//!   its batch (halving it) and answered rejected; the rest is applied;
//! - [`states`]: the answer stage produces the state record of every timer the batch
//!   changed (Redis answered them with the apply), then confirms them to Redis;
//! - [`answer`]: enqueue one result record per command; a separate task waits until the
//!   broker acknowledged every result and only then stores the offsets for the next
//!   commit, while the next batch is applied (rust-rdkafka's `at_least_once.rs` recipe).
//!
//! A crash anywhere in between replays the batch, which the scripts make harmless.
//! Partition ownership (assignment, the per-second check against Redis, replay) is in
//! [`crate::ownership`].

mod answer;
mod apply;
mod poison;
mod prepare;
mod states;
pub mod watch;

use crate::catalog::Catalog;
use crate::clock::Clock;
use crate::codec::Codec;
use crate::command::CommandResult;
use crate::metrics::Metrics;
use crate::ownership::{IntakeContext, Partitions, RebalanceEvent, Survey};
use crate::partitioner::{Misrouted, Partitioner};
use crate::shutdown::CancellationToken;
use crate::sink::Sink;
use crate::store::Store;
use crate::validate::Limits;
use apply::{Flight, Settled};
use futures::StreamExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedMessage};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Everything the intake loop needs.
pub struct Intake {
    /// The commands consumer.
    pub consumer: Arc<StreamConsumer<IntakeContext>>,
    /// Its rebalance events.
    pub events: mpsc::UnboundedReceiver<RebalanceEvent>,
    /// The commands topic (the lane's).
    pub topic: String,
    /// The lane read ([`crate::lanes`]): which application its commands act for.
    pub lane: Arc<crate::lanes::Lane>,
    /// Every lane (the shared one refuses commands of bound applications).
    pub lanes: Arc<crate::lanes::Lanes>,
    /// Redis.
    pub store: Store,
    /// The producer.
    pub sink: Arc<Sink>,
    /// Command decoding.
    pub codec: Arc<Codec>,
    /// Callback topic facts.
    pub catalog: Arc<Catalog>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Command limits.
    pub limits: Limits,
    /// Most records handled in one batch.
    pub batch: usize,
    /// Shutdown.
    pub token: CancellationToken,
    /// The clock.
    pub clock: Clock,
    /// The owned partitions.
    pub partitions: Partitions,
    /// How keys map to partitions, and what to do with a command in the wrong one.
    pub routing: (Partitioner, Misrouted),
    /// Partitions of the commands topic.
    pub partition_count: i32,
    /// Per-application intake rate limits (this instance's partitions' shares).
    pub intake_pacer: std::sync::Mutex<crate::pace::Pacer>,
    /// What the intake waits for ([`watch`]).
    pub waits: Arc<watch::Waits>,
    /// Whether Redis is out of reach and the partitions given up ([`crate::ownership::cut`]).
    pub cut: Arc<crate::ownership::cut::Cut>,
}

/// The outcome of one record before its result is sent.
pub(crate) struct Handled {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    result: CommandResult,
    /// A misrouted command's answer: the command itself, produced to its key's partition
    /// (which applies and answers it) instead of a result.
    forward: Option<Forward>,
    /// Its record's index in [`prepare::Prepared::records`].
    record: usize,
    /// The command's W3C trace context, answered with its result ([`crate::trace`]).
    trace: Option<crate::trace::Context>,
}

/// A command to produce again to the partition its key maps to.
pub(crate) struct Forward {
    partition: i32,
    value: Vec<u8>,
}

impl Handled {
    /// The result's record key: the command's, unless it is longer than any timer id
    /// may be (such a key would only make the result too large to produce).
    fn result_key(&self) -> Option<&[u8]> {
        self.key
            .as_deref()
            .filter(|k| k.len() <= crate::validate::MAX_ID_BYTES)
    }
}

impl Intake {
    /// Runs until the token is cancelled, then stops the triggers and commits.
    pub async fn run(mut self) -> Result<(), KafkaError> {
        self.consumer.subscribe(&[&self.topic])?;
        let consumer = self.consumer.clone();
        let mut stream = consumer.stream().ready_chunks(self.batch);
        let (answers, waiting) = mpsc::channel(answer::DEPTH);
        let confirming = tokio::spawn(answer::confirm(
            waiting,
            self.store.clone(),
            self.sink.clone(),
            self.consumer.clone(),
            self.topic.clone(),
            self.metrics.clone(),
            self.token.clone(),
        ));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut flight = Flight::default();
        let mut cut = self.cut.watch();
        let mut survey: Option<tokio::task::JoinHandle<Survey>> = None;
        loop {
            tokio::select! {
                biased;
                _ = self.token.cancelled() => break,
                Ok(()) = cut.changed() => {
                    let given_up = *cut.borrow_and_update();
                    self.land(&mut flight, &answers).await;
                    self.give_up(given_up);
                }
                Some(ev) = self.events.recv() => {
                    self.land(&mut flight, &answers).await;
                    self.rebalance(ev).await;
                }
                // The check reads Redis beside the commands (one round trip for every
                // partition) and holds the intake only when it has something to do. It
                // runs as a task of its own: a Redis call waiting for its turn on the
                // shared connection must be polled, or it holds the calls behind it
                // (this loop's apply among them) for ever.
                _ = tick.tick(), if !*cut.borrow() && survey.is_none() => {
                    let read = self.partitions.survey(&self.partitions.ids());
                    survey = Some(tokio::spawn(read));
                }
                read = async { survey.as_mut().expect("guarded").await }, if survey.is_some() => {
                    survey = None;
                    match read {
                        Ok(read) => self.conclude(read, &mut flight, &answers).await,
                        Err(e) => std::panic::resume_unwind(e.into_panic()),
                    }
                }
                done = flight.landed() => self.advance(&mut flight, done, &answers).await,
                Some(chunk) = stream.next(), if flight.has_room() => {
                    while let Ok(ev) = self.events.try_recv() {
                        self.land(&mut flight, &answers).await;
                        self.rebalance(ev).await;
                    }
                    let msgs = chunk.into_iter().filter_map(|m| match m {
                        Ok(m) => Some(m.detach()),
                        Err(e) => {
                            self.metrics.kafka_errors.with_label_values(&["consume"]).inc();
                            tracing::warn!(error = %e, "consumer error");
                            None
                        }
                    }).collect::<Vec<_>>();
                    self.process(msgs, &mut flight).await;
                }
            }
        }
        // Answers what Redis applies before the shutdown (the rest is replayed).
        self.land(&mut flight, &answers).await;
        drop(answers);
        let _ = confirming.await;
        self.partitions.stop_all().await;
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing stored since the last commit: nothing to do.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) | Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "final offset commit failed"),
        }
        self.consumer.unsubscribe();
        Ok(())
    }

    /// Leaves the group while Redis is out of reach (the revocation follows through the
    /// rebalance callback, as the loop polls on), joins it again once Redis answers.
    fn give_up(&self, given_up: bool) {
        if given_up {
            self.consumer.unsubscribe();
        } else if let Err(e) = self.consumer.subscribe(&[&self.topic]) {
            tracing::error!(error = %e, "joining the group again failed: restart the instance");
        }
    }

    /// Acts on one round of the ownership check: at once when it found every partition
    /// as this instance left it; otherwise after landing the batches in flight.
    async fn conclude(
        &mut self,
        survey: Survey,
        flight: &mut Flight,
        answers: &mpsc::Sender<answer::Batch>,
    ) {
        if !self.partitions.quiet(&survey) {
            self.land(flight, answers).await;
            let _wait = self
                .waits
                .begin("the ownership check of the partitions (and their rebuilds)");
            self.partitions.conclude(survey).await;
        }
        self.partitions.gauge_triggers();
    }

    async fn rebalance(&mut self, ev: RebalanceEvent) {
        let _wait = self
            .waits
            .begin("taking or releasing partitions (and their rebuilds)");
        // `false` only on shutdown, which the loop sees next.
        let _ = self.partitions.rebalance(ev).await;
    }

    /// One batch: prepare it, and apply it as soon as Redis is free ([`apply`]).
    async fn process(&mut self, msgs: Vec<OwnedMessage>, flight: &mut Flight) {
        // Given up: the records read until the revocation are left to the next owner.
        if self.cut.given_up() {
            return;
        }
        let live: Vec<OwnedMessage> = msgs
            .into_iter()
            .filter(|m| self.partitions.live(m.partition()).is_some())
            .collect();
        if let Some(prepared) = self.prepare(live).await {
            self.enqueue(flight, prepared);
        }
    }

    /// Enqueues a settled batch's results and hands it to the answer stage.
    async fn answer(&self, settled: Settled, answers: &mpsc::Sender<answer::Batch>) {
        let apps = self.limits.apps.current();
        let (topic, handled) = (&self.topic, settled.handled);
        let mut batch = answer::send(&self.sink, &self.metrics, &apps, topic, handled).await;
        // Encoded and produced by the answer stage, off this loop.
        batch.states = settled.written;
        // Waiting for the acknowledgements overlaps the next batches; the channel is
        // short, so a slow broker still holds the intake back.
        let _wait = self
            .waits
            .begin("the answer stage (results and states to the broker)");
        if answers.send(batch).await.is_err() {
            tracing::warn!("the answer stage stopped; results stay unacknowledged");
        }
    }
}
