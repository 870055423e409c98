//! The Confluent wire format through a schema registry (the stand-in of
//! `common::registry`: no registry server can be installed here).

mod common;

use common::registry::registry;
use common::{once_at, TestEnv};
use ktimer::codec::{Codec, Encoding};
use ktimer::command::Outcome;
use ktimer::now_ms;
use ktimer::retry::Retryable;
use std::time::Duration;

#[tokio::test]
async fn confluent_framed_commands_round_trip() {
    let url = registry().await;
    let codec = Codec::new(Some(&url)).unwrap();
    let cmd = once_at("t1", 1_700_000_000_000, "payload");
    let bytes = codec.encode_command(&cmd, "cmds").await.unwrap();
    assert_eq!(Encoding::detect(&bytes), Some(Encoding::Confluent));
    assert_eq!(&bytes[..5], &[0, 0, 0, 0, 1], "magic byte and schema id 1");
    assert_eq!(codec.decode_command(&bytes).await.unwrap(), cmd);

    // Unknown schema id: a clear, final error.
    let mut unknown = bytes.clone();
    unknown[4] = 99;
    let e = codec.decode_command(&unknown).await.unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("schema registry"), "{e}");

    // Without a registry the same bytes are rejected with a reason.
    let plain = Codec::new(None).unwrap();
    let e = plain.decode_command(&bytes).await.unwrap_err();
    assert!(e.to_string().contains("no schema registry"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confluent_framed_command_fires_and_its_result_is_confluent_framed() {
    let url = registry().await;
    let env = TestEnv::new("registry", 1, &["--schema-registry-url", &url]).await;
    let mut got = env.collect(); // decodes through the registry too
    let svc = env.start().await;
    let codec = Codec::new(Some(&url)).unwrap();
    let due = now_ms() + 500;
    let cmd = once_at("sr-1", due, "via registry");
    let bytes = codec
        .encode_command(&cmd, &env.args.kafka.commands_topic)
        .await
        .unwrap();
    env.send_raw(Some("sr-1"), &bytes, None).await;
    let mut bad = bytes.clone();
    bad[4] = 77;
    env.send_raw(Some("sr-2"), &bad, None).await;

    let r = got.results(2, Duration::from_secs(30)).await;
    assert_eq!(r[0].outcome, Outcome::Accepted, "{:?}", r[0]);
    assert_eq!(r[1].outcome, Outcome::Rejected);
    assert!(
        r[1].reason.as_deref().unwrap().contains("schema registry"),
        "{:?}",
        r[1]
    );
    let f = got.fires(1, Duration::from_secs(30)).await.remove(0);
    assert_eq!(Encoding::detect(&f.payload), Some(Encoding::Confluent));
    let ev = codec.decode_fired(&f.payload).await.unwrap();
    assert_eq!((ev.timer_id.as_str(), ev.due_ms), ("sr-1", due));
    assert_eq!(ev.payload, b"via registry");
    assert!(ev.fired_ms >= due);
    svc.stop().await;
}
