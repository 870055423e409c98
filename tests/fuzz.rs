//! Fuzzing the command decoder (proptest): arbitrary bytes, and mutations (flips,
//! truncations, insertions) of the seed corpus in `tests/corpus/commands/` plus Avro
//! encodings of valid commands. Whatever the bytes, decoding and validating return a
//! value or an error, never panic. Failing inputs proptest finds are kept in
//! `tests/fuzz.proptest-regressions` and replayed first on every run.
//!
//! Commands built field by field with extreme numbers (around 0, chrono's and i64's
//! limits, ktimer's bounds), calendar corners of cron and odd zones go through
//! validation and schedule planning (now and at later materialisations): a reason or a
//! plan, never a panic.

use ktimer::codec::Codec;
use ktimer::command::{Callback, CommandKind, MisfirePolicy, TimerCommand};
use ktimer::timer::{Op, Schedule};
use ktimer::validate::{validate, Limits, MAX_INSTANT_MS};
use proptest::prelude::*;
use std::sync::OnceLock;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Runtime::new().unwrap())
}

/// The seed corpus: the files, and Avro single-object encodings of valid commands.
fn seeds() -> &'static Vec<Vec<u8>> {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/commands");
        let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .expect("corpus directory")
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        let codec = Codec::new(None).unwrap();
        let once = TimerCommand {
            application: "app".into(),
            at_ms: Some(1_795_000_000_000),
            callback: Some(Callback {
                payload: b"hello".to_vec(),
                ..Default::default()
            }),
            ..TimerCommand::new(CommandKind::CreateOnce, "t1", "r1")
        };
        let cron = TimerCommand {
            cron: Some("*/5 * * * * *".into()),
            time_zone: Some("America/New_York".into()),
            ..TimerCommand::new(CommandKind::CreateCron, "t2", "r2")
        };
        for c in [
            once,
            cron,
            TimerCommand::new(CommandKind::Pause, "t3", "r3"),
        ] {
            out.push(
                runtime()
                    .block_on(codec.encode_command(&c, "commands"))
                    .unwrap(),
            );
        }
        out
    })
}

fn decode_and_validate(bytes: &[u8]) {
    let codec = Codec::new(None).unwrap();
    if let Ok(cmd) = runtime().block_on(codec.decode_command(bytes)) {
        let key = cmd.timer_id.clone();
        let _ = validate(
            &cmd,
            Some(key.as_bytes()),
            1_795_000_000_000,
            1_795_000_000_000,
            &Limits::default(),
        );
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
}

fn mutated(seed: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in muts {
        match m {
            Mutation::Flip(i, x) if !b.is_empty() => {
                let n = b.len();
                b[i % n] ^= x;
            }
            Mutation::Truncate(i) => b.truncate(i % (b.len() + 1)),
            Mutation::Insert(i, bytes) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            _ => {}
        }
    }
    b
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

#[test]
fn every_seed_decodes() {
    let codec = Codec::new(None).unwrap();
    for s in seeds() {
        let r = runtime().block_on(codec.decode_command(s));
        assert!(r.is_ok(), "seed {:?}: {r:?}", String::from_utf8_lossy(s));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_and_validate(&bytes);
    }

    #[test]
    fn mutated_seeds_never_panic(
        which in any::<usize>(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        let seeds = seeds();
        let bytes = mutated(&seeds[which % seeds.len()], &muts);
        decode_and_validate(&bytes);
    }
}

/// Numbers around every edge the code has, and anything.
fn extreme() -> impl Strategy<Value = i64> {
    prop_oneof![
        prop::sample::select(vec![
            i64::MIN,
            -1,
            0,
            1,
            59_999,
            1_795_000_000_000,
            MAX_INSTANT_MS - 3_600_000,
            MAX_INSTANT_MS,
            MAX_INSTANT_MS + 1,
            8_210_266_876_799_999 - 3_600_000,
            8_210_266_876_799_999,
            i64::MAX - 1,
            i64::MAX,
        ]),
        any::<i64>(),
    ]
}

fn extreme_command() -> impl Strategy<Value = (TimerCommand, i64, i64)> {
    let kinds = prop::sample::select(vec![
        CommandKind::CreateOnce,
        CommandKind::CreateCron,
        CommandKind::Update,
        CommandKind::Resume,
    ]);
    let crons = prop::sample::select(vec![
        "* * * * * *",
        "0 0 0 29 2 * 2096",
        "59 59 23 31 12 * 2099",
        "0 30 2 * * *",
        "0 0 0 1 1 * 1970",
        "*/1 * * * *",
    ]);
    let zones = prop::sample::select(vec![
        "UTC",
        "America/New_York",
        "Pacific/Kiritimati",
        "Asia/Kolkata",
    ]);
    let opt = || prop::option::of(extreme());
    (
        kinds,
        (opt(), opt(), opt(), opt(), opt()),
        (opt(), opt()),
        prop::option::of(crons),
        zones,
        extreme(),
        extreme(),
    )
        .prop_map(
            |(kind, (at, delay, start, end, max), (every, jitter), cron, zone, ts, now)| {
                let cmd = TimerCommand {
                    at_ms: at,
                    delay_ms: delay,
                    start_ms: start,
                    end_ms: end,
                    max_fires: max,
                    cron: cron.map(str::to_string),
                    time_zone: Some(zone.to_string()),
                    misfire: Some(MisfirePolicy::FireOnce),
                    every_ms: every,
                    jitter_ms: jitter,
                    ..TimerCommand::new(kind, "t", "r")
                };
                (cmd, ts, now)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

    #[test]
    fn extreme_numbers_get_a_reason_or_a_plan(c in extreme_command(), later in extreme()) {
        let (cmd, ts, now) = c;
        let limits = Limits::default();
        if let Ok(Op::Create { schedule: Schedule::Cron { spec, first, .. }, .. }
            | Op::Update { schedule: Schedule::Cron { spec, first, .. }, .. })
            = validate(&cmd, Some(b"t"), ts, now, &limits)
        {
            // What the migrator does later: the next window, from where the last ended.
            let compiled = spec.compile("t", None).expect("validated");
            let _ = compiled.plan(first.covered_ms, later.clamp(0, MAX_INSTANT_MS), spec.misfire, &limits.plan);
        }
    }
}
