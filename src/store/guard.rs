//! The Redis setting ktimer cannot run safely without: `maxmemory-policy noeviction`.
//!
//! Any other policy lets Redis drop ktimer's keys without a trace once `maxmemory` is
//! reached: `allkeys-*` evicts live timers, minute slices and indexes (timers that never
//! fire), `volatile-*` evicts the done records kept for the retention (a create sent again
//! then fires again under a new fire id). An instance refuses to start on such a primary,
//! with the setting and the fix in the error; while running, the sampler reads every
//! primary's `INFO` and reports a policy changed since, or keys evicted anyway, in a metric,
//! `/readyz` and the log.

use super::{Store, StoreError};

/// The one safe policy.
pub const SAFE_POLICY: &str = "noeviction";

/// What one primary's `INFO` says about eviction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Eviction {
    /// `maxmemory_policy`.
    pub policy: String,
    /// `evicted_keys`: keys evicted since Redis started.
    pub evicted_keys: u64,
}

impl Eviction {
    /// Reads the fields of an `INFO` reply (`name:value` lines; others are ignored).
    pub fn parse(info: &str) -> Eviction {
        let mut e = Eviction::default();
        for line in info.lines() {
            let Some((name, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            match name {
                "maxmemory_policy" => e.policy = value.to_string(),
                "evicted_keys" => e.evicted_keys = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        e
    }

    /// Whether Redis may evict ktimer's keys under this policy.
    pub fn may_evict(&self) -> bool {
        self.policy != SAFE_POLICY
    }

    /// Why primary `node` is unsafe, and the fix; `None` when it is safe.
    pub fn refusal(&self, node: &str) -> Option<String> {
        self.may_evict().then(|| {
            format!(
                "Redis {node} has maxmemory-policy {:?}: once maxmemory is reached it may evict \
                 ktimer's keys (timers that then never fire, or done records whose create, sent \
                 again, fires again). Set maxmemory-policy {SAFE_POLICY} (in redis.conf, or CONFIG \
                 SET maxmemory-policy {SAFE_POLICY} then CONFIG REWRITE) and size maxmemory for \
                 the timers",
                self.policy
            )
        })
    }
}

impl Store {
    /// The eviction policy and counter of every primary (one `INFO`: its default
    /// sections hold both).
    pub async fn eviction(&self) -> Result<Vec<(String, Eviction)>, StoreError> {
        let replies = self.conn.clone().per_primary(&redis::cmd("INFO")).await?;
        replies
            .into_iter()
            .map(|(node, reply)| {
                let text: String = redis::from_redis_value(reply).map_err(super::bad_reply)?;
                Ok((node, Eviction::parse(&text)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_and_only_noeviction_is_safe() {
        let memory = "# Memory\r\nused_memory:1024\r\nmaxmemory:1048576\r\n\
            maxmemory_human:1.00M\r\nmaxmemory_policy:allkeys-lru\r\n";
        let e = Eviction::parse(memory);
        assert_eq!(e.policy, "allkeys-lru");
        assert!(e.may_evict());
        let why = e.refusal("127.0.0.1:6379").unwrap();
        assert!(
            why.contains("allkeys-lru") && why.contains("CONFIG SET maxmemory-policy noeviction")
        );
        let stats = Eviction::parse("# Stats\r\nexpired_keys:3\r\nevicted_keys:17\r\n");
        assert_eq!(stats.evicted_keys, 17);
        for p in [
            "volatile-lru",
            "volatile-ttl",
            "allkeys-random",
            "allkeys-lfu",
        ] {
            let e = Eviction {
                policy: p.into(),
                ..Default::default()
            };
            assert!(e.refusal("r").is_some(), "{p}");
        }
        let safe = Eviction::parse("maxmemory_policy:noeviction\r\n");
        assert_eq!(safe.refusal("r"), None);
    }
}
