//! Acknowledging delivered fires: an [`Ack`] per fire, sent to `landed.lua` (the one-shot
//! fires their claim took as fired, [`super::landed`]) or as a line `ack.lua` reads
//! (everything else).

use super::landed::{fired_queue_entry, Landed};
use super::{Store, StoreError};

/// The acknowledgement of one in-flight fire.
#[derive(Debug, Clone, PartialEq)]
pub enum Ack {
    /// Dropped before delivery (its timer changed since the claim): the member alone.
    Dropped(String),
    /// Produced at `fired_ms` in `attempt`; to the dead-letter topic when `dead` says why.
    Produced {
        /// The in-flight member.
        member: String,
        /// When it was produced, Unix epoch ms.
        fired_ms: i64,
        /// In which delivery attempt.
        attempt: i32,
        /// Why it went to the dead-letter topic instead of its callback topic.
        dead: Option<String>,
    },
    /// Produced, taken as fired by its claim.
    Landed(Landed),
    /// Forgotten: its acknowledgement makes the store fail every time (a record no
    /// function can read). The member leaves the in-flight set and its timer the
    /// deferred and dirty sets; nothing else is touched (`ack.lua`).
    Forget(String),
}

impl Ack {
    /// The in-flight member it acknowledges.
    pub fn member(&self) -> &str {
        match self {
            Ack::Dropped(m) | Ack::Forget(m) | Ack::Produced { member: m, .. } => m,
            Ack::Landed(l) => &l.member,
        }
    }

    /// The line `ack.lua` reads: `member`, `member\tfired\tattempt`,
    /// `!member\tfired\tattempt\nreason` for a dead letter, or `#member` to forget it.
    /// (Timer ids hold no control characters; a reason holds no newline; a member starts
    /// with its version: a digit or `-`.)
    pub fn line(&self) -> String {
        let (member, fired_ms, attempt, dead) = match self {
            Ack::Dropped(m) => return m.clone(),
            Ack::Forget(m) => return format!("#{m}"),
            Ack::Produced {
                member,
                fired_ms,
                attempt,
                dead,
            } => (member, fired_ms, attempt, dead.as_deref()),
            Ack::Landed(l) => (&l.member, &l.fired_ms, &l.attempt, None),
        };
        match dead {
            None => format!("{member}\t{fired_ms}\t{attempt}"),
            Some(why) => format!("!{member}\t{fired_ms}\t{attempt}\n{why}"),
        }
    }
}

impl Store {
    /// Acknowledges delivered fires of `partition`; returns how many were still in flight.
    pub async fn ack(&self, partition: i32, epoch: i64, acks: &[Ack]) -> Result<i64, StoreError> {
        let landed: Vec<&Landed> = acks
            .iter()
            .filter_map(|a| match a {
                Ack::Landed(l) => Some(l),
                _ => None,
            })
            .collect();
        let mut n = 0;
        if !landed.is_empty() {
            n += self.landed(partition, epoch, &landed).await?;
        }
        let lines: Vec<String> = acks
            .iter()
            .filter(|a| !matches!(a, Ack::Landed(_)))
            .map(Ack::line)
            .collect();
        if !lines.is_empty() {
            n += self.ack_lines(partition, epoch, &lines).await?;
        }
        Ok(n)
    }

    /// Takes the fires of `landed` out of flight, their records unwritten (landed.lua):
    /// how many were in flight.
    async fn landed(
        &self,
        partition: i32,
        epoch: i64,
        landed: &[&Landed],
    ) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.landed.call();
        inv.key(k.epoch())
            .key(k.inflight())
            .key(k.owed())
            .key(k.deferred())
            .key(k.acks())
            .key(k.fired_queue())
            .arg(epoch)
            .arg(k.base())
            .arg(fired_queue_entry(landed));
        // Runs of fires whose states were all written or all not: two values per run,
        // then its members, then its timer ids.
        for run in landed.chunk_by(|a, b| a.written == b.written) {
            inv.arg(if run[0].written { "1" } else { "" })
                .arg(run.len());
            for l in run {
                inv.arg(&l.member);
            }
            for l in run {
                inv.arg(&l.timer_id);
            }
        }
        self.counted("landed", partition, inv).await
    }

    /// Acknowledges fires by the lines ack.lua reads ([`Ack::line`]).
    async fn ack_lines(
        &self,
        partition: i32,
        epoch: i64,
        lines: &[String],
    ) -> Result<i64, StoreError> {
        let k = self.keys(partition);
        let mut inv = self.scripts.ack.call();
        inv.key(k.epoch())
            .key(k.inflight())
            .key(k.cron())
            .key(k.dirty())
            .key(k.deferred())
            .key(k.acks())
            .key(k.apps())
            .arg(epoch)
            .arg(k.base())
            .arg(self.retention_ms)
            .arg(self.history.entries)
            .arg(self.history.ttl_ms);
        for l in lines {
            inv.arg(l);
        }
        self.counted("ack", partition, inv).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acknowledgement_names_its_member_and_how_it_went_out() {
        let produced = |dead: Option<&str>| Ack::Produced {
            member: "1:5:t".into(),
            fired_ms: 9,
            attempt: 2,
            dead: dead.map(String::from),
        };
        assert_eq!(Ack::Dropped("1:5:t".into()).line(), "1:5:t");
        assert_eq!(produced(None).line(), "1:5:t\t9\t2");
        let dead = produced(Some("too large"));
        assert_eq!(dead.line(), "!1:5:t\t9\t2\ntoo large");
        assert_eq!(dead.member(), "1:5:t");
        let forget = Ack::Forget("1:5:t".into());
        assert_eq!(
            (forget.line().as_str(), forget.member()),
            ("#1:5:t", "1:5:t")
        );
    }
}
