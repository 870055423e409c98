//! What a test received on the fired and results topics, and waiting for it.

use ktimer::command::CommandResult;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// What a test received on the fired and results topics.
pub struct Collected {
    pub fired: mpsc::UnboundedReceiver<Fired>,
    pub results: mpsc::UnboundedReceiver<CommandResult>,
}

/// One fired record as the consumer saw it.
#[derive(Debug, Clone)]
pub struct Fired {
    pub timer_id: String,
    pub fire_id: String,
    pub due_ms: i64,
    pub fired_ms: i64,
    pub received_ms: i64,
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub headers: HashMap<String, String>,
}

impl Collected {
    /// Waits for `n` fired records (fails after `limit`).
    pub async fn fires(&mut self, n: usize, limit: Duration) -> Vec<Fired> {
        take(&mut self.fired, n, limit, "fires").await
    }

    /// Waits for `n` results (fails after `limit`).
    pub async fn results(&mut self, n: usize, limit: Duration) -> Vec<CommandResult> {
        take(&mut self.results, n, limit, "results").await
    }

    /// Waits until the fire of `timer_id` arrives; returns every fire received meanwhile.
    pub async fn fires_until(&mut self, timer_id: &str, limit: Duration) -> Vec<Fired> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.fired.recv()).await {
                Ok(Some(f)) => {
                    let done = f.timer_id == timer_id;
                    out.push(f);
                    if done {
                        return out;
                    }
                }
                _ => panic!("the fire of {timer_id} did not arrive within {limit:?}; got {out:?}"),
            }
        }
    }
}

/// Receives `n` items from `rx`, failing the test if they do not all arrive within `limit`.
async fn take<T: std::fmt::Debug>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    n: usize,
    limit: Duration,
    what: &str,
) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + limit;
    while out.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(x)) => out.push(x),
            _ => panic!(
                "only {} of {n} {what} arrived within {limit:?}: {out:?}",
                out.len()
            ),
        }
    }
    out
}

impl Fired {
    /// The timer version in the fire id `timer_id/version/due_ms`.
    pub fn version(&self) -> i64 {
        self.fire_id.rsplit('/').nth(1).unwrap().parse().unwrap()
    }
}
