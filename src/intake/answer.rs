//! The answer stage: results are enqueued in batch order; a separate task waits for the
//! broker's acknowledgements (re-sending failed results) and only then stores the batch's
//! offsets, so waiting for one batch's acknowledgements overlaps applying the next.
//!
//! Invariant: a command's offset is stored (and so committed) only after Redis applied it
//! and its result was acknowledged; batches are confirmed in the order they were applied,
//! so stored offsets only grow.

use super::Handled;
use crate::metrics::Metrics;
use crate::ownership::IntakeContext;
use crate::retry::Retry;
use crate::shutdown::CancellationToken;
use crate::sink::{delivered, Sink, SinkError};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::DeliveryFuture;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Batches waiting for acknowledgements at most; the intake waits when more are.
pub(crate) const DEPTH: usize = 4;

/// One batch's results, enqueued to the producer.
pub(crate) struct Batch {
    handled: Vec<Handled>,
    sent: Vec<Result<DeliveryFuture, SinkError>>,
}

/// Enqueues the result of every handled record (in order) and counts the outcomes.
pub(crate) async fn send(sink: &Sink, metrics: &Metrics, handled: Vec<Handled>) -> Batch {
    let mut sent = Vec::with_capacity(handled.len());
    for h in &handled {
        let outcome = h.result.outcome.label();
        metrics.commands.with_label_values(&[outcome]).inc();
        sent.push(sink.send_result(h.key.as_deref(), &h.result).await);
    }
    Batch { handled, sent }
}

/// Confirms batches in order until the channel closes (the intake stopped) or shutdown
/// interrupts a retry.
pub(crate) async fn confirm(
    mut batches: mpsc::Receiver<Batch>,
    sink: Arc<Sink>,
    consumer: Arc<StreamConsumer<IntakeContext>>,
    topic: String,
    token: CancellationToken,
) {
    let retry = Retry::new("command result", &token);
    while let Some(batch) = batches.recv().await {
        let mut next_offsets: HashMap<i32, i64> = HashMap::new();
        for (h, sent) in batch.handled.iter().zip(batch.sent) {
            // The first try waits for the record already enqueued; retries send it again.
            let mut first = Some(sent);
            let sink = &sink;
            let resend = || {
                let first = first.take();
                async move {
                    match first {
                        Some(sent) => confirmed(sent).await,
                        None => {
                            confirmed(sink.send_result(h.key.as_deref(), &h.result).await).await
                        }
                    }
                }
            };
            if retry.forever(resend).await.is_none() {
                return;
            }
            next_offsets.insert(h.partition, h.offset);
        }
        for (p, off) in next_offsets {
            if let Err(e) = consumer.store_offset(&topic, p, off) {
                tracing::debug!(partition = p, error = %e, "offset not stored (partition gone)");
            }
        }
    }
}

/// Waits for an enqueued record's acknowledgement.
async fn confirmed(sent: Result<DeliveryFuture, SinkError>) -> Result<(), SinkError> {
    delivered(sent?).await.map(|_| ())
}
