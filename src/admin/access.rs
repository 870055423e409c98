//! Who may use the admin API. On a loopback address with no tokens configured, anyone on
//! the machine may (as before tokens existed). Once tokens are configured, every timer
//! route needs one (`Authorization: Bearer TOKEN`); a token can be limited to one
//! application, whose timers alone it reads and changes. Bound to another address with
//! no tokens, reads stay open and writes are refused. Health, readiness, metrics and the
//! console's files never need a token. Tokens are never logged.

use super::error::ApiError;
use axum::http::HeaderMap;

/// One configured token: `SECRET` (every application) or `APP=SECRET`.
#[derive(Clone)]
pub struct Token {
    secret: String,
    application: Option<String>,
}

impl std::fmt::Debug for Token {
    /// Shows the application only: a secret never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({})", self.application.as_deref().unwrap_or("*"))
    }
}

impl std::str::FromStr for Token {
    type Err = String;
    fn from_str(s: &str) -> Result<Token, String> {
        let (application, secret) = match s.split_once('=') {
            Some((app, secret)) => (Some(app.to_string()), secret),
            None => (None, s),
        };
        if secret.len() < 16 {
            return Err("an admin token must be at least 16 characters".into());
        }
        if application.as_deref() == Some("") {
            return Err("APP=SECRET needs an application name".into());
        }
        Ok(Token {
            secret: secret.to_string(),
            application,
        })
    }
}

/// What a request may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every application's timers.
    All,
    /// This application's timers only.
    Application(String),
}

impl Scope {
    /// Whether timers of `application` are within reach.
    pub fn allows(&self, application: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Application(a) => a == application,
        }
    }

    /// The application a request names, checked against the scope (a scoped token
    /// implies its own application when the request names none).
    pub fn application(&self, asked: Option<String>) -> Result<Option<String>, ApiError> {
        match (self, asked) {
            (Scope::All, asked) => Ok(asked),
            (Scope::Application(a), None) => Ok(Some(a.clone())),
            (Scope::Application(a), Some(asked)) if *a == asked => Ok(Some(asked)),
            (Scope::Application(_), Some(asked)) => Err(ApiError::forbidden(format!(
                "this token is limited to another application than {asked:?}"
            ))),
        }
    }
}

/// Whether a route reads or changes timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Look-ups, listings, counts.
    Read,
    /// Commands.
    Write,
}

/// The access rules of one admin port.
#[derive(Debug, Clone)]
pub struct Access {
    tokens: Vec<Token>,
    loopback: bool,
}

impl Access {
    /// The rules for a port bound to a loopback address or not, with `tokens`.
    pub fn new(tokens: Vec<Token>, loopback: bool) -> Access {
        Access { tokens, loopback }
    }

    /// What a request with `headers` may do on a route that needs `need`.
    pub fn scope(&self, headers: &HeaderMap, need: Need) -> Result<Scope, ApiError> {
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if self.tokens.is_empty() {
            return match (self.loopback, need) {
                (true, _) | (false, Need::Read) => Ok(Scope::All),
                (false, Need::Write) => Err(ApiError::forbidden(
                    "writes on a non-loopback admin address need --admin-token",
                )),
            };
        }
        let Some(given) = bearer else {
            return Err(ApiError::unauthorized("send Authorization: Bearer TOKEN"));
        };
        let found = self
            .tokens
            .iter()
            .find(|t| same(t.secret.as_bytes(), given.as_bytes()))
            .ok_or_else(|| ApiError::unauthorized("unknown token"))?;
        Ok(match &found.application {
            None => Scope::All,
            Some(app) => Scope::Application(app.clone()),
        })
    }
}

/// Compares in time independent of where the inputs differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = token {
            h.insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        h
    }

    #[test]
    fn tokens_decide_what_a_request_may_do() {
        let open = Access::new(vec![], true);
        assert_eq!(open.scope(&headers(None), Need::Write).unwrap(), Scope::All);
        let exposed = Access::new(vec![], false);
        assert_eq!(
            exposed.scope(&headers(None), Need::Read).unwrap(),
            Scope::All
        );
        assert_eq!(
            exposed
                .scope(&headers(None), Need::Write)
                .unwrap_err()
                .status,
            403
        );
        let tokens = vec![
            "all-the-apps-0123456789".parse().unwrap(),
            "billing=billing-only-0123456789".parse().unwrap(),
        ];
        let guarded = Access::new(tokens, false);
        assert_eq!(
            guarded
                .scope(&headers(None), Need::Read)
                .unwrap_err()
                .status,
            401
        );
        let wrong = guarded.scope(&headers(Some("all-the-apps-012345678X")), Need::Read);
        assert_eq!(wrong.unwrap_err().status, 401);
        let all = guarded.scope(&headers(Some("all-the-apps-0123456789")), Need::Write);
        assert_eq!(all.unwrap(), Scope::All);
        let billing = guarded
            .scope(&headers(Some("billing-only-0123456789")), Need::Write)
            .unwrap();
        assert!(billing.allows("billing") && !billing.allows("orders"));
        assert_eq!(
            billing.application(None).unwrap().as_deref(),
            Some("billing")
        );
        assert_eq!(
            billing
                .application(Some("orders".into()))
                .unwrap_err()
                .status,
            403
        );
        assert!("short".parse::<Token>().is_err());
        let t: Token = "billing=billing-only-0123456789".parse().unwrap();
        assert_eq!(format!("{t:?}"), "Token(billing)", "no secret in Debug");
    }
}
