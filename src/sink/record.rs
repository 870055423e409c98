//! Building a fire's record, pure: its topic, key, envelope and headers. Sending is in
//! [`super::send`].

use crate::command::{fire_id, FiredEvent};
use crate::timer::Fire;
use rdkafka::message::{Header, OwnedHeaders};

/// Header names set on fired records (and dead letters).
pub mod headers {
    /// The stable fire id, `timer_id/version/due_ms`: de-duplicate on it.
    pub const FIRE_ID: &str = "ktimer-fire-id";
    /// The timer id.
    pub const TIMER_ID: &str = "ktimer-timer-id";
    /// The timer's application.
    pub const APPLICATION: &str = "ktimer-application";
    /// The due instant, Unix epoch ms (decimal text).
    pub const DUE_MS: &str = "ktimer-due-ms";
    /// When ktimer produced the record, Unix epoch ms (decimal text).
    pub const FIRED_MS: &str = "ktimer-fired-ms";
    /// The delivery attempt, 1 for the first.
    pub const ATTEMPT: &str = "ktimer-attempt";
    /// The instance that produced the record, `host/pid`.
    pub const INSTANCE: &str = "ktimer-instance";
    /// The partition epoch its producer held (owners take ever larger epochs).
    pub const EPOCH: &str = "ktimer-epoch";
    /// Dead letters: why the record is there.
    pub const REASON: &str = "ktimer-reason";
    /// Dead letters: the topic (fires) or `topic/partition/offset` (commands) it came from.
    pub const ORIGIN: &str = "ktimer-origin";
    /// Dead letters: set when the value was left out because the record was too large.
    pub const VALUE_DROPPED: &str = "ktimer-value-dropped";
    /// On a command forwarded to its key's partition: `partition/offset` it arrived at.
    pub const FORWARDED_FROM: &str = "ktimer-forwarded-from";
    /// On a command a delayed record became: that record's `topic/partition/offset`.
    pub const DELAYED_FROM: &str = "ktimer-delayed-from";
    /// Every header above (the contract `asyncapi.yaml` describes; tests/asyncapi.rs).
    pub const ALL: [&str; 13] = [
        FIRE_ID,
        TIMER_ID,
        APPLICATION,
        DUE_MS,
        FIRED_MS,
        ATTEMPT,
        INSTANCE,
        EPOCH,
        REASON,
        ORIGIN,
        VALUE_DROPPED,
        FORWARDED_FROM,
        DELAYED_FROM,
    ];
}

/// How a fire is being produced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamp {
    /// Delivery attempt, 1 for the first.
    pub attempt: i32,
    /// Produce time, Unix epoch ms.
    pub fired_ms: i64,
    /// The partition epoch the producing trigger holds.
    pub epoch: i64,
}

/// The topic a fire goes to: its callback topic, or the default fired topic.
pub fn topic<'a>(fire: &'a Fire, default: &'a str) -> &'a str {
    fire.def.callback.topic.as_deref().unwrap_or(default)
}

/// The record key: the callback's key, or the timer id.
pub fn key(fire: &Fire) -> &[u8] {
    let cb = &fire.def.callback;
    cb.key.as_deref().unwrap_or(fire.timer_id.as_bytes())
}

/// The stable fire id of `fire`, `timer_id/version/due_ms` (computed once per fire).
pub fn id(fire: &Fire) -> String {
    fire_id(&fire.timer_id, fire.version, fire.due_ms)
}

/// The envelope of an `ENVELOPE`-mode fire whose id is `id`.
pub fn envelope(fire: &Fire, id: &str, stamp: Stamp) -> FiredEvent {
    FiredEvent {
        fire_id: id.to_string(),
        timer_id: fire.timer_id.clone(),
        application: fire.def.application.clone(),
        version: fire.version,
        due_ms: fire.due_ms,
        fired_ms: stamp.fired_ms,
        attempt: stamp.attempt,
        payload: fire.def.callback.payload.clone(),
    }
}

/// ktimer's headers of fire `id` (produced by `instance`), then the callback's own (a
/// kept `traceparent` as the fire's child span, [`crate::trace`]).
pub fn fire_headers(fire: &Fire, id: &str, stamp: Stamp, instance: &str) -> OwnedHeaders {
    let cb = &fire.def.callback;
    // (Integers formatted on the stack: librdkafka copies each header's bytes.)
    let [mut due, mut fired, mut att, mut ep] = [itoa::Buffer::new(); 4];
    let mut h = OwnedHeaders::new_with_capacity(8 + cb.headers.len())
        .insert(header(headers::FIRE_ID, id))
        .insert(header(headers::TIMER_ID, &fire.timer_id))
        .insert(header(headers::APPLICATION, &fire.def.application))
        .insert(header(headers::DUE_MS, due.format(fire.due_ms)))
        .insert(header(headers::FIRED_MS, fired.format(stamp.fired_ms)))
        .insert(header(headers::ATTEMPT, att.format(stamp.attempt)))
        .insert(header(headers::INSTANCE, instance))
        .insert(header(headers::EPOCH, ep.format(stamp.epoch)));
    for (k, v) in &cb.headers {
        h = h.insert(header(k, &crate::trace::fire_header(k, v, id)));
    }
    h
}

/// `h` and the W3C trace context `trace`, if any (a result's, a forwarded command's).
pub fn with_trace(h: OwnedHeaders, trace: Option<&crate::trace::Context>) -> OwnedHeaders {
    let Some(t) = trace else {
        return h;
    };
    let h = h.insert(header(crate::trace::TRACEPARENT, &t.traceparent));
    match &t.tracestate {
        Some(s) => h.insert(header(crate::trace::TRACESTATE, s)),
        None => h,
    }
}

/// The headers of dead-lettered fire `id` whose record was too large: its identity only.
pub fn identity_headers(fire: &Fire, id: &str, reason: &str, origin: &str) -> OwnedHeaders {
    let due = fire.due_ms.to_string();
    OwnedHeaders::new()
        .insert(header(headers::FIRE_ID, id))
        .insert(header(headers::TIMER_ID, &fire.timer_id))
        .insert(header(headers::DUE_MS, &due))
        .insert(header(headers::REASON, reason))
        .insert(header(headers::ORIGIN, origin))
        .insert(header(headers::VALUE_DROPPED, "too large"))
}

/// A text header.
pub fn header<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a str> {
    Header {
        key,
        value: Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Callback;
    use crate::timer::TimerDef;
    use rdkafka::message::Headers;

    fn fire(cb: Callback) -> Fire {
        Fire {
            member: "7:1000:t".into(),
            timer_id: "t".into(),
            version: 7,
            due_ms: 1000,
            def: TimerDef {
                application: "app".into(),
                callback: cb,
            },
            taken: None,
        }
    }

    fn pairs(h: &OwnedHeaders) -> Vec<(String, String)> {
        h.iter()
            .map(|x| {
                (
                    x.key.to_string(),
                    String::from_utf8_lossy(x.value.unwrap()).into(),
                )
            })
            .collect()
    }

    #[test]
    fn a_fire_carries_its_identity_and_the_callback_headers() {
        let mut cb = Callback::default();
        cb.headers.insert("trace".into(), "abc".into());
        let f = fire(cb);
        let stamp = Stamp {
            attempt: 2,
            fired_ms: 1003,
            epoch: 9,
        };
        let got = pairs(&fire_headers(&f, &id(&f), stamp, "host/1"));
        let want = [
            (headers::FIRE_ID, "t/7/1000"),
            (headers::TIMER_ID, "t"),
            (headers::APPLICATION, "app"),
            (headers::DUE_MS, "1000"),
            (headers::FIRED_MS, "1003"),
            (headers::ATTEMPT, "2"),
            (headers::INSTANCE, "host/1"),
            (headers::EPOCH, "9"),
            ("trace", "abc"),
        ];
        let want: Vec<_> = want.map(|(k, v)| (k.to_string(), v.to_string())).into();
        assert_eq!(got, want);
        let e = envelope(&f, &id(&f), stamp);
        assert_eq!(
            (e.fire_id.as_str(), e.fired_ms, e.attempt),
            ("t/7/1000", 1003, 2)
        );
        assert_eq!(topic(&f, "fired"), "fired");
        assert_eq!(key(&f), b"t");
    }

    #[test]
    fn callback_topic_and_key_override_the_defaults() {
        let f = fire(Callback {
            topic: Some("orders".into()),
            key: Some(b"k".to_vec()),
            ..Default::default()
        });
        assert_eq!(topic(&f, "fired"), "orders");
        assert_eq!(key(&f), b"k");
        let h = pairs(&identity_headers(&f, &id(&f), "too big", "orders"));
        assert_eq!(h[0], (headers::FIRE_ID.into(), "t/7/1000".into()));
        assert_eq!(h.last().unwrap().0, headers::VALUE_DROPPED);
    }
}
