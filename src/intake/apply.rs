//! Applying a prepared batch to Redis: one pipeline in a task of its own (overlapping
//! the intake's other work), fencing, waking the triggers, and filling each result with
//! what the store did.

use super::prepare::Prepared;
use super::{answer, Handled, Intake};
use crate::command::CommandResult;
use crate::ownership::Running;
use crate::retry::Retry;
use crate::store::{ApplyResult, Written};
use crate::timer::{Applied, ApplyOutcome, ApplyRequest, Op};
use crate::trigger::landing::{Landing, SETTLE_WAIT};
use rdkafka::Message;
use rdkafka::Offset;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A batch Redis is applying, in a task of its own.
pub(super) struct InFlight {
    task: JoinHandle<Done>,
    /// Open while the batch is in Redis ([`super::watch`]).
    _wait: super::watch::Wait,
}

/// A batch and what Redis answered for it (`None` on shutdown).
pub(super) type Done = (Prepared, Option<ApplyResult>);

/// What a settled batch leaves to do: its records to answer, the states to write, and
/// the partitions fenced (the batch after it must not apply theirs).
pub(super) struct Settled {
    /// The records to answer (those of fenced partitions dropped).
    pub handled: Vec<Handled>,
    /// The states of the timers the batch changed, for the answer stage to write.
    pub written: Vec<Written>,
    /// The partitions Redis refused the batch for.
    pub fenced: Vec<i32>,
    /// When the batch was taken from the consumer.
    pub since: Instant,
}

/// The batches between the consumer and the answer stage: at most one in Redis, and
/// at most one prepared, waiting for it. While Redis applies one, the intake reads,
/// decodes and validates the next and enqueues the results of the one before (Redis
/// would otherwise idle meanwhile); the consumer is not read further ahead, so a seek
/// or a rebalance never finds records of its partitions held back here unseen.
#[derive(Default)]
pub(super) struct Flight {
    inflight: Option<InFlight>,
    next: Option<Prepared>,
}

impl Flight {
    /// Whether the intake may read and prepare another batch now.
    pub fn has_room(&self) -> bool {
        self.next.is_none()
    }

    /// The batch in Redis, once it landed; never when there is none (for `select!`).
    pub async fn landed(&mut self) -> Done {
        match &mut self.inflight {
            Some(f) => match (&mut f.task).await {
                Ok(done) => done,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            },
            None => std::future::pending().await,
        }
    }
}

impl Intake {
    /// A prepared batch goes to Redis at once when none is there, else waits in line.
    pub(super) fn enqueue(&self, flight: &mut Flight, batch: Prepared) {
        if batch.handled.is_empty() {
            return;
        }
        match flight.inflight {
            None => flight.inflight = Some(self.launch(batch)),
            Some(_) => flight.next = Some(batch),
        }
    }

    /// The batch in Redis landed: settle it, send the next one (revised: records of
    /// partitions fenced or no longer live are dropped, floors raised), then answer the
    /// landed one. A batch that did not land (shutdown) takes the next with it: nothing
    /// after an unapplied command may be applied or answered.
    pub(super) async fn advance(
        &mut self,
        flight: &mut Flight,
        done: Done,
        answers: &mpsc::Sender<answer::Batch>,
    ) {
        flight.inflight = None;
        let settled = self.settle(done).await;
        let next = flight.next.take();
        if let (Some(s), Some(mut next)) = (&settled, next) {
            let partitions = &self.partitions;
            next.revise(|p| match s.fenced.contains(&p) {
                true => None,
                false => partitions.live(p),
            });
            self.enqueue(flight, next);
        }
        if let Some(s) = settled {
            let since = s.since;
            self.answer(s, answers).await;
            self.metrics
                .intake_batch
                .observe(since.elapsed().as_secs_f64());
        }
    }

    /// Lands every batch in flight: before anything changes the partitions, and on
    /// shutdown.
    pub(super) async fn land(
        &mut self,
        flight: &mut Flight,
        answers: &mpsc::Sender<answer::Batch>,
    ) {
        while flight.inflight.is_some() {
            let done = flight.landed().await;
            self.advance(flight, done, answers).await;
        }
    }

    /// Starts applying the batch (retrying while Redis fails, until shutdown or until the
    /// partitions are given up: [`crate::ownership::cut`]).
    fn launch(&self, batch: Prepared) -> InFlight {
        let store = self.store.clone();
        let retry = Retry::new("apply", &self.cut.apply_token())
            .counting(self.metrics.redis_errors.with_label_values(&["apply"]));
        let now = self.clock.now_ms();
        let landings = self.landings(&batch);
        let task = tokio::spawn(async move {
            settle(&landings).await;
            let applied =
                super::poison::apply(&store, &retry, &batch.requests, &batch.marks, now).await;
            (batch, applied)
        });
        InFlight {
            task,
            _wait: self.waits.begin("Redis to apply a batch of commands"),
        }
    }

    /// The acknowledgement counts of the triggers of the partitions `batch` changes.
    fn landings(&self, batch: &Prepared) -> Vec<Arc<Landing>> {
        let mut ps: Vec<i32> = batch.requests.iter().map(|r| r.partition).collect();
        ps.sort_unstable();
        ps.dedup();
        ps.into_iter()
            .filter_map(|p| self.partitions.get(p)?.tasks.as_ref())
            .map(|r| r.trigger.landing.clone())
            .collect()
    }

    /// Takes what Redis did with a batch: wakes the triggers, records the offsets
    /// handled, rechecks fenced partitions (their records are dropped: replayed or
    /// handled by the new owner). `None` on shutdown, or when the partitions were given up
    /// (nothing of the batch is answered or committed: the next owner applies it).
    async fn settle(&mut self, (batch, applied): Done) -> Option<Settled> {
        let Prepared {
            mut handled,
            requests,
            slots,
            marks,
            since,
            records,
        } = batch;
        let (applied, mut fenced, written) = applied?;
        for ((slot, req), a) in slots.into_iter().zip(&requests).zip(applied) {
            if a.outcome == ApplyOutcome::Fenced {
                fenced.push(req.partition);
                continue;
            }
            let running = self
                .partitions
                .get(req.partition)
                .and_then(|o| o.tasks.as_ref());
            if let (Some(r), ApplyOutcome::Accepted) = (running, a.outcome) {
                wake(r, req, &a);
            }
            let poisoned = a.outcome == ApplyOutcome::Poisoned;
            if poisoned {
                let apps = self.limits.apps.current();
                let app = apps.label(&req.application);
                self.metrics.poisoned.with_label_values(&[app]).inc();
            }
            let h = &mut handled[slot];
            fill(&mut h.result, a);
            if poisoned {
                let payload = records[h.record].payload().unwrap_or_default();
                self.dead_letter(h, payload).await;
            }
        }
        fenced.sort_unstable();
        fenced.dedup();
        for m in &marks {
            if !fenced.contains(&m.partition) {
                self.partitions.handled(m.partition, m.offset);
            }
        }
        if !fenced.is_empty() {
            self.recheck(&fenced, &handled).await;
            handled.retain(|h| !fenced.contains(&h.partition));
        }
        // After the store applied the commands and the triggers' gates were closed: a
        // fire of an older version carries a fired_ms at or before this.
        let applied_at = self.clock.now_ms();
        handled
            .iter_mut()
            .for_each(|h| h.result.processed_at_ms = applied_at);
        Some(Settled {
            handled,
            written,
            fenced,
            since,
        })
    }

    /// Another owner, or Redis lost data: the ownership check decides. Partitions found
    /// as this instance left them are read again from the batch's first record.
    async fn recheck(&mut self, fenced: &[i32], handled: &[Handled]) {
        let first = |p: i32| handled.iter().find(|h| h.partition == p).map(|h| h.offset);
        let firsts: Vec<(i32, Option<i64>)> = fenced.iter().map(|&p| (p, first(p))).collect();
        let held = self.partitions.check(fenced).await;
        for (p, off) in firsts {
            if let (true, Some(off)) = (held.contains(&p), off) {
                self.partitions.seek(p, Offset::Offset(off));
            }
        }
    }
}

/// Before a batch applies: the fires its partitions' triggers know as delivered leave
/// flight ([`Landing`]), so a command answering a fire finds it landed, not under way.
async fn settle(landings: &[Arc<Landing>]) {
    futures::future::join_all(landings.iter().map(|l| l.settle(SETTLE_WAIT))).await;
}

/// Tells the partition's trigger (and migrator) about an accepted command.
fn wake(o: &Running, req: &ApplyRequest, a: &Applied) {
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
        Op::FireNow { at_ms } => o.trigger.wake.due(*at_ms),
        Op::Resume { .. } => {
            o.migrator.wake.notify_one();
            if let Some(d) = a.due_ms {
                o.trigger.wake.due(d);
            }
        }
    }
}

/// Copies what the store did into the result.
fn fill(r: &mut CommandResult, a: Applied) {
    if let Some(outcome) = a.outcome.result() {
        r.outcome = outcome;
    }
    r.reason = (!a.reason.is_empty()).then_some(a.reason);
    r.state = a.state.map(|s| s.as_str().to_string());
    r.version = a.version;
    r.due_ms = a.due_ms;
}
