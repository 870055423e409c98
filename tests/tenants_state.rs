//! Bound applications and the state topic: Redis emptied rebuilds each lane (the
//! shared topic and every bound application's) from its own state topic.

mod common;

use common::bound::*;
use common::world::World;
use common::{Collected, Fired};
use ktimer::command::{CommandKind, Outcome, TimerCommand};
use ktimer::now_ms;

/// The timers each lane holds when Redis is emptied, the same ids in every lane, each
/// delivering `APP-ID`: `f` fired, `s` scheduled, `p` paused, `c` cancelled (one-shot,
/// due at `due` unless fired), `tick` a cron timer firing every second, `done` a cron
/// timer completed after two fires.
fn timers(app: &str, fired_due: i64, due: i64) -> Vec<TimerCommand> {
    let once = |id: &str, at: i64| {
        let req = format!("{app}-{id}");
        cmd(app, CommandKind::CreateOnce, id, &req, Some(at), &req)
    };
    let every_second = |id: &str, max: Option<i64>| {
        let mut c = common::cron(id, "* * * * * *", &format!("{app}-{id}"));
        c.application = app.into();
        c.max_fires = max;
        c
    };
    let act = |kind, id: &str, tag: &str| cmd(app, kind, id, &format!("{app}-{tag}"), None, "");
    vec![
        once("f", fired_due),
        once("s", due),
        once("p", due),
        once("c", due),
        every_second("tick", None),
        every_second("done", Some(2)),
        act(CommandKind::Pause, "p", "pause"),
        act(CommandKind::Cancel, "c", "cancel"),
    ]
}

/// Receives fires from `got` until `done(fires so far)` holds.
async fn fires_while(got: &mut Collected, done: impl Fn(&[Fired]) -> bool) -> Vec<Fired> {
    let mut out = Vec::new();
    while !done(&out) {
        match tokio::time::timeout(MIN, got.fired.recv()).await {
            Ok(Some(f)) => out.push(f),
            _ => panic!("fires stopped: {out:?}"),
        }
    }
    out
}

fn count(fires: &[Fired], id: &str) -> usize {
    fires.iter().filter(|f| f.timer_id == id).count()
}

/// Redis emptied (FLUSHALL) while two bound applications and the shared topic each hold
/// timers of the same ids in every state: each lane is rebuilt from its own state topic,
/// every timer in its state, of its application, in its lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_emptied_rebuilds_each_lane_from_its_own_state_topic() {
    let w = World::start("tenants-rebuild", false);
    let (env, base) = bound_env_on(&w.servers(), "tenants-rebuild", &["orders", "billing"]).await;
    let lanes = lanes_of(&env, &base);
    let mut got: Vec<Collected> = lanes.iter().map(|l| env.collect_from(&l.2, &l.3)).collect();
    let svc = env.start().await;
    let t0 = now_ms();
    let (fired_due, due) = (t0 + 1_000, t0 + 15_000);
    for (i, (app, commands, ..)) in lanes.iter().enumerate() {
        let cmds = timers(app, fired_due, due);
        send_in_order(&env, commands, &cmds).await;
        let rs = got[i].results(cmds.len(), MIN).await;
        assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted), "{rs:?}");
    }
    // Each lane's `f` fired and `done` completed, and its state topic says so.
    let mut before = Vec::new();
    for (i, (_, _, _, _, state)) in lanes.iter().enumerate() {
        let fires = fires_while(&mut got[i], |f| count(f, "f") == 1 && count(f, "done") == 2).await;
        let settled = fires
            .iter()
            .filter(|f| f.timer_id == "f" || f.timer_id == "done");
        let last = settled.map(|f| f.due_ms).max().unwrap();
        let parts: Vec<i32> = ["f", "done"]
            .iter()
            .map(|id| env.args.kafka.partitioner.partition(id.as_bytes(), 2))
            .collect();
        env.checkpointed_through_on(state, &parts, last, MIN).await;
        before.push(fires);
    }
    w.redis.flushall().await;
    let flushed = now_ms();
    assert!(flushed < due - 5_000, "flushed well before the due time");

    // The paused timer is paused, of its application, in its lane: resumed now, it fires
    // at its due time (restored in another lane it would be unknown here; of another
    // application, REJECTED).
    for (i, (app, commands, ..)) in lanes.iter().enumerate() {
        let after = vec![
            cmd(
                app,
                CommandKind::Resume,
                "p",
                &format!("{app}-resume"),
                None,
                "",
            ),
            cmd(
                app,
                CommandKind::CreateOnce,
                "end",
                &format!("{app}-end"),
                Some(due + 1_000),
                "end",
            ),
        ];
        send_in_order(&env, commands, &after).await;
        let rs = got[i].results(after.len(), MIN).await;
        let resumed = outcome_of(&rs, &format!("{app}-resume"));
        assert_eq!(resumed.outcome, Outcome::Accepted, "{app}: {resumed:?}");
    }
    for (i, (app, ..)) in lanes.iter().enumerate() {
        let mut fires = std::mem::take(&mut before[i]);
        fires.extend(fires_while(&mut got[i], |f| count(f, "end") == 1).await);
        for (id, n) in [("f", 1), ("done", 2), ("s", 1), ("p", 1), ("c", 0)] {
            assert_eq!(
                count(&fires, id),
                n,
                "{app}: {id} fired {} times",
                count(&fires, id)
            );
        }
        let ticked = fires
            .iter()
            .filter(|f| f.timer_id == "tick" && f.due_ms > flushed);
        assert!(
            ticked.count() >= 5,
            "{app}: the running cron timer runs on after the rebuild"
        );
        let own = format!("{app}-");
        let foreign = fires
            .iter()
            .find(|f| f.timer_id != "end" && !payload(f).starts_with(&own));
        assert!(
            foreign.is_none(),
            "{app} received another lane's fire: {foreign:?}"
        );
        assert!(fires.iter().all(|f| f.fired_ms >= f.due_ms), "never early");
    }
    let replays = svc.metric("ktimer_redis_replays_total").unwrap_or(0.0);
    assert!(replays >= 3.0, "every lane rebuilt: {replays}");
    svc.stop().await;
}

fn payload(f: &Fired) -> String {
    String::from_utf8_lossy(&f.payload).into_owned()
}
