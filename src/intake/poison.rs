//! Isolating a poisoned command: one that makes a store script fail the same way on every
//! try (a record the script cannot read, a value Lua cannot handle, a bug). Retrying its
//! batch would stop every application of its partition for ever; instead the batch is
//! halved, each half applied in order, until the one command that fails is alone: it is
//! answered rejected with the error ([`Applied::poisoned`]) and the rest is applied.
//! A transient refusal (connection, loading, out of memory, not persisting) is retried
//! as before, never taken for poison ([`StoreError::is_poison`]).
//!
//! Halving keeps each partition's order: the first half is applied before the second,
//! and the offset marks go with the last piece. A failed call may have left writes of
//! the commands before the poisoned one; applying them again is harmless (versions are
//! offsets), as on any replay.

use crate::retry::{Retry, Stopped};
use crate::store::{ApplyResult, Mark, Store, StoreError};
use crate::timer::{Applied, ApplyRequest};
use std::future::Future;
use std::pin::Pin;

/// Applies `reqs` and `marks` at `now_ms`, isolating poisoned commands; `None` only when
/// stopped (shutdown, or the partitions given up).
pub(super) fn apply<'a>(
    store: &'a Store,
    retry: &'a Retry,
    reqs: &'a [ApplyRequest],
    marks: &'a [Mark],
    now_ms: i64,
) -> Pin<Box<dyn Future<Output = Option<ApplyResult>> + Send + 'a>> {
    Box::pin(async move {
        let called = retry
            .run(StoreError::is_poison, || {
                store.apply_writing(reqs, marks, now_ms)
            })
            .await;
        let error = match called {
            Ok(done) => return Some(done),
            Err(Stopped::Shutdown) => return None,
            Err(Stopped::Fatal(e)) => e,
        };
        match reqs {
            // The marks alone failed: nothing to isolate; retried until Redis takes them.
            [] => {
                retry
                    .forever(|| store.apply_writing(reqs, marks, now_ms))
                    .await
            }
            [one] => {
                tracing::error!(partition = one.partition, offset = one.offset, %error,
                    "a command makes the store fail every time: rejected, the partition goes on");
                let (_, moved, written) = apply(store, retry, &[], marks, now_ms).await?;
                Some((vec![Applied::poisoned(&error)], moved, written))
            }
            _ => {
                let (first, second) = reqs.split_at(reqs.len() / 2);
                let (mut applied, mut moved, mut written) =
                    apply(store, retry, first, &[], now_ms).await?;
                let (a, m, w) = apply(store, retry, second, marks, now_ms).await?;
                applied.extend(a);
                moved.extend(m);
                written.extend(w);
                Some((applied, moved, written))
            }
        }
    })
}
