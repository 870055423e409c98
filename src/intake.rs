//! The intake: consumes timer commands, applies them, answers each with a result.
//!
//! Per batch of records: decode and validate each; apply the valid ones to Redis in one
//! pipeline of Lua calls (each atomic and idempotent, storing the applied offset); enqueue
//! one result record per command; wait until the broker acknowledged every result; only
//! then store the offsets for the next commit. A crash anywhere in between replays the
//! batch, which the scripts make harmless.
//!
//! Partition assignment drives the triggers: on assignment the instance bumps the
//! partition's epoch in Redis (fencing the previous owner) and starts its trigger; on
//! revocation it stops it.

use crate::codec::{Codec, CodecError};
use crate::command::{CommandResult, Outcome, TimerCommand};
use crate::metrics::Metrics;
use crate::migrator::{self, MigratorHandle};
use crate::now_ms;
use crate::retry;
use crate::shutdown::CancellationToken;
use crate::sink::{delivered, Sink, SinkError};
use crate::store::{Applied, ApplyRequest, Store, StoreError};
use crate::trigger::{self, TriggerConfig, TriggerHandle};
use crate::validate::{validate, Limits, Op};
use futures::StreamExt;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::DeliveryFuture;
use rdkafka::ClientContext;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A change of this instance's partitions, reported by the consumer's rebalance callback.
#[derive(Debug)]
pub enum RebalanceEvent {
    /// These partitions are now ours.
    Assigned(Vec<i32>),
    /// These partitions are no longer ours.
    Revoked(Vec<i32>),
}

/// Consumer context forwarding rebalances to the intake loop.
pub struct IntakeContext {
    tx: mpsc::UnboundedSender<RebalanceEvent>,
}

impl ClientContext for IntakeContext {}

impl ConsumerContext for IntakeContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, r: &Rebalance<'_>) {
        let parts = |tpl: &rdkafka::TopicPartitionList| {
            tpl.elements()
                .iter()
                .map(|e| e.partition())
                .collect::<Vec<_>>()
        };
        let ev = match r {
            Rebalance::Assign(tpl) => RebalanceEvent::Assigned(parts(tpl)),
            Rebalance::Revoke(tpl) => RebalanceEvent::Revoked(parts(tpl)),
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "rebalance error");
                return;
            }
        };
        let _ = self.tx.send(ev);
    }
}

/// Creates the consumer context and the receiver of its rebalance events.
pub fn context() -> (IntakeContext, mpsc::UnboundedReceiver<RebalanceEvent>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (IntakeContext { tx }, rx)
}

/// A partition this instance owns: its epoch, trigger and migrator.
struct Owned {
    epoch: i64,
    trigger: TriggerHandle,
    migrator: MigratorHandle,
}

impl Owned {
    async fn stop(self) {
        self.migrator.stop().await;
        self.trigger.stop().await;
    }
}

/// Everything the intake loop needs.
pub struct Intake {
    /// The commands consumer.
    pub consumer: Arc<StreamConsumer<IntakeContext>>,
    /// Its rebalance events.
    pub events: mpsc::UnboundedReceiver<RebalanceEvent>,
    /// The commands topic.
    pub topic: String,
    /// Redis.
    pub store: Store,
    /// The producer.
    pub sink: Arc<Sink>,
    /// Command decoding.
    pub codec: Arc<Codec>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Command limits.
    pub limits: Limits,
    /// Trigger tuning.
    pub trigger: TriggerConfig,
    /// Most records handled in one batch.
    pub batch: usize,
    /// Shutdown.
    pub token: CancellationToken,
    /// Where the owned partitions are published.
    pub status: Arc<tokio::sync::watch::Sender<crate::service::Status>>,
}

/// The outcome of one record before its result is sent.
struct Handled {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    result: CommandResult,
}

impl Intake {
    /// Runs until the token is cancelled, then stops the triggers and commits.
    pub async fn run(mut self) -> Result<(), rdkafka::error::KafkaError> {
        self.consumer.subscribe(&[&self.topic])?;
        let consumer = self.consumer.clone();
        let mut stream = consumer.stream().ready_chunks(self.batch);
        let mut owned: HashMap<i32, Owned> = HashMap::new();
        loop {
            tokio::select! {
                biased;
                _ = self.token.cancelled() => break,
                Some(ev) = self.events.recv() => self.rebalance(ev, &mut owned).await,
                Some(chunk) = stream.next() => {
                    while let Ok(ev) = self.events.try_recv() {
                        self.rebalance(ev, &mut owned).await;
                    }
                    let msgs = chunk.into_iter().filter_map(|m| match m {
                        Ok(m) => Some(m.detach()),
                        Err(e) => {
                            tracing::warn!(error = %e, "consumer error");
                            None
                        }
                    }).collect::<Vec<_>>();
                    self.process(msgs, &mut owned).await;
                }
            }
        }
        for (_, o) in owned.drain() {
            o.stop().await;
        }
        self.metrics.owned_partitions.set(0);
        self.status.send_modify(|s| s.owned.clear());
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            tracing::warn!(error = %e, "final offset commit failed");
        }
        self.consumer.unsubscribe();
        Ok(())
    }

    async fn rebalance(&self, ev: RebalanceEvent, owned: &mut HashMap<i32, Owned>) {
        match ev {
            RebalanceEvent::Assigned(ps) => {
                for p in ps {
                    let Some(epoch) = self.retry("acquire", || self.store.acquire(p)).await else {
                        return;
                    };
                    let trigger = trigger::spawn(
                        p,
                        epoch,
                        self.store.clone(),
                        self.sink.clone(),
                        self.metrics.clone(),
                        self.trigger.clone(),
                        self.token.child_token(),
                    );
                    let migrator = migrator::spawn(
                        p,
                        epoch,
                        self.store.clone(),
                        self.limits.plan,
                        trigger.wake.clone(),
                        self.metrics.clone(),
                        self.token.child_token(),
                    );
                    let o = Owned {
                        epoch,
                        trigger,
                        migrator,
                    };
                    if let Some(old) = owned.insert(p, o) {
                        old.stop().await;
                    }
                }
                tracing::info!(partitions = ?owned.keys().collect::<Vec<_>>(), "assigned");
            }
            RebalanceEvent::Revoked(ps) => {
                for p in ps {
                    if let Some(o) = owned.remove(&p) {
                        o.stop().await;
                    }
                }
                tracing::info!(partitions = ?owned.keys().collect::<Vec<_>>(), "revoked");
            }
        }
        self.metrics.owned_partitions.set(owned.len() as i64);
        let mut parts: Vec<i32> = owned.keys().copied().collect();
        parts.sort_unstable();
        self.status.send_modify(|s| {
            s.joined = true;
            s.owned = parts;
        });
    }

    /// Retries a Redis call until it succeeds; `None` only on shutdown. Errors that are
    /// not transient are retried too (and logged as errors): giving up would skip
    /// commands whose offsets a later batch then commits.
    async fn retry<T, F, Fut>(&self, op: &str, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut attempt = 0u32;
        loop {
            match f().await {
                Ok(v) => return Some(v),
                Err(e) => {
                    self.metrics.redis_errors.with_label_values(&[op]).inc();
                    attempt += 1;
                    if retry::worth_logging(attempt) {
                        if e.is_retryable() {
                            tracing::warn!(op, error = %e, attempt, "redis call failed; retrying");
                        } else {
                            tracing::error!(op, error = %e, attempt, "redis call failed; retrying");
                        }
                    }
                }
            }
            if !retry::pause(&self.token, attempt).await {
                return None;
            }
        }
    }

    async fn process(&self, msgs: Vec<OwnedMessage>, owned: &mut HashMap<i32, Owned>) {
        let now = now_ms();
        let mut handled = Vec::with_capacity(msgs.len());
        let mut requests = Vec::new();
        let mut slots = Vec::new();
        for m in msgs.iter().filter(|m| owned.contains_key(&m.partition())) {
            let epoch = owned[&m.partition()].epoch;
            let key = m.key().map(<[u8]>::to_vec);
            let payload = m.payload().unwrap_or_default();
            let base = CommandResult {
                request_id: None,
                timer_id: key
                    .as_ref()
                    .map(|k| String::from_utf8_lossy(k).into_owned()),
                application: None,
                kind: None,
                outcome: Outcome::Rejected,
                reason: None,
                state: None,
                version: None,
                due_ms: None,
                partition: m.partition(),
                offset: m.offset(),
                processed_at_ms: now,
            };
            let mut h = Handled {
                partition: m.partition(),
                offset: m.offset(),
                key,
                result: base,
            };
            let cmd = match self.decode(payload).await {
                Some(Ok(cmd)) => cmd,
                Some(Err(e)) => {
                    h.result.reason = Some(e.to_string());
                    self.dead_letter(&h, payload).await;
                    handled.push(h);
                    continue;
                }
                None => return,
            };
            describe(&mut h.result, &cmd);
            let ts = m.timestamp().to_millis().unwrap_or(now);
            match validate(&cmd, h.key.as_deref(), ts, now, &self.limits) {
                Ok(op) => {
                    slots.push(handled.len());
                    requests.push(ApplyRequest {
                        partition: m.partition(),
                        epoch,
                        offset: m.offset(),
                        timer_id: cmd.timer_id,
                        request_id: cmd.request_id,
                        op,
                    });
                }
                Err(reason) => h.result.reason = Some(reason),
            }
            handled.push(h);
        }
        let Some(applied) = self.retry("apply", || self.store.apply(&requests)).await else {
            return;
        };
        let mut fenced = Vec::new();
        for ((slot, req), a) in slots.into_iter().zip(&requests).zip(applied) {
            if a.code == "fenced" {
                fenced.push(req.partition);
                continue;
            }
            self.notify(owned, req, &a);
            fill(&mut handled[slot].result, a);
        }
        for p in &fenced {
            if let Some(o) = owned.remove(p) {
                tracing::warn!(partition = p, "fenced: another instance took the partition");
                o.stop().await;
            }
        }
        handled.retain(|h| !fenced.contains(&h.partition));
        // After the store applied the commands and the triggers' gates were closed: a
        // fire of an older version carries a fired_ms at or before this.
        let applied_at = now_ms();
        handled
            .iter_mut()
            .for_each(|h| h.result.processed_at_ms = applied_at);
        self.answer(handled).await;
    }

    /// Decodes, retrying while the schema registry is unreachable; `None` on shutdown.
    async fn decode(&self, payload: &[u8]) -> Option<Result<TimerCommand, CodecError>> {
        let mut attempt = 0u32;
        loop {
            match self.codec.decode_command(payload).await {
                Err(e) if e.is_retryable() => {
                    attempt += 1;
                    if retry::worth_logging(attempt) {
                        tracing::warn!(error = %e, attempt, "schema registry unavailable; retrying");
                    }
                    if !retry::pause(&self.token, attempt).await {
                        return None;
                    }
                }
                other => return Some(other),
            }
        }
    }

    /// Tells the partition's trigger (and migrator) about an applied command.
    fn notify(&self, owned: &HashMap<i32, Owned>, req: &ApplyRequest, a: &Applied) {
        let (Some(o), "accepted") = (owned.get(&req.partition), a.code.as_str()) else {
            return;
        };
        match &req.op {
            Op::Create { schedule, .. } => {
                if let Some(d) = schedule.first_due() {
                    o.trigger.wake.due(d);
                }
            }
            Op::Update { schedule, .. } => {
                o.trigger.gate.block(&req.timer_id, req.offset);
                if let Some(d) = schedule.first_due() {
                    o.trigger.wake.due(d);
                }
            }
            Op::Pause | Op::Cancel => o.trigger.gate.block(&req.timer_id, req.offset),
            Op::Resume { .. } => {
                o.migrator.wake.notify_one();
                if let Some(d) = a.due_ms {
                    o.trigger.wake.due(d);
                }
            }
        }
    }

    async fn dead_letter(&self, h: &Handled, payload: &[u8]) {
        let reason = h.result.reason.as_deref().unwrap_or_default();
        let origin = format!("{}/{}/{}", self.topic, h.partition, h.offset);
        match self
            .sink
            .send_dead_letter(h.key.as_deref(), payload, reason, &origin)
            .await
        {
            Ok(f) => {
                tokio::spawn(async move {
                    if let Err(e) = delivered(f).await {
                        tracing::warn!(error = %e, "dead-letter copy not delivered");
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "dead-letter copy not sent"),
        }
    }

    /// Sends every result, waits for the broker's acknowledgements (re-sending failed
    /// ones), then stores the offsets.
    async fn answer(&self, handled: Vec<Handled>) {
        let mut next_offsets: HashMap<i32, i64> = HashMap::new();
        let mut waiting = Vec::with_capacity(handled.len());
        for h in &handled {
            let outcome = match h.result.outcome {
                Outcome::Accepted => "accepted",
                Outcome::Duplicate => "duplicate",
                Outcome::Rejected => "rejected",
            };
            self.metrics.commands.with_label_values(&[outcome]).inc();
            waiting.push(self.sink.send_result(h.key.as_deref(), &h.result).await);
        }
        for (h, sent) in handled.iter().zip(waiting) {
            let mut res = confirmed(sent).await;
            let mut attempt = 0u32;
            while let Err(e) = res {
                attempt += 1;
                if retry::worth_logging(attempt) {
                    tracing::warn!(error = %e, attempt, "command result not delivered; retrying");
                }
                if !retry::pause(&self.token, attempt).await {
                    return;
                }
                res = confirmed(self.sink.send_result(h.key.as_deref(), &h.result).await).await;
            }
            next_offsets.insert(h.partition, h.offset);
        }
        for (p, off) in next_offsets {
            if let Err(e) = self.consumer.store_offset(&self.topic, p, off) {
                tracing::debug!(partition = p, error = %e, "offset not stored (partition gone)");
            }
        }
    }
}

/// Waits for an enqueued record's acknowledgement.
async fn confirmed(sent: Result<DeliveryFuture, SinkError>) -> Result<(), SinkError> {
    delivered(sent?).await.map(|_| ())
}

/// Copies the command's identity into its result.
fn describe(r: &mut CommandResult, cmd: &TimerCommand) {
    r.request_id = Some(cmd.request_id.clone());
    r.timer_id = Some(cmd.timer_id.clone());
    r.application = Some(cmd.application.clone());
    r.kind = Some(cmd.kind.as_str().to_string());
}

/// Copies what the store did into the result.
fn fill(r: &mut CommandResult, a: Applied) {
    r.outcome = match a.code.as_str() {
        "accepted" => Outcome::Accepted,
        "duplicate" => Outcome::Duplicate,
        _ => Outcome::Rejected,
    };
    r.reason = (!a.reason.is_empty()).then_some(a.reason);
    r.state = a.state.map(|s| s.to_uppercase());
    r.version = a.version;
    r.due_ms = a.due_ms;
}
