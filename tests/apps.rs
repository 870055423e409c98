//! Per-application limits (`--applications`): one application's flood is delivered at its
//! limit without delaying another's fires; intake over a limit is rejected with the limit
//! in the reason; the file is read again on SIGHUP.
//!
//! The tests run one at a time ([`common::serial`]): the flood's promise is a lateness
//! bound for the other application, measured without neighbours on the two cores.

mod common;

use common::checker::sleep_until;
use common::child::ChildProcess;
use common::{once_at, TestEnv};
use ktimer::command::{Outcome, TimerCommand};
use ktimer::now_ms;
use std::collections::HashMap;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

fn apps_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("ktimer-apps-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn of(app: &str, mut c: TimerCommand) -> TimerCommand {
    c.application = app.into();
    c
}

/// The promise: while application `flood`'s 20,000 fires of one second drain at its limit
/// (2,000/s, about 10 s), application `quiet`'s fires, one every 100 ms, each go within
/// 50 ms of due. Measured alone ([`common::serial`]): beside four other tests on two
/// cores, CI saw 51 and 143 ms, the machine's share and not the pacing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_delivered_at_its_limit_and_another_application_fires_on_time() {
    let _alone = common::serial().await;
    let file = apps_file("flood", "[applications.flood]\nfires_per_second = 2000\n");
    let env = TestEnv::new("flood", 2, &["--applications", &file]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let t = now_ms() + 15_000;
    let mut due = HashMap::new();
    let mut cmds = Vec::new();
    for i in 0..20_000 {
        let id = format!("a-{i}");
        let at = t + (i * 7919) % 1_000; // the same second, scattered
        due.insert(id.clone(), at);
        cmds.push(of("flood", once_at(&id, at, "")));
    }
    for i in 0..100 {
        let id = format!("b-{i}");
        let at = t + i * 100; // one every 100 ms while the flood is delivered
        due.insert(id.clone(), at);
        cmds.push(of("quiet", once_at(&id, at, "")));
    }
    cmds.sort_by_key(|c| c.at_ms);
    env.send_many(&cmds).await;
    let results = got.results(cmds.len(), MIN).await;
    assert!(results.iter().all(|r| r.outcome == Outcome::Accepted));
    assert!(now_ms() < t, "all accepted before the first due time");
    sleep_until(t).await;

    let fires = got.fires(cmds.len(), MIN).await;
    let (mut a, mut b): (Vec<_>, Vec<_>) = fires.iter().partition(|f| f.timer_id.starts_with("a-"));
    assert_eq!((a.len(), b.len()), (20_000, 100), "each fired once");
    for f in &fires {
        assert!(f.fired_ms >= due[&f.timer_id], "{} fired early", f.timer_id);
    }
    // The flood goes at its limit: 20,000 fires at 2,000/s take about 10 s.
    a.sort_by_key(|f| f.fired_ms);
    let span_s = (a[a.len() - 1].fired_ms - a[0].fired_ms) as f64 / 1000.0;
    let rate = (a.len() - 1) as f64 / span_s;
    println!("flood: 20000 fires over {span_s:.2} s = {rate:.0}/s");
    assert!(
        (1_700.0..=2_150.0).contains(&rate),
        "flood delivered at {rate:.0}/s, limit 2000/s"
    );
    // The other application's fires, due while the flood drains, are on time.
    b.sort_by_key(|f| f.fired_ms - f.due_ms);
    let worst = b[b.len() - 1];
    let late: Vec<i64> = b.iter().map(|f| f.fired_ms - f.due_ms).collect();
    println!("quiet: lateness p50 {} ms, max {} ms", late[50], late[99]);
    assert!(
        worst.fired_ms - worst.due_ms <= 50,
        "{} fired {} ms late during the flood",
        worst.timer_id,
        worst.fired_ms - worst.due_ms
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_over_the_intake_limit_are_rejected_with_the_limit() {
    let _alone = common::serial().await;
    let file = apps_file(
        "chatty",
        "[applications.chatty]\ncommands_per_second = 50\n",
    );
    let env = TestEnv::new("chatty", 1, &["--applications", &file]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let at = now_ms() + 600_000;
    let mut cmds: Vec<TimerCommand> = (0..300)
        .map(|i| of("chatty", once_at(&format!("c-{i}"), at, "")))
        .collect();
    cmds.extend((0..100).map(|i| of("calm", once_at(&format!("k-{i}"), at, ""))));
    let started = now_ms();
    env.send_many(&cmds).await;
    let sent_s = (now_ms() - started) as f64 / 1000.0;
    let results = got.results(cmds.len(), MIN).await;
    let chatty: Vec<_> = results
        .iter()
        .filter(|r| r.application.as_deref() == Some("chatty"))
        .collect();
    let accepted = chatty
        .iter()
        .filter(|r| r.outcome == Outcome::Accepted)
        .count();
    // A second's worth at once, then 50/s for as long as the producer took.
    let most = 50 + (sent_s * 50.0).ceil() as usize + 1;
    println!("chatty: {accepted} of 300 accepted (sent in {sent_s:.2} s)");
    assert!(
        (50..=most).contains(&accepted),
        "{accepted} accepted, expected 50..={most}"
    );
    for r in chatty.iter().filter(|r| r.outcome != Outcome::Accepted) {
        assert_eq!(r.outcome, Outcome::Rejected);
        let why = r.reason.as_deref().unwrap_or_default();
        assert!(why.contains("at most 50 commands per second"), "{why}");
    }
    let calm = results
        .iter()
        .filter(|r| r.application.as_deref() == Some("calm"));
    assert!(
        calm.clone().count() == 100 && calm.into_iter().all(|r| r.outcome == Outcome::Accepted)
    );
    svc.stop().await;
}

/// An application limited to 100 commands/s sends 10 commands, then 10 more from a
/// producer whose clock is 5 s behind: 20 in a second, all accepted (the skewed ones
/// were rejected as a burst from the past).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_clock_is_behind_is_not_rate_limited_for_it() {
    let _alone = common::serial().await;
    let file = apps_file(
        "skewed",
        "[applications.skewed]\ncommands_per_second = 100\n",
    );
    let env = TestEnv::new("skewed", 1, &["--applications", &file]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let at = now_ms() + 600_000;
    let batch = |from: usize| -> Vec<TimerCommand> {
        (from..from + 10)
            .map(|i| of("skewed", once_at(&format!("s-{i}"), at, "")))
            .collect()
    };
    env.send_many(&batch(0)).await;
    got.results(10, MIN).await;
    env.send_many_at(&batch(10), Some(now_ms() - 5_000)).await;
    let results = got.results(10, MIN).await;
    let rejected: Vec<_> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Accepted)
        .map(|r| r.reason.clone())
        .collect();
    assert!(
        rejected.is_empty(),
        "{} rejected: {rejected:?}",
        rejected.len()
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_file_is_read_again_on_sighup() {
    let _alone = common::serial().await;
    let file = apps_file("hup", "[applications.x]\ncallbacks = [\"nowhere.*\"]\n");
    let env = TestEnv::new("hup", 1, &["--applications", &file]).await;
    let cb = format!("{}.cb", env.name);
    let spec = ktimer::topics::TopicSpec {
        role: "test".into(),
        name: cb.clone(),
        partitions: 1,
        replication_factor: 1,
        configs: Default::default(),
    };
    ktimer::topics::apply(&ktimer::kafka::client(&env.args.kafka), &[spec])
        .await
        .unwrap();
    let mut got = env.collect();
    let dir = std::env::temp_dir().join(format!("ktimer-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("ktimer.log");
    let child = ChildProcess::spawn(&env, &[], &log);
    child.ready(MIN).await;
    let to_cb = |id: &str| {
        let mut c = of("x", once_at(id, now_ms() + 600_000, ""));
        c.callback.as_mut().unwrap().topic = Some(cb.clone());
        c
    };
    env.send(&to_cb("before"), None).await;
    let r = got.results(1, MIN).await.remove(0);
    assert_eq!(r.outcome, Outcome::Rejected, "{r:?}");
    assert!(r.reason.unwrap().contains("allow-list"));

    std::fs::write(&file, format!("[applications.x]\ncallbacks = [\"{cb}\"]\n")).unwrap();
    common::world::signal(child.pid(), libc::SIGHUP);
    let deadline = tokio::time::Instant::now() + MIN;
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("applications file reloaded")
    {
        assert!(tokio::time::Instant::now() < deadline, "no reload logged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.send(&to_cb("after"), None).await;
    let r = got.results(1, MIN).await.remove(0);
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");

    // A file that does not parse is refused; the settings in force stay.
    std::fs::write(&file, "[applications.x\n").unwrap();
    common::world::signal(child.pid(), libc::SIGHUP);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("not reloaded")
    {
        assert!(tokio::time::Instant::now() < deadline, "no refusal logged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.send(&to_cb("still"), None).await;
    let r = got.results(1, MIN).await.remove(0);
    assert_eq!(r.outcome, Outcome::Accepted, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_at_its_pending_limit_is_rejected_until_timers_are_done() {
    let _alone = common::serial().await;
    let file = apps_file("full", "[applications.full]\nmax_pending = 20\n");
    let env = TestEnv::new("full", 1, &["--applications", &file]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let far = now_ms() + 600_000;
    let soon = now_ms() + 3_000;
    // 5 due soon and 15 far: the limit; 5 more over it; another application is not limited.
    let mut cmds: Vec<TimerCommand> = (0..25)
        .map(|i| {
            of(
                "full",
                once_at(&format!("f-{i}"), if i < 5 { soon } else { far }, ""),
            )
        })
        .collect();
    cmds.push(of("other", once_at("o-1", far, "")));
    env.send_many(&cmds).await;
    let rs = got.results(cmds.len(), MIN).await;
    let outcome = |id: &str| {
        rs.iter()
            .find(|r| r.timer_id.as_deref() == Some(id))
            .unwrap()
    };
    for i in 0..20 {
        assert_eq!(outcome(&format!("f-{i}")).outcome, Outcome::Accepted);
    }
    for i in 20..25 {
        let r = outcome(&format!("f-{i}"));
        assert_eq!(r.outcome, Outcome::Rejected);
        assert!(
            r.reason.as_deref().unwrap().contains("pending timer limit"),
            "{r:?}"
        );
    }
    assert_eq!(outcome("o-1").outcome, Outcome::Accepted);

    // Cancelled and fired timers no longer count.
    env.send_many(
        &(5..8)
            .map(|i| of("full", common::cancel(&format!("f-{i}"))))
            .collect::<Vec<_>>(),
    )
    .await;
    assert!(got
        .results(3, MIN)
        .await
        .iter()
        .all(|r| r.outcome == Outcome::Accepted));
    assert_eq!(got.fires(5, MIN).await.len(), 5);
    let key =
        ktimer::store::Keys::new(&env.args.redis_prefix, &env.args.kafka.commands_topic, 0).apps();
    let client = redis::Client::open(common::servers().redis_url.as_str()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let deadline = tokio::time::Instant::now() + MIN;
    loop {
        // The fires' acknowledgement reaches Redis shortly after the records arrive.
        let n: Option<i64> = redis::cmd("HGET")
            .arg(&key)
            .arg("full")
            .query_async(&mut c)
            .await
            .unwrap();
        if n == Some(12) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "live count {n:?}, expected 12"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let more: Vec<TimerCommand> = (30..39)
        .map(|i| of("full", once_at(&format!("f-{i}"), far, "")))
        .collect();
    env.send_many(&more).await;
    let rs = got.results(more.len(), MIN).await;
    let accepted = rs.iter().filter(|r| r.outcome == Outcome::Accepted).count();
    assert_eq!(accepted, 8, "room for 8 again: {rs:?}");
    svc.stop().await;
}
