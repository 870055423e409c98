//! `ktimer check`: where the deployment to check is.

use super::KafkaArgs;
use clap::Args;

/// `ktimer check`: the broker, topics and Redis an instance would use.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Broker and topics (the same flags and variables as `ktimer run`).
    #[command(flatten)]
    pub kafka: KafkaArgs,
    /// Redis URL (as for `ktimer run`).
    #[arg(
        long,
        env = "KTIMER_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// The applications file (as for `ktimer run`): each bound application's topics are
    /// checked too.
    #[arg(long, env = "KTIMER_APPLICATIONS", value_parser = crate::apps::Apps::load)]
    pub applications: Option<crate::apps::Apps>,
    /// How long each dependency may take to answer, in seconds.
    #[arg(long, env = "KTIMER_CHECK_TIMEOUT_S", default_value_t = 10)]
    pub timeout_s: u64,
}
