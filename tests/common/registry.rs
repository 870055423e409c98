//! A schema registry stand-in: no registry server can be installed here, so the tests
//! serve the registry's REST calls themselves (register a schema under a subject, fetch a
//! schema by id) on a loopback port, as the Confluent API documents them.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Registry {
    schemas: Mutex<Vec<String>>,
}

/// Registers a schema (`POST /subjects/{subject}/versions`; clients send
/// `application/vnd.schemaregistry.v1+json`, read whatever the content type).
async fn register(
    State(r): State<Arc<Registry>>,
    Path(_subject): Path<String>,
    body: axum::body::Bytes,
) -> Json<serde_json::Value> {
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let schema = body["schema"].as_str().unwrap_or_default().to_string();
    let mut all = r.schemas.lock().unwrap();
    let id = match all.iter().position(|s| *s == schema) {
        Some(i) => i + 1,
        None => {
            all.push(schema);
            all.len()
        }
    };
    Json(serde_json::json!({ "id": id }))
}

/// A schema by id (`GET /schemas/ids/{id}`).
async fn by_id(
    State(r): State<Arc<Registry>>,
    Path(id): Path<usize>,
) -> Result<Json<serde_json::Value>, (StatusCode, Json<serde_json::Value>)> {
    let all = r.schemas.lock().unwrap();
    match id.checked_sub(1).and_then(|i| all.get(i)) {
        Some(s) => Ok(Json(serde_json::json!({ "schema": s }))),
        None => Err((
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error_code": 40403, "message": "Schema not found"})),
        )),
    }
}

/// Starts the registry stand-in; returns its URL.
pub async fn registry() -> String {
    let app = Router::new()
        .route("/subjects/{subject}/versions", post(register))
        .route("/schemas/ids/{id}", get(by_id))
        .with_state(Arc::new(Registry::default()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}
