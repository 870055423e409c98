//! A timer's history as the look-up reads it: the entries `record.lua` keeps in a record
//! (`h`, the last fire `lx`), which `read.lua` hands over as JSON arrays.

use serde::Serialize;

/// Operations of command entries, by their code in `record.lua` (`HIST_OPS`).
const OPS: [&str; 7] = [
    "unknown", "create", "update", "pause", "resume", "cancel", "fire_now",
];

/// How an entry ended (`HIST_OUTCOMES` in `record.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryOutcome {
    /// A command applied.
    Accepted,
    /// A command refused (see the reason).
    Rejected,
    /// A fire the callback topic acknowledged.
    Delivered,
    /// A fire that went to the dead-letter topic (see the reason).
    DeadLettered,
}

impl EntryOutcome {
    fn from_code(c: i64) -> Option<EntryOutcome> {
        Some(match c {
            1 => EntryOutcome::Accepted,
            2 => EntryOutcome::Rejected,
            3 => EntryOutcome::Delivered,
            4 => EntryOutcome::DeadLettered,
            _ => return None,
        })
    }
}

/// One entry of a timer's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HistoryEntry {
    /// A command that named the timer.
    Command {
        /// When ktimer applied it, Unix ms.
        at_ms: i64,
        /// `create`, `update`, `pause`, `resume`, `cancel` or `fire_now`.
        op: &'static str,
        /// Accepted or rejected.
        outcome: EntryOutcome,
        /// Its commands-topic offset.
        offset: i64,
        /// Its request id.
        request_id: String,
        /// Why it was rejected.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A fire produced.
    Fire {
        /// When it was produced (its last attempt), Unix ms.
        fired_ms: i64,
        /// Its due instant, Unix ms.
        due_ms: i64,
        /// `fired_ms - due_ms`.
        lateness_ms: i64,
        /// Its delivery attempt, 1 for the first.
        attempt: i64,
        /// Delivered or dead-lettered.
        outcome: EntryOutcome,
        /// Why it was dead-lettered.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl HistoryEntry {
    /// Reads one entry of timer `id` (an array, see `record.lua`); `None` if malformed.
    pub fn from_json(id: &str, e: &serde_json::Value) -> Option<HistoryEntry> {
        let a = e.as_array()?;
        let num = |i: usize| a.get(i).and_then(|v| v.as_f64()).map(|f| f as i64);
        let text = |i: usize| a.get(i).and_then(|v| v.as_str()).map(str::to_string);
        match num(0)? {
            1 => Some(HistoryEntry::Command {
                at_ms: num(1)?,
                op: OPS.get(num(2)? as usize).copied().unwrap_or(OPS[0]),
                outcome: EntryOutcome::from_code(num(3)?)?,
                offset: num(4)?,
                request_id: text(5).unwrap_or_else(|| id.to_string()),
                reason: text(6),
            }),
            2 => Some(HistoryEntry::Fire {
                fired_ms: num(1)?,
                due_ms: num(2)?,
                lateness_ms: num(1)? - num(2)?,
                attempt: num(3).unwrap_or(1),
                outcome: EntryOutcome::from_code(num(4)?)?,
                reason: text(5),
            }),
            _ => None,
        }
    }

    /// Reads a history (a JSON array of entries); malformed entries are left out.
    pub fn list(id: &str, json: &[u8]) -> Vec<HistoryEntry> {
        let v: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
        v.as_array()
            .map(|a| a.iter().filter_map(|e| Self::from_json(id, e)).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_record_lua_writes_them() {
        let h =
            br#"[[1,1000,1,1,7,true],[1,2000,3,2,9,"r-2","the timer is fired; create it again"],
            [2,5010,5000,2,4,"not delivered"],[9,1],[2,1]]"#;
        let l = HistoryEntry::list("order-42", h);
        assert_eq!(l.len(), 3, "{l:?}");
        assert_eq!(
            l[0],
            HistoryEntry::Command {
                at_ms: 1000,
                op: "create",
                outcome: EntryOutcome::Accepted,
                offset: 7,
                request_id: "order-42".into(),
                reason: None
            }
        );
        let HistoryEntry::Command { op, reason, .. } = &l[1] else {
            panic!("{l:?}")
        };
        assert_eq!(
            (*op, reason.as_deref()),
            ("pause", Some("the timer is fired; create it again"))
        );
        let j = serde_json::to_value(&l[2]).unwrap();
        assert_eq!(j["type"], "fire");
        assert_eq!(j["lateness_ms"], 10);
        assert_eq!(j["attempt"], 2);
        assert_eq!(j["outcome"], "dead_lettered");
        assert!(HistoryEntry::list("x", b"{}").is_empty());
    }
}
