//! The states the intake writes itself: Redis answered the state of every timer a chunk
//! of commands changed (`apply.lua`), so the state records are produced with the results
//! instead of being read back by the next checkpoint (about half of Redis's work per
//! command when they were).
//!
//! Invariants (with `checkpoint.lua` and `written.lua`):
//! * until its write is confirmed, a timer stays in its apply call's entry of the
//!   partition's `writing` hash: the checkpoints neither answer it (a later state of it,
//!   a fire, must not precede this record) nor reflect a command from the call's first
//!   one on;
//! * an entry confirmed delivered leaves the hash; the timers of one that failed go back
//!   to the dirty set, and the next checkpoint writes their states as they are then;
//! * a write never confirmed (the process died, the partition moved) is handed to the
//!   dirty set when an owner next takes the partition (`acquire.lua`).

use crate::codec::encode_timer_state;
use crate::metrics::Metrics;
use crate::retry::{Retry, Stopped};
use crate::sink::{Sink, SinkError};
use crate::store::{Store, StoreError, Written};
use rdkafka::producer::DeliveryFuture;

/// The state records of one chunk, enqueued to the producer.
pub(crate) struct StateWrites {
    partition: i32,
    epoch: i64,
    first: i64,
    sent: Vec<Result<DeliveryFuture, SinkError>>,
}

/// Enqueues the state record of every timer in `written` (to its partition of the state
/// topic, keyed by the timer id; a tombstone for a timer that ended).
pub(crate) async fn send(sink: &Sink, written: Vec<Written>) -> Vec<StateWrites> {
    let mut writes = Vec::with_capacity(written.len());
    for w in written {
        let mut sent = Vec::with_capacity(w.timers.len() + w.fresh.len());
        // New timers' states as ktimer built them, then the states Redis answered.
        let built = w.fresh.iter().map(|(id, f)| (id, f.encode().map(Some)));
        let answered = w.timers.iter().map(|(id, fields)| {
            let value = fields.as_ref().map(encode_timer_state).transpose();
            (id, value)
        });
        for (id, value) in built.chain(answered) {
            sent.push(match value {
                Ok(v) => {
                    sink.send_state(w.partition, id.as_bytes(), v.as_deref())
                        .await
                }
                Err(e) => Err(SinkError::Codec(e)),
            });
        }
        writes.push(StateWrites {
            partition: w.partition,
            epoch: w.epoch,
            first: w.first,
            sent,
        });
    }
    writes
}

/// Waits for the records of `writes` and confirms them to Redis: delivered, or back to
/// the checkpoints; the confirmations of all partitions at once (one round trip, not one
/// per partition). `false` on shutdown.
pub(crate) async fn confirm(
    store: &Store,
    sink: &Sink,
    writes: Vec<StateWrites>,
    metrics: &Metrics,
    retry: &Retry,
) -> bool {
    let mut outcomes = Vec::with_capacity(writes.len());
    for w in writes {
        let mut all = true;
        for sent in w.sent {
            if let Err(e) = super::answer::confirmed(sent).await {
                sink.heal(&e);
                metrics.kafka_errors.with_label_values(&["state"]).inc();
                all = false;
            }
        }
        outcomes.push(((w.partition, w.epoch), all, w.first));
    }
    let confirms: Vec<_> = outcomes
        .into_iter()
        .map(|(held, all, first)| {
            retry.run(StoreError::is_fenced, move || {
                store.written(held, all, first)
            })
        })
        .collect();
    // Fenced: the new owner took the unconfirmed writes over.
    let done = futures::future::join_all(confirms).await;
    !done.iter().any(|r| matches!(r, Err(Stopped::Shutdown)))
}
