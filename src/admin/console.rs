//! The web console: three files embedded in the binary (no Node build), served by the
//! admin port under `/console/`. The page is a client of the admin API; it never needs a
//! token to load (the token, when the port has them, is typed into the page and sent with
//! each API call).

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/app.js");
const STYLE: &str = include_str!("console/app.css");

/// `GET /`: to the console.
pub async fn root() -> Redirect {
    Redirect::to("/console/")
}

/// `GET /console/`: the page.
pub async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

/// `GET /console/app.js`.
pub async fn script() -> Response {
    file("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console/app.css`.
pub async fn style() -> Response {
    file("text/css; charset=utf-8", STYLE)
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
