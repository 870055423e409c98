//! The HTTP admin port: `/metrics` (Prometheus), `/healthz`, `/readyz`, `/status` (the
//! partitions owned), and `/timers/{id}` to look a timer up.

use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::status::StatusTx;
use crate::store::{Store, TimerView};
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
    pub status: StatusTx,
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
        .route("/status", get(status))
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

/// `{"joined": bool, "owned": [partitions]}`: what this instance owns now.
async fn status(State(s): State<Arc<AdminState>>) -> Json<serde_json::Value> {
    let st = s.status.borrow().clone();
    Json(serde_json::json!({"joined": st.joined, "owned": st.owned}))
}

async fn timer(State(s): State<Arc<AdminState>>, Path(id): Path<String>) -> Response {
    for p in 0..s.partitions.load(Ordering::SeqCst) {
        match s.store.timer(p, &id).await {
            Ok(None) => continue,
            Ok(Some(t)) => return Json(timer_json(&id, p, &t)).into_response(),
            Err(e) => {
                return (StatusCode::SERVICE_UNAVAILABLE, format!("redis: {e}\n")).into_response()
            }
        }
    }
    (StatusCode::NOT_FOUND, "unknown timer\n").into_response()
}

/// The JSON of a looked-up timer.
fn timer_json(id: &str, partition: i32, t: &TimerView) -> serde_json::Value {
    let def = t.def.as_ref();
    serde_json::json!({
        "timer_id": id,
        "partition": partition,
        "version": t.version,
        "state": t.state.map(|s| s.as_str()),
        "due_ms": t.due_ms,
        "request_id": t.request_id,
        "application": def.map(|d| d.application.clone()),
        "callback_topic": def.and_then(|d| d.callback.topic.clone()),
        "payload_bytes": def.map(|d| d.callback.payload.len()),
        "kind": if t.cron { "CRON" } else { "ONCE" },
        "schedule": t.schedule,
        "fires": t.fires,
        "last_fired_due_ms": t.last_fired_due_ms,
        "materialised_through_ms": t.materialised_through_ms,
        "dead_letters": t.dead_letters.count,
        "last_dead_letter_due_ms": t.dead_letters.last_due_ms,
        "last_dead_letter_reason": t.dead_letters.last_reason,
    })
}
