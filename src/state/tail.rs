//! The last checkpoint of state partitions, read back from their end. An owner taking
//! partitions compares each one's sequence with the one Redis holds: Redis restarted
//! from an older snapshot together with the instance (a host reboot) keeps no other trace
//! of the fires it lost, and would fire them again.

use super::scan::{scan, scanner};
use super::StateError;
use crate::codec::decode_checkpoint;
use crate::timer::Checkpoint;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use std::collections::HashMap;
use std::time::Duration;

/// Records read back from the end first; each further step reads eight times as many
/// (a checkpoint follows its pages of states, at most a few thousand records).
const FIRST_WINDOW: i64 = 64;

/// The last checkpoint of each of `partitions` of `topic` (absent: none), read with one
/// consumer of configuration `reader`.
pub async fn last_checkpoints(
    reader: &ClientConfig,
    topic: &str,
    partitions: &[i32],
) -> Result<HashMap<i32, Checkpoint>, StateError> {
    let (reader, topic, ps) = (reader.clone(), topic.to_string(), partitions.to_vec());
    tokio::task::spawn_blocking(move || read_back(&reader, &topic, &ps))
        .await
        .expect("the state reader does not panic")
}

fn read_back(
    reader: &ClientConfig,
    topic: &str,
    partitions: &[i32],
) -> Result<HashMap<i32, Checkpoint>, StateError> {
    let consumer = scanner(reader)?;
    // Partition -> (first offset, end), while its last checkpoint is not found.
    let mut todo = HashMap::new();
    for &p in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5))?;
        if high > low {
            todo.insert(p, (low, high));
        }
    }
    let mut found = HashMap::new();
    let mut window = FIRST_WINDOW;
    while !todo.is_empty() {
        let from: Vec<(i32, i64)> = todo
            .iter()
            .map(|(&p, &(low, high))| (p, (high - window).max(low)))
            .collect();
        scan(&consumer, topic, &from, |p, key, value| {
            if let (Some(b""), Some(v)) = (key, value) {
                found.insert(p, decode_checkpoint(v)?);
            }
            Ok(())
        })?;
        // Read back to the first offset without a checkpoint: there is none.
        todo.retain(|p, (low, high)| !found.contains_key(p) && high.saturating_sub(window) > *low);
        window *= 8;
    }
    Ok(found)
}
