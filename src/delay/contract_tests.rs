use super::*;

const TS: i64 = 1_800_000_000_000;

fn record<'a>(value: Option<&'a [u8]>, headers: &[(&'a str, &'a str)]) -> DelayRecord<'a> {
    DelayRecord {
        topic: "ktimer.delay",
        partition: 3,
        offset: 42,
        timestamp_ms: TS,
        key: Some(b"order-7"),
        value,
        headers: headers
            .iter()
            .map(|(k, v)| (*k, Some(v.as_bytes())))
            .collect(),
    }
}

fn refused(r: &DelayRecord) -> String {
    command(r).expect_err("refused").reason
}

#[test]
fn a_delayed_record_becomes_a_raw_create_of_itself() {
    let value: &[u8] = &[0, 159, 146, 150];
    let r = record(
        Some(value),
        &[
            ("ktimer-delay-ms", "30000"),
            ("trace", "abc"),
            ("ktimer-target-topic", "orders.timeouts"),
            ("content-type", "application/octet-stream"),
            ("ktimer-fire-id", "from an earlier delivery"),
        ],
    );
    let cmd = command(&r).unwrap();
    assert_eq!(cmd.kind, CommandKind::CreateOnce);
    assert_eq!(cmd.timer_id, "ktimer.delay/3/42");
    assert_eq!(cmd.request_id, "ktimer.delay/3/42");
    assert_eq!(cmd.application, "default");
    assert_eq!(cmd.at_ms, Some(TS + 30_000));
    assert_eq!(cmd.delay_ms, None);
    let cb = cmd.callback.unwrap();
    assert_eq!(cb.topic.as_deref(), Some("orders.timeouts"));
    assert_eq!(cb.key.as_deref(), Some(&b"order-7"[..]));
    assert_eq!(cb.payload, value);
    assert_eq!(cb.mode, DeliveryMode::Raw);
    let headers: Vec<_> = cb
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [
            ("content-type", "application/octet-stream"),
            ("trace", "abc")
        ]
    );
}

#[test]
fn the_id_application_and_instant_come_from_headers() {
    let at = (TS + 5).to_string();
    let r = record(
        Some(b"x"),
        &[
            ("ktimer-at-ms", &at),
            ("ktimer-target-topic", "t"),
            ("ktimer-timer-id", "reminder-9"),
            ("ktimer-application", "billing"),
        ],
    );
    let cmd = command(&r).unwrap();
    assert_eq!(
        (cmd.timer_id.as_str(), cmd.application.as_str()),
        ("reminder-9", "billing")
    );
    assert_eq!(cmd.request_id, "ktimer.delay/3/42");
    assert_eq!(cmd.at_ms, Some(TS + 5));
}

#[test]
fn a_tombstone_cancels_the_named_timer() {
    let r = record(None, &[("ktimer-timer-id", "reminder-9")]);
    let cmd = command(&r).unwrap();
    assert_eq!(cmd.kind, CommandKind::Cancel);
    assert_eq!(cmd.timer_id, "reminder-9");
    assert!(cmd.callback.is_none() && cmd.at_ms.is_none());
    let unnamed = refused(&record(None, &[]));
    assert!(unnamed.contains("names none"), "{unnamed}");
}

#[test]
fn bad_headers_are_refused_with_the_reason() {
    let t = ("ktimer-target-topic", "t");
    let d = ("ktimer-delay-ms", "10");
    let cases: [(&[(&str, &str)], &str); 8] = [
        (&[d], "needs the ktimer-target-topic header"),
        (&[t], "needs ktimer-delay-ms or ktimer-at-ms"),
        (
            &[t, ("ktimer-delay-ms", "soon")],
            "not a decimal integer: \"soon\"",
        ),
        (&[t, ("ktimer-delay-ms", "-5")], "must not be negative"),
        (&[t, d, ("ktimer-at-ms", "1")], "not both"),
        (
            &[t, ("ktimer-at-ms", "1800000000")],
            "milliseconds, not seconds?",
        ),
        (&[t, d, d], "ktimer-delay-ms appears more than once"),
        (
            &[t, d, ("h", "1"), ("h", "2")],
            "\"h\" appears more than once",
        ),
    ];
    for (headers, want) in cases {
        let why = refused(&record(Some(b"x"), headers));
        assert!(why.contains(want), "{headers:?}: {why}");
    }
    let max = i64::MAX.to_string();
    let overflow = record(Some(b"x"), &[t, ("ktimer-delay-ms", &max)]);
    assert!(refused(&overflow).contains("overflows"));
}

#[test]
fn headers_the_delivery_cannot_carry_as_they_came_are_refused() {
    let mut r = record(
        Some(b"x"),
        &[("ktimer-target-topic", "t"), ("ktimer-delay-ms", "1")],
    );
    r.headers.push(("binary", Some(&[0xff, 0xfe])));
    assert!(refused(&r).contains("not UTF-8"));
    r.headers.pop();
    r.headers.push(("empty", None));
    assert!(refused(&r).contains("null value"));
    let refusal = command(&r).unwrap_err();
    assert_eq!(refusal.command.timer_id, "ktimer.delay/3/42");
    assert_eq!(refusal.command.kind, CommandKind::CreateOnce);
}

#[test]
fn an_instant_shortly_before_the_timestamp_is_kept_and_fires_at_once() {
    let at = (TS - MAX_PAST_MS).to_string();
    let r = record(
        Some(b"x"),
        &[("ktimer-target-topic", "t"), ("ktimer-at-ms", &at)],
    );
    assert_eq!(command(&r).unwrap().at_ms, Some(TS - MAX_PAST_MS));
}

#[test]
fn record_of_is_the_inverse_of_command() {
    let mut create = TimerCommand::new(CommandKind::CreateOnce, "r-1", "ktimer.delay/3/42");
    create.application = "billing".into();
    create.at_ms = Some(TS + 90);
    create.callback = Some(Callback {
        topic: Some("reminders".into()),
        key: Some(b"k".to_vec()),
        headers: [("trace".to_string(), "abc".to_string())].into(),
        payload: b"remind me".to_vec(),
        mode: DeliveryMode::Raw,
    });
    let cancel = TimerCommand::new(CommandKind::Cancel, "r-1", "ktimer.delay/3/42");
    for mut cmd in [create, cancel] {
        let d = record_of(&cmd, "ktimer.fired").unwrap();
        let headers: Vec<(&str, Option<&[u8]>)> = d
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), Some(v.as_bytes())))
            .collect();
        let r = DelayRecord {
            key: d.key.as_deref(),
            value: d.value.as_deref(),
            headers,
            ..record(None, &[])
        };
        cmd.sent_at_ms = Some(TS);
        assert_eq!(command(&r).unwrap(), cmd);
    }
    let mut envelope = TimerCommand::new(CommandKind::CreateOnce, "e", "e");
    envelope.delay_ms = Some(5);
    envelope.callback = Some(Callback::default());
    assert!(record_of(&envelope, "f").unwrap_err().contains("RAW"));
    let cron = TimerCommand::new(CommandKind::CreateCron, "c", "c");
    assert!(record_of(&cron, "f").unwrap_err().contains("CREATE_CRON"));
}
