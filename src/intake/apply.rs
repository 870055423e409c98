//! Applying a prepared batch to Redis: one pipeline, fencing, waking the triggers, and
//! filling each result with what the store did.

use super::prepare::Prepared;
use super::{Handled, Intake};
use crate::command::CommandResult;
use crate::ownership::Running;
use crate::retry::Retry;
use crate::store::Written;
use crate::timer::{Applied, ApplyOutcome, ApplyRequest, Op};
use rdkafka::Offset;

impl Intake {
    /// Applies the batch and records the offsets handled; returns the records to answer
    /// (those of fenced partitions are dropped: replayed or handled by the new owner) and
    /// the states of the timers changed, to write. `None` on shutdown.
    pub(super) async fn apply(&mut self, batch: Prepared) -> Option<(Vec<Handled>, Vec<Written>)> {
        let Prepared {
            mut handled,
            requests,
            slots,
            marks,
        } = batch;
        let retry = Retry::new("apply", &self.token)
            .counting(self.metrics.redis_errors.with_label_values(&["apply"]));
        let (store, now) = (&self.store, self.clock.now_ms());
        let (applied, mut fenced, written) = retry
            .forever(|| store.apply_writing(&requests, &marks, now))
            .await?;
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
            fill(&mut handled[slot].result, a);
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
        Some((handled, written))
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
