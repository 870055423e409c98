//! `ktimer timers get | list | history | pause | resume | cancel | fire-now | apps`: a client of the
//! admin API, so the command line, the console and scripts share one path.

use crate::config::{TimersAction, TimersArgs};
use anyhow::Context;
use serde_json::Value;

/// Runs one `ktimer timers` action and prints its answer.
pub async fn run(args: TimersArgs) -> anyhow::Result<()> {
    let api = Api {
        base: args.admin_url.trim_end_matches('/').to_string(),
        token: args.token,
        http: reqwest::Client::new(),
    };
    let app = args.application.as_deref();
    match args.action {
        TimersAction::Get { id } => {
            print(&api.call(reqwest::Method::GET, &timer(&id, "", app)).await?)
        }
        TimersAction::History { id } => print(
            &api.call(reqwest::Method::GET, &timer(&id, "/history", app))
                .await?,
        ),
        TimersAction::Apps => print(&api.call(reqwest::Method::GET, "/applications").await?),
        TimersAction::Pause { id } => act(&api, &id, "pause", app).await?,
        TimersAction::Resume { id } => act(&api, &id, "resume", app).await?,
        TimersAction::Cancel { id } => act(&api, &id, "cancel", app).await?,
        TimersAction::FireNow { id } => act(&api, &id, "fire-now", app).await?,
        TimersAction::List {
            state,
            prefix,
            limit,
        } => {
            let mut query = vec![("prefix", prefix)];
            query.extend(args.application.map(|a| ("application", a)));
            query.extend(state.map(|s| ("state", s)));
            list(&api, query, limit).await?
        }
    }
    Ok(())
}

/// The admin API of one instance.
struct Api {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Api {
    /// Calls `path`; the JSON answer, or an error with the API's reason.
    async fn call(&self, method: reqwest::Method, path: &str) -> anyhow::Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("calling {} (is --admin-url right?)", self.base))?;
        let status = resp.status();
        let v: Value = resp.json().await.context("reading the answer")?;
        if status.is_client_error() || status.is_server_error() {
            anyhow::bail!(
                "{status}: {}",
                v["reason"].as_str().unwrap_or("(no reason)")
            );
        }
        Ok(v)
    }
}

/// `/timers/ID` (the id percent-encoded) and `rest`, with `?application=APP` when given.
fn timer(id: &str, rest: &str, app: Option<&str>) -> String {
    let mut url = reqwest::Url::parse("http://x/timers/").expect("static url");
    url.path_segments_mut()
        .expect("base")
        .pop_if_empty()
        .push(id);
    let mut path = format!("{}{rest}", url.path());
    if let Some(app) = app {
        url.query_pairs_mut().append_pair("application", app);
        path = format!("{path}?{}", url.query().unwrap_or_default());
    }
    path
}

async fn act(api: &Api, id: &str, action: &str, app: Option<&str>) -> anyhow::Result<()> {
    let path = timer(id, &format!("/{action}"), app);
    print(&api.call(reqwest::Method::POST, &path).await?);
    Ok(())
}

/// Prints timers a page at a time until `limit` or the end.
async fn list(api: &Api, query: Vec<(&str, String)>, limit: usize) -> anyhow::Result<()> {
    let mut cursor = String::new();
    let mut shown = 0;
    loop {
        let mut url = reqwest::Url::parse("http://x/timers").expect("static url");
        url.query_pairs_mut()
            .extend_pairs(&query)
            .append_pair("cursor", &cursor)
            .append_pair("limit", &limit.min(1000).to_string());
        let path = format!("{}?{}", url.path(), url.query().unwrap_or_default());
        let v = api.call(reqwest::Method::GET, &path).await?;
        for t in v["timers"].as_array().into_iter().flatten() {
            if shown == limit {
                return Ok(());
            }
            println!(
                "{}\t{}\tdue={}\tapp={}",
                t["timer_id"].as_str().unwrap_or_default(),
                t["state"].as_str().unwrap_or("?"),
                t["due_ms"],
                t["application"].as_str().unwrap_or_default()
            );
            shown += 1;
        }
        match v["cursor"].as_str() {
            Some(c) if shown < limit => cursor = c.to_string(),
            _ => return Ok(()),
        }
    }
}

fn print(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
