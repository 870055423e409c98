//! What a running instance reports about itself: the admin port's readiness, tests, and
//! programs that embed ktimer read it from a `watch` channel.

use std::net::SocketAddr;
use tokio::sync::watch;

/// The state of one instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// The admin port's bound address, once listening.
    pub admin_addr: Option<SocketAddr>,
    /// Whether the instance has joined the consumer group (got its first assignment).
    pub joined: bool,
    /// The partitions of the shared commands topic it owns, sorted.
    pub owned: Vec<i32>,
    /// The partitions it owns per commands topic (the shared one and every bound
    /// application's, [`crate::lanes`]), sorted.
    pub lanes: std::collections::BTreeMap<String, Vec<i32>>,
    /// Of the owned partitions taken without a rebuild: ms from their assignment until
    /// their trigger started (the takeover path reads a few keys, whatever the partition
    /// holds).
    pub taken_ms: std::collections::BTreeMap<i32, u64>,
    /// Why Redis is not safe to keep timers in (an evicting `maxmemory-policy`, keys
    /// evicted): the instance is not ready while it is set.
    pub redis_unsafe: Option<String>,
    /// What the intake has waited for longer than a few seconds (a stall): the instance
    /// is not ready while it is set.
    pub intake_stalled: Option<String>,
    /// Why the partitions were given up (Redis unreachable for longer than
    /// `--redis-cut-ms`): the instance is not ready while it is set.
    pub redis_cut: Option<String>,
}

/// The sending side, shared by the parts of the service that publish their state.
pub type StatusTx = std::sync::Arc<watch::Sender<Status>>;
