//! `asyncapi.yaml` describes the topics and headers ktimer uses, no more, no fewer: every
//! topic `topics/ktimer.toml` declares is a channel's address and every channel's address
//! is a declared topic; every `ktimer-*` header the document names is one the code sets or
//! reads (`sink::headers`, the delay topic's contract) and each of those is named; every
//! Avro schema it points at is a file of `schemas/`. (`scripts/asyncapi/check.mjs`
//! validates the document itself with the AsyncAPI parser and the schemas with avsc.)

use std::collections::BTreeSet;

fn document() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/asyncapi.yaml"))
        .expect("asyncapi.yaml")
}

/// The values of `key: value` lines (quotes trimmed).
fn values<'a>(doc: &'a str, key: &str) -> Vec<&'a str> {
    doc.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().trim_matches('\''))
        .collect()
}

#[test]
fn every_topic_ktimer_declares_is_a_channel_and_no_other() {
    let doc = document();
    let addresses: BTreeSet<&str> = values(&doc, "address")
        .into_iter()
        .filter(|a| *a != "null")
        .collect();
    let declared: BTreeSet<String> = ktimer::topics::builtin()
        .into_iter()
        .map(|t| t.name)
        .collect();
    let declared: BTreeSet<&str> = declared.iter().map(String::as_str).collect();
    assert_eq!(addresses, declared);
}

#[test]
fn every_header_of_the_contract_is_described_and_no_other() {
    let doc = document();
    let named: BTreeSet<&str> = doc
        .lines()
        .filter_map(|l| l.trim().strip_suffix(':'))
        .filter(|k| k.starts_with("ktimer-"))
        .collect();
    let code: BTreeSet<&str> = ktimer::sink::headers::ALL
        .into_iter()
        .chain(ktimer::delay::contract::names::ALL)
        .collect();
    assert_eq!(named, code);
}

/// The W3C trace context headers are described where ktimer reads or writes them: on
/// commands, results and fired records.
#[test]
fn the_trace_context_headers_are_described_on_commands_results_and_fires() {
    let doc = document();
    for name in [ktimer::trace::TRACEPARENT, ktimer::trace::TRACESTATE] {
        let n = doc
            .lines()
            .filter(|l| l.trim() == format!("{name}:"))
            .count();
        assert_eq!(n, 3, "{name}");
    }
}

#[test]
fn every_avro_schema_it_names_is_one_of_schemas() {
    let doc = document();
    let refs: Vec<&str> = values(&doc, "$ref")
        .into_iter()
        .filter(|r| r.ends_with(".avsc"))
        .collect();
    assert!(refs.len() >= 5, "{refs:?}");
    for r in refs {
        let path = format!("{}/{}", env!("CARGO_MANIFEST_DIR"), r);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{r}: {e}"));
        apache_avro::Schema::parse_str(&text).unwrap_or_else(|e| panic!("{r}: {e}"));
    }
}
