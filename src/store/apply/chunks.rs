//! Grouping a batch's commands into script calls (pure; unit tests in `tests.rs`).

use super::args::creates_once;
use crate::timer::ApplyRequest;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// Most commands of one partition applied in one script call: bounds how long one call
/// keeps Redis busy (a claim waits behind it) to a couple of ms (about 20 µs apiece).
pub(super) const APPLY_CHUNK: usize = 100;

/// New one-shot timers created in one create.lua call: the same bound on Redis's time
/// per call (about 8 µs apiece), and half the calls' fixed cost per timer.
pub(super) const CREATE_CHUNK: usize = 200;

/// One script call's commands: indexes into the batch, in offset order.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Chunk {
    /// create.lua takes them (new one-shot timers), else apply.lua.
    pub create: bool,
    /// The indexes of the commands in the batch.
    pub reqs: Vec<usize>,
}

/// Groups `reqs` into script calls: runs of up to [`APPLY_CHUNK`] commands of one
/// partition ([`CREATE_CHUNK`] for create.lua), in offset order. With `fast`, a run of
/// creates of one-shot timers ([`creates_once`]) whose ids no other command of the batch
/// names in that partition is a create.lua chunk: what Redis answers back for it (a timer it holds)
/// is applied after the rest of the batch without reordering any timer's commands.
pub(super) fn chunks(reqs: &[ApplyRequest], fast: bool) -> Vec<Chunk> {
    // Per command whether create.lua takes it: one look-up of its id per command.
    let mut solo = vec![false; reqs.len()];
    if fast {
        let mut first: HashMap<(i32, &str), usize> = HashMap::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            match first.entry((r.partition, r.timer_id.as_str())) {
                Entry::Occupied(e) => solo[*e.get()] = false,
                Entry::Vacant(e) => {
                    e.insert(i);
                    solo[i] = creates_once(r);
                }
            }
        }
    }
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut open: HashMap<i32, usize> = HashMap::new();
    for (i, r) in reqs.iter().enumerate() {
        let c = solo[i];
        let most = if c { CREATE_CHUNK } else { APPLY_CHUNK };
        let fits = |chunk: &Chunk| chunk.reqs.len() < most && chunk.create == c;
        match open.get(&r.partition) {
            Some(&k) if fits(&chunks[k]) => chunks[k].reqs.push(i),
            _ => {
                open.insert(r.partition, chunks.len());
                chunks.push(Chunk {
                    create: c,
                    reqs: vec![i],
                });
            }
        }
    }
    chunks
}
