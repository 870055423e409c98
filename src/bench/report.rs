//! The bench's report: figures, target checks, the JSON file and the histogram picture.

use super::nodes::{self, NodeCpu};
pub use super::percentiles::Percentiles;
pub use super::targets::Check;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The pending-timers phase: intake and Redis memory.
#[derive(Debug, Clone, Serialize)]
pub struct PendingReport {
    /// Timers produced (due in a day, empty payload).
    pub timers: usize,
    /// Commands accepted.
    pub accepted: usize,
    /// Other answers, by reason.
    pub refused: BTreeMap<String, usize>,
    /// Accepted commands per second, from the first produced to the last answer.
    pub intake_per_s: f64,
    /// Redis `used_memory` before, bytes.
    pub redis_bytes_before: u64,
    /// Redis `used_memory` once all were accepted, bytes.
    pub redis_bytes_after: u64,
    /// (after - before) / accepted.
    pub bytes_per_timer: f64,
    /// CPU of each Redis primary over the phase, per accepted command.
    pub redis_cpu: Vec<NodeCpu>,
    /// CPU of the started ktimer instances over the phase, per accepted command.
    pub ktimer_cpu: Option<NodeCpu>,
    /// Redis's execution time per script family, per accepted command.
    pub redis_by_script: Option<super::scripts::ByScript>,
}

/// The fire phase.
#[derive(Debug, Clone, Serialize)]
pub struct FireReport {
    /// Timers produced.
    pub timers: usize,
    /// Commands the broker did not take.
    pub produce_failed: usize,
    /// Commands accepted.
    pub accepted: usize,
    /// Other answers, by reason.
    pub refused: BTreeMap<String, usize>,
    /// Accepted commands per second.
    pub intake_per_s: f64,
    /// Ms between the start of production and the first due time.
    pub lead_ms: i64,
    /// Ms between the last answer and the first due time (negative: some commands were
    /// accepted after timers were due, which makes them late through no fault of firing).
    pub answered_before_due_ms: i64,
    /// Timers fired at least once.
    pub fired: usize,
    /// Timers never fired (within the timeout).
    pub missing: usize,
    /// Records produced or received before their due time.
    pub early: usize,
    /// Records beyond the first of a timer.
    pub duplicates: usize,
    /// The first due time, Unix ms.
    pub first_due_ms: i64,
    /// The last first fire (ktimer's produce time), Unix ms.
    pub last_fired_ms: i64,
    /// Timers per second from the first due time to the last fire (for a spread, about
    /// the offered rate; for a burst, the capacity).
    pub fire_rate_per_s: f64,
    /// Timers per second from the first due time to the last received.
    pub delivery_rate_per_s: f64,
    /// Fire time (ktimer's produce time) minus due time.
    pub fire_lateness_ms: Percentiles,
    /// Time the bench received the record minus due time.
    pub delivery_lateness_ms: Percentiles,
    /// Whether commands were applied while timers fired: `--lead-ms` shorter than
    /// producing them takes (the span then runs from the first command), or an intake
    /// slower than the lead allowed (the span from the first due holds the commands
    /// answered after it). The costs below are then per timer, not per fire alone.
    pub per_timer: bool,
    /// CPU of each Redis primary from the first due (with `per_timer`, from the first
    /// command) to the last fire, per timer fired.
    pub redis_cpu: Vec<NodeCpu>,
    /// Redis commands over the same span, per timer fired.
    pub redis_calls: nodes::Calls,
    /// CPU of the started ktimer instances over the same span, per timer fired.
    pub ktimer_cpu: Option<NodeCpu>,
    /// Redis's execution time per script family over the same span, per timer fired.
    pub redis_by_script: Option<super::scripts::ByScript>,
    /// The highest peak resident memory of a started instance, MB (`VmHWM` of its
    /// process after the fires; absent when the bench started none).
    pub peak_rss_mb: Option<f64>,
    /// Records the started instances produced per fire over the span: the fire, and their
    /// results and state records (a written timer's tombstone); none when not counted.
    #[serde(default)]
    pub records_per_fire: Option<f64>,
}

/// The pass-through baseline.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineReport {
    /// Records piped.
    pub records: usize,
    /// Records per second from the pipe's start to the last received.
    pub rate_per_s: f64,
    /// ktimer's delivered fire rate / this rate.
    pub ratio: f64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Run id.
    pub run: String,
    /// The settings of the run.
    pub settings: serde_json::Value,
    /// Pending timers, intake and memory (absent with `--pending 0`).
    pub pending: Option<PendingReport>,
    /// Redis emptied and rebuilt from the state topic (with `--rebuild`).
    pub rebuild: Option<super::rebuild::RebuildReport>,
    /// The instances stopped and started again (with `--takeover`).
    pub takeover: Option<super::takeover::TakeoverReport>,
    /// The fire test.
    pub fire: FireReport,
    /// The baseline (absent with `--no-baseline`).
    pub baseline: Option<BaselineReport>,
    /// The producer floor (absent with `--no-baseline`).
    pub floor: Option<super::baseline::FloorReport>,
    /// The command-shaped baseline: ratio = the pending phase's intake rate / its rate
    /// (absent without pending timers or with `--no-baseline`).
    pub command_baseline: Option<BaselineReport>,
    /// How fast the machine ran before and after the run (set once the run ended).
    pub host: Option<super::host::HostSpeed>,
    /// Targets checked.
    pub checks: Vec<Check>,
}

/// Per second over a span of ms (at least 1 ms).
pub fn per_second(n: usize, from_ms: i64, to_ms: i64) -> f64 {
    (n as f64 * 1000.0 / (to_ms - from_ms).max(1) as f64).round()
}

/// Why commands were refused: each reason with its count, most frequent first, three at
/// most (another build's instances refuse a command schema they do not know).
pub fn refusals(refused: &BTreeMap<String, usize>) -> String {
    let mut by_count: Vec<(&String, &usize)> = refused.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1));
    let mut parts: Vec<String> = (by_count.iter().take(3))
        .map(|(why, n)| format!("{n} {why}"))
        .collect();
    if by_count.len() > 3 {
        parts.push(format!("{} other reasons", by_count.len() - 3));
    }
    parts.join("; ")
}

impl Report {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let f = &self.fire;
        let delayed = self.settings["via"] == "delay-topic";
        let via = if delayed {
            " (timers sent as delayed records)"
        } else if self.settings["bound"] == true {
            " (an application bound to topics of its own)"
        } else {
            ""
        };
        let _ = writeln!(s, "ktimer bench {}{via}", self.run);
        if let Some(bin) = self.settings["instance_bin"].as_str() {
            let _ = writeln!(s, "instances run {bin}");
        }
        if let Some(h) = &self.host {
            let _ = writeln!(s, "{}", h.line());
        }
        if let Some(p) = &self.pending {
            let _ = writeln!(
                s,
                "pending  {} timers loaded, {} accepted at {:.0}/s; Redis {:.1} MB -> {:.1} MB = {:.0} B per timer",
                p.timers,
                p.accepted,
                p.intake_per_s,
                p.redis_bytes_before as f64 / 1e6,
                p.redis_bytes_after as f64 / 1e6,
                p.bytes_per_timer
            );
            if !p.refused.is_empty() {
                let _ = writeln!(s, "         refused: {}", refusals(&p.refused));
            }
            let _ = writeln!(
                s,
                "         CPU per command: Redis {}{}",
                nodes::cpu_line(&p.redis_cpu),
                nodes::own_line(&p.ktimer_cpu)
            );
            if let Some(b) = &p.redis_by_script {
                let _ = writeln!(s, "         Redis µs per command by script: {}", b.line());
            }
        }
        if let Some(r) = &self.rebuild {
            let _ = writeln!(
                s,
                "rebuild  {} of {} pending timers restored from the state topic in {} ms ({:.0}/s), from FLUSHDB",
                r.restored, r.timers, r.elapsed_ms, r.per_s
            );
        }
        if let Some(t) = &self.takeover {
            let _ = writeln!(
                s,
                "takeover {} pending timers: new instances owned the {} partitions {} ms after the old ones stopped (group rebalance); taking one took at most {} ms ({} without a rebuild)",
                t.timers, t.partitions, t.owned_after_ms, t.taken_max_ms, t.taken
            );
        }
        let _ = writeln!(
            s,
            "intake   {} commands, {} accepted at {:.0}/s, last answer {} ms before the first due",
            f.timers, f.accepted, f.intake_per_s, f.answered_before_due_ms
        );
        if !f.refused.is_empty() {
            let _ = writeln!(s, "         refused: {}", refusals(&f.refused));
        }
        let _ = writeln!(
            s,
            "fired    {} of {}: missing {}, early {}, duplicates {}; fire rate {:.0}/s, delivered {:.0}/s",
            f.fired, f.timers, f.missing, f.early, f.duplicates, f.fire_rate_per_s, f.delivery_rate_per_s
        );
        let item = match f.per_timer {
            true => "timer",
            false => "fire",
        };
        if f.per_timer {
            let why = "commands were applied while timers fired: costs per timer, its command and its fire";
            let _ = writeln!(s, "         ({why})");
        }
        let _ = writeln!(
            s,
            "         CPU per {item}: Redis {}{}",
            nodes::cpu_line(&f.redis_cpu),
            nodes::own_line(&f.ktimer_cpu)
        );
        let _ = writeln!(s, "         Redis {}", f.redis_calls.line(item));
        if let Some(b) = &f.redis_by_script {
            let _ = writeln!(s, "         Redis µs per {item} by script: {}", b.line());
        }
        if let Some(mb) = f.peak_rss_mb {
            let _ = writeln!(s, "         peak RSS of a ktimer instance: {mb} MB");
        }
        let _ = writeln!(s, "fire lateness      {}", f.fire_lateness_ms.line());
        let _ = writeln!(s, "delivery lateness  {}", f.delivery_lateness_ms.line());
        if let Some(b) = &self.baseline {
            let _ = writeln!(
                s,
                "baseline pass-through pipe {} records at {:.0}/s; ktimer/baseline = {:.2}{}",
                b.records,
                b.rate_per_s,
                b.ratio,
                if self.settings["due"] == "spread" {
                    " (spread: the offered rate)"
                } else {
                    ""
                }
            );
        }
        if let Some(fl) = &self.floor {
            let _ = writeln!(
                s,
                "{}",
                fl.line(
                    f.ktimer_cpu
                        .as_ref()
                        .filter(|_| !f.per_timer)
                        .map(|c| c.us_per_item),
                    f.records_per_fire
                )
            );
        }
        if let Some(b) = &self.command_baseline {
            let _ = writeln!(
                s,
                "command baseline pass-through pipe {} create commands at {:.0}/s; pending intake/baseline = {:.2}",
                b.records, b.rate_per_s, b.ratio
            );
        }
        for c in &self.checks {
            let mark = if c.met { "ok  " } else { "MISS" };
            let _ = writeln!(s, "  [{mark}] {}: {}", c.what, c.measured);
        }
        s
    }

    /// Writes `bench-RUN.json` and `bench-RUN.svg` into `dir`; returns their paths.
    pub fn write(
        &self,
        dir: &Path,
        fire: &Histogram<u64>,
        delivery: &Histogram<u64>,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join(format!("bench-{}.json", self.run));
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)?;
        let svg = dir.join(format!("bench-{}.svg", self.run));
        std::fs::write(&svg, super::svg::histogram(self, fire, delivery))?;
        Ok((json, svg))
    }
}

#[cfg(test)]
mod tests {
    use super::refusals;
    use std::collections::BTreeMap;

    #[test]
    fn refusals_name_the_most_frequent_reasons_first_and_count_the_rest() {
        let refused: BTreeMap<String, usize> = [("a", 1), ("b", 5), ("c", 3), ("d", 2)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(refusals(&refused), "5 b; 3 c; 2 d; 1 other reasons");
        let one = BTreeMap::from([("REJECTED: unknown schema".to_string(), 100)]);
        assert_eq!(refusals(&one), "100 REJECTED: unknown schema");
    }
}
