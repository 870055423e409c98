//! Script answers packed with `cmsgpack.pack` (one bulk string) instead of a Redis
//! array: a script answering thousands of values spends less of Redis's time building
//! the reply, and ktimer's far less parsing it (RESP is parsed value by value).
//!
//! One codec: a packed answer is a flat MessagePack array whose items read as Redis
//! would have converted the same Lua values (strings as bulk strings, integers as
//! integers, `true` as 1, `false` as nil), so the parsers of the unpacked answers apply
//! unchanged.

use super::StoreError;
use redis::{FromRedisValue, Value};
use rmpv::ValueRef;

/// The items of a packed answer, as Redis would have answered them.
pub fn unpack(bytes: &[u8]) -> Result<Vec<Value>, StoreError> {
    let mut rd = bytes;
    let value = rmpv::decode::read_value_ref(&mut rd).map_err(|e| bad(&e.to_string()))?;
    if !rd.is_empty() {
        return Err(bad("bytes after the array"));
    }
    match value {
        ValueRef::Array(items) => items.into_iter().map(item).collect(),
        // cmsgpack packs an empty Lua table as an empty map.
        ValueRef::Map(m) if m.is_empty() => Ok(vec![]),
        other => Err(bad(&format!("not an array: {other}"))),
    }
}

/// The items of a script's list answer, packed or a Redis array, as `T`.
pub fn items<T: FromRedisValue>(reply: Value) -> Result<Vec<T>, StoreError> {
    let items = match reply {
        Value::BulkString(b) => unpack(&b)?,
        v => Vec::<Value>::from_redis_value(v).map_err(|e| bad(&e.to_string()))?,
    };
    items
        .into_iter()
        .map(T::from_redis_value)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&e.to_string()))
}

/// One item, converted as Redis converts a Lua value.
fn item(v: ValueRef<'_>) -> Result<Value, StoreError> {
    Ok(match v {
        ValueRef::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        ValueRef::Binary(b) => Value::BulkString(b.to_vec()),
        ValueRef::Integer(n) => Value::Int(n.as_i64().ok_or_else(|| bad("integer too large"))?),
        // Redis converts a Lua number to an integer by truncation.
        ValueRef::F32(f) => Value::Int(f as i64),
        ValueRef::F64(f) => Value::Int(f as i64),
        ValueRef::Boolean(true) => Value::Int(1),
        ValueRef::Boolean(false) | ValueRef::Nil => Value::Nil,
        other => return Err(bad(&format!("unexpected item {other}"))),
    })
}

fn bad(what: &str) -> StoreError {
    StoreError::Reply(format!("packed answer: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value as Mp;

    fn pack(v: &Mp) -> Vec<u8> {
        let mut b = Vec::new();
        rmpv::encode::write_value(&mut b, v).unwrap();
        b
    }

    /// MessagePack written by rmpv's encoder (not this decoder's code): every kind
    /// cmsgpack writes reads back as Redis would convert the Lua value.
    #[test]
    fn every_kind_reads_as_redis_would_answer_it() {
        let b = pack(&Mp::Array(vec![
            Mp::from("accepted"),
            Mp::from(-1),
            Mp::from(1_795_651_180_123i64),
            Mp::from(-40_000),
            Mp::from("x".repeat(300)),
            Mp::Binary(vec![0, 255, 1]),
            Mp::from(true),
            Mp::from(false),
            Mp::F64(7.9),
            Mp::Nil,
        ]));
        assert_eq!(
            unpack(&b).unwrap(),
            vec![
                Value::BulkString(b"accepted".to_vec()),
                Value::Int(-1),
                Value::Int(1_795_651_180_123),
                Value::Int(-40_000),
                Value::BulkString(vec![b'x'; 300]),
                Value::BulkString(vec![0, 255, 1]),
                Value::Int(1),
                Value::Nil,
                Value::Int(7),
                Value::Nil,
            ]
        );
    }

    #[test]
    fn packed_and_plain_lists_read_alike() {
        let plain = Value::Array(vec![
            Value::BulkString(b"1795651180123".to_vec()),
            Value::Int(3),
        ]);
        let packed = pack(&Mp::Array(vec![Mp::from("1795651180123"), Mp::from(3)]));
        let a: Vec<String> = items(plain).unwrap();
        let b: Vec<String> = items(Value::BulkString(packed)).unwrap();
        assert_eq!(a, b);
        assert_eq!(a, ["1795651180123", "3"]);
    }

    #[test]
    fn damaged_answers_are_errors() {
        let b = pack(&Mp::Array(vec![Mp::from("a"), Mp::from("b")]));
        assert!(unpack(&b[..b.len() - 1]).is_err(), "truncated");
        assert!(unpack(&[]).is_err());
        assert_eq!(
            unpack(&pack(&Mp::Map(vec![]))).unwrap(),
            vec![],
            "an empty Lua table"
        );
        let mut more = b.clone();
        more.push(0xc0);
        assert!(unpack(&more).is_err(), "bytes after the array");
        let nested = pack(&Mp::Array(vec![Mp::Array(vec![])]));
        assert!(unpack(&nested).is_err(), "answers are flat");
    }
}
