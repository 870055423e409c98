//! The Redis store: timers, minute slices, the in-flight set, offsets and epochs.
//!
//! Every key of commands-topic partition `p` carries the hash tag `{topic:p}`, so one
//! partition lives in one Redis Cluster slot and every Lua script touches one slot:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `PREFIX:{topic:p}:t:ID` | hash | timer `ID`: `v` version, `st` state, `rq` last request id, `k` kind (`o` one-shot, `c` cron), `due`, `d` definition; cron: `sc` spec (JSON), `mp` misfire, `mx` max fires, `n` fires claimed, `hz` materialised through, `lst` last materialised, `fin` final occurrence, `lf` last late fire, `last` last fired |
//! | `PREFIX:{topic:p}:s:MINUTE` | zset | fires due in that minute: member `version:due:id`, score due ms |
//! | `PREFIX:{topic:p}:idx` | zset | the minutes whose slice is not empty |
//! | `PREFIX:{topic:p}:inflight` | zset | fires claimed and not yet acknowledged by the broker |
//! | `PREFIX:{topic:p}:cron` | zset | scheduled cron timers, scored by when their window must be extended |
//! | `PREFIX:{topic:p}:offset` | string | highest commands-topic offset handled (written with every apply); behind the committed offset means Redis lost data |
//! | `PREFIX:{topic:p}:epoch` | string | moved by each new owner past every earlier epoch; every script checks it (fencing) |
//!
//! The scripts are in `src/store/*.lua`, loaded into Redis once at start (and again only
//! if Redis lost them).

use crate::codec;
use crate::command::MisfirePolicy;
use crate::schedule::{CronSpec, Occurrences};
use crate::validate::{Op, Schedule, TimerDef};
use redis::aio::ConnectionManager;
use redis::{FromRedisValue, Pipeline, Script, ScriptInvocation};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis failed; see [`StoreError::is_retryable`].
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Another instance owns the partition now (its epoch moved). Not retryable.
    #[error("partition {0} is fenced: another instance owns it")]
    Fenced(i32),
    /// A script returned something this code does not understand. Not retryable.
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
}

impl StoreError {
    /// Whether the same call may succeed later (connection trouble, Redis loading...).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || e.is_connection_refusal()
                    || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                    || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
            }
            _ => false,
        }
    }
}

/// Most commands of one partition applied in one script call: bounds how long one call
/// keeps Redis busy (a claim waits behind it) to a couple of ms.
const APPLY_CHUNK: usize = 200;

/// Helpers shared by the claim and recover scripts, prepended to both.
const MISFIRE: &str = include_str!("misfire.lua");

/// The Lua scripts, loaded once.
struct Scripts {
    apply: Script,
    claim: Script,
    ack: Script,
    recover: Script,
    cron_due: Script,
    materialize: Script,
    acquire: Script,
    mark: Script,
}

/// The key names of one partition.
#[derive(Debug, Clone)]
pub struct Keys {
    tag: String,
}

impl Keys {
    fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tag)
    }
    fn timer_prefix(&self) -> String {
        self.key("t:")
    }
    fn slice_prefix(&self) -> String {
        self.key("s:")
    }
}

/// A command ready to apply: the validated op plus where it came from.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// Commands-topic partition.
    pub partition: i32,
    /// The partition epoch this instance holds.
    pub epoch: i64,
    /// Commands-topic offset; becomes the timer version on create.
    pub offset: i64,
    /// Timer id.
    pub timer_id: String,
    /// Request id.
    pub request_id: String,
    /// What to do.
    pub op: Op,
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// `accepted`, `duplicate`, `rejected` or `fenced`.
    pub code: String,
    /// Timer version, if the timer exists.
    pub version: Option<i64>,
    /// Timer state, if the timer exists.
    pub state: Option<String>,
    /// Timer due ms, if the timer exists.
    pub due_ms: Option<i64>,
    /// Reason of a rejection.
    pub reason: String,
}

/// A fire claimed from the store, to be delivered at `due_ms`.
#[derive(Debug, Clone)]
pub struct Fire {
    /// The in-flight member, `version:due:id`; the handle to acknowledge it.
    pub member: String,
    /// Timer id.
    pub timer_id: String,
    /// Timer version.
    pub version: i64,
    /// Due instant, Unix epoch ms.
    pub due_ms: i64,
    /// What to deliver.
    pub def: TimerDef,
}

/// The result of a claim: fires to deliver and when the next one is due.
#[derive(Debug)]
pub struct Claimed {
    /// Claimed fires, in due order.
    pub fires: Vec<Fire>,
    /// Due ms of the earliest fire still in the slices.
    pub next_due_ms: Option<i64>,
}

/// Handle to the Redis store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
    /// For the few blocking calls made from librdkafka's rebalance callback.
    client: redis::Client,
    scripts: std::sync::Arc<Scripts>,
    prefix: String,
    topic: String,
    retention_ms: i64,
}

impl Store {
    /// Connects to `url` and loads the scripts. Keys are `PREFIX:{topic:p}:...`.
    pub async fn connect(
        url: &str,
        prefix: &str,
        topic: &str,
        retention_ms: i64,
    ) -> Result<Store, StoreError> {
        let client = redis::Client::open(url)?;
        let conn = ConnectionManager::new(client.clone()).await?;
        let store = Store {
            conn,
            scripts: std::sync::Arc::new(Scripts {
                apply: Script::new(include_str!("apply.lua")),
                claim: Script::new(&[MISFIRE, include_str!("claim.lua")].concat()),
                ack: Script::new(include_str!("ack.lua")),
                recover: Script::new(&[MISFIRE, include_str!("recover.lua")].concat()),
                cron_due: Script::new(include_str!("cron_due.lua")),
                materialize: Script::new(include_str!("materialize.lua")),
                acquire: Script::new(include_str!("acquire.lua")),
                mark: Script::new(include_str!("mark.lua")),
            }),
            client,
            prefix: prefix.to_string(),
            topic: topic.to_string(),
            retention_ms,
        };
        store.load_scripts().await?;
        Ok(store)
    }

    async fn load_scripts(&self) -> Result<(), StoreError> {
        let s = &self.scripts;
        let mut p = redis::pipe();
        p.load_script(&s.apply)
            .load_script(&s.claim)
            .load_script(&s.ack)
            .load_script(&s.recover)
            .load_script(&s.cron_due)
            .load_script(&s.materialize)
            .load_script(&s.acquire)
            .load_script(&s.mark);
        let _: Vec<String> = p.query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Runs a pipeline of script calls; reloads the scripts once if Redis lost them.
    async fn run<T: redis::FromRedisValue>(&self, p: &Pipeline) -> Result<T, StoreError> {
        match p.query_async(&mut self.conn.clone()).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.load_scripts().await?;
                Ok(p.query_async(&mut self.conn.clone()).await?)
            }
            other => Ok(other?),
        }
    }

    /// Runs one script that answers a count, or -1 when `partition` is fenced.
    async fn counted(&self, partition: i32, inv: &ScriptInvocation<'_>) -> Result<i64, StoreError> {
        let mut p = redis::pipe();
        p.invoke_script(inv);
        let (n,): (i64,) = self.run(&p).await?;
        if n < 0 {
            return Err(StoreError::Fenced(partition));
        }
        Ok(n)
    }

    /// Runs one script that answers a list, or `{'fenced'}` when `partition` is fenced.
    async fn listed<T: redis::FromRedisValue + AsRef<[u8]>>(
        &self,
        partition: i32,
        inv: &ScriptInvocation<'_>,
    ) -> Result<Vec<T>, StoreError> {
        let mut p = redis::pipe();
        p.invoke_script(inv);
        let (reply,): (Vec<T>,) = self.run(&p).await?;
        if reply.first().map(|h| h.as_ref()) == Some(&b"fenced"[..]) {
            return Err(StoreError::Fenced(partition));
        }
        Ok(reply)
    }

    /// The key names of `partition`.
    pub fn keys(&self, partition: i32) -> Keys {
        Keys {
            tag: format!("{}:{{{}:{}}}", self.prefix, self.topic, partition),
        }
    }

    /// Takes ownership of `partition`: moves its epoch past every epoch handed out before
    /// (even before Redis lost its data), fencing the previous owner. Returns the new epoch.
    pub async fn acquire(&self, partition: i32) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.acquire.prepare_invoke();
        inv.key(k.key("epoch")).arg(crate::now_ms());
        let mut p = redis::pipe();
        p.invoke_script(&inv);
        let (epoch,): (i64,) = self.run(&p).await?;
        Ok(epoch)
    }

    /// What Redis holds about `partition`'s ownership: its epoch and applied offset.
    pub async fn partition_state(&self, partition: i32) -> Result<PartitionState, StoreError> {
        let k = self.keys(partition);
        let (epoch, applied): (Option<i64>, Option<i64>) = redis::pipe()
            .get(k.key("epoch"))
            .get(k.key("offset"))
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(PartitionState { epoch, applied })
    }

    /// The applied offsets of `partitions`, read with a blocking connection (for
    /// librdkafka's rebalance callback, which cannot await).
    pub fn applied_offsets_blocking(
        &self,
        partitions: &[i32],
        timeout: std::time::Duration,
    ) -> Result<Vec<Option<i64>>, StoreError> {
        let mut conn = self.client.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        let mut p = redis::pipe();
        for &part in partitions {
            p.get(self.keys(part).key("offset"));
        }
        Ok(p.query(&mut conn)?)
    }

    /// Applies commands in one pipeline (per-partition order is kept), then records per
    /// partition the highest offset handled (applied or rejected before Redis) under its
    /// epoch; `marks` are `(partition, epoch, offset)`. Returns what each command did and
    /// the partitions whose epoch moved (nothing was recorded for them).
    pub async fn apply(
        &self,
        reqs: &[ApplyRequest],
        marks: &[(i32, i64, i64)],
    ) -> Result<(Vec<Applied>, Vec<i32>), StoreError> {
        if reqs.is_empty() && marks.is_empty() {
            return Ok((vec![], vec![]));
        }
        // One script call per run of up to APPLY_CHUNK commands of one partition, in
        // offset order; `slots[c]` are the indexes in `reqs` of chunk c's commands.
        let mut slots: Vec<Vec<usize>> = Vec::new();
        let mut open: std::collections::HashMap<i32, usize> = Default::default();
        for (i, r) in reqs.iter().enumerate() {
            match open.get(&r.partition) {
                Some(&c) if slots[c].len() < APPLY_CHUNK => slots[c].push(i),
                _ => {
                    open.insert(r.partition, slots.len());
                    slots.push(vec![i]);
                }
            }
        }
        let mut p = redis::pipe();
        for chunk in &slots {
            let first = &reqs[chunk[0]];
            let k = self.keys(first.partition);
            let mut inv = self.scripts.apply.prepare_invoke();
            inv.key(k.key("epoch"))
                .key(k.key("offset"))
                .key(k.key("idx"))
                .key(k.key("inflight"))
                .key(k.key("cron"))
                .arg(first.epoch)
                .arg(self.retention_ms)
                .arg(k.slice_prefix());
            for &i in chunk {
                self.apply_args(&mut inv, &k, &reqs[i])?;
            }
            p.invoke_script(&inv);
        }
        for &(partition, epoch, offset) in marks {
            let k = self.keys(partition);
            let mut inv = self.scripts.mark.prepare_invoke();
            inv.key(k.key("epoch"))
                .key(k.key("offset"))
                .arg(epoch)
                .arg(offset);
            p.invoke_script(&inv);
        }
        let mut replies: Vec<redis::Value> = self.run(&p).await?;
        let codes = replies.split_off(slots.len());
        let bad = |e: redis::ParsingError| StoreError::Reply(e.to_string());
        let mut applied: Vec<Option<Applied>> = vec![None; reqs.len()];
        for (chunk, v) in slots.iter().zip(replies) {
            let row = Vec::<String>::from_redis_value(v).map_err(bad)?;
            if row.len() == 1 && row[0] == "fenced" {
                for &i in chunk {
                    applied[i] = Some(Applied {
                        code: "fenced".into(),
                        version: None,
                        state: None,
                        due_ms: None,
                        reason: "partition epoch moved: another instance owns it".into(),
                    });
                }
                continue;
            }
            if row.len() != 5 * chunk.len() {
                return Err(StoreError::Reply(format!(
                    "apply answered {} fields for {} commands",
                    row.len(),
                    chunk.len()
                )));
            }
            for (&i, one) in chunk.iter().zip(row.chunks(5)) {
                applied[i] = Some(parse_applied(one.to_vec())?);
            }
        }
        let applied = applied
            .into_iter()
            .map(|a| a.expect("every command answered"))
            .collect();
        let mut moved = Vec::new();
        for (m, v) in marks.iter().zip(codes) {
            if i64::from_redis_value(v).map_err(bad)? < 0 {
                moved.push(m.0);
            }
        }
        Ok((applied, moved))
    }

    /// Appends the argument group of one command to an apply invocation (see apply.lua).
    fn apply_args(
        &self,
        inv: &mut ScriptInvocation<'_>,
        k: &Keys,
        r: &ApplyRequest,
    ) -> Result<(), StoreError> {
        inv.key(format!("{}{}", k.timer_prefix(), r.timer_id))
            .arg(r.offset)
            .arg(op_name(&r.op))
            .arg(&r.timer_id)
            .arg(&r.request_id);
        let encode =
            |d: &TimerDef| codec::encode_stored(d).map_err(|e| StoreError::Reply(e.to_string()));
        let (schedule, def) = match &r.op {
            Op::Create { schedule, def } => (Some(schedule), encode(def)?),
            Op::Update { schedule, def } => (
                Some(schedule),
                def.as_ref().map(encode).transpose()?.unwrap_or_default(),
            ),
            _ => (None, vec![]),
        };
        let origin = match r.op {
            Op::Resume { origin_ms } => origin_ms,
            _ => 0,
        };
        match schedule {
            Some(Schedule::Once { due_ms }) => {
                inv.arg("o").arg(due_ms).arg(def);
                inv.arg("").arg("").arg("").arg("").arg("");
            }
            Some(Schedule::Cron {
                spec,
                first,
                next_ms,
            }) => {
                let sc =
                    serde_json::to_string(spec).map_err(|e| StoreError::Reply(e.to_string()))?;
                inv.arg("c")
                    .arg(next_ms.map(|d| d.to_string()).unwrap_or_default())
                    .arg(def)
                    .arg(sc)
                    .arg(misfire_code(spec.misfire))
                    .arg(spec.max_fires.map(|m| m.to_string()).unwrap_or_default())
                    .arg(first.covered_ms)
                    .arg(self.refill_at(first));
            }
            None => {
                inv.arg("").arg("").arg(def);
                inv.arg("").arg("").arg("").arg("").arg("");
            }
        }
        inv.arg(origin);
        match schedule {
            Some(Schedule::Cron { first, .. }) => {
                inv.arg(first.dues.len());
                for d in &first.dues {
                    inv.arg(d);
                }
            }
            _ => {
                inv.arg(0);
            }
        }
        Ok(())
    }

    /// When the migrator must extend a window materialised up to `o.covered_ms`: halfway
    /// there (so a window is always at least half full), or never (`""`) when exhausted.
    fn refill_at(&self, o: &Occurrences) -> String {
        if o.exhausted {
            return String::new();
        }
        let now = crate::now_ms();
        (now + (o.covered_ms - now).max(0) / 2).to_string()
    }

    /// Cron timers of `partition` whose window must be extended by `now_ms`, at most `limit`.
    pub async fn cron_due(
        &self,
        partition: i32,
        epoch: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<CronDue>, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.cron_due.prepare_invoke();
        inv.key(k.key("epoch"))
            .key(k.key("cron"))
            .arg(epoch)
            .arg(now_ms)
            .arg(limit)
            .arg(k.timer_prefix());
        let reply: Vec<String> = self.listed(partition, &inv).await?;
        let mut out = Vec::with_capacity(reply.len() / 4);
        for c in reply.chunks_exact(4) {
            let bad = || StoreError::Reply(format!("cron_due returned {c:?}"));
            out.push(CronDue {
                timer_id: c[0].clone(),
                version: c[1].parse().map_err(|_| bad())?,
                spec: serde_json::from_str(&c[2]),
                covered_ms: c[3].parse().map_err(|_| bad())?,
            });
        }
        Ok(out)
    }

    /// Materialises the occurrences the migrator computed, in one atomic call.
    pub async fn materialize(
        &self,
        partition: i32,
        epoch: i64,
        batch: &[(CronDue, Occurrences)],
    ) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.materialize.prepare_invoke();
        inv.key(k.key("epoch"))
            .key(k.key("idx"))
            .key(k.key("cron"))
            .key(k.key("inflight"))
            .arg(epoch)
            .arg(k.slice_prefix())
            .arg(k.timer_prefix())
            .arg(self.retention_ms);
        for (due, o) in batch {
            inv.arg(&due.timer_id)
                .arg(due.version)
                .arg(o.covered_ms)
                .arg(self.refill_at(o))
                .arg(o.dues.len());
            for d in &o.dues {
                inv.arg(d);
            }
        }
        self.counted(partition, &inv).await
    }

    /// Claims up to `limit` fires of `partition` due at or before `upto_ms`.
    /// Cron occurrences due before `missed_before_ms` were missed: their timer's misfire
    /// policy decides whether they fire.
    pub async fn claim(
        &self,
        partition: i32,
        epoch: i64,
        upto_ms: i64,
        limit: usize,
        missed_before_ms: i64,
    ) -> Result<Claimed, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.claim.prepare_invoke();
        inv.key(k.key("epoch"))
            .key(k.key("idx"))
            .key(k.key("inflight"))
            .key(k.key("cron"))
            .arg(epoch)
            .arg(upto_ms)
            .arg(limit)
            .arg(k.slice_prefix())
            .arg(k.timer_prefix())
            .arg(missed_before_ms)
            .arg(crate::now_ms())
            .arg(self.retention_ms);
        let reply: Vec<Vec<u8>> = self.listed(partition, &inv).await?;
        let mut it = reply.into_iter();
        let head = it.next().unwrap_or_default();
        let next_due_ms = std::str::from_utf8(&head)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .map(|f| f as i64);
        Ok(Claimed {
            fires: parse_fires(it)?,
            next_due_ms,
        })
    }

    /// Lists the in-flight fires of `partition`, to re-drive them after a takeover.
    /// Missed cron occurrences (due before `missed_before_ms`) obey their misfire policy.
    pub async fn recover(
        &self,
        partition: i32,
        epoch: i64,
        missed_before_ms: i64,
    ) -> Result<Vec<Fire>, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.recover.prepare_invoke();
        inv.key(k.key("epoch"))
            .key(k.key("inflight"))
            .key(k.key("cron"))
            .arg(epoch)
            .arg(k.timer_prefix())
            .arg(missed_before_ms)
            .arg(crate::now_ms())
            .arg(self.retention_ms);
        let reply: Vec<Vec<u8>> = self.listed(partition, &inv).await?;
        parse_fires(reply.into_iter())
    }

    /// Acknowledges delivered fires of `partition`; returns how many were still in flight.
    pub async fn ack(
        &self,
        partition: i32,
        epoch: i64,
        members: &[String],
    ) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.ack.prepare_invoke();
        inv.key(k.key("epoch"))
            .key(k.key("inflight"))
            .key(k.key("cron"))
            .arg(epoch)
            .arg(k.timer_prefix())
            .arg(self.retention_ms);
        for m in members {
            inv.arg(m);
        }
        self.counted(partition, &inv).await
    }

    /// Reads a timer's fields (for look-up); empty when unknown.
    pub async fn timer(
        &self,
        partition: i32,
        timer_id: &str,
    ) -> Result<std::collections::HashMap<String, Vec<u8>>, StoreError> {
        let k = self.keys(partition);
        Ok(redis::cmd("HGETALL")
            .arg(format!("{}{}", k.timer_prefix(), timer_id))
            .query_async(&mut self.conn.clone())
            .await?)
    }
}

/// What Redis holds about a partition's ownership.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionState {
    /// The current owner's epoch; `None` when Redis has no record of the partition.
    pub epoch: Option<i64>,
    /// The highest commands-topic offset handled; `None` when none was (or Redis lost it).
    pub applied: Option<i64>,
}

/// A cron timer whose materialised window must be extended.
#[derive(Debug)]
pub struct CronDue {
    /// Timer id.
    pub timer_id: String,
    /// Its version when read.
    pub version: i64,
    /// Its schedule (an error if the stored JSON is unreadable).
    pub spec: Result<CronSpec, serde_json::Error>,
    /// Occurrences up to this instant are materialised.
    pub covered_ms: i64,
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

fn parse_applied(row: Vec<String>) -> Result<Applied, StoreError> {
    let [code, version, state, due, reason]: [String; 5] = row
        .try_into()
        .map_err(|r| StoreError::Reply(format!("apply returned {r:?}")))?;
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Ok(Applied {
        code,
        version: version.parse().ok(),
        state: opt(&state),
        due_ms: due.parse().ok(),
        reason,
    })
}

/// Parses `member, definition` pairs into fires.
fn parse_fires(mut it: impl Iterator<Item = Vec<u8>>) -> Result<Vec<Fire>, StoreError> {
    let mut out = Vec::new();
    while let (Some(member), Some(def)) = (it.next(), it.next()) {
        let member = String::from_utf8(member).map_err(|e| StoreError::Reply(e.to_string()))?;
        let mut parts = member.splitn(3, ':');
        let (Some(v), Some(d), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(StoreError::Reply(format!("bad fire member {member}")));
        };
        let bad = |_| StoreError::Reply(format!("bad fire member {member}"));
        let version = v.parse().map_err(bad)?;
        let due_ms = d.parse().map_err(bad)?;
        let timer_id = id.to_string();
        let def = codec::decode_stored(&def).map_err(|e| StoreError::Reply(e.to_string()))?;
        out.push(Fire {
            member,
            timer_id,
            version,
            due_ms,
            def,
        });
    }
    Ok(out)
}
