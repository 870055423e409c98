//! The admin API's view of the lanes ([`crate::lanes`]): an application's timers are
//! read from its own lane (its commands topic's partitions in Redis) and its commands
//! are sent to its own commands topic, so nothing one application does or sees through
//! the API depends on another's timers.

use super::commands::Commands;
use super::error::ApiError;
use crate::codec::Codec;
use crate::config::KafkaArgs;
use crate::lanes::{Lane, Lanes};
use crate::shutdown::CancellationToken;
use crate::store::Store;
use std::sync::Arc;

/// One lane as the admin API reaches it.
pub struct AdminLane {
    /// Its topics.
    pub lane: Arc<Lane>,
    /// Redis, for its partitions.
    pub store: Store,
    /// Partitions of its commands topic (listings walk them).
    pub partitions: i32,
    /// Its write path (none: write routes answer 503).
    pub commands: Option<Commands>,
}

impl AdminLane {
    /// The write path, or 503.
    pub fn commands(&self) -> Result<&Commands, ApiError> {
        self.commands
            .as_ref()
            .ok_or_else(|| ApiError::unavailable("this admin port has no write path"))
    }
}

/// Every lane, the shared one first.
pub struct AdminLanes {
    all: Vec<AdminLane>,
}

impl AdminLanes {
    /// The lanes of `lanes` with their partition counts (in the same order) and, when
    /// `write`, a write path each (its commands and results topics).
    pub fn new(
        lanes: &Lanes,
        store: &Store,
        partitions: &[i32],
        write: Option<(&KafkaArgs, Arc<Codec>, CancellationToken)>,
    ) -> anyhow::Result<AdminLanes> {
        let mut all = Vec::new();
        for (lane, &n) in lanes.all().iter().zip(partitions) {
            let commands = match &write {
                Some((k, codec, token)) => {
                    let mut k = (*k).clone();
                    k.commands_topic = lane.commands.clone();
                    k.results_topic = lane.results.clone();
                    Some(Commands::new(&k, codec.clone(), token.clone())?)
                }
                None => None,
            };
            all.push(AdminLane {
                lane: lane.clone(),
                store: store.for_topic(&lane.commands),
                partitions: n,
                commands,
            });
        }
        Ok(AdminLanes { all })
    }

    /// The lane of `app`: its own when bound, else (or with none named) the shared one.
    pub fn of(&self, app: Option<&str>) -> &AdminLane {
        let bound = |l: &&AdminLane| app.is_some() && l.lane.application.as_deref() == app;
        self.all.iter().find(bound).unwrap_or(self.shared())
    }

    /// The shared lane.
    pub fn shared(&self) -> &AdminLane {
        &self.all[0]
    }

    /// Every lane.
    pub fn all(&self) -> &[AdminLane] {
        &self.all
    }
}
