//! The done record of a delivered one-shot fire, built by the owner for the fire path's
//! lean acknowledgement (`swap.lua`): the claim answers the record it read from the
//! timer's own key; once the broker took the fire, ktimer sends that record and its done
//! form, and Redis swaps them if the key still holds the first (no Lua decoding,
//! packing or field tables per fire).
//!
//! Invariant: [`swap`]'s done record is, byte for byte, what `ack.lua` writes for the same
//! acknowledgement (`rec_done_raw`: the state `fired`, the fire as the last fire `lx`,
//! the other fields as read); tests/store.rs holds the two paths equal on a real Redis.
//! A record of any other shape gives no swap: `ack.lua` decides.

use super::record::{items, A, K, LX, P, ST, V};
use crate::timer::Fire;

/// `REC_STATES` codes: `scheduled`, `fired`.
const SCHEDULED: u64 = 1;
const FIRED: u8 = 3;
/// record.lua's `HIST_FIRE` entry kind and the `delivered` outcome.
const HIST_FIRE: u64 = 2;
const DELIVERED: u64 = 3;

/// A delivered one-shot fire, acknowledged by swapping its record (`swap.lua`).
#[derive(Debug, Clone, PartialEq)]
pub struct Swap {
    /// The in-flight member.
    pub member: String,
    /// The timer id (its own key).
    pub timer_id: String,
    /// The record the claim read.
    pub read: Vec<u8>,
    /// Its done form.
    pub done: Vec<u8>,
    /// The timer's application (its counts move).
    pub application: String,
    /// Whether a state of the timer was written (it owes a tombstone).
    pub written: bool,
    /// When it was produced, Unix epoch ms.
    pub fired_ms: i64,
    /// In which delivery attempt.
    pub attempt: i32,
}

/// The swap acknowledging `fire` (whose record the claim read as `read`), produced at
/// `fired_ms` in attempt `attempt`; `None` unless `read` is a scheduled one-shot record of
/// the fire's version with no last fire.
pub fn swap(fire: &Fire, read: Vec<u8>, fired_ms: i64, attempt: i32) -> Option<Swap> {
    let items = items(&read)?;
    let int = |i: usize| rmpv::decode::read_value(&mut &items[i][..]).ok()?.as_u64();
    let is_false = |i: usize| items.get(i).is_none_or(|b| b[..] == [0xc2]);
    if items.len() > LX || int(ST)? != SCHEDULED || !is_false(K) {
        return None;
    }
    if int(V)? != u64::try_from(fire.version).ok()? {
        return None;
    }
    let application = match items.get(A) {
        Some(b) if b[..] != [0xc2] => {
            let v = rmpv::decode::read_value(&mut &b[..]).ok()?;
            v.as_str()?.to_string()
        }
        _ => fire.def.application.clone(),
    };
    let written = !is_false(P);
    let mut lx = Vec::new();
    rmp::encode::write_array_len(&mut lx, 5).ok()?;
    for n in [
        HIST_FIRE,
        fired_ms as u64,
        fire.due_ms as u64,
        attempt as u64,
        DELIVERED,
    ] {
        rmp::encode::write_uint(&mut lx, n).ok()?;
    }
    let mut done = Vec::with_capacity(read.len() + lx.len() + 8);
    rmp::encode::write_array_len(&mut done, LX as u32 + 1).ok()?;
    for (i, b) in items.iter().enumerate() {
        if i == ST {
            done.push(FIRED);
        } else {
            done.extend_from_slice(b);
        }
    }
    done.resize(done.len() + LX - items.len(), 0xc2);
    rmp::encode::write_str_len(&mut done, lx.len() as u32).ok()?;
    done.extend_from_slice(&lx);
    Some(Swap {
        member: fire.member.clone(),
        timer_id: fire.timer_id.clone(),
        read,
        done,
        application,
        written,
        fired_ms,
        attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timer::TimerDef;

    fn fire(version: i64) -> Fire {
        Fire {
            member: format!("{version}:5000:t"),
            timer_id: "t".into(),
            version,
            due_ms: 5000,
            def: TimerDef {
                application: "app".into(),
                ..Default::default()
            },
            record: None,
        }
    }

    /// [v, st, rq, k, due, a, d, p, h] as record.lua packs a new one-shot timer.
    fn record(st: u8, k: u8, p: u8) -> Vec<u8> {
        let mut r = vec![
            0x99, 7, st, 0xc3, k, 0xcd, 0x13, 0x88, 0xc2, 0xa2, b'd', 0xff,
        ];
        r.extend([p, 0xa1, b'h']);
        r
    }

    #[test]
    fn a_scheduled_one_shot_record_becomes_fired_with_its_last_fire() {
        let s = swap(&fire(7), record(1, 0xc2, 0xc2), 9000, 2).unwrap();
        let mut want = vec![
            0x9a, 7, 3, 0xc3, 0xc2, 0xcd, 0x13, 0x88, 0xc2, 0xa2, b'd', 0xff,
        ];
        want.extend([0xc2, 0xa1, b'h']);
        // lx: [2, 9000, 5000, 2, 3] packed, as a string of 10 bytes.
        want.extend([0xaa, 0x95, 2, 0xcd, 0x23, 0x28, 0xcd, 0x13, 0x88, 2, 3]);
        assert_eq!(s.done, want);
        assert_eq!((s.application.as_str(), s.written), ("app", false));
        assert!(
            swap(&fire(7), record(1, 0xc2, 0xa1), 9000, 2)
                .unwrap()
                .written
        );
    }

    #[test]
    fn other_records_are_left_to_the_script() {
        assert!(
            swap(&fire(8), record(1, 0xc2, 0xc2), 9000, 1).is_none(),
            "version"
        );
        assert!(
            swap(&fire(7), record(2, 0xc2, 0xc2), 9000, 1).is_none(),
            "paused"
        );
        assert!(
            swap(&fire(7), record(1, 0xa1, 0xc2), 9000, 1).is_none(),
            "cron"
        );
        assert!(
            swap(&fire(7), b"\x91".to_vec(), 9000, 1).is_none(),
            "truncated"
        );
    }
}
