//! The arguments of one command in an `apply.lua` call (pure request building: the
//! layout is the header of apply.lua; unit tests in `tests.rs`).

use super::chunks::Chunk;
use crate::codec;
use crate::command::MisfirePolicy;
use crate::store::cron::refill_at;
use crate::store::fresh::{Fresh, FreshState};
use crate::store::scripts::Call as ScriptCall;
use crate::store::{bad_reply, StoreError};
use crate::timer::{ApplyRequest, Op, Schedule, TimerDef};
use redis::ToRedisArgs;

/// Where a command's arguments go: straight into the script call, or into a list (tests).
pub(super) trait Args {
    fn push<T: ToRedisArgs>(&mut self, a: T);
}

impl Args for ScriptCall<'_> {
    fn push<T: ToRedisArgs>(&mut self, a: T) {
        self.arg(a);
    }
}

impl Args for Vec<Vec<u8>> {
    fn push<T: ToRedisArgs>(&mut self, a: T) {
        a.write_redis_args(self);
    }
}

/// Appends the argument group of one command (see the header of apply.lua): offset, op,
/// timer id, request id, kind, due, definition, origin, application, its pending limit in
/// the partition, its pacing, the record of a new one-shot timer ([`Fresh`], with the
/// short history entry when `history`), then the number of cron values and those: spec,
/// misfire, max fires, materialised through, next refill and the occurrences (none for a
/// command without a cron schedule: a one-shot create is 14 arguments).
/// Answers the state of the new one-shot timer, for apply.lua's answer that it used it.
pub(super) fn command_args(
    r: &ApplyRequest,
    now_ms: i64,
    history: bool,
    out: &mut impl Args,
) -> Result<Option<FreshState>, StoreError> {
    out.push(r.offset);
    out.push(op_name(&r.op));
    out.push(&r.timer_id);
    out.push(&r.request_id);
    let schedule = match &r.op {
        Op::Create { schedule, .. } | Op::Update { schedule, .. } => Some(schedule),
        _ => None,
    };
    let encode = |d: &TimerDef| codec::encode_stored(d).map_err(bad_reply);
    let def = r.op.def().map(encode).transpose()?.unwrap_or_default();
    let text = |n: Option<i64>| n.map(|n| n.to_string()).unwrap_or_default();
    let mut fresh = None;
    let (kind, due) = match schedule {
        Some(Schedule::Once { due_ms }) => {
            if let Op::Create { def: d, .. } = &r.op {
                fresh = Some(fresh_record(r, *due_ms, &def, d, now_ms, history));
            }
            ("o", due_ms.to_string())
        }
        Some(Schedule::Cron { next_ms, .. }) => ("c", text(*next_ms)),
        None => match r.op {
            Op::FireNow { at_ms } => ("", at_ms.to_string()),
            _ => ("", String::new()),
        },
    };
    out.push(kind);
    out.push(due);
    out.push(def);
    out.push(match r.op {
        Op::Resume { origin_ms } => origin_ms,
        _ => 0,
    });
    out.push(&r.application);
    out.push(r.max_pending.map(|n| n.to_string()).unwrap_or_default());
    out.push(if r.paced { "1" } else { "" });
    match &fresh {
        Some(f) => {
            out.push(&f.head);
            out.push(&f.tail);
        }
        None => (0..2).for_each(|_| out.push("")),
    }
    match schedule {
        Some(Schedule::Cron { spec, first, .. }) => {
            out.push(5 + first.dues.len());
            out.push(serde_json::to_vec(spec).map_err(bad_reply)?);
            out.push(misfire_code(spec.misfire));
            out.push(text(spec.max_fires));
            out.push(first.covered_ms);
            out.push(refill_at(first, now_ms));
            first.dues.iter().for_each(|d| out.push(d));
        }
        _ => out.push(0),
    }
    Ok(fresh.and_then(|f| f.state))
}

/// Appends apply.lua's groups for `chunk` of `reqs` ([`command_args`]); answers the
/// states of the new one-shot timers, by index into `reqs`.
pub(super) fn command_groups(
    reqs: &[ApplyRequest],
    chunk: &Chunk,
    now_ms: i64,
    history: bool,
    out: &mut impl Args,
) -> Result<Vec<(usize, FreshState)>, StoreError> {
    let mut states = Vec::new();
    for &i in &chunk.reqs {
        let state = command_args(&reqs[i], now_ms, history, out)?;
        states.extend(state.map(|s| (i, s)));
    }
    Ok(states)
}

/// The record ktimer packs for new one-shot timer `r` (due `due_ms`, stored definition
/// `def` of `d`), applied at `now_ms`: deferred when due within the deferral window.
fn fresh_record(
    r: &ApplyRequest,
    due_ms: i64,
    def: &[u8],
    d: &TimerDef,
    now_ms: i64,
    history: bool,
) -> Fresh {
    let deferred = due_ms <= now_ms + super::super::state::DEFER_MS;
    Fresh::new(r, due_ms, def, &d.application, now_ms, deferred, history)
}

/// Whether `r` may go to create.lua: a create of a one-shot timer of an application with
/// no pending limit whose fires are not paced (create.lua neither counts nor parks).
pub(super) fn creates_once(r: &ApplyRequest) -> bool {
    let once = matches!(
        &r.op,
        Op::Create {
            schedule: Schedule::Once { .. },
            ..
        }
    );
    once && r.max_pending.is_none() && !r.paced
}

/// Appends create.lua's group for `r` ([`creates_once`]): offset, timer id, due, its
/// record ([`Fresh::record`]: stored definition `def`, its prefix numbered as `numbered`
/// says), and its application ('' when it is `prev`, the previous group's). Answers its
/// state (none when deferred).
pub(super) fn create_args(
    r: &ApplyRequest,
    def: &[u8],
    numbered: Option<(u32, usize)>,
    prev: Option<&str>,
    now_ms: i64,
    history: bool,
    out: &mut impl Args,
) -> Result<Option<FreshState>, StoreError> {
    let Op::Create {
        def: d,
        schedule: Schedule::Once { due_ms },
    } = &r.op
    else {
        return Err(bad_reply("create.lua takes creates of one-shot timers"));
    };
    let f = fresh_record(r, *due_ms, def, d, now_ms, history);
    out.push(r.offset);
    out.push(&r.timer_id);
    out.push(*due_ms);
    out.push(f.record(def, numbered));
    match prev == Some(r.application.as_str()) {
        true => out.push(""),
        false => out.push(&r.application),
    }
    Ok(f.state)
}

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Create { .. } => "create",
        Op::Update { .. } => "update",
        Op::Pause => "pause",
        Op::Resume { .. } => "resume",
        Op::Cancel => "cancel",
        Op::FireNow { .. } => "fire",
    }
}

fn misfire_code(p: MisfirePolicy) -> &'static str {
    match p {
        MisfirePolicy::FireOnce => "once",
        MisfirePolicy::FireAll => "all",
        MisfirePolicy::Skip => "skip",
    }
}
