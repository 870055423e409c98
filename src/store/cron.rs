//! The migrator's scripts: which cron windows must be extended (`cron_due.lua`),
//! materialising their next occurrences (`materialize.lua`), and promoting the one-shot
//! timers due soon out of the bucket (`promote.lua`).

use super::{bad_reply, Store, StoreError};
use crate::schedule::{CronSpec, Occurrences};

/// A cron timer whose materialised window must be extended.
#[derive(Debug)]
pub struct CronDue {
    /// Timer id.
    pub timer_id: String,
    /// Its version when read.
    pub version: i64,
    /// Its schedule (an error if the stored JSON is unreadable).
    pub spec: Result<CronSpec, serde_json::Error>,
    /// Occurrences up to this instant are materialised.
    pub covered_ms: i64,
}

impl Store {
    /// Cron timers of `partition` whose window must be extended by `now_ms`, at most `limit`.
    pub async fn cron_due(
        &self,
        partition: i32,
        epoch: i64,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<CronDue>, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.cron_due.call();
        inv.key(k.epoch())
            .key(k.cron())
            .arg(epoch)
            .arg(now_ms)
            .arg(limit)
            .arg(k.base());
        let reply: Vec<String> = self.listed("cron_due", partition, inv).await?;
        reply.chunks_exact(4).map(parse_cron_due).collect()
    }

    /// Materialises the occurrences the migrator computed at `now_ms`, in one atomic call.
    pub async fn materialize(
        &self,
        partition: i32,
        epoch: i64,
        batch: &[(CronDue, Occurrences)],
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.materialize.call();
        inv.key(k.epoch())
            .key(k.index())
            .key(k.cron())
            .key(k.inflight())
            .key(k.dirty())
            .key(k.apps())
            .arg(epoch)
            .arg(k.slice_prefix())
            .arg(k.base())
            .arg(self.retention_ms);
        for (due, o) in batch {
            inv.arg(&due.timer_id)
                .arg(due.version)
                .arg(o.covered_ms)
                .arg(refill_at(o, now_ms))
                .arg(o.dues.len());
            for d in &o.dues {
                inv.arg(d);
            }
        }
        self.counted("materialize", partition, inv).await
    }

    /// Moves the one-shot timers of `partition` due up to `through_ms` from the bucket
    /// to keys of their own (`promote.lua`), looking at most at `budget` slice members;
    /// `true` when the budget ran out first (call again).
    pub async fn promote(
        &self,
        partition: i32,
        epoch: i64,
        through_ms: i64,
        budget: usize,
    ) -> Result<bool, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.promote.call();
        inv.key(k.epoch())
            .key(k.index())
            .key(k.record_meta())
            .arg(epoch)
            .arg(k.base())
            .arg(k.slice_prefix())
            .arg(through_ms)
            .arg(budget);
        Ok(self.counted("promote", partition, inv).await? > 0)
    }
}

/// One `id, version, spec, covered` group of cron_due.lua's answer.
fn parse_cron_due(c: &[String]) -> Result<CronDue, StoreError> {
    let bad = || bad_reply(format!("cron_due returned {c:?}"));
    Ok(CronDue {
        timer_id: c[0].clone(),
        version: c[1].parse().map_err(|_| bad())?,
        spec: serde_json::from_str(&c[2]),
        covered_ms: c[3].parse().map_err(|_| bad())?,
    })
}

/// When the migrator must extend a window materialised up to `o.covered_ms`, seen at
/// `now_ms`: halfway there (so a window is always at least half full), or never (`""`)
/// when the schedule is exhausted.
pub(super) fn refill_at(o: &Occurrences, now_ms: i64) -> String {
    if o.exhausted {
        return String::new();
    }
    (now_ms + (o.covered_ms - now_ms).max(0) / 2).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_refilled_halfway() {
        let o = |covered_ms, exhausted| Occurrences {
            dues: vec![],
            covered_ms,
            exhausted,
        };
        assert_eq!(refill_at(&o(10_000, false), 2_000), "6000");
        assert_eq!(refill_at(&o(1_000, false), 2_000), "2000");
        assert_eq!(refill_at(&o(10_000, true), 2_000), "");
    }

    #[test]
    fn cron_due_groups_parse() {
        let g = |v: [&str; 4]| v.map(String::from).to_vec();
        let d = parse_cron_due(&g(["t", "3", "{}", "900"])).unwrap();
        assert_eq!(
            (d.timer_id.as_str(), d.version, d.covered_ms),
            ("t", 3, 900)
        );
        assert!(d.spec.is_err(), "an unreadable spec is reported, not fatal");
        assert!(parse_cron_due(&g(["t", "x", "{}", "900"])).is_err());
    }
}
