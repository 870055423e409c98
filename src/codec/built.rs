//! One built-in schema: its reader and writer, its single-object header, and the
//! earlier versions of it that are still read.

use super::CodecError;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use schema_registry_converter::schema_registry_common::{SchemaType, SuppliedSchema};
use serde::{de::DeserializeOwned, Serialize};

/// One built-in schema with its reader, writer and single-object header.
pub(super) struct Built {
    pub(super) schema: &'static Schema,
    pub(super) json: &'static str,
    /// The specification's single-object header, written and read.
    pub(super) header: Vec<u8>,
    /// apache-avro's header (written by ktimer before 0.2), still read.
    legacy: Vec<u8>,
    /// Earlier versions of the schema, still read.
    previous: Vec<Previous>,
    reader: GenericDatumReader<'static>,
    writer: GenericDatumWriter<'static>,
}

/// An earlier version of a schema: its headers (the specification's and apache-avro's),
/// and a reader that resolves its datums into the current version (Avro schema
/// resolution: fields added since take their defaults).
struct Previous {
    headers: [Vec<u8>; 2],
    reader: GenericDatumReader<'static>,
}

impl Built {
    /// The schema `json`, reading single objects written with `previous` versions too.
    pub(super) fn with_previous(json: &'static str, previous: &[&str]) -> Built {
        let mut b = Built::new(json);
        for p in previous {
            let schema: &'static Schema = Box::leak(Box::new(
                Schema::parse_str(p).expect("previous schema parses"),
            ));
            let header = crate::fingerprint::header(p).expect("previous schema fingerprints");
            let reader = GenericDatumReader::builder(schema)
                .reader_schema(b.schema)
                .build()
                .expect("a previous schema resolves into the current one");
            b.previous.push(Previous {
                headers: [header, crate::fingerprint::legacy_header(schema)],
                reader,
            });
        }
        b
    }

    pub(super) fn new(json: &'static str) -> Built {
        let schema: &'static Schema = Box::leak(Box::new(
            Schema::parse_str(json).expect("built-in schema parses"),
        ));
        Built {
            schema,
            json,
            header: crate::fingerprint::header(json).expect("built-in schema fingerprints"),
            legacy: crate::fingerprint::legacy_header(schema),
            previous: Vec::new(),
            reader: GenericDatumReader::builder(schema).build().expect("reader"),
            writer: GenericDatumWriter::builder(schema).build().expect("writer"),
        }
    }

    pub(super) fn datum<T: Serialize>(&self, v: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        // Schema-aware serialisation straight to bytes: no intermediate `Value` tree and
        // no name resolution per record (the profile's largest codec cost).
        self.writer
            .write_ser(out, v)
            .map_err(|e| CodecError::Encode(e.to_string()))?;
        Ok(())
    }

    pub(super) fn single<T: Serialize>(&self, v: &T) -> Result<Vec<u8>, CodecError> {
        let mut out = self.header.clone();
        self.datum(v, &mut out)?;
        Ok(out)
    }

    /// A datum of this version, deserialised straight from the bytes.
    pub(super) fn read_datum<T: DeserializeOwned>(
        &self,
        mut bytes: &[u8],
    ) -> Result<T, CodecError> {
        let value = self.reader.read_deser(&mut bytes).map_err(invalid)?;
        all_read(bytes)?;
        Ok(value)
    }

    /// A datum of an earlier version, resolved through a value tree (apache-avro's
    /// straight deserialisation does not resolve schemas).
    fn read_resolved<T: DeserializeOwned>(
        reader: &GenericDatumReader<'static>,
        mut bytes: &[u8],
    ) -> Result<T, CodecError> {
        let value = reader.read_value(&mut bytes).map_err(invalid)?;
        all_read(bytes)?;
        super::from_value(&value)
    }

    pub(super) fn read_single<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        let current = bytes
            .strip_prefix(self.header.as_slice())
            .or_else(|| bytes.strip_prefix(self.legacy.as_slice()));
        if let Some(rest) = current {
            return self.read_datum(rest);
        }
        let earlier = self.previous.iter().find_map(|p| {
            let rest = p
                .headers
                .iter()
                .find_map(|h| bytes.strip_prefix(h.as_slice()))?;
            Some((&p.reader, rest))
        });
        match earlier {
            Some((reader, rest)) => Self::read_resolved(reader, rest),
            None if bytes.len() < self.header.len() => Err(CodecError::Malformed(
                "truncated Avro single-object header".into(),
            )),
            None => Err(CodecError::Malformed(format!(
                "Avro single object with unknown schema fingerprint {:02x?}; expected the {} schema",
                &bytes[2..10],
                self.schema.name().map(|n| n.fullname(None)).unwrap_or_default()
            ))),
        }
    }

    pub(super) fn supplied(&self) -> SuppliedSchema {
        SuppliedSchema::new(
            self.schema.name().map(|n| n.fullname(None)),
            SchemaType::Avro,
            self.json.to_string(),
        )
    }
}

fn invalid(e: apache_avro::Error) -> CodecError {
    CodecError::Malformed(format!("invalid Avro datum: {e}"))
}

/// Nothing may follow the datum.
fn all_read(rest: &[u8]) -> Result<(), CodecError> {
    match rest.len() {
        0 => Ok(()),
        n => Err(CodecError::Malformed(format!(
            "{n} bytes left over after the Avro datum"
        ))),
    }
}
