//! The timer command schema evolves compatibly (fields added at the end, with defaults),
//! judged by an independent Avro implementation (fastavro, `tests/schema_evolution.py`):
//! - a command written by fastavro with the previous schema decodes in ktimer, as a single
//!   object and in the Confluent wire format through a registry (the stand-in of
//!   `common::registry`), the new fields empty;
//! - BACKWARD (what a registry checks before it takes the new version): the new schema
//!   reads the previous one's data, by fastavro's schema resolution;
//! - FORWARD: a consumer still on the previous schema reads what ktimer writes now.

mod common;

use common::registry::registry;
use ktimer::codec::Codec;
use ktimer::command::{CommandKind, MisfirePolicy, TimerCommand};
use std::process::Command;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn current() -> String {
    format!("{DIR}/schemas/timer_command.avsc")
}

fn previous() -> String {
    format!("{DIR}/schemas/previous/timer_command.v2.avsc")
}

/// Runs the fastavro helper; its standard output, trimmed.
fn fastavro(args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(format!("{DIR}/tests/schema_evolution.py"))
        .args(args)
        .output()
        .expect("python3 runs (scripts/install-deps.sh --for-tests installs fastavro)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// What `tests/schema_evolution.py` writes.
fn old_command() -> TimerCommand {
    TimerCommand {
        application: "app".into(),
        cron: Some("*/5 * * * * *".into()),
        time_zone: Some("Europe/Berlin".into()),
        max_fires: Some(3),
        misfire: Some(MisfirePolicy::Skip),
        sent_at_ms: Some(1),
        ..TimerCommand::new(CommandKind::CreateCron, "t-old", "r-old")
    }
}

#[tokio::test]
async fn a_command_written_with_the_previous_schema_decodes() {
    let single = hex(&fastavro(&["write", &previous()]));
    let codec = Codec::new(None).unwrap();
    assert_eq!(codec.decode_command(&single).await.unwrap(), old_command());

    // The same datum framed for a registry that holds the previous schema.
    let url = registry().await;
    let schema = std::fs::read_to_string(previous()).unwrap();
    let id: serde_json::Value = reqwest::Client::new()
        .post(format!("{url}/subjects/cmds-value/versions"))
        .json(&serde_json::json!({ "schema": schema }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = id["id"].as_u64().unwrap() as u32;
    let framed = [&[0u8][..], &id.to_be_bytes(), &single[10..]].concat();
    let registered = Codec::new(Some(&url)).unwrap();
    assert_eq!(
        registered.decode_command(&framed).await.unwrap(),
        old_command()
    );
}

#[tokio::test]
async fn the_new_schema_reads_old_data_and_old_readers_read_new_data() {
    // BACKWARD: the previous schema's datum, read with the current one as the reader.
    let single = fastavro(&["write", &previous()]);
    let datum = &single[20..];
    let read: serde_json::Value =
        serde_json::from_str(&fastavro(&["resolve", &previous(), &current(), datum])).unwrap();
    assert_eq!(read["every_ms"], serde_json::Value::Null);
    assert_eq!(read["jitter_ms"], serde_json::Value::Null);
    assert_eq!(read["cron"], "*/5 * * * * *");

    // FORWARD: what ktimer writes now (with the new fields), read by fastavro with the
    // current schema, and by a consumer still on the previous one.
    let cmd = TimerCommand {
        cron: None,
        every_ms: Some(250),
        jitter_ms: Some(40),
        ..old_command()
    };
    let bytes = Codec::new(None)
        .unwrap()
        .encode_command(&cmd, "x")
        .await
        .unwrap();
    let datum = hex_of(&bytes[10..]);
    let now: serde_json::Value =
        serde_json::from_str(&fastavro(&["resolve", &current(), &current(), &datum])).unwrap();
    assert_eq!(
        (now["every_ms"].as_i64(), now["jitter_ms"].as_i64()),
        (Some(250), Some(40))
    );
    let old: serde_json::Value =
        serde_json::from_str(&fastavro(&["resolve", &current(), &previous(), &datum])).unwrap();
    assert_eq!(old["timer_id"], "t-old");
    assert!(old.get("every_ms").is_none(), "{old}");
}
