//! The bound on fires held in memory: one [`Budget`] per instance (count and bytes),
//! shared by its triggers; each trigger's [`Held`] fires count against it.
//!
//! Invariant: a trigger claims (or takes over in-flight fires) only while the budget has
//! room, and asks for no more than the room; so the fires held in memory exceed the
//! budget by at most one claim's overshoot (the last definition read). A held fire counts
//! from its claim until its acknowledgement in Redis; a trigger that stops gives back
//! everything it held.

use crate::timer::Fire;
use foldhash::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// What a held fire costs beyond its payload, headers and key, bytes (an estimate of the
/// queue entry, the member and the decoded definition).
const FIRE_OVERHEAD: usize = 256;

/// The instance's bound on held fires.
#[derive(Debug)]
pub struct Budget {
    max_fires: usize,
    max_bytes: usize,
    fires: AtomicUsize,
    bytes: AtomicUsize,
    freed: Notify,
}

impl Budget {
    /// A budget of `max_fires` fires and `max_bytes` bytes (each at least 1).
    pub fn new(max_fires: usize, max_bytes: usize) -> Arc<Budget> {
        Arc::new(Budget {
            max_fires: max_fires.max(1),
            max_bytes: max_bytes.max(1),
            fires: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            freed: Notify::new(),
        })
    }

    /// Room left: (fires, bytes); either 0 means no claim now.
    pub fn room(&self) -> (usize, usize) {
        let f = self
            .max_fires
            .saturating_sub(self.fires.load(Ordering::Relaxed));
        let b = self
            .max_bytes
            .saturating_sub(self.bytes.load(Ordering::Relaxed));
        (f, b)
    }

    /// Whether there is room for a claim.
    pub fn has_room(&self) -> bool {
        let (f, b) = self.room();
        f > 0 && b > 0
    }

    /// Resolves once held fires were given back (a trigger waiting for room registers
    /// before it checks [`Budget::has_room`]).
    pub fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    fn take(&self, fires: usize, bytes: usize) {
        self.fires.fetch_add(fires, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn give(&self, fires: usize, bytes: usize) {
        self.fires.fetch_sub(fires, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.freed.notify_waiters();
    }
}

/// The bytes a fire holds in memory (estimated).
pub fn weight(f: &Fire) -> usize {
    let cb = &f.def.callback;
    let headers: usize = cb.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    let key = cb.key.as_ref().map_or(0, |k| k.len());
    FIRE_OVERHEAD + f.member.len() + cb.payload.len() + headers + key
}

/// One held fire: its weight and, for a paced application, the application.
#[derive(Debug)]
struct Entry {
    bytes: usize,
    app: Option<Arc<str>>,
}

/// The fires one trigger holds (queued, sending, or delivered and not yet acknowledged),
/// by in-flight member, counted against the [`Budget`] and per paced application. (Its
/// maps hash with foldhash, seeded per process: members carry timer ids an application
/// chooses, so not a fixed-seed hash; a fraction of SipHash's cost per fire.)
#[derive(Debug)]
pub struct Held {
    budget: Arc<Budget>,
    members: HashMap<String, Entry>,
    per_app: HashMap<Arc<str>, usize>,
}

impl Held {
    /// Nothing held yet, against `budget`.
    pub fn new(budget: Arc<Budget>) -> Held {
        Held {
            budget,
            members: HashMap::default(),
            per_app: HashMap::default(),
        }
    }

    /// Holds `fire`; `paced` counts it for its application. False if it was held already.
    pub fn insert(&mut self, fire: &Fire, paced: bool) -> bool {
        if self.members.contains_key(&fire.member) {
            return false;
        }
        let bytes = weight(fire);
        let app = paced.then(|| {
            let app: Arc<str> = fire.def.application.as_str().into();
            *self.per_app.entry(app.clone()).or_default() += 1;
            app
        });
        self.members
            .insert(fire.member.clone(), Entry { bytes, app });
        self.budget.take(1, bytes);
        true
    }

    /// Whether `member` is held.
    pub fn contains(&self, member: &str) -> bool {
        self.members.contains_key(member)
    }

    /// Lets `members` go (acknowledged in Redis), given back to the budget at once (one
    /// wake-up of the triggers waiting for room, not one per fire).
    pub fn release<'a>(&mut self, members: impl IntoIterator<Item = &'a str>) {
        let (mut fires, mut bytes) = (0, 0);
        for member in members {
            let Some(e) = self.members.remove(member) else {
                continue;
            };
            if let Some(app) = e.app {
                if let Some(n) = self.per_app.get_mut(&app) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_app.remove(&app);
                    }
                }
            }
            fires += 1;
            bytes += e.bytes;
        }
        if fires > 0 {
            self.budget.give(fires, bytes);
        }
    }

    /// How many fires of paced application `app` are held.
    pub fn of_app(&self, app: &str) -> usize {
        self.per_app.get(app).copied().unwrap_or(0)
    }

    /// The paced applications held, with how many fires each.
    pub fn apps(&self) -> impl Iterator<Item = (&str, usize)> {
        self.per_app.iter().map(|(a, n)| (&**a, *n))
    }

    /// The budget these fires count against.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.members.is_empty() {
            let bytes = self.members.values().map(|e| e.bytes).sum();
            self.budget.give(self.members.len(), bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(member: &str, app: &str, payload: usize) -> Fire {
        let mut f = Fire {
            member: member.into(),
            timer_id: member.into(),
            version: 1,
            due_ms: 0,
            def: Default::default(),
            taken: None,
        };
        f.def.application = app.into();
        f.def.callback.payload = vec![0; payload];
        f
    }

    #[test]
    fn held_fires_count_against_the_instance_budget_until_let_go() {
        let budget = Budget::new(3, 1 << 20);
        let mut a = Held::new(budget.clone());
        let mut b = Held::new(budget.clone());
        assert!(a.insert(&fire("1:1:x", "paced", 1_000), true));
        assert!(!a.insert(&fire("1:1:x", "paced", 1_000), true), "held once");
        assert!(b.insert(&fire("1:1:y", "other", 10), false));
        assert_eq!(budget.room().0, 1);
        assert_eq!((a.of_app("paced"), b.of_app("other")), (1, 0));
        assert!(b.insert(&fire("1:2:y", "other", 10), false));
        assert!(!budget.has_room(), "three fires held");
        a.release(["1:1:x", "1:1:unknown"]);
        assert_eq!(a.of_app("paced"), 0);
        assert_eq!(
            budget.room(),
            (1, (1 << 20) - weight(&fire("1:1:y", "other", 10)) * 2)
        );
        b.release(["1:1:y", "1:1:y", "1:2:y"]);
        assert_eq!(budget.room(), (3, 1 << 20), "each let go once");
        assert!(b.insert(&fire("1:1:y", "other", 10), false));
        drop(b);
        assert_eq!(
            budget.room(),
            (3, 1 << 20),
            "a stopped trigger gives back all"
        );
    }

    #[test]
    fn bytes_bound_too() {
        let budget = Budget::new(100, 10_000);
        let mut h = Held::new(budget.clone());
        h.insert(&fire("1:1:a", "x", 9_000), false);
        assert!(budget.has_room());
        h.insert(&fire("1:1:b", "x", 9_000), false);
        assert!(!budget.has_room());
        assert_eq!(budget.room().0, 98);
    }
}
