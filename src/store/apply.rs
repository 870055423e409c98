//! Applying commands (`apply.lua`) and marking handled offsets (`mark.lua`).

use super::fresh::FreshState;
use super::state::States;
use super::{bad_reply, Store, StoreError};
use crate::timer::{Applied, ApplyOutcome, ApplyRequest, TimerFields, TimerState};
use args::command_groups;
use chunks::{chunks, Chunk};
use create::{accepted, create_groups, parse_created, Created};
use redis::{FromRedisValue, Pipeline};
use std::collections::{BTreeMap, HashMap};

mod args;
mod chunks;
mod create;

/// Fields apply.lua answers per command: code, version, state, due, reason.
const ANSWER_FIELDS: usize = 5;

/// The highest offset handled in a partition of a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mark {
    /// Commands-topic partition.
    pub partition: i32,
    /// The epoch held.
    pub epoch: i64,
    /// The highest offset of the batch.
    pub offset: i64,
    /// The applied offset Redis must already hold: the highest this owner applied before
    /// the batch (-1 when none). Redis behind it lost writes: the batch is refused
    /// ("fenced") and the ownership check replays what is missing.
    pub floor: i64,
}

/// States of timers a chunk of commands changed, for the caller to write to the state
/// topic and then confirm ([`Store::written`]); until then the partition's checkpoints
/// leave these timers alone and reflect no command from the first one written on.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// Commands-topic partition.
    pub partition: i32,
    /// The epoch the commands were applied under.
    pub epoch: i64,
    /// The offset of the chunk's first command: what names its entry in the partition's
    /// `writing` hash ([`Store::written`] confirms it).
    pub first: i64,
    /// Per timer its state after the chunk, or `None` for a tombstone.
    pub timers: Vec<(String, Option<TimerFields>)>,
    /// The new one-shot timers whose states ktimer built (the common case; each timer is
    /// in one of the two lists).
    pub fresh: Vec<(String, FreshState)>,
}

/// What an apply did: per command, the partitions whose epoch moved, and the states to
/// write (only when the caller writes them).
pub type ApplyResult = (Vec<Applied>, Vec<i32>, Vec<Written>);

impl Store {
    /// Applies commands in one pipeline per partition (their order is kept), then records per
    /// partition the highest offset handled (applied or rejected before Redis) under its
    /// epoch. Returns what each command did and the partitions whose epoch moved (nothing
    /// was recorded for them). `now_ms` dates the cron windows' refill times. The states
    /// of the timers changed are left to the checkpoints.
    pub async fn apply(
        &self,
        reqs: &[ApplyRequest],
        marks: &[Mark],
        now_ms: i64,
    ) -> Result<(Vec<Applied>, Vec<i32>), StoreError> {
        let (applied, moved, _) = self.apply_calls(reqs, marks, now_ms, false, true).await?;
        Ok((applied, moved))
    }

    /// [`Store::apply`], answering the states of the timers changed as well: the caller
    /// writes them to the state topic and confirms them with [`Store::written`] (the
    /// intake, sparing the checkpoint a second read of every timer).
    pub async fn apply_writing(
        &self,
        reqs: &[ApplyRequest],
        marks: &[Mark],
        now_ms: i64,
    ) -> Result<ApplyResult, StoreError> {
        self.apply_calls(reqs, marks, now_ms, true, true).await
    }

    /// With `fast`, runs of new one-shot timers go to create.lua (chunks.rs); the
    /// timers it answers back (Redis holds them) are applied after the rest, without it.
    async fn apply_calls(
        &self,
        reqs: &[ApplyRequest],
        marks: &[Mark],
        now_ms: i64,
        writing: bool,
        fast: bool,
    ) -> Result<ApplyResult, StoreError> {
        if reqs.is_empty() && marks.is_empty() {
            return Ok((vec![], vec![], vec![]));
        }
        let chunks = chunks(reqs, fast);
        let floor = |p: i32| {
            marks
                .iter()
                .find(|m| m.partition == p)
                .map_or(-1, |m| m.floor)
        };
        // One pipeline per partition (a cluster routes a pipeline to one slot); they run
        // concurrently, each keeping its partition's order.
        let mut pipes: BTreeMap<i32, (Pipeline, Vec<Call>)> = BTreeMap::new();
        // The states of new one-shot timers, by (partition, offset).
        let mut fresh = HashMap::new();
        let header = |c: &Chunk| {
            let first = &reqs[c.reqs[0]];
            self.chunk_call(first, c, floor(first.partition), now_ms, writing)
        };
        let defs = self.create_defs(reqs, &chunks, header).await?;
        let history = self.history.entries > 0;
        for (c, chunk) in chunks.iter().enumerate() {
            let first = &reqs[chunk.reqs[0]];
            let mut inv = header(chunk);
            let states = match chunk.create {
                true => create_groups(reqs, chunk, &defs, now_ms, history, &mut inv)?,
                false => command_groups(reqs, chunk, now_ms, history, &mut inv)?,
            };
            for (i, f) in states.into_iter().filter(|_| writing) {
                fresh.insert((reqs[i].partition, reqs[i].offset), f);
            }
            let (p, calls) = pipes.entry(first.partition).or_default();
            inv.add_to(p);
            calls.push(Call::Chunk(c));
        }
        for (i, m) in marks.iter().enumerate() {
            let k = self.keys(m.partition);
            let mut inv = self.scripts.mark.call();
            inv.key(k.epoch())
                .key(k.offset())
                .arg(m.epoch)
                .arg(m.offset)
                .arg(m.floor);
            let (p, calls) = pipes.entry(m.partition).or_default();
            inv.add_to(p);
            calls.push(Call::Mark(i));
        }
        let replies = futures::future::try_join_all(
            pipes
                .values()
                .map(|(p, _)| self.run::<Vec<redis::Value>>("apply", p)),
        )
        .await?;
        let mut out = Outcome {
            applied: vec![None; reqs.len()],
            moved: Vec::new(),
            written: Vec::new(),
            later: Vec::new(),
            stale: Vec::new(),
        };
        let answered = pipes.values().flat_map(|(_, calls)| calls);
        for (call, v) in answered.zip(replies.into_iter().flatten()) {
            match *call {
                Call::Chunk(c) => out.chunk(reqs, &chunks[c], v, &mut fresh)?,
                Call::Mark(i) => {
                    if i64::from_redis_value(v).map_err(bad_reply)? < 0 {
                        out.moved.push(marks[i].partition);
                    }
                }
            }
        }
        for &p in &out.stale {
            self.prefixes.forget(&self.keys(p).base());
        }
        if !out.later.is_empty() {
            // Timers create.lua answered back: Redis holds them; apply.lua decides. No
            // other command of the batch names them, so they may follow it.
            let later: Vec<ApplyRequest> = out.later.iter().map(|&i| reqs[i].clone()).collect();
            let (applied, moved, written) =
                Box::pin(self.apply_calls(&later, &[], now_ms, writing, false)).await?;
            for (&i, a) in out.later.iter().zip(applied) {
                out.applied[i] = Some(a);
            }
            out.moved.extend(moved);
            out.written.extend(written);
        }
        let applied = out.applied.into_iter();
        let applied = applied.map(|a| a.expect("every command answered"));
        Ok((applied.collect(), out.moved, out.written))
    }

    /// The script call of `chunk` (its first command `first`), its keys and header
    /// arguments: create.lua's or apply.lua's.
    fn chunk_call(
        &self,
        first: &ApplyRequest,
        chunk: &Chunk,
        floor: i64,
        now_ms: i64,
        writing: bool,
    ) -> super::scripts::Call<'_> {
        let k = self.keys(first.partition);
        let writing = if writing { "1" } else { "0" };
        if chunk.create {
            let mut inv = self.scripts.create.call();
            inv.key(k.epoch())
                .key(k.offset())
                .key(k.index())
                .key(k.dirty())
                .key(k.deferred())
                .key(k.apps())
                .key(k.writing())
                .arg(first.epoch)
                .arg(self.retention_ms)
                .arg(k.slice_prefix())
                .arg(floor)
                .arg(now_ms)
                .arg(super::state::DEFER_MS)
                .arg(k.base())
                .arg(writing);
            return inv;
        }
        let mut inv = self.scripts.apply.call();
        inv.key(k.epoch())
            .key(k.offset())
            .key(k.index())
            .key(k.inflight())
            .key(k.cron())
            .key(k.dirty())
            .key(k.deferred())
            .key(k.apps())
            .key(k.writing())
            .key(k.parked())
            .key(k.acks())
            .key(k.revived())
            .arg(first.epoch)
            .arg(self.retention_ms)
            .arg(k.slice_prefix())
            .arg(floor)
            .arg(now_ms)
            .arg(super::state::DEFER_MS)
            .arg(k.base())
            .arg(self.history.entries)
            .arg(self.history.ttl_ms)
            .arg(writing);
        inv
    }
}

/// What an apply pipeline answered, gathered per command.
struct Outcome {
    applied: Vec<Option<Applied>>,
    moved: Vec<i32>,
    written: Vec<Written>,
    /// Commands create.lua answered back, for apply.lua.
    later: Vec<usize>,
    /// Partitions whose prefix numbers create.lua found stale.
    stale: Vec<i32>,
}

impl Outcome {
    /// Takes the answer `v` for `chunk` of `reqs`; `fresh`: the states of its new
    /// one-shot timers, by (partition, offset).
    fn chunk(
        &mut self,
        reqs: &[ApplyRequest],
        chunk: &Chunk,
        v: redis::Value,
        fresh: &mut HashMap<(i32, i64), FreshState>,
    ) -> Result<(), StoreError> {
        let first = &reqs[chunk.reqs[0]];
        let p = first.partition;
        let mut sent_states = Vec::new();
        let mut timers = Vec::new();
        let mut entry = first.offset;
        if chunk.create {
            let (owed, skipped) = match parse_created(v, chunk.reqs.len())? {
                Created::Done { owed, skipped, .. } => (owed, skipped),
                Created::Fenced => {
                    (chunk.reqs.iter()).for_each(|&i| self.applied[i] = Some(Applied::fenced()));
                    return Ok(());
                }
                Created::Prefixes => {
                    // (A prefix number was stale: apply.lua takes the chunk, and the
                    // partition's numbers are learnt again.)
                    self.stale.push(p);
                    self.later.extend(&chunk.reqs);
                    return Ok(());
                }
            };
            let mut created = Vec::new();
            for (at, &i) in chunk.reqs.iter().enumerate() {
                match skipped.binary_search(&at) {
                    Ok(_) => self.later.push(i),
                    Err(_) => created.push(i),
                }
            }
            for &i in &created {
                let r = &reqs[i];
                self.applied[i] = Some(accepted(r));
                if let Some(state) = fresh.remove(&(p, r.offset)) {
                    sent_states.push((r.timer_id.clone(), state));
                }
            }
            if sent_states.len() != owed {
                let got = sent_states.len();
                return Err(bad_reply(format!(
                    "create wrote {owed} states, ktimer {got}"
                )));
            }
            // (create.lua names the entry by the first timer it created.)
            entry = created.first().map_or(entry, |&i| reqs[i].offset);
        } else {
            let sent = |id: String, off: i64| {
                let state = fresh.remove(&(p, off));
                let state = state.ok_or_else(|| bad_reply(format!("no state at {off}")))?;
                sent_states.push((id, state));
                Ok(())
            };
            let row: Vec<redis::Value> = super::packed::items(v)?;
            let (answers, states) = parse_chunk(row, chunk.reqs.len(), sent)?;
            for (&i, a) in chunk.reqs.iter().zip(answers) {
                self.applied[i] = Some(a);
            }
            timers = states;
        }
        if !timers.is_empty() || !sent_states.is_empty() {
            self.written.push(Written {
                partition: p,
                epoch: first.epoch,
                first: entry,
                timers,
                fresh: sent_states,
            });
        }
        Ok(())
    }
}

/// One script call of an apply pipeline: a chunk of commands or a partition's mark.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// The index of the chunk in [`chunks`]' answer.
    Chunk(usize),
    /// The index of the mark.
    Mark(usize),
}

/// Parses apply.lua's answer for a chunk of `n` commands: what each did, then the
/// states to write.
fn parse_chunk(
    row: Vec<redis::Value>,
    n: usize,
    sent: impl FnMut(String, i64) -> Result<(), StoreError>,
) -> Result<(Vec<Applied>, States), StoreError> {
    if row.len() == 1 && matches!(&row[0], redis::Value::BulkString(b) if b == b"fenced") {
        return Ok((vec![Applied::fenced(); n], vec![]));
    }
    if row.len() < ANSWER_FIELDS * n {
        return Err(StoreError::Reply(format!(
            "apply answered {} fields for {n} commands",
            row.len()
        )));
    }
    let mut row = row.into_iter();
    let answers: Vec<String> = row
        .by_ref()
        .take(ANSWER_FIELDS * n)
        .map(|v| String::from_redis_value(v).map_err(bad_reply))
        .collect::<Result<_, _>>()?;
    let applied = answers
        .chunks(ANSWER_FIELDS)
        .map(parse_applied)
        .collect::<Result<_, _>>()?;
    Ok((applied, super::state::parse_states(row, sent)?))
}

fn parse_applied(one: &[String]) -> Result<Applied, StoreError> {
    let [code, version, state, due, reason] = one else {
        return Err(StoreError::Reply(format!("apply returned {one:?}")));
    };
    let outcome = match code.as_str() {
        "accepted" => ApplyOutcome::Accepted,
        "duplicate" => ApplyOutcome::Duplicate,
        "rejected" => ApplyOutcome::Rejected,
        other => return Err(StoreError::Reply(format!("apply returned code {other:?}"))),
    };
    let state = match state.as_str() {
        "" => None,
        s => Some(TimerState::from_stored(s).ok_or_else(|| bad_reply(format!("state {s:?}")))?),
    };
    Ok(Applied {
        outcome,
        version: version.parse().ok(),
        state,
        due_ms: due.parse().ok(),
        reason: reason.clone(),
    })
}

#[cfg(test)]
mod tests;
