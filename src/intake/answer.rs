//! The answer stage: results are enqueued in batch order; a separate task waits for the
//! broker's acknowledgements (re-sending failed results) and only then stores the batch's
//! offsets, so waiting for one batch's acknowledgements overlaps applying the next.
//!
//! Invariant: a command's offset is stored (and so committed) only after Redis applied it
//! and its result was acknowledged; batches are confirmed in the order they were applied,
//! so stored offsets only grow.
//!
//! Every answer fits: a result the broker refuses as too large is replaced by a minimal
//! one (identity cut, no record key); one that still does not fit is logged, counted
//! (`commands_total{outcome="unanswerable"}`) and passed over, never holding the partition.

use super::Handled;
use crate::apps::Applications;
use crate::command::CommandResult;
use crate::metrics::Metrics;
use crate::ownership::IntakeContext;
use crate::retry::{Retry, Stopped};
use crate::shutdown::CancellationToken;
use crate::sink::{delivered, Sink, SinkError};
use crate::store::{Store, Written};
use crate::validate::echo;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::DeliveryFuture;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Batches waiting for acknowledgements at most; the intake waits when more are.
pub(crate) const DEPTH: usize = 4;

/// One batch's results and state records, enqueued to the producer.
pub(crate) struct Batch {
    handled: Vec<Handled>,
    sent: Vec<Result<DeliveryFuture, SinkError>>,
    /// The states of the timers the batch changed, to write.
    pub(super) states: Vec<Written>,
}

/// Enqueues the result of every handled record (in order) and counts the outcomes.
/// Per application too, when `apps` names applications.
pub(crate) async fn send(
    sink: &Sink,
    metrics: &Metrics,
    apps: &Applications,
    topic: &str,
    handled: Vec<Handled>,
) -> Batch {
    let mut sent = Vec::with_capacity(handled.len());
    let per_app = apps.names_any();
    for h in &handled {
        let outcome = match h.forward {
            Some(_) => "forwarded",
            None => h.result.outcome.label(),
        };
        metrics
            .commands
            .with_label_values(&[kind_label(&h.result), outcome])
            .inc();
        if per_app {
            let app = apps.label(h.result.application.as_deref().unwrap_or_default());
            metrics
                .app_commands
                .with_label_values(&[app, outcome])
                .inc();
        }
        sent.push(answer(sink, topic, h).await);
    }
    Batch {
        handled,
        sent,
        states: Vec::new(),
    }
}

/// Enqueues a record's answer: its result, or the command itself forwarded to its key's
/// partition (whose owner answers it).
async fn answer(sink: &Sink, topic: &str, h: &Handled) -> Result<DeliveryFuture, SinkError> {
    match &h.forward {
        Some(f) => {
            let from = format!("{}/{}", h.partition, h.offset);
            let key = h.key.as_deref();
            sink.send_forward(topic, f.partition, key, &f.value, &from, h.trace.as_ref())
                .await
        }
        None => {
            sink.send_result(h.result_key(), &h.result, h.trace.as_ref())
                .await
        }
    }
}

/// Confirms batches in order until the channel closes (the intake stopped) or shutdown
/// interrupts a retry.
pub(crate) async fn confirm(
    mut batches: mpsc::Receiver<Batch>,
    store: Store,
    sink: Arc<Sink>,
    consumer: Arc<StreamConsumer<IntakeContext>>,
    topic: String,
    metrics: Arc<Metrics>,
    token: CancellationToken,
) {
    let retry = Retry::new("command result", &token);
    let written = Retry::new("state written", &token)
        .counting(metrics.redis_errors.with_label_values(&["written"]));
    while let Some(batch) = batches.recv().await {
        let states = super::states::send(&sink, batch.states).await;
        if !super::states::confirm(&store, &sink, states, &metrics, &written).await {
            return;
        }
        let mut next_offsets: HashMap<i32, i64> = HashMap::new();
        for (h, sent) in batch.handled.iter().zip(batch.sent) {
            // The first try waits for the record already enqueued; retries send it again.
            let mut first = Some(sent);
            let (sink, topic, metrics) = (&sink, &topic, &metrics);
            let resend = || {
                let first = first.take();
                async move {
                    let r = match first {
                        Some(sent) => confirmed(sent).await,
                        None => confirmed(answer(sink, topic, h).await).await,
                    };
                    if let Err(e) = &r {
                        sink.heal(e);
                        metrics.kafka_errors.with_label_values(&["result"]).inc();
                    }
                    r
                }
            };
            match retry.run(SinkError::does_not_fit, resend).await {
                Ok(()) => {}
                Err(Stopped::Fatal(e)) => {
                    let small = minimal(&h.result, &e);
                    let send_small =
                        || async { confirmed(sink.send_result(None, &small, None).await).await };
                    match retry.run(SinkError::does_not_fit, send_small).await {
                        Ok(()) => {}
                        Err(Stopped::Fatal(e)) => {
                            metrics
                                .commands
                                .with_label_values(&[kind_label(&h.result), "unanswerable"])
                                .inc();
                            tracing::error!(partition = h.partition, offset = h.offset, error = %e, "no result fits; the command stays unanswered");
                        }
                        Err(Stopped::Shutdown) => return,
                    }
                }
                Err(Stopped::Shutdown) => return,
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

/// The smallest result that still says what happened to the command.
fn minimal(r: &CommandResult, e: &SinkError) -> CommandResult {
    let cut = |s: &Option<String>| s.as_deref().map(|s| echo(s.as_bytes()));
    CommandResult {
        request_id: cut(&r.request_id),
        timer_id: cut(&r.timer_id),
        application: cut(&r.application),
        reason: Some(format!(
            "the full result could not be produced ({e}); this one is cut; reason: {}",
            r.reason
                .as_deref()
                .map(|s| echo(s.as_bytes()))
                .unwrap_or_default()
        )),
        ..r.clone()
    }
}

/// Waits for an enqueued record's acknowledgement.
pub(super) async fn confirmed(sent: Result<DeliveryFuture, SinkError>) -> Result<(), SinkError> {
    delivered(sent?).await.map(|_| ())
}

/// The `kind` label of a result: the command kind, `unknown` when it did not decode.
/// Bounded: decoded kinds are the enum's names.
fn kind_label(r: &CommandResult) -> &str {
    r.kind.as_deref().unwrap_or("unknown")
}
