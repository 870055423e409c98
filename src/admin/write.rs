//! The admin API's write routes: create, update, pause, resume, cancel, fire now, bulk
//! pause, resume or cancel by application and id prefix, and re-driving dead letters. Each is a command on the commands
//! topic ([`super::commands`]); the answer is its result (200, or 409 when rejected),
//! or 202 with the request id when the caller asked not to wait (`?wait=false`) or the
//! result did not come in time.

use super::access::{Need, Scope};
use super::commands::Sent;
use super::error::ApiError;
use super::lanes::AdminLane;
use super::timers::{find, page};
use super::AdminState;
use crate::command::{CommandKind, Outcome, TimerCommand};
use crate::store::ListFilter;
use crate::timer::TimerState;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Most commands one bulk request sends.
const BULK_MAX: usize = 100_000;

/// `?wait=false`: answer 202 once the command is produced; `?application=`: the
/// application whose timer a route names (its lane is searched; a scoped token's own
/// when none is named).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    wait: Option<bool>,
    application: Option<String>,
}

/// A request id for a command the caller did not name.
fn request_id() -> String {
    format!("admin-{}", crate::client::unique())
}

/// `body` (a JSON object: the fields of a command) as a command of `kind`.
fn command(mut body: Value, kind: CommandKind, id: Option<&str>) -> Result<TimerCommand, ApiError> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    if obj.contains_key("kind") {
        return Err(ApiError::bad_request("kind is given by the route"));
    }
    obj.insert(
        "kind".into(),
        serde_json::to_value(kind).unwrap_or_default(),
    );
    obj.entry("request_id")
        .or_insert_with(|| request_id().into());
    if let Some(id) = id {
        match obj.get("timer_id").and_then(Value::as_str) {
            Some(other) if other != id => {
                return Err(ApiError::bad_request("timer_id differs from the route's"))
            }
            _ => obj.insert("timer_id".into(), id.into()),
        };
    }
    serde_json::from_value(body).map_err(|e| ApiError::bad_request(format!("body: {e}")))
}

/// Sends `cmd` within `scope` to `lane`'s commands topic and answers its result.
async fn send(
    s: &AdminState,
    lane: &AdminLane,
    scope: &Scope,
    cmd: TimerCommand,
    wait: bool,
) -> Result<Response, ApiError> {
    if !scope.allows(&cmd.application) {
        return Err(ApiError::forbidden(
            "this token is limited to another application",
        ));
    }
    let commands = lane.commands()?;
    let wait = wait.then_some(s.wait);
    Ok(match commands.send(&cmd, wait).await? {
        Sent::Accepted { request_id } => (
            StatusCode::ACCEPTED,
            Json(json!({"request_id": request_id, "timer_id": cmd.timer_id})),
        )
            .into_response(),
        Sent::Result(r) if r.outcome == Outcome::Rejected => (
            StatusCode::CONFLICT,
            Json(json!({"error": "rejected", "reason": r.reason, "result": r})),
        )
            .into_response(),
        Sent::Result(r) => Json(r).into_response(),
    })
}

/// `POST /timers`: creates a timer (a one-shot one, or a cron one when `cron` is given).
pub async fn create(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    q: Result<Query<WaitQuery>, QueryRejection>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    let (Query(q), Json(mut body)) = (q?, body?);
    let scope = s.access.scope(&headers, Need::Write)?;
    if let (Scope::Application(app), Some(obj)) = (&scope, body.as_object_mut()) {
        obj.entry("application")
            .or_insert_with(|| app.clone().into());
    }
    let cron = body.get("cron").is_some_and(|c| !c.is_null());
    let kind = if cron {
        CommandKind::CreateCron
    } else {
        CommandKind::CreateOnce
    };
    let cmd = command(body, kind, None)?;
    let lane = s.lanes.of(Some(&cmd.application));
    send(&s, lane, &scope, cmd, q.wait.unwrap_or(true)).await
}

/// `PUT /timers/{id}`: changes a timer's schedule, payload or callback.
pub async fn update(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<WaitQuery>, QueryRejection>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    let (Query(q), Json(mut body)) = (q?, body?);
    let scope = s.access.scope(&headers, Need::Write)?;
    let asked = q.application.clone().or_else(|| {
        let app = body.get("application")?.as_str()?;
        Some(app.to_string())
    });
    let (lane, _, t) = find(&s, &scope, &id, asked).await?;
    if let (Some(def), Some(obj)) = (&t.def, body.as_object_mut()) {
        obj.entry("application")
            .or_insert_with(|| def.application.clone().into());
    }
    let cmd = command(body, CommandKind::Update, Some(&id))?;
    send(&s, lane, &scope, cmd, q.wait.unwrap_or(true)).await
}

/// The kind of a `pause`, `resume`, `cancel` or `fire-now` route.
fn action(name: &str) -> Result<CommandKind, ApiError> {
    match name {
        "pause" => Ok(CommandKind::Pause),
        "resume" => Ok(CommandKind::Resume),
        "cancel" => Ok(CommandKind::Cancel),
        "fire-now" => Ok(CommandKind::FireNow),
        other => Err(ApiError::not_found(format!(
            "no action {other:?} (pause, resume, cancel, fire-now)"
        ))),
    }
}

/// `POST /timers/{id}/{pause|resume|cancel|fire-now}`.
pub async fn act(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
    q: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q?;
    let kind = action(&name)?;
    let scope = s.access.scope(&headers, Need::Write)?;
    let (lane, _, t) = find(&s, &scope, &id, q.application).await?;
    let mut cmd = TimerCommand::new(kind, &id, &request_id());
    cmd.application = t.def.map(|d| d.application).unwrap_or_default();
    send(&s, lane, &scope, cmd, q.wait.unwrap_or(true)).await
}

/// The body of a bulk request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    application: Option<String>,
    #[serde(default)]
    prefix: String,
}

/// `POST /bulk/{pause|resume|cancel}` with `{"application": ..., "prefix": ...}`: one
/// command per matching timer that the action changes (scheduled ones are paused, paused
/// ones resumed, both cancelled), produced without waiting; answers 202 with the count.
pub async fn bulk(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<BulkBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(b) = body?;
    let kind = action(&name)?;
    let scope = s.access.scope(&headers, Need::Write)?;
    let app = scope
        .application(b.application)?
        .ok_or_else(|| ApiError::bad_request("application is required"))?;
    let states: &[TimerState] = match kind {
        CommandKind::Pause => &[TimerState::Scheduled],
        CommandKind::Resume => &[TimerState::Paused],
        CommandKind::Cancel => &[TimerState::Scheduled, TimerState::Paused],
        _ => return Err(ApiError::not_found("bulk actions: pause, resume, cancel")),
    };
    let mut sent = 0usize;
    for st in states {
        let f = ListFilter {
            application: Some(app.clone()),
            state: Some(*st),
            id_prefix: b.prefix.clone(),
            dead_letters: false,
            limit: 1_000,
        };
        sent += send_each(&s, &scope, &f, kind, BULK_MAX - sent).await?;
    }
    let body = json!({"action": name, "application": app, "prefix": b.prefix, "commands": sent});
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// Sends a command of `kind` for each timer listed with `f` (at most `most`) in the lane
/// of `f`'s application, without waiting for results; how many.
async fn send_each(
    s: &AdminState,
    scope: &Scope,
    f: &ListFilter,
    kind: CommandKind,
    most: usize,
) -> Result<usize, ApiError> {
    let lane = s.lanes.of(f.application.as_deref());
    let mut sent = 0usize;
    let mut cursor: Option<String> = None;
    loop {
        let (timers, next) = page(lane, cursor.as_deref(), f).await?;
        for t in timers.into_iter().take(most - sent) {
            let mut cmd = TimerCommand::new(kind, &t.timer_id, &request_id());
            cmd.application = t.application;
            send(s, lane, scope, cmd, false).await?;
            sent += 1;
        }
        match next {
            Some(n) if sent < most => cursor = Some(n),
            _ => return Ok(sent),
        }
    }
}

/// The body of a re-drive request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedriveBody {
    application: Option<String>,
}

/// `POST /dead-letters/redrive` with `{"application": ...}`: one extra fire (FIRE_NOW) of
/// every timer of the application with dead-lettered fires (one timer: `POST
/// /timers/{id}/fire-now`); answers 202 with the count.
pub async fn redrive(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    body: Result<Json<RedriveBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(b) = body?;
    let scope = s.access.scope(&headers, Need::Write)?;
    let app = scope
        .application(b.application)?
        .ok_or_else(|| ApiError::bad_request("application is required"))?;
    let f = ListFilter {
        application: Some(app.clone()),
        dead_letters: true,
        limit: 1_000,
        ..Default::default()
    };
    let sent = send_each(&s, &scope, &f, CommandKind::FireNow, BULK_MAX).await?;
    let body = json!({"action": "redrive", "application": app, "commands": sent});
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}
