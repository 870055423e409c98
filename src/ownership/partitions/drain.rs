//! A partition taken from an owner whose producer still holds fires of it (the owner was
//! cut from the broker, not from Redis; see `trigger::fence`): such a fire may reach the
//! broker whenever that link heals, so the new owner applies no command of the partition
//! until the old owner's producer answered them all (its drain mark is gone). Otherwise
//! a CANCEL answered here could be followed by a fire of the cancelled timer. Its fires
//! go on meanwhile (at worst duplicates of the held ones); its records are read but not
//! applied, and read again from where they stopped once the mark is gone.

use super::Partitions;
use crate::retry::Retry;
use rdkafka::Offset;
use std::time::Instant;

impl Partitions {
    /// Whether an earlier owner of `p` still has fires of it in its producer (read once
    /// the partition is taken). `None` only on shutdown.
    pub(super) async fn previous_owner_draining(&self, p: i32) -> Option<bool> {
        let t = &self.tasks;
        let draining = Retry::new("drain mark", &t.token)
            .partition(p)
            .forever(|| t.store.draining(p))
            .await?;
        if draining {
            tracing::warn!(
                partition = p,
                "the previous owner still has fires of the partition in its producer (cut \
                 from the broker?): no command of it is applied until they are answered"
            );
        }
        Some(draining)
    }

    /// Whether `p` still waits for its previous owner's producer, given the drain mark
    /// `read` (`None`: not read or not answered); once it does not, its records are read
    /// again from the first one not applied.
    pub(super) fn still_draining(&mut self, p: i32, read: Option<bool>) -> bool {
        let Some(since) = self.owned.get(&p).and_then(|o| o.draining) else {
            return false;
        };
        if read != Some(false) {
            return true;
        }
        let waited_ms = since.elapsed().as_millis() as u64;
        tracing::info!(
            partition = p,
            waited_ms,
            "the previous owner's fires were answered: applying commands"
        );
        let handled = self.owned.get(&p).and_then(|o| o.handled);
        let to = match handled {
            Some(h) => Offset::Offset(h + 1),
            None => self.committed(p).map_or(Offset::Beginning, Offset::Offset),
        };
        if let Some(o) = self.owned.get_mut(&p) {
            o.draining = None;
        }
        self.seek(p, to);
        self.gauge_waiting();
        false
    }

    /// Sets `ktimer_partitions_waiting_previous_owner`.
    pub(super) fn gauge_waiting(&self) {
        let n = self.owned.values().filter(|o| o.draining.is_some()).count();
        self.tasks
            .metrics
            .partitions_waiting
            .with_label_values(&[&self.topic])
            .set(n as i64);
    }
}

/// Since when a partition taken now waits for its previous owner's producer, if it does.
pub(super) fn since(draining: bool) -> Option<Instant> {
    draining.then(Instant::now)
}
