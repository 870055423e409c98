//! End-to-end tests of cron timers and the timer lifecycle against a real broker and Redis.
//!
//! Topics have one partition, so a one-shot "sentinel" timer in that partition marks a
//! point in the trigger's time: once it fired, every fire due before it was produced.

mod common;

use common::{cron, lifecycle, once_at, Collected, Fired, TestEnv};
use ktimer::command::{CommandKind, CommandResult, MisfirePolicy, Outcome, TimerCommand};
use ktimer::now_ms;
use std::collections::HashMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// Sends `cmd` and returns its result.
async fn command(env: &TestEnv, got: &mut Collected, cmd: &TimerCommand) -> CommandResult {
    env.send(cmd, None).await;
    got.results(1, WAIT).await.remove(0)
}

/// Fires a sentinel `after_ms` from now and returns every fire received until it fired.
async fn until_sentinel(
    env: &TestEnv,
    got: &mut Collected,
    name: &str,
    after_ms: i64,
) -> Vec<Fired> {
    let id = format!("sentinel-{name}");
    let r = command(env, got, &once_at(&id, now_ms() + after_ms, "")).await;
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    let mut fires = got.fires_until(&id, WAIT).await;
    fires.pop();
    fires
}

/// Receives fires until `n` of them satisfy `wanted`; returns all received.
async fn fires_matching(
    got: &mut Collected,
    n: usize,
    wanted: impl Fn(&Fired) -> bool,
) -> Vec<Fired> {
    let mut all = Vec::new();
    while all.iter().filter(|f| wanted(f)).count() < n {
        all.extend(got.fires(1, WAIT).await);
    }
    all
}

/// Never early; and within 100 ms unless it fell due before its command was applied at
/// `applied_ms` (an occurrence at or after the record's timestamp may precede the apply).
fn assert_on_time(f: &Fired, applied_ms: i64) {
    assert!(
        f.fired_ms >= f.due_ms,
        "{} fired {} ms early",
        f.fire_id,
        f.due_ms - f.fired_ms
    );
    assert!(
        f.received_ms >= f.due_ms,
        "{} received before due",
        f.fire_id
    );
    assert!(
        f.due_ms <= applied_ms || f.fired_ms - f.due_ms <= 100,
        "{} fired {} ms late",
        f.fire_id,
        f.fired_ms - f.due_ms
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_timer_fires_on_schedule_for_several_periods() {
    let env = TestEnv::new("cron-2s", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let r = command(&env, &mut got, &cron("c-2s", "*/2 * * * * *", "tick")).await;
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    assert_eq!(r.state.as_deref(), Some("SCHEDULED"));
    let first = r.due_ms.expect("first occurrence");
    assert_eq!(first % 2_000, 0, "on an even second");
    let fires = got.fires(4, WAIT).await;
    for (i, f) in fires.iter().enumerate() {
        assert_eq!(f.due_ms, first + 2_000 * i as i64, "{fires:?}");
        assert_eq!(f.version(), r.version.unwrap());
        assert_eq!(f.payload, b"tick");
        assert_on_time(f, r.processed_at_ms);
    }

    // max_fires ends the timer: two fires, then nothing.
    let limited = TimerCommand {
        max_fires: Some(2),
        ..cron("c-max", "* * * * * *", "max")
    };
    let r = command(&env, &mut got, &limited).await;
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    let fires = until_sentinel(&env, &mut got, "max", 4_500).await;
    let n = fires.iter().filter(|f| f.timer_id == "c-max").count();
    assert_eq!(n, 2, "{fires:?}");
    let again = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Pause, "c-max", "pause"),
    )
    .await;
    assert_eq!(again.state.as_deref(), Some("COMPLETED"), "{again:?}");
    svc.stop().await;
}

/// `ktimer next` (the preview) names the instants the trigger then fires: a cron timer in
/// a zone of its own, from a start a few seconds ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_names_the_instants_the_timer_then_fires() {
    let env = TestEnv::new("cron-preview", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let start = now_ms() + 3_000;
    let cmd = TimerCommand {
        time_zone: Some("Asia/Kolkata".into()),
        start_ms: Some(start),
        ..cron("c-preview", "*/2 * * * * *", "tick")
    };
    let spec = ktimer::schedule::CronSpec {
        start_ms: Some(start),
        ..ktimer::schedule::CronSpec::new("*/2 * * * * *", "Asia/Kolkata")
    };
    let preview: Vec<i64> = ktimer::preview::next(&spec, "c-preview", None, start - 1, 3)
        .unwrap()
        .iter()
        .map(|d| d.due_ms)
        .collect();
    let r = command(&env, &mut got, &cmd).await;
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    let fired: Vec<i64> = got.fires(3, WAIT).await.iter().map(|f| f.due_ms).collect();
    assert_eq!(fired, preview);
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_fires_and_resume_restarts_them() {
    let env = TestEnv::new("cron-pause", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let id = "c-pause";
    let created = command(&env, &mut got, &cron(id, "* * * * * *", "x")).await;
    assert_eq!(created.outcome, Outcome::Accepted, "{created:?}");
    got.fires(2, WAIT).await;

    let paused = command(&env, &mut got, &lifecycle(CommandKind::Pause, id, "pause")).await;
    assert_eq!(
        (paused.outcome, paused.state.as_deref()),
        (Outcome::Accepted, Some("PAUSED"))
    );
    assert!(paused.version > created.version);
    let again = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Pause, id, "pause-again"),
    )
    .await;
    assert_eq!(again.outcome, Outcome::Duplicate, "{again:?}");
    // Three occurrences fall due while paused: none fires.
    for f in until_sentinel(&env, &mut got, "pause", 3_000).await {
        assert!(
            f.fired_ms <= paused.processed_at_ms,
            "fired while paused: {f:?}"
        );
    }

    let resumed = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Resume, id, "resume"),
    )
    .await;
    assert_eq!(
        (resumed.outcome, resumed.state.as_deref()),
        (Outcome::Accepted, Some("SCHEDULED"))
    );
    let v = resumed.version.unwrap();
    let after = fires_matching(&mut got, 2, |f| f.version() == v).await;
    for f in &after {
        assert_eq!(f.version(), v, "only the resumed version fires: {after:?}");
        assert!(
            f.due_ms >= resumed.processed_at_ms - 1_000,
            "occurrences from the resume on"
        );
        assert_on_time(f, resumed.processed_at_ms);
    }
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_switches_schedule_with_no_fire_of_the_old_version_afterwards() {
    let env = TestEnv::new("cron-update", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let id = "c-update";
    let created = command(&env, &mut got, &cron(id, "* * * * * *", "old")).await;
    got.fires(2, WAIT).await;
    let update = TimerCommand {
        kind: CommandKind::Update,
        request_id: "update-1".into(),
        ..cron(id, "*/3 * * * * *", "new")
    };
    let updated = command(&env, &mut got, &update).await;
    assert_eq!(updated.outcome, Outcome::Accepted, "{updated:?}");
    let (v_old, v_new) = (created.version.unwrap(), updated.version.unwrap());
    assert!(v_new > v_old);
    let fires = fires_matching(&mut got, 3, |f| f.version() == v_new).await;
    for f in &fires {
        if f.version() == v_old {
            assert!(
                f.fired_ms <= updated.processed_at_ms,
                "old version fired after the update: {f:?}"
            );
            assert_eq!(f.payload, b"old");
        } else {
            assert_eq!(f.version(), v_new);
            assert_eq!(f.due_ms % 3_000, 0, "new schedule: every 3 s");
            assert_eq!(f.payload, b"new");
            assert_on_time(f, updated.processed_at_ms);
        }
    }

    // One-shot timers take updates too: the new due time replaces the old one.
    let t = "o-update";
    let old_due = now_ms() + 3_000;
    command(&env, &mut got, &once_at(t, old_due, "old")).await;
    let new_due = now_ms() + 1_000;
    let moved = TimerCommand {
        kind: CommandKind::Update,
        request_id: "update-2".into(),
        ..once_at(t, new_due, "new")
    };
    let r = command(&env, &mut got, &moved).await;
    assert_eq!(
        (r.outcome, r.due_ms),
        (Outcome::Accepted, Some(new_due)),
        "{r:?}"
    );
    let fires = until_sentinel(&env, &mut got, "once", old_due - now_ms() + 500).await;
    let mine: Vec<_> = fires.iter().filter(|f| f.timer_id == t).collect();
    assert_eq!(mine.len(), 1, "{fires:?}");
    assert_eq!(
        (mine[0].due_ms, mine[0].version()),
        (new_due, r.version.unwrap())
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_cron_timer() {
    let env = TestEnv::new("cron-cancel", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let id = "c-cancel";
    command(&env, &mut got, &cron(id, "* * * * * *", "x")).await;
    got.fires(2, WAIT).await;
    let c = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Cancel, id, "cancel"),
    )
    .await;
    assert_eq!(
        (c.outcome, c.state.as_deref()),
        (Outcome::Accepted, Some("CANCELLED"))
    );
    for f in until_sentinel(&env, &mut got, "cancel", 3_000).await {
        assert!(f.fired_ms <= c.processed_at_ms, "fired after cancel: {f:?}");
    }
    let again = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Cancel, id, "cancel-again"),
    )
    .await;
    assert_eq!(again.outcome, Outcome::Duplicate, "{again:?}");
    let resume = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Resume, id, "resume"),
    )
    .await;
    assert_eq!(resume.outcome, Outcome::Rejected, "{resume:?}");
    let unknown = command(
        &env,
        &mut got,
        &lifecycle(CommandKind::Pause, "nope", "pause"),
    )
    .await;
    assert_eq!(
        (unknown.outcome, unknown.reason.as_deref()),
        (Outcome::Rejected, Some("unknown timer"))
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_policies_after_downtime() {
    let env = TestEnv::new("cron-misfire", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let policies = [
        ("m-all", MisfirePolicy::FireAll),
        ("m-once", MisfirePolicy::FireOnce),
        ("m-skip", MisfirePolicy::Skip),
    ];
    for (id, p) in policies {
        let cmd = TimerCommand {
            misfire: Some(p),
            ..cron(id, "* * * * * *", id)
        };
        let r = command(&env, &mut got, &cmd).await;
        assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
    }
    let mut fires = Vec::new();
    while policies
        .iter()
        .any(|(id, _)| !fires.iter().any(|f: &Fired| &f.timer_id == id))
    {
        fires.extend(got.fires(1, WAIT).await);
    }
    svc.stop().await;
    let stopped = now_ms();
    // The outage: several occurrences of every timer fall due while nobody owns the partition.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let svc = env.start().await;
    let on_time = |f: &Fired| f.fired_ms > stopped && f.fired_ms - f.due_ms < 500;
    let enough = |fs: &[Fired]| {
        policies.iter().all(|(id, _)| {
            fs.iter()
                .filter(|f| &f.timer_id == id && on_time(f))
                .count()
                >= 2
        })
    };
    while !enough(&fires) {
        fires.extend(got.fires(1, WAIT).await);
    }
    svc.stop().await;

    let mut by_timer: HashMap<&str, Vec<&Fired>> = HashMap::new();
    for f in &fires {
        assert!(f.fired_ms >= f.due_ms, "early: {f:?}");
        by_timer.entry(f.timer_id.as_str()).or_default().push(f);
    }
    let threshold = 1_000 + 100;
    for (id, policy) in policies {
        let mut fs = by_timer.remove(id).unwrap();
        fs.sort_by_key(|f| f.due_ms);
        let dues: Vec<i64> = fs.iter().map(|f| f.due_ms).collect();
        let mut unique = dues.clone();
        unique.dedup();
        assert_eq!(unique, dues, "{id}: no duplicates after a graceful stop");
        let late = fs
            .iter()
            .filter(|f| f.fired_ms - f.due_ms > threshold)
            .count();
        match policy {
            MisfirePolicy::FireAll => {
                assert!(
                    dues.windows(2).all(|w| w[1] - w[0] == 1_000),
                    "{id}: every occurrence fired: {dues:?}"
                );
                assert!(
                    late >= 3,
                    "{id}: the missed occurrences fired late ({late})"
                );
                assert!(
                    fs.windows(2).all(|w| w[0].fired_ms <= w[1].fired_ms),
                    "{id}: in due order"
                );
            }
            MisfirePolicy::FireOnce => {
                assert_eq!(late, 1, "{id}: one late fire for the outage: {dues:?}");
                assert!(
                    dues.windows(2).any(|w| w[1] - w[0] >= 3_000),
                    "{id}: the other missed were dropped"
                );
            }
            MisfirePolicy::Skip => {
                assert_eq!(late, 0, "{id}: missed occurrences are dropped");
                assert!(
                    dues.windows(2).any(|w| w[1] - w[0] >= 3_000),
                    "{id}: {dues:?}"
                );
            }
        }
    }
}
