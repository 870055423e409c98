//! The definition prefix numbers the owner packs into new records (create.lua).
//!
//! A record holds its definition's prefix (the application and the callback topic,
//! [`crate::codec::stored_prefix_len`]) as the number the partition's `dp` hash gives it
//! (`record.lua`). ktimer packs new one-shot timers whole (`fresh.rs`), so it keeps the
//! numbers it learnt per partition here. What it knows may be stale (Redis lost its
//! data, a rebuild numbered the prefixes anew): create.lua checks every prefix a call
//! uses against the number `dp` gives it before it writes anything, and answers
//! `prefixes` when one differs; the partition's numbers are then forgotten and learnt
//! again.
//!
//! Invariant: a number here was `dp`'s for that prefix when it was learnt; 0 means the
//! partition numbers no more prefixes (its records hold that definition whole).

use std::collections::HashMap;
use std::sync::Mutex;

/// The definitions shorter than this keep their prefix (`record.lua`'s `rec_def_pack`
/// numbers only prefixes of more than 3 bytes).
pub(super) const MIN_NUMBERED: usize = 4;

/// Per partition (its key prefix), the number of each definition prefix learnt.
#[derive(Default)]
pub(super) struct Prefixes {
    known: Mutex<HashMap<String, HashMap<Vec<u8>, u32>>>,
}

impl Prefixes {
    /// The number of `prefix` in the partition of key prefix `base`, if learnt.
    pub(super) fn number(&self, base: &str, prefix: &[u8]) -> Option<u32> {
        let known = self.known.lock().expect("prefixes lock");
        known.get(base).and_then(|p| p.get(prefix)).copied()
    }

    /// `prefix` has number `n` in the partition of key prefix `base` (0: none); another
    /// prefix learnt with that number before is forgotten (the partition numbered anew).
    pub(super) fn learn(&self, base: &str, prefix: Vec<u8>, n: u32) {
        let mut known = self.known.lock().expect("prefixes lock");
        let numbers = known.entry(base.to_string()).or_default();
        if n > 0 {
            numbers.retain(|_, &mut m| m != n);
        }
        numbers.insert(prefix, n);
    }

    /// Forgets every number of the partition of key prefix `base` (one was stale).
    pub(super) fn forget(&self, base: &str) {
        self.known.lock().expect("prefixes lock").remove(base);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_kept_per_partition_until_forgotten() {
        let p = Prefixes::default();
        p.learn("k:{t:0}:", b"app-topic".to_vec(), 3);
        p.learn("k:{t:1}:", b"app-topic".to_vec(), 0);
        assert_eq!(p.number("k:{t:0}:", b"app-topic"), Some(3));
        assert_eq!(p.number("k:{t:1}:", b"app-topic"), Some(0));
        assert_eq!(p.number("k:{t:0}:", b"other"), None);
        // A number learnt again for another prefix: the first is forgotten.
        p.learn("k:{t:0}:", b"app-other".to_vec(), 3);
        assert_eq!(p.number("k:{t:0}:", b"app-topic"), None);
        assert_eq!(p.number("k:{t:0}:", b"app-other"), Some(3));
        p.forget("k:{t:0}:");
        assert_eq!(p.number("k:{t:0}:", b"app-other"), None);
        assert_eq!(p.number("k:{t:1}:", b"app-topic"), Some(0));
    }
}
