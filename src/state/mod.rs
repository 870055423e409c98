//! The state topic: Redis is a cache that Kafka can always rebuild.
//!
//! Redis holds the timers of each owned commands partition; the compacted state topic
//! (partitioned like the commands topic) holds, per partition, the latest state of every
//! timer that can still fire (key = timer id; a tombstone once it cannot) and the
//! partition's **checkpoints** (empty key). Nothing is written per command or per fire:
//!
//! * the Lua scripts add every timer they change to the partition's dirty set;
//! * about once a second the partition's [`checkpoint`] task takes the dirty timers'
//!   fields (in pages), produces them, and then a checkpoint: the highest command offset
//!   reflected, and "every fire due up to T was acknowledged except these in flight";
//!   Redis keeps the checkpoint's sequence number;
//! * when Redis lost the partition (emptied, or back from data older than the last
//!   checkpoint), [`rebuild`] reads the partition of the state topic, restores every
//!   timer under the last checkpoint's fire watermark, and the commands after the
//!   checkpoint are replayed before the partition's trigger starts again.
//!
//! What a Redis loss can cost: fires acknowledged after the last checkpoint fire again
//! (about one checkpoint interval of fires); nothing is lost, nothing fires early, and
//! the commands topic's retention only needs to cover the interval.

pub mod checkpoint;
pub mod rebuild;
mod scan;
pub mod tail;

use crate::timer::Checkpoint;
use std::collections::HashMap;

/// Errors of the state topic's tasks.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Redis failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The producer failed.
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    /// Reading the state topic failed.
    #[error("reading the state topic: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The state topic sent nothing for a long time while a rebuild read it.
    #[error("the state topic {0} partition {1} sent nothing for 30 s")]
    Stalled(String, i32),
    /// A record does not decode.
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
}

impl crate::retry::Retryable for StateError {
    /// Whatever its part says; the broker's read errors are transient.
    fn is_retryable(&self) -> bool {
        match self {
            StateError::Store(e) => e.is_retryable(),
            StateError::Sink(e) => e.is_retryable(),
            StateError::Kafka(_) | StateError::Stalled(..) => true,
            StateError::Codec(_) => false,
        }
    }
}

impl StateError {
    /// Whether another owner took the partition (the end of its tasks).
    pub fn is_fenced(&self) -> bool {
        matches!(self, StateError::Store(e) if e.is_fenced())
    }
}

/// The latest record per key of one state partition, read in offset order.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Timer id to its latest state (a tombstone removes it).
    pub timers: HashMap<String, Vec<u8>>,
    /// The last checkpoint.
    pub checkpoint: Option<Checkpoint>,
}

impl Snapshot {
    /// Folds in the next record: a checkpoint (empty key), a timer's state, or its
    /// tombstone (no value). Records without a key are ignored.
    pub fn add(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), StateError> {
        let Some(key) = key else {
            return Ok(());
        };
        if key.is_empty() {
            if let Some(v) = value {
                self.checkpoint = Some(crate::codec::decode_checkpoint(v)?);
            }
            return Ok(());
        }
        let id = String::from_utf8_lossy(key).into_owned();
        match value {
            Some(v) => self.timers.insert(id, v.to_vec()),
            None => self.timers.remove(&id),
        };
        Ok(())
    }

    /// Where the commands must be replayed from: after the checkpoint's offset.
    pub fn replay_from(&self) -> i64 {
        self.checkpoint
            .as_ref()
            .map_or(0, |c| c.commands_offset + 1)
    }

    /// The due instants of `id`'s in-flight fires of version `version`, per the last
    /// checkpoint (members `version:due:id`).
    pub fn in_flight(&self, id: &str, version: &[u8]) -> Vec<i64> {
        let Some(c) = &self.checkpoint else {
            return vec![];
        };
        c.in_flight
            .iter()
            .filter_map(|m| {
                let (v, rest) = m.split_once(':')?;
                let (due, mid) = rest.split_once(':')?;
                (mid == id && v.as_bytes() == version).then(|| due.parse().ok())?
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_checkpoint;

    #[test]
    fn the_latest_record_per_key_wins_and_tombstones_remove() {
        let mut s = Snapshot::default();
        s.add(Some(b"a"), Some(b"1")).unwrap();
        s.add(Some(b"b"), Some(b"1")).unwrap();
        s.add(Some(b"a"), Some(b"2")).unwrap();
        s.add(Some(b"b"), None).unwrap();
        s.add(None, Some(b"ignored")).unwrap();
        assert_eq!(s.timers.len(), 1);
        assert_eq!(s.timers["a"], b"2");
        assert_eq!(s.replay_from(), 0);
        let c = Checkpoint {
            sequence: 4,
            commands_offset: 41,
            in_flight: vec!["7:1000:a".into(), "6:900:a".into(), "7:1100:x:y".into()],
            ..Default::default()
        };
        s.add(Some(b""), Some(&encode_checkpoint(&c).unwrap()))
            .unwrap();
        assert_eq!(s.replay_from(), 42);
        assert_eq!(s.in_flight("a", b"7"), vec![1000]);
        assert_eq!(s.in_flight("x:y", b"7"), vec![1100]);
        assert!(s.add(Some(b""), Some(b"\x01")).is_err());
    }
}
