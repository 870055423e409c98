use super::*;
use crate::command::{Callback, CommandKind, DeliveryMode};
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;

fn cmd() -> TimerCommand {
    TimerCommand {
        application: "app".into(),
        at_ms: Some(1_700_000_000_123),
        callback: Some(Callback {
            topic: Some("cb".into()),
            key: Some(vec![0, 1, 255]),
            headers: [("h".to_string(), "v".to_string())].into(),
            payload: vec![0, 159, 146, 150],
            mode: DeliveryMode::Raw,
        }),
        sent_at_ms: Some(5),
        ..TimerCommand::new(CommandKind::CreateOnce, "t", "r")
    }
}

#[tokio::test]
async fn single_object_round_trip() {
    let c = Codec::new(None).unwrap();
    let bytes = c.encode_command(&cmd(), "x").await.unwrap();
    assert_eq!(&bytes[..2], &[0xC3, 0x01]);
    assert_eq!(c.decode_command(&bytes).await.unwrap(), cmd());
    let e = c
        .decode_command(&bytes[..bytes.len() - 3])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("invalid Avro datum"), "{e}");
    let mut other = bytes.clone();
    other[5] ^= 0xff;
    let e = c.decode_command(&other).await.unwrap_err();
    assert!(e.to_string().contains("unknown schema fingerprint"), "{e}");
}

#[tokio::test]
async fn json_commands() {
    let c = Codec::new(None).unwrap();
    let text = br#" {"request_id":"r","timer_id":"t","kind":"cancel"}"#;
    let got = c.decode_command(text).await.unwrap();
    assert_eq!(
        (got.kind, got.application.as_str()),
        (CommandKind::Cancel, "default")
    );
    let e = c
        .decode_command(br#"{"request_id":"r","timer_id":"t","kind":"CANCEL","delay":5}"#)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown field `delay`"), "{e}");
    let e = c.decode_command(b"").await.unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn stored_round_trip() {
    let def = TimerDef {
        application: "a".into(),
        callback: cmd().callback.unwrap(),
    };
    assert_eq!(decode_stored(&encode_stored(&def).unwrap()).unwrap(), def);
}

/// The stored prefix is what apache-avro's generic encoder writes for the application
/// and the optional topic, at every length where a varint grows a byte.
#[test]
fn the_stored_prefix_is_the_application_and_the_topic() {
    let schema = Schema::parse_str(
        r#"{"type": "record", "name": "P", "fields": [{"name": "a", "type": "string"},
        {"name": "t", "type": ["null", "string"]}]}"#,
    )
    .unwrap();
    for app_len in [0, 1, 63, 64, 8191, 8192] {
        for topic_len in [None, Some(0), Some(5), Some(63), Some(64), Some(200)] {
            let mut def = TimerDef {
                application: "a".repeat(app_len),
                callback: cmd().callback.unwrap(),
            };
            def.callback.topic = topic_len.map(|n| "t".repeat(n));
            let topic = match &def.callback.topic {
                None => Value::Union(0, Box::new(Value::Null)),
                Some(t) => Value::Union(1, Box::new(Value::String(t.clone()))),
            };
            let fields = vec![
                ("a".to_string(), Value::String(def.application.clone())),
                ("t".to_string(), topic),
            ];
            let writer = GenericDatumWriter::builder(&schema).build().unwrap();
            let want = writer.write_value_to_vec(Value::Record(fields)).unwrap();
            let stored = encode_stored(&def).unwrap();
            assert_eq!(
                stored_prefix_len(&def),
                want.len(),
                "{app_len} {topic_len:?}"
            );
            assert_eq!(&stored[..want.len()], &want[..], "{app_len} {topic_len:?}");
        }
    }
}

#[tokio::test]
async fn a_length_prefix_larger_than_the_limit_allocates_nothing() {
    let c = Codec::new(None).unwrap();
    let mut bytes = c.encode_command(&cmd(), "x").await.unwrap()[..10].to_vec();
    // request_id claims 100 MB (zig-zag varint of 100_000_000); the record has 4 bytes.
    let mut n: u64 = 200_000_000;
    while n >= 0x80 {
        bytes.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    bytes.extend_from_slice(&[n as u8, b'a', b'b', b'c', b'd']);
    let e = c.decode_command(&bytes).await.unwrap_err();
    assert!(e.to_string().contains("allocate"), "{e}");
}
