//! The broker and the topics, as `ktimer run` would use them.

use super::{Finding, Level};
use crate::config::KafkaArgs;
use crate::lanes::Lanes;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::HashMap;
use std::time::Duration;

/// Below this, the commands topic may drop commands a rebuild still needs to replay.
const MIN_RETENTION_MS: i64 = 24 * 3_600_000;

/// What the broker says about one of ktimer's topics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopicFact {
    /// Its role (`commands`, `state`...).
    pub role: &'static str,
    /// Its name.
    pub name: String,
    /// Its partition count; `None` when it does not exist.
    pub partitions: Option<usize>,
    /// `cleanup.policy`, if the broker told.
    pub cleanup: Option<String>,
    /// `retention.ms`, if the broker told.
    pub retention_ms: Option<i64>,
}

/// Asks the broker about ktimer's topics: the shared ones and each bound application's
/// (`lanes`), each lane's state topic judged against its own commands topic.
pub(super) async fn check(k: &KafkaArgs, lanes: &Lanes, timeout: Duration) -> Vec<Finding> {
    let consumer: BaseConsumer = match crate::kafka::client(k).create() {
        Ok(c) => c,
        Err(e) => return vec![Finding::new(Level::Fail, "broker", format!("client: {e}"))],
    };
    let meta = tokio::task::spawn_blocking(move || {
        let m = consumer.fetch_metadata(None, timeout)?;
        let brokers = m.brokers().len();
        let topics: HashMap<String, usize> = (m.topics().iter())
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len()))
            .collect();
        Ok::<_, rdkafka::error::KafkaError>((brokers, topics))
    })
    .await;
    let (brokers, topics) = match meta {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            let why = format!(
                "no answer from {} within {timeout:?} ({e}): check --brokers and that the broker runs",
                k.brokers
            );
            return vec![Finding::new(Level::Fail, "broker", why)];
        }
        Err(e) => return vec![Finding::new(Level::Fail, "broker", e.to_string())],
    };
    let mut out = vec![Finding::new(
        Level::Ok,
        "broker",
        format!("{brokers} broker(s) answered at {}", k.brokers),
    )];
    let shared: Vec<(&'static str, String)> = k
        .roles()
        .into_iter()
        .map(|(r, t)| (r, t.to_string()))
        .collect();
    let bound = lanes.all().iter().skip(1).map(|l| l.roles().to_vec());
    for group in std::iter::once(shared).chain(bound) {
        let mut facts = Vec::new();
        for (role, name) in group {
            let mut f = TopicFact {
                role,
                partitions: topics.get(&name).copied(),
                name,
                ..TopicFact::default()
            };
            if f.partitions.is_some() && matches!(role, "commands" | "state") {
                let configs = describe(k, &f.name, timeout).await;
                f.cleanup = configs.get("cleanup.policy").cloned();
                f.retention_ms = configs.get("retention.ms").and_then(|v| v.parse().ok());
            }
            facts.push(f);
        }
        out.extend(judge(&facts));
    }
    out
}

/// The topic's configuration entries the broker reports (none if it does not answer).
async fn describe(k: &KafkaArgs, topic: &str, timeout: Duration) -> HashMap<String, String> {
    let Ok(admin) = crate::kafka::client(k).create::<AdminClient<DefaultClientContext>>() else {
        return HashMap::new();
    };
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    let found = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &opts)
        .await;
    let entries = found
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|r| r.entries);
    entries.filter_map(|e| Some((e.name, e.value?))).collect()
}

/// What the topics' facts mean for ktimer (pure).
pub fn judge(facts: &[TopicFact]) -> Vec<Finding> {
    let mut out = Vec::new();
    let commands = facts
        .iter()
        .find(|f| f.role == "commands")
        .and_then(|f| f.partitions);
    for f in facts {
        let what = format!("topic {} ({})", f.name, f.role);
        let Some(n) = f.partitions else {
            let (level, fix) = match f.role {
                "delay" => (Level::Warn, "it is missing: delayed records wait until `ktimer topics apply` creates it (--delay-topic '' turns delayed delivery off)"),
                _ => (Level::Fail, "it is missing: create the topics with `ktimer topics apply`"),
            };
            out.push(Finding::new(level, what, fix));
            continue;
        };
        out.push(match f.role {
            "state" => state(f, n, commands),
            "commands" => retention(f, n),
            _ => Finding::new(Level::Ok, what, format!("{n} partitions")),
        });
    }
    out
}

fn state(f: &TopicFact, n: usize, commands: Option<usize>) -> Finding {
    let what = format!("topic {} (state)", f.name);
    if commands.is_some_and(|c| c != n) {
        let why = format!(
            "{n} partitions, the commands topic {}: they must be equal (Redis is rebuilt per \
             partition from it); create it again with the commands topic's count",
            commands.unwrap_or_default()
        );
        return Finding::new(Level::Fail, what, why);
    }
    let Some(policy) = f.cleanup.as_deref() else {
        let why = "the broker did not report its cleanup.policy: make sure it is compact";
        return Finding::new(Level::Warn, what, why);
    };
    if !policy.contains("compact") {
        let why = format!(
            "cleanup.policy {policy}: it must be compact (a timer's latest state is kept \
             whatever its age); set cleanup.policy=compact"
        );
        return Finding::new(Level::Fail, what, why);
    }
    if policy.contains("delete") {
        let why = format!(
            "cleanup.policy {policy}: states older than retention.ms are deleted, and a \
             rebuild would not restore those timers; set cleanup.policy=compact"
        );
        return Finding::new(Level::Warn, what, why);
    }
    Finding::new(Level::Ok, what, format!("{n} partitions, compacted"))
}

fn retention(f: &TopicFact, n: usize) -> Finding {
    let what = format!("topic {} (commands)", f.name);
    match f.retention_ms {
        Some(ms) if (0..MIN_RETENTION_MS).contains(&ms) => Finding::new(
            Level::Warn,
            what,
            format!(
                "{n} partitions, retention.ms {ms}: keep at least a day, so a rebuild can replay \
                 the commands after the last checkpoint and an outage of the instances loses none"
            ),
        ),
        _ => Finding::new(Level::Ok, what, format!("{n} partitions")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(role: &'static str, partitions: Option<usize>, cleanup: &str) -> TopicFact {
        TopicFact {
            role,
            name: format!("t.{role}"),
            partitions,
            cleanup: Some(cleanup.into()),
            retention_ms: Some(7 * 24 * 3_600_000),
        }
    }

    fn levels(facts: &[TopicFact]) -> Vec<Level> {
        judge(facts).into_iter().map(|f| f.level).collect()
    }

    #[test]
    fn the_state_topic_must_be_compacted_and_partitioned_like_the_commands_topic() {
        let good = [
            fact("commands", Some(4), "delete"),
            fact("state", Some(4), "compact"),
        ];
        assert_eq!(levels(&good), [Level::Ok, Level::Ok]);
        let fewer = [
            fact("commands", Some(4), "delete"),
            fact("state", Some(3), "compact"),
        ];
        assert_eq!(levels(&fewer)[1], Level::Fail);
        let deleted = [
            fact("commands", Some(4), "delete"),
            fact("state", Some(4), "delete"),
        ];
        assert_eq!(levels(&deleted)[1], Level::Fail);
        let both = [
            fact("commands", Some(4), "delete"),
            fact("state", Some(4), "compact,delete"),
        ];
        assert_eq!(levels(&both)[1], Level::Warn);
        let missing = [fact("commands", Some(4), "delete"), fact("state", None, "")];
        assert_eq!(levels(&missing)[1], Level::Fail);
        let mut untold = fact("state", Some(4), "");
        untold.cleanup = None;
        assert_eq!(levels(&[untold]), [Level::Warn]);
    }

    #[test]
    fn a_missing_delay_topic_is_a_warning_and_any_other_a_failure() {
        let facts = [
            fact("delay", None, "delete"),
            fact("results", None, "delete"),
        ];
        assert_eq!(levels(&facts), [Level::Warn, Level::Fail]);
    }

    #[test]
    fn a_commands_topic_kept_less_than_a_day_is_a_warning() {
        let mut short = fact("commands", Some(4), "delete");
        short.retention_ms = Some(3_600_000);
        assert_eq!(levels(&[short.clone()]), [Level::Warn]);
        short.retention_ms = Some(-1);
        assert_eq!(levels(&[short]), [Level::Ok]);
    }
}
