//! The admin API against a running instance, a real broker and a real Redis: every route,
//! its errors, and the token rules (an instance with two tokens: one for every
//! application, one limited to `billing`).

mod common;

use common::api::{answer, Api, WAIT};
use common::{undeliverable, TestEnv};
use ktimer::now_ms;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

const OPS: &str = "ops-token-0123456789abcdef";
const BILLING: &str = "billing-token-0123456789";

/// The timer ids of a listing, sorted.
fn ids(v: &Value) -> Vec<String> {
    let timers = v["timers"].as_array().unwrap();
    let id = |t: &Value| t["timer_id"].as_str().unwrap().to_string();
    let mut ids: Vec<String> = timers.iter().map(id).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_looks_up_lists_and_changes_timers_within_its_tokens() {
    let tokens = format!("{OPS},billing={BILLING}");
    let env = TestEnv::new("admin", 2, &["--admin-token", &tokens]).await;
    let mut got = env.collect();
    let svc = env.start().await;
    let base = format!("http://{}", svc.status.borrow().admin_addr.unwrap());
    let http = Client::new();
    let api = |token| Api {
        base: base.clone(),
        token,
        http: http.clone(),
    };
    let (ops, billing, anon) = (api(Some(OPS)), api(Some(BILLING)), api(None));

    // Create: the answer is the command's result.
    let due = now_ms() + 1_500;
    let far = now_ms() + 600_000;
    let order = |id: &str, at: i64| json!({"timer_id": id, "application": "orders", "at_ms": at});
    let body = json!({"timer_id": "order-42", "application": "orders", "at_ms": due,
        "callback": {"payload": "close order 42"}});
    let (code, r) = ops.post("/timers", body).await;
    assert_eq!(code, StatusCode::OK, "{r}");
    assert_eq!(
        (r["outcome"].as_str(), r["state"].as_str()),
        (Some("ACCEPTED"), Some("SCHEDULED"))
    );
    let (code, r) = ops.post("/timers", order("order-43", far)).await;
    assert_eq!(code, StatusCode::OK, "{r}");
    // A scoped token creates in its application without naming it.
    let (code, r) = billing
        .post("/timers", json!({"timer_id": "inv-1", "at_ms": far}))
        .await;
    assert_eq!(
        (code, r["application"].as_str()),
        (StatusCode::OK, Some("billing")),
        "{r}"
    );
    // ... and nowhere else.
    let (code, _) = billing.post("/timers", order("x", far)).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    // Not waiting: 202 and the request id.
    let (code, r) = ops.post("/timers?wait=false", order("order-44", far)).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{r}");
    assert!(r["request_id"].as_str().unwrap().starts_with("admin-"));
    // A rejected command: 409 with the reason.
    let (code, r) = ops.post("/timers", order("order-43", far)).await;
    assert_eq!(code, StatusCode::CONFLICT, "{r}");
    assert!(r["reason"].as_str().unwrap().contains("scheduled"), "{r}");

    // Look-up, within the token's reach only.
    let (code, t) = ops.get("/timers/order-43").await;
    assert_eq!(
        (code, t["state"].as_str()),
        (StatusCode::OK, Some("SCHEDULED"))
    );
    assert_eq!(
        t["history"].as_array().unwrap().len(),
        2,
        "created, then a create rejected: {t}"
    );
    assert_eq!(
        billing.get("/timers/order-43").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        anon.get("/timers/order-43").await.0,
        StatusCode::UNAUTHORIZED
    );

    // Pause; the history says so.
    let (code, r) = ops.post("/timers/order-43/pause", json!({})).await;
    assert_eq!(
        (code, r["state"].as_str()),
        (StatusCode::OK, Some("PAUSED")),
        "{r}"
    );
    let (code, _) = billing.post("/timers/order-43/cancel", json!({})).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "another application's timer");
    let (_, h) = ops.get("/timers/order-43/history").await;
    let last = h["history"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(
        (last["op"].as_str(), last["outcome"].as_str()),
        (Some("pause"), Some("accepted"))
    );

    // Fire now: one extra fire of the paused timer, which stays paused.
    let (code, r) = ops.post("/timers/order-43/fire-now", json!({})).await;
    assert_eq!(
        (code, r["state"].as_str()),
        (StatusCode::OK, Some("PAUSED")),
        "{r}"
    );
    let extra = got.fires_until("order-43", WAIT).await.pop().unwrap();
    assert!(extra.due_ms < far, "fired now, not at its due: {extra:?}");
    let t = ops
        .until("/timers/order-43", |t| {
            t["last_fire"]["due_ms"] == extra.due_ms
        })
        .await;
    assert_eq!(t["state"], "PAUSED");
    assert_eq!(t["due_ms"], far, "the schedule is unchanged");

    // The fire shows as the last fire and in the history.
    let f = got.fires_until("order-42", WAIT).await.pop().unwrap();
    assert!(f.fired_ms >= due);
    let t = ops
        .until("/timers/order-42", |t| t["state"] == "FIRED")
        .await;
    assert_eq!(t["last_fire"]["due_ms"], due, "{t}");
    assert_eq!(t["last_fire"]["outcome"], "delivered");
    assert_eq!(t["callback"]["payload_preview"], "close order 42", "{t}");
    assert_eq!(t["history"].as_array().unwrap().len(), 2, "{t}");

    // Listing: filters, and a scoped token sees its application only.
    let all = ops
        .until("/timers?application=orders", |v| ids(v).len() == 3)
        .await;
    assert_eq!(ids(&all), ["order-42", "order-43", "order-44"]);
    // Update (order-44 was created without waiting: the listing shows it applied).
    let (code, r) = ops.put("/timers/order-44", json!({"at_ms": far + 1})).await;
    assert_eq!(
        (code, r["due_ms"].as_i64()),
        (StatusCode::OK, Some(far + 1)),
        "{r}"
    );
    let paused = ops.get("/timers?application=orders&state=paused").await.1;
    assert_eq!(ids(&paused), ["order-43"]);
    assert_eq!(ids(&billing.get("/timers").await.1), ["inv-1"]);
    assert_eq!(
        billing.get("/timers?application=orders").await.0,
        StatusCode::FORBIDDEN
    );
    // Paged: one timer a page, the cursor leads through all of them.
    let (mut seen, mut cursor) = (vec![], String::new());
    loop {
        let (code, v) = ops
            .get(&format!(
                "/timers?application=orders&limit=1&cursor={cursor}"
            ))
            .await;
        assert_eq!(code, StatusCode::OK, "{v}");
        seen.extend(ids(&v));
        match v["cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, ["order-42", "order-43", "order-44"]);

    // Counts per application and state.
    let apps = ops.get("/applications").await.1;
    let orders = &apps["applications"]["orders"];
    assert_eq!(
        (orders["PAUSED"].as_i64(), orders["FIRED"].as_i64()),
        (Some(1), Some(1)),
        "{apps}"
    );
    assert_eq!(orders["SCHEDULED"].as_i64(), Some(1), "{apps}");
    let mine = billing.get("/applications").await.1;
    assert_eq!(mine["applications"].as_object().unwrap().len(), 1, "{mine}");

    // Bulk: cancel by application and prefix.
    for i in 0..5 {
        ops.post(
            "/timers",
            json!({"timer_id": format!("bulk-{i}"), "application": "orders", "at_ms": far}),
        )
        .await;
    }
    let (code, r) = ops
        .post(
            "/bulk/cancel",
            json!({"application": "orders", "prefix": "bulk-"}),
        )
        .await;
    assert_eq!(
        (code, r["commands"].as_i64()),
        (StatusCode::ACCEPTED, Some(5)),
        "{r}"
    );
    ops.until(
        "/timers?application=orders&state=CANCELLED&prefix=bulk-",
        |v| ids(v).len() == 5,
    )
    .await;
    assert_eq!(
        ops.get("/timers/order-43").await.1["state"],
        "PAUSED",
        "outside the prefix"
    );

    // Errors: JSON, with the right status.
    let (code, e) = ops.get("/no/such/route").await;
    assert_eq!(
        (code, e["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    assert_eq!(
        ops.get("/timers/never-created").await.0,
        StatusCode::NOT_FOUND
    );
    let (code, e) = ops
        .post(
            "/timers",
            json!({"timer_id": "t", "application": "orders", "at_ms": far, "colour": "red"}),
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(e["reason"].as_str().unwrap().contains("colour"), "{e}");
    let broken = ops
        .req(reqwest::Method::POST, "/timers")
        .header("content-type", "application/json")
        .body("{not json");
    assert_eq!(answer(broken).await.0, StatusCode::BAD_REQUEST);
    let huge = json!({"timer_id": "t", "at_ms": far, "callback": {"payload": "x".repeat(2 << 20)}});
    // Refused before its body is read, the request's connection is closed by the server:
    // it must not go back to the client's pool for the next request.
    let huge = ops
        .req(reqwest::Method::POST, "/timers")
        .header("connection", "close")
        .json(&huge);
    let (code, e) = answer(huge).await;
    assert_eq!(
        (code, e["error"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("too_large"))
    );
    assert_eq!(
        ops.get("/timers?state=sleeping").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        ops.get("/timers?cursor=nonsense").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        ops.post("/timers/order-43/explode", json!({})).await.0,
        StatusCode::NOT_FOUND
    );
    // The command line uses the same routes.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ktimer"))
            .args(["timers", "--admin-url", &base, "--token", OPS])
            .args(args)
            .output()
            .expect("ktimer timers");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = cli(&["get", "order-43"]);
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["state"],
        "PAUSED"
    );
    let (ok, out, err) = cli(&["list", "--application", "orders", "--prefix", "order-"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    let (ok, out, err) = cli(&["resume", "order-43"]);
    assert!(ok, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["state"],
        "SCHEDULED"
    );
    let (ok, _, err) = cli(&["get", "never-created"]);
    assert!(!ok && err.contains("404"), "{err}");
    // Health and metrics need no token.
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    svc.stop().await;
}

/// Dead letters: listed (only to a token of their application), and re-driven: a timer
/// accepted before the producer's record limit was lowered dead-letters, and again when
/// re-driven (still too large).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_lists_and_redrives_dead_letters() {
    let tokens = format!("{OPS},billing={BILLING}");
    let mut env = TestEnv::new("admindlq", 1, &["--admin-token", &tokens]).await;
    // Due once the first instance stopped (a group join can take several seconds).
    let doomed = undeliverable("doomed", now_ms() + 20_000);
    env.accept_then_limit(&doomed, 20_000).await;
    let svc = env.start().await;
    let base = format!("http://{}", svc.status.borrow().admin_addr.unwrap());
    let http = Client::new();
    let api = |token| Api {
        base: base.clone(),
        token,
        http: http.clone(),
    };
    let (ops, billing) = (api(Some(OPS)), api(Some(BILLING)));
    let dead = ops
        .until("/dead-letters?application=test", |v| ids(v) == ["doomed"])
        .await;
    assert!(dead["timers"][0]["state"] == "DEAD_LETTERED", "{dead}");
    assert_eq!(
        billing.get("/dead-letters?application=test").await.0,
        StatusCode::FORBIDDEN
    );
    let (code, r) = ops
        .post("/dead-letters/redrive", json!({"application": "test"}))
        .await;
    assert_eq!(
        (code, r["commands"].as_i64()),
        (StatusCode::ACCEPTED, Some(1)),
        "{r}"
    );
    let fires = |t: &Value| {
        let h = t["history"].as_array().unwrap();
        h.iter()
            .filter(|e| e["type"] == "fire" && e["outcome"] == "dead_lettered")
            .count()
    };
    ops.until("/timers/doomed", |t| fires(t) == 2).await;
    svc.stop().await;
}
