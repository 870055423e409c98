//! Bound applications and the state topic: Redis emptied rebuilds each lane (the
//! shared topic and every bound application's) from its own state topic.

mod common;

use common::bound::*;
use common::world::World;
use common::Collected;
use ktimer::command::{CommandKind, Outcome};
use ktimer::now_ms;

/// Redis emptied (FLUSHALL) while two bound applications and the shared topic each hold
/// timers of the same ids in every state: each lane is rebuilt from its own state topic,
/// every timer in its state and lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_emptied_rebuilds_each_lane_from_its_own_state_topic() {
    let w = World::start("tenants-rebuild", false);
    let (env, base) = bound_env_on(&w.servers(), "tenants-rebuild", &["orders", "billing"]).await;
    let lanes = lanes_of(&env, &base);
    let mut got: Vec<Collected> = lanes.iter().map(|l| env.collect_from(&l.2, &l.3)).collect();
    let svc = env.start().await;
    let t0 = now_ms();
    let (fired_due, due) = (t0 + 1_000, t0 + 12_000);
    let once = CommandKind::CreateOnce;
    for (i, (app, commands, ..)) in lanes.iter().enumerate() {
        let cmds = vec![
            cmd(
                app,
                once,
                "f",
                &format!("{app}-f"),
                Some(fired_due),
                &format!("{app}-f"),
            ),
            cmd(
                app,
                once,
                "s",
                &format!("{app}-s"),
                Some(due),
                &format!("{app}-s"),
            ),
            cmd(
                app,
                once,
                "p",
                &format!("{app}-p"),
                Some(due),
                &format!("{app}-p"),
            ),
            cmd(
                app,
                once,
                "c",
                &format!("{app}-c"),
                Some(due),
                &format!("{app}-c"),
            ),
            cmd(
                app,
                CommandKind::Pause,
                "p",
                &format!("{app}-pause"),
                None,
                "",
            ),
            cmd(
                app,
                CommandKind::Cancel,
                "c",
                &format!("{app}-cancel"),
                None,
                "",
            ),
        ];
        send_in_order(&env, commands, &cmds).await;
        let rs = got[i].results(cmds.len(), MIN).await;
        assert!(rs.iter().all(|r| r.outcome == Outcome::Accepted), "{rs:?}");
    }
    for (i, (app, _, _, _, state)) in lanes.iter().enumerate() {
        let f = got[i].fires_until("f", MIN).await;
        assert_eq!(payloads(&f), [format!("{app}-f")]);
        let p = env.args.kafka.partitioner.partition(b"f", 2);
        env.checkpointed_through_on(state, &[p], fired_due, MIN)
            .await;
    }
    w.redis.flushall().await;
    assert!(now_ms() < due - 3_000, "flushed well before the due time");

    // After the rebuild: the paused timer is paused, of its application, in its lane
    // (resumed now, it fires at its due time; a timer restored in another lane would be
    // unknown here, of another application REJECTED); the scheduled one fires; the
    // cancelled and the fired one (tombstones in the state topic) do not.
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
                once,
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
        let fires = got[i].fires_until("end", MIN).await;
        let mut seen = payloads(&fires);
        seen.sort();
        // "f" fired before the flush; once more only if acknowledged after the checkpoint
        // read back, which the wait above rules out.
        let mut expected = ["end".to_string(), format!("{app}-p"), format!("{app}-s")];
        expected.sort();
        assert_eq!(seen, expected, "{app}");
        assert!(fires.iter().all(|f| f.fired_ms >= f.due_ms), "never early");
    }
    assert!(
        svc.metric("ktimer_redis_replays_total").unwrap_or(0.0) >= 3.0,
        "every lane rebuilt"
    );
    svc.stop().await;
}
