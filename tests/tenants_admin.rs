//! The admin API with bound applications: each application's token reaches its own
//! lane only; two applications' `order-42` are two timers, looked up, listed, counted and
//! cancelled apart.

mod common;

use common::bound::*;
use ktimer::now_ms;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

const OPS: &str = "ops-token-0123456789abcdef";
const ORDERS: &str = "orders-token-0123456789";
const BILLING: &str = "billing-token-0123456789";

/// One request with `token`: its status and JSON body.
async fn call(
    base: &str,
    token: &str,
    m: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut r = Client::new()
        .request(m, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.expect("admin port answers");
    let code = resp.status();
    let text = resp.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{code}: {text}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_application_token_sees_and_changes_only_its_own_order_42() {
    let tokens = format!("{OPS},orders={ORDERS},billing={BILLING}");
    let (env, base) = bound_env_with(
        "tenants-admin",
        &["orders", "billing"],
        &["--admin-token", &tokens],
    )
    .await;
    let svc = env.start().await;
    let api = format!("http://{}", svc.status.borrow().admin_addr.unwrap());
    let far = now_ms() + 600_000;
    // Each creates its order-42 through the API (its command goes to its own topic).
    for (token, app, payload) in [(ORDERS, "orders", "o"), (BILLING, "billing", "b")] {
        let body = json!({"timer_id": "order-42", "at_ms": far, "callback": {"payload": payload}});
        let (code, r) = call(&api, token, Method::POST, "/timers", Some(body)).await;
        assert_eq!(
            (code, r["application"].as_str()),
            (StatusCode::OK, Some(app)),
            "{r}"
        );
        assert_eq!(r["outcome"].as_str(), Some("ACCEPTED"), "{r}");
    }
    // Each token looks up its own.
    for (token, app, payload) in [(ORDERS, "orders", "o"), (BILLING, "billing", "b")] {
        let (code, t) = call(&api, token, Method::GET, "/timers/order-42", None).await;
        assert_eq!(code, StatusCode::OK, "{t}");
        assert_eq!(t["application"].as_str(), Some(app), "{t}");
        assert_eq!(
            t["callback"]["payload_preview"].as_str(),
            Some(payload),
            "{t}"
        );
        assert_eq!(
            t["topic"].as_str(),
            Some(Bound::of(&base, app).commands.as_str())
        );
        let (_, list) = call(&api, token, Method::GET, "/timers", None).await;
        let listed: Vec<&str> = list["timers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["application"].as_str().unwrap())
            .collect();
        assert_eq!(listed, [app], "{list}");
    }
    // The operator's token names the application; both are counted.
    let (_, t) = call(
        &api,
        OPS,
        Method::GET,
        "/timers/order-42?application=billing",
        None,
    )
    .await;
    assert_eq!(t["application"].as_str(), Some("billing"), "{t}");
    let (_, apps) = call(&api, OPS, Method::GET, "/applications", None).await;
    for app in ["orders", "billing"] {
        assert_eq!(
            apps["applications"][app]["SCHEDULED"].as_i64(),
            Some(1),
            "{apps}"
        );
    }
    // billing cancels its order-42; orders' stays scheduled.
    let (code, r) = call(&api, BILLING, Method::POST, "/timers/order-42/cancel", None).await;
    assert_eq!(
        (code, r["outcome"].as_str()),
        (StatusCode::OK, Some("ACCEPTED")),
        "{r}"
    );
    let (_, t) = call(&api, BILLING, Method::GET, "/timers/order-42", None).await;
    assert_eq!(t["state"].as_str(), Some("CANCELLED"), "{t}");
    let (_, t) = call(&api, ORDERS, Method::GET, "/timers/order-42", None).await;
    assert_eq!(t["state"].as_str(), Some("SCHEDULED"), "{t}");
    // A token reaches no other application's lane.
    let (code, _) = call(
        &api,
        ORDERS,
        Method::GET,
        "/timers/order-42?application=billing",
        None,
    )
    .await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    svc.stop().await;
}
