//! Redis, as `ktimer run` would use it: every primary's version, eviction policy and
//! persistence, and its clock against this host's.

use super::{Finding, Level};
use crate::store::conn::Client;
use crate::store::guard::Eviction;
use std::time::Duration;

/// A clock further than this from this host's is a warning (fires follow Redis's).
const CLOCK_WARN_MS: i64 = 1_000;

/// Asks every primary of `url`.
pub(super) async fn check(url: &str, timeout: Duration) -> Vec<Finding> {
    match tokio::time::timeout(timeout, gather(url)).await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => vec![Finding::new(
            Level::Fail,
            "redis",
            format!("{url}: {e}: check --redis-url and that Redis runs"),
        )],
        Err(_) => vec![Finding::new(
            Level::Fail,
            "redis",
            format!("{url}: no answer within {timeout:?}"),
        )],
    }
}

async fn gather(url: &str) -> redis::RedisResult<Vec<Finding>> {
    let mut conn = Client::open(url).await?.connect().await?;
    let infos = conn.per_primary(&redis::cmd("INFO")).await?;
    let mut fsync = redis::cmd("CONFIG");
    fsync.arg("GET").arg("appendfsync");
    let fsyncs = conn.per_primary(&fsync).await?;
    let mut out = Vec::new();
    for (node, info) in infos {
        let info: String = redis::from_redis_value(info)?;
        // One server: name it by its URL.
        let node = if node == "redis" {
            url.to_string()
        } else {
            node
        };
        let fsync = fsyncs
            .iter()
            .find(|(n, _)| *n == node || n == "redis")
            .and_then(|(_, v)| redis::from_redis_value::<Vec<String>>(v.clone()).ok())
            .and_then(|kv| kv.get(1).cloned());
        out.extend(judge(&node, &info, fsync.as_deref()));
    }
    let before = crate::now_ms();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
    let host = (before + crate::now_ms()) / 2;
    out.push(clock(s * 1_000 + us / 1_000 - host));
    Ok(out)
}

/// What one primary's `INFO` and `appendfsync` mean for ktimer (pure).
pub fn judge(node: &str, info: &str, appendfsync: Option<&str>) -> Vec<Finding> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or("")
    };
    let what = format!("redis {node}");
    let version = field("redis_version");
    let numbers: Vec<u32> = version.split('.').filter_map(|x| x.parse().ok()).collect();
    let old = numbers.as_slice() < [7, 0].as_slice();
    let mut out = vec![match old {
        true => Finding::new(
            Level::Fail,
            what.clone(),
            format!("version {version:?}: ktimer needs Redis 7.0 or later (its scripts are a Functions library)"),
        ),
        false => Finding::new(Level::Ok, what.clone(), format!("version {version}")),
    }];
    out.push(match Eviction::parse(info).refusal(node) {
        Some(why) => Finding::new(Level::Fail, what.clone(), why),
        None => Finding::new(Level::Ok, what.clone(), "maxmemory-policy noeviction"),
    });
    out.push(match (field("aof_enabled"), appendfsync) {
        ("1", Some("no")) => Finding::new(
            Level::Warn,
            what,
            "appendfsync no: a crash of the host can lose seconds of writes (replayed from \
             Kafka, those fires fire again); appendfsync everysec",
        ),
        ("1", fsync) => Finding::new(
            Level::Ok,
            what,
            format!("AOF on, appendfsync {}", fsync.unwrap_or("unknown")),
        ),
        _ => Finding::new(
            Level::Warn,
            what,
            "no AOF: a restart empties Redis and every partition is rebuilt from the state \
             topic (fires acknowledged after the last checkpoint fire again); appendonly yes, \
             appendfsync everysec",
        ),
    });
    out
}

/// Redis's clock `offset_ms` ahead of this host's.
pub fn clock(offset_ms: i64) -> Finding {
    if offset_ms.abs() > CLOCK_WARN_MS {
        let why = format!(
            "Redis's clock is {offset_ms} ms from this host's: ktimer fires by Redis's clock, \
             but producers' delays count from theirs; fix the hosts' time (NTP)"
        );
        return Finding::new(Level::Warn, "clock", why);
    }
    Finding::new(
        Level::Ok,
        "clock",
        format!("Redis {offset_ms} ms from this host"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(version: &str, policy: &str, aof: &str) -> String {
        format!("# Server\r\nredis_version:{version}\r\nmaxmemory_policy:{policy}\r\naof_enabled:{aof}\r\n")
    }

    fn levels(f: Vec<Finding>) -> Vec<Level> {
        f.into_iter().map(|f| f.level).collect()
    }

    #[test]
    fn an_evicting_old_or_unpersisted_redis_is_named() {
        let good = judge("n", &info("7.0.15", "noeviction", "1"), Some("everysec"));
        assert_eq!(levels(good), [Level::Ok, Level::Ok, Level::Ok]);
        let evicting = judge("n", &info("7.0.15", "allkeys-lru", "1"), Some("everysec"));
        assert_eq!(levels(evicting)[1], Level::Fail);
        let old = judge("n", &info("6.2.14", "noeviction", "1"), Some("everysec"));
        assert_eq!(levels(old)[0], Level::Fail);
        assert_eq!(
            levels(judge("n", &info("7.0.0", "noeviction", "0"), None)),
            [Level::Ok, Level::Ok, Level::Warn]
        );
        let lax = judge("n", &info("7.2.4", "noeviction", "1"), Some("no"));
        assert_eq!(levels(lax)[2], Level::Warn);
    }

    #[test]
    fn a_clock_a_second_away_is_a_warning() {
        assert_eq!(clock(999).level, Level::Ok);
        assert_eq!(clock(-1_500).level, Level::Warn);
    }
}
