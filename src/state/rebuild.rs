//! Rebuilding a partition's Redis data from its state-topic partition: read every record
//! up to the end (the latest per key), restore the timers under the last checkpoint's
//! fire watermark, record the checkpoint's command offset and sequence. The caller then
//! replays the commands after that offset before the partition fires again.

use super::scan::{scan, scanner};
use super::{Snapshot, StateError};
use crate::store::{Restore, Restored, Store};
use crate::timer::TimerFields;
use futures::{StreamExt, TryStreamExt};
use rdkafka::config::ClientConfig;
use std::time::{Duration, Instant};

/// Timers restored per script call.
const RESTORE_BATCH: usize = 500;
/// Restore calls in flight at once.
const RESTORE_IN_FLIGHT: usize = 4;

/// What a rebuild did.
#[derive(Debug)]
pub struct Rebuilt {
    /// Timers restored.
    pub timers: usize,
    /// Records read from the state topic.
    pub records: u64,
    /// The first command offset to replay.
    pub replay_from: i64,
    /// The checkpoint sequence restored (0 without a checkpoint).
    pub sequence: i64,
    /// How long reading the state topic took.
    pub read: Duration,
    /// How long reading and restoring took.
    pub elapsed: Duration,
}

/// Rebuilds `partition` (held at `epoch`) from partition `partition` of `topic`, read with
/// a consumer of configuration `reader`. With `wipe`, the partition's old keys are
/// deleted first (Redis came back with data older than the last checkpoint).
pub async fn rebuild(
    partition: i32,
    epoch: i64,
    store: &Store,
    reader: &ClientConfig,
    topic: &str,
    wipe: bool,
) -> Result<Rebuilt, StateError> {
    let started = Instant::now();
    let (reader, t) = (reader.clone(), topic.to_string());
    let (snapshot, records) = tokio::task::spawn_blocking(move || read(&reader, &t, partition))
        .await
        .expect("the state reader does not panic")?;
    let read_elapsed = started.elapsed();
    if wipe {
        store.wipe(partition).await?;
    }
    let through = snapshot
        .checkpoint
        .as_ref()
        .map_or(i64::MIN, |c| c.acked_through_ms);
    let mut batches = Vec::with_capacity(snapshot.timers.len() / RESTORE_BATCH + 1);
    let mut batch = Vec::with_capacity(RESTORE_BATCH);
    for (id, value) in &snapshot.timers {
        let fields = crate::codec::decode_timer_state(value)?;
        batch.push(restore_of(&snapshot, id, fields));
        if batch.len() == RESTORE_BATCH {
            batches.push(std::mem::take(&mut batch));
        }
    }
    batches.push(batch);
    // Batches are independent: several in flight keep Redis busy between round trips.
    let restored: Vec<i64> = futures::stream::iter(batches.into_iter().map(|b| {
        let store = store.clone();
        async move { store.restore(partition, epoch, &b, through, None).await }
    }))
    .buffer_unordered(RESTORE_IN_FLIGHT)
    .try_collect()
    .await?;
    let sequence = snapshot.checkpoint.as_ref().map_or(0, |c| c.sequence);
    let replay_from = snapshot.replay_from();
    // Last: the offset and sequence say the partition is complete; the fence keeps the
    // replayed commands from firing again what the checkpoint says was acknowledged.
    let last = Restored {
        applied: replay_from - 1,
        sequence,
        checkpoint: snapshot.checkpoint.as_ref(),
    };
    store
        .restore(partition, epoch, &[], through, Some(&last))
        .await?;
    let timers = restored.iter().sum::<i64>() as usize;
    Ok(Rebuilt {
        timers,
        records,
        replay_from,
        sequence,
        read: read_elapsed,
        elapsed: started.elapsed(),
    })
}

/// What to restore of timer `id`: its fields and its in-flight fires.
fn restore_of(snapshot: &Snapshot, id: &str, t: TimerFields) -> Restore {
    let version = t.fields.get(crate::store::keys::field::VERSION);
    Restore {
        timer_id: id.to_string(),
        in_flight: snapshot.in_flight(id, version.map_or(&[][..], |v| v.as_slice())),
        fields: t,
    }
}

/// Reads partition `partition` of `topic` from its start to its end (blocking).
fn read(reader: &ClientConfig, topic: &str, partition: i32) -> Result<(Snapshot, u64), StateError> {
    let mut snapshot = Snapshot::default();
    let consumer = scanner(reader)?;
    let records = scan(&consumer, topic, &[(partition, 0)], |_, key, value| {
        snapshot.add(key, value)
    })?;
    Ok((snapshot, records))
}
