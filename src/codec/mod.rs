//! Encodings of commands, results, fired envelopes and stored timers.
//!
//! A command's encoding is detected from its first bytes:
//! - `0x00` + 4-byte schema id: Confluent wire format, decoded through the schema
//!   registry (only when `--schema-registry-url` is set);
//! - `0xC3 0x01` + 8-byte Rabin fingerprint: Avro single-object encoding with the
//!   schema in `schemas/timer_command.avsc`;
//! - `{` (after optional white space): JSON, for hand-written commands.
//!
//! Anything else is rejected with a reason. Results and fired envelopes are written in
//! the Confluent format when a registry is configured, as single objects otherwise.

mod built;
mod state;

use built::Built;

pub use state::{
    decode_checkpoint, decode_timer_state, encode_checkpoint, encode_timer_state,
    encode_timer_state_pairs,
};

use crate::command::{CommandResult, FiredEvent, TimerCommand};
use crate::timer::TimerDef;
use apache_avro::types::Value;
use schema_registry_converter::async_impl::avro::{AvroDecoder, AvroEncoder};
use schema_registry_converter::async_impl::schema_registry::SrSettings;
use schema_registry_converter::schema_registry_common::SubjectNameStrategy;
use serde::{de::DeserializeOwned, Serialize};
use std::sync::LazyLock;

/// Errors of encoding and decoding.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The bytes are not a valid command (or result, or envelope). Not retryable.
    #[error("{0}")]
    Malformed(String),
    /// The schema registry failed; retryable when the registry said so.
    #[error("schema registry: {message}")]
    Registry {
        /// What went wrong.
        message: String,
        /// Whether trying again may succeed.
        retryable: bool,
    },
    /// A value did not fit its schema (a bug, not retryable).
    #[error("encoding failed: {0}")]
    Encode(String),
}

impl crate::retry::Retryable for CodecError {
    /// Only a registry that said so (unreachable, 5xx).
    fn is_retryable(&self) -> bool {
        matches!(
            self,
            CodecError::Registry {
                retryable: true,
                ..
            }
        )
    }
}

/// The encodings a command may arrive in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Confluent wire format (magic 0, schema id).
    Confluent,
    /// Avro single-object encoding (C3 01, fingerprint).
    SingleObject,
    /// JSON text.
    Json,
}

impl Encoding {
    /// Detects the encoding from the first bytes.
    pub fn detect(bytes: &[u8]) -> Option<Encoding> {
        match bytes {
            [0x00, _, _, _, _, ..] => Some(Encoding::Confluent),
            [0xC3, 0x01, ..] => Some(Encoding::SingleObject),
            _ if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') => {
                Some(Encoding::Json)
            }
            _ => None,
        }
    }
}

fn from_value<T: DeserializeOwned>(v: &Value) -> Result<T, CodecError> {
    apache_avro::from_value(v).map_err(|e| CodecError::Malformed(format!("invalid fields: {e}")))
}

struct Schemas {
    command: Built,
    result: Built,
    fired: Built,
    stored: Built,
    timer_state: Built,
    checkpoint: Built,
    /// Checkpoints written before `applied_offset` (read only).
    checkpoint_v1: Built,
}

/// The most a decoded value may claim to hold: a length prefix above it is an error
/// before anything is allocated (apache-avro's default would allow 512 MiB).
pub const MAX_ALLOCATION_BYTES: usize = 4 << 20;

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| {
    apache_avro::util::max_allocation_bytes(MAX_ALLOCATION_BYTES);
    Schemas {
        // Version 1 lacked FIRE_NOW (added at the end of CommandKind); version 2 lacked
        // every_ms, jitter_ms, calendar and calendar_policy (added at the end, with defaults).
        command: Built::with_previous(
            include_str!("../../schemas/timer_command.avsc"),
            &[
                include_str!("../../schemas/previous/timer_command.v1.avsc"),
                include_str!("../../schemas/previous/timer_command.v2.avsc"),
            ],
        ),
        result: Built::new(include_str!("../../schemas/command_result.avsc")),
        fired: Built::new(include_str!("../../schemas/fired_event.avsc")),
        stored: Built::new(include_str!("../../schemas/stored_timer.avsc")),
        timer_state: Built::new(include_str!("../../schemas/timer_state.avsc")),
        checkpoint: Built::new(include_str!("../../schemas/checkpoint.avsc")),
        checkpoint_v1: Built::new(include_str!("../../schemas/previous/checkpoint.v1.avsc")),
    }
});

/// Encoder and decoder of everything ktimer reads and writes.
pub struct Codec {
    registry: Option<(AvroDecoder, AvroEncoder)>,
}

impl Codec {
    /// A codec; with a registry URL, Confluent-framed records are decoded and written.
    pub fn new(schema_registry_url: Option<&str>) -> Result<Codec, CodecError> {
        let registry = match schema_registry_url {
            None => None,
            Some(url) => {
                let settings = |url: &str| {
                    SrSettings::new_builder(url.to_string())
                        .no_proxy()
                        .build()
                        .map_err(|e| CodecError::Registry {
                            message: e.to_string(),
                            retryable: false,
                        })
                };
                Some((
                    AvroDecoder::new(settings(url)?),
                    AvroEncoder::new(settings(url)?),
                ))
            }
        };
        LazyLock::force(&SCHEMAS);
        Ok(Codec { registry })
    }

    /// Decodes a command in any supported encoding.
    pub async fn decode_command(&self, bytes: &[u8]) -> Result<TimerCommand, CodecError> {
        let s = &SCHEMAS.command;
        match Encoding::detect(bytes) {
            Some(Encoding::Json) => serde_json::from_slice(bytes)
                .map_err(|e| CodecError::Malformed(format!("invalid JSON command: {e}"))),
            Some(Encoding::SingleObject) => s.read_single(bytes),
            Some(Encoding::Confluent) => {
                let Some((decoder, _)) = &self.registry else {
                    return Err(CodecError::Malformed(
                        "Confluent wire format (magic byte 0) but no schema registry is configured (--schema-registry-url)".into(),
                    ));
                };
                let decoded = decoder.decode(Some(bytes)).await.map_err(registry_error)?;
                let value = decoded.value.resolve(s.schema).map_err(|e| {
                    CodecError::Malformed(format!(
                        "the writer schema is not compatible with TimerCommand: {e}"
                    ))
                })?;
                from_value(&value)
            }
            None if bytes.is_empty() => Err(CodecError::Malformed(
                "empty record value (a tombstone is not a command)".into(),
            )),
            None => Err(CodecError::Malformed(format!(
                "unrecognised encoding (first byte 0x{:02x}); expected Confluent Avro (0x00), Avro single object (0xC3 0x01) or JSON ('{{')",
                bytes[0]
            ))),
        }
    }

    /// Encodes a command as a single object, or in Confluent format for `topic`'s subject.
    pub async fn encode_command(
        &self,
        cmd: &TimerCommand,
        topic: &str,
    ) -> Result<Vec<u8>, CodecError> {
        self.encode(&SCHEMAS.command, cmd, topic).await
    }

    /// Encodes a command result for the results topic `topic`.
    pub async fn encode_result(
        &self,
        r: &CommandResult,
        topic: &str,
    ) -> Result<Vec<u8>, CodecError> {
        self.encode(&SCHEMAS.result, r, topic).await
    }

    /// Encodes a fired envelope for the callback topic `topic`.
    pub async fn encode_fired(&self, e: &FiredEvent, topic: &str) -> Result<Vec<u8>, CodecError> {
        self.encode(&SCHEMAS.fired, e, topic).await
    }

    /// Decodes a command result (either framing).
    pub async fn decode_result(&self, bytes: &[u8]) -> Result<CommandResult, CodecError> {
        self.decode(&SCHEMAS.result, bytes).await
    }

    /// Decodes a fired envelope (either framing).
    pub async fn decode_fired(&self, bytes: &[u8]) -> Result<FiredEvent, CodecError> {
        self.decode(&SCHEMAS.fired, bytes).await
    }

    async fn encode<T: Serialize>(
        &self,
        b: &Built,
        v: &T,
        topic: &str,
    ) -> Result<Vec<u8>, CodecError> {
        match &self.registry {
            None => b.single(v),
            Some((_, encoder)) => {
                let strategy = SubjectNameStrategy::TopicNameStrategyWithSchema(
                    topic.into(),
                    false,
                    b.supplied(),
                );
                let value = apache_avro::to_value(v)
                    .and_then(|v| v.resolve(b.schema))
                    .map_err(|e| CodecError::Encode(e.to_string()))?;
                encoder
                    .encode_value(value, &strategy)
                    .await
                    .map_err(registry_error)
            }
        }
    }

    async fn decode<T: DeserializeOwned>(&self, b: &Built, bytes: &[u8]) -> Result<T, CodecError> {
        match (Encoding::detect(bytes), &self.registry) {
            (Some(Encoding::Confluent), Some((decoder, _))) => {
                let decoded = decoder.decode(Some(bytes)).await.map_err(registry_error)?;
                from_value(&decoded.value)
            }
            _ => b.read_single(bytes),
        }
    }
}

/// Encodes the stored part of a timer (compact Avro datum, no header).
pub fn encode_stored(def: &TimerDef) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(32 + def.callback.payload.len());
    SCHEMAS.stored.datum(def, &mut out)?;
    Ok(out)
}

/// The length of the prefix [`encode_stored`] writes for `def`: the application and the
/// callback topic, the bytes every timer of an application sending to one topic shares
/// (the store numbers them per partition). An Avro string is its length (a zigzag varint)
/// then its bytes; an optional one, the union's branch (a varint: 0 null, 1 string) first.
pub fn stored_prefix_len(def: &TimerDef) -> usize {
    let string = |len: usize| varint_len(2 * len as u64) + len;
    string(def.application.len())
        + def
            .callback
            .topic
            .as_ref()
            .map_or(1, |t| 1 + string(t.len()))
}

/// The bytes of an Avro varint of `n` (already zigzagged): 7 bits per byte.
fn varint_len(n: u64) -> usize {
    (64 - n.leading_zeros() as usize).div_ceil(7).max(1)
}

/// Decodes what [`encode_stored`] wrote.
pub fn decode_stored(bytes: &[u8]) -> Result<TimerDef, CodecError> {
    SCHEMAS.stored.read_datum(bytes)
}

fn registry_error(e: schema_registry_converter::error::SRCError) -> CodecError {
    CodecError::Registry {
        retryable: e.retriable,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests;
