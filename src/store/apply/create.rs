//! create.lua's chunks of new one-shot timers: their definitions' prefixes numbered
//! (`prefixes.rs`), their arguments, and the answer (pure but the numbering; unit tests
//! in `tests.rs`).

use super::args::{create_args, Args};
use super::chunks::Chunk;
use crate::codec;
use crate::store::fresh::FreshState;
use crate::store::prefixes::MIN_NUMBERED;
use crate::store::{bad_reply, Store, StoreError};
use crate::timer::{Applied, ApplyOutcome, ApplyRequest, Op, Schedule, TimerState};
use redis::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What create.lua did with a chunk.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Created {
    /// The partition's epoch moved, or Redis lost writes: nothing was done.
    Fenced,
    /// A prefix number the chunk used is not the partition's: nothing was done.
    Prefixes,
    /// Every timer created but the `skipped` ones (positions in the chunk: Redis holds a
    /// record of them, apply.lua decides); `owed` of them have states the caller writes.
    /// `numbers`: the number of each prefix the call named, in order (0: none).
    Done {
        owed: usize,
        numbers: Vec<u32>,
        skipped: Vec<usize>,
    },
}

/// A new one-shot timer's stored definition, the length of its prefix (0: too short to
/// number) and the prefix's number (0: the record holds the definition whole; none: not
/// learnt yet).
pub(super) struct Def {
    bytes: Vec<u8>,
    prefix: usize,
    number: Option<u32>,
}

impl Def {
    /// (number, prefix length) when the record holds the prefix numbered.
    fn numbered(&self) -> Option<(u32, usize)> {
        self.number.filter(|&n| n > 0).map(|n| (n, self.prefix))
    }
}

/// The definitions of the timers of create.lua chunks, by index into the batch.
pub(super) type Defs = HashMap<usize, Def>;

/// Per partition, the prefixes whose numbers are not learnt yet, and a chunk of it.
type Unknown<'c> = BTreeMap<i32, (BTreeSet<Vec<u8>>, &'c Chunk)>;

impl Store {
    /// The stored definitions of the timers `chunks` send to create.lua, their prefixes
    /// numbered: those the partition numbered before from what this store learnt, the
    /// others by a create.lua call of no timers per partition first (`header`: a chunk's
    /// call with its header arguments). A prefix left unnumbered (the call was fenced, or
    /// the partition numbers no more) is written whole.
    pub(super) async fn create_defs<'a>(
        &'a self,
        reqs: &[ApplyRequest],
        chunks: &[Chunk],
        header: impl Fn(&Chunk) -> crate::store::scripts::Call<'a>,
    ) -> Result<Defs, StoreError> {
        let (mut defs, unknown) = self.known_defs(reqs, chunks)?;
        // All partitions at once: one round trip, not one per partition.
        let numbering: Vec<_> = unknown
            .into_iter()
            .map(|(p, (prefixes, chunk))| self.number_prefixes(p, prefixes, header(chunk)))
            .collect();
        futures::future::try_join_all(numbering).await?;
        for (&i, def) in defs.iter_mut().filter(|(_, d)| d.number.is_none()) {
            let base = self.keys(reqs[i].partition).base();
            let n = self.prefixes.number(&base, &def.bytes[..def.prefix]);
            def.number = Some(n.unwrap_or(0));
        }
        Ok(defs)
    }

    /// The definitions of the chunks' timers with the numbers learnt, and the prefixes
    /// not learnt yet.
    fn known_defs<'c>(
        &self,
        reqs: &[ApplyRequest],
        chunks: &'c [Chunk],
    ) -> Result<(Defs, Unknown<'c>), StoreError> {
        let (mut defs, mut unknown) = (Defs::new(), Unknown::new());
        for chunk in chunks.iter().filter(|c| c.create) {
            let base = self.keys(reqs[chunk.reqs[0]].partition).base();
            for &i in &chunk.reqs {
                let Op::Create { def, .. } = &reqs[i].op else {
                    return Err(bad_reply("create.lua takes creates"));
                };
                let bytes = codec::encode_stored(def).map_err(bad_reply)?;
                let len = codec::stored_prefix_len(def);
                let prefix = if len >= MIN_NUMBERED { len } else { 0 };
                let number = match prefix {
                    0 => Some(0),
                    _ => self.prefixes.number(&base, &bytes[..prefix]),
                };
                if number.is_none() {
                    let p = reqs[i].partition;
                    let (set, _) = unknown.entry(p).or_insert((BTreeSet::new(), chunk));
                    set.insert(bytes[..prefix].to_vec());
                }
                let def = Def {
                    bytes,
                    prefix,
                    number,
                };
                defs.insert(i, def);
            }
        }
        Ok((defs, unknown))
    }

    /// Numbers `prefixes` in partition `p` by `inv`, a create.lua call of no timers with
    /// its header arguments, and learns their numbers (none when the call was fenced:
    /// the chunks are answered so too).
    async fn number_prefixes(
        &self,
        p: i32,
        prefixes: BTreeSet<Vec<u8>>,
        mut inv: crate::store::scripts::Call<'_>,
    ) -> Result<(), StoreError> {
        inv.arg(prefixes.len());
        prefixes.iter().for_each(|x| {
            inv.arg("").arg(x);
        });
        let mut pipe = redis::pipe();
        inv.add_to(&mut pipe);
        let (v,): (Value,) = self.run("apply", &pipe).await?;
        let Created::Done { numbers, .. } = parse_created(v, 0)? else {
            return Ok(());
        };
        if numbers.len() != prefixes.len() {
            return Err(bad_reply(format!("create numbered {numbers:?}")));
        }
        let base = self.keys(p).base();
        for (x, n) in prefixes.into_iter().zip(numbers) {
            self.prefixes.learn(&base, x, n);
        }
        Ok(())
    }
}

/// Appends create.lua's arguments after its header for `chunk` of `reqs`: the prefixes
/// its records number (each checked by the script), then a group per timer
/// ([`create_args`]). Answers the states owed, by index into `reqs`.
pub(super) fn create_groups(
    reqs: &[ApplyRequest],
    chunk: &Chunk,
    defs: &Defs,
    now_ms: i64,
    history: bool,
    out: &mut impl Args,
) -> Result<Vec<(usize, FreshState)>, StoreError> {
    let def = |i: &usize| {
        defs.get(i)
            .ok_or_else(|| bad_reply("a create without its definition"))
    };
    // Each prefix with its number (by prefix: two prefixes may hold one number, one of
    // them stale, and each is checked).
    let mut numbered: BTreeMap<&[u8], u32> = BTreeMap::new();
    for i in &chunk.reqs {
        let d = def(i)?;
        if let Some((n, len)) = d.numbered() {
            numbered.insert(&d.bytes[..len], n);
        }
    }
    out.push(numbered.len());
    for (prefix, n) in numbered {
        out.push(n);
        out.push(prefix);
    }
    let mut states = Vec::new();
    for (at, i) in chunk.reqs.iter().enumerate() {
        let prev = at
            .checked_sub(1)
            .map(|p| reqs[chunk.reqs[p]].application.as_str());
        let d = def(i)?;
        let state = create_args(
            &reqs[*i],
            &d.bytes,
            d.numbered(),
            prev,
            now_ms,
            history,
            out,
        )?;
        states.extend(state.map(|s| (*i, s)));
    }
    Ok(states)
}

/// Parses create.lua's answer for a chunk of `n` timers.
pub(super) fn parse_created(v: Value, n: usize) -> Result<Created, StoreError> {
    let Value::Array(items) = v else {
        return Err(bad_reply(format!("create answered {v:?}")));
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        other => Err(bad_reply(format!("create answered {other:?}"))),
    };
    match items.first() {
        Some(Value::BulkString(b)) if b == b"fenced" => return Ok(Created::Fenced),
        Some(Value::BulkString(b)) if b == b"prefixes" => return Ok(Created::Prefixes),
        None => return Err(bad_reply("create answered nothing")),
        _ => {}
    }
    let owed = usize::try_from(int(&items[0])?).map_err(bad_reply)?;
    let numbers = match items.get(1) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| u32::try_from(int(v)?).map_err(bad_reply))
            .collect::<Result<Vec<u32>, _>>()?,
        other => return Err(bad_reply(format!("create answered prefixes {other:?}"))),
    };
    let mut skipped = Vec::with_capacity(items.len() - 2);
    for v in &items[2..] {
        let g = usize::try_from(int(v)?).map_err(bad_reply)?;
        if g == 0 || g > n || skipped.last().is_some_and(|&l| l + 1 >= g) {
            return Err(bad_reply(format!("create answered timer {g} of {n}")));
        }
        skipped.push(g - 1);
    }
    if owed + skipped.len() > n {
        return Err(bad_reply(format!("create answered {owed} states of {n}")));
    }
    Ok(Created::Done {
        owed,
        numbers,
        skipped,
    })
}

/// What apply.lua answers for `r`, a create of a one-shot timer Redis held no record of.
pub(super) fn accepted(r: &ApplyRequest) -> Applied {
    let due_ms = match &r.op {
        Op::Create {
            schedule: Schedule::Once { due_ms },
            ..
        } => Some(*due_ms),
        _ => None,
    };
    Applied {
        outcome: ApplyOutcome::Accepted,
        version: Some(r.offset),
        state: Some(TimerState::Scheduled),
        due_ms,
        reason: String::new(),
    }
}
