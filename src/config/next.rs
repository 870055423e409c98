//! `ktimer next`: the flags of the schedule preview.

use clap::Args;

/// Prints the next due instants of a repeating schedule (cron or interval) (UTC and the zone's wall clock, with a
/// note where the zone's offset changes), computed as the service computes them.
#[derive(Debug, Clone, Args)]
pub struct NextArgs {
    /// Cron expression with seconds (sec min hour day-of-month month day-of-week [year])
    /// or the 5-field form.
    #[arg(long, env = "KTIMER_NEXT_CRON", required_unless_present = "every_ms")]
    pub cron: Option<String>,
    /// An interval instead of a cron expression: every this many ms from `--start-ms`
    /// (default: one interval after `--from-ms`).
    #[arg(long, env = "KTIMER_NEXT_EVERY_MS", conflicts_with = "cron")]
    pub every_ms: Option<i64>,
    /// Each instant up to this many ms later, as the timer `--timer-id` fires it.
    #[arg(long, env = "KTIMER_NEXT_JITTER_MS", requires = "timer_id")]
    pub jitter_ms: Option<i64>,
    /// An exclusion calendar of `--applications` the schedule obeys.
    #[arg(long, env = "KTIMER_NEXT_CALENDAR", requires = "applications")]
    pub calendar: Option<String>,
    /// Defer (rather than skip) the occurrences `--calendar` excludes.
    #[arg(long, env = "KTIMER_NEXT_DEFER", requires = "calendar")]
    pub defer: bool,
    /// The applications file defining `--calendar`.
    #[arg(long, env = "KTIMER_APPLICATIONS", value_parser = crate::apps::Apps::load)]
    pub applications: Option<crate::apps::Apps>,
    /// The timer whose jitter to apply (its id seeds the offsets).
    #[arg(long, env = "KTIMER_NEXT_TIMER_ID", default_value = "")]
    pub timer_id: String,
    /// IANA time zone of the expression.
    #[arg(long, env = "KTIMER_NEXT_TIME_ZONE", default_value = "UTC")]
    pub time_zone: String,
    /// No instant before this one (Unix epoch ms), as a timer's `start_ms` (an interval's
    /// anchor).
    #[arg(long, env = "KTIMER_NEXT_START_MS")]
    pub start_ms: Option<i64>,
    /// No instant after this one (Unix epoch ms), as a timer's `end_ms`.
    #[arg(long, env = "KTIMER_NEXT_END_MS")]
    pub end_ms: Option<i64>,
    /// The instants after this one (Unix epoch ms); default now.
    #[arg(long, env = "KTIMER_NEXT_FROM_MS")]
    pub from_ms: Option<i64>,
    /// How many instants.
    #[arg(
        short = 'n',
        long = "count",
        env = "KTIMER_NEXT_COUNT",
        default_value_t = 10
    )]
    pub count: usize,
}
