//! Delivering claimed fires: the gate check before each send, and what happens after a
//! failed delivery (retry with backoff, or the dead-letter topic).

use super::ready::Pending;
use super::task::Trigger;
use crate::pace::Rate;
use crate::retry::{worth_logging, Backoff};
use crate::sink::{delivered, Failure, SinkError, Stamp};
use crate::store::{self, Ack, StoreError};
use futures::FutureExt;

/// Bursts a delivery rate limit lets through at once: this many seconds' worth.
const PACE_BURST_S: f64 = 0.1;

/// What follows a failed delivery.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// Try again after this delay.
    Retry(std::time::Duration),
    /// Send the fire to the dead-letter topic now.
    DeadLetter,
}

/// After attempt `attempt` failed with `failure`: a fire the broker refused goes to the
/// dead-letter topic at once; one that met another error gets `max_attempts`; one that met
/// an outage (broker unreachable, no leader, timeouts) waits for the broker for ever, as
/// an outage says nothing about the record. A fire already on its way to the dead-letter
/// topic is retried until that topic takes it (never dropped).
pub(super) fn next(
    attempt: i32,
    dead: bool,
    failure: Failure,
    max_attempts: i32,
    b: Backoff,
) -> Next {
    let give_up = match failure {
        Failure::Refused => true,
        Failure::Transient => attempt >= max_attempts,
        Failure::Outage => false,
    };
    if !dead && give_up {
        return Next::DeadLetter;
    }
    Next::Retry(b.delay(attempt.max(1) as u32))
}

/// The acknowledgement of a fire produced (see [`Ack`]): out of flight alone when its
/// claim answered its record (it recorded the fire as done, released in attempt 1), else
/// what `ack.lua` decides from (also for a later attempt: the timer's last fire then
/// says which); to the dead-letter topic because of `dead`.
fn produced_ack(p: Pending, dead: Option<&str>) -> Ack {
    match (dead, p.fire.taken) {
        (None, Some(taken)) if p.attempt == 1 => {
            Ack::Landed(store::landed(p.fire, taken, p.fired_ms, p.attempt))
        }
        _ => Ack::Produced {
            member: p.fire.member,
            fired_ms: p.fired_ms,
            attempt: p.attempt,
            dead: dead.map(String::from),
        },
    }
}

impl Trigger {
    /// Enqueues every ready fire whose due time has come (by the clock). The lease is
    /// checked before each fire (a clock read; a Redis call only once it ran out), so a
    /// freeze in the middle of a batch cannot let the rest of it out unfenced.
    pub(super) async fn send_due(&mut self) -> Result<(), StoreError> {
        while self.ready.has_due(self.clock.now_ms()) {
            self.confirm_epoch().await?;
            let now = self.clock.now_ms();
            let Some(pending) = self.ready.pop_due(now) else {
                break;
            };
            let fire = &pending.fire;
            if self.gate.blocks(&fire.timer_id, fire.version) {
                self.m.stale.inc();
                self.push_ack(Ack::Dropped(pending.fire.member));
                continue;
            }
            let (pending, at) = self.pace(pending, now);
            if at > now {
                self.requeue(at, pending);
                continue;
            }
            let mut pending = pending;
            pending.fired_ms = now;
            let fire = &pending.fire;
            let stamp = Stamp {
                attempt: pending.attempt,
                fired_ms: now,
                epoch: self.epoch,
            };
            let sent = match &pending.dead {
                None => self.sink.send_fire(fire, stamp).await,
                Some(why) => self.sink.send_fire_dead_letter(fire, stamp, why).await,
            };
            match sent {
                Ok(f) => {
                    if pending.dead.is_none() {
                        let lateness = (now - fire.due_ms).max(0);
                        self.m.lateness.observe(lateness as f64 / 1000.0);
                    }
                    let done = delivered(f).map(move |r| (pending, r.map(|_| ())));
                    self.fence.sent(self.sending.is_empty());
                    self.sending.push(Box::pin(done));
                }
                Err(e) => self.failed(pending, e),
            }
        }
        Ok(())
    }

    /// The send time its application's delivery rate limit gives a fire due to go at
    /// `now` (booked once per fire; dead letters are not limited).
    fn pace(&mut self, mut pending: Pending, now: i64) -> (Pending, i64) {
        if pending.paced || pending.dead.is_some() {
            return (pending, now);
        }
        pending.paced = true;
        let apps = self.cfg.apps.current();
        let app = pending.fire.def.application.as_str();
        let Some(limit) = apps.of(app).fires_per_second else {
            return (pending, now);
        };
        let rate = Rate::share(limit, self.cfg.partitions, PACE_BURST_S);
        let at_ms = (self.pacer.slot(app, now * 1000, rate) + 999) / 1000;
        if at_ms > now {
            let label = apps.label(app);
            self.app_fires
                .with_label_values(&[label, "throttled"])
                .inc();
        }
        (pending, at_ms)
    }

    /// A delivery failed: retry later with backoff, or route the fire to the dead-letter
    /// topic now (see [`next`]).
    pub(super) fn failed(&mut self, mut pending: Pending, e: SinkError) {
        self.sink.heal(&e);
        self.m.kafka_errors.inc();
        let p = self.partition;
        let now = self.clock.now_ms();
        let failure = e.failure();
        let (max_attempts, b) = self.delivery_policy(&pending.fire.def.application);
        match next(
            pending.attempt,
            pending.dead.is_some(),
            failure,
            max_attempts,
            b,
        ) {
            Next::DeadLetter => {
                self.undeliverable += 1;
                if worth_logging(self.undeliverable) {
                    tracing::warn!(partition = p, error = %e, attempt = pending.attempt,
                        undeliverable = self.undeliverable,
                        "fire undeliverable: sending it to the dead-letter topic");
                }
                let why = format!("not delivered after {} attempt(s): {e}", pending.attempt);
                pending.dead = Some(why);
                self.requeue(now, pending);
            }
            Next::Retry(delay) => {
                self.m.retried.inc();
                if worth_logging(pending.attempt as u32) {
                    tracing::warn!(partition = p, error = %e, attempt = pending.attempt,
                        ?failure, dead_letter = pending.dead.is_some(),
                        "fire delivery failed; will retry");
                }
                pending.attempt += 1;
                self.requeue(now + delay.as_millis() as i64, pending);
            }
        }
    }

    /// The delivery attempts and backoff of `app`: its settings, else the command line's.
    fn delivery_policy(&self, app: &str) -> (i32, Backoff) {
        let apps = self.cfg.apps.current();
        let s = apps.of(app);
        let b = self.cfg.delivery_backoff;
        let ms = std::time::Duration::from_millis;
        let backoff = Backoff {
            base: s.retry_base_ms.map_or(b.base, ms),
            max: s.retry_max_ms.map_or(b.max, ms),
        };
        (
            s.delivery_attempts.unwrap_or(self.cfg.max_attempts),
            backoff,
        )
    }

    /// Queues `pending` to be sent at `at_ms`.
    pub(super) fn requeue(&mut self, at_ms: i64, pending: Pending) {
        self.ready.push(at_ms, pending);
        self.in_flight_gauge();
    }

    /// The broker answered a delivery: acknowledge it in Redis (batched), or retry.
    pub(super) fn delivered(&mut self, pending: Pending, r: Result<(), SinkError>) {
        self.fence.answered();
        match (r, pending.dead.clone()) {
            (Ok(()), None) => {
                self.m.delivered.inc();
                let apps = self.cfg.apps.current();
                if apps.names_any() {
                    let label = apps.label(&pending.fire.def.application);
                    self.app_fires
                        .with_label_values(&[label, "delivered"])
                        .inc();
                }
                self.push_ack(produced_ack(pending, None));
            }
            (Ok(()), Some(why)) => {
                self.m.dead_lettered.inc();
                let why: String = why.chars().filter(|c| *c != '\n').take(500).collect();
                self.push_ack(produced_ack(pending, Some(&why)));
            }
            (Err(e), _) => self.failed(pending, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn failures_retry_with_backoff_then_dead_letter() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(30),
        };
        let ms = |n: Next| match n {
            Next::Retry(d) => d.as_millis(),
            Next::DeadLetter => 0,
        };
        let (t, o, r) = (Failure::Transient, Failure::Outage, Failure::Refused);
        assert_eq!(ms(next(1, false, t, 10, b)), 100);
        assert_eq!(ms(next(4, false, t, 10, b)), 800);
        assert_eq!(next(10, false, t, 10, b), Next::DeadLetter);
        assert_eq!(next(1, false, r, 10, b), Next::DeadLetter, "never accepted");
        // An outage says nothing about the record: it waits, capped delay.
        assert_eq!(ms(next(1000, false, o, 10, b)), 30_000);
        // On its way to the dead-letter topic: retried whatever the error, capped delay.
        assert_eq!(ms(next(30, true, r, 10, b)), 30_000);
    }

    /// `Sink::heal` replaces a producer the broker fenced; dropping the old one purges
    /// what it still held. That says nothing about those records: they wait like an
    /// outage's, their delivery attempts untouched (they were dead-lettered).
    #[test]
    fn a_fire_purged_with_a_replaced_producer_waits_like_an_outage() {
        use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
        for code in [C::PurgeQueue, C::PurgeInflight] {
            let e = SinkError::Kafka(KafkaError::MessageProduction(code));
            assert_eq!(e.failure(), Failure::Outage, "{code:?}");
        }
    }

    #[test]
    fn a_fire_released_in_its_first_attempt_lands_without_ack_lua() {
        let fire = crate::timer::Fire {
            member: "1:5:t".into(),
            timer_id: "t".into(),
            version: 1,
            due_ms: 5,
            def: Default::default(),
            taken: Some(crate::timer::Taken { written: false }),
        };
        let mut p = Pending {
            fire,
            attempt: 1,
            dead: None,
            paced: false,
            fired_ms: 9,
        };
        assert!(matches!(produced_ack(p.clone(), None), Ack::Landed(_)));
        p.attempt = 2;
        let retried = produced_ack(p.clone(), None);
        assert_eq!(
            retried.line(),
            "1:5:t\t9\t2",
            "its attempt recorded by ack.lua"
        );
        let dead = produced_ack(p.clone(), Some("too large"));
        assert_eq!(dead.line(), "!1:5:t\t9\t2\ntoo large");
        p.fire.taken = None;
        assert_eq!(produced_ack(p, None).line(), "1:5:t\t9\t2");
    }
}
