//! The state topic's side of the store: checkpoint pages (`checkpoint.lua`, confirmed by
//! `checkpointed.lua`), restoring a partition from its state records (`restore.lua`), and
//! wiping a partition whose Redis data is too old to keep.

use super::{bad_reply, Store, StoreError};
use crate::timer::TimerFields;
use redis::Value;

/// One page of a partition's checkpoint (see `checkpoint.lua`).
#[derive(Debug, Default)]
pub struct CheckpointPage {
    /// Timers still dirty after this page: the checkpoint is complete only at 0.
    pub left: u64,
    /// Every fire due at or before this was acknowledged, except `in_flight`.
    pub acked_through_ms: i64,
    /// The highest commands-topic offset the state topic reflects once this page is
    /// written: the applied offset, or below the first command of a deferred timer.
    pub applied: i64,
    /// The partition's acknowledgement counter: fires were acknowledged since a page
    /// that read another value.
    pub acks: i64,
    /// The highest command offset applied when the watermark was read (at least
    /// `applied`, which deferred timers hold back).
    pub applied_now: i64,
    /// Fire members claimed and not acknowledged (the first of them, up to the limit the
    /// page was asked for); listed only by the last page of a checkpoint (`left` = 0),
    /// the one whose watermark is recorded.
    pub in_flight: Vec<String>,
    /// The page's timers, each once: their fields, or `None` for a tombstone (the
    /// tombstones answered as one list first).
    pub timers: Vec<(String, Option<TimerFields>)>,
}

/// A timer to restore: its fields and the due instants of its fires that were in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Restore {
    /// Timer id.
    pub timer_id: String,
    /// Due instants of its in-flight fires (they go back in flight).
    pub in_flight: Vec<i64>,
    /// Its fields.
    pub fields: TimerFields,
}

/// What the last restore call of a rebuild records: the partition is complete.
#[derive(Debug, Clone, Copy)]
pub struct Restored<'a> {
    /// The highest command offset the state topic reflects (the replay starts after it).
    pub applied: i64,
    /// The checkpoint sequence.
    pub sequence: i64,
    /// The checkpoint restored, if any: its replay fence (keys.rs `replay_fence`).
    pub checkpoint: Option<&'a crate::timer::Checkpoint>,
}

impl Restored<'_> {
    /// The replay fence's field/value strings: none without a checkpoint that knows its
    /// applied offset.
    pub fn fence(&self) -> Vec<String> {
        let Some(c) = self.checkpoint.filter(|c| c.applied_offset >= 0) else {
            return Vec::new();
        };
        let mut out = vec![
            "a".into(),
            c.applied_offset.to_string(),
            "w".into(),
            c.acked_through_ms.to_string(),
        ];
        for m in &c.in_flight {
            out.push(format!("f:{m}"));
            out.push("1".into());
        }
        out
    }
}

/// A one-shot timer never written and due within this many ms is not written yet (most
/// fire before the next checkpoint and then owe the state topic nothing); a rebuild
/// replays its commands instead.
pub const DEFER_MS: i64 = 10_000;
/// A deferred timer still scheduled this long after its due, and after the fire watermark
/// (its fire claimed and never acknowledged), is written after all; one waiting behind a
/// burst that drains late is not stuck.
pub const DEFER_GRACE_MS: i64 = 5_000;

/// Most bytes of timer states one checkpoint page answers (the page ends after the timer
/// that reaches it, so one larger timer still goes): 500 timers of 8 kB would make pages
/// of 4 MB and calls of 0.1-0.25 s that hold the partition's other calls.
pub const PAGE_BYTES: usize = 512 * 1024;

/// How many keys one wipe step asks SCAN for.
const WIPE_PAGE: usize = 1000;

impl Store {
    /// Timers of `partition` changed since their state was last written (dirty, in a
    /// page not confirmed yet, or waiting for a write of the intake), and the intake's
    /// apply calls whose written states are not confirmed: 0 once the state topic has
    /// caught up.
    pub async fn unwritten(&self, partition: i32) -> Result<u64, StoreError> {
        let k = self.keys(partition);
        let (dirty, pending, writing, blocked, owed, taken): (u64, u64, u64, u64, u64, u64) =
            redis::pipe()
                .zcard(k.dirty())
                .scard(k.pending())
                .hlen(k.writing())
                .zcard(k.blocked())
                .llen(k.owed())
                .llen(k.owed_taken())
                .query_async(&mut self.conn.clone())
                .await?;
        Ok(dirty + pending + writing + blocked + owed + taken)
    }

    /// Confirms the states the intake wrote for the apply call of `partition` held at
    /// `epoch` whose first command is at offset `first` ([`super::Written::first`]):
    /// `delivered`, or not (its timers go back to the dirty set, for the checkpoint to
    /// write).
    pub async fn written(
        &self,
        (partition, epoch): (i32, i64),
        delivered: bool,
        first: i64,
    ) -> Result<(), StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.written.call();
        inv.key(k.epoch())
            .key(k.writing())
            .key(k.dirty())
            .key(k.blocked())
            .arg(epoch)
            .arg(if delivered { "delivered" } else { "failed" })
            .arg(first);
        self.counted("written", partition, inv).await.map(|_| ())
    }

    /// Takes one page of `partition`'s checkpoint at `now_ms`: up to `limits.0` changed
    /// timers (and about [`PAGE_BYTES`] of their states) and up to `limits.1` in-flight
    /// members; fenced when Redis holds a checkpoint
    /// older than `floor`.
    pub async fn checkpoint_page(
        &self,
        (partition, epoch, floor): (i32, i64, i64),
        now_ms: i64,
        (max_timers, max_in_flight): (usize, usize),
    ) -> Result<CheckpointPage, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.checkpoint.call();
        inv.key(k.epoch())
            .key(k.dirty())
            .key(k.pending())
            .key(k.index())
            .key(k.inflight())
            .key(k.offset())
            .key(k.deferred())
            .key(k.acks())
            .key(k.checkpoint())
            .key(k.writing())
            .key(k.blocked())
            .key(k.parked())
            .key(k.owed())
            .key(k.owed_taken())
            .key(k.revived())
            .arg(epoch)
            .arg(k.base())
            .arg(k.slice_prefix())
            .arg(now_ms)
            .arg(max_timers)
            .arg(max_in_flight)
            .arg(DEFER_MS)
            .arg(DEFER_GRACE_MS)
            .arg(floor)
            .arg(PAGE_BYTES)
            .arg(self.retention_ms);
        let mut p = redis::pipe();
        inv.add_to(&mut p);
        let (reply,): (Vec<Value>,) = self.run("checkpoint", &p).await?;
        parse_page(reply, partition)
    }

    /// Confirms the last page of `partition`'s checkpoint: its records were acknowledged;
    /// with `sequence`, it completed that checkpoint. Fenced when Redis holds a checkpoint
    /// older than `floor`.
    pub async fn checkpointed(
        &self,
        (partition, epoch, floor): (i32, i64, i64),
        sequence: Option<i64>,
    ) -> Result<(), StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.checkpointed.call();
        inv.key(k.epoch())
            .key(k.pending())
            .key(k.checkpoint())
            .key(k.owed_taken())
            .key(k.owed())
            .key(k.revived())
            .arg(epoch)
            .arg(sequence.map(|s| s.to_string()).unwrap_or_default())
            .arg(floor);
        self.counted("checkpointed", partition, inv)
            .await
            .map(|_| ())
    }

    /// Restores `timers` of `partition` under the fire watermark `acked_through_ms`; with
    /// `last`, the restore is complete and Redis records it. Returns the number restored.
    pub async fn restore(
        &self,
        partition: i32,
        epoch: i64,
        timers: &[Restore],
        acked_through_ms: i64,
        last: Option<&Restored<'_>>,
    ) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.restore.call();
        inv.key(k.epoch())
            .key(k.index())
            .key(k.inflight())
            .key(k.cron())
            .key(k.dirty())
            .key(k.offset())
            .key(k.checkpoint())
            .key(k.apps())
            .key(k.format())
            .key(k.replay_fence())
            .arg(epoch)
            .arg(k.base())
            .arg(k.slice_prefix())
            .arg(acked_through_ms)
            .arg(self.retention_ms);
        match last {
            Some(r) => inv.arg(r.applied).arg(r.sequence),
            None => inv.arg("").arg(""),
        };
        inv.arg(super::STORE_FORMAT);
        let fence = last.map(Restored::fence).unwrap_or_default();
        inv.arg(fence.len());
        for s in &fence {
            inv.arg(s);
        }
        for t in timers {
            inv.arg(&t.timer_id).arg(t.in_flight.len());
            for d in &t.in_flight {
                inv.arg(d);
            }
            inv.arg(t.fields.fields.len());
            for (name, value) in &t.fields.fields {
                inv.arg(name).arg(value.as_slice());
            }
        }
        self.counted("restore", partition, inv).await
    }

    /// Deletes every key of `partition` but its epoch (Redis data too old to keep);
    /// returns how many were deleted.
    pub async fn wipe(&self, partition: i32) -> Result<u64, StoreError> {
        let k = self.keys(partition);
        let (pattern, epoch_key) = (k.pattern(), k.epoch());
        let mut conn = self.conn.clone();
        let (mut cursor, mut gone) = (0u64, 0u64);
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(WIPE_PAGE);
            // On a cluster, SCAN goes to the node holding the partition's slot.
            let reply = conn.on_node_of(&epoch_key, &scan).await?;
            let (next, keys): (u64, Vec<String>) =
                redis::from_redis_value(reply).map_err(bad_reply)?;
            let keys: Vec<&String> = keys.iter().filter(|key| **key != epoch_key).collect();
            if !keys.is_empty() {
                let n: u64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await?;
                gone += n;
            }
            if next == 0 {
                return Ok(gone);
            }
            cursor = next;
        }
    }
}

/// Reads checkpoint.lua's answer.
fn parse_page(reply: Vec<Value>, partition: i32) -> Result<CheckpointPage, StoreError> {
    let mut it = reply.into_iter();
    let mut next = || it.next().ok_or_else(|| bad_reply("short checkpoint reply"));
    let first = next()?;
    if matches!(&first, Value::BulkString(b) if b == b"fenced") {
        return Err(StoreError::Fenced(partition));
    }
    let int =
        |v: Value| -> Result<i64, StoreError> { redis::from_redis_value(v).map_err(bad_reply) };
    let text =
        |v: Value| -> Result<String, StoreError> { redis::from_redis_value(v).map_err(bad_reply) };
    let mut page = CheckpointPage {
        left: int(first)? as u64,
        acked_through_ms: int(next()?)?,
        applied: text(next()?)?.parse().map_err(bad_reply)?,
        acks: text(next()?)?.parse().map_err(bad_reply)?,
        applied_now: text(next()?)?.parse().map_err(bad_reply)?,
        ..Default::default()
    };
    let owed: Vec<String> = redis::from_redis_value(next()?).map_err(bad_reply)?;
    let m = int(next()?)?;
    for _ in 0..m {
        page.in_flight.push(text(next()?)?);
    }
    page.timers = owed.iter().flat_map(|e| owed_ids(e)).collect();
    page.timers.extend(parse_states(it, |id, off| {
        Err(bad_reply(format!(
            "checkpoint: no state was sent for {id} at {off}"
        )))
    })?);
    Ok(page)
}

/// The tombstones of an owed entry (`owed.lua`): its ids, one per line after the first.
fn owed_ids(entry: &str) -> impl Iterator<Item = (String, Option<TimerFields>)> + '_ {
    entry.lines().skip(1).map(|id| (id.to_string(), None))
}

/// Timer states answered by a script: id and fields, or `None` for a tombstone.
pub(super) type States = Vec<(String, Option<TimerFields>)>;

/// The count that answers "the state the owner sent" (then the offset of its command).
const SENT: i64 = -2;

/// Timer states as checkpoint.lua and apply.lua answer them: per timer its id, n, and n
/// field/value pairs (n = -1: a tombstone; n = -2, then an offset: the state the owner
/// sent with the command at that offset, handed to `sent` with the timer id instead).
pub(super) fn parse_states(
    mut it: impl Iterator<Item = Value>,
    mut sent: impl FnMut(String, i64) -> Result<(), StoreError>,
) -> Result<States, StoreError> {
    let int =
        |v: Value| -> Result<i64, StoreError> { redis::from_redis_value(v).map_err(bad_reply) };
    let text =
        |v: Value| -> Result<String, StoreError> { redis::from_redis_value(v).map_err(bad_reply) };
    let mut timers = Vec::new();
    while let Some(id) = it.next() {
        let id = text(id)?;
        let n = int(it.next().ok_or_else(|| bad_reply("short timer"))?)?;
        if n == SENT {
            let off = int(it.next().ok_or_else(|| bad_reply("short sent state"))?)?;
            sent(id, off)?;
            continue;
        }
        if n < 0 {
            timers.push((id, None));
            continue;
        }
        let mut fields = TimerFields::default();
        for _ in 0..n {
            let (Some(name), Some(value)) = (it.next(), it.next()) else {
                return Err(bad_reply("short field list"));
            };
            let value: Vec<u8> = redis::from_redis_value(value).map_err(bad_reply)?;
            fields.fields.insert(text(name)?, value.into());
        }
        timers.push((id, Some(fields)));
    }
    Ok(timers)
}
