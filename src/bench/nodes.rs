//! What the bench reads from Redis: memory and CPU of every primary (one server, or each
//! primary of a cluster), and deleting the run's keys.

use crate::store::conn::{Client, Conn};
use anyhow::Context;
use redis::Value;
use serde::Serialize;
use std::collections::HashMap;

/// One primary's counters at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// `host:port` (`redis` for a single server).
    pub node: String,
    /// `used_memory`, bytes.
    pub used_memory: u64,
    /// `used_cpu_sys + used_cpu_user`, seconds, less the time of the bench's own
    /// `SLOWLOG` reads ([`super::scripts`]; see [`work_cpu_s`]).
    pub cpu_s: f64,
    /// Keyspace commands run so far (`INFO commandstats`: those the functions call and
    /// those sent directly; see [`keyspace_calls`]).
    pub keyspace_calls: u64,
    /// Function calls (`FCALL`) so far.
    pub fcalls: u64,
}

/// One primary's CPU over a phase.
#[derive(Debug, Clone, Serialize)]
pub struct NodeCpu {
    /// `host:port` (`redis` for a single server).
    pub node: String,
    /// CPU the node used, ms.
    pub cpu_ms: f64,
    /// Share of one core the node kept busy over the phase.
    pub busy: f64,
    /// CPU per item of the phase (fire or command), µs.
    pub us_per_item: f64,
}

/// The Redis primaries of a run.
pub struct Nodes {
    /// A connection to the primaries.
    pub(super) conn: Conn,
}

impl Nodes {
    /// Connects to `url` (a server or a cluster, as `--redis-url` takes).
    pub async fn connect(url: &str) -> anyhow::Result<Nodes> {
        let client = Client::open(url).await.context("redis URL")?;
        Ok(Nodes {
            conn: client.connect().await?,
        })
    }

    /// Memory and CPU of every primary.
    pub async fn sample(&self) -> anyhow::Result<Vec<Sample>> {
        let mut info = redis::cmd("INFO");
        info.arg("memory").arg("cpu").arg("commandstats");
        let replies = self.conn.clone().per_primary(&info).await?;
        let mut out = Vec::new();
        for (node, v) in replies {
            let text: String = redis::from_redis_value(v)?;
            out.push(Sample {
                node,
                used_memory: info_field(&text, "used_memory") as u64,
                cpu_s: work_cpu_s(&text),
                keyspace_calls: keyspace_calls(&text),
                fcalls: command_calls(&text)
                    .filter(|(c, _)| *c == "fcall")
                    .map(|(_, n)| n)
                    .sum(),
            });
        }
        out.sort_by(|a, b| a.node.cmp(&b.node));
        Ok(out)
    }

    /// Total `used_memory` of the primaries, bytes.
    pub async fn used_memory(&self) -> anyhow::Result<u64> {
        Ok(self.sample().await?.iter().map(|s| s.used_memory).sum())
    }

    /// Deletes every key under `prefix:` on every primary (SCAN, then UNLINK per hash
    /// tag, so each call stays in one slot); returns how many.
    pub async fn delete_keys(&self, prefix: &str) -> anyhow::Result<u64> {
        let mut conn = self.conn.clone();
        let nodes: Vec<String> = self.sample().await?.into_iter().map(|s| s.node).collect();
        let mut n = 0u64;
        for node in nodes {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{prefix}:*"))
                    .arg("COUNT")
                    .arg(10_000);
                let (next, keys): (u64, Vec<String>) =
                    redis::from_redis_value(conn.on_address(&node, &scan).await?)?;
                let mut by_tag: HashMap<&str, Vec<&String>> = HashMap::new();
                for k in &keys {
                    by_tag.entry(hash_tag(k)).or_default().push(k);
                }
                for group in by_tag.values() {
                    let _: Value = redis::cmd("UNLINK")
                        .arg(group)
                        .query_async(&mut conn)
                        .await?;
                }
                n += keys.len() as u64;
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(n)
    }
}

/// Field `name` of an `INFO` reply (0 when absent).
fn info_field(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The CPU seconds of an `INFO cpu commandstats` reply less the execution time of
/// `SLOWLOG` (`cmdstat_slowlog`'s `usec`): the bench's own reads of the slow log, a few
/// percent of Redis's time at a steady rate, are not ktimer's cost.
fn work_cpu_s(text: &str) -> f64 {
    let slowlog_us = text
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_slowlog:"))
        .and_then(|stats| stats.split(',').find_map(|kv| kv.strip_prefix("usec=")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    info_field(text, "used_cpu_sys") + info_field(text, "used_cpu_user") - slowlog_us / 1e6
}

/// Commands that touch no key of ktimer's: the functions' own calls, and what clients
/// and the bench ask of the server.
const NOT_KEYSPACE: [&str; 19] = [
    "fcall", "fcall_ro", "eval", "evalsha", "function", "info", "slowlog", "config", "client",
    "ping", "hello", "cluster", "command", "select", "auth", "readonly", "latency", "memory",
    "dbsize",
];

/// `(command, calls)` of each `cmdstat_` line of an `INFO commandstats` reply (a
/// subcommand counts as its command: `client|setname` is `client`).
fn command_calls(text: &str) -> impl Iterator<Item = (&str, u64)> {
    text.lines().filter_map(|l| {
        let (name, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
        let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
        Some((name.split('|').next()?, calls.trim().parse().ok()?))
    })
}

/// The keyspace commands of an `INFO commandstats` reply: every command but
/// [`NOT_KEYSPACE`] (Redis counts the commands a function runs, one by one).
fn keyspace_calls(text: &str) -> u64 {
    command_calls(text)
        .filter(|(c, _)| !NOT_KEYSPACE.contains(c))
        .map(|(_, n)| n)
        .sum()
}

/// Keyspace commands and function calls per one of `items` between two samples (all
/// primaries together).
pub fn calls_between(before: &[Sample], after: &[Sample], items: usize) -> Calls {
    let sum = |s: &[Sample], f: fn(&Sample) -> u64| s.iter().map(f).sum::<u64>();
    let per = |f: fn(&Sample) -> u64| {
        let n = sum(after, f).saturating_sub(sum(before, f)) as f64;
        (n / items.max(1) as f64 * 100.0).round() / 100.0
    };
    Calls {
        keyspace_per_item: per(|s| s.keyspace_calls),
        fcalls_per_item: per(|s| s.fcalls),
    }
}

/// Redis commands per item of a phase (fire or command).
#[derive(Debug, Clone, Serialize)]
pub struct Calls {
    /// Keyspace commands (`redis.call`s of the functions, and direct ones) per item.
    pub keyspace_per_item: f64,
    /// Function calls per item.
    pub fcalls_per_item: f64,
}

impl Calls {
    /// `K keyspace ops, F calls per ITEM`.
    pub fn line(&self, item: &str) -> String {
        format!(
            "{:.2} keyspace operations and {:.3} function calls per {item}",
            self.keyspace_per_item, self.fcalls_per_item
        )
    }
}

/// The part of `key` Redis Cluster hashes: between the first `{` and the next `}`.
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|t| !t.is_empty())
        .unwrap_or(key)
}

/// Each primary's CPU between two samples, over `elapsed_ms`, per one of `items`.
pub fn cpu_between(
    before: &[Sample],
    after: &[Sample],
    items: usize,
    elapsed_ms: f64,
) -> Vec<NodeCpu> {
    after
        .iter()
        .map(|a| {
            let b = before
                .iter()
                .find(|b| b.node == a.node)
                .map_or(a.cpu_s, |b| b.cpu_s);
            let cpu_ms = ((a.cpu_s - b) * 1000.0).max(0.0);
            NodeCpu {
                node: a.node.clone(),
                cpu_ms: cpu_ms.round(),
                busy: (cpu_ms / elapsed_ms.max(1.0) * 100.0).round() / 100.0,
                us_per_item: (cpu_ms * 1000.0 / items.max(1) as f64 * 10.0).round() / 10.0,
            }
        })
        .collect()
}

/// `; ktimer N µs (B% of a core)`, or nothing for instances the bench did not start.
pub fn own_line(cpu: &Option<NodeCpu>) -> String {
    cpu.as_ref().map_or(String::new(), |c| {
        format!(
            "; ktimer {:.1} µs ({:.0}% of a core)",
            c.us_per_item,
            c.busy * 100.0
        )
    })
}

/// `node N µs (B% busy)` per node, and their total.
pub fn cpu_line(nodes: &[NodeCpu]) -> String {
    let mut parts: Vec<String> = nodes
        .iter()
        .map(|n| {
            format!(
                "{} {:.1} µs ({:.0}% busy)",
                n.node,
                n.us_per_item,
                n.busy * 100.0
            )
        })
        .collect();
    if nodes.len() > 1 {
        let total: f64 = nodes.iter().map(|n| n.us_per_item).sum();
        parts.push(format!("total {total:.1} µs"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_group_by_their_hash_tag() {
        assert_eq!(hash_tag("kt:{cmds:3}:t:a"), "cmds:3");
        assert_eq!(hash_tag("plain"), "plain");
        assert_eq!(hash_tag("a{}b"), "a{}b");
    }

    #[test]
    fn the_slow_logs_reads_are_not_counted_as_work() {
        let info = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n\
                    # Commandstats\r\ncmdstat_fcall:calls=9,usec=900,usec_per_call=100.00\r\n\
                    cmdstat_slowlog:calls=4,usec=250000,usec_per_call=62500.00,rejected_calls=0\r\n";
        assert!(
            (work_cpu_s(info) - 3.5).abs() < 1e-9,
            "{}",
            work_cpu_s(info)
        );
        let without = "used_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n";
        assert!((work_cpu_s(without) - 3.75).abs() < 1e-9);
        let stats = "cmdstat_get:calls=7,usec=1\r\ncmdstat_fcall:calls=2,usec=9\r\n\
                     cmdstat_client|setname:calls=1,usec=1\r\ncmdstat_zadd:calls=3,usec=2\r\n";
        assert_eq!(keyspace_calls(stats), 10);
    }

    #[test]
    fn cpu_is_per_node_per_item() {
        let s = |node: &str, cpu_s| Sample {
            node: node.into(),
            used_memory: 0,
            cpu_s,
            keyspace_calls: 0,
            fcalls: 0,
        };
        let cpu = cpu_between(&[s("a", 1.0)], &[s("a", 1.5)], 1_000, 1_000.0);
        assert_eq!(cpu[0].cpu_ms, 500.0);
        assert_eq!(cpu[0].busy, 0.5);
        assert_eq!(cpu[0].us_per_item, 500.0);
    }
}
