//! `ktimer check`: a preflight of a deployment, before the first timer is lost to it.
//!
//! It asks the broker ([`kafka`]: reachable, the topics present, the state topic
//! partitioned like the commands topic and compacted, retention long enough) and Redis
//! ([`redis`]: version, eviction policy, persistence, clock) and, when one is configured,
//! the schema registry ([`registry`]: reachable, subjects registered) what an instance would find,
//! and prints one line per check: `ok`, `warn` or `fail`, with the fix. The judging is
//! pure (facts in, findings out) and unit-tested; only the gathering talks to servers.

mod kafka;
mod redis;
mod registry;

use crate::config::CheckArgs;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// As it should be.
    Ok,
    /// Works, at a cost the line names.
    Warn,
    /// ktimer would lose or refuse timers, or not start.
    Fail,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Ok, warn or fail.
    pub level: Level,
    /// What was checked (`broker`, `topic ktimer.state`, `redis 127.0.0.1:6379`...).
    pub what: String,
    /// What was found, and for a warning or failure the fix.
    pub detail: String,
}

impl Finding {
    fn new(level: Level, what: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding {
            level,
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// The line printed for it.
    pub fn line(&self) -> String {
        let level = match self.level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "fail",
        };
        format!("{level}  {}: {}", self.what, self.detail)
    }
}

/// Runs every check, printing a line each and a summary; `true` when none failed.
pub async fn run(args: CheckArgs) -> bool {
    let timeout = std::time::Duration::from_secs(args.timeout_s.max(1));
    let apps = args.applications.clone().unwrap_or_default().current();
    let mut all = match crate::lanes::Lanes::new(&args.kafka, &apps) {
        Ok(lanes) => kafka::check(&args.kafka, &lanes, timeout).await,
        Err(why) => vec![Finding::new(Level::Fail, "applications", why)],
    };
    all.extend(redis::check(&args.redis_url, timeout).await);
    if let Some(url) = &args.kafka.schema_registry_url {
        let k = &args.kafka;
        let topics = [k.commands_topic.as_str(), k.results_topic.as_str()];
        all.extend(registry::check(url, &topics, timeout).await);
    }
    for f in &all {
        println!("{}", f.line());
    }
    let count = |l: Level| all.iter().filter(|f| f.level == l).count();
    let (warn, fail) = (count(Level::Warn), count(Level::Fail));
    println!(
        "{} checks: {} ok, {warn} warnings, {fail} failures",
        all.len(),
        count(Level::Ok)
    );
    fail == 0
}
