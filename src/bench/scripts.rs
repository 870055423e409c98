//! Redis's time per script family over a phase, from Redis's own accounting: the slow
//! log records the execution time and arguments of every call that took at least
//! [`THRESHOLD_US`] (an FCALL names its script's function). A lower threshold would log
//! the calls scripts make too (hundreds per script call), which costs Redis time of
//! its own and floods the log; those are left out (their time is their script's), and
//! so are shorter calls (a small share: the report's "executed in all" against Redis's
//! CPU shows how much). A task drains the log four times a second; its previous
//! settings come back at the end.

use super::nodes::Nodes;
use crate::store::conn::Conn;
use redis::Value;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Entries the slow log keeps between drains.
const LOG_LEN: u64 = 65_536;

/// The shortest call logged, µs.
pub const THRESHOLD_US: u64 = 20;

/// Redis's execution time of one family (a script, or a plain command) over a phase.
#[derive(Debug, Clone, Serialize)]
pub struct Family {
    /// Script name (`apply`, `claim`, ...) or command name (`zrangebyscore`).
    pub name: String,
    /// Calls.
    pub calls: u64,
    /// Execution time in all, µs.
    pub us: u64,
    /// Execution time per item of the phase (command or fire), µs.
    pub us_per_item: f64,
}

/// Per node, the last slow-log id read; per family, (calls, µs); entries the log
/// dropped before a drain read them.
#[derive(Default)]
struct Tally {
    last_id: HashMap<String, i64>,
    families: BTreeMap<String, (u64, u64)>,
    missed: u64,
}

/// A running measurement; [`ScriptClock::finish`] ends it.
pub struct ScriptClock {
    conn: Conn,
    saved: Vec<(String, String)>,
    tally: Arc<Mutex<Tally>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptClock {
    /// Logs every command on every primary from now on.
    pub async fn start(nodes: &Nodes) -> anyhow::Result<ScriptClock> {
        let mut conn = nodes.conn.clone();
        let mut saved = Vec::new();
        for name in ["slowlog-log-slower-than", "slowlog-max-len"] {
            let replies = conn
                .per_primary(redis::cmd("CONFIG").arg("GET").arg(name))
                .await?;
            let value = replies
                .into_iter()
                .find_map(|(_, v)| redis::from_redis_value::<Vec<String>>(v).ok()?.pop());
            saved.push((name.to_string(), value.unwrap_or_default()));
        }
        set(
            &mut conn,
            &[("slowlog-log-slower-than", THRESHOLD_US.to_string())],
        )
        .await?;
        set(&mut conn, &[("slowlog-max-len", LOG_LEN.to_string())]).await?;
        conn.per_primary(redis::cmd("SLOWLOG").arg("RESET")).await?;
        let tally = Arc::new(Mutex::new(Tally::default()));
        let stop = CancellationToken::new();
        let names: HashMap<String, &'static str> =
            crate::store::script_names().into_iter().collect();
        let task = tokio::spawn(drain_every(
            conn.clone(),
            names,
            tally.clone(),
            stop.clone(),
        ));
        Ok(ScriptClock {
            conn,
            saved,
            tally,
            stop,
            task,
        })
    }

    /// Ends the measurement (a last drain, the log emptied and its settings restored);
    /// answers the families by time, most first, per one of `items`, and how many
    /// entries were missed.
    pub async fn finish(mut self, items: usize) -> anyhow::Result<(Vec<Family>, u64)> {
        self.stop.cancel();
        let _ = (&mut self.task).await;
        let saved: Vec<(&str, String)> = self
            .saved
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        set(&mut self.conn, &saved).await?;
        self.conn
            .per_primary(redis::cmd("SLOWLOG").arg("RESET"))
            .await?;
        let tally = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<Family> = tally
            .families
            .iter()
            .map(|(name, &(calls, us))| Family {
                name: name.clone(),
                calls,
                us,
                us_per_item: (us as f64 / items.max(1) as f64 * 10.0).round() / 10.0,
            })
            .collect();
        out.sort_by_key(|f| std::cmp::Reverse(f.us));
        Ok((out, tally.missed))
    }
}

async fn set(conn: &mut Conn, pairs: &[(&str, String)]) -> anyhow::Result<()> {
    for (name, value) in pairs {
        if !value.is_empty() {
            conn.per_primary(redis::cmd("CONFIG").arg("SET").arg(*name).arg(value))
                .await?;
        }
    }
    Ok(())
}

/// Drains the slow logs every 250 ms until `stop`, and once more after it.
async fn drain_every(
    mut conn: Conn,
    names: HashMap<String, &'static str>,
    tally: Arc<Mutex<Tally>>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let last = tokio::select! {
            _ = stop.cancelled() => true,
            _ = tick.tick() => false,
        };
        // Newest first: ask for more until the oldest answered was seen before.
        let mut count = 256;
        loop {
            let mut get = redis::cmd("SLOWLOG");
            get.arg("GET").arg(count);
            let Ok(replies) = conn.per_primary(&get).await else {
                break;
            };
            let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
            let mut short = false;
            for (node, v) in &replies {
                let (len, oldest) = oldest_id(v);
                let seen = t.last_id.get(node).copied();
                let older_left = seen.is_none_or(|s| oldest.is_some_and(|o| o > s + 1));
                short |= len == count && older_left && count < LOG_LEN;
            }
            if short {
                count = (count * 4).min(LOG_LEN);
                continue;
            }
            for (node, v) in replies {
                take(&mut t, &node, v, &names);
            }
            break;
        }
        if last {
            return;
        }
    }
}

/// The number of entries of a `SLOWLOG GET` reply and the id of the oldest (its last).
fn oldest_id(reply: &Value) -> (u64, Option<i64>) {
    let Value::Array(entries) = reply else {
        return (0, None);
    };
    let id = match entries.last() {
        Some(Value::Array(e)) => e
            .first()
            .and_then(|i| redis::from_redis_value(i.clone()).ok()),
        _ => None,
    };
    (entries.len() as u64, id)
}

/// Adds the entries of one node's `SLOWLOG GET` reply not seen before.
fn take(t: &mut Tally, node: &str, reply: Value, names: &HashMap<String, &'static str>) {
    let Ok(entries) = redis::from_redis_value::<Vec<Value>>(reply) else {
        return;
    };
    // The ids go on across SLOWLOG RESET: the first read of a node knows no gap.
    let known = t.last_id.get(node).copied();
    let seen = known.unwrap_or(-1);
    let mut newest = seen;
    let mut oldest_new = i64::MAX;
    for e in entries {
        let Some((id, us, args)) = parse_entry(e) else {
            continue;
        };
        if id <= seen {
            continue;
        }
        newest = newest.max(id);
        oldest_new = oldest_new.min(id);
        if let Some(name) = family(&args, names) {
            let f = t.families.entry(name).or_default();
            f.0 += 1;
            f.1 += us;
        }
    }
    if known.is_some() && oldest_new != i64::MAX && oldest_new > seen + 1 {
        t.missed += (oldest_new - seen - 1) as u64;
    }
    t.last_id.insert(node.to_string(), newest);
}

/// A slow-log entry's id, duration (µs) and arguments (`id, time, duration, args,
/// client address, client name`); no arguments for a call a script made (client `?:0`).
fn parse_entry(e: Value) -> Option<(i64, u64, Vec<Value>)> {
    let Value::Array(mut items) = e else {
        return None;
    };
    if items.len() < 4 {
        return None;
    }
    let id = redis::from_redis_value(items[0].clone()).ok()?;
    let us = redis::from_redis_value(items[2].clone()).ok()?;
    let client: Option<String> = items
        .get(4)
        .and_then(|c| redis::from_redis_value(c.clone()).ok());
    let args = match items.swap_remove(3) {
        Value::Array(a) if client.as_deref() != Some("?:0") => a,
        _ => vec![],
    };
    Some((id, us, args))
}

/// The family of a logged command: its script's name for an FCALL, else the command
/// (lower case); none for the bench's own commands.
fn family(args: &[Value], names: &HashMap<String, &'static str>) -> Option<String> {
    let arg = |i: usize| -> Option<String> { redis::from_redis_value(args.get(i)?.clone()).ok() };
    let cmd = arg(0)?.to_ascii_lowercase();
    match cmd.as_str() {
        "slowlog" | "info" | "config" => None,
        "fcall" | "fcall_ro" => {
            let function = arg(1)?;
            Some(
                names
                    .get(&function)
                    .map_or("script ?".into(), |n| n.to_string()),
            )
        }
        _ => Some(cmd),
    }
}

/// Redis's execution time per script family (and plain command) over a phase.
#[derive(Debug, Clone, Serialize)]
pub struct ByScript {
    /// The families, most time first.
    pub families: Vec<super::scripts::Family>,
    /// Slow-log entries dropped before they were read (their time is not counted).
    pub missed: u64,
}

impl ByScript {
    /// `apply 12.1 (1000 calls), claim ...`: the families above 0.1 µs per item.
    pub fn line(&self) -> String {
        let mut parts: Vec<String> = self
            .families
            .iter()
            .filter(|f| f.us_per_item >= 0.1)
            .map(|f| format!("{} {:.1} ({} calls)", f.name, f.us_per_item, f.calls))
            .collect();
        let total: f64 = self.families.iter().map(|f| f.us_per_item).sum();
        parts.push(format!(
            "executed in all {total:.1} µs (calls of {THRESHOLD_US} µs or more)"
        ));
        if self.missed > 0 {
            parts.push(format!("{} calls missed", self.missed));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: i64, us: u64, args: &[&str]) -> Value {
        logged(id, us, args, "127.0.0.1:5000")
    }

    fn logged(id: i64, us: u64, args: &[&str], client: &str) -> Value {
        let args = args
            .iter()
            .map(|a| Value::BulkString(a.as_bytes().to_vec()));
        Value::Array(vec![
            Value::Int(id),
            Value::Int(0),
            Value::Int(us as i64),
            Value::Array(args.collect()),
            Value::BulkString(client.as_bytes().to_vec()),
            Value::BulkString(vec![]),
        ])
    }

    #[test]
    fn entries_are_counted_once_per_family_and_gaps_are_missed() {
        let names = HashMap::from([("ktimer_apply_abc".to_string(), "apply")]);
        let mut t = Tally::default();
        let first = Value::Array(vec![
            entry(11, 30, &["FCALL", "ktimer_apply_abc", "1"]),
            entry(10, 10, &["GET", "k"]),
        ]);
        assert_eq!(oldest_id(&first), (2, Some(10)));
        take(&mut t, "redis", first.clone(), &names);
        take(&mut t, "redis", first, &names);
        assert_eq!(t.missed, 0, "a node's first read knows no gap");
        let later = Value::Array(vec![
            entry(16, 7, &["SLOWLOG", "GET"]),
            logged(15, 25, &["zadd", "k", "1", "m"], "?:0"),
            entry(14, 5, &["get"]),
        ]);
        take(&mut t, "redis", later, &names);
        assert_eq!(t.families["apply"], (1, 30));
        assert_eq!(t.families["get"], (2, 15));
        assert!(!t.families.contains_key("slowlog"));
        assert!(
            !t.families.contains_key("zadd"),
            "a script's own calls are its time"
        );
        assert_eq!(t.missed, 2, "ids 12 and 13 were never read");
    }
}
