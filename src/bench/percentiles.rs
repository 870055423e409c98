//! Percentiles of a latency distribution, for the bench's report.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of a latency distribution, ms.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// The percentiles of `h`.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: (h.mean() * 100.0).round() / 100.0,
        }
    }

    /// The percentiles on one line, for the report.
    pub fn line(&self) -> String {
        format!(
            "p50 {} | p90 {} | p99 {} | p99.9 {} | max {} ms",
            self.p50, self.p90, self.p99, self.p999, self.max
        )
    }
}
