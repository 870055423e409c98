//! The packed timer record as ktimer reads it: record.lua's layout (`rec_pack`), the one
//! copy of its positions on this side, and what the fire path takes from a record the
//! claim answered (its items; its definition, so Redis does not send it twice).
//!
//! A record is a MessagePack array in the order of record.lua's `REC_FIELDS`. Its
//! definition `d` (position [`D`]) is either the whole stored definition (a string) or
//! `[N, rest]`: number N of the partition's definition prefixes (`dp`), then the rest of
//! the definition's bytes (`rec_def_pack`).

use std::collections::HashMap;

/// Positions in record.lua's packed array (`REC_D`, `REC_P`, 0-based).
pub(super) const D: usize = 6;
pub(super) const P: usize = 7;

/// Definition prefixes by number, as a claim answers the ones its records use.
pub(super) type Prefixes = HashMap<u64, Vec<u8>>;

/// The items of packed array `bytes`, each as its own bytes; `None` if it is not one.
pub(super) fn items(bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let mut rd = bytes;
    let n = rmp::decode::read_array_len(&mut rd).ok()? as usize;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let before = rd;
        rmpv::decode::read_value_ref(&mut rd).ok()?;
        items.push(&before[..before.len() - rd.len()]);
    }
    rd.is_empty().then_some(items)
}

/// The stored definition record `bytes` holds, its prefix taken from `prefixes`; `None`
/// when it holds none, or a prefix `prefixes` lacks.
pub(super) fn definition(bytes: &[u8], prefixes: &Prefixes) -> Option<Vec<u8>> {
    use rmpv::ValueRef;
    let mut rd = bytes;
    if (rmp::decode::read_array_len(&mut rd).ok()? as usize) <= D {
        return None;
    }
    for _ in 0..D {
        rmpv::decode::read_value_ref(&mut rd).ok()?;
    }
    match rmpv::decode::read_value_ref(&mut rd).ok()? {
        ValueRef::String(s) => Some(s.as_bytes().to_vec()),
        ValueRef::Array(pair) => match &pair[..] {
            [ValueRef::Integer(n), ValueRef::String(rest)] => {
                let prefix = prefixes.get(&n.as_u64()?)?;
                Some([&prefix[..], rest.as_bytes()].concat())
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of 8 items whose `d` is `d` (MessagePack bytes as cmsgpack packs them).
    fn record(d: &[u8]) -> Vec<u8> {
        [&[0x98, 7, 1, 0xc3, 0xc2, 7, 0xc2][..], d, &[0xc2]].concat()
    }

    #[test]
    fn a_numbered_definition_is_its_prefix_then_the_rest() {
        // [3, "\x00\xffrest"]: a string of 6 bytes, not UTF-8.
        let rec = record(b"\x92\x03\xa6\x00\xffrest");
        let prefixes = Prefixes::from([(3, b"app\x02topic".to_vec())]);
        assert_eq!(
            definition(&rec, &prefixes).unwrap(),
            b"app\x02topic\x00\xffrest"
        );
        assert_eq!(definition(&rec, &Prefixes::new()), None, "prefix unknown");
    }

    #[test]
    fn a_whole_definition_is_taken_as_it_is() {
        let rec = record(b"\xa5whole");
        assert_eq!(definition(&rec, &Prefixes::new()).unwrap(), b"whole");
        assert_eq!(definition(b"\x91\x01", &Prefixes::new()), None, "no d");
        assert_eq!(items(b"\x92\x01"), None, "truncated");
    }
}
