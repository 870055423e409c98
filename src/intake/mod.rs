//! The intake: consumes timer commands, applies them, answers each with a result.
//!
//! Per batch of records: decode and validate each; apply the valid ones to Redis in one
//! pipeline of Lua calls (one atomic, idempotent call per partition and up to 200
//! commands, storing the applied offset); enqueue one result record per command; the
//! answer stage ([`answer`]) waits until the broker acknowledged every result, and only
//! then stores the offsets for the next commit, while the next batch is applied. A crash
//! anywhere in between replays the batch, which the scripts make harmless.
//!
//! Partition assignment drives the triggers: on assignment the instance moves the
//! partition's epoch in Redis (fencing the previous owner) and starts its trigger and
//! migrator; on revocation it stops them. Every second it checks Redis still holds what
//! it wrote (see [`crate::ownership`]) and replays from Kafka when Redis lost data.

mod answer;

use crate::catalog::Catalog;
use crate::codec::{Codec, CodecError};
use crate::command::{CommandResult, Outcome, TimerCommand};
use crate::metrics::Metrics;
use crate::migrator::{self, MigratorHandle};
use crate::now_ms;
use crate::ownership::{verdict, IntakeContext, RebalanceEvent, Verdict};
use crate::retry;
use crate::shutdown::CancellationToken;
use crate::sink::{delivered, Sink};
use crate::store::{Applied, ApplyRequest, Store, StoreError};
use crate::trigger::{self, TriggerConfig, TriggerHandle};
use crate::validate::{validate, Limits, Op};
use futures::StreamExt;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::Offset;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A partition this instance owns: its epoch, trigger and migrator.
struct Owned {
    epoch: i64,
    /// The highest offset handled (and marked in Redis) since this instance owns it.
    handled: Option<i64>,
    /// A seek back that librdkafka refused so far; records of the partition are skipped
    /// (not applied, not answered, offsets not stored) until it succeeds.
    seek: Option<Offset>,
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
    /// Callback topic facts.
    pub catalog: Arc<Catalog>,
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
pub(crate) struct Handled {
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
        let (answers, waiting) = mpsc::channel(answer::DEPTH);
        let confirming = tokio::spawn(answer::confirm(
            waiting,
            self.sink.clone(),
            self.consumer.clone(),
            self.topic.clone(),
            self.token.clone(),
        ));
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = self.token.cancelled() => break,
                Some(ev) = self.events.recv() => self.rebalance(ev, &mut owned).await,
                _ = tick.tick() => {
                    let parts: Vec<i32> = owned.keys().copied().collect();
                    let _ = self.check(&parts, &mut owned).await;
                }
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
                    self.process(msgs, &mut owned, &answers).await;
                }
            }
        }
        drop(answers);
        let _ = confirming.await;
        for (_, o) in owned.drain() {
            o.stop().await;
        }
        self.published(&owned);
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing stored since the last commit: nothing to do.
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) | Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "final offset commit failed"),
        }
        self.consumer.unsubscribe();
        Ok(())
    }

    async fn rebalance(&self, ev: RebalanceEvent, owned: &mut HashMap<i32, Owned>) {
        match ev {
            RebalanceEvent::Assigned(ps) => {
                for p in ps {
                    if !self.own(p, owned).await {
                        return;
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
        self.published(owned);
    }

    /// Takes partition `p`: a new epoch, a trigger and a migrator (replacing old ones).
    /// `false` only on shutdown.
    async fn own(&self, p: i32, owned: &mut HashMap<i32, Owned>) -> bool {
        if let Some(old) = owned.remove(&p) {
            old.stop().await;
        }
        let Some(epoch) = self.retry("acquire", || self.store.acquire(p)).await else {
            return false;
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
            handled: None,
            seek: None,
            trigger,
            migrator,
        };
        owned.insert(p, o);
        true
    }

    /// Publishes the owned partitions (metrics, status).
    fn published(&self, owned: &HashMap<i32, Owned>) {
        self.metrics.owned_partitions.set(owned.len() as i64);
        let mut parts: Vec<i32> = owned.keys().copied().collect();
        parts.sort_unstable();
        self.status.send_modify(|s| {
            s.joined = true;
            s.owned = parts;
        });
    }

    /// Checks that Redis still holds what this instance wrote for `parts`: drops the
    /// partitions another instance took, and replays from Kafka where Redis lost data.
    /// Returns the partitions found as this instance left them.
    async fn check(&self, parts: &[i32], owned: &mut HashMap<i32, Owned>) -> Vec<i32> {
        let mut changed = false;
        let mut held = Vec::new();
        for &p in parts {
            let Some(o) = owned.get_mut(&p) else {
                continue;
            };
            if let Some(to) = o.seek {
                self.seek(p, to, owned);
                continue;
            }
            let state = match self.store.partition_state(p).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(partition = p, error = %e, "ownership check skipped");
                    continue;
                }
            };
            match verdict(o.epoch, o.handled, state) {
                Verdict::Held => held.push(p),
                Verdict::Fenced => {
                    tracing::warn!(partition = p, "fenced: another instance took the partition");
                    if let Some(o) = owned.remove(&p) {
                        o.stop().await;
                    }
                    changed = true;
                }
                Verdict::Behind(to) => {
                    tracing::warn!(partition = p, handled = ?o.handled, redis = ?state.applied,
                        "redis lost commands it had applied: replaying them");
                    self.metrics.replays.inc();
                    self.seek(p, to, owned);
                }
                Verdict::Lost(to) => {
                    tracing::warn!(partition = p, ?state,
                        "redis lost the partition (emptied or restored): new epoch, replaying commands");
                    self.metrics.replays.inc();
                    if !self.own(p, owned).await {
                        return held;
                    }
                    self.seek(p, to, owned);
                    changed = true;
                }
            }
        }
        if changed {
            self.published(owned);
        }
        held
    }

    /// Moves the consumer of `p` back to `to`; if librdkafka refuses for now, records of
    /// `p` are skipped until a later check succeeds.
    fn seek(&self, p: i32, to: Offset, owned: &mut HashMap<i32, Owned>) {
        let Some(o) = owned.get_mut(&p) else {
            return;
        };
        match self
            .consumer
            .seek(&self.topic, p, to, std::time::Duration::from_secs(5))
        {
            Ok(()) => {
                o.seek = None;
                o.handled = match to {
                    Offset::Offset(n) => Some(n - 1),
                    _ => None,
                };
            }
            Err(e) => {
                tracing::warn!(partition = p, error = %e, "seek refused; retrying in a second");
                o.seek = Some(to);
            }
        }
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

    async fn process(
        &self,
        msgs: Vec<OwnedMessage>,
        owned: &mut HashMap<i32, Owned>,
        answers: &mpsc::Sender<answer::Batch>,
    ) {
        let now = now_ms();
        let mut handled = Vec::with_capacity(msgs.len());
        let mut requests = Vec::new();
        let mut slots = Vec::new();
        let live = |m: &&OwnedMessage| owned.get(&m.partition()).is_some_and(|o| o.seek.is_none());
        for m in msgs.iter().filter(live) {
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
            let valid = match validate(&cmd, h.key.as_deref(), ts, now, &self.limits) {
                Ok(op) => match self.deliverable(&op).await {
                    Some(why) => Err(why),
                    None => Ok(op),
                },
                Err(why) => Err(why),
            };
            match valid {
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
        let mut marks: Vec<(i32, i64, i64)> = Vec::new();
        for h in &handled {
            match marks.iter_mut().find(|m| m.0 == h.partition) {
                Some(m) => m.2 = m.2.max(h.offset),
                None => marks.push((h.partition, owned[&h.partition].epoch, h.offset)),
            }
        }
        let Some((applied, mut fenced)) = self
            .retry("apply", || self.store.apply(&requests, &marks))
            .await
        else {
            return;
        };
        for ((slot, req), a) in slots.into_iter().zip(&requests).zip(applied) {
            if a.code == "fenced" {
                fenced.push(req.partition);
                continue;
            }
            self.notify(owned, req, &a);
            fill(&mut handled[slot].result, a);
        }
        fenced.sort_unstable();
        fenced.dedup();
        for (p, _, off) in &marks {
            if let (Some(o), false) = (owned.get_mut(p), fenced.contains(p)) {
                o.handled = Some(*off);
            }
        }
        if !fenced.is_empty() {
            // Another owner, or Redis lost data: the check decides; these records are
            // not answered and their offsets not stored (they are replayed or the new
            // owner handles them).
            let first = |p: i32| handled.iter().find(|h| h.partition == p).map(|h| h.offset);
            let firsts: Vec<(i32, Option<i64>)> = fenced.iter().map(|&p| (p, first(p))).collect();
            let held = self.check(&fenced, owned).await;
            for (p, off) in firsts {
                if let (true, Some(off)) = (held.contains(&p), off) {
                    self.seek(p, Offset::Offset(off), owned);
                }
            }
            handled.retain(|h| !fenced.contains(&h.partition));
        }
        // After the store applied the commands and the triggers' gates were closed: a
        // fire of an older version carries a fired_ms at or before this.
        let applied_at = now_ms();
        handled
            .iter_mut()
            .for_each(|h| h.result.processed_at_ms = applied_at);
        let batch = answer::send(&self.sink, &self.metrics, handled).await;
        // Waiting for the acknowledgements overlaps the next batch; the channel is short,
        // so a slow broker still holds the intake back.
        if answers.send(batch).await.is_err() {
            tracing::warn!("the answer stage stopped; results stay unacknowledged");
        }
    }

    /// Why the broker would refuse the fires of `op` (unknown callback topic, payload too
    /// large for it), if it would.
    async fn deliverable(&self, op: &Op) -> Option<String> {
        let def = match op {
            Op::Create { def, .. } => def,
            Op::Update { def: Some(def), .. } => def,
            _ => return None,
        };
        let cb = &def.callback;
        let topic = cb.topic.as_deref().unwrap_or(&self.sink.topics.fired);
        self.catalog.refuses(topic, cb.payload.len()).await
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
