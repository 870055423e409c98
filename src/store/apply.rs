//! Applying commands (`apply.lua`) and marking handled offsets (`mark.lua`).

use super::cron::refill_at;
use super::{bad_reply, Store, StoreError};
use crate::codec;
use crate::command::MisfirePolicy;
use crate::timer::{Applied, ApplyOutcome, ApplyRequest, Op, Schedule, TimerDef, TimerState};
use redis::FromRedisValue;
use std::collections::HashMap;

/// Most commands of one partition applied in one script call: bounds how long one call
/// keeps Redis busy (a claim waits behind it) to a couple of ms.
const APPLY_CHUNK: usize = 200;

/// Fields apply.lua answers per command: code, version, state, due, reason.
const ANSWER_FIELDS: usize = 5;

/// The highest offset handled in a partition: `(partition, epoch, offset)`.
pub type Mark = (i32, i64, i64);

impl Store {
    /// Applies commands in one pipeline (per-partition order is kept), then records per
    /// partition the highest offset handled (applied or rejected before Redis) under its
    /// epoch. Returns what each command did and the partitions whose epoch moved (nothing
    /// was recorded for them). `now_ms` dates the cron windows' refill times.
    pub async fn apply(
        &self,
        reqs: &[ApplyRequest],
        marks: &[Mark],
        now_ms: i64,
    ) -> Result<(Vec<Applied>, Vec<i32>), StoreError> {
        if reqs.is_empty() && marks.is_empty() {
            return Ok((vec![], vec![]));
        }
        let chunks = chunks(reqs);
        let mut p = redis::pipe();
        for chunk in &chunks {
            let first = &reqs[chunk[0]];
            let k = self.keys(first.partition);
            let mut inv = self.scripts.apply.prepare_invoke();
            inv.key(k.epoch())
                .key(k.offset())
                .key(k.index())
                .key(k.inflight())
                .key(k.cron())
                .arg(first.epoch)
                .arg(self.retention_ms)
                .arg(k.slice_prefix());
            for &i in chunk {
                inv.key(k.timer(&reqs[i].timer_id));
                for a in command_args(&reqs[i], now_ms)? {
                    inv.arg(a);
                }
            }
            p.invoke_script(&inv);
        }
        for &(partition, epoch, offset) in marks {
            let k = self.keys(partition);
            let mut inv = self.scripts.mark.prepare_invoke();
            inv.key(k.epoch()).key(k.offset()).arg(epoch).arg(offset);
            p.invoke_script(&inv);
        }
        let mut replies: Vec<redis::Value> = self.run(&p).await?;
        let codes = replies.split_off(chunks.len());
        let mut applied: Vec<Option<Applied>> = vec![None; reqs.len()];
        for (chunk, v) in chunks.iter().zip(replies) {
            let row = Vec::<String>::from_redis_value(v).map_err(bad_reply)?;
            for (&i, a) in chunk.iter().zip(parse_chunk(row, chunk.len())?) {
                applied[i] = Some(a);
            }
        }
        let applied = applied
            .into_iter()
            .map(|a| a.expect("every command answered"));
        let mut moved = Vec::new();
        for (m, v) in marks.iter().zip(codes) {
            if i64::from_redis_value(v).map_err(bad_reply)? < 0 {
                moved.push(m.0);
            }
        }
        Ok((applied.collect(), moved))
    }
}

/// Groups `reqs` into script calls: runs of up to [`APPLY_CHUNK`] commands of one
/// partition, in offset order; each chunk lists the indexes of its commands in `reqs`.
fn chunks(reqs: &[ApplyRequest]) -> Vec<Vec<usize>> {
    let mut chunks: Vec<Vec<usize>> = Vec::new();
    let mut open: HashMap<i32, usize> = HashMap::new();
    for (i, r) in reqs.iter().enumerate() {
        match open.get(&r.partition) {
            Some(&c) if chunks[c].len() < APPLY_CHUNK => chunks[c].push(i),
            _ => {
                open.insert(r.partition, chunks.len());
                chunks.push(vec![i]);
            }
        }
    }
    chunks
}

/// The argument group of one command (see the header of apply.lua): offset, op, timer
/// id, request id, kind, due, definition, cron spec, misfire, max fires, materialised
/// through, next refill, origin, the number of occurrences and the occurrences.
fn command_args(r: &ApplyRequest, now_ms: i64) -> Result<Vec<Vec<u8>>, StoreError> {
    let text = |s: &str| s.as_bytes().to_vec();
    let num = |n: i64| n.to_string().into_bytes();
    let encode = |d: &TimerDef| codec::encode_stored(d).map_err(bad_reply);
    let mut out = vec![num(r.offset), text(op_name(&r.op)), text(&r.timer_id)];
    out.push(text(&r.request_id));
    let schedule = match &r.op {
        Op::Create { schedule, .. } | Op::Update { schedule, .. } => Some(schedule),
        _ => None,
    };
    let def = r.op.def().map(encode).transpose()?.unwrap_or_default();
    let none = || vec![];
    match schedule {
        Some(Schedule::Once { due_ms }) => {
            out.extend([text("o"), num(*due_ms), def]);
            out.extend([none(), none(), none(), none(), none()]);
        }
        Some(Schedule::Cron {
            spec,
            first,
            next_ms,
        }) => {
            let sc = serde_json::to_vec(spec).map_err(bad_reply)?;
            out.extend([text("c"), next_ms.map(num).unwrap_or_default(), def, sc]);
            out.push(text(misfire_code(spec.misfire)));
            out.push(spec.max_fires.map(num).unwrap_or_default());
            out.push(num(first.covered_ms));
            out.push(text(&refill_at(first, now_ms)));
        }
        None => {
            out.extend([none(), none(), def]);
            out.extend([none(), none(), none(), none(), none()]);
        }
    }
    let origin = match r.op {
        Op::Resume { origin_ms } => origin_ms,
        _ => 0,
    };
    out.push(num(origin));
    let dues = match schedule {
        Some(Schedule::Cron { first, .. }) => first.dues.as_slice(),
        _ => &[],
    };
    out.push(num(dues.len() as i64));
    out.extend(dues.iter().map(|&d| num(d)));
    Ok(out)
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Create { .. } => "create",
        Op::Update { .. } => "update",
        Op::Pause => "pause",
        Op::Resume { .. } => "resume",
        Op::Cancel => "cancel",
    }
}

fn misfire_code(p: MisfirePolicy) -> &'static str {
    match p {
        MisfirePolicy::FireOnce => "once",
        MisfirePolicy::FireAll => "all",
        MisfirePolicy::Skip => "skip",
    }
}

/// Parses apply.lua's answer for a chunk of `n` commands.
fn parse_chunk(row: Vec<String>, n: usize) -> Result<Vec<Applied>, StoreError> {
    if row.len() == 1 && row[0] == "fenced" {
        return Ok(vec![Applied::fenced(); n]);
    }
    if row.len() != ANSWER_FIELDS * n {
        return Err(StoreError::Reply(format!(
            "apply answered {} fields for {n} commands",
            row.len()
        )));
    }
    row.chunks(ANSWER_FIELDS).map(parse_applied).collect()
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
