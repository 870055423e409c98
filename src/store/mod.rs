//! The Redis store: timers, minute slices, the in-flight set, offsets and epochs.
//!
//! Every key of commands-topic partition `p` carries the hash tag `{topic:p}`, so one
//! partition lives in one Redis Cluster slot and every Lua script touches one slot
//! (names in [`keys`], one Rust copy):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `PREFIX:{topic:p}:r` | hash | the bucket: scheduled one-shot timers due after the promoted minute, field the id, value the timer's fields packed with MessagePack (`record.lua`); one hash per partition, a hash table in Redis once it outgrows the compact encoding (`place.lua`) |
//! | `PREFIX:{topic:p}:rb` | hash | the bucket's meta: the promoted minute `pm` and its cursor `pc` (`promote.lua`) |
//! | `PREFIX:{topic:p}:t:ID` | string | every other timer, packed the same way: one-shot timers due soon (promoted ahead by the migrator), cron and paused timers, and done ones (fired, cancelled, completed, dead-lettered), which expire after the retention; fields in [`keys::field`]: `v` version, `st` state, `rq` last request id, `k` kind (`o` one-shot, `c` cron), `due`, `d` definition; cron: `sc` spec (JSON), `mp` misfire, `mx` max fires, `n` fires claimed, `hz` materialised through, `lst` last materialised, `fin` final occurrence, `lf` last late fire, `last` last fired; dead letters: `dl` count, `dlr` last due, `dlx` last reason; `h` the history, `lx` the last fire (entries, `record.lua`) |
//! | `PREFIX:{topic:p}:dp` | hash | definition prefixes (application and callback topic) shared by the records: `#N` the prefix, `=PREFIX` its number N; a record's `d` is `{N, rest}` (`record.lua`), at most 4096 prefixes per partition |
//! | `PREFIX:{topic:p}:s:MINUTE` | zset | fires due in that minute, score due ms: member the id of a one-shot timer, `\x01version:due:id` for a cron occurrence |
//! | `PREFIX:{topic:p}:idx` | zset | the minutes whose slice is not empty |
//! | `PREFIX:{topic:p}:pk:APP` | zset | pending fires of paced application `APP` (`apply.lua` places them here, not in the slices; `claim.lua` moves a due slice member there when `APP` is over its quota), as slice members scored by due; claimed first, at the quota |
//! | `PREFIX:{topic:p}:pk` | zset | the applications with parked fires, scored at most by their first parked fire (the checkpoint's watermark stays below it) |
//! | `PREFIX:{topic:p}:inflight` | zset | fires claimed and not yet acknowledged by the broker: member `version:due:id`, score the due (plus 0.5 for a parked one-shot fire); a one-shot timer whose record the claim answered reads fired while its member is here (`rec_view`, `place.lua`) |
//! | `PREFIX:{topic:p}:firedq` | list | one-shot fires delivered without their records written (`landed.lua`; such a record reads fired once its timer is in no slice, parked set or the in-flight set: `rec_view`, `place.lua`), one packed entry per acknowledgement call (its latest time, then its in-flight members): the checkpoint deletes those records from the head once the retention has passed |
//! | `PREFIX:{topic:p}:late:MINUTE` | zset | one entry per claim that took one-shot fires due in that minute more than a second after their due (a backlog): the first such fire's `due:id` (the due 13 digits), then the claim's time (ms), all scored 0 (read by lexical range): `rec_view` reads an unwritten record of such a fire as released then (`claim.lua`, `late.lua`); expires a minute after the retention from its last entry |
//! | `PREFIX:{topic:p}:cron` | zset | scheduled cron timers, scored by when their window must be extended |
//! | `PREFIX:{topic:p}:offset` | string | highest commands-topic offset handled (written with every apply); behind the committed offset means Redis lost data |
//! | `PREFIX:{topic:p}:epoch` | string | moved by each new owner past every earlier epoch; every script checks it (fencing) |
//! | `PREFIX:{topic:p}:drain` | zset | epochs of owners whose producer still holds fires of the partition that the broker has not answered (cut from the broker): refreshed every 0.5 s, gone 2 s after the last refresh; the next owner applies no command while it exists |
//! | `PREFIX:{topic:p}:dirty` | zset | timers changed since the last checkpoint (their state goes to the state topic), scored by the first command that changed them (`inf`: a fire) |
//! | `PREFIX:{topic:p}:deferred:off` | zset | one-shot timers never written and due within 10 s, by first command offset: written only if still scheduled 5 s after due; the checkpoint's command offset stays below them |
//! | `PREFIX:{topic:p}:writing` | hash | the states the intake is writing and has not confirmed: per apply call, field its first command offset, value the timer ids one per line (`writing.lua`); the checkpoint's command offset stays below them |
//! | `PREFIX:{topic:p}:pending` | set | timers of a checkpoint page whose records are not confirmed yet |
//! | `PREFIX:{topic:p}:owed` | list | tombstones owed by written one-shot timers whose fires landed, no command since: one entry per `landed.lua` call, `COUNT TIME N` (its acknowledgement count, when its last fire was produced, how many ids) then the ids, one per line (`owed.lua`) |
//! | `PREFIX:{topic:p}:owed:p` | list | the `owed` entries a checkpoint page took, until its records are confirmed |
//! | `PREFIX:{topic:p}:revived` | zset | timers a command created again after a fire, scored by the acknowledgement count then: an `owed` entry's tombstone of such a timer from that count or before no longer holds |
//! | `PREFIX:{topic:p}:acks` | string | acknowledgement calls so far: a checkpoint is due when it moved |
//! | `PREFIX:{topic:p}:ac` | hash | timers per state and application, field `STATE:APP`: scheduled and paused now; done states since the partition's last rebuild (`record.lua`) |
//! | `PREFIX:{topic:p}:apps` | hash | live (scheduled or paused) timers per application: every script that makes a timer live or done moves it (`max_pending`) |
//! | `PREFIX:{topic:p}:fmt` | string | the layout version ([`STORE_FORMAT`]) the partition was rebuilt in; another means a rebuild on the next takeover |
//! | `PREFIX:{topic:p}:ckpt` | string | sequence of the last checkpoint confirmed in the state topic; older than the owner's means Redis came back from older data |
//! | `PREFIX:{topic:p}:fence` | hash | left by a rebuild: the restored checkpoint's applied offset `a`, fire watermark `w` and `f:MEMBER` per fire it listed in flight; a replayed command's fire under both and not listed was acknowledged already and is not claimed again |
//!
//! One file per script family: [`apply`] (commands and offset marks; runs of new one-shot
//! timers by `create.lua`, the rest by `apply.lua`), [`fires`] (claim,
//! recover), [`ack`] (acknowledge: fires whose claim answered their record by `landed.lua`, [`landed`], else `ack.lua`), [`cron`] (the migrator's window), [`epoch`] (ownership),
//! [`state`] (checkpoints and restoring from the state topic), [`view`] (the admin
//! port's typed look-up, with [`history`]) and [`list`] (its listing and counts). The
//! scripts are in `src/store/*.lua`, one Redis Functions library ([`scripts`]) loaded
//! into Redis once at start (and again only if Redis lost it).

mod ack;
mod apply;
pub mod conn;
mod cron;
mod epoch;
mod fires;
mod fresh;
pub mod guard;
mod history;
pub mod keys;
mod landed;
mod list;
mod packed;
mod prefixes;
mod record;
mod scripts;
mod state;
mod view;

pub use ack::Ack;
pub use apply::{ApplyResult, Mark, Written};
pub use cron::CronDue;
pub use epoch::PartitionState;
pub use fires::ClaimWindow;
pub use fresh::FreshState;
pub use history::{EntryOutcome, HistoryEntry};
pub use keys::Keys;
pub use landed::{landed, Landed};
pub use list::{ListFilter, TimerSummary};
pub use state::{CheckpointPage, Restore, Restored, PAGE_BYTES};
pub use view::{DeadLetters, Overdue, TimerView};

use crate::retry::Retryable;
use conn::{Client, Conn};
use redis::Pipeline;
pub use scripts::script_names;
use scripts::Call;
use scripts::Scripts;
use std::sync::Arc;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis failed; see [`Retryable::is_retryable`].
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Another instance owns the partition now (its epoch moved). Not retryable.
    #[error("partition {0} is fenced: another instance owns it")]
    Fenced(i32),
    /// A script returned something this code does not understand. Not retryable.
    #[error("unexpected reply from Redis: {0}")]
    Reply(String),
    /// Redis has no Functions (older than 7.0). Not retryable.
    #[error("Redis 7.0 or later is required (its Functions hold ktimer's scripts): {0}")]
    Unsupported(String),
}

impl Retryable for StoreError {
    /// Connection trouble, Redis loading its data, a cluster slot moving or failing over
    /// (TRYAGAIN, MOVED/ASK the client did not follow, CLUSTERDOWN, MASTERDOWN, READONLY
    /// from a demoted primary): yes.
    fn is_retryable(&self) -> bool {
        use redis::{ErrorKind, ServerErrorKind as S};
        match self {
            StoreError::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || e.is_connection_refusal()
                    || matches!(
                        e.kind(),
                        ErrorKind::Server(
                            S::BusyLoading
                                | S::TryAgain
                                | S::Moved
                                | S::Ask
                                | S::ClusterDown
                                | S::MasterDown
                                | S::ReadOnly
                        )
                    )
            }
            _ => false,
        }
    }
}

impl StoreError {
    /// Whether this is [`StoreError::Fenced`] (the end of a partition's tasks).
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced(_))
    }

    /// Whether a script failed on its input: Redis answered an error raised while one of
    /// ktimer's functions ran (a Lua error, or a command the script called refusing its
    /// arguments), which the same call meets on every try. Redis refusing for now (out
    /// of memory, not persisting, busy, loading, a cluster moving) and connection trouble
    /// are not: those are retried.
    pub fn is_poison(&self) -> bool {
        let StoreError::Redis(e) = self else {
            return false;
        };
        const FOR_NOW: [&str; 8] = [
            "OOM",
            "MISCONF",
            "BUSY",
            "LOADING",
            "NOREPLICAS",
            "NOSCRIPT",
            "READONLY",
            "TRYAGAIN",
        ];
        if self.is_retryable() {
            return false;
        }
        // One error, or a pipeline's: every call that failed failed in a function.
        let Some(errors) = e.clone().into_server_errors() else {
            return false;
        };
        !errors.is_empty()
            && errors.iter().all(|(_, s)| {
                !FOR_NOW.contains(&s.code())
                    && s.details().is_some_and(|d| d.contains("@user_function"))
            })
    }
}

/// The layout version of the keys this code writes (`keys::Keys::format`). A partition
/// whose keys carry another (or none, from before version 2: one hash per timer) is wiped
/// and rebuilt from the state topic when an instance takes it.
/// Version 3 added the history (`h`) and the last fire (`lx`) to the packed record;
/// version 4 numbered definition prefixes (`dp`), so an older instance that takes the
/// partition back rebuilds it instead of reading a definition it does not know;
/// version 5 keeps the pending records in one hash per partition (`r`) instead of
/// buckets split by linear hashing (`r:B`); version 6 keeps the intake's unconfirmed
/// state writes as one hash entry per apply call (`writing` was a zset of timers) and the
/// deferred timers by offset only (the set by due is gone); version 7 records a one-shot
/// fire as done at its claim (a fire under way reads fired while it is in flight), so an
/// older instance that takes the partition back rebuilds it instead of dropping those
/// fires as done; version 8 writes no record at the claim nor at the acknowledgement of
/// such a fire (its record reads fired once out of its slice), so an older
/// instance, which would read those timers scheduled, rebuilds the partition; version 9
/// keeps the tombstones such fires owe in a list (`owed`), which an older instance would
/// never write.
pub const STORE_FORMAT: i64 = 9;

/// Handle to the Redis store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    conn: Conn,
    /// For new connections and the few blocking calls made from librdkafka's rebalance
    /// callback.
    client: Client,
    scripts: Arc<Scripts>,
    /// The definition prefix numbers learnt per partition (create.lua's records).
    prefixes: Arc<prefixes::Prefixes>,
    prefix: String,
    topic: String,
    retention_ms: i64,
    history: History,
    /// Script call latency by operation, when instrumented.
    calls: Option<prometheus::HistogramVec>,
}

/// How much of a timer's history its record keeps (`record.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History {
    /// The last this many entries (commands and fires); 0 keeps none.
    pub entries: u32,
    /// None older than this, ms.
    pub ttl_ms: i64,
}

impl Default for History {
    /// 20 entries, a week.
    fn default() -> History {
        History {
            entries: 20,
            ttl_ms: 7 * 24 * 3_600_000,
        }
    }
}

impl Store {
    /// Connects to `url` and loads the scripts. Keys are `PREFIX:{topic:p}:...`; fired
    /// and cancelled timers stay `retention_ms` for look-up and de-duplication.
    pub async fn connect(
        url: &str,
        prefix: &str,
        topic: &str,
        retention_ms: i64,
    ) -> Result<Store, StoreError> {
        let client = Client::open(url).await?;
        let conn = client.connect().await?;
        let store = Store {
            conn,
            scripts: Arc::new(Scripts::new()),
            prefixes: Arc::default(),
            client,
            prefix: prefix.to_string(),
            topic: topic.to_string(),
            retention_ms,
            history: History::default(),
            calls: None,
        };
        store.load_scripts().await?;
        Ok(store)
    }

    /// The same store (connection, scripts) for the partitions of another commands topic
    /// (a lane of its own, [`crate::lanes`]).
    pub fn for_topic(&self, topic: &str) -> Store {
        Store {
            topic: topic.to_string(),
            ..self.clone()
        }
    }

    /// The commands topic whose partitions this handle reads and writes.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The same store on a connection of its own.
    pub async fn dedicated(&self) -> Result<Store, StoreError> {
        Ok(Store {
            conn: self.client.connect().await?,
            ..self.clone()
        })
    }

    /// Loads the scripts' library into every primary (Redis 7.0 or later: Functions).
    async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&self.scripts.library);
        match self.conn.clone().on_primaries(&load).await {
            Err(e) if e.to_string().contains("unknown command") => {
                Err(StoreError::Unsupported(e.to_string()))
            }
            other => Ok(other.map(drop)?),
        }
    }

    /// Whether the store is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.client.is_cluster()
    }

    /// The key names of `partition`.
    pub fn keys(&self, partition: i32) -> Keys {
        Keys::new(&self.prefix, &self.topic, partition)
    }

    /// The same store, keeping `history` of each timer.
    pub fn with_history(mut self, history: History) -> Store {
        self.history = history;
        self
    }

    /// The same store, timing its script calls into `calls` (label `op`).
    pub fn instrumented(mut self, calls: prometheus::HistogramVec) -> Store {
        self.calls = Some(calls);
        self
    }

    /// Runs a pipeline of script calls of operation `op`, timed; loads the library again
    /// (once) if Redis does not have it.
    async fn run<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        p: &Pipeline,
    ) -> Result<T, StoreError> {
        let _timer = self
            .calls
            .as_ref()
            .map(|h| h.with_label_values(&[op]).start_timer());
        match p.query_async(&mut self.conn.clone()).await {
            Err(e) if scripts::is_missing_function(&e) => {
                self.load_scripts().await?;
                Ok(p.query_async(&mut self.conn.clone()).await?)
            }
            other => Ok(other?),
        }
    }

    /// Runs one script that answers a count, or -1 when `partition` is fenced.
    async fn counted(
        &self,
        op: &'static str,
        partition: i32,
        inv: Call<'_>,
    ) -> Result<i64, StoreError> {
        let mut p = redis::pipe();
        inv.add_to(&mut p);
        let (n,): (i64,) = self.run(op, &p).await?;
        if n < 0 {
            return Err(StoreError::Fenced(partition));
        }
        Ok(n)
    }

    /// Runs one script that answers a list (packed, [`packed`], or not), or `{'fenced'}`
    /// when `partition` is fenced.
    async fn listed<T: redis::FromRedisValue + AsRef<[u8]>>(
        &self,
        op: &'static str,
        partition: i32,
        inv: Call<'_>,
    ) -> Result<Vec<T>, StoreError> {
        let mut p = redis::pipe();
        inv.add_to(&mut p);
        let (reply,): (redis::Value,) = self.run(op, &p).await?;
        let reply: Vec<T> = packed::items(reply)?;
        if reply.first().map(|h| h.as_ref()) == Some(&b"fenced"[..]) {
            return Err(StoreError::Fenced(partition));
        }
        Ok(reply)
    }
}

/// A reply that does not parse.
fn bad_reply(what: impl std::fmt::Display) -> StoreError {
    StoreError::Reply(what.to_string())
}
