//! How fast the machine itself ran: a fixed piece of CPU work timed before the run and
//! again after it, while nothing else of the bench runs.
//!
//! On a shared or virtual machine the CPU a process gets can change by half within
//! minutes (neighbours, host load). Every figure of a run moves with it, so a
//! comparison between two runs means something only when their reference steps are
//! alike: the report prints both and says when they differ by more than a fifth.

use serde::Serialize;
use std::hint::black_box;
use std::time::Instant;

/// Steps of one timing.
const STEPS: u64 = 2_000_000;
/// Timings per measurement (the median is kept).
const TIMINGS: usize = 7;
/// Reference steps that differ by more than this ratio make a run's figures suspect.
const DRIFT: f64 = 1.2;

/// The reference step's duration before and after a run, ns.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HostSpeed {
    /// Before the first phase.
    pub before_ns: f64,
    /// After the last phase and the clean-up.
    pub after_ns: f64,
}

impl HostSpeed {
    /// Whether the machine ran at about the same speed before and after.
    pub fn steady(&self) -> bool {
        let (lo, hi) = if self.before_ns <= self.after_ns {
            (self.before_ns, self.after_ns)
        } else {
            (self.after_ns, self.before_ns)
        };
        hi <= lo * DRIFT
    }

    /// The report's line.
    pub fn line(&self) -> String {
        let note = if self.steady() {
            "steady"
        } else {
            "the machine's speed changed during the run: compare its figures with care"
        };
        format!(
            "host     reference step {:.2} ns before the run, {:.2} ns after ({note})",
            self.before_ns, self.after_ns
        )
    }
}

/// Times the reference step: the median of several timings of a fixed integer loop
/// (a splitmix64 sequence the optimiser cannot fold), ns per step. Blocks for about
/// 20 to 100 ms.
pub fn reference_ns() -> f64 {
    let mut timings: Vec<f64> = (0..TIMINGS)
        .map(|_| {
            let started = Instant::now();
            let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
            for _ in 0..STEPS {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                x = black_box(z ^ (z >> 31));
            }
            started.elapsed().as_nanos() as f64 / STEPS as f64
        })
        .collect();
    timings.sort_by(f64::total_cmp);
    (timings[TIMINGS / 2] * 1000.0).round() / 1000.0
}

/// [`reference_ns`] off the async runtime.
pub async fn measure() -> f64 {
    tokio::task::spawn_blocking(reference_ns)
        .await
        .unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::{reference_ns, HostSpeed};

    #[test]
    fn a_run_is_steady_unless_the_steps_differ_by_more_than_a_fifth() {
        let h = |before_ns, after_ns| HostSpeed {
            before_ns,
            after_ns,
        };
        assert!(h(1.0, 1.19).steady());
        assert!(h(1.19, 1.0).steady());
        assert!(!h(1.0, 1.3).steady());
        assert!(!h(1.3, 1.0).steady());
        assert!(h(1.0, 1.3).line().contains("changed during the run"));
        assert!(h(2.0, 2.0)
            .line()
            .contains("2.00 ns before the run, 2.00 ns after (steady)"));
    }

    #[test]
    fn the_reference_step_takes_a_measurable_time() {
        let ns = reference_ns();
        assert!(ns.is_finite() && ns > 0.0 && ns < 1_000.0, "{ns}");
    }
}
