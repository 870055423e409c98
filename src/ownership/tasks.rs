//! What runs for an owned partition: its trigger, migrator and checkpoint task, started
//! together and stopped together.

use crate::metrics::Metrics;
use crate::migrator::{self, MigratorConfig, MigratorHandle};
use crate::shutdown::CancellationToken;
use crate::sink::Sink;
use crate::state::checkpoint::{self, CheckpointConfig, CheckpointHandle, Confirmed};
use crate::status::StatusTx;
use crate::store::Store;
use crate::trigger::{self, TriggerConfig, TriggerHandle};
use rdkafka::config::ClientConfig;
use std::sync::Arc;

/// What taking a partition needs.
pub struct Tasks {
    /// Redis.
    pub store: Store,
    /// Redis for the triggers: their own connection, so a large intake pipeline never
    /// delays a claim.
    pub trigger_store: Store,
    /// The producer.
    pub sink: Arc<Sink>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Trigger tuning.
    pub trigger: TriggerConfig,
    /// Migrator tuning.
    pub migrator: MigratorConfig,
    /// Checkpoint tuning.
    pub checkpoint: CheckpointConfig,
    /// The state topic and a reader's configuration (rebuilds).
    pub state: (String, ClientConfig),
    /// Whether these are the shared commands topic's partitions (published as
    /// [`crate::status::Status::owned`]; a bound lane's only by topic).
    pub shared: bool,
    /// Shutdown; every task gets a child.
    pub token: CancellationToken,
    /// Where the owned partitions are published.
    pub status: StatusTx,
}

/// The running tasks of an owned partition.
pub struct Running {
    /// The partition's trigger.
    pub trigger: TriggerHandle,
    /// The partition's migrator.
    pub migrator: MigratorHandle,
    /// The partition's checkpoints.
    pub checkpoint: CheckpointHandle,
}

impl Running {
    /// Whether any task ended.
    pub fn ended(&self) -> bool {
        self.trigger.is_finished() || self.migrator.is_finished() || self.checkpoint.is_finished()
    }

    /// Stops all three, together.
    pub async fn stop(self) {
        tokio::join!(
            self.checkpoint.stop(),
            self.migrator.stop(),
            self.trigger.stop()
        );
    }
}

impl Tasks {
    /// Starts the tasks of partition `p` at `epoch`; `sequence` is the last checkpoint.
    pub fn start(&self, p: i32, epoch: i64, sequence: i64) -> Running {
        let interval = self.checkpoint.interval.as_millis() as i64;
        let confirmed = Arc::new(Confirmed::new(sequence, interval));
        let cfg = TriggerConfig {
            checkpoint: confirmed.clone(),
            ..self.trigger.clone()
        };
        let trigger = trigger::spawn(
            p,
            epoch,
            self.trigger_store.clone(),
            self.sink.clone(),
            &self.metrics,
            cfg,
            self.token.child_token(),
        );
        let wake = trigger.wake.clone();
        let on_due = Box::new(move |due| wake.due(due));
        let migrator = migrator::spawn(
            p,
            epoch,
            self.store.clone(),
            self.migrator.clone(),
            on_due,
            &self.metrics,
            self.token.child_token(),
        );
        let held = checkpoint::Held {
            partition: p,
            epoch,
            confirmed,
        };
        let checkpoint = checkpoint::spawn(
            held,
            self.store.clone(),
            self.sink.clone(),
            self.checkpoint.clone(),
            &self.metrics,
            self.token.child_token(),
        );
        Running {
            trigger,
            migrator,
            checkpoint,
        }
    }
}
