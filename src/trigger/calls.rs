//! The trigger's Redis calls beside its sending: a claim or an acknowledgement runs while
//! the task goes on sending what is due, so a slow Redis round trip (Redis busy with a
//! checkpoint page, or a saturated machine) never holds up a due fire.
//!
//! Invariants: at most one call runs at a time (so claims and acknowledgements keep
//! their order, as when each was awaited in turn); a call's effects on the task (fires
//! pushed, members no longer held, the lease, the next claim time) apply only when it
//! finished; a call that failed leaves the task as a failed awaited call did (members to
//! acknowledge kept, the in-flight set read again after a claim whose outcome is unknown).

use super::plan::next_claim;
use super::task::Trigger;
use super::{paced, poison};
use crate::store::{Ack, ClaimWindow, StoreError};
use crate::timer::Claimed;
use std::future::Future;
use std::pin::Pin;
use tokio::time::Instant;

/// The most record bytes one claim answers (the budget's room permitting): a claim of
/// large fires (8 kB each: 256 of them) stays a few ms of Redis, so other timers' fires
/// due meanwhile do not wait behind it (a paced backlog takes half of it, `claim.lua`).
const CLAIM_MAX_BYTES: usize = 2 << 20;

/// A Redis call of the trigger in progress.
pub(super) type Call = Pin<Box<dyn Future<Output = Done> + Send>>;

/// A finished call, with what the task needs to take its result.
pub(super) enum Done {
    /// Acknowledged `members` (issued at `issued`, for the lease).
    Acked {
        members: Vec<Ack>,
        issued: Instant,
        result: Result<i64, StoreError>,
        /// Members forgotten: their acknowledgement failed every time ([`poison`]).
        poisoned: Vec<String>,
    },
    /// Claimed what was due within the claim window from `now_ms`.
    Claimed {
        issued: Instant,
        now_ms: i64,
        result: Result<Claimed, StoreError>,
    },
}

/// Resolves when `call` finishes; never while there is none.
pub(super) async fn finished(call: &mut Option<Call>) -> Done {
    match call {
        Some(c) => c.await,
        None => std::future::pending().await,
    }
}

impl Trigger {
    /// Starts the next call unless one runs: a claim when its time has come, else an
    /// acknowledgement of what was delivered. A claim that follows a claim yields to
    /// waiting acknowledgements, so a long backlog of full claims still acknowledges.
    pub(super) fn start_call(&mut self) {
        if self.call.is_some() {
            return;
        }
        let now = self.clock.now_ms();
        // The intake waits for the delivered fires to land ([`super::Landing`]): they go
        // now, before a claim. (With none waiting and no call running, every one landed:
        // the request is answered, and cleared.)
        let asked = self.landing.take_ask() && !self.acks.is_empty();
        let acks = asked || self.ack_at() <= now;
        if !self.parked.is_empty() {
            let apps = self.cfg.apps.current();
            if paced::refill_due(&apps, self.cfg.partitions, &self.held, &self.parked) {
                self.wake.plan(now);
            }
        }
        // A producer that answers no fire gets no more (`fence`): the fires stay due in
        // Redis, for this trigger once it answers again or for the next owner. Nor does
        // a trigger before its take-over is done, or while the budget has no room.
        let stuck = self.fence.stuck(self.sending.len());
        let may = !stuck && self.recovered && self.held.budget().has_room();
        let claim_due =
            self.wake.claim_at() <= now && !((self.claimed_last || asked) && acks) && may;
        if claim_due && self.wake.take_if_due(now) {
            self.claimed_last = true;
            self.claim_stamp = self.gate.stamp();
            self.call = Some(self.claim_call(now));
        } else if acks {
            self.claimed_last = false;
            self.call = Some(self.ack_call());
        }
    }

    /// The acknowledgement of every member delivered so far (taken from `acks`).
    pub(super) fn ack_call(&mut self) -> Call {
        let members = std::mem::take(&mut self.acks);
        let (store, p, epoch) = (self.store.clone(), self.partition, self.epoch);
        let issued = self.lease.issue();
        Box::pin(async move {
            let acked = poison::ack(&store, p, epoch, &members).await;
            Done::Acked {
                members,
                issued,
                result: acked.result,
                poisoned: acked.poisoned,
            }
        })
    }

    /// The claim of what is due within the claim margin ([`super::wake::Wake::ahead`]).
    fn claim_call(&self, now: i64) -> Call {
        let c = &self.cfg;
        let (fires, bytes) = self.held.budget().room();
        let window = ClaimWindow {
            upto_ms: now + self.wake.ahead(),
            limit: c.claim_batch.min(fires),
            max_bytes: bytes.min(CLAIM_MAX_BYTES),
            quotas: paced::quotas(&c.apps.current(), c.partitions, &self.held),
            missed_before_ms: now - c.misfire_threshold_ms,
            now_ms: now,
            checkpoint: c.checkpoint.floor(now),
        };
        let (store, p, epoch) = (self.store.clone(), self.partition, self.epoch);
        let issued = self.lease.issue();
        Box::pin(async move {
            let result = store.claim(p, epoch, window).await;
            Done::Claimed {
                issued,
                now_ms: now,
                result,
            }
        })
    }

    /// Takes the result of a finished call (the slot is empty again).
    pub(super) fn finish_call(&mut self, done: Done) -> Result<(), StoreError> {
        let issued = match &done {
            Done::Acked { issued, .. } | Done::Claimed { issued, .. } => *issued,
        };
        self.wake.took(issued.elapsed().as_millis() as i64);
        match done {
            Done::Acked {
                mut members,
                issued,
                result,
                poisoned,
            } => {
                self.m.poisoned.inc_by(poisoned.len() as u64);
                if let Err(e) = result {
                    // Acknowledged again with the next call (an acknowledgement is idempotent).
                    members.append(&mut self.acks);
                    self.acks = members;
                    return Err(e);
                }
                self.lease.confirm(issued);
                self.landing.landed(members.len());
                self.held.release(members.iter().map(|a| a.member()));
                self.in_flight_gauge();
            }
            Done::Claimed {
                issued,
                now_ms,
                result,
            } => {
                let claimed = match result {
                    Ok(c) => c,
                    Err(e) => {
                        self.wake.claim_again();
                        // A claim whose reply was lost (a timeout) may still have moved
                        // fires in flight: read the in-flight set again before the next.
                        self.recovered = false;
                        self.recover_cursor = 0;
                        return Err(e);
                    }
                };
                self.lease.confirm(issued);
                if claimed.vanished > 0 {
                    self.m.vanished.inc_by(claimed.vanished);
                    tracing::error!(partition = self.partition, fires = claimed.vanished,
                        "due fires lost: their timer records are gone from Redis (evicted, or deleted outside ktimer)");
                }
                let next = next_claim(now_ms, self.wake.ahead(), claimed.next_due_ms, claimed.full);
                self.parked = claimed.parked;
                let parked: u64 = self.parked.iter().map(|(_, n)| n).sum();
                self.m.parked.set(parked as i64);
                self.push_all(claimed.fires);
                self.wake.plan(next);
            }
        }
        Ok(())
    }
}
