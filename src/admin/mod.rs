//! The HTTP admin port: `/metrics` (Prometheus), `/healthz`, `/readyz`, `/status` (the
//! partitions owned) and the admin API, JSON over HTTP (every route in docs/operations.md):
//! - [`timers`]: look-up, history, listing, counts per application, dead letters;
//! - [`write`]: create, update, pause, resume, cancel and bulk actions, each a command on
//!   the commands topic ([`commands`] sends it and waits for its result);
//! - [`access`]: tokens and what they allow; [`error`]: JSON errors; [`lanes`]: which
//!   lane (an application's own topics, or the shared ones) a request reaches;
//! - [`cli`]: `ktimer timers ...`, and [`console`]: the web console, clients of these
//!   routes.

pub mod access;
pub mod cli;
pub mod commands;
pub mod console;
pub mod error;
pub mod lanes;
pub mod timers;
pub mod write;

use crate::metrics::Metrics;
use crate::shutdown::CancellationToken;
use crate::status::StatusTx;
use access::Access;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body: a create command with its payload, and headroom.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What the admin handlers read.
pub struct AdminState {
    /// Metrics to render.
    pub metrics: Arc<Metrics>,
    /// Every lane: Redis for its look-ups, its partitions, its write path.
    pub lanes: lanes::AdminLanes,
    /// The instance's status; ready once it joined the group.
    pub status: StatusTx,
    /// The key-to-partition mapping: a timer lives in its id's partition (commands that
    /// arrive elsewhere are forwarded there, or rejected).
    pub partitioner: crate::partitioner::Partitioner,
    /// Who may do what.
    pub access: Access,
    /// How long a write waits for its command's result before answering 202.
    pub wait: Duration,
    /// The applications file in force (the calendars timers name).
    pub apps: crate::apps::Apps,
}

/// Serves the admin API on `addr` until `token` is cancelled. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<AdminState>,
    token: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/", get(console::root))
        .route("/console/", get(console::index))
        .route("/console/app.js", get(console::script))
        .route("/console/app.css", get(console::style))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/status", get(status))
        .route("/timers", get(timers::list).post(write::create))
        .route("/timers/{id}", get(timers::get).put(write::update))
        .route("/timers/{id}/history", get(timers::history))
        .route("/timers/{id}/next", get(timers::next))
        .route("/timers/{id}/{action}", post(write::act))
        .route("/applications", get(timers::applications))
        .route("/dead-letters", get(timers::dead_letters))
        .route("/dead-letters/redrive", post(write::redrive))
        .route("/bulk/{action}", post(write::bulk))
        .fallback(error::no_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
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
    let st = s.status.borrow().clone();
    let why = [st.redis_cut, st.redis_unsafe, st.intake_stalled];
    if let Some(why) = why.into_iter().flatten().next() {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
    } else if st.joined {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

/// `{"joined": bool, "owned": [partitions], "taken_ms": {"partition": ms}}`: what this
/// instance owns now, and how long taking each took (those taken without a rebuild).
async fn status(State(s): State<Arc<AdminState>>) -> Json<serde_json::Value> {
    let st = s.status.borrow().clone();
    Json(
        serde_json::json!({"joined": st.joined, "owned": st.owned, "taken_ms": st.taken_ms, "lanes": st.lanes}),
    )
}
