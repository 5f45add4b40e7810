//! Recovery: fence the ledger on enough bookies of every write set, read forward until a
//! quorum says an entry is missing, write back what a quorum saw, close at the last entry
//! found. Unknown answers (errors, limbo) are never taken for "missing".

use std::collections::BTreeMap;

use folio_meta::records::{LedgerMetadata, LedgerState, Update, update};
use folio_proto::wire::{MasterKey, Request, Response};
use folio_proto::{Entry, EntryId, INVALID_ENTRY_ID, LedgerId, Status};

use crate::error::{LedgerError, Result};

pub use folio_proto::wire::master_key;

use super::*;

/// For every write set (Qw consecutive positions) of `ensemble_size`, at least
/// `Qw − Qa + 1` definite answers: then no Qa bookies are left that could still accept a
/// write, so the fence covers the ledger.
pub(super) fn quorum_coverage(definite: &[bool], write_quorum: usize, ack_quorum: usize) -> bool {
    let e = definite.len();
    (0..e).all(|start| {
        (0..write_quorum).filter(|i| definite[(start + i) % e]).count() > write_quorum - ack_quorum
    })
}

impl LedgerClient {
    pub(super) async fn ask(
        &self,
        bookie: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
        key: MasterKey,
    ) -> Answer {
        let result =
            self.call(bookie, Request::Read { ledger_id, entry_id, fence: Some(key) }).await;
        match result {
            Ok(f) => match (f.status, f.response) {
                (Status::Ok, Response::Read { entry: Some(bytes), .. }) => {
                    match Entry::decode(bytes) {
                        Ok(e)
                            if e.ledger_id() == ledger_id
                                && (entry_id < 0 || e.entry_id() == entry_id) =>
                        {
                            Answer::Has(e)
                        }
                        Ok(_) => Answer::Unknown(format!("{bookie}: returned another entry")),
                        Err(err) => Answer::Unknown(format!("{bookie}: bad copy: {err}")),
                    }
                }
                (Status::NoEntry | Status::NoLedger, _) => Answer::Missing,
                (Status::Unknown, _) => Answer::Limbo(format!("{bookie}: UNKNOWN (limbo)")),
                (status, _) => Answer::Unknown(format!("{bookie}: {}", status.name())),
            },
            Err(e) => Answer::Unknown(format!("{bookie}: {e}")),
        }
    }

    /// Opens a ledger with recovery: fences it so its writer can never add again (D3),
    /// finds its end without trusting bookies that may have lost data (D2), writes back what
    /// it finds so every entry reaches its write quorum, and closes it so that every entry
    /// the writer saw acknowledged lies at or below the last entry (D1).
    pub async fn recover(&self, ledger_id: LedgerId) -> Result<LedgerReader> {
        let key_name = self.keys.ledger(ledger_id);
        // 1. Mark IN_RECOVERY (a second recovery joins the first; both are idempotent).
        let marked = update::<LedgerMetadata>(self.meta.as_ref(), &key_name, |m| match m {
            None => Ok(Update::Nothing),
            Some(m) if m.state == LedgerState::Open => {
                let mut m = m.clone();
                m.state = LedgerState::InRecovery;
                Ok(Update::Write(m))
            }
            Some(_) => Ok(Update::Nothing),
        })
        .await?;
        let Some((metadata, _)) = marked else { return Err(LedgerError::NoSuchLedger(ledger_id)) };
        if metadata.state == LedgerState::Closed {
            return Ok(LedgerReader::new(ledger_id, metadata, self.clone()));
        }
        let key = master_key(metadata.password.as_deref().unwrap_or_default());
        let (w, a) = (metadata.write_quorum as usize, metadata.ack_quorum as usize);
        let (&first, ensemble) = metadata.ensembles.last_key_value().expect("validated metadata");
        let ensemble = ensemble.clone();

        // 2. Fence every bookie of the last ensemble and learn the LAC, under quorum coverage.
        let mut asks = Vec::new();
        for b in &ensemble {
            let (client, b) = (self.clone(), b.clone());
            asks.push(tokio::spawn(async move {
                client.ask(&b, ledger_id, INVALID_ENTRY_ID, key).await
            }));
        }
        let mut lac = INVALID_ENTRY_ID;
        let (mut definite, mut unknown) = (Vec::new(), Vec::new());
        for t in asks {
            match t.await.unwrap_or(Answer::Unknown("task failed".into())) {
                Answer::Has(e) => {
                    lac = lac.max(e.last_add_confirmed());
                    definite.push(true);
                }
                Answer::Missing => definite.push(true),
                // Fenced, but its LAC is unknown: the others' LAC (or the last fragment's
                // start) is where reading starts, which is only ever earlier.
                Answer::Limbo(_) => definite.push(true),
                Answer::Unknown(why) => {
                    definite.push(false);
                    unknown.push(why);
                }
            }
        }
        if !quorum_coverage(&definite, w, a) {
            return Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id: INVALID_ENTRY_ID,
                detail: format!("fencing did not reach quorum coverage: {}", unknown.join("; ")),
            });
        }
        // 3. Start after the LAC, and never before the last fragment (BookKeeper #2615).
        lac = lac.max(first - 1);
        // Where write-backs go; replaced bookies start new fragments, recorded at close.
        let mut target = WriteBack {
            ledger_id,
            key,
            ensemble: ensemble.clone(),
            fragments: BTreeMap::new(),
            w,
            a,
        };
        let mut last_length = None;

        // 4–5. Read forward with fencing reads (BookKeeper #2614); write back positives.
        let mut entry_id = lac + 1;
        loop {
            let set: Vec<String> = (0..w)
                .map(|i| ensemble[((entry_id + i as i64) % ensemble.len() as i64) as usize].clone())
                .collect();
            let mut asks = Vec::new();
            for b in &set {
                let (client, b) = (self.clone(), b.clone());
                asks.push(tokio::spawn(
                    async move { client.ask(&b, ledger_id, entry_id, key).await },
                ));
            }
            let (mut found, mut missing, mut unknown) = (None, 0, Vec::new());
            for t in asks {
                match t.await.unwrap_or(Answer::Unknown("task failed".into())) {
                    Answer::Has(e) => found = Some(e),
                    Answer::Missing => missing += 1,
                    Answer::Unknown(why) | Answer::Limbo(why) => unknown.push(why),
                }
            }
            if let Some(entry) = found {
                self.write_back(&mut target, &entry).await?;
                last_length = Some(entry.header().length);
                lac = entry_id;
                entry_id += 1;
                continue;
            }
            if missing > w - a {
                break; // a definite negative: nothing at or after it was ever acknowledged
            }
            return Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id,
                detail: format!(
                    "recovery cannot decide entry {entry_id}: {missing} of the {} no-entry answers needed, the rest unknown ({})",
                    w - a + 1,
                    unknown.join("; ")
                ),
            });
        }
        let length = match last_length {
            Some(l) => l,
            None if lac >= 0 => {
                self.open(ledger_id).await?.read_unchecked(lac).await?.header().length
            }
            None => 0,
        };
        // 6. Close. If a concurrent recovery closed first, its end is the ledger's end.
        let closed = update::<LedgerMetadata>(self.meta.as_ref(), &key_name, |m| match m {
            None => Ok(Update::Nothing),
            Some(m) if m.state == LedgerState::Closed => Ok(Update::Nothing),
            Some(m) => {
                let mut m = m.clone();
                m.state = LedgerState::Closed;
                m.last_entry_id = lac;
                m.length = length;
                for (start, ensemble) in target.fragments.range(..=lac) {
                    m.ensembles.insert(*start, ensemble.clone());
                }
                Ok(Update::Write(m))
            }
        })
        .await?;
        let Some((metadata, _)) = closed else { return Err(LedgerError::NoSuchLedger(ledger_id)) };
        tracing::info!(
            ledger = ledger_id,
            last_entry = metadata.last_entry_id,
            "ledger recovered and closed"
        );
        Ok(LedgerReader::new(ledger_id, metadata, self.clone()))
    }

    /// Re-adds a recovered entry to its write set with the recovery flag (which passes the
    /// fence) and waits for every position to take it. A bookie that fails is replaced in
    /// the recovery's own ensemble (BookKeeper's `newEnsemblesFromRecovery`): the new
    /// fragment starts at this entry and is written to the metadata when the ledger closes.
    pub(super) async fn write_back(&self, t: &mut WriteBack, entry: &Entry) -> Result<()> {
        let WriteBack { ledger_id, key, ensemble, fragments, w, a } = t;
        let (ledger_id, key, w, a) = (*ledger_id, *key, *w, *a);
        let entry_id = entry.entry_id();
        let e = ensemble.len() as i64;
        let mut oks = 0;
        let mut failures = Vec::new();
        for i in 0..w {
            let pos = ((entry_id + i as i64) % e) as usize;
            // Each position gets a few chances: the bookie, then replacements.
            for _ in 0..3 {
                let b = ensemble[pos].clone();
                let add = Request::Add {
                    master_key: key,
                    recovery: true,
                    entry: entry.as_bytes().clone(),
                };
                match self.call(&b, add).await {
                    Ok(f) if f.status == Status::Ok => {
                        oks += 1;
                        break;
                    }
                    Ok(f) if matches!(f.status, Status::Unauthorized) => {
                        return Err(LedgerError::Unauthorized(ledger_id));
                    }
                    other => {
                        let why = match other {
                            Ok(f) => f.status.name().to_string(),
                            Err(e) => e.to_string(),
                        };
                        failures.push(format!("{b}: {why}"));
                        let (spare, racks) = self.pool.spares(ensemble).await?;
                        let Some(pick) = crate::placement::replacement(
                            &spare,
                            &racks,
                            pos,
                            w,
                            &mut folio_rt::rng(),
                        ) else {
                            break;
                        };
                        tracing::info!(ledger = ledger_id, failed = %b, replacement = %pick, from_entry = entry_id, "recovery replaces a bookie");
                        ensemble[pos] = pick;
                        fragments.insert(entry_id, ensemble.clone());
                    }
                }
            }
        }
        if oks >= a {
            return Ok(());
        }
        Err(LedgerError::NotEnoughAcks {
            ledger_id,
            entry_id,
            detail: format!("recovery write-back: {}", failures.join("; ")),
        })
    }
}
