//! Hostile input against a running `ktimer run` process (issue 12): generated commands of
//! every kind with extreme numbers, huge and odd strings, other applications' ids,
//! foreign keys and plain garbage. The process stays up, every record gets a result, and
//! a normal timer sent afterwards fires on time. `KTIMER_HOSTILE_COMMANDS` sets how many
//! (default 10,000; the closing note of issue 12 quotes a run of 100,000).

mod common;

use common::child::ChildProcess;
use common::{once_at, TestEnv};
use ktimer::command::{Callback, CommandKind, DeliveryMode, MisfirePolicy, TimerCommand};
use ktimer::now_ms;
use rdkafka::producer::FutureRecord;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// splitmix64: a reproducible stream of numbers (the seed is printed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn number(r: &mut Rng, now: i64) -> Option<i64> {
    let edges = [
        i64::MIN,
        -1,
        0,
        1,
        now + 3_600_000,
        now + 86_400_000,
        253_402_300_799_999,
        253_402_300_800_000,
        8_210_266_876_799_999,
        i64::MAX,
    ];
    match r.below(4) {
        0 => None,
        1 => Some(r.next() as i64),
        _ => Some(*r.pick(&edges)),
    }
}

fn text(r: &mut Rng, pool: &[&str]) -> String {
    match r.below(20) {
        0 => "x".repeat(300 + r.below(70_000)),
        1 => "\u{0}\u{7}ctrl\u{1b}[31m".into(),
        2 => "😀€ü\u{202e}".repeat(1 + r.below(40)),
        3 => String::new(),
        _ => r.pick(pool).to_string(),
    }
}

fn command(r: &mut Rng, env: &TestEnv, now: i64) -> TimerCommand {
    let kinds = [
        CommandKind::CreateOnce,
        CommandKind::CreateCron,
        CommandKind::Pause,
        CommandKind::Resume,
        CommandKind::Update,
        CommandKind::Cancel,
    ];
    let ids: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let k = &env.args.kafka;
    let topics = [
        None,
        Some(k.fired_topic.clone()),
        Some(k.results_topic.clone()),
        Some(k.commands_topic.clone()),
        Some("no-such-topic".to_string()),
        Some("bad topic!".to_string()),
    ];
    let callback = r.chance(80).then(|| Callback {
        topic: r.pick(&topics).clone(),
        key: r.chance(10).then(|| vec![0xff; r.below(10_000)]),
        headers: (0..*r.pick(&[0usize, 1, 3, 100]))
            .map(|i| (format!("h{i}"), text(r, &["v"])))
            .collect(),
        payload: vec![b'p'; *r.pick(&[0usize, 10, 1_000, 600_000])],
        mode: *r.pick(&[DeliveryMode::Envelope, DeliveryMode::Raw]),
    });
    TimerCommand {
        application: text(r, &["a", "b", "c"]),
        at_ms: number(r, now),
        delay_ms: number(r, now),
        cron: r.chance(50).then(|| {
            r.pick(&[
                "* * * * * *",
                "0 0 0 29 2 * 2096",
                "61 * * * * *",
                "0 */5 * * * *",
                "@hourly",
            ])
            .to_string()
        }),
        time_zone: r
            .chance(30)
            .then(|| text(r, &["UTC", "Europe/Berlin", "Mars/Olympus"])),
        start_ms: number(r, now),
        end_ms: number(r, now),
        max_fires: number(r, now),
        misfire: r
            .chance(30)
            .then(|| *r.pick(&[MisfirePolicy::FireOnce, MisfirePolicy::Skip])),
        callback,
        ..TimerCommand::new(*r.pick(&kinds), &text(r, &id_refs), &text(r, &["r"]))
    }
}

/// One record: mostly Avro commands, some JSON, some garbage; keys mostly the timer id.
async fn record(
    r: &mut Rng,
    env: &TestEnv,
    codec: &ktimer::codec::Codec,
) -> (Option<Vec<u8>>, Vec<u8>) {
    let now = now_ms();
    let cmd = command(r, env, now);
    let value = match r.below(20) {
        0 => (0..r.below(200)).map(|_| r.next() as u8).collect(),
        1 => serde_json::to_vec(&cmd).unwrap_or_default(),
        2 => b"{\"kind\":\"CANCEL\",\"timer_id\":".to_vec(),
        _ => codec.encode_command(&cmd, "x").await.expect("encodable"),
    };
    let key = match r.below(20) {
        0 => None,
        1 => Some(vec![b'k'; 100_000]),
        2 => Some(b"other".to_vec()),
        _ => Some(cmd.timer_id.into_bytes()),
    };
    // The broker's own limit (1 MB) is not what is under test: oversized records shrink.
    let size = value.len() + key.as_ref().map_or(0, Vec::len);
    let value = if size > 900_000 {
        value[..1_000].to_vec()
    } else {
        value
    };
    (key, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_hostile_commands_all_get_a_result_and_the_service_stays_up() {
    let n: usize = std::env::var("KTIMER_HOSTILE_COMMANDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let env = TestEnv::new("hostile", 2, &["--max-payload-bytes", "700000"]).await;
    let mut got = env.collect();
    let log = std::env::temp_dir().join(format!("{}.log", env.name));
    let mut child = ChildProcess::spawn(&env, &[], &log);
    child.ready(Duration::from_secs(30)).await;
    // KTIMER_HOSTILE_SEED replays a run; the seed also goes to a file, which a run that
    // hangs (its printed output held back by the test harness) keeps.
    let seed = std::env::var("KTIMER_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(now_ms() as u64);
    println!("seed {seed}, {n} records");
    let seed_file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-seed.txt");
    let _ = std::fs::write(&seed_file, format!("{seed}\n"));
    let mut rng = Rng(seed);
    let codec = ktimer::codec::Codec::new(None).unwrap();
    let topic = env.args.kafka.commands_topic.clone();
    let started = Instant::now();
    for chunk_start in (0..n).step_by(1_000) {
        let mut recs = Vec::new();
        for _ in chunk_start..n.min(chunk_start + 1_000) {
            recs.push(record(&mut rng, &env, &codec).await);
        }
        let sends = recs.iter().map(|(k, v)| {
            let mut rec = FutureRecord::<[u8], [u8]>::to(&topic).payload(v);
            if let Some(k) = k {
                rec = rec.key(k);
            }
            env.producer.send(rec, Duration::from_secs(60))
        });
        for r in futures::future::join_all(sends).await {
            r.map_err(|(e, _)| e).expect("produce");
        }
    }
    let results = got.results(n, Duration::from_secs(600)).await;
    let took = started.elapsed();
    let answered: HashSet<(i32, i64)> = results.iter().map(|r| (r.partition, r.offset)).collect();
    println!(
        "{n} records answered in {:.1} s ({} distinct results)",
        took.as_secs_f64(),
        answered.len()
    );
    assert!(child.alive(), "the process is still up");
    let due = now_ms() + 1_500;
    env.send(&once_at("normal", due, "fine"), None).await;
    let fires = got.fires_until("normal", Duration::from_secs(60)).await;
    let f = fires.last().unwrap();
    assert!(
        f.received_ms >= due && f.received_ms < due + 2_000,
        "on time: {}",
        f.received_ms - due
    );
    assert!(child.alive());
}

/// A cron schedule with no occurrence left (a past year), as a create and as the update of
/// a one-shot timer: each is answered with a reason, and the partition goes on. (The
/// generated commands above once made a batch fail in Redis on every retry, `arithmetic on
/// a nil value` in `rec_put`, a cron timer stored without a next occurrence, and the whole
/// intake stalled; `place.lua` and `apply.lua` now store such a timer without a due. That
/// run's seed was not kept, and this command is refused before Redis.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_with_no_occurrence_left_does_not_stop_the_partition() {
    let env = TestEnv::new("nocron", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    env.send(&once_at("u", now_ms() + 3_600_000, "x"), None)
        .await;
    got.results(1, Duration::from_secs(60)).await;
    let past = "0 0 0 1 1 * 2020";
    env.send(&common::cron("gone", past, "x"), None).await;
    let mut update = common::cron("u", past, "x");
    update.kind = CommandKind::Update;
    update.request_id = "update-u".into();
    env.send(&update, None).await;
    env.send(&once_at("normal", now_ms() + 1_000, "x"), None)
        .await;
    let rs = got.results(3, Duration::from_secs(60)).await;
    println!("{rs:?}");
    let fires = got.fires_until("normal", Duration::from_secs(60)).await;
    assert!(fires.iter().all(|f| f.timer_id == "normal"), "{fires:?}");
    svc.stop().await;
}
