//! A client of an instance's admin API (one port, one token or none), for the tests of
//! its routes.

use reqwest::{Client, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// How long a route is waited for.
pub const WAIT: Duration = Duration::from_secs(30);

/// A client of one admin port with one token (or none).
pub struct Api {
    /// `http://HOST:PORT`.
    pub base: String,
    /// The bearer token sent, if any.
    pub token: Option<&'static str>,
    /// The HTTP client.
    pub http: Client,
}

impl Api {
    /// A request to `path` with the token.
    pub fn req(&self, m: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(m, format!("{}{path}", self.base));
        match self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }
    /// GET `path`: the status and the JSON answer.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        answer(self.req(reqwest::Method::GET, path)).await
    }
    /// POST `body` to `path`.
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        answer(self.req(reqwest::Method::POST, path).json(&body)).await
    }
    /// PUT `body` to `path`.
    pub async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        answer(self.req(reqwest::Method::PUT, path).json(&body)).await
    }
    /// GETs `path` until `ok` holds for the answer (what an instance does is asynchronous).
    pub async fn until(&self, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let end = tokio::time::Instant::now() + WAIT;
        loop {
            let (code, v) = self.get(path).await;
            if code == StatusCode::OK && ok(&v) {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "{path}: still {code} {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The status and JSON body of a request's answer (panics unless JSON).
pub async fn answer(r: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let resp = r.send().await.expect("admin port answers");
    let code = resp.status();
    let text = resp.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({code}): {text}"));
    (code, v)
}
