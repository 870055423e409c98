//! Key names and hash field names of the store: the one Rust copy of the layout the Lua
//! scripts write (the scripts spell the same names; `store/mod.rs` has the table).

/// The key names of one commands-topic partition: `PREFIX:{topic:p}:...`. The hash tag
/// `{topic:p}` puts every key of a partition in one Redis Cluster slot.
#[derive(Debug, Clone)]
pub struct Keys {
    tag: String,
}

impl Keys {
    /// The keys of `partition` of `topic` under `prefix`.
    pub fn new(prefix: &str, topic: &str, partition: i32) -> Keys {
        Keys {
            tag: format!("{prefix}:{{{topic}:{partition}}}"),
        }
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tag)
    }

    /// A SCAN pattern matching every key of the partition.
    pub fn pattern(&self) -> String {
        self.key("*")
    }
    /// The owner's epoch (string).
    pub fn epoch(&self) -> String {
        self.key("epoch")
    }
    /// Owners that lost the partition with fires still in their producer (zset, member
    /// the epoch; expires unless refreshed).
    pub fn draining(&self) -> String {
        self.key("drain")
    }
    /// The highest commands-topic offset handled (string).
    pub fn offset(&self) -> String {
        self.key("offset")
    }
    /// The minutes whose slice is not empty (zset).
    pub fn index(&self) -> String {
        self.key("idx")
    }
    /// Applications with parked fires, by the first due of their parked set (zset).
    /// A paced application's due fires over its quota wait in Redis, not in the
    /// trigger's memory (`claim.lua`).
    pub fn parked(&self) -> String {
        self.key("pk")
    }
    /// The parked fires of `app` (zset of slice members by slice score): the scripts
    /// derive it the same way, `KEYS[i] .. ':' .. app` from [`Keys::parked`].
    pub fn parked_of(&self, app: &str) -> String {
        format!("{}:{app}", self.parked())
    }
    /// Fires claimed and not yet acknowledged (zset).
    pub fn inflight(&self) -> String {
        self.key("inflight")
    }
    /// One-shot fires delivered whose records were not written (`rec_view`, place.lua:
    /// they read fired), in the order they landed (list: one packed entry per
    /// `landed.lua` call, its latest time then its in-flight members): the checkpoint
    /// deletes those records once the retention has passed.
    pub fn fired_queue(&self) -> String {
        self.key("firedq")
    }
    /// Scheduled cron timers by when their window must be extended (zset).
    pub fn cron(&self) -> String {
        self.key("cron")
    }
    /// Timers changed since the last checkpoint (zset of ids by the first command offset
    /// that changed them since their state was written; fires score `inf`).
    pub fn dirty(&self) -> String {
        self.key("dirty")
    }
    /// One-shot timers due soon whose state is not written (they likely fire first), by
    /// the first command offset that changed them (zset).
    pub fn deferred(&self) -> String {
        self.key("deferred:off")
    }
    /// The states the intake is writing itself (apply.lua answered them), until it
    /// confirms them (written.lua): a hash, one field per apply call named by its first
    /// command offset, the timer ids one per line (writing.lua).
    pub fn writing(&self) -> String {
        self.key("writing")
    }
    /// Changed timers a checkpoint page met while the intake was still writing an earlier
    /// state of theirs (zset of ids by the first command offset that changed them since):
    /// out of the dirty set, so pages get past them, until that write is confirmed or
    /// failed (written.lua) or an owner next takes the partition (acquire.lua), which put
    /// them back.
    pub fn blocked(&self) -> String {
        self.key("blocked")
    }
    /// Timers taken from the dirty set whose state records are not confirmed yet (set).
    pub fn pending(&self) -> String {
        self.key("pending")
    }
    /// Tombstones owed by written one-shot timers whose fires landed, no command since
    /// (list, `owed.lua`): one entry per `landed.lua` call, its acknowledgement count,
    /// when its last fire was produced and how many ids, then the ids, one per line.
    pub fn owed(&self) -> String {
        self.key("owed")
    }
    /// The entries of [`Keys::owed`] a checkpoint page took and answered, until its
    /// records are confirmed (list; answered again when the page was lost).
    pub fn owed_taken(&self) -> String {
        self.key("owed:p")
    }
    /// Timers a command created again after a fire, by the acknowledgement count then
    /// (zset, `apply.lua`): the tombstone an earlier fire owed no longer holds.
    pub fn revived(&self) -> String {
        self.key("revived")
    }
    /// Acknowledgement calls so far (string counter): a checkpoint is due when it moved.
    pub fn acks(&self) -> String {
        self.key("acks")
    }
    /// Timers not yet done (scheduled or paused) per application (hash: application ->
    /// count), for `max_pending`.
    pub fn apps(&self) -> String {
        self.key("apps")
    }
    /// Timers per state and application (hash: `STATE:APP` -> count; `record.lua`).
    pub fn states(&self) -> String {
        self.key("ac")
    }
    /// Sequence of the last checkpoint confirmed in the state topic (string).
    pub fn checkpoint(&self) -> String {
        self.key("ckpt")
    }
    /// The replay fence a rebuild leaves (hash): `a` the applied offset and `w` the fire
    /// watermark of the checkpoint it restored, and `f:MEMBER` for each fire the
    /// checkpoint listed in flight. A fire of a command at or below `a`, due at or below
    /// `w` and not listed was acknowledged before Redis lost the partition: its command,
    /// replayed, must not fire it again (`claim.lua`).
    pub fn replay_fence(&self) -> String {
        self.key("fence")
    }
    /// The layout version the partition's keys were written in (string,
    /// [`super::STORE_FORMAT`]); set by every rebuild.
    pub fn format(&self) -> String {
        self.key("fmt")
    }
    /// The partition's key prefix, `PREFIX:{topic:p}:`: the scripts that read or write
    /// timers build the record keys from it (`record.lua`).
    pub fn base(&self) -> String {
        self.key("")
    }
    /// The definition prefixes shared by the records (hash: `#N` the prefix, `=PREFIX`
    /// its number; `record.lua` derives the same name).
    pub fn prefixes(&self) -> String {
        self.key("dp")
    }
    /// The bucket: scheduled one-shot timers due after the promoted minute, field the
    /// id, value the packed record (hash, `place.lua` derives the same name).
    pub fn bucket(&self) -> String {
        self.key("r")
    }
    /// The bucket's meta: the promoted minute and its cursor (hash, `place.lua`).
    pub fn record_meta(&self) -> String {
        self.key("rb")
    }
    /// The hash of timer `id` once it is done (a live timer is a field of the bucket).
    pub fn timer(&self, id: &str) -> String {
        format!("{}:t:{id}", self.tag)
    }
    /// Prefix of the minute slices (zset per minute): the minute number follows.
    pub fn slice_prefix(&self) -> String {
        self.key("s:")
    }
}

/// Field names of a timer hash.
pub mod field {
    /// Version: the offset of the last command that changed the timer.
    pub const VERSION: &str = "v";
    /// State, a [`crate::timer::TimerState`] stored name.
    pub const STATE: &str = "st";
    /// The last request id applied.
    pub const REQUEST: &str = "rq";
    /// Kind: [`KIND_ONCE`] or [`KIND_CRON`].
    pub const KIND: &str = "k";
    /// The next due instant, Unix ms.
    pub const DUE: &str = "due";
    /// The application that created the timer (its owner).
    pub const APPLICATION: &str = "a";
    /// The stored definition (`schemas/stored_timer.avsc`, a bare Avro datum).
    pub const DEF: &str = "d";
    /// Cron: the schedule, JSON.
    pub const SPEC: &str = "sc";
    /// Cron: misfire policy (`once`, `all`, `skip`).
    pub const MISFIRE: &str = "mp";
    /// Cron: most fires.
    pub const MAX_FIRES: &str = "mx";
    /// Cron: fires claimed so far.
    pub const FIRES: &str = "n";
    /// Cron: occurrences are materialised through this instant.
    pub const HORIZON: &str = "hz";
    /// Cron: the last occurrence materialised.
    pub const LAST_MATERIALISED: &str = "lst";
    /// Cron: the final occurrence, once the schedule is exhausted.
    pub const FINAL: &str = "fin";
    /// Cron: when the last late (misfired) occurrence was taken, Unix ms.
    pub const LATE_FIRE: &str = "lf";
    /// Cron: the due instant of that late occurrence (it still fires after a takeover).
    pub const LATE_FIRE_DUE: &str = "lfd";
    /// Cron: the due instant of the last fire delivered.
    pub const LAST_FIRED: &str = "last";
    /// Fires sent to the dead-letter topic.
    pub const DEAD_LETTERS: &str = "dl";
    /// Due instant of the last dead-lettered fire.
    pub const LAST_DEAD_LETTER_DUE: &str = "dlr";
    /// Reason of the last dead-lettered fire.
    pub const LAST_DEAD_LETTER_REASON: &str = "dlx";
    /// The history: command and fire entries (packed, `record.lua`; JSON in a look-up).
    pub const HISTORY: &str = "h";
    /// The last fire: one history entry (packed; JSON in a look-up).
    pub const LAST_FIRE: &str = "lx";
    /// Set once the timer's state was written to the state topic (a tombstone is owed
    /// when it ends).
    pub const PERSISTED: &str = "p";
    /// [`KIND`] of a one-shot timer.
    pub const KIND_ONCE: &str = "o";
    /// [`KIND`] of a cron timer.
    pub const KIND_CRON: &str = "c";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_partition_carries_its_hash_tag() {
        let k = Keys::new("kt", "cmds", 3);
        for key in [
            k.epoch(),
            k.offset(),
            k.index(),
            k.inflight(),
            k.cron(),
            k.dirty(),
            k.pending(),
            k.owed(),
            k.owed_taken(),
            k.revived(),
            k.deferred(),
            k.writing(),
            k.checkpoint(),
            k.acks(),
            k.format(),
            k.replay_fence(),
            k.states(),
            k.parked(),
            k.parked_of("orders"),
            k.timer("x"),
        ] {
            assert!(key.starts_with("kt:{cmds:3}:"), "{key}");
        }
        assert_eq!(k.timer("a:b"), format!("{}t:a:b", k.base()));
        assert_eq!(k.record_meta(), format!("{}rb", k.base()));
        assert_eq!(k.bucket(), format!("{}r", k.base()));
        assert_eq!(k.slice_prefix(), "kt:{cmds:3}:s:");
    }
}
