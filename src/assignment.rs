//! How a consumer group spreads the commands topic's partitions over its instances
//! (`--assignment`): configuration that `kafka` turns into librdkafka's setting.

/// How the group spreads partitions over its instances (`--assignment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Assignment {
    /// Incremental: only the partitions that must move are revoked (KIP-429).
    #[default]
    CooperativeSticky,
    /// Eager: every rebalance revokes every partition, then hands out ranges.
    Range,
    /// Eager, round robin.
    Roundrobin,
}

impl Assignment {
    /// librdkafka's `partition.assignment.strategy` value.
    pub fn librdkafka(self) -> &'static str {
        match self {
            Assignment::CooperativeSticky => "cooperative-sticky",
            Assignment::Range => "range",
            Assignment::Roundrobin => "roundrobin",
        }
    }
}
