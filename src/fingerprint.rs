//! Avro single-object headers: `C3 01` + the schema's 8-byte CRC-64-AVRO fingerprint
//! (little endian) over its Parsing Canonical Form, as the Avro specification defines it.
//!
//! apache-avro 0.22 renders a logical type such as `{"type":"long","logicalType":...}` as
//! `{"type":"long"}` instead of `"long"` in the canonical form, so its fingerprint differs
//! from the one Java's `SchemaNormalization`, fastavro and the other conformant libraries
//! compute. ktimer writes the specification's header and still reads the old one.

use apache_avro::headers::{HeaderBuilder, RabinFingerprintHeader};
use apache_avro::rabin::Rabin;
use apache_avro::Schema;
use digest::Digest;
use serde_json::Value;

/// The primitive type names of the specification.
const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

/// The specification's single-object header of `schema_json`.
pub fn header(schema_json: &str) -> Result<Vec<u8>, String> {
    let form = canonical_form(schema_json)?;
    let mut out = vec![0xC3, 0x01];
    out.extend_from_slice(&Rabin::digest(form.as_bytes()));
    Ok(out)
}

/// The header apache-avro 0.22 computes (and ktimer wrote before): still accepted.
pub fn legacy_header(schema: &Schema) -> Vec<u8> {
    RabinFingerprintHeader::from_schema(schema).build_header()
}

/// The Parsing Canonical Form of a schema given as JSON: primitives in their simple form,
/// full names, only the attributes that matter for parsing, in the specification's order,
/// no white space.
pub fn canonical_form(schema_json: &str) -> Result<String, String> {
    let v: Value = serde_json::from_str(schema_json).map_err(|e| e.to_string())?;
    let mut out = String::new();
    form(&v, None, &mut out)?;
    Ok(out)
}

fn form(v: &Value, ns: Option<&str>, out: &mut String) -> Result<(), String> {
    match v {
        Value::String(name) if PRIMITIVES.contains(&name.as_str()) => quoted(name, out),
        Value::String(name) => quoted(&full_name(name, ns), out),
        Value::Array(branches) => {
            out.push('[');
            for (i, b) in branches.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                form(b, ns, out)?;
            }
            out.push(']');
        }
        Value::Object(o) => match o.get("type") {
            Some(Value::String(t)) => complex(o, t, ns, out)?,
            Some(inner) => form(inner, ns, out)?,
            None => return Err(format!("a schema object without type: {v}")),
        },
        other => return Err(format!("not a schema: {other}")),
    }
    Ok(())
}

fn complex(
    o: &serde_json::Map<String, Value>,
    t: &str,
    ns: Option<&str>,
    out: &mut String,
) -> Result<(), String> {
    let attr = |k: &str| o.get(k).ok_or_else(|| format!("a {t} schema without {k}"));
    match t {
        "record" | "error" | "enum" | "fixed" => {
            let name = attr("name")?.as_str().ok_or("a name must be a string")?;
            let own_ns = o.get("namespace").and_then(Value::as_str).or(ns);
            let full = full_name(name, own_ns);
            let inner_ns = full.rsplit_once('.').map(|(n, _)| n.to_string());
            out.push_str("{\"name\":");
            quoted(&full, out);
            out.push_str(",\"type\":");
            quoted(if t == "error" { "record" } else { t }, out);
            match t {
                "enum" => {
                    out.push_str(",\"symbols\":");
                    out.push_str(&attr("symbols")?.to_string());
                }
                "fixed" => {
                    out.push_str(",\"size\":");
                    out.push_str(&attr("size")?.to_string());
                }
                _ => {
                    out.push_str(",\"fields\":[");
                    let fields = attr("fields")?.as_array().ok_or("fields must be a list")?;
                    for (i, f) in fields.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str("{\"name\":");
                        quoted(f["name"].as_str().ok_or("a field needs a name")?, out);
                        out.push_str(",\"type\":");
                        form(&f["type"], inner_ns.as_deref(), out)?;
                        out.push('}');
                    }
                    out.push(']');
                }
            }
            out.push('}');
        }
        "array" => {
            out.push_str("{\"type\":\"array\",\"items\":");
            form(attr("items")?, ns, out)?;
            out.push('}');
        }
        "map" => {
            out.push_str("{\"type\":\"map\",\"values\":");
            form(attr("values")?, ns, out)?;
            out.push('}');
        }
        // A primitive written as an object (logical types included): its simple form.
        primitive => form(&Value::String(primitive.to_string()), ns, out)?,
    }
    Ok(())
}

fn full_name(name: &str, ns: Option<&str>) -> String {
    match ns {
        Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_string(),
    }
}

fn quoted(s: &str, out: &mut String) {
    out.push_str(&Value::String(s.to_string()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_types_and_nested_names_follow_the_specification() {
        let json = r#"{"type":"record","name":"R","namespace":"a.b","doc":"x","fields":[
            {"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},"default":0},
            {"name":"e","type":["null",{"type":"enum","name":"E","symbols":["X","Y"]}]},
            {"name":"r","type":{"type":"record","name":"c.S","fields":[{"name":"m","type":{"type":"map","values":"E"}}]}},
            {"name":"f","type":{"type":"fixed","name":"F","size":4,"aliases":["g"]}},
            {"name":"l","type":{"type":"array","items":"S"}}]}"#;
        assert_eq!(
            canonical_form(json).unwrap(),
            concat!(
                r#"{"name":"a.b.R","type":"record","fields":["#,
                r#"{"name":"t","type":"long"},"#,
                r#"{"name":"e","type":["null",{"name":"a.b.E","type":"enum","symbols":["X","Y"]}]},"#,
                r#"{"name":"r","type":{"name":"c.S","type":"record","fields":[{"name":"m","type":{"type":"map","values":"c.E"}}]}},"#,
                r#"{"name":"f","type":{"name":"a.b.F","type":"fixed","size":4}},"#,
                r#"{"name":"l","type":{"type":"array","items":"a.b.S"}}]}"#
            )
        );
    }
}

/// The specification's example, independent of apache-avro: CRC-64-AVRO by its
/// definition, over the canonical form of `schemas/timer_command.avsc` written by hand.
#[cfg(test)]
mod spec {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;

    fn crc64_avro(bytes: &[u8]) -> u64 {
        let table: Vec<u64> = (0..256u64)
            .map(|i| (0..8).fold(i, |fp, _| (fp >> 1) ^ (EMPTY & 0u64.wrapping_sub(fp & 1))))
            .collect();
        bytes.iter().fold(EMPTY, |fp, &b| {
            (fp >> 8) ^ table[((fp ^ u64::from(b)) & 0xff) as usize]
        })
    }

    const TIMER_COMMAND: &str = concat!(
        r#"{"name":"io.ktimer.TimerCommand","type":"record","fields":["#,
        r#"{"name":"request_id","type":"string"},{"name":"timer_id","type":"string"},"#,
        r#"{"name":"application","type":"string"},"#,
        r#"{"name":"kind","type":{"name":"io.ktimer.CommandKind","type":"enum","symbols":["CREATE_ONCE","CREATE_CRON","PAUSE","RESUME","UPDATE","CANCEL","FIRE_NOW"]}},"#,
        r#"{"name":"at_ms","type":["null","long"]},{"name":"delay_ms","type":["null","long"]},"#,
        r#"{"name":"cron","type":["null","string"]},{"name":"time_zone","type":["null","string"]},"#,
        r#"{"name":"start_ms","type":["null","long"]},{"name":"end_ms","type":["null","long"]},"#,
        r#"{"name":"max_fires","type":["null","long"]},"#,
        r#"{"name":"misfire","type":["null",{"name":"io.ktimer.MisfirePolicy","type":"enum","symbols":["FIRE_ONCE","FIRE_ALL","SKIP"]}]},"#,
        r#"{"name":"callback","type":["null",{"name":"io.ktimer.Callback","type":"record","fields":["#,
        r#"{"name":"topic","type":["null","string"]},{"name":"key","type":["null","bytes"]},"#,
        r#"{"name":"headers","type":{"type":"map","values":"string"}},{"name":"payload","type":"bytes"},"#,
        r#"{"name":"mode","type":{"name":"io.ktimer.DeliveryMode","type":"enum","symbols":["ENVELOPE","RAW"]}}]}]},"#,
        r#"{"name":"sent_at_ms","type":["null","long"]},"#,
        r#"{"name":"every_ms","type":["null","long"]},{"name":"jitter_ms","type":["null","long"]},"#,
        r#"{"name":"calendar","type":["null","string"]},"#,
        r#"{"name":"calendar_policy","type":["null",{"name":"io.ktimer.CalendarPolicy","type":"enum","symbols":["SKIP","DEFER"]}]}]}"#
    );

    #[test]
    fn crc64_avro_matches_the_specification_for_null() {
        // The specification's fingerprint of `"null"`.
        assert_eq!(crc64_avro(br#""null""#), 0x63dd_24e7_cc25_8f8a);
    }

    #[tokio::test]
    async fn commands_carry_the_specification_fingerprint_and_the_old_one_is_read() {
        let json = include_str!("../schemas/timer_command.avsc");
        assert_eq!(super::canonical_form(json).unwrap(), TIMER_COMMAND);
        let fp = crc64_avro(TIMER_COMMAND.as_bytes()).to_le_bytes();
        // fastavro 1.x: fingerprint(to_parsing_canonical_form(...), "CRC-64-AVRO").
        assert_eq!(fp, [0x05, 0x73, 0x8b, 0x1f, 0xc3, 0x23, 0xd3, 0x74]);
        let codec = crate::codec::Codec::new(None).unwrap();
        let cmd = crate::command::TimerCommand::new(crate::command::CommandKind::Cancel, "t", "r");
        let bytes = codec.encode_command(&cmd, "x").await.unwrap();
        assert_eq!(bytes[..2], [0xC3, 0x01]);
        assert_eq!(
            bytes[2..10],
            fp,
            "written with the specification's fingerprint"
        );
        // Earlier versions' datums lack every_ms, jitter_ms, calendar and calendar_policy
        // (a null union each: one byte each at the end); Avro schema resolution gives
        // them their defaults.
        let old_datum = &bytes[10..bytes.len() - 4];
        assert_eq!(bytes[bytes.len() - 4..], [0, 0, 0, 0]);
        let with = |header: &[u8]| [header, old_datum].concat();
        // Version 2 (before every_ms, jitter_ms and the calendar), fastavro's fingerprint and
        // apache-avro's header (what ktimer wrote before 0.2).
        let v2 = [0xC3, 0x01, 0x06, 0x7f, 0xf8, 0xf3, 0xd6, 0x5a, 0xc4, 0xc9];
        assert_eq!(codec.decode_command(&with(&v2)).await.unwrap(), cmd);
        let v2_legacy = [0xC3, 0x01, 0x06, 0x2a, 0xc8, 0x30, 0xe5, 0x3a, 0x66, 0x0f];
        assert_eq!(codec.decode_command(&with(&v2_legacy)).await.unwrap(), cmd);
        // Written with version 1 of the schema (before FIRE_NOW; fastavro's fingerprint).
        let v1 = [0xC3, 0x01, 0x36, 0x71, 0x9e, 0x1d, 0x47, 0x6f, 0x81, 0x51];
        assert_eq!(codec.decode_command(&with(&v1)).await.unwrap(), cmd);
        // ... and with apache-avro's header of version 1 (what ktimer 0.1 wrote).
        let v1_legacy = [0xC3, 0x01, 0x11, 0x6b, 0x84, 0x5f, 0x45, 0x74, 0xed, 0xac];
        assert_eq!(codec.decode_command(&with(&v1_legacy)).await.unwrap(), cmd);
    }
}
