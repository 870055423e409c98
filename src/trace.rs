//! W3C trace context across the delay (pure): a command's `traceparent` and `tracestate`
//! (Kafka record headers, as OpenTelemetry's Kafka instrumentations carry them) are kept
//! with the timer, in its callback headers (stored, and rebuilt from the state topic with
//! them), and come back on its result and on every fire.
//!
//! A fire is a child span of the span that created the timer: its `traceparent` keeps the
//! trace id and the flags and takes a span id derived from the fire id (the first eight
//! bytes of its CRC-64-AVRO, apache-avro's Rabin digest), so a retried or rebuilt fire carries the same one, and a
//! consumer continuing the trace from the fired record's headers is linked to the request
//! that set the timer. A malformed `traceparent` is ignored, as the specification asks
//! (<https://www.w3.org/TR/trace-context/#traceparent-header>).

use std::collections::BTreeMap;

/// The `traceparent` header.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header.
pub const TRACESTATE: &str = "tracestate";
/// The longest `tracestate` kept (the specification's 32 members fit in 512 bytes).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A valid trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// `00-<trace id>-<parent id>-<flags>`, lower-case hex.
    pub traceparent: String,
    /// The vendors' state, passed on as it came (when not over the limit).
    pub tracestate: Option<String>,
}

impl Context {
    /// The context of `traceparent` and `tracestate`, or `None` unless `traceparent` is
    /// valid (version 00; a trace id and a parent id of hex digits, not all zeros).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
        let parts: Vec<&str> = traceparent.trim().split('-').collect();
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let valid = parts.len() == 4
            && parts[0] == "00"
            && hex(parts[1], 32)
            && hex(parts[2], 16)
            && hex(parts[3], 2)
            && parts[1].bytes().any(|b| b != b'0')
            && parts[2].bytes().any(|b| b != b'0');
        valid.then(|| Context {
            traceparent: parts.join("-"),
            tracestate: tracestate
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE_BYTES)
                .map(String::from),
        })
    }

    /// The context named by `headers` (a header name to its text), if any.
    pub fn of<'a>(headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> Option<Context> {
        let (mut parent, mut state) = (None, None);
        for (k, v) in headers {
            let v = std::str::from_utf8(v).ok();
            match k {
                TRACEPARENT => parent = v,
                TRACESTATE => state = v,
                _ => {}
            }
        }
        Context::parse(parent?, state)
    }

    /// The context a timer's callback headers hold.
    pub fn of_callback(headers: &BTreeMap<String, String>) -> Option<Context> {
        let state = headers.get(TRACESTATE).map(String::as_str);
        Context::parse(headers.get(TRACEPARENT)?, state)
    }

    /// Keeps the context in a timer's callback headers (replacing any there).
    pub fn keep_in(&self, headers: &mut BTreeMap<String, String>) {
        headers.insert(TRACEPARENT.into(), self.traceparent.clone());
        match &self.tracestate {
            Some(s) => headers.insert(TRACESTATE.into(), s.clone()),
            None => headers.remove(TRACESTATE),
        };
    }

    /// The trace id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The `traceparent` of fire `fire_id`: this trace, a span id of the fire's own.
    pub fn child(&self, fire_id: &str) -> String {
        use digest::Digest;
        let d = apache_avro::rabin::Rabin::digest(fire_id.as_bytes());
        let span = match u64::from_le_bytes(d.into()) {
            0 => 1,
            h => h,
        };
        format!(
            "00-{}-{span:016x}-{}",
            self.trace_id(),
            &self.traceparent[53..55]
        )
    }
}

/// A fire's `traceparent` in place of the creating span's, when `name` is one and its
/// value a valid context; else the header as it is.
pub fn fire_header<'a>(name: &str, value: &'a str, fire_id: &str) -> std::borrow::Cow<'a, str> {
    let parent = (name == TRACEPARENT).then(|| Context::parse(value, None));
    match parent.flatten() {
        Some(c) => c.child(fire_id).into(),
        None => value.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's example.
    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_and_invalid_traceparents() {
        let c = Context::parse(EXAMPLE, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(c.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(c.tracestate.as_deref(), Some("rojo=00f067aa0ba902b7"));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(Context::parse(bad, None), None, "{bad}");
        }
        let long = "k=".to_string() + &"v".repeat(MAX_TRACESTATE_BYTES);
        assert_eq!(
            Context::parse(EXAMPLE, Some(&long)).unwrap().tracestate,
            None
        );
    }

    #[test]
    fn a_fire_is_a_child_span_stable_per_fire() {
        let c = Context::parse(EXAMPLE, None).unwrap();
        let a = c.child("t/7/1000");
        assert_eq!(a, c.child("t/7/1000"), "a retry carries the same span");
        assert_ne!(a, c.child("t/7/2000"), "each occurrence its own");
        let child = Context::parse(&a, None).expect("a valid traceparent");
        assert_eq!(child.trace_id(), c.trace_id());
        assert!(a.ends_with("-01"), "the flags kept: {a}");
        assert_ne!(&a[36..52], "00f067aa0ba902b7");
    }

    #[test]
    fn headers_in_and_out() {
        let headers = [
            ("x", &b"1"[..]),
            (TRACEPARENT, EXAMPLE.as_bytes()),
            (TRACESTATE, b"a=b"),
        ];
        let c = Context::of(headers.into_iter()).unwrap();
        let mut kept = BTreeMap::from([(TRACESTATE.to_string(), "old=1".to_string())]);
        c.keep_in(&mut kept);
        assert_eq!(Context::of_callback(&kept), Some(c));
        assert_eq!(fire_header("other", "v", "f"), "v");
        assert_ne!(fire_header(TRACEPARENT, EXAMPLE, "f"), EXAMPLE);
    }
}
