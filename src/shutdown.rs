//! The one shutdown mechanism: a [`CancellationToken`] cancelled on SIGTERM or SIGINT.
//!
//! Every loop of the service selects on the token (or a child of it) and drains
//! when it is cancelled.

pub use tokio_util::sync::CancellationToken;

/// Returns a token that is cancelled when the process receives SIGTERM or SIGINT.
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
        }
        t.cancel();
    });
    token
}

/// A spawned task that drains when its token is cancelled.
pub struct Stoppable {
    token: CancellationToken,
    join: tokio::task::JoinHandle<()>,
}

impl Stoppable {
    /// Spawns `work`, which must return soon after `token` is cancelled.
    pub fn spawn(
        token: CancellationToken,
        work: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Stoppable {
        let join = tokio::spawn(work);
        Stoppable { token, join }
    }

    /// Spawns `work` on runtime `rt` (see [`Stoppable::spawn`]).
    pub fn spawn_on(
        rt: &tokio::runtime::Handle,
        token: CancellationToken,
        work: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Stoppable {
        let join = rt.spawn(work);
        Stoppable { token, join }
    }

    /// Whether the task ended (by itself, or after [`Stoppable::stop`]).
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Cancels the task's token and waits for the task to finish.
    pub async fn stop(self) {
        self.token.cancel();
        let _ = self.join.await;
    }
}

/// How long a call still running when its token is cancelled may take to finish: a
/// working Redis or broker answers well within it (a drain keeps what the call did),
/// one that does not answer is left (what such a call did is safe to lose: see
/// [`within_deadline`]), so a task stopped while Redis is cut off does not wait out its
/// reply timeout.
pub const CALL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `work` (which drains once `token` is cancelled) but gives up `deadline` after
/// the cancellation: returns `None` then. What was not finished is safe: unacknowledged
/// fires stay in flight in Redis and uncommitted commands are consumed again by the next
/// owner.
pub async fn within_deadline<T>(
    work: impl std::future::Future<Output = T>,
    token: &CancellationToken,
    deadline: std::time::Duration,
) -> Option<T> {
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => Some(r),
        _ = async {
            token.cancelled().await;
            tokio::time::sleep(deadline).await;
        } => None,
    }
}

/// Makes a panic in any task end the process (exit code 70) after logging it: a task
/// that died would leave the instance half-alive, holding partitions it no longer
/// serves; exiting lets the consumer group move them to a live instance.
pub fn exit_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "a task panicked; exiting so the group moves its partitions");
        default(info);
        std::process::exit(70);
    }));
}
