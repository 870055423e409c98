//! The state topic's records: a timer's fields and a partition's checkpoint, bare Avro
//! datums of `schemas/timer_state.avsc` and `schemas/checkpoint.avsc` (internal records,
//! read only by ktimer, so no header).

use super::{CodecError, SCHEMAS};
use crate::timer::{Checkpoint, TimerFields};

/// Encodes a timer's state record.
pub fn encode_timer_state(t: &TimerFields) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    SCHEMAS.timer_state.datum(t, &mut out)?;
    Ok(out)
}

/// Encodes a timer's state record given as (field, value) pairs in field order: the bytes
/// [`encode_timer_state`] writes for the same fields, without building a [`TimerFields`]
/// (a new timer's state, written with every create).
pub fn encode_timer_state_pairs(pairs: &[(&str, &[u8])]) -> Result<Vec<u8>, CodecError> {
    debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0), "in field order");
    let mut out = Vec::new();
    SCHEMAS.timer_state.datum(&StatePairs(pairs), &mut out)?;
    Ok(out)
}

/// A timer state's fields, borrowed, serialised as [`TimerFields`] is.
struct StatePairs<'a>(&'a [(&'a str, &'a [u8])]);

impl serde::Serialize for StatePairs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut record = s.serialize_struct("TimerState", 1)?;
        record.serialize_field("fields", &FieldMap(self.0))?;
        record.end()
    }
}

/// The `fields` map of [`StatePairs`].
struct FieldMap<'a>(&'a [(&'a str, &'a [u8])]);

impl serde::Serialize for FieldMap<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, serde_bytes::Bytes::new(v))))
    }
}

/// Decodes what [`encode_timer_state`] wrote.
pub fn decode_timer_state(bytes: &[u8]) -> Result<TimerFields, CodecError> {
    SCHEMAS.timer_state.read_datum(bytes)
}

/// Encodes a checkpoint record.
pub fn encode_checkpoint(c: &Checkpoint) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    SCHEMAS.checkpoint.datum(c, &mut out)?;
    Ok(out)
}

/// Decodes what [`encode_checkpoint`] wrote, or a checkpoint of version 1 (bare datums
/// carry no schema: a version 1 datum ends before `applied_offset`, which is then -1).
pub fn decode_checkpoint(bytes: &[u8]) -> Result<Checkpoint, CodecError> {
    SCHEMAS
        .checkpoint
        .read_datum(bytes)
        .or_else(|e| SCHEMAS.checkpoint_v1.read_datum(bytes).map_err(|_| e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::reader::datum::GenericDatumReader;
    use apache_avro::types::Value;

    #[test]
    fn a_timer_state_round_trips_and_matches_the_schema() {
        let mut t = TimerFields::default();
        for (k, v) in [("v", &b"17"[..]), ("st", b"scheduled"), ("d", &[0, 255, 1])] {
            t.fields
                .insert(k.into(), serde_bytes::ByteBuf::from(v.to_vec()));
        }
        let bytes = encode_timer_state(&t).unwrap();
        assert_eq!(decode_timer_state(&bytes).unwrap(), t);
        // Read by apache-avro's own generic reader against the schema file.
        let schema =
            apache_avro::Schema::parse_str(include_str!("../../schemas/timer_state.avsc")).unwrap();
        let reader = GenericDatumReader::builder(&schema).build().unwrap();
        let v = reader.read_value(&mut &bytes[..]).unwrap();
        let Value::Record(f) = v else { panic!("{v:?}") };
        let Value::Map(m) = &f[0].1 else {
            panic!("{f:?}")
        };
        assert_eq!(m["d"], Value::Bytes(vec![0, 255, 1]));
    }

    #[test]
    fn a_checkpoint_round_trips_and_matches_the_schema() {
        let c = Checkpoint {
            sequence: 3,
            epoch: 1_700_000_000_000,
            commands_offset: -1,
            acked_through_ms: 1_700_000_000_123,
            in_flight: vec!["5:1700000000100:a".into()],
            written_at_ms: 1_700_000_000_200,
            applied_offset: 41,
        };
        let bytes = encode_checkpoint(&c).unwrap();
        assert_eq!(decode_checkpoint(&bytes).unwrap(), c);
        let schema =
            apache_avro::Schema::parse_str(include_str!("../../schemas/checkpoint.avsc")).unwrap();
        let reader = GenericDatumReader::builder(&schema).build().unwrap();
        let v = reader.read_value(&mut &bytes[..]).unwrap();
        let Value::Record(f) = v else { panic!("{v:?}") };
        assert_eq!(f[2], ("commands_offset".into(), Value::Long(-1)));
        assert!(decode_checkpoint(&bytes[..bytes.len() - 2]).is_err());
        // A version 1 checkpoint (written by apache-avro's generic writer against the old
        // schema file) reads with no applied offset.
        let v1 = apache_avro::Schema::parse_str(include_str!(
            "../../schemas/previous/checkpoint.v1.avsc"
        ))
        .unwrap();
        let old = Value::Record(vec![
            ("sequence".into(), Value::Long(3)),
            ("epoch".into(), Value::Long(c.epoch)),
            ("commands_offset".into(), Value::Long(-1)),
            ("acked_through_ms".into(), Value::Long(c.acked_through_ms)),
            ("in_flight".into(), Value::Array(vec![])),
            ("written_at_ms".into(), Value::Long(c.written_at_ms)),
        ]);
        let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&v1)
            .build()
            .unwrap();
        let old = writer.write_value_to_vec(old).unwrap();
        let read = decode_checkpoint(&old).unwrap();
        assert_eq!((read.sequence, read.applied_offset), (3, -1));
    }
}
