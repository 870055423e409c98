//! Preparing a batch: decode each record, validate the command, and check that its
//! callback topic would accept the fires. Nothing is written to Redis here.

use super::{Forward, Handled, Intake};
use crate::codec::CodecError;
use crate::command::{CommandResult, TimerCommand};
use crate::pace::Rate;
use crate::partitioner::Misrouted;
use crate::retry::{Retry, Retryable, Stopped};
use crate::sink::delivered;
use crate::store::Mark;
use crate::timer::{ApplyRequest, Op};
use crate::validate::{validate, MAX_ID_BYTES};
use rdkafka::message::{Message, OwnedMessage};

/// A prepared batch: one [`Handled`] per record, and the valid commands to apply.
pub(super) struct Prepared {
    /// Every record, its result so far (rejected until applied).
    pub handled: Vec<Handled>,
    /// The valid commands, in record order.
    pub requests: Vec<ApplyRequest>,
    /// `slots[i]`: the index in `handled` of `requests[i]`'s record.
    pub slots: Vec<usize>,
    /// Per partition, the highest offset of the batch, under the epoch held.
    pub marks: Vec<Mark>,
    /// When the batch was taken from the consumer.
    pub since: std::time::Instant,
    /// The batch's records, kept until it is applied: a command the store fails on every
    /// time is copied from its record to the dead-letter topic ([`Handled::record`]).
    pub records: Vec<OwnedMessage>,
}

impl Prepared {
    /// Brings a batch prepared while the one before was applied up to date: `held(p)`
    /// answers the epoch partition `p` is held at now and the highest offset applied
    /// since (what [`Mark::floor`] means), or `None` when its records are not to be
    /// applied any more (not held, or sought back: the consumer delivers them again).
    /// A partition held at another epoch than the one prepared is dropped too. Dropped
    /// records are neither applied nor answered, and their offsets are not stored.
    pub fn revise(&mut self, held: impl Fn(i32) -> Option<(i64, i64)>) {
        let mut dropped = Vec::new();
        self.marks.retain_mut(|m| match held(m.partition) {
            Some((epoch, floor)) if epoch == m.epoch => {
                m.floor = floor;
                true
            }
            _ => {
                dropped.push(m.partition);
                false
            }
        });
        if dropped.is_empty() {
            return;
        }
        // Old index in `handled` -> new one, for the records kept.
        let mut kept = 0;
        let moved: Vec<Option<usize>> = self
            .handled
            .iter()
            .map(|h| {
                if dropped.contains(&h.partition) {
                    return None;
                }
                kept += 1;
                Some(kept - 1)
            })
            .collect();
        self.handled.retain(|h| !dropped.contains(&h.partition));
        let requests = std::mem::take(&mut self.requests);
        let slots = std::mem::take(&mut self.slots);
        for (req, slot) in requests.into_iter().zip(slots) {
            if let Some(at) = moved[slot] {
                self.requests.push(req);
                self.slots.push(at);
            }
        }
    }
}

impl Intake {
    /// Prepares the records of live partitions; `None` on shutdown.
    pub(super) async fn prepare(&self, msgs: Vec<OwnedMessage>) -> Option<Prepared> {
        let now = self.clock.now_ms();
        let mut out = Prepared {
            handled: Vec::with_capacity(msgs.len()),
            requests: Vec::new(),
            slots: Vec::new(),
            marks: Vec::new(),
            since: std::time::Instant::now(),
            records: Vec::new(),
        };
        for (i, m) in msgs.iter().enumerate() {
            let Some((epoch, floor)) = self.partitions.live(m.partition()) else {
                continue;
            };
            mark(&mut out.marks, m.partition(), (epoch, floor), m.offset());
            let mut h = unanswered(m, i, now);
            let payload = m.payload().unwrap_or_default();
            let mut cmd = match self.decode(payload).await? {
                Ok(cmd) => cmd,
                Err(e) => {
                    h.result.reason = Some(e.to_string());
                    self.dead_letter(&h, payload).await;
                    out.handled.push(h);
                    continue;
                }
            };
            match crate::validate::tenancy::owner(&self.lane, &self.lanes, &cmd) {
                Ok(app) => cmd.application = app,
                Err(why) => {
                    h.result.describe(&cmd);
                    h.result.reason = Some(why);
                    out.handled.push(h);
                    continue;
                }
            }
            h.result.describe(&cmd);
            if let Some(to) = self.misrouted(m) {
                match (self.routing.1, forwarded(m)) {
                    (Misrouted::Forward, false) => {
                        let value = payload.to_vec();
                        h.forward = Some(Forward {
                            partition: to,
                            value,
                        });
                    }
                    _ => h.result.reason = Some(self.misrouted_reason(m.partition(), to)),
                }
                out.handled.push(h);
                continue;
            }
            let ts = m.timestamp().to_millis().unwrap_or(now);
            let valid = match validate(&cmd, h.key.as_deref(), ts, now, &self.limits) {
                Ok(op) => match self.deliverable(&op).await {
                    Some(why) => Err(why),
                    None => self.admit(&cmd.application, m.partition(), ts.min(now), op),
                },
                Err(why) => Err(why),
            };
            match valid {
                Ok(mut op) => {
                    keep_trace(&mut h, &cmd, &mut op);
                    out.slots.push(out.handled.len());
                    out.requests.push(ApplyRequest {
                        partition: m.partition(),
                        epoch,
                        offset: m.offset(),
                        timer_id: cmd.timer_id,
                        request_id: cmd.request_id,
                        max_pending: self.max_pending(&cmd.application),
                        paced: self.limits.apps.current().paced(&cmd.application),
                        application: cmd.application,
                        op,
                    });
                }
                Err(reason) => h.result.reason = Some(reason),
            }
            out.handled.push(h);
        }
        out.records = msgs;
        Some(out)
    }

    /// `op` if its application's intake rate limit admits a command produced at `ts_ms`
    /// in `partition` (the limit is split evenly over the partitions; record times make
    /// a backlog count as it was produced), else the reason it is rejected.
    fn admit(&self, app: &str, partition: i32, ts_ms: i64, op: Op) -> Result<Op, String> {
        let apps = self.limits.apps.current();
        let Some(limit) = apps.of(app).commands_per_second else {
            return Ok(op);
        };
        let rate = Rate::share(limit, self.partition_count, 1.0);
        let key = format!("{partition}/{app}");
        let mut pacer = self.intake_pacer.lock().expect("pacer lock");
        if pacer.admit(&key, ts_ms * 1000, rate) {
            return Ok(op);
        }
        let label = apps.label(app);
        self.metrics
            .app_commands
            .with_label_values(&[label, "throttled"])
            .inc();
        Err(format!(
            "intake rate limit: application {} may send at most {limit} commands per second",
            crate::validate::echo(app.as_bytes())
        ))
    }

    /// This partition's share of the application's `max_pending` (rounded up).
    fn max_pending(&self, app: &str) -> Option<u64> {
        let most = self.limits.apps.current().of(app).max_pending?;
        Some(most.div_ceil(self.partition_count.max(1) as u64))
    }

    /// The partition the record's key maps to, when the record is not in it.
    fn misrouted(&self, m: &OwnedMessage) -> Option<i32> {
        let key = m.key()?;
        let to = self.routing.0.partition(key, self.partition_count);
        (self.partition_count > 0 && to != m.partition()).then_some(to)
    }

    fn misrouted_reason(&self, at: i32, to: i32) -> String {
        format!(
            "the command arrived in partition {at}, but its key maps to partition {to} under ktimer's partitioner; produce commands with {}",
            self.routing.0.advice()
        )
    }

    /// Why the broker would refuse the fires of `op` (unknown callback topic, a callback
    /// too large for it) or its timer's state record, if it would.
    async fn deliverable(&self, op: &Op) -> Option<String> {
        let cb = &op.def()?.callback;
        let topic = cb.topic.as_deref().unwrap_or(&self.sink.topics.fired);
        let headers: usize = cb.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        let bytes = cb.payload.len() + cb.key.as_ref().map_or(0, Vec::len) + headers;
        match self.catalog.refuses(topic, bytes).await {
            Some(why) => Some(why),
            None => {
                let state = &self.sink.topics.state;
                self.catalog.refuses_state(state, bytes + topic.len()).await
            }
        }
    }

    /// Decodes, retrying while the schema registry is unreachable; `None` on shutdown.
    async fn decode(&self, payload: &[u8]) -> Option<Result<TimerCommand, CodecError>> {
        let retry = Retry::new("schema registry", &self.token);
        let permanent = |e: &CodecError| !e.is_retryable();
        match retry
            .run(permanent, || self.codec.decode_command(payload))
            .await
        {
            Ok(cmd) => Some(Ok(cmd)),
            Err(Stopped::Fatal(e)) => Some(Err(e)),
            Err(Stopped::Shutdown) => None,
        }
    }

    /// Copies an undecodable command (or one the store fails on every time) to the
    /// dead-letter topic, with the reason.
    pub(super) async fn dead_letter(&self, h: &Handled, payload: &[u8]) {
        let reason = h.result.reason.as_deref().unwrap_or_default();
        let origin = format!("{}/{}/{}", self.topic, h.partition, h.offset);
        let key = h.key.as_deref();
        match self
            .sink
            .send_dead_letter(key, payload, reason, &origin)
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

/// Raises the mark of partition `p` (held at `epoch`, applied up to `floor` before) to
/// `offset`.
fn mark(marks: &mut Vec<Mark>, partition: i32, (epoch, floor): (i64, i64), offset: i64) {
    match marks.iter_mut().find(|m| m.partition == partition) {
        Some(m) => m.offset = m.offset.max(offset),
        None => marks.push(Mark {
            partition,
            epoch,
            offset,
            floor,
        }),
    }
}

/// A record's result before anything is known of its command: rejected, no reason yet
/// (`record`: its index in the batch's records).
fn unanswered(m: &OwnedMessage, record: usize, now_ms: i64) -> Handled {
    let key = m.key().map(<[u8]>::to_vec);
    let mut result = CommandResult::rejected(m.partition(), m.offset(), now_ms);
    result.timer_id = key.as_deref().map(|k| match k.len() > MAX_ID_BYTES {
        true => crate::validate::echo(k),
        false => String::from_utf8_lossy(k).into_owned(),
    });
    Handled {
        partition: m.partition(),
        offset: m.offset(),
        key,
        result,
        forward: None,
        record,
        trace: crate::trace::Context::of(crate::kafka::header_pairs(m)),
    }
}

/// The trace context of a valid command: its record's, else its callback headers' (a
/// delayed record's); kept with the timer it defines, and answered with its result.
fn keep_trace(h: &mut Handled, cmd: &TimerCommand, op: &mut Op) {
    let callback = || crate::trace::Context::of_callback(&cmd.callback.as_ref()?.headers);
    h.trace = h.trace.take().or_else(callback);
    if let (Some(t), Some(def)) = (&h.trace, op.def_mut()) {
        t.keep_in(&mut def.callback.headers);
    }
}

/// Whether ktimer forwarded this record already (it is never forwarded twice).
fn forwarded(m: &OwnedMessage) -> bool {
    crate::kafka::header_pairs(m).any(|(k, _)| k == crate::sink::headers::FORWARDED_FROM)
}

#[cfg(test)]
mod tests;
