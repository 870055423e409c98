//! The HTTP admin port: `/metrics` (Prometheus), `/healthz`, `/readyz`, and
//! `/timers/{id}` to look a timer up.

use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::store::Store;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// What the admin handlers read.
pub struct AdminState {
    /// Metrics to render.
    pub metrics: Arc<Metrics>,
    /// Redis, for look-ups.
    pub store: Store,
    /// The instance's status; ready once it joined the group.
    pub status: Arc<tokio::sync::watch::Sender<crate::service::Status>>,
    /// Partitions of the commands topic (look-ups scan them).
    pub partitions: AtomicI32,
}

/// Serves the admin API on `addr` until `token` is cancelled. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<AdminState>,
    token: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/timers/{id}", get(timer))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned());
        if let Err(e) = server.await {
            tracing::error!(error = %e, "admin server failed");
        }
    });
    Ok(bound)
}

async fn metrics(State(s): State<Arc<AdminState>>) -> String {
    s.metrics.render()
}

async fn ready(State(s): State<Arc<AdminState>>) -> Response {
    if s.status.borrow().joined {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

async fn timer(State(s): State<Arc<AdminState>>, Path(id): Path<String>) -> Response {
    for p in 0..s.partitions.load(Ordering::SeqCst) {
        match s.store.timer(p, &id).await {
            Ok(fields) if fields.is_empty() => continue,
            Ok(fields) => {
                let text = |k: &str| {
                    fields
                        .get(k)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                };
                let num = |k: &str| text(k).and_then(|v| v.parse::<i64>().ok());
                let def = fields
                    .get("d")
                    .and_then(|d| crate::codec::decode_stored(d).ok());
                let body = serde_json::json!({
                    "timer_id": id,
                    "partition": p,
                    "version": text("v").and_then(|v| v.parse::<i64>().ok()),
                    "state": text("st").map(|s| s.to_uppercase()),
                    "due_ms": text("due").and_then(|v| v.parse::<i64>().ok()),
                    "request_id": text("rq"),
                    "application": def.as_ref().map(|d| d.application.clone()),
                    "callback_topic": def.as_ref().and_then(|d| d.callback.topic.clone()),
                    "payload_bytes": def.as_ref().map(|d| d.callback.payload.len()),
                    "kind": if text("k").as_deref() == Some("c") { "CRON" } else { "ONCE" },
                    "schedule": text("sc").and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok()),
                    "fires": num("n"),
                    "last_fired_due_ms": num("last"),
                    "materialised_through_ms": num("hz"),
                    "dead_letters": num("dl"),
                    "last_dead_letter_due_ms": num("dlr"),
                    "last_dead_letter_reason": text("dlx"),
                });
                return Json(body).into_response();
            }
            Err(e) => {
                return (StatusCode::SERVICE_UNAVAILABLE, format!("redis: {e}\n")).into_response()
            }
        }
    }
    (StatusCode::NOT_FOUND, "unknown timer\n").into_response()
}
