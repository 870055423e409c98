//! The admin API's read routes: a timer, its history, a listing, counts per application
//! and state, dead letters. Redis answers them directly (every instance reads every
//! partition, owned or not).

use super::access::{Need, Scope};
use super::error::ApiError;
use super::lanes::AdminLane;
use super::AdminState;
use crate::store::{ListFilter, TimerSummary, TimerView};
use crate::timer::TimerState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Timers per page unless the request says.
const DEFAULT_LIMIT: usize = 100;
/// Most timers per page.
const MAX_LIMIT: usize = 1_000;

/// The application a look-up names (`?application=`): its lane is searched.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppQuery {
    application: Option<String>,
}

/// Timer `id` of application `asked` (a scoped token's own when none is named), the lane
/// and the partition it lives in (its id's), within the caller's scope; 404 otherwise (a
/// scoped token does not learn that another application's timer exists). A bound
/// application's timer is looked for in its lane, then in the shared one (created there
/// before it was bound); any other in the shared lane.
pub async fn find<'a>(
    s: &'a AdminState,
    scope: &Scope,
    id: &str,
    asked: Option<String>,
) -> Result<(&'a AdminLane, i32, TimerView), ApiError> {
    let app = scope.application(asked)?;
    let own = s.lanes.of(app.as_deref());
    let mut lanes = vec![own];
    if own.lane.application.is_some() {
        lanes.push(s.lanes.shared());
    }
    for lane in lanes {
        let p = s.partitioner.partition(id.as_bytes(), lane.partitions);
        match lane.store.timer(p, id).await? {
            Some(t) if scope.allows(t.def.as_ref().map_or("", |d| d.application.as_str())) => {
                return Ok((lane, p, t))
            }
            _ => {}
        }
    }
    Err(ApiError::not_found(format!("no timer {id:?}")))
}

/// `GET /timers/{id}`: definition, state, version, next due, fires, the last fire, dead
/// letters and the history.
pub async fn get(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<AppQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let scope = s.access.scope(&headers, Need::Read)?;
    let (lane, p, t) = find(&s, &scope, &id, q?.0.application).await?;
    Ok(Json(timer_json(&id, &lane.lane.commands, p, &t)))
}

/// `GET /timers/{id}/history`: the timer's commands and fires, oldest first.
pub async fn history(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<AppQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let scope = s.access.scope(&headers, Need::Read)?;
    let (_, _, t) = find(&s, &scope, &id, q?.0.application).await?;
    Ok(Json(json!({"timer_id": id, "history": t.history})))
}

/// The query of `GET /timers/{id}/next`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NextQuery {
    application: Option<String>,
    n: Option<usize>,
}

/// Most instants `GET /timers/{id}/next` answers.
const MAX_NEXT: usize = 1_000;

/// `GET /timers/{id}/next?n=10`: the timer's next due instants (a cron timer's from its
/// schedule, computed by the code the trigger fires by, after its last fire and now; a
/// one-shot timer's due; none unless it is scheduled), on the zone's wall clock with the
/// offset changes noted.
pub async fn next(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    q: Result<Query<NextQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let scope = s.access.scope(&headers, Need::Read)?;
    let q = q?.0;
    let n = q.n.unwrap_or(10).clamp(1, MAX_NEXT);
    let (_, _, t) = find(&s, &scope, &id, q.application).await?;
    let dues = next_dues(&s.apps, &id, &t, crate::now_ms(), n).map_err(ApiError::internal)?;
    Ok(Json(
        json!({"timer_id": id, "state": t.state, "next": dues}),
    ))
}

/// The next `n` due instants of timer `id`, `t`, after `now_ms` (see [`next`]), under the
/// calendars of `apps`.
fn next_dues(
    apps: &crate::apps::Apps,
    id: &str,
    t: &TimerView,
    now_ms: i64,
    n: usize,
) -> Result<Vec<Value>, String> {
    if t.state != Some(TimerState::Scheduled) {
        return Ok(Vec::new());
    }
    let Some(schedule) = t.schedule.clone().filter(|_| t.cron) else {
        return Ok(t.due_ms.map(|d| json!({"due_ms": d})).into_iter().collect());
    };
    let spec: crate::schedule::CronSpec =
        serde_json::from_value(schedule).map_err(|e| format!("unreadable schedule: {e}"))?;
    let left = spec
        .max_fires
        .map(|m| (m - t.fires.unwrap_or(0)).max(0) as usize);
    let after = now_ms.max(t.last_fired_due_ms.unwrap_or(i64::MIN)) - 1;
    let dues = crate::preview::next(
        &spec,
        id,
        apps.calendar_of(&spec),
        after,
        left.map_or(n, |l| l.min(n)),
    )?;
    Ok(dues
        .into_iter()
        .map(|d| json!({"due_ms": d.due_ms, "local": d.local, "note": d.note}))
        .collect())
}

/// The query of a listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    application: Option<String>,
    state: Option<String>,
    #[serde(default)]
    prefix: String,
    cursor: Option<String>,
    limit: Option<usize>,
}

/// `GET /timers?application=&state=&prefix=&cursor=&limit=`: a page of timers and the
/// cursor of the next (`null` at the end).
pub async fn list(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    listing(&s, &headers, q?.0, false).await
}

/// `GET /dead-letters?application=&cursor=&limit=`: the same, of the timers with
/// dead-lettered fires.
pub async fn dead_letters(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    listing(&s, &headers, q?.0, true).await
}

/// A page of the timers `q` asks for (only those with dead letters when `dead`).
async fn listing(
    s: &AdminState,
    headers: &HeaderMap,
    q: ListQuery,
    dead: bool,
) -> Result<Json<Value>, ApiError> {
    let scope = s.access.scope(headers, Need::Read)?;
    let state = match q.state.as_deref() {
        None | Some("") => None,
        Some(st) => Some(TimerState::parse(st).ok_or_else(|| {
            ApiError::bad_request(format!("unknown state {st:?} (SCHEDULED, PAUSED, FIRED, CANCELLED, COMPLETED, DEAD_LETTERED)"))
        })?),
    };
    let f = ListFilter {
        application: scope.application(q.application)?,
        state,
        id_prefix: q.prefix,
        dead_letters: dead,
        limit: q.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT),
    };
    let lane = s.lanes.of(f.application.as_deref());
    let (timers, next) = page(lane, q.cursor.as_deref(), &f).await?;
    Ok(Json(json!({"timers": timers, "cursor": next})))
}

/// About `f.limit` timers of `lane` from API cursor `cursor` (`PARTITION:STORE_CURSOR`),
/// partition after partition, and the cursor after them.
pub async fn page(
    s: &AdminLane,
    cursor: Option<&str>,
    f: &ListFilter,
) -> Result<(Vec<TimerSummary>, Option<String>), ApiError> {
    let bad = || ApiError::bad_request("cursor: use the cursor a listing answered");
    let (mut p, mut inner) = match cursor {
        None | Some("") => (0, String::new()),
        Some(c) => {
            let (p, rest) = c.split_once(':').ok_or_else(bad)?;
            (p.parse::<i32>().map_err(|_| bad())?, rest.to_string())
        }
    };
    let partitions = s.partitions;
    let mut out = Vec::new();
    while p < partitions && out.len() < f.limit {
        let want = ListFilter {
            limit: f.limit - out.len(),
            ..f.clone()
        };
        let (next, timers) = s.store.list_page(p, &inner, &want).await?;
        out.extend(timers);
        match next {
            Some(n) => inner = n,
            None => (p, inner) = (p + 1, String::new()),
        }
    }
    Ok((out, (p < partitions).then(|| format!("{p}:{inner}"))))
}

/// `GET /applications`: per application, its timers per state (SCHEDULED and PAUSED now;
/// done states since each partition's last rebuild).
pub async fn applications(
    State(s): State<Arc<AdminState>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let scope = s.access.scope(&headers, Need::Read)?;
    let mut apps: BTreeMap<String, BTreeMap<TimerState, i64>> = BTreeMap::new();
    for lane in s.lanes.all() {
        for p in 0..lane.partitions {
            for ((app, st), n) in lane.store.state_counts(p).await? {
                if scope.allows(&app) {
                    *apps.entry(app).or_default().entry(st).or_default() += n;
                }
            }
        }
    }
    Ok(Json(json!({ "applications": apps })))
}

/// Payload bytes a look-up shows (as text, lossy).
const PAYLOAD_PREVIEW: usize = 256;

/// What a timer delivers: topic, key, headers, mode and the payload's start.
fn callback_json(c: &crate::command::Callback) -> Value {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    json!({
        "topic": c.topic,
        "key": c.key.as_deref().map(text),
        "headers": c.headers,
        "mode": c.mode,
        "payload_preview": text(&c.payload[..c.payload.len().min(PAYLOAD_PREVIEW)]),
    })
}

/// The JSON of a looked-up timer (in `partition` of commands topic `topic`).
fn timer_json(id: &str, topic: &str, partition: i32, t: &TimerView) -> Value {
    let def = t.def.as_ref();
    json!({
        "timer_id": id,
        "topic": topic,
        "partition": partition,
        "version": t.version,
        "state": t.state,
        "due_ms": t.due_ms,
        "request_id": t.request_id,
        "application": def.map(|d| d.application.clone()),
        "callback_topic": def.and_then(|d| d.callback.topic.clone()),
        "payload_bytes": def.map(|d| d.callback.payload.len()),
        "callback": def.map(|d| callback_json(&d.callback)),
        "kind": if t.cron { "CRON" } else { "ONCE" },
        "schedule": t.schedule,
        "fires": t.fires,
        "last_fired_due_ms": t.last_fired_due_ms,
        "last_fire": t.last_fire,
        "materialised_through_ms": t.materialised_through_ms,
        "dead_letters": t.dead_letters.count,
        "last_dead_letter_due_ms": t.dead_letters.last_due_ms,
        "last_dead_letter_reason": t.dead_letters.last_reason,
        "history": t.history,
    })
}
