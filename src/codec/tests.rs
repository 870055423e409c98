use super::*;
use crate::command::{Callback, CommandKind, DeliveryMode};

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
