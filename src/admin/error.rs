//! The admin API's errors: JSON `{"error": ..., "reason": ...}` with the status that says
//! what went wrong.

use crate::store::StoreError;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// An error answered to an admin API caller.
#[derive(Debug, thiserror::Error)]
#[error("{error}: {reason}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A short, stable name (`not_found`, `bad_request`, ...).
    pub error: &'static str,
    /// What is wrong, for a person.
    pub reason: String,
}

impl ApiError {
    /// 400: the request says something the API cannot do.
    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", reason)
    }

    /// 404: no such route or timer.
    pub fn not_found(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", reason)
    }

    /// 401: the route needs a token and the request has none (or an unknown one).
    pub fn unauthorized(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", reason)
    }

    /// 403: the token does not allow this.
    pub fn forbidden(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", reason)
    }

    /// 503: Redis or the broker cannot answer now; try again.
    pub fn unavailable(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", reason)
    }

    /// 500: what Redis holds of the timer cannot be read (its schedule, say).
    pub fn internal(reason: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", reason)
    }

    fn new(status: StatusCode, error: &'static str, reason: impl Into<String>) -> ApiError {
        ApiError {
            status,
            error,
            reason: reason.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": self.error, "reason": self.reason});
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::unavailable(format!("redis: {e}"))
    }
}

impl From<JsonRejection> for ApiError {
    /// A body that is not the JSON asked for (400), of the wrong type (415), or too
    /// large (413).
    fn from(r: JsonRejection) -> ApiError {
        let error = match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            _ => "bad_request",
        };
        let status = match r.status() {
            StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
            s => s,
        };
        ApiError::new(status, error, r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request(r.body_text())
    }
}

/// The answer to any route the API does not have.
pub async fn no_route() -> ApiError {
    ApiError::not_found("no such route; see the admin API in docs/operations.md")
}
