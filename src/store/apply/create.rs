//! create.lua's answer for a chunk of new one-shot timers (pure; unit tests in `tests.rs`).

use crate::store::{bad_reply, StoreError};
use crate::timer::{Applied, ApplyOutcome, ApplyRequest, Op, Schedule, TimerState};
use redis::Value;

/// What create.lua did with a chunk.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Created {
    /// The partition's epoch moved, or Redis lost writes: nothing was done.
    Fenced,
    /// Every timer created but the `skipped` ones (positions in the chunk: Redis holds a
    /// record of them, apply.lua decides); `owed` of them have states the caller writes.
    Done { owed: usize, skipped: Vec<usize> },
}

/// Parses create.lua's answer for a chunk of `n` timers.
pub(super) fn parse_created(v: Value, n: usize) -> Result<Created, StoreError> {
    let Value::Array(items) = v else {
        return Err(bad_reply(format!("create answered {v:?}")));
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        other => Err(bad_reply(format!("create answered {other:?}"))),
    };
    match items.first() {
        Some(Value::BulkString(b)) if b == b"fenced" => return Ok(Created::Fenced),
        None => return Err(bad_reply("create answered nothing")),
        _ => {}
    }
    let owed = usize::try_from(int(&items[0])?).map_err(bad_reply)?;
    let mut skipped = Vec::with_capacity(items.len() - 1);
    for v in &items[1..] {
        let g = usize::try_from(int(v)?).map_err(bad_reply)?;
        if g == 0 || g > n || skipped.last().is_some_and(|&l| l + 1 >= g) {
            return Err(bad_reply(format!("create answered timer {g} of {n}")));
        }
        skipped.push(g - 1);
    }
    if owed + skipped.len() > n {
        return Err(bad_reply(format!("create answered {owed} states of {n}")));
    }
    Ok(Created::Done { owed, skipped })
}

/// What apply.lua answers for `r`, a create of a one-shot timer Redis held no record of.
pub(super) fn accepted(r: &ApplyRequest) -> Applied {
    let due_ms = match &r.op {
        Op::Create {
            schedule: Schedule::Once { due_ms },
            ..
        } => Some(*due_ms),
        _ => None,
    };
    Applied {
        outcome: ApplyOutcome::Accepted,
        version: Some(r.offset),
        state: Some(TimerState::Scheduled),
        due_ms,
        reason: String::new(),
    }
}
