//! A new one-shot timer's record, built by the owner: the partition has one writer, so
//! what a create of a timer Redis holds no record of writes is known before the call.
//! ktimer sends it packed (record.lua's `rec_pack` format: a MessagePack array in the
//! order of `REC_FIELDS`): whole to create.lua ([`Fresh::record`], its definition's prefix
//! numbered as the partition numbers it, `prefixes.rs`), or around the definition to
//! apply.lua, which fills it in (`rec_put_fresh`); the state the intake writes for it is
//! built here too, so Redis answers only that it used this one. Lua no longer unpacks,
//! packs or lists the fields of the most common command.
//!
//! Invariant: [`FreshState::fields`] are what `rec_get` would read from the record written,
//! and the packed parts are what `rec_pack` would write for them (tests/store.rs holds
//! both against record.lua on a real Redis).

use crate::codec::{encode_timer_state_pairs, CodecError};
use crate::timer::{ApplyRequest, TimerFields};
use serde_bytes::ByteBuf;

/// `HIST_CREATED` in record.lua: a new one-shot timer's short history entry.
const HIST_CREATED: i64 = 0;

/// The record of a new one-shot timer, and its state.
#[derive(Debug, Clone, PartialEq)]
pub struct Fresh {
    /// The array header and the fields before the definition (`v st rq k due a`).
    pub head: Vec<u8>,
    /// The fields after the definition (`p h`), trailing absent ones left out.
    pub tail: Vec<u8>,
    /// What its state is made of; none for a deferred timer (it owes no state yet).
    pub state: Option<FreshState>,
}

/// The fields of a new one-shot timer's state, kept until apply.lua says it used the
/// record (most creates: the state is built only then).
#[derive(Debug, Clone, PartialEq)]
pub struct FreshState {
    offset: i64,
    request_id: String,
    due_ms: i64,
    application: String,
    def: Vec<u8>,
    history: Option<Vec<u8>>,
}

impl Fresh {
    /// The record of `r`, a create of a one-shot timer due at `due_ms` with stored
    /// definition `def` (of application `def_app`), applied at `now_ms`: `deferred` when
    /// it is due within the deferral window (no state owed yet: no `p`), with the short
    /// history entry when `history` (histories are kept).
    pub fn new(
        r: &ApplyRequest,
        due_ms: i64,
        def: &[u8],
        def_app: &str,
        now_ms: i64,
        deferred: bool,
        history: bool,
    ) -> Fresh {
        let h = history.then(|| {
            let mut h = vec![0x91, 0x92];
            write_int(&mut h, HIST_CREATED);
            write_int(&mut h, due_ms - now_ms);
            h
        });
        let count = match (&h, deferred) {
            (Some(_), _) => 9,
            (None, false) => 8,
            (None, true) => 7,
        };
        let mut head = Vec::with_capacity(32 + r.request_id.len());
        head.push(0x90 | count);
        write_int(&mut head, r.offset);
        write_int(&mut head, 1); // REC_STATES: scheduled
        match r.request_id == r.timer_id {
            true => head.push(0xc3),
            false => write_str(&mut head, r.request_id.as_bytes()),
        }
        head.push(0xc2); // a one-shot kind is absent
        write_int(&mut head, due_ms);
        match r.application == def_app {
            true => head.push(0xc2),
            false => write_str(&mut head, r.application.as_bytes()),
        }
        let mut tail = Vec::with_capacity(16);
        if count > 7 {
            match deferred {
                true => tail.push(0xc2),
                false => write_str(&mut tail, b"1"),
            }
        }
        if let Some(h) = &h {
            write_str(&mut tail, h);
        }
        let state = (!deferred).then(|| FreshState {
            offset: r.offset,
            request_id: r.request_id.clone(),
            due_ms,
            application: r.application.clone(),
            def: def.to_vec(),
            history: h,
        });
        Fresh { head, tail, state }
    }

    /// The whole record, as create.lua writes it: the head, stored definition `def` as a
    /// record holds it (with `numbered` = (n, prefix length): `{n, rest}`, its prefix as
    /// the partition numbers it; else whole), then the tail.
    pub fn record(&self, def: &[u8], numbered: Option<(u32, usize)>) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + def.len() + self.tail.len() + 8);
        out.extend_from_slice(&self.head);
        match numbered {
            Some((n, len)) => {
                rmp::encode::write_array_len(&mut out, 2).expect("writing to a Vec");
                rmp::encode::write_uint(&mut out, u64::from(n)).expect("writing to a Vec");
                write_str(&mut out, &def[len..]);
            }
            None => write_str(&mut out, def),
        }
        out.extend_from_slice(&self.tail);
        out
    }
}

impl FreshState {
    /// The timer's state record for the state topic: the bytes of
    /// `encode_timer_state(&self.fields())`, without building the fields.
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        self.with_pairs(encode_timer_state_pairs)
    }

    /// The timer's fields once created, as the state topic takes them (state owed: `p`).
    pub fn fields(&self) -> TimerFields {
        self.with_pairs(|pairs| TimerFields {
            fields: (pairs.iter())
                .map(|(k, v)| (k.to_string(), ByteBuf::from(v.to_vec())))
                .collect(),
        })
    }

    /// `f` of the timer's (field, value) pairs, in field order: the one list of them.
    fn with_pairs<R>(&self, f: impl FnOnce(&[(&str, &[u8])]) -> R) -> R {
        let v = self.offset.to_string();
        let due = self.due_ms.to_string();
        let mut pairs: [(&str, &[u8]); 9] = [
            ("a", self.application.as_bytes()),
            ("d", &self.def),
            ("due", due.as_bytes()),
            ("h", b""),
            ("k", b"o"),
            ("p", b"1"),
            ("rq", self.request_id.as_bytes()),
            ("st", b"scheduled"),
            ("v", v.as_bytes()),
        ];
        match &self.history {
            Some(h) => {
                pairs[3].1 = h;
                f(&pairs)
            }
            None => {
                pairs.copy_within(4.., 3);
                f(&pairs[..8])
            }
        }
    }
}

/// A MessagePack integer, as small as it fits.
fn write_int(out: &mut Vec<u8>, n: i64) {
    rmp::encode::write_sint(out, n).expect("writing to a Vec");
}

/// A MessagePack string of raw bytes (cmsgpack reads every string as bytes).
fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    rmp::encode::write_str_len(out, s.len() as u32).expect("writing to a Vec");
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_timer_state, encode_timer_state};

    #[test]
    fn a_new_timers_state_encodes_as_its_fields_do() {
        for history in [None, Some(vec![0x91, 0x92, 0x00, 0x05])] {
            let state = FreshState {
                offset: 1_234_567,
                request_id: "req-1".into(),
                due_ms: 1_700_000_060_000,
                application: "orders".into(),
                def: vec![0, 255, 3, 7],
                history,
            };
            let bytes = state.encode().unwrap();
            let fields = state.fields();
            assert_eq!(bytes, encode_timer_state(&fields).unwrap());
            assert_eq!(decode_timer_state(&bytes).unwrap(), fields);
        }
    }
}
