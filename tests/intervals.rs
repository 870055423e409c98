//! Interval timers (`every_ms`) and jitter (`jitter_ms`) end to end, against a real
//! broker and Redis: fires on the interval's grid with no drift, a long interval landing
//! exactly, timers over an exclusion calendar, and a thousand jittered cron timers spread over the jitter window, each at
//! the instant the schedule's jitter names, also after Redis was emptied and rebuilt.

mod common;

use common::world::World;
use common::{cron, Collected, Fired, TestEnv};
use ktimer::command::{CommandResult, Outcome, TimerCommand};
use ktimer::now_ms;
use ktimer::schedule::jitter::Jitter;
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// A repeating timer firing every `every_ms` from `start_ms`.
fn every(timer_id: &str, every_ms: i64, start_ms: Option<i64>) -> TimerCommand {
    TimerCommand {
        cron: None,
        every_ms: Some(every_ms),
        start_ms,
        ..cron(timer_id, "", "tick")
    }
}

async fn accepted(env: &TestEnv, got: &mut Collected, cmd: &TimerCommand) -> CommandResult {
    env.send(cmd, None).await;
    let r = got.results(1, WAIT).await.remove(0);
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    r
}

/// Never early, and on time (within `late_ms`).
fn assert_on_time(f: &Fired, late_ms: i64) {
    assert!(f.fired_ms >= f.due_ms, "early: {f:?}");
    assert!(
        f.fired_ms - f.due_ms <= late_ms,
        "{} ms late: {f:?}",
        f.fired_ms - f.due_ms
    );
}

/// 250 ms for 40 fires: fire k is due at exactly anchor + 250 k (no drift from the
/// lateness of the fires before it), none early, each on time; then it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_of_250_ms_fires_40_times_on_its_grid() {
    let env = TestEnv::new("every-250", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let anchor = now_ms() + 2_000;
    let mut cmd = every("i-250", 250, Some(anchor));
    cmd.max_fires = Some(40);
    let r = accepted(&env, &mut got, &cmd).await;
    assert_eq!(r.due_ms, Some(anchor), "the first fire is the anchor");
    // Fires are at least once: a redelivered one (same fire id) is counted, not failed.
    let mut fires: Vec<Fired> = Vec::new();
    let mut copies = 0;
    while fires.len() < 40 {
        let f = got.fires(1, WAIT).await.remove(0);
        match fires.iter().any(|g| g.fire_id == f.fire_id) {
            true => copies += 1,
            false => fires.push(f),
        }
    }
    fires.sort_by_key(|f| f.due_ms);
    for (k, f) in fires.iter().enumerate() {
        assert_eq!(f.timer_id, "i-250");
        assert_eq!(f.due_ms, anchor + 250 * k as i64, "fire {k}");
        assert_on_time(f, 200);
    }
    assert!(copies <= 2, "{copies} fires delivered again");
    // The 41st would be due 250 ms after the 40th: nothing new comes.
    let more = tokio::time::timeout(Duration::from_millis(1_500), got.fired.recv()).await;
    if let Ok(Some(f)) = more {
        assert!(
            fires.iter().any(|g| g.fire_id == f.fire_id),
            "a fire past max_fires: {f:?}"
        );
    }
    svc.stop().await;
}

/// A 36-hour interval anchored 36 hours minus 3 s ago: its next fire is the anchor plus
/// exactly 36 h (the result says so, and it fires then), the one after that 72 h.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_36_hour_interval_lands_exactly() {
    let env = TestEnv::new("every-36h", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let h36 = 36 * 3_600_000;
    let anchor = now_ms() - h36 + 3_000;
    let r = accepted(&env, &mut got, &every("i-36h", h36, Some(anchor))).await;
    assert_eq!(r.due_ms, Some(anchor + h36), "{r:?}");
    let f = got.fires(1, WAIT).await.remove(0);
    assert_eq!(f.due_ms, anchor + h36);
    assert_on_time(&f, 200);
    let spec = ktimer::schedule::CronSpec::every(h36, anchor);
    let next = ktimer::preview::next(&spec, "i-36h", None, f.due_ms, 1).unwrap();
    assert_eq!(
        next[0].due_ms,
        anchor + 2 * h36,
        "the preview of what comes next"
    );
    svc.stop().await;
}

/// A thousand timers on one cron expression (every 20 s, two fires each) with 10 s of
/// jitter: their first fires spread over the ten seconds (each second holds 5 to 15 % of
/// them, no 100 ms more than 3 %), each at the instant `Jitter` names for its id and
/// occurrence; Redis is then emptied, the instance rebuilds from the state topic, and the
/// second fires come at their jittered instants too, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_jittered_timers_spread_and_keep_their_instants_across_a_rebuild() {
    // Servers of its own: the flush must not reach the other tests' timers.
    let w = World::start("jitter", false);
    let env = TestEnv::on(&w.servers(), "jitter", 2, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let ids: Vec<String> = (0..1_000).map(|i| format!("j-{i}")).collect();
    let cmds: Vec<TimerCommand> = ids
        .iter()
        .map(|id| TimerCommand {
            jitter_ms: Some(10_000),
            max_fires: Some(2),
            ..cron(id, "*/20 * * * * *", "j")
        })
        .collect();
    env.send_many(&cmds).await;
    let results = got.results(ids.len(), WAIT).await;
    assert!(results.iter().all(|r| r.outcome == Outcome::Accepted));
    let first = got.fires(ids.len(), 2 * WAIT).await;
    let nominal = first
        .iter()
        .map(|f| f.due_ms / 20_000 * 20_000)
        .min()
        .unwrap();
    check_jittered(&first, nominal);
    let mut per_second = [0usize; 10];
    let mut per_tenth = [0usize; 100];
    for f in &first {
        per_second[((f.due_ms - nominal) / 1_000) as usize] += 1;
        per_tenth[((f.due_ms - nominal) / 100) as usize] += 1;
    }
    assert!(
        per_second.iter().all(|n| (50..=150).contains(n)),
        "{per_second:?}"
    );
    assert!(per_tenth.iter().all(|n| *n <= 30), "{per_tenth:?}");

    // Every first fire is in a checkpoint (else a rebuild may fire it again: the bound
    // the state topic promises), then Redis loses everything.
    let last = first.iter().map(|f| f.due_ms).max().unwrap();
    env.checkpointed_through(&[0, 1], last, WAIT).await;
    w.redis.flushall().await;
    let second = got.fires(ids.len(), 3 * WAIT).await;
    check_jittered(&second, nominal + 20_000);
    let replays = svc.metric("ktimer_redis_replays_total").unwrap_or(0.0);
    assert!(
        replays >= 1.0,
        "the flush reached the rebuild: {replays} replays"
    );
    let extra = tokio::time::timeout(Duration::from_secs(3), got.fired.recv()).await;
    assert!(extra.is_err(), "a duplicate or a third fire: {extra:?}");
    svc.stop().await;
}

/// Every timer fired once, due at its occurrence `nominal` jittered for its id, not early.
fn check_jittered(fires: &[Fired], nominal: i64) {
    let mut by_id: HashMap<&str, &Fired> = HashMap::new();
    for f in fires {
        assert!(by_id.insert(&f.timer_id, f).is_none(), "twice: {f:?}");
        let j = Jitter::new(&f.timer_id, Some(10_000)).unwrap().unwrap();
        assert_eq!(f.due_ms, j.at(nominal), "{f:?}");
        assert!(f.fired_ms >= f.due_ms, "early: {f:?}");
    }
}

/// UTC wall-clock text of `ms` (whole seconds), as a calendar's range takes it.
fn local(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// Two interval timers (every 250 ms) over a calendar of the applications file that
/// excludes one second of their grid: the skipping one fires around it (none due inside),
/// the deferring one fires the excluded occurrences once, at the end of the exclusion; a
/// timer naming a calendar the file does not define is rejected with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_timers_over_a_calendar_skip_or_defer_what_it_excludes() {
    // Far enough ahead that the instance is up and the commands applied before it.
    let anchor = (now_ms() / 1_000 + 12) * 1_000;
    let (from, to) = (anchor + 1_000, anchor + 2_000);
    let file = std::env::temp_dir().join(format!("{}.toml", common::unique("calendars")));
    let toml = format!(
        "[calendars.quiet]\nranges = [[\"{}\", \"{}\"]]\n",
        local(from),
        local(to)
    );
    std::fs::write(&file, toml).unwrap();
    let env = TestEnv::new("calendar", 1, &["--applications", file.to_str().unwrap()]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let over = |id: &str, policy, max| TimerCommand {
        calendar: Some("quiet".into()),
        calendar_policy: policy,
        max_fires: Some(max),
        ..every(id, 250, Some(anchor))
    };
    accepted(&env, &mut got, &over("cal-skip", None, 8)).await;
    assert!(
        now_ms() < anchor,
        "applied after the anchor: start the test earlier"
    );
    let defer = Some(ktimer::command::CalendarPolicy::Defer);
    accepted(&env, &mut got, &over("cal-defer", defer, 6)).await;
    let unknown = TimerCommand {
        calendar: Some("nowhere".into()),
        ..over("cal-unknown", None, 1)
    };
    env.send(&unknown, None).await;
    let r = got.results(1, WAIT).await.remove(0);
    assert_eq!(r.outcome, Outcome::Rejected, "{r:?}");
    assert!(r
        .reason
        .unwrap_or_default()
        .contains("unknown calendar \"nowhere\""));

    let fires = got.fires(14, WAIT).await;
    let dues = |id: &str| -> Vec<i64> {
        let mut d: Vec<i64> = fires
            .iter()
            .filter(|f| f.timer_id == id)
            .map(|f| f.due_ms - anchor)
            .collect();
        d.sort_unstable();
        d
    };
    for f in &fires {
        assert_on_time(f, 200);
    }
    let skip = [0, 250, 500, 750, 2_000, 2_250, 2_500, 2_750];
    assert_eq!(dues("cal-skip"), skip);
    assert_eq!(dues("cal-defer"), [0, 250, 500, 750, 2_000, 2_250]);
    svc.stop().await;
    let _ = std::fs::remove_file(file);
}
