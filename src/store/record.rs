//! The packed timer record as ktimer reads it: record.lua's layout (`rec_pack`), the one
//! copy of its positions on this side, and what the fire path takes from a record the
//! claim answered (its definition, so Redis does not send it twice, and whether a state
//! of its timer was written).
//!
//! A record is a MessagePack array in the order of record.lua's `REC_FIELDS`. Its
//! definition `d` (position [`D`]) is either the whole stored definition (a string) or
//! `[N, rest]`: number N of the partition's definition prefixes (`dp`), then the rest of
//! the definition's bytes (`rec_def_pack`).

use std::collections::HashMap;

/// Positions in record.lua's packed array (`REC_D`, `REC_P`, 0-based).
pub(super) const D: usize = 6;
pub(super) const P: usize = 7;
const _: () = assert!(P == D + 1, "claimed() reads `p` right after `d`");

/// Definition prefixes by number, as a claim answers the ones its records use.
pub(super) type Prefixes = HashMap<u64, Vec<u8>>;

/// What a fire takes from record `bytes` a claim answered: its stored definition (the
/// prefix taken from `prefixes`) and whether a state of the timer was written (its `p`
/// item is there and not `false`); `None` when it holds no definition, or a prefix
/// `prefixes` lacks. Reads the record once, up to its `p`.
pub(super) fn claimed(bytes: &[u8], prefixes: &Prefixes) -> Option<(Vec<u8>, bool)> {
    use rmpv::ValueRef;
    let mut rd = bytes;
    let n = rmp::decode::read_array_len(&mut rd).ok()? as usize;
    if n <= D {
        return None;
    }
    for _ in 0..D {
        rmpv::decode::read_value_ref(&mut rd).ok()?;
    }
    let def = match rmpv::decode::read_value_ref(&mut rd).ok()? {
        ValueRef::String(s) => s.as_bytes().to_vec(),
        ValueRef::Array(pair) => match &pair[..] {
            [ValueRef::Integer(n), ValueRef::String(rest)] => {
                let prefix = prefixes.get(&n.as_u64()?)?;
                [&prefix[..], rest.as_bytes()].concat()
            }
            _ => return None,
        },
        _ => return None,
    };
    // `p` follows `d` (asserted by the positions above): its first byte is MessagePack's `false` or not.
    let written = n > P && rd.first().is_some_and(|&b| b != 0xc2);
    Some((def, written))
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
            claimed(&rec, &prefixes).unwrap().0,
            b"app\x02topic\x00\xffrest"
        );
        assert_eq!(claimed(&rec, &Prefixes::new()), None, "prefix unknown");
    }

    #[test]
    fn a_whole_definition_is_taken_as_it_is() {
        let rec = record(b"\xa5whole");
        assert_eq!(claimed(&rec, &Prefixes::new()).unwrap().0, b"whole");
        assert_eq!(claimed(b"\x91\x01", &Prefixes::new()), None, "no d");
        assert_eq!(claimed(b"\x98\x01", &Prefixes::new()), None, "truncated");
    }

    #[test]
    fn a_record_says_whether_a_state_of_its_timer_was_written() {
        let d = b"\xa1d";
        let with = |p: &[u8]| [&[0x99, 7, 1, 0xc3, 0xc2, 7, 0xc2][..], d, p, b"\xa1h"].concat();
        let none = Prefixes::new();
        assert_eq!(claimed(&with(b"\xc2"), &none), Some((b"d".to_vec(), false)));
        assert_eq!(claimed(&with(b"\xc3"), &none), Some((b"d".to_vec(), true)));
        assert_eq!(claimed(&with(b"\xa1w"), &none).map(|c| c.1), Some(true));
        // Seven items: no `p` (a record packed before it had one).
        let short = [&[0x97, 7, 1, 0xc3, 0xc2, 7, 0xc2][..], d].concat();
        assert_eq!(claimed(&short, &none), Some((b"d".to_vec(), false)));
    }
}
