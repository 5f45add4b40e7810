//! The full integrity check of a bookie (BookKeeper's data integrity service), the second
//! half of running without the journal safely; the first half, the pre-boot check, is in
//! `folio_bookie::integrity`.
//!
//! For every ledger whose ensembles include this bookie, one ledger at a time:
//! 1. a ledger in **limbo** is opened with recovery (this bookie's `Unknown` answers can
//!    never truncate it), then limbo is cleared;
//! 2. the entries whose write set includes this bookie and that are missing locally are
//!    copied from the other replicas (the reader tries them in write-set order), with a
//!    bounded number of copies in flight, written as recovery adds (past the fence);
//! 3. storage is flushed.
//!
//! The persistent `NEEDS_INTEGRITY_CHECK` flag is cleared only when every ledger is whole
//! or gone, so a crash in the middle resumes the check at the next start.
//!
//! **Architecture invariant:** the only crate that links both the bookie and the ledger
//! client; the bookie never depends on the client.

pub mod autorecovery;
mod error;
pub mod limits;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use folio_bookie::index::flags::NEEDS_INTEGRITY_CHECK;
use folio_bookie::integrity::membership;
use folio_bookie::storage::Storage;
use folio_client::{LedgerClient, LedgerError};
use folio_meta::keys::Keys;
use folio_meta::records::{LedgerMetadata, LedgerState, Record};
use folio_meta::{MetadataStore, list_all};
use folio_proto::wire::master_key;
use folio_proto::{EntryId, LedgerId};
use tokio::sync::watch;

pub use error::{During, RepairError};
pub use limits::COPIES_IN_FLIGHT_MAX;

/// What a check found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub ledgers_checked: u64,
    /// Ledgers deleted from the metadata meanwhile (nothing to do).
    pub ledgers_gone: u64,
    pub limbo_cleared: u64,
    pub entries_checked: u64,
    pub entries_missing: u64,
    pub entries_copied: u64,
    pub entries_failed: u64,
    /// Ledgers that could not be checked (recovery or metadata failed); retried later.
    pub ledgers_failed: u64,
    /// The storage flag was cleared: every ledger is whole or gone.
    pub flag_cleared: bool,
}

/// What the integrity check works with: the local storage, a ledger client to copy from peers, the
/// metadata store.
#[derive(Debug, Clone)]
pub struct IntegrityCheck {
    pub storage: Arc<Storage>,
    pub client: LedgerClient,
    pub meta: Arc<dyn MetadataStore>,
    pub keys: Keys,
    pub bookie_id: String,
}

impl IntegrityCheck {
    /// Checks every ledger with this bookie in an ensemble; with `repair`, recovers limbo
    /// ledgers, copies missing entries and clears the flag when all is whole. `progress`
    /// gets (ledgers done, ledgers total).
    pub async fn run(
        &self,
        repair: bool,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<CheckReport, RepairError> {
        let mut report = CheckReport::default();
        let listed = list_all(self.meta.as_ref(), &self.keys.ledgers())
            .await
            .during(|| "listing ledgers".to_string())?;
        let mut ids: BTreeSet<LedgerId> = BTreeSet::new();
        for v in &listed {
            let Some(id) = self.keys.parse_ledger(&v.key) else { continue };
            let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
            if membership(&m, &self.bookie_id).0 {
                ids.insert(id);
            }
        }
        // Ledgers in local limbo that the listing no longer has were deleted meanwhile.
        for id in self.storage.ledger_ids() {
            if self.storage.ledger_state(id).is_some_and(|s| s.limbo) {
                ids.insert(id);
            }
        }
        let total = ids.len() as u64;
        for (i, id) in ids.into_iter().enumerate() {
            match self.check_ledger(id, repair, &mut report).await {
                Ok(()) => {}
                Err(e) => {
                    report.ledgers_failed += 1;
                    tracing::warn!(ledger = id, error = %e, "integrity check of a ledger failed; retried next time");
                }
            }
            progress(i as u64 + 1, total);
        }
        if repair {
            self.storage.flush().during(|| "flushing".to_string())?;
            if report.ledgers_failed == 0 && report.entries_failed == 0 {
                let flags = self.storage.storage_flags()?;
                if flags & NEEDS_INTEGRITY_CHECK != 0 {
                    self.storage.set_storage_flags(flags & !NEEDS_INTEGRITY_CHECK)?;
                    report.flag_cleared = true;
                    tracing::info!(bookie = %self.bookie_id, ?report, "integrity check complete: flag cleared");
                }
            }
        }
        Ok(report)
    }

    async fn check_ledger(
        &self,
        id: LedgerId,
        repair: bool,
        report: &mut CheckReport,
    ) -> Result<(), RepairError> {
        let mut m = match self.client.metadata(id).await {
            Ok(m) => m,
            Err(LedgerError::NoSuchLedger(_)) => {
                report.ledgers_gone += 1;
                if repair && self.storage.ledger_state(id).is_some_and(|s| s.limbo) {
                    self.storage.set_limbo(id, false)?;
                }
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        report.ledgers_checked += 1;
        let in_limbo = self.storage.ledger_state(id).is_some_and(|s| s.limbo);
        if in_limbo && repair {
            // Recovery does not trust this bookie's Unknown answers, so it cannot truncate.
            let reader = self.client.recover(id).await.during(|| "recovering".to_string())?;
            m = reader.metadata().clone();
            self.storage.set_limbo(id, false)?;
            report.limbo_cleared += 1;
        }
        // The last entry this bookie can be sure of: the end of a closed ledger, else the
        // end of the fragments before the last one.
        let last: EntryId = if m.state == LedgerState::Closed {
            m.last_entry_id
        } else {
            m.ensembles.last_key_value().map_or(-1, |(first, _)| first - 1)
        };
        let local: BTreeSet<EntryId> = match self.storage.list_entries(id) {
            Ok(v) => v.into_iter().collect(),
            Err(_) => BTreeSet::new(),
        };
        let w = i64::from(m.write_quorum);
        let mut missing = Vec::new();
        for e in 0..=last {
            let ensemble = m.ensemble_for(e);
            let n = ensemble.len() as i64;
            let Some(pos) = ensemble.iter().position(|b| *b == self.bookie_id) else { continue };
            let in_write_set = (0..w).any(|i| (e + i) % n == pos as i64);
            if in_write_set {
                report.entries_checked += 1;
                if !local.contains(&e) {
                    missing.push(e);
                }
            }
        }
        report.entries_missing += missing.len() as u64;
        if !repair || missing.is_empty() {
            return Ok(());
        }
        let key = master_key(m.password.as_deref().unwrap_or_default());
        let reader = Arc::new(self.client.open(id).await?);
        let sem = Arc::new(tokio::sync::Semaphore::new(COPIES_IN_FLIGHT_MAX));
        let mut copies = tokio::task::JoinSet::new();
        for e in missing {
            let permit = sem.clone().acquire_owned().await.expect("the semaphore is never closed");
            let (reader, storage) = (reader.clone(), self.storage.clone());
            copies.spawn(async move {
                let _permit = permit;
                let entry = reader.read(e).await?;
                let (tx, rx) = tokio::sync::oneshot::channel();
                storage.add_entry(
                    entry.into_bytes(),
                    &key,
                    true,
                    Box::new(move |r| {
                        let _ = tx.send(r);
                    }),
                )?;
                match rx.await {
                    Ok(r) => r.map_err(RepairError::from),
                    Err(_) => Err(RepairError::Task {
                        what: "adding to the local storage: it dropped the add unanswered".into(),
                        source: None,
                    }),
                }
            });
        }
        while let Some(r) = copies.join_next().await {
            match r {
                Ok(Ok(())) => report.entries_copied += 1,
                Ok(Err(e)) => {
                    report.entries_failed += 1;
                    tracing::warn!(ledger = id, error = %e, "copying an entry failed");
                }
                Err(e) => {
                    report.entries_failed += 1;
                    tracing::warn!(ledger = id, error = %e, "copy task failed");
                }
            }
        }
        Ok(())
    }

    /// Runs the check with repair whenever the storage flag is set, every `interval`,
    /// until `stop` turns true.
    pub async fn serve(self, interval: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            let flagged =
                self.storage.storage_flags().is_ok_and(|f| f & NEEDS_INTEGRITY_CHECK != 0);
            if flagged {
                match self.run(true, &|_, _| {}).await {
                    Ok(r) => tracing::info!(?r, "integrity check pass"),
                    Err(e) => tracing::warn!(error = %e, "integrity check pass failed"),
                }
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}
