use super::args::{command_args, create_args};
use super::chunks::{chunks, Chunk, APPLY_CHUNK, CREATE_CHUNK};
use super::create::{parse_created, Created};
use super::*;
use crate::codec;
use crate::command::{Callback, MisfirePolicy};
use crate::schedule::{CronSpec, Occurrences};
use crate::store::fresh::Fresh;
use crate::timer::{Op, Schedule, TimerDef};

fn req(partition: i32, offset: i64, op: Op) -> ApplyRequest {
    ApplyRequest {
        partition,
        epoch: 7,
        offset,
        timer_id: "t1".into(),
        request_id: "r1".into(),
        application: "app".into(),
        max_pending: None,
        paced: false,
        op,
    }
}

fn collect(r: &ApplyRequest, now_ms: i64) -> Vec<Vec<u8>> {
    let mut args = Vec::new();
    command_args(r, now_ms, true, &mut args).unwrap();
    args
}

fn texts(args: &[Vec<u8>]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn one_shot_create_args_follow_the_script_layout() {
    let def = TimerDef {
        application: "app".into(),
        callback: Callback::default(),
    };
    let op = Op::Create {
        schedule: Schedule::Once { due_ms: 1_234 },
        def: def.clone(),
    };
    let args = collect(&req(0, 42, op), 0);
    let t = texts(&args);
    assert_eq!(&t[..6], ["42", "create", "t1", "r1", "o", "1234"]);
    assert_eq!(args[6], codec::encode_stored(&def).unwrap());
    // Origin, application, pending limit, pacing.
    assert_eq!(&t[7..11], ["0", "app", "", ""]);
    // The record of the new timer around its definition, then no occurrences.
    let fresh = Fresh::new(
        &req(0, 42, Op::Cancel),
        1_234,
        &args[6],
        "app",
        0,
        true,
        true,
    );
    assert_eq!((&args[11], &args[12]), (&fresh.head, &fresh.tail));
    assert_eq!(t[13], "0", "no cron values");
    // The group length apply.lua steps by: 14 + the number of cron values.
    assert_eq!(args.len(), 14);
    // A pending limit and the pacing travel with the command.
    let mut limited = req(0, 42, Op::Cancel);
    limited.max_pending = Some(25);
    limited.paced = true;
    assert_eq!(&texts(&collect(&limited, 0))[9..11], ["25", "1"]);
}

#[test]
fn cron_update_args_carry_the_window() {
    let spec = CronSpec {
        cron: "*/5 * * * * *".into(),
        time_zone: "UTC".into(),
        start_ms: None,
        end_ms: None,
        max_fires: Some(3),
        misfire: MisfirePolicy::Skip,
        every_ms: None,
        jitter_ms: None,
        calendar: None,
        calendar_policy: None,
    };
    let first = Occurrences {
        dues: vec![5_000, 10_000],
        covered_ms: 11_000,
        exhausted: false,
    };
    let op = Op::Update {
        schedule: Schedule::Cron {
            spec: Box::new(spec.clone()),
            first,
            next_ms: Some(5_000),
        },
        def: None,
    };
    let t = texts(&collect(&req(1, 9, op), 1_000));
    assert_eq!(&t[..6], ["9", "update", "t1", "r1", "c", "5000"]);
    assert_eq!(t[6], "", "no definition: the current one stays");
    // Origin, application, no limit, not paced, no record of a new one-shot timer, then
    // 5 + 2 cron values.
    assert_eq!(&t[7..14], ["0", "app", "", "", "", "", "7"]);
    assert_eq!(serde_json::from_str::<CronSpec>(&t[14]).unwrap(), spec);
    // misfire, max fires, covered, refill halfway between now and covered, occurrences.
    assert_eq!(&t[15..], ["skip", "3", "11000", "6000", "5000", "10000"]);
}

#[test]
fn lifecycle_args_have_no_schedule() {
    let t = texts(&collect(&req(0, 5, Op::Resume { origin_ms: 77 }), 0));
    assert_eq!(
        t,
        ["5", "resume", "t1", "r1", "", "", "", "77", "app", "", "", "", "", "0"]
    );
    let t = texts(&collect(&req(0, 6, Op::Cancel), 0));
    assert_eq!(&t[..2], ["6", "cancel"]);
}

#[test]
fn commands_are_chunked_per_partition_in_order() {
    // Two full chunks of partition 0 and a rest of 50, plus one of partition 3.
    let n = 2 * APPLY_CHUNK as i64 + 50;
    let mut reqs: Vec<ApplyRequest> = (0..n).map(|i| req(0, i, Op::Cancel)).collect();
    reqs.insert(1, req(3, 0, Op::Pause));
    let c: Vec<Vec<usize>> = chunks(&reqs, true).into_iter().map(|c| c.reqs).collect();
    assert_eq!(c.len(), 4);
    assert_eq!(c[0].len(), APPLY_CHUNK);
    assert_eq!(c[1], vec![1]);
    assert_eq!(c[0][..3], [0, 2, 3]);
    assert_eq!(c[2].len(), APPLY_CHUNK);
    assert_eq!(c[3].len(), 50);
    assert!(c[3].windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn runs_of_creates_are_chunked_by_their_own_bound() {
    let n = CREATE_CHUNK + 50;
    let reqs: Vec<ApplyRequest> = (0..n)
        .map(|i| create_once(0, i as i64, &format!("t{i}"), "a"))
        .collect();
    let c = chunks(&reqs, true);
    assert!(c.iter().all(|c| c.create));
    let sizes: Vec<usize> = c.iter().map(|c| c.reqs.len()).collect();
    assert_eq!(sizes, [CREATE_CHUNK, 50]);
}

fn create_once(partition: i32, offset: i64, id: &str, app: &str) -> ApplyRequest {
    let def = TimerDef {
        application: app.into(),
        callback: Callback::default(),
    };
    let op = Op::Create {
        schedule: Schedule::Once { due_ms: 90_000 },
        def,
    };
    ApplyRequest {
        timer_id: id.into(),
        application: app.into(),
        ..req(partition, offset, op)
    }
}

#[test]
fn runs_of_new_one_shot_timers_go_to_create_lua() {
    let mut limited = create_once(0, 5, "e", "a");
    limited.max_pending = Some(10);
    let mut paced = create_once(0, 6, "f", "a");
    paced.paced = true;
    let reqs = vec![
        create_once(0, 0, "a", "a"),
        create_once(0, 1, "b", "a"),
        create_once(0, 2, "c", "other"),
        create_once(0, 3, "d", "other"),
        req(0, 4, Op::Cancel),
        limited,
        paced,
        create_once(0, 7, "g", "a"),
        // "t1" is named twice in the batch (a create, then a cancel): apply.lua takes both.
        create_once(0, 8, "t1", "a"),
        req(0, 9, Op::Cancel),
        create_once(1, 0, "a", "a"),
    ];
    let got = chunks(&reqs, true);
    let want = |create: bool, reqs: &[usize]| Chunk {
        create,
        reqs: reqs.to_vec(),
    };
    let expected = vec![
        want(true, &[0, 1, 2, 3]),
        want(false, &[4, 5, 6]),
        want(true, &[7]),
        want(false, &[8, 9]),
        want(true, &[10]),
    ];
    assert_eq!(got, expected);
    // Without the fast path (create.lua's answered-back timers), apply.lua takes all.
    assert!(chunks(&reqs, false).iter().all(|c| !c.create));
}

#[test]
fn create_args_follow_create_lua_layout() {
    let r = create_once(0, 42, "t9", "app");
    let whole = collect(&r, 0);
    let def = &whole[6];
    let (head, tail) = (&whole[11], &whole[12]);
    let len = 5; // (the application "app" and no topic: 1 + 3 + 1 bytes)
    for numbered in [None, Some((3, len))] {
        let mut args: Vec<Vec<u8>> = Vec::new();
        let state = create_args(&r, def, numbered, None, 0, true, &mut args).unwrap();
        let t = texts(&args);
        assert_eq!(&t[..3], ["42", "t9", "90000"]);
        assert_eq!(args.len(), 5);
        assert_eq!(t[4], "app", "the application, named in the first group");
        assert!(
            state.is_some(),
            "due after the deferral window: a state is owed"
        );
        // The record: what apply.lua gets around the definition, the definition as a
        // record holds it (a MessagePack string, or [number, rest of it]).
        let record = &args[3];
        assert!(record.starts_with(head) && record.ends_with(tail));
        let middle = &record[head.len()..record.len() - tail.len()];
        let read = rmpv::decode::read_value(&mut &middle[..]).unwrap();
        let bytes = |v: &rmpv::Value| match v {
            rmpv::Value::String(s) => Some(s.as_bytes().to_vec()),
            _ => None,
        };
        match (numbered, read.as_array()) {
            (None, _) => assert_eq!(bytes(&read).as_deref(), Some(&def[..])),
            (Some((n, len)), Some(pair)) => {
                assert_eq!(pair[0].as_u64(), Some(u64::from(n)));
                assert_eq!(bytes(&pair[1]).as_deref(), Some(&def[len..]));
            }
            (Some(_), None) => panic!("a numbered definition packed as {read:?}"),
        }
    }
    // A group after one of the same application leaves it out; of another, names it.
    for (prev, app) in [(Some("app"), ""), (Some("other"), "app")] {
        let mut next: Vec<Vec<u8>> = Vec::new();
        create_args(&r, def, None, prev, 0, true, &mut next).unwrap();
        assert_eq!(next[4], app.as_bytes());
    }
    let mut args: Vec<Vec<u8>> = Vec::new();
    let cancel = req(0, 1, Op::Cancel);
    assert!(create_args(&cancel, def, None, None, 0, true, &mut args).is_err());
}

#[test]
fn create_lua_answers_parse() {
    use redis::Value;
    let arr = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
    let done = |owed, skipped: &[usize]| Created::Done {
        owed,
        numbers: vec![2, 0],
        skipped: skipped.to_vec(),
    };
    // (The owed count, the prefixes' numbers, then the timers Redis holds.)
    let arr = |v: &[i64]| {
        let mut items = vec![Value::Int(v[0]), arr(&[2, 0])];
        items.extend(v[1..].iter().map(|&i| Value::Int(i)));
        Value::Array(items)
    };
    assert_eq!(parse_created(arr(&[3]), 3).unwrap(), done(3, &[]));
    assert_eq!(parse_created(arr(&[1, 1, 3]), 3).unwrap(), done(1, &[0, 2]));
    let word = |w: &[u8]| Value::Array(vec![Value::BulkString(w.to_vec())]);
    assert_eq!(parse_created(word(b"fenced"), 3).unwrap(), Created::Fenced);
    assert_eq!(
        parse_created(word(b"prefixes"), 3).unwrap(),
        Created::Prefixes
    );
    // Out of range, out of order, more states than timers.
    for bad in [
        arr(&[0, 4]),
        arr(&[0, 2, 2]),
        arr(&[0, 0]),
        arr(&[3, 1]),
        Value::Array(vec![]),
        Value::Array(vec![Value::Int(0)]),
    ] {
        assert!(parse_created(bad, 3).is_err());
    }
}

#[test]
fn answers_parse_into_typed_outcomes() {
    let row = |v: &[&str]| {
        v.iter()
            .map(|s| redis::Value::BulkString(s.as_bytes().to_vec()))
            .collect::<Vec<_>>()
    };
    let (got, states) = parse_chunk(
        row(&[
            "accepted",
            "42",
            "scheduled",
            "1234",
            "",
            "duplicate",
            "42",
            "paused",
            "",
            "request r was applied already",
            "rejected",
            "",
            "",
            "",
            "unknown timer",
        ]),
        3,
        none_sent,
    )
    .unwrap();
    assert_eq!(got[0].outcome, ApplyOutcome::Accepted);
    assert_eq!(got[0].version, Some(42));
    assert_eq!(got[0].state, Some(TimerState::Scheduled));
    assert_eq!(got[0].due_ms, Some(1234));
    assert_eq!(got[1].outcome, ApplyOutcome::Duplicate);
    assert_eq!(got[1].due_ms, None);
    assert_eq!(got[2].outcome, ApplyOutcome::Rejected);
    assert_eq!((got[2].version, got[2].state), (None, None));
    assert_eq!(got[2].reason, "unknown timer");
    assert!(states.is_empty());
    let (fenced, _) = parse_chunk(row(&["fenced"]), 2, none_sent).unwrap();
    assert!(fenced.iter().all(|a| a.outcome == ApplyOutcome::Fenced));
    assert!(parse_chunk(row(&["accepted"]), 2, none_sent).is_err());
    assert!(parse_chunk(row(&["maybe", "", "", "", ""]), 1, none_sent).is_err());
}

/// No state was sent with any command.
fn none_sent(id: String, off: i64) -> Result<(), StoreError> {
    Err(bad_reply(format!("no state sent for {id} at {off}")))
}

#[test]
fn states_to_write_follow_the_answers() {
    use redis::Value;
    let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    let mut row: Vec<Value> = ["accepted", "7", "scheduled", "99", ""]
        .iter()
        .map(|s| text(s))
        .collect();
    row.extend([text("t1"), Value::Int(2), text("st"), text("scheduled")]);
    row.extend([text("v"), Value::BulkString(b"\xff7".to_vec())]);
    row.extend([text("t2"), Value::Int(-1)]);
    row.extend([text("t3"), Value::Int(-2), Value::Int(42)]);
    let mut sent = Vec::new();
    let by_offset = |id: String, off: i64| match off {
        42 => {
            sent.push(id);
            Ok(())
        }
        _ => none_sent(id, off),
    };
    let (got, states) = parse_chunk(row.clone(), 1, by_offset).unwrap();
    assert_eq!(got[0].outcome, ApplyOutcome::Accepted);
    assert_eq!(
        states.len(),
        2,
        "the state sent is not among those answered"
    );
    assert_eq!(sent, ["t3"], "the state sent at 42 is handed over");
    assert_eq!(states[0].0, "t1");
    let fields = states[0].1.as_ref().expect("fields");
    assert_eq!(fields.fields.len(), 2);
    assert_eq!(
        fields.fields["v"].as_ref(),
        b"\xff7",
        "binary values kept as bytes"
    );
    assert_eq!(states[1], ("t2".to_string(), None));
    assert!(
        parse_chunk(row, 1, none_sent).is_err(),
        "a state answered as sent must have been sent"
    );
}
