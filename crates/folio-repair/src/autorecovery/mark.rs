//! The under-replication mark: a durable note that a ledger has copies to restore, written
//! by the auditor and dropped by the replication worker that restored them.
//!
//! Stored at `<root>/underreplicated/<ledger id, 20 digits>`. Format (little-endian):
//!
//! ```text
//! magic    4 bytes  "FURM"
//! version  u8       1
//! since_ms u64      when the ledger was first marked (ms since the Unix epoch)
//! count    u16      number of fragments that follow (at most MARK_FRAGMENTS_MAX)
//! count × { first_entry i64, bookie string (u16 length + UTF-8), reason u8 }
//! ```
//!
//! A fragment is named by its first entry and the bookie whose copies it lacks. The worker
//! recomputes the fragments from the ledger's metadata for every bookie the mark names, so
//! a mark capped at `MARK_FRAGMENTS_MAX` loses nothing as long as each bookie appears once.

use bytes::Bytes;
use folio_meta::records::{Reader, Record, corrupt, put_string};
use folio_proto::EntryId;

pub use crate::limits::MARK_FRAGMENTS_MAX;

const MAGIC: &[u8; 4] = b"FURM";
const VERSION: u8 = 1;

/// Why a fragment lacks copies on a bookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The bookie has been gone longer than `autorecovery.lost_after`.
    Lost = 1,
    /// An operator asked to drain it (`folio bookie decommission`).
    Decommission = 2,
    /// It came back with formatted disks (a new cookie instance).
    Wiped = 3,
    /// The periodic check found entries of its write sets missing on it.
    Missing = 4,
}

impl Reason {
    /// The reason's name, as status output and logs print it.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Lost => "lost",
            Reason::Decommission => "decommission",
            Reason::Wiped => "wiped",
            Reason::Missing => "missing",
        }
    }

    fn from_u8(b: u8) -> Option<Reason> {
        Some(match b {
            1 => Reason::Lost,
            2 => Reason::Decommission,
            3 => Reason::Wiped,
            4 => Reason::Missing,
            _ => return None,
        })
    }
}

/// One fragment lacking copies on one bookie.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MarkedFragment {
    pub first_entry: EntryId,
    pub bookie: String,
    pub reason: Reason,
}

/// A ledger's under-replication mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationMark {
    pub since_ms: u64,
    /// Sorted, without two entries for one (first entry, bookie).
    pub fragments: Vec<MarkedFragment>,
}

impl ReplicationMark {
    /// Adds `new` fragments not listed yet (up to `MARK_FRAGMENTS_MAX`); whether any was.
    pub fn merge(&mut self, new: impl IntoIterator<Item = MarkedFragment>) -> bool {
        let mut changed = false;
        for f in new {
            if self.fragments.len() >= MARK_FRAGMENTS_MAX {
                break;
            }
            if !self
                .fragments
                .iter()
                .any(|g| g.first_entry == f.first_entry && g.bookie == f.bookie)
            {
                self.fragments.push(f);
                changed = true;
            }
        }
        self.fragments.sort();
        changed
    }

    /// The bookies the mark names, without repeats.
    pub fn bookies(&self) -> Vec<String> {
        let mut b: Vec<String> = self.fragments.iter().map(|f| f.bookie.clone()).collect();
        b.sort();
        b.dedup();
        b
    }
}

impl Record for ReplicationMark {
    fn encode(&self) -> Bytes {
        let n = self.fragments.len().min(MARK_FRAGMENTS_MAX);
        let mut v = Vec::with_capacity(15 + n * 32);
        v.extend_from_slice(MAGIC);
        v.push(VERSION);
        v.extend_from_slice(&self.since_ms.to_le_bytes());
        v.extend_from_slice(&(n as u16).to_le_bytes());
        for f in &self.fragments[..n] {
            v.extend_from_slice(&f.first_entry.to_le_bytes());
            put_string(&mut v, &f.bookie);
            v.push(f.reason as u8);
        }
        Bytes::from(v)
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(4)? != MAGIC {
            return Err(corrupt(key, "not an under-replication mark"));
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(corrupt(key, format!("mark format version {version}, expected 1")));
        }
        let since_ms = r.u64()?;
        let n = r.u16()? as usize;
        if n > MARK_FRAGMENTS_MAX {
            return Err(corrupt(key, format!("{n} fragments, more than {MARK_FRAGMENTS_MAX}")));
        }
        let mut fragments = Vec::with_capacity(n);
        for _ in 0..n {
            let first_entry = r.u64()? as i64;
            let bookie = r.string()?;
            let reason = Reason::from_u8(r.u8()?).ok_or_else(|| corrupt(key, "unknown reason"))?;
            fragments.push(MarkedFragment { first_entry, bookie, reason });
        }
        r.done()?;
        Ok(ReplicationMark { since_ms, fragments })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark() -> ReplicationMark {
        let mut m = ReplicationMark { since_ms: 7, fragments: Vec::new() };
        m.merge([
            MarkedFragment { first_entry: 10, bookie: "b2".into(), reason: Reason::Lost },
            MarkedFragment { first_entry: 0, bookie: "b2".into(), reason: Reason::Lost },
            MarkedFragment { first_entry: 0, bookie: "b3".into(), reason: Reason::Missing },
        ]);
        m
    }

    #[test]
    fn a_mark_round_trips_and_merging_adds_only_new_fragments() {
        let mut m = mark();
        assert_eq!(ReplicationMark::decode("k", &m.encode()).unwrap(), m);
        assert_eq!(m.fragments[0].first_entry, 0, "sorted");
        assert!(!m.merge([MarkedFragment {
            first_entry: 10,
            bookie: "b2".into(),
            reason: Reason::Decommission
        }]));
        assert_eq!(m.fragments.len(), 3);
        assert_eq!(m.bookies(), ["b2", "b3"]);
    }

    #[test]
    fn a_damaged_mark_is_an_error_not_a_panic() {
        let enc = mark().encode();
        for cut in 0..enc.len() {
            assert!(ReplicationMark::decode("k", &enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = enc.to_vec();
        *bad.last_mut().unwrap() = 9;
        assert!(ReplicationMark::decode("k", &bad).unwrap_err().to_string().contains("reason"));
    }
}
