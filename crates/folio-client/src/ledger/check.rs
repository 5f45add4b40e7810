//! The replica check (`folio ledger check`, #23 item 4): every entry of a ledger read from
//! every bookie of its write set, with the digest and ids checked, so that a missing or
//! damaged copy is named with its bookie. One entry at a time, its write set in parallel:
//! at most Qw reads in flight.

use folio_proto::wire::{LEDGERS_PAGE_MAX, LedgerUsage, MasterKey, Request, Response};
use folio_proto::{Entry, EntryId, LedgerId, Status};
use tokio::task::JoinSet;

use crate::error::{LedgerError, Result};

use super::*;

/// A copy the check did not find whole: the entry, the bookie, what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingCopy {
    pub entry_id: EntryId,
    pub bookie: String,
    pub error: String,
}

/// What a replica check read and what it did not find.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicaCheck {
    /// Entries checked (0 through the last entry, or the LAC of an open ledger).
    pub entries: u64,
    /// Copies read: entries × Qw.
    pub copies: u64,
    /// Copies missing or damaged, in entry order.
    pub missing: Vec<MissingCopy>,
}

impl LedgerReader {
    /// Reads every entry through the last one (a closed ledger) or the LAC (an open one)
    /// from each bookie of its write set.
    pub async fn check_replicas(&self) -> Result<ReplicaCheck> {
        let last = match self.last_entry_id() {
            Some(l) => l,
            None => self.read_lac().await?,
        };
        let w = self.metadata.write_quorum as usize;
        let mut out = ReplicaCheck::default();
        for entry_id in 0..=last {
            let ensemble = self.metadata.ensemble_for(entry_id);
            let mut reads = JoinSet::new();
            for i in 0..w {
                let bookie = ensemble[(entry_id as usize + i) % ensemble.len()].clone();
                let (client, id) = (self.client.clone(), self.id);
                reads.spawn(async move {
                    let r = client.read_one(&bookie, id, entry_id).await;
                    (bookie, r)
                });
            }
            let mut missing = Vec::new();
            while let Some(done) = reads.join_next().await {
                let (bookie, r) = done.expect("a replica read does not panic");
                out.copies += 1;
                if let Err(e) = r {
                    missing.push(MissingCopy { entry_id, bookie, error: e.to_string() });
                }
            }
            missing.sort_by(|a, b| a.bookie.cmp(&b.bookie));
            out.missing.extend(missing);
            out.entries += 1;
        }
        Ok(out)
    }
}

/// Single-replica access for autorecovery (`folio_repair::autorecovery`): the entries one
/// bookie holds, one entry copied to one bookie, and a replacement for an ensemble position.
impl LedgerClient {
    /// The entry ids `bookie` holds of `ledger_id`, as runs `(first, count)` (one bounded
    /// `ListEntries` request; an unknown ledger is an empty list).
    pub async fn list_entries(
        &self,
        bookie: &str,
        ledger_id: LedgerId,
    ) -> Result<Vec<(EntryId, u32)>> {
        let f = self.call(bookie, Request::ListEntries { ledger_id }).await?;
        match (f.status, f.response) {
            (Status::Ok, Response::ListEntries { ranges, .. }) => Ok(ranges),
            (Status::NoLedger, _) => Ok(Vec::new()),
            (status, _) => Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id: folio_proto::INVALID_ENTRY_ID,
                detail: format!("bookie {bookie}: listing entries: {}", status.name()),
            }),
        }
    }

    /// Every ledger `bookie` stores, with its bytes, and since when (wall ms) the bookie's GC
    /// has not listed the metadata (0: a bookie that does not say), for `folio audit`: pages
    /// of `LEDGERS_PAGE_MAX` `ListLedgers` requests until the bookie says there are no more.
    pub async fn stored_on(&self, bookie: &str) -> Result<BookieListing> {
        let mut listing = BookieListing { ledgers: Vec::new(), gc_listed_ms: u64::MAX };
        let mut from = 0u64;
        loop {
            let limit = LEDGERS_PAGE_MAX as u32;
            let f = self.call(bookie, Request::ListLedgers { from, limit }).await?;
            let (Status::Ok, Response::ListLedgers { ledgers, more, gc_listed_ms }) =
                (f.status, f.response)
            else {
                return Err(LedgerError::Refused {
                    bookie: bookie.to_string(),
                    request: "LIST_LEDGERS",
                    status: f.status.name(),
                });
            };
            // The earliest over the pages.
            listing.gc_listed_ms = listing.gc_listed_ms.min(gc_listed_ms);
            let last = ledgers.last().map(|l| l.ledger_id);
            listing.ledgers.extend(ledgers);
            match last {
                Some(l) if more => from = l + 1,
                _ => return Ok(listing),
            }
        }
    }

    /// Writes `entry` (already verified) to `bookie` as a recovery add, which passes a
    /// fence: a copy restoring a replica, never a new entry.
    pub async fn copy_entry_to(&self, bookie: &str, key: MasterKey, entry: &Entry) -> Result<()> {
        let add = Request::Add { master_key: key, recovery: true, entry: entry.as_bytes().clone() };
        let f = self.call(bookie, add).await?;
        match f.status {
            Status::Ok => Ok(()),
            Status::Unauthorized => Err(LedgerError::Unauthorized(entry.ledger_id())),
            status => Err(LedgerError::NotEnoughAcks {
                ledger_id: entry.ledger_id(),
                entry_id: entry.entry_id(),
                detail: format!("copy to {bookie}: {}", status.name()),
            }),
        }
    }

    /// A writable, not draining bookie outside `ensemble` to take position `pos`, preferring
    /// a rack no other member of its write sets holds (`placement::replacement`); `None`
    /// if there is none.
    pub async fn pick_replacement(
        &self,
        ensemble: &[String],
        pos: usize,
        write_quorum: usize,
    ) -> Result<Option<String>> {
        let (spares, racks) = self.pool.spares(ensemble).await?;
        Ok(crate::placement::replacement(&spares, &racks, pos, write_quorum, &mut folio_rt::rng()))
    }
}

/// What one bookie stores ([`LedgerClient::stored_on`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookieListing {
    /// Each ledger the bookie holds and its bytes, by ledger id.
    pub ledgers: Vec<LedgerUsage>,
    /// Since when (wall ms) the bookie's GC has not listed the metadata (0: it does not say).
    pub gc_listed_ms: u64,
}
