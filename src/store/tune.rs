//! Redis's compact-encoding threshold the record layout is sized for (`record.lua`).
//!
//! A bucket of live timer records stays in Redis's listpack encoding (a few bytes of
//! overhead per record instead of about 60) only while every value in it is at most
//! `hash-max-listpack-value` bytes, 64 by default: less than most packed records. With
//! `--redis-tune` (the default) an instance raises it on every primary at start, unless
//! it is higher already; where CONFIG is refused (many managed services) it says so once
//! and runs on, with about twice the memory per pending timer.

use super::{Store, StoreError};

/// The `hash-max-listpack-value` ktimer asks for: a record with a payload of several
/// hundred bytes still fits.
pub const HASH_VALUE_BYTES: u64 = 1024;

/// What [`Store::tune_encoding`] found or did.
#[derive(Debug, Clone, PartialEq)]
pub enum Tuned {
    /// The threshold was at least [`HASH_VALUE_BYTES`] already.
    Already,
    /// Raised from the value held.
    Raised(u64),
}

impl Store {
    /// Raises `hash-max-listpack-value` to [`HASH_VALUE_BYTES`] on every primary where it
    /// is lower. An error means CONFIG was refused or failed (nothing else depends on it).
    pub async fn tune_encoding(&self) -> Result<Tuned, StoreError> {
        let mut conn = self.conn.clone();
        let mut get = redis::cmd("CONFIG");
        get.arg("GET").arg("hash-max-listpack-value");
        let mut lowest: Option<u64> = None;
        for (_, reply) in conn.per_primary(&get).await? {
            let pairs: Vec<String> = redis::from_redis_value(reply).map_err(super::bad_reply)?;
            let v = pairs.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
            lowest = Some(lowest.map_or(v, |l: u64| l.min(v)));
        }
        let held = lowest.unwrap_or(0);
        if held >= HASH_VALUE_BYTES {
            return Ok(Tuned::Already);
        }
        let mut set = redis::cmd("CONFIG");
        set.arg("SET")
            .arg("hash-max-listpack-value")
            .arg(HASH_VALUE_BYTES);
        conn.on_primaries(&set).await?;
        Ok(Tuned::Raised(held))
    }
}
