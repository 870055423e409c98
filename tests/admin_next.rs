//! The next fires of a timer through the admin API (`GET /timers/{id}/next`) against a
//! running instance, a real broker and a real Redis.

mod common;

use common::api::{Api, WAIT};
use common::TestEnv;
use ktimer::now_ms;
use reqwest::{Client, StatusCode};
use serde_json::json;

/// `GET /timers/{id}/next` names the instants a cron timer then fires (the schedule's
/// own code, in the timer's zone), a one-shot timer's due, and nothing once it is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_previews_the_next_fires() {
    let env = TestEnv::new("admin-next", 1, &[]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let api = Api {
        base: format!("http://{}", svc.status.borrow().admin_addr.unwrap()),
        token: None,
        http: Client::new(),
    };
    let start = now_ms() + 3_000;
    let body = json!({"timer_id": "every-2s", "cron": "*/2 * * * * *",
        "time_zone": "America/Sao_Paulo", "start_ms": start, "max_fires": 5});
    let (code, r) = api.post("/timers", body).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (StatusCode::OK, Some("ACCEPTED")),
        "{r}"
    );
    let (code, v) = api.get("/timers/every-2s/next?n=3").await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let next: Vec<i64> = v["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["due_ms"].as_i64().unwrap())
        .collect();
    assert_eq!(next.len(), 3, "{v}");
    assert!(next[0] >= start && next[0] % 2_000 == 0, "{v}");
    assert!(
        v["next"][0]["local"].as_str().unwrap().ends_with("-03:00"),
        "on the zone's wall clock: {v}"
    );
    let fired: Vec<i64> = got.fires(3, WAIT).await.iter().map(|f| f.due_ms).collect();
    assert_eq!(fired, next, "the preview is what fired");
    let (_, v) = api.get("/timers/every-2s/next?n=10").await;
    assert_eq!(
        v["next"].as_array().unwrap().len(),
        2,
        "max_fires 5, 3 fired: {v}"
    );

    let due = now_ms() + 600_000;
    let (code, _) = api
        .post("/timers", json!({"timer_id": "once", "at_ms": due}))
        .await;
    assert_eq!(code, StatusCode::OK);
    let (_, v) = api.get("/timers/once/next").await;
    assert_eq!(v["next"], json!([{"due_ms": due}]));
    let (code, _) = api.post("/timers/once/pause", json!({})).await;
    assert_eq!(code, StatusCode::OK);
    let (_, v) = api.get("/timers/once/next").await;
    assert_eq!(v["next"], json!([]), "nothing while paused: {v}");
    svc.stop().await;
}
