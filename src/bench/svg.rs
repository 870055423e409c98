//! The lateness histogram as an SVG picture: share of timers per lateness bucket, fire
//! and delivery lateness side by side, percentiles in the title.

use super::report::Report;
use hdrhistogram::Histogram;
use std::fmt::Write as _;

/// Bucket lower bounds, ms; the last bucket is open.
const EDGES: [u64; 24] = [
    0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000,
    5000, 10000,
];

fn label(i: usize) -> String {
    match EDGES.get(i + 1) {
        Some(&hi) if hi == EDGES[i] + 1 => format!("{}", EDGES[i]),
        Some(&hi) => format!("{}-{}", EDGES[i], hi - 1),
        None => format!("{}+", EDGES[i]),
    }
}

/// Shares of the samples of `h` per bucket.
fn shares(h: &Histogram<u64>) -> Vec<f64> {
    let n = h.len().max(1) as f64;
    (0..EDGES.len())
        .map(|i| {
            let hi = EDGES.get(i + 1).map_or(u64::MAX, |&hi| hi - 1);
            h.count_between(EDGES[i], hi) as f64 / n
        })
        .collect()
}

/// The picture.
pub fn histogram(r: &Report, fire: &Histogram<u64>, delivery: &Histogram<u64>) -> String {
    let (w, h, left, top, bottom) = (960.0, 460.0, 70.0, 70.0, 90.0);
    let plot_w = w - left - 20.0;
    let plot_h = h - top - bottom;
    let series = [
        ("fire lateness", "#1f77b4", shares(fire)),
        ("delivery lateness", "#ff7f0e", shares(delivery)),
    ];
    let top_share = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .fold(0.01, f64::max);
    let ymax = (top_share * 10.0).ceil() / 10.0;
    let slot = plot_w / EDGES.len() as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let f = &r.fire;
    let title = format!(
        "ktimer bench {}: {} timers, {} fired, {} missing, {} early, {} duplicates",
        r.run, f.timers, f.fired, f.missing, f.early, f.duplicates
    );
    let sub = format!(
        "fire lateness p50 {} / p99 {} / p99.9 {} / max {} ms; delivery p50 {} / p99 {} / p99.9 {} / max {} ms",
        f.fire_lateness_ms.p50,
        f.fire_lateness_ms.p99,
        f.fire_lateness_ms.p999,
        f.fire_lateness_ms.max,
        f.delivery_lateness_ms.p50,
        f.delivery_lateness_ms.p99,
        f.delivery_lateness_ms.p999,
        f.delivery_lateness_ms.max
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="24" font-size="15">{title}</text><text x="{left}" y="44">{sub}</text>"#
    );
    for k in 0..=5 {
        let v = ymax * k as f64 / 5.0;
        let y = top + plot_h - plot_h * v / ymax;
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}%</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            v * 100.0
        );
    }
    for (j, (name, color, values)) in series.iter().enumerate() {
        for (i, v) in values.iter().enumerate() {
            let bh = plot_h * v / ymax;
            let x = left + slot * i as f64 + 3.0 + j as f64 * (slot - 6.0) / 2.0;
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{color}"><title>{name} {} ms: {:.2}%</title></rect>"#,
                top + plot_h - bh,
                (slot - 6.0) / 2.0,
                label(i),
                v * 100.0
            );
        }
        let ly = top - 8.0;
        let lx = left + plot_w - 300.0 + j as f64 * 150.0;
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{ly}">{name}</text>"#,
            ly - 10.0,
            lx + 16.0
        );
    }
    for i in 0..EDGES.len() {
        let x = left + slot * (i as f64 + 0.5);
        let y = top + plot_h + 12.0;
        let _ = write!(
            s,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-45 {x:.1} {y:.1})">{}</text>"#,
            label(i)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">lateness (ms), share of timers</text></svg>"#,
        left + plot_w / 2.0,
        h - 10.0
    );
    s
}
