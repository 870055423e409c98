//! `ktimer timers ...`: the admin API from the command line (the same routes the console
//! and scripts use).

use clap::{Args, Subcommand};

/// `ktimer timers`: where the admin API is, and what to do.
#[derive(Debug, Args)]
pub struct TimersArgs {
    /// The admin port of any ktimer instance.
    #[arg(
        long,
        env = "KTIMER_ADMIN_URL",
        default_value = "http://127.0.0.1:9464"
    )]
    pub admin_url: String,
    /// Admin API token (`Authorization: Bearer`), when the instance has tokens.
    #[arg(long, env = "KTIMER_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The application whose timers to reach: a bound application's are in its own lane
    /// (an application's token implies its own); `list` shows only its timers.
    #[arg(long, env = "KTIMER_APPLICATION", global = true)]
    pub application: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub action: TimersAction,
}

/// One admin API call.
#[derive(Debug, Subcommand)]
pub enum TimersAction {
    /// Look a timer up: definition, state, last fire, history (JSON).
    Get {
        /// Timer id.
        id: String,
    },
    /// List timers, one line each (id, state, due, application), following the cursor.
    List {
        /// Only timers in this state (SCHEDULED, PAUSED, FIRED, CANCELLED, COMPLETED,
        /// DEAD_LETTERED).
        #[arg(long)]
        state: Option<String>,
        /// Only ids starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// A timer's commands and fires, oldest first.
    History {
        /// Timer id.
        id: String,
    },
    /// Pause a timer (through the commands topic; prints the result).
    Pause {
        /// Timer id.
        id: String,
    },
    /// Resume a paused timer.
    Resume {
        /// Timer id.
        id: String,
    },
    /// Cancel a timer.
    Cancel {
        /// Timer id.
        id: String,
    },
    /// One extra fire now (the schedule unchanged; re-drives a dead-lettered timer).
    FireNow {
        /// Timer id.
        id: String,
    },
    /// Counts per application and state.
    Apps,
}
