//! The admin API's listing (`list.lua`: a page of a partition's timers, filtered) and
//! counts per state and application (`BASE ac`, kept by `record.lua`).

use super::{bad_reply, Store, StoreError};
use crate::timer::TimerState;
use serde::Serialize;
use std::collections::BTreeMap;

/// Records one listing call looks at, at most (a bound on the time it holds Redis).
const LIST_BUDGET: usize = 5_000;

/// Which timers a listing answers.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this application's.
    pub application: Option<String>,
    /// Only timers in this state.
    pub state: Option<TimerState>,
    /// Only ids starting with this.
    pub id_prefix: String,
    /// Only timers with dead-lettered fires (a dead-lettered one-shot timer, a cron timer
    /// that counts some).
    pub dead_letters: bool,
    /// About this many timers per page (a page may hold a few more).
    pub limit: usize,
}

/// One timer of a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimerSummary {
    /// Its id.
    pub timer_id: String,
    /// Its partition of the commands topic.
    pub partition: i32,
    /// Its state.
    pub state: Option<TimerState>,
    /// Its next due instant (one-shot: its due), Unix ms.
    pub due_ms: Option<i64>,
    /// `ONCE` or `CRON`.
    pub kind: &'static str,
    /// Its version.
    pub version: i64,
    /// Its application.
    pub application: String,
    /// Fires that went to the dead-letter topic (cron timers count them).
    pub dead_letters: Option<i64>,
    /// Due instant of the last dead-lettered fire.
    pub last_dead_letter_due_ms: Option<i64>,
    /// Why the last dead-lettered fire was not delivered.
    pub last_dead_letter_reason: Option<String>,
}

impl Store {
    /// One page of the timers of `partition` that pass `f`, from `cursor` (`""` to start):
    /// the next cursor (`None` when the partition is done) and the timers.
    pub async fn list_page(
        &self,
        partition: i32,
        cursor: &str,
        f: &ListFilter,
    ) -> Result<(Option<String>, Vec<TimerSummary>), StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.list.call();
        inv.key(k.record_meta())
            .arg(k.base())
            .arg(cursor)
            .arg(f.application.as_deref().unwrap_or(""))
            .arg(f.state.map(|s| s.stored()).unwrap_or(""))
            .arg(&f.id_prefix)
            .arg(if f.dead_letters { "1" } else { "" })
            .arg(f.limit.max(1))
            .arg(LIST_BUDGET);
        let mut p = redis::pipe();
        inv.add_to(&mut p);
        let (reply,): (Vec<String>,) = self.run("list", &p).await?;
        parse_page(partition, reply)
    }

    /// The timers of `partition` per application and state: scheduled and paused ones
    /// now, done states since the partition was last rebuilt.
    pub async fn state_counts(
        &self,
        partition: i32,
    ) -> Result<BTreeMap<(String, TimerState), i64>, StoreError> {
        let raw: BTreeMap<String, i64> = redis::cmd("HGETALL")
            .arg(self.keys(partition).states())
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(parse_counts(raw))
    }
}

/// `STATE:APP -> n` (the application may hold `:`); unknown states are left out.
fn parse_counts(raw: BTreeMap<String, i64>) -> BTreeMap<(String, TimerState), i64> {
    raw.into_iter()
        .filter_map(|(f, n)| {
            let (st, app) = f.split_once(':')?;
            Some(((app.to_string(), TimerState::from_stored(st)?), n))
        })
        .collect()
}

/// A `list.lua` reply: the next cursor, then 9 fields per timer.
fn parse_page(
    partition: i32,
    reply: Vec<String>,
) -> Result<(Option<String>, Vec<TimerSummary>), StoreError> {
    let mut it = reply.into_iter();
    let next = it.next().ok_or_else(|| bad_reply("empty list reply"))?;
    let rest: Vec<String> = it.collect();
    if !rest.len().is_multiple_of(9) {
        return Err(bad_reply(format!("list reply of {} fields", rest.len())));
    }
    let num = |s: &str| s.parse::<i64>().ok();
    let timers = rest
        .chunks(9)
        .map(|c| TimerSummary {
            timer_id: c[0].clone(),
            partition,
            state: TimerState::from_stored(&c[1]),
            due_ms: num(&c[2]),
            kind: if c[3] == "c" { "CRON" } else { "ONCE" },
            version: num(&c[4]).unwrap_or(0),
            application: c[5].clone(),
            dead_letters: num(&c[6]),
            last_dead_letter_due_ms: num(&c[7]),
            last_dead_letter_reason: Some(c[8].clone()).filter(|r| !r.is_empty()),
        })
        .collect();
    Ok((Some(next).filter(|n| !n.is_empty()), timers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_and_counts_parse() {
        let reply = [
            "b4",
            "t1",
            "scheduled",
            "6000",
            "o",
            "7",
            "app:x",
            "",
            "",
            "",
        ]
        .map(String::from)
        .to_vec();
        let (next, l) = parse_page(2, reply).unwrap();
        assert_eq!(next.as_deref(), Some("b4"));
        assert_eq!(l[0].application, "app:x");
        assert_eq!(l[0].state, Some(TimerState::Scheduled));
        assert_eq!(
            (l[0].due_ms, l[0].kind, l[0].partition),
            (Some(6000), "ONCE", 2)
        );
        assert_eq!(l[0].dead_letters, None);
        assert!(parse_page(0, vec!["".into(), "x".into()]).is_err());
        assert_eq!(parse_page(0, vec!["".into()]).unwrap(), (None, vec![]));
        let raw = [("paused:a:b".to_string(), 2), ("bogus:a".to_string(), 1)].into();
        let c = parse_counts(raw);
        assert_eq!(c.len(), 1);
        assert_eq!(c[&("a:b".to_string(), TimerState::Paused)], 2);
    }
}
