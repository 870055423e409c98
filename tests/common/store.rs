//! A store on its own key prefix with partition 0 acquired, and the time as an argument:
//! the harness of the store-level tests (`store.rs`, `state.rs`, `create.rs`, `landed.rs`,
//! `fired_records.rs`),
//! and what they read back: records as record.lua reads them, the fire bookkeeping, a
//! checkpoint page's timers; the commands they apply.

use super::{servers, unique};
use ktimer::command::{CommandKind, TimerCommand};
use ktimer::store::{Ack, CheckpointPage, Store};
use ktimer::timer::{Applied, ApplyRequest, Claimed, Fire};
use ktimer::validate::{validate, Limits};

/// A whole minute (2027-01-15T08:00:00Z), so cron occurrences line up with it.
pub const T0: i64 = 1_800_000_000_000;

/// A store on its own key prefix, partition 0 acquired.
pub struct World {
    pub store: Store,
    /// The store's key prefix.
    pub prefix: String,
    pub epoch: i64,
    pub offset: i64,
}

impl World {
    pub async fn new(name: &str) -> World {
        let prefix = unique(name);
        let store = Store::connect(&servers().redis_url, &prefix, "cmds", 60_000)
            .await
            .expect("redis");
        let epoch = store.acquire(0, T0).await.expect("acquire");
        World {
            store,
            prefix,
            epoch,
            offset: 0,
        }
    }

    /// Validates `cmd` (recorded and applied at `now`) and applies it.
    pub async fn apply(&mut self, cmd: TimerCommand, now: i64) -> Applied {
        let req = self.request(cmd, now);
        let (mut applied, _) = self.store.apply(&[req], &[], now).await.expect("apply");
        applied.remove(0)
    }

    /// The apply request of `cmd` as the next record of the partition.
    pub fn request(&mut self, cmd: TimerCommand, now: i64) -> ApplyRequest {
        let op = validate(
            &cmd,
            Some(cmd.timer_id.as_bytes()),
            now,
            now,
            &Limits::default(),
        )
        .expect("valid command");
        self.offset += 1;
        ApplyRequest {
            max_pending: None,
            paced: false,
            partition: 0,
            epoch: self.epoch,
            offset: self.offset,
            timer_id: cmd.timer_id.clone(),
            request_id: format!("r{}", self.offset),
            application: cmd.application.clone(),
            op,
        }
    }

    /// A plain connection to the test Redis (to look at the keys themselves).
    pub async fn redis(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(servers().redis_url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis")
    }

    /// Claims at `upto` until nothing more is due; the fires per timer id.
    pub async fn claim_all(&self, upto: i64) -> std::collections::BTreeMap<String, usize> {
        let mut fired = std::collections::BTreeMap::new();
        loop {
            let c = self.claim(upto, upto).await;
            if c.fires.is_empty() {
                return fired;
            }
            for f in c.fires {
                *fired.entry(f.timer_id).or_default() += 1;
            }
        }
    }

    pub async fn claim(&self, upto: i64, now: i64) -> ktimer::timer::Claimed {
        let missed_before = now - Limits::default().plan.misfire_threshold_ms;
        self.store
            .claim(0, self.epoch, window(upto, missed_before, now))
            .await
            .expect("claim")
    }
}

/// A claim of up to 1000 fires due up to `upto`, at `now`, by an owner with no checkpoint.
pub fn window(upto: i64, missed_before: i64, now: i64) -> ktimer::store::ClaimWindow {
    ktimer::store::ClaimWindow {
        upto_ms: upto,
        limit: 1000,
        max_bytes: usize::MAX,
        quotas: Vec::new(),
        missed_before_ms: missed_before,
        now_ms: now,
        checkpoint: 0,
    }
}

/// The lean acknowledgements of a claim's fires, produced at `at` (each answered its
/// record: the claim took it as fired; `landed.lua`).
pub fn landed(claimed: &Claimed, at: i64) -> Vec<Ack> {
    let one = |f: &Fire| {
        let taken = f.taken.expect("the claim took it as fired");
        Ack::Landed(ktimer::store::landed(f.clone(), taken, at, 1))
    };
    claimed.fires.iter().map(one).collect()
}

/// Claims what is due at `upto` at `now`, the timers' records on their own keys first
/// (promoted, as the owner does ahead of their minute).
pub async fn claim_promoted(w: &World, upto: i64, now: i64) -> Claimed {
    while w.store.promote(0, w.epoch, upto, 100).await.unwrap() {}
    w.claim(upto, now).await
}

/// One confirmed checkpoint page of up to 100 timers listing up to 100 fires in flight.
pub async fn page(w: &World, now: i64) -> CheckpointPage {
    let page = (w.store)
        .checkpoint_page((0, w.epoch, 0), now, (100, 100))
        .await
        .expect("checkpoint");
    (w.store)
        .checkpointed((0, w.epoch, 0), None)
        .await
        .expect("confirm");
    page
}

/// Runs `body` after record.lua and place.lua (the records' Lua side) for partition 0 of
/// `w`'s store: `ARGV[1]` is the timer id.
pub fn records_lua(w: &World, id: &str, body: &str) -> redis::Value {
    let code = [
        include_str!("../../src/store/record.lua"),
        include_str!("../../src/store/late.lua"),
        include_str!("../../src/store/place.lua"),
        "rec_fresh() rec_init(KEYS[1], '60000', nil)\n",
        body,
    ]
    .concat();
    let mut con = redis::Client::open(servers().redis_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("EVAL")
        .arg(code)
        .arg(1)
        .arg(format!("{}:{{cmds:0}}:", w.prefix))
        .arg(id)
        .query(&mut con)
        .expect("eval")
}

/// The packed record of timer `id` (own key or bucket).
pub fn stored_bytes(w: &World, id: &str) -> Vec<u8> {
    let v = records_lua(
        w,
        id,
        "local s = redis.call('GET', REC.base .. 't:' .. ARGV[1]) \
         if s then return s end \
         return redis.call('HGET', REC.bucket, ARGV[1])",
    );
    bytes(&v)
}

/// The record of timer `id` as every script reads it (`rec_raw`: a fire taken by its
/// claim makes it read fired), packed again; empty when Redis has none.
pub fn viewed_bytes(w: &World, id: &str) -> Vec<u8> {
    let v = records_lua(
        w,
        id,
        "local a = rec_raw(ARGV[1]) if a then return cmsgpack.pack(a) end return ''",
    );
    bytes(&v)
}

/// A string reply as bytes.
pub fn bytes(v: &redis::Value) -> Vec<u8> {
    redis::from_redis_value(v.clone()).expect("a string")
}

/// What one partition's fire bookkeeping holds: counts per state and application, live
/// counts, the dirty, deferred and in-flight sets.
pub async fn bookkeeping(w: &World) -> Vec<Vec<String>> {
    let k = ktimer::store::Keys::new(&w.prefix, "cmds", 0);
    let mut con = w.redis().await;
    let mut out = Vec::new();
    for key in [k.states(), k.apps()] {
        let h: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut con)
            .await
            .unwrap();
        out.push(h.into_iter().map(|(f, v)| format!("{f}={v}")).collect());
    }
    for key in [k.dirty(), k.deferred(), k.inflight()] {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut con)
            .await
            .unwrap();
        out.push(members);
    }
    out
}

/// A one-shot create of timer `id` of application `app`, due at `at` (request id "r").
pub fn once_of(app: &str, id: &str, at: i64) -> TimerCommand {
    TimerCommand {
        application: app.into(),
        at_ms: Some(at),
        ..TimerCommand::new(CommandKind::CreateOnce, id, "r")
    }
}

/// Command `kind` (no schedule) of application `app` for timer `id` (request id "r").
pub fn op_of(app: &str, kind: CommandKind, id: &str) -> TimerCommand {
    TimerCommand {
        application: app.into(),
        ..TimerCommand::new(kind, id, "r")
    }
}

/// A checkpoint page's timers, sorted: (id, whether it has fields; false: a tombstone).
pub fn page_ids(page: &CheckpointPage) -> Vec<(&str, bool)> {
    let mut v: Vec<_> = page
        .timers
        .iter()
        .map(|(id, f)| (id.as_str(), f.is_some()))
        .collect();
    v.sort();
    v
}
