//! The trigger's scripts: claiming due fires into the in-flight set (`claim.lua`),
//! listing what is in flight after a takeover (`recover.lua`), and acknowledging
//! delivered fires ([`super::ack`]).

use super::record::{self, Prefixes};
use super::{bad_reply, Store, StoreError};
use crate::codec;
use crate::timer::{Claimed, Fire, Taken};

/// How many in-flight members one recover page asks ZSCAN for.
const RECOVER_PAGE: usize = 500;

/// What one claim asks for.
#[derive(Debug, Clone)]
pub struct ClaimWindow {
    /// Fires due at or before this instant.
    pub upto_ms: i64,
    /// At most this many members read (taken, dropped as stale, or parked).
    pub limit: usize,
    /// Stop once the definitions answered reach this many bytes.
    pub max_bytes: usize,
    /// The most fires of each paced application to take; its due fires beyond that are
    /// parked in Redis (`claim.lua`). Other applications have no quota.
    pub quotas: Vec<(String, usize)>,
    /// Cron occurrences due before this were missed: their misfire policy decides.
    pub missed_before_ms: i64,
    /// Now.
    pub now_ms: i64,
    /// The oldest checkpoint Redis may hold: one older came back from older data, and
    /// the claim is refused ("fenced").
    pub checkpoint: i64,
}

impl Store {
    /// Claims the fires of `partition` in window `w`.
    pub async fn claim(
        &self,
        partition: i32,
        epoch: i64,
        w: ClaimWindow,
    ) -> Result<Claimed, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.claim.call();
        inv.key(k.epoch())
            .key(k.index())
            .key(k.inflight())
            .key(k.cron())
            .key(k.dirty())
            .key(k.checkpoint())
            .key(k.apps())
            .key(k.replay_fence())
            .key(k.parked())
            .arg(epoch)
            .arg(w.upto_ms)
            .arg(w.limit)
            .arg(k.slice_prefix())
            .arg(k.base())
            .arg(w.missed_before_ms)
            .arg(w.now_ms)
            .arg(self.retention_ms)
            .arg(w.checkpoint)
            .arg(w.max_bytes);
        for (app, quota) in &w.quotas {
            inv.arg(app).arg(quota);
        }
        let reply: Vec<Vec<u8>> = self.listed("claim", partition, inv).await?;
        parse_claimed(reply)
    }

    /// One page of the in-flight members of `partition` from ZSCAN `cursor`: the next
    /// cursor (0 when the scan is complete) and the members. A member in flight for the
    /// whole scan is listed at least once; one may be listed twice.
    pub async fn in_flight_page(
        &self,
        partition: i32,
        cursor: u64,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let (next, pairs): (u64, Vec<String>) = redis::cmd("ZSCAN")
            .arg(self.keys(partition).inflight())
            .arg(cursor)
            .arg("COUNT")
            .arg(RECOVER_PAGE)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok((next, pairs.into_iter().step_by(2).collect()))
    }

    /// Takes over in-flight `members` of `partition` (a page of [`Store::in_flight_page`]),
    /// to re-drive them. Missed cron occurrences (due before `missed_before_ms`) obey their
    /// misfire policy; members acknowledged since the scan are skipped.
    pub async fn recover(
        &self,
        partition: i32,
        epoch: i64,
        members: &[String],
        missed_before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<Fire>, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.recover.call();
        inv.key(k.epoch())
            .key(k.inflight())
            .key(k.cron())
            .key(k.dirty())
            .key(k.apps())
            .arg(epoch)
            .arg(k.base())
            .arg(missed_before_ms)
            .arg(now_ms)
            .arg(self.retention_ms);
        for m in members {
            inv.arg(m);
        }
        let reply: Vec<Vec<u8>> = self.listed("recover", partition, inv).await?;
        parse_fires(reply.into_iter(), None)
    }
}

/// Parses a claim's reply (see claim.lua).
fn parse_claimed(reply: Vec<Vec<u8>>) -> Result<Claimed, StoreError> {
    let mut it = reply.into_iter();
    let mut text = |what: &str| {
        let v = it
            .next()
            .ok_or_else(|| bad_reply(format!("claim: no {what}")))?;
        String::from_utf8(v).map_err(bad_reply)
    };
    let next_due_ms = text("next due")?.parse::<f64>().ok().map(|f| f as i64);
    let number = |s: String, what: &str| {
        s.parse::<u64>()
            .map_err(|_| bad_reply(format!("claim: bad {what} {s:?}")))
    };
    let vanished = number(text("count of vanished members")?, "vanished")?;
    let full = text("full")? == "1";
    let apps = number(text("count of parked applications")?, "count")? as usize;
    let prefixes = number(text("count of definition prefixes")?, "count")? as usize;
    // The fires, then `apps` (application, count) pairs, then `prefixes` (number, prefix).
    let mut rest: Vec<Vec<u8>> = it.collect();
    let mut pairs = |n: usize, what: &str| {
        let at = rest.len().checked_sub(2 * n);
        let at = at.ok_or_else(|| bad_reply(format!("claim: fewer {what} than announced")))?;
        let mut tail = rest.split_off(at).into_iter();
        let mut out = Vec::new();
        while let (Some(a), Some(b)) = (tail.next(), tail.next()) {
            out.push((String::from_utf8(a).map_err(bad_reply)?, b));
        }
        Ok::<_, StoreError>(out)
    };
    let prefixes: Prefixes = pairs(prefixes, "definition prefixes")?
        .into_iter()
        .map(|(n, prefix)| Ok((number(n, "prefix number")?, prefix)))
        .collect::<Result<_, StoreError>>()?;
    let parked = pairs(apps, "parked counts")?
        .into_iter()
        .map(|(app, count)| {
            let count = String::from_utf8(count).map_err(bad_reply)?;
            Ok((app, number(count, "parked count")?))
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(Claimed {
        fires: parse_fires(rest.into_iter(), Some(&prefixes))?,
        next_due_ms,
        vanished,
        full,
        parked,
    })
}

/// Parses `member, definition` pairs (member `version:due:id`) into fires; with
/// `records` (a claim's), triples: the record the claim read follows (empty: none; else
/// the fire was taken as fired, [`Taken`]), and an empty definition is the record's, its
/// prefix among `records`.
fn parse_fires(
    mut it: impl Iterator<Item = Vec<u8>>,
    records: Option<&Prefixes>,
) -> Result<Vec<Fire>, StoreError> {
    let mut out = Vec::new();
    while let (Some(member), Some(def)) = (it.next(), it.next()) {
        let (def, taken) = match records {
            None => (def, None),
            Some(prefixes) => match it.next() {
                None => return Err(bad_reply("claim: a fire without its record")),
                Some(r) if r.is_empty() => (def, None),
                Some(r) => {
                    let (whole, written) = record::claimed(&r, prefixes)
                        .ok_or_else(|| bad_reply("claim: a record without its definition"))?;
                    let def = if def.is_empty() { whole } else { def };
                    (def, Some(Taken { written }))
                }
            },
        };
        let member = String::from_utf8(member).map_err(bad_reply)?;
        let bad = || bad_reply(format!("bad fire member {member}"));
        let mut parts = member.splitn(3, ':');
        let (Some(v), Some(d), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let version = v.parse().map_err(|_| bad())?;
        let due_ms = d.parse().map_err(|_| bad())?;
        let timer_id = id.to_string();
        let def = codec::decode_stored(&def).map_err(bad_reply)?;
        out.push(Fire {
            member,
            timer_id,
            version,
            due_ms,
            def,
            taken,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timer::TimerDef;

    #[test]
    fn fires_parse_from_member_and_definition() {
        let def = TimerDef {
            application: "a".into(),
            ..Default::default()
        };
        let stored = codec::encode_stored(&def).unwrap();
        let reply = vec![b"12:5000:order:42".to_vec(), stored.clone()];
        let fires = parse_fires(reply.into_iter(), None).unwrap();
        assert_eq!(
            fires,
            vec![Fire {
                member: "12:5000:order:42".into(),
                timer_id: "order:42".into(), // ids may contain the separator
                version: 12,
                due_ms: 5000,
                def: def.clone(),
                taken: None,
            }]
        );
        let no = Prefixes::new();
        // [v, st, rq, k, due, a, d, p]: taken as fired, a state of it written (`p` true).
        let record = vec![0x98, 1, 1, 0xc3, 0xc2, 2, 0xc2, 0xa1, b'd', 0xc3];
        let with = vec![b"1:2:a".to_vec(), stored.clone(), record];
        let fires = parse_fires(with.into_iter(), Some(&no)).unwrap();
        assert_eq!(fires[0].taken, Some(Taken { written: true }));
        assert_eq!(
            fires[0].def, def,
            "the definition answered, not the record's"
        );
        let none = vec![b"1:2:a".to_vec(), stored.clone(), vec![]];
        assert_eq!(
            parse_fires(none.into_iter(), Some(&no)).unwrap()[0].taken,
            None
        );
        let pairs = vec![
            b"1:2:a".to_vec(),
            stored.clone(),
            b"3:4:b".to_vec(),
            stored.clone(),
        ];
        let two = parse_fires(pairs.into_iter(), None).unwrap();
        assert_eq!(two.len(), 2, "a recover answers pairs");
        assert_eq!(two[1].timer_id, "b");
        let short = vec![b"1:2:a".to_vec(), stored.clone()];
        assert!(parse_fires(short.into_iter(), Some(&no)).is_err());
        for bad in ["12:5000", "x:5000:id", "12:y:id"] {
            let reply = vec![bad.as_bytes().to_vec(), stored.clone()];
            assert!(parse_fires(reply.into_iter(), None).is_err(), "{bad}");
        }
        let bad_def = vec![b"1:2:id".to_vec(), b"\xff".to_vec()];
        assert!(parse_fires(bad_def.into_iter(), None).is_err());
        assert!(parse_fires(std::iter::empty(), Some(&no))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_claim_reply_says_what_is_parked() {
        let stored = codec::encode_stored(&TimerDef::default()).unwrap();
        let b = |s: &str| s.as_bytes().to_vec();
        // A record whose definition is [1, rest]: prefix 1 answered after the parked counts.
        let (prefix, rest) = stored.split_at(2);
        let mut record = vec![0x97, 7, 1, 0xc3, 0xc2, 0xcd, 0x13, 0x88, 0xc2, 0x92, 1];
        record.push(0xa0 + rest.len() as u8);
        record.extend_from_slice(rest);
        let reply = vec![
            b("61000"),
            b("2"),
            b("1"),
            b("2"),
            b("1"),
            b("7:5000:x"),
            stored.clone(),
            b(""),
            b("7:5000:y"),
            b(""),
            record.clone(),
            b("paced"),
            b("40"),
            b("slow"),
            b("3"),
            b("1"),
            prefix.to_vec(),
        ];
        let c = parse_claimed(reply.clone()).unwrap();
        assert_eq!(c.next_due_ms, Some(61_000));
        assert_eq!((c.vanished, c.full), (2, true));
        assert_eq!(c.parked, vec![("paced".into(), 40), ("slow".into(), 3)]);
        assert_eq!(c.fires.len(), 2);
        assert_eq!(c.fires[1].def, c.fires[0].def, "the record's definition");
        assert_eq!(c.fires[1].taken, Some(Taken { written: false }));
        let mut unknown = reply;
        unknown[16] = b("2");
        assert!(parse_claimed(unknown).is_err(), "a prefix not answered");
        let none = parse_claimed(vec![b(""), b("0"), b("0"), b("0"), b("0")]).unwrap();
        assert_eq!(
            (none.next_due_ms, none.full, none.fires.len()),
            (None, false, 0)
        );
        let short = vec![b(""), b("0"), b("0"), b("1"), b("0"), b("a")];
        assert!(parse_claimed(short).is_err());
    }
}
