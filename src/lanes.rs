//! Lanes: the topics one stream of commands flows through. The **shared** lane is
//! ktimer's own topics (`--commands-topic`, `--results-topic`, ...), open to every
//! application that is not bound; each **bound** application (`topics` in the
//! applications file, [`crate::apps::Binding`]) has a lane of its own: its commands topic,
//! results topic, default callback topic and state topic.
//!
//! Invariants:
//! * a lane is everything a commands topic decides: its partitions are owned, stored in
//!   Redis under keys tagged `{commands-topic:partition}`, checkpointed to its own state
//!   topic and rebuilt from it, and its results go to its results topic only. Timers of
//!   two lanes never meet: a timer is identified by (lane, timer id), so a bound
//!   application's ids are its own;
//! * a command read from a bound lane acts for its application whatever it says
//!   ([`crate::validate::tenancy`]); the broker's ACLs on the lane's topics decide who may
//!   act for it;
//! * no topic belongs to two lanes, nor is one of ktimer's shared topics in a bound lane.

use crate::apps::Applications;
use crate::config::KafkaArgs;
use crate::sink::SinkTopics;
use std::sync::Arc;

/// The topics of one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    /// The application bound to the lane; `None` for the shared lane.
    pub application: Option<String>,
    /// Its commands topic (the consumer group reads it; its partitions are owned).
    pub commands: String,
    /// Its results topic.
    pub results: String,
    /// Its default callback topic.
    pub fired: String,
    /// Its state topic (partitioned like the commands topic).
    pub state: String,
    /// Its dead-letter topic.
    pub dead_letter: String,
}

impl Lane {
    /// The shared lane: ktimer's own topics.
    pub fn shared(k: &KafkaArgs) -> Lane {
        Lane {
            application: None,
            commands: k.commands_topic.clone(),
            results: k.results_topic.clone(),
            fired: k.fired_topic.clone(),
            state: k.state_topic.clone(),
            dead_letter: k.dead_letter_topic.clone(),
        }
    }

    /// The producer's topics of this lane.
    pub fn sink_topics(&self) -> SinkTopics {
        SinkTopics {
            fired: self.fired.clone(),
            results: self.results.clone(),
            dead_letter: self.dead_letter.clone(),
            state: self.state.clone(),
        }
    }

    /// Its topics by role.
    pub fn roles(&self) -> [(&'static str, String); 5] {
        [
            ("commands", self.commands.clone()),
            ("results", self.results.clone()),
            ("fired", self.fired.clone()),
            ("state", self.state.clone()),
            ("dead_letter", self.dead_letter.clone()),
        ]
    }

    /// What the lane is called in logs: its commands topic and application.
    pub fn name(&self) -> String {
        match &self.application {
            Some(app) => format!("{} (bound to {app})", self.commands),
            None => self.commands.clone(),
        }
    }
}

/// Every lane of a deployment: the shared one first. Fixed at start.
#[derive(Debug, Clone)]
pub struct Lanes {
    all: Vec<Arc<Lane>>,
}

impl Lanes {
    /// The shared lane and one per binding of `apps` (sorted by application); refuses a
    /// binding that names one of ktimer's shared topics.
    pub fn new(k: &KafkaArgs, apps: &Applications) -> Result<Lanes, String> {
        let shared: Vec<String> = k.roles().iter().map(|(_, t)| t.to_string()).collect();
        let mut all = vec![Arc::new(Lane::shared(k))];
        let mut bindings: Vec<_> = apps.bindings().collect();
        bindings.sort_by_key(|(name, _)| *name);
        for (name, b) in bindings {
            if let Some((role, topic)) = b.roles().into_iter().find(|(_, t)| shared.contains(t)) {
                return Err(format!(
                    "{name}'s {role} topic {topic:?} is one of ktimer's shared topics; a bound application needs topics of its own"
                ));
            }
            all.push(Arc::new(Lane {
                application: Some(name.to_string()),
                commands: b.commands.clone(),
                results: b.results.clone(),
                fired: b.fired(),
                state: b.state(),
                dead_letter: b.dead_letter(),
            }));
        }
        Ok(Lanes { all })
    }

    /// Every lane, the shared one first.
    pub fn all(&self) -> &[Arc<Lane>] {
        &self.all
    }

    /// The shared lane.
    pub fn shared(&self) -> &Arc<Lane> {
        &self.all[0]
    }

    /// The lane `app` is bound to, if it is bound.
    fn bound_lane(&self, app: &str) -> Option<&Arc<Lane>> {
        self.all
            .iter()
            .find(|l| l.application.as_deref() == Some(app))
    }

    /// The commands topic `app` is bound to, if it is bound.
    pub fn bound(&self, app: &str) -> Option<&str> {
        self.bound_lane(app).map(|l| l.commands.as_str())
    }

    /// The lane whose commands topic is `topic`.
    pub fn by_commands(&self, topic: &str) -> Option<&Arc<Lane>> {
        self.all.iter().find(|l| l.commands == topic)
    }

    /// The lane of `app`: its own when bound, else the shared one.
    pub fn of(&self, app: &str) -> &Arc<Lane> {
        self.bound_lane(app).unwrap_or(self.shared())
    }

    /// The bound lanes' topics by role (for `ktimer topics apply` and `ktimer check`).
    pub fn bound_roles(&self) -> Vec<(&'static str, String)> {
        self.all.iter().skip(1).flat_map(|l| l.roles()).collect()
    }

    /// The topics a command read from `lane` may not name as its callback topic: every
    /// topic of every lane but `lane`'s default callback topic, and the shared delay
    /// topic (`shared_roles`: ktimer's shared topics by role, the fired one left out).
    pub fn own_topics(&self, lane: &Lane, shared_roles: &[(&str, &str)]) -> Vec<String> {
        let shared = shared_roles.iter().filter(|(r, _)| *r != "fired");
        let mut own: Vec<String> = shared.map(|(_, t)| t.to_string()).collect();
        own.extend(self.bound_roles().into_iter().map(|(_, t)| t));
        own.retain(|t| *t != lane.fired);
        own
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn kafka() -> KafkaArgs {
        #[derive(Parser)]
        struct A {
            #[command(flatten)]
            k: KafkaArgs,
        }
        A::parse_from(["x"]).k
    }

    #[test]
    fn a_binding_makes_a_lane_and_may_not_take_a_shared_topic() {
        let apps = Applications::parse(
            "[applications.orders.topics]\ncommands = \"o.c\"\nresults = \"o.r\"\n",
        )
        .unwrap();
        let lanes = Lanes::new(&kafka(), &apps).unwrap();
        assert_eq!(lanes.all().len(), 2);
        assert_eq!(lanes.bound("orders"), Some("o.c"));
        assert_eq!(lanes.of("orders").results, "o.r");
        assert_eq!(lanes.of("billing").commands, "ktimer.commands");
        assert_eq!(lanes.by_commands("o.c").unwrap().state, "o.c.state");
        let clash = Applications::parse(
            "[applications.orders.topics]\ncommands = \"o.c\"\nresults = \"ktimer.results\"\n",
        )
        .unwrap();
        let e = Lanes::new(&kafka(), &clash).unwrap_err();
        assert!(e.contains("shared topics"), "{e}");
    }
}
