//! Ownership state in Redis: the partition epoch (fencing) and the applied offset.

use super::{Store, StoreError};

/// What Redis holds about a partition's ownership.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionState {
    /// The current owner's epoch; `None` when Redis has no record of the partition.
    pub epoch: Option<i64>,
    /// The highest commands-topic offset handled; `None` when none was (or Redis lost it).
    pub applied: Option<i64>,
    /// The sequence of the last checkpoint confirmed; `None` when none was.
    pub checkpoint: Option<i64>,
    /// The layout version of its keys ([`super::STORE_FORMAT`]); `None` before version 2.
    pub format: Option<i64>,
}

impl Store {
    /// Takes ownership of `partition` at `now_ms`: moves its epoch past every epoch handed
    /// out before (even before Redis lost its data), fencing the previous owner. Returns
    /// the new epoch.
    pub async fn acquire(&self, partition: i32, now_ms: i64) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.acquire.call();
        inv.key(k.epoch())
            .key(k.writing())
            .key(k.dirty())
            .key(k.blocked())
            .arg(now_ms);
        let mut p = redis::pipe();
        inv.add_to(&mut p);
        let (epoch,): (i64,) = self.run("acquire", &p).await?;
        Ok(epoch)
    }

    /// What Redis holds about `partition`'s ownership: its epoch and applied offset.
    pub async fn partition_state(&self, partition: i32) -> Result<PartitionState, StoreError> {
        let k = self.keys(partition);
        let (epoch, applied, checkpoint, format): (_, _, _, Option<i64>) = redis::pipe()
            .get(k.epoch())
            .get(k.offset())
            .get(k.checkpoint())
            .get(k.format())
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(PartitionState {
            epoch,
            applied,
            checkpoint,
            format,
        })
    }

    /// Says that the owner of `epoch` still has fires of `partition` in its producer that
    /// the broker has not answered, for `ttl` (refreshed while so).
    pub async fn mark_draining(
        &self,
        partition: i32,
        epoch: i64,
        ttl: std::time::Duration,
    ) -> Result<(), StoreError> {
        let key = self.keys(partition).draining();
        let mut p = redis::pipe();
        p.zadd(&key, epoch, 0).ignore();
        p.pexpire(&key, ttl.as_millis() as i64).ignore();
        let () = self.run("drain", &p).await?;
        Ok(())
    }

    /// The owner of `epoch` has no fire of `partition` left in its producer.
    pub async fn unmark_draining(&self, partition: i32, epoch: i64) -> Result<(), StoreError> {
        let mut p = redis::pipe();
        p.zrem(self.keys(partition).draining(), epoch).ignore();
        let () = self.run("drain", &p).await?;
        Ok(())
    }

    /// Whether an earlier owner of `partition` still has fires of it in its producer.
    pub async fn draining(&self, partition: i32) -> Result<bool, StoreError> {
        let mut p = redis::pipe();
        p.exists(self.keys(partition).draining());
        let (exists,): (bool,) = self.run("drain", &p).await?;
        Ok(exists)
    }

    /// The applied offsets of `partitions`, read with a blocking connection (for
    /// librdkafka's rebalance callback, which cannot await).
    pub fn applied_offsets_blocking(
        &self,
        partitions: &[i32],
        timeout: std::time::Duration,
    ) -> Result<Vec<Option<i64>>, StoreError> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.client.blocking(timeout)?;
        if !self.client.is_cluster() {
            // One round trip for all of them: a distant Redis must not hold the rebalance
            // callback for a round trip per partition.
            let mut pipe = redis::pipe();
            for &part in partitions {
                pipe.get(self.keys(part).offset());
            }
            return Ok(pipe.query(&mut *conn)?);
        }
        let mut offsets = Vec::with_capacity(partitions.len());
        for &part in partitions {
            // One GET per partition: partitions live in different cluster slots (the
            // cluster client routes a pipeline by its first key).
            offsets.push(
                redis::cmd("GET")
                    .arg(self.keys(part).offset())
                    .query(&mut *conn)?,
            );
        }
        Ok(offsets)
    }
}
