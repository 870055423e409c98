//! The targets a run is judged by (`[ok]`/`[MISS]` in the report), each where the run's
//! shape allows: rates as ratios to the pass-through pipe of the same run and costs per
//! operation, which carry over to other machines (absolute rates do not).

use super::report::Report;
use serde::Serialize;

/// One target, checked where the run's shape allows.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked.
    pub what: String,
    /// The measured figure.
    pub measured: String,
    /// Whether it meets the target.
    pub met: bool,
}

fn check(checks: &mut Vec<Check>, what: &str, measured: String, met: bool) {
    checks.push(Check {
        what: what.into(),
        measured,
        met,
    });
}

/// What a burst run measured that its targets judge.
struct Burst {
    /// Timers fired.
    timers: usize,
    /// The latest fire's lateness, ms.
    max_lateness_ms: u64,
    /// Fire rate over the pass-through pipe's, when the pipe was measured.
    ratio: Option<f64>,
    /// Peak RSS of an instance, MB, when known.
    peak_rss_mb: Option<f64>,
}

/// The burst's targets: up to 100,000 timers, all fired within 2 s of due and at least
/// 0.9 of the pass-through pipe; a million or more, at least 0.75 of the pipe with a
/// peak RSS of 1 GB at most.
fn burst_checks(c: &mut Vec<Check>, b: &Burst) {
    if b.timers <= 100_000 {
        let max = b.max_lateness_ms;
        let within = format!("max {max} ms");
        check(c, "burst: all fired within 2 s of due", within, max <= 2000);
        if let Some(ratio) = b.ratio {
            let what = "burst fire rate >= 0.9 of the pass-through baseline";
            check(c, what, format!("{ratio:.2}"), ratio >= 0.9);
        }
    } else if b.timers >= 1_000_000 {
        if let Some(ratio) = b.ratio {
            let what = "1M burst fire rate >= 0.75 of the pass-through baseline";
            check(c, what, format!("{ratio:.2}"), ratio >= 0.75);
        }
        if let Some(mb) = b.peak_rss_mb {
            let what = "1M burst: peak RSS of an instance <= 1 GB";
            check(c, what, format!("{mb} MB"), mb <= 1024.0);
        }
    }
}

/// What the fire path cost, for its targets.
struct FirePath {
    /// A burst (else a steady rate of at least 10,000/s).
    burst: bool,
    /// Timers fired.
    timers: usize,
    /// Redis CPU per fire, all primaries, µs.
    redis_us: f64,
    /// Keyspace operations per fire.
    keyspace: f64,
    /// ktimer's CPU per fire, µs, and the producer floor per fire (its records per fire
    /// included: [`super::baseline::FloorReport::per_fire`]), when measured.
    ktimer_us: Option<f64>,
    floor_us: Option<f64>,
}

/// The fire path's targets: Redis CPU per fire at most 5 µs in a burst of up to 100,000,
/// 7 µs in a burst of a million, 8 µs at a steady rate; at most 3 keyspace operations per
/// fire; ktimer's CPU per fire at most 10 µs in a burst, at most 1.5 times the producer
/// floor at a steady rate.
fn fire_path_checks(c: &mut Vec<Check>, f: &FirePath) {
    let most = match (f.burst, f.timers) {
        (true, n) if n >= 1_000_000 => 7.0,
        (true, _) => 5.0,
        (false, _) => 8.0,
    };
    let what = format!("Redis CPU <= {most} µs per fire");
    check(
        c,
        &what,
        format!("{:.1} µs", f.redis_us),
        f.redis_us <= most,
    );
    let what = "Redis keyspace operations <= 3 per fire";
    check(c, what, format!("{:.2}", f.keyspace), f.keyspace <= 3.0);
    match (f.burst, f.ktimer_us, f.floor_us) {
        (true, Some(us), _) => {
            let what = "ktimer CPU <= 10 µs per fire in a burst";
            check(c, what, format!("{us:.1} µs"), us <= 10.0);
        }
        (false, Some(us), Some(floor)) if floor > 0.0 => {
            let times = us / floor;
            let what = "ktimer CPU per fire <= 1.5 times the producer floor";
            check(c, what, format!("{times:.1}"), times <= 1.5);
        }
        _ => {}
    }
}

impl Report {
    /// Fills `checks` with the targets this run's shape can judge.
    pub fn judge(&mut self, burst: bool, offered_per_s: f64) {
        let f = &self.fire;
        let mut c = Vec::new();
        check(&mut c, "no early fire", f.early.to_string(), f.early == 0);
        let missing = f.missing.to_string();
        check(&mut c, "no missing fire", missing, f.missing == 0);
        let (fl, n) = (&f.fire_lateness_ms, f.timers);
        let steady = !burst && offered_per_s >= 10_000.0 && n >= 10_000;
        if burst {
            let b = Burst {
                timers: n,
                max_lateness_ms: fl.max,
                ratio: self.baseline.as_ref().map(|b| b.ratio),
                peak_rss_mb: f.peak_rss_mb,
            };
            burst_checks(&mut c, &b);
        } else if steady && offered_per_s >= 25_000.0 {
            let p99 = format!("{} ms", fl.p99);
            check(
                &mut c,
                "steady >= 30k/s: fire lateness p99 <= 10 ms",
                p99,
                fl.p99 <= 10,
            );
        } else if steady {
            let p99 = format!("{} ms", fl.p99);
            check(
                &mut c,
                "steady >= 10k/s: fire lateness p99 <= 3 ms",
                p99,
                fl.p99 <= 3,
            );
            let p999 = format!("{} ms", fl.p999);
            let what = "steady >= 10k/s: fire lateness p99.9 <= 6 ms";
            check(&mut c, what, p999, fl.p999 <= 6);
        }
        // (Costs per timer, a command's included, are not judged as a fire's.)
        if (burst || steady) && !f.per_timer {
            let fp = FirePath {
                burst,
                timers: n,
                redis_us: f.redis_cpu.iter().map(|n| n.us_per_item).sum(),
                keyspace: f.redis_calls.keyspace_per_item,
                ktimer_us: f.ktimer_cpu.as_ref().map(|c| c.us_per_item),
                floor_us: (self.floor.as_ref()).map(|fl| fl.per_fire(f.records_per_fire)),
            };
            fire_path_checks(&mut c, &fp);
        }
        if let Some(p) = &self.pending {
            let redis: f64 = p.redis_cpu.iter().map(|n| n.us_per_item).sum();
            let what = "Redis CPU <= 8 µs per command";
            check(&mut c, what, format!("{redis:.1} µs"), redis <= 8.0);
            if let Some(b) = &self.command_baseline {
                let what = "intake >= 0.45 of the command pass-through baseline";
                check(&mut c, what, format!("{:.2}", b.ratio), b.ratio >= 0.45);
            }
            let bytes = format!("{:.0} B", p.bytes_per_timer);
            let what = "Redis <= 200 B per pending timer";
            check(&mut c, what, bytes, p.bytes_per_timer <= 200.0);
            if let Some(cpu) = &p.ktimer_cpu {
                let us = cpu.us_per_item;
                let what = "ktimer CPU <= 15 µs per command";
                check(&mut c, what, format!("{us:.1} µs"), us <= 15.0);
            }
        }
        if let Some(t) = &self.takeover {
            check(
                &mut c,
                "takeover: every partition taken in under 1 s, without a rebuild",
                format!("{} of {}, max {} ms", t.taken, t.partitions, t.taken_max_ms),
                t.taken == t.partitions && t.taken_max_ms < 1_000,
            );
        }
        self.checks = c;
    }
}

#[cfg(test)]
mod tests;
