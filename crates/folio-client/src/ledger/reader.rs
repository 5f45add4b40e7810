//! The reader: entries verified (digest, ledger and entry ids) before they are returned, the
//! next replica of the write set tried on a bad or missing copy (speculatively after
//! `speculative_read_timeout`), the LAC and long-poll tailing.

use folio_meta::records::{LedgerMetadata, LedgerState};
use folio_proto::wire::{Request, Response};
use folio_proto::{Entry, EntryId, INVALID_ENTRY_ID, LedgerId, Status};

use std::sync::atomic::Ordering::Relaxed;

use crate::error::{LedgerError, Result};

use super::*;

impl LedgerReader {
    /// The ledger's id.
    pub fn id(&self) -> LedgerId {
        self.id
    }

    /// The metadata the reader opened the ledger with.
    pub fn metadata(&self) -> &LedgerMetadata {
        &self.metadata
    }

    /// The last entry of a closed ledger; `None` while it is open.
    pub fn last_entry_id(&self) -> Option<EntryId> {
        (self.metadata.state == LedgerState::Closed).then_some(self.metadata.last_entry_id)
    }

    /// The highest LAC any bookie of the last ensemble reports.
    pub async fn read_lac(&self) -> Result<EntryId> {
        let (_, ensemble) = self.metadata.ensembles.last_key_value().expect("validated metadata");
        let mut best = INVALID_ENTRY_ID;
        let mut errors = Vec::new();
        for b in ensemble {
            match self.client.call(b, Request::ReadLac { ledger_id: self.id }).await {
                Ok(f) => match f.response {
                    Response::ReadLac { lac: Some(l), .. } if f.status == Status::Ok => {
                        best = best.max(l)
                    }
                    _ => errors.push(format!("{b}: {}", f.status.name())),
                },
                Err(e) => errors.push(format!("{b}: {e}")),
            }
        }
        if best == INVALID_ENTRY_ID && errors.len() == ensemble.len() {
            return Err(LedgerError::ReadFailed {
                ledger_id: self.id,
                entry_id: INVALID_ENTRY_ID,
                detail: errors.join("; "),
            });
        }
        Ok(best)
    }

    /// Reads one entry from its write set, trying each bookie in turn.
    pub async fn read(&self, entry_id: EntryId) -> Result<Entry> {
        if let Some(last) = self.last_entry_id()
            && entry_id > last
        {
            return Err(LedgerError::PastEnd { ledger_id: self.id, entry_id, last });
        }
        let ensemble = self.metadata.ensemble_for(entry_id);
        let (e, w) = (ensemble.len() as i64, self.metadata.write_quorum as i64);
        // The write set in the order tried: from the sticky bookie when it holds every
        // entry (see `LedgerReader::sticky`), else from the entry's first replica.
        let sticky = (w == e).then(|| self.sticky.load(Relaxed));
        let first = sticky.map_or(entry_id, |s| (s % e as usize) as i64);
        let replicas: Vec<String> =
            (0..w).map(|i| ensemble[((first + i) % e) as usize].clone()).collect();
        let (tx, mut rx) = tokio::sync::mpsc::channel(replicas.len());
        let attempt = |bookie: String| {
            let (client, tx, id) = (self.client.clone(), tx.clone(), self.id);
            tokio::spawn(async move {
                let r = client.read_one(&bookie, id, entry_id).await;
                let _ = tx.send((bookie, r)).await;
            });
        };
        let (mut next, mut outstanding) = (1, 1);
        attempt(replicas[0].clone());
        let mut errors: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                Some((bookie, r)) = rx.recv() => {
                    outstanding -= 1;
                    match r {
                        Ok(entry) => return Ok(entry),
                        Err(e) => {
                            // The sticky bookie failed: later reads start at the next one.
                            if let Some(s) = sticky
                                && bookie == replicas[0]
                            {
                                let _ = self.sticky.compare_exchange(s, s.wrapping_add(1), Relaxed, Relaxed);
                            }
                            errors.push(format!("{bookie}: {e}"));
                        }
                    }
                    if next < replicas.len() {
                        attempt(replicas[next].clone());
                        next += 1;
                        outstanding += 1;
                    } else if outstanding == 0 {
                        break;
                    }
                }
                // Speculative read: the next replica, without waiting for this one.
                () = tokio::time::sleep(self.client.speculative_read_timeout), if next < replicas.len() => {
                    attempt(replicas[next].clone());
                    next += 1;
                    outstanding += 1;
                }
            }
        }
        errors.sort();
        Err(LedgerError::ReadFailed { ledger_id: self.id, entry_id, detail: errors.join("; ") })
    }

    /// Waits until the LAC passes `after` (tailing a ledger that is still written), polling
    /// every `poll`; returns the new LAC, or the last entry if the ledger got closed.
    pub async fn wait_for_lac(
        &mut self,
        after: EntryId,
        poll: std::time::Duration,
    ) -> Result<EntryId> {
        loop {
            let lac = self.read_lac().await?;
            if lac > after {
                return Ok(lac);
            }
            self.metadata = self.client.metadata(self.id).await?;
            if let Some(last) = self.last_entry_id() {
                return Ok(last);
            }
            tokio::time::sleep(poll).await;
        }
    }
}

impl LedgerClient {
    /// One entry from one bookie, verified (digest, ledger and entry ids).
    pub(super) async fn read_one(
        &self,
        bookie: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> Result<Entry> {
        let f = self.call(bookie, Request::Read { ledger_id, entry_id, fence: None }).await?;
        let bytes = match f.response {
            Response::Read { entry: Some(bytes), .. } if f.status == Status::Ok => bytes,
            _ => {
                return Err(LedgerError::ReadFailed {
                    ledger_id,
                    entry_id,
                    detail: f.status.name().to_string(),
                });
            }
        };
        match Entry::decode(bytes) {
            Ok(e) if e.ledger_id() == ledger_id && e.entry_id() == entry_id => Ok(e),
            Ok(_) => Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id,
                detail: "returned another entry".into(),
            }),
            Err(e) => Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id,
                detail: format!("bad copy: {e}"),
            }),
        }
    }
}

impl LedgerReader {
    /// Reads an entry without checking it against the closed end (recovery uses it).
    pub(super) async fn read_unchecked(&self, entry_id: EntryId) -> Result<Entry> {
        let mut m = self.metadata.clone();
        m.state = LedgerState::Open;
        LedgerReader::new(self.id, m, self.client.clone()).read(entry_id).await
    }
}
