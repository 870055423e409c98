//! Taking over the in-flight set: what a previous owner claimed and did not see
//! acknowledged, and what a claim of this trigger whose reply was lost (a Redis timeout
//! is an unknown outcome, not a failure) may have moved there.

use super::task::Trigger;
use crate::store::StoreError;

impl Trigger {
    /// Queues every in-flight fire this trigger does not hold, reading the set in ZSCAN
    /// pages (a member in flight for the whole scan is seen at least once). Pauses
    /// while the budget has no room (the next call goes on from there): returns whether
    /// the whole set was read.
    pub(super) async fn recover(&mut self) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let missed_before = now - self.cfg.misfire_threshold_ms;
        let (mut cursor, mut taken) = (self.recover_cursor, 0);
        loop {
            if !self.held.budget().has_room() {
                self.recover_cursor = cursor;
                return Ok(false);
            }
            let (next, members) = self.store.in_flight_page(self.partition, cursor).await?;
            let mut fresh: Vec<String> = members
                .into_iter()
                .filter(|m| !self.held.contains(m))
                .collect();
            fresh.sort_unstable();
            fresh.dedup();
            if !fresh.is_empty() {
                let fires = (self.store)
                    .recover(self.partition, self.epoch, &fresh, missed_before, now)
                    .await?;
                taken += fires.len();
                self.push_all(fires);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        self.recover_cursor = 0;
        if taken > 0 {
            tracing::info!(
                partition = self.partition,
                fires = taken,
                "re-driving in-flight fires"
            );
        }
        Ok(true)
    }
}
