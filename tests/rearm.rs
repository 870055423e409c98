//! The re-arm pattern against a real broker and a real Redis: a consumer answers each fire
//! by creating the same timer again for its next time. The instance holds the delivered
//! fires' acknowledgements back (`--ack-every-ms`, here longer than the test), so each
//! fire is still in flight in Redis when the consumer's command arrives; the intake makes
//! the trigger land it first, and the command is accepted, not refused as under way.

mod common;

use common::{once_at, TestEnv};
use ktimer::command::Outcome;
use ktimer::now_ms;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// Held back longer than the test runs: only the intake's request lands a fire.
const ACK_EVERY_MS: i64 = 60_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_created_again_by_its_fires_consumer_is_accepted_while_acknowledgements_wait() {
    let env = TestEnv::new("rearm", 1, &[]).await;
    let mut got = env.collect();
    let mut args = env.args.clone();
    args.ack_every_ms = ACK_EVERY_MS;
    let svc = env.start_with(args).await;
    let mut due = now_ms() + 500;
    env.send(&once_at("rearm", due, "0"), None).await;
    assert_eq!(got.results(1, WAIT).await[0].outcome, Outcome::Accepted);
    for round in 1..=3 {
        // (A fire delivered twice would arrive here instead of the next one.)
        let f = got.fires(1, WAIT).await.remove(0);
        assert_eq!(
            (f.timer_id.as_str(), f.due_ms),
            ("rearm", due),
            "round {round}"
        );
        // Answered at once, as a consumer re-arming its timer does.
        due = now_ms() + 300;
        let mut again = once_at("rearm", due, &round.to_string());
        again.request_id = format!("req-rearm-{round}");
        let sent = Instant::now();
        env.send(&again, None).await;
        let r = got.results(1, WAIT).await.remove(0);
        assert_eq!(r.outcome, Outcome::Accepted, "round {round}: {r:?}");
        assert_eq!(r.due_ms, Some(due));
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "round {round}: answered after {:?}",
            sent.elapsed()
        );
    }
    let last = got.fires(1, WAIT).await.remove(0);
    assert_eq!((last.timer_id.as_str(), last.due_ms), ("rearm", due));
    assert!(
        last.fired_ms >= due,
        "fired {} ms early",
        due - last.fired_ms
    );
    svc.stop().await;
}
