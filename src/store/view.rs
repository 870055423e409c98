//! A typed look-up of one timer, for the admin port (which never reads raw fields).

use super::keys::field;
use super::{HistoryEntry, Store, StoreError};
use crate::codec;
use crate::timer::{TimerDef, TimerState};
use std::collections::HashMap;

/// A timer as Redis holds it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TimerView {
    /// Version: the offset of the last command that changed it.
    pub version: Option<i64>,
    /// State.
    pub state: Option<TimerState>,
    /// Whether it is a cron timer.
    pub cron: bool,
    /// The next due instant (one-shot: its due time).
    pub due_ms: Option<i64>,
    /// The last request id applied.
    pub request_id: Option<String>,
    /// What it delivers (`None` if unreadable).
    pub def: Option<TimerDef>,
    /// Cron: the schedule (JSON as stored).
    pub schedule: Option<serde_json::Value>,
    /// Cron: fires claimed so far.
    pub fires: Option<i64>,
    /// Cron: due instant of the last fire delivered.
    pub last_fired_due_ms: Option<i64>,
    /// Cron: occurrences are materialised through this instant.
    pub materialised_through_ms: Option<i64>,
    /// Fires that went to the dead-letter topic.
    pub dead_letters: DeadLetters,
    /// The last fire produced (a [`HistoryEntry::Fire`]).
    pub last_fire: Option<HistoryEntry>,
    /// Its commands and fires, oldest first (bounded, see [`super::History`]).
    pub history: Vec<HistoryEntry>,
}

/// Dead-lettered fires of a timer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeadLetters {
    /// How many (cron timers count; a one-shot timer's state says DEAD_LETTERED).
    pub count: Option<i64>,
    /// Due instant of the last one.
    pub last_due_ms: Option<i64>,
    /// Why the last one was not delivered.
    pub last_reason: Option<String>,
}

impl TimerView {
    /// Reads the fields of timer `id` (`read.lua`); `None` when there are none (no such
    /// timer).
    pub fn from_fields(id: &str, fields: &HashMap<String, Vec<u8>>) -> Option<TimerView> {
        if fields.is_empty() {
            return None;
        }
        let text = |k: &str| {
            fields
                .get(k)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let num = |k: &str| text(k).and_then(|v| v.parse::<i64>().ok());
        Some(TimerView {
            version: num(field::VERSION),
            state: text(field::STATE).and_then(|s| TimerState::from_stored(&s)),
            cron: text(field::KIND).as_deref() == Some(field::KIND_CRON),
            due_ms: num(field::DUE),
            request_id: text(field::REQUEST),
            def: fields
                .get(field::DEF)
                .and_then(|d| codec::decode_stored(d).ok()),
            schedule: text(field::SPEC).and_then(|j| serde_json::from_str(&j).ok()),
            fires: num(field::FIRES),
            last_fired_due_ms: num(field::LAST_FIRED),
            materialised_through_ms: num(field::HORIZON),
            dead_letters: DeadLetters {
                count: num(field::DEAD_LETTERS),
                last_due_ms: num(field::LAST_DEAD_LETTER_DUE),
                last_reason: text(field::LAST_DEAD_LETTER_REASON),
            },
            last_fire: fields
                .get(field::LAST_FIRE)
                .and_then(|j| HistoryEntry::list(id, j).pop()),
            history: fields
                .get(field::HISTORY)
                .map(|j| HistoryEntry::list(id, j))
                .unwrap_or_default(),
        })
    }
}

/// Fires due and not yet claimed in a partition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overdue {
    /// How many (in the first 10 minutes that have any).
    pub count: u64,
    /// The due time of the oldest, Unix ms.
    pub oldest_due_ms: Option<i64>,
}

impl Store {
    /// Looks timer `timer_id` of `partition` up; `None` when unknown (or expired).
    pub async fn timer(
        &self,
        partition: i32,
        timer_id: &str,
    ) -> Result<Option<TimerView>, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.read.call();
        inv.key(k.record_meta()).arg(k.base()).arg(timer_id);
        let mut p = redis::pipe();
        inv.add_to(&mut p);
        let (fields,): (HashMap<String, Vec<u8>>,) = self.run("read", &p).await?;
        Ok(TimerView::from_fields(timer_id, &fields))
    }

    /// Fires of `partition` due at `now_ms` and still in their minute slices (not claimed):
    /// how many (the first 10 overdue minutes) and the oldest due time.
    pub async fn overdue(&self, partition: i32, now_ms: i64) -> Result<Overdue, StoreError> {
        let k = self.keys(partition);
        let mut conn = self.conn.clone();
        let minutes: Vec<i64> = redis::cmd("ZRANGEBYSCORE")
            .arg(k.index())
            .arg("-inf")
            .arg(now_ms / 60_000)
            .arg("LIMIT")
            .arg(0)
            .arg(10)
            .query_async(&mut conn)
            .await?;
        let mut out = Overdue::default();
        for m in minutes {
            let slice = format!("{}{m}", k.slice_prefix());
            let (n, first): (u64, Vec<(String, i64)>) = redis::pipe()
                .zcount(&slice, "-inf", now_ms)
                .cmd("ZRANGE")
                .arg(&slice)
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await?;
            out.count += n;
            if let Some((_, due)) = first.first().filter(|(_, d)| *d <= now_ms) {
                out.oldest_due_ms = Some(out.oldest_due_ms.map_or(*due, |o: i64| o.min(*due)));
            }
        }
        Ok(out)
    }

    /// The live (scheduled or paused) timers of `partition` per application.
    pub async fn live_timers(&self, partition: i32) -> Result<HashMap<String, i64>, StoreError> {
        Ok(redis::cmd("HGETALL")
            .arg(self.keys(partition).apps())
            .query_async(&mut self.conn.clone())
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cron_timer_with_dead_letters_reads_back_typed() {
        let def = TimerDef {
            application: "billing".into(),
            ..Default::default()
        };
        let mut f: HashMap<String, Vec<u8>> = [
            (field::VERSION, "17"),
            (field::STATE, "scheduled"),
            (field::KIND, field::KIND_CRON),
            (field::DUE, "60000"),
            (field::REQUEST, "r-9"),
            (field::SPEC, r#"{"cron":"0 * * * * *"}"#),
            (field::FIRES, "3"),
            (field::DEAD_LETTERS, "1"),
            (field::LAST_DEAD_LETTER_REASON, "too large"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
        f.insert(field::DEF.into(), codec::encode_stored(&def).unwrap());
        let v = TimerView::from_fields("t", &f).unwrap();
        assert_eq!(v.version, Some(17));
        assert_eq!(v.state, Some(TimerState::Scheduled));
        assert!(v.cron);
        assert_eq!(v.due_ms, Some(60_000));
        assert_eq!(v.def, Some(def));
        assert_eq!(v.schedule.unwrap()["cron"], "0 * * * * *");
        assert_eq!(v.fires, Some(3));
        assert_eq!(v.dead_letters.count, Some(1));
        assert_eq!(v.dead_letters.last_reason.as_deref(), Some("too large"));
        assert_eq!(v.dead_letters.last_due_ms, None);
        assert_eq!(TimerView::from_fields("t", &HashMap::new()), None);
    }
}
