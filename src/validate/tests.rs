use super::*;

fn once(at: Option<i64>, delay: Option<i64>) -> TimerCommand {
    TimerCommand {
        application: "a".into(),
        at_ms: at,
        delay_ms: delay,
        ..TimerCommand::new(CommandKind::CreateOnce, "t", "r")
    }
}

#[test]
fn due_times() {
    let l = Limits::default();
    let v = |c: &TimerCommand| validate(c, Some(b"t"), 1_000, 1_000, &l);
    let due = |c: &TimerCommand| match v(c) {
        Ok(Op::Create { schedule, .. }) => schedule.first_due(),
        other => panic!("{other:?}"),
    };
    assert_eq!(due(&once(Some(5_000), None)), Some(5_000));
    assert_eq!(due(&once(None, Some(20))), Some(1_020));
    assert!(v(&once(Some(0), None)).unwrap_err().contains("between 1"));
    assert!(v(&once(None, Some(-1))).unwrap_err().contains("between 0"));
    assert!(v(&once(None, None)).unwrap_err().contains("needs"));
    assert!(v(&once(Some(1), Some(1))).unwrap_err().contains("only one"));
    assert!(v(&once(None, Some(i64::MAX)))
        .unwrap_err()
        .contains("delay_ms must be between"));
    assert!(v(&once(Some(MAX_INSTANT_MS), None))
        .unwrap_err()
        .contains("days ahead"));
}

#[test]
fn key_must_be_timer_id() {
    let l = Limits::default();
    let c = once(Some(5), None);
    assert!(validate(&c, None, 0, 0, &l).unwrap_err().contains("no key"));
    assert!(validate(&c, Some(b"x"), 0, 0, &l)
        .unwrap_err()
        .contains("differs"));
}

fn cron_cmd(kind: CommandKind, expr: &str) -> TimerCommand {
    TimerCommand {
        cron: Some(expr.into()),
        ..TimerCommand::new(kind, "t", "r")
    }
}

#[test]
fn cron_and_lifecycle_commands() {
    let l = Limits::default();
    let now = 1_800_000_000_000; // a whole second
    let v = |c: &TimerCommand| validate(c, Some(b"t"), now, now, &l);
    match v(&cron_cmd(CommandKind::CreateCron, "*/5 * * * * *")) {
        Ok(Op::Create {
            schedule: Schedule::Cron { spec, first, .. },
            ..
        }) => {
            assert_eq!(spec.time_zone, "UTC");
            assert_eq!(spec.misfire, MisfirePolicy::FireOnce);
            // From the record's timestamp on (inclusive), an hour ahead.
            assert_eq!(first.dues.first(), Some(&now));
            assert_eq!(first.dues.len(), 721);
        }
        other => panic!("{other:?}"),
    }
    let err = |c: TimerCommand| v(&c).unwrap_err();
    assert!(err(cron_cmd(CommandKind::CreateCron, "nope")).contains("invalid cron"));
    assert!(err(TimerCommand {
        time_zone: Some("Europe/Nowhere".into()),
        ..cron_cmd(CommandKind::CreateCron, "* * * * *")
    })
    .contains("unknown time zone"));
    assert!(err(TimerCommand {
        start_ms: Some(now + 10),
        end_ms: Some(now),
        ..cron_cmd(CommandKind::CreateCron, "* * * * *")
    })
    .contains("before start"));
    assert!(err(TimerCommand {
        end_ms: Some(now - 1),
        ..cron_cmd(CommandKind::CreateCron, "* * * * *")
    })
    .contains("no occurrence"));
    assert!(err(TimerCommand {
        at_ms: Some(now),
        ..cron_cmd(CommandKind::CreateCron, "* * * * *")
    })
    .contains("one-shot"));
    assert!(err(TimerCommand {
        misfire: Some(MisfirePolicy::Skip),
        ..once(Some(now), None)
    })
    .contains("repeating timers"));
    assert!(err(TimerCommand::new(CommandKind::CreateCron, "t", "r")).contains("needs cron"));
    // UPDATE takes one schedule, of either kind; the callback is optional.
    assert!(err(TimerCommand::new(CommandKind::Update, "t", "r")).contains("UPDATE needs"));
    assert!(matches!(
        v(&cron_cmd(CommandKind::Update, "0 * * * * *")),
        Ok(Op::Update {
            schedule: Schedule::Cron { .. },
            def: None
        })
    ));
    assert!(matches!(
        v(&TimerCommand {
            kind: CommandKind::Update,
            ..once(None, Some(5))
        }),
        Ok(Op::Update {
            schedule: Schedule::Once { due_ms },
            def: None
        }) if due_ms == now + 5
    ));
    assert_eq!(
        v(&TimerCommand::new(CommandKind::Resume, "t", "r")),
        Ok(Op::Resume { origin_ms: now })
    );
}

#[test]
fn extreme_instants_get_a_reason_not_a_panic() {
    let l = Limits::default();
    let now = 1_800_000_000_000;
    let v = |c: &TimerCommand| validate(c, Some(b"t"), now, now, &l);
    // Near chrono's largest instant: the issue's command crashed every instance.
    let end = 8_210_266_876_799_999;
    let c = TimerCommand {
        start_ms: Some(end - 3_600_000),
        end_ms: Some(end),
        ..cron_cmd(CommandKind::CreateCron, "* * * * * *")
    };
    assert!(v(&c).unwrap_err().contains("start_ms"), "{:?}", v(&c));
    for x in [i64::MIN, -1, MAX_INSTANT_MS + 1, i64::MAX] {
        for c in [
            TimerCommand {
                start_ms: Some(x),
                ..cron_cmd(CommandKind::CreateCron, "* * * * * *")
            },
            TimerCommand {
                end_ms: Some(x),
                ..cron_cmd(CommandKind::CreateCron, "* * * * * *")
            },
            once(Some(x), None),
            once(None, Some(x)),
            TimerCommand {
                max_fires: Some(x),
                ..cron_cmd(CommandKind::CreateCron, "* * * * * *")
            },
        ] {
            assert!(v(&c).is_err(), "{c:?}");
        }
    }
    // The largest instant itself is fine as a bound.
    let c = TimerCommand {
        end_ms: Some(MAX_INSTANT_MS),
        ..cron_cmd(CommandKind::CreateCron, "0 0 0 1 1 * 2099")
    };
    assert!(v(&c).is_ok(), "{:?}", v(&c));
    // Echoed values are cut.
    let long = "x".repeat(600_000);
    let e = validate(&once(Some(now), None), Some(long.as_bytes()), now, now, &l).unwrap_err();
    assert!(e.len() < 400 && e.contains("600000 bytes"), "{}", e.len());
}

#[test]
fn own_topics_and_the_allow_list_bound_callbacks() {
    let mut l = Limits::default();
    let now = 1_800_000_000_000;
    let to = |app: &str, topic: &str| TimerCommand {
        application: app.into(),
        callback: Some(Callback {
            topic: Some(topic.into()),
            mode: crate::command::DeliveryMode::Raw,
            ..Callback::default()
        }),
        ..once(Some(now + 1_000), None)
    };
    let v = |c: &TimerCommand, l: &Limits| validate(c, Some(b"t"), now, now, l);
    for own in ["ktimer.commands", "ktimer.results", "ktimer.dead-letter"] {
        assert!(
            v(&to("a", own), &l).unwrap_err().contains("ktimer's own"),
            "{own}"
        );
    }
    assert!(v(&to("a", "ktimer.fired"), &l).is_ok());
    assert!(v(&to("a", "anywhere"), &l).is_ok());
    l.allow = Some(std::sync::Arc::new(
        crate::allow::AllowList::parse("[applications]\na = [\"a.*\"]").unwrap(),
    ));
    assert!(v(&to("a", "a.cb"), &l).is_ok());
    assert!(v(&to("a", "b.cb"), &l).unwrap_err().contains("allow-list"));
    assert!(v(&to("b", "b.cb"), &l).unwrap_err().contains("allow-list"));
    assert!(
        v(&to("b", "ktimer.fired"), &l).is_ok(),
        "the default callback"
    );
}
