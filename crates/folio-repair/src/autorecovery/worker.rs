//! The replication worker: restores one marked ledger at a time.
//!
//! For every bookie a ledger's mark names, every fragment of the ledger's current metadata
//! holding that bookie is restored:
//! - the **target** is the bookie itself when it is registered and not being drained (it
//!   came back wiped, or the periodic check found entries missing: its missing entries are
//!   copied back to it, the metadata does not change), else a **replacement** picked by the
//!   placement rules (writable, not draining, outside the ensemble, another rack first);
//! - the fragment's entries whose write set holds the position are read from the write set
//!   (digests and ids checked) and written to the target as recovery adds, at most
//!   `COPIES_IN_FLIGHT_MAX` at once, paced to `AutorecoveryConfig::bytes_per_s`;
//! - for a replacement, one compare-and-set then swaps the bookie into that fragment's
//!   ensemble, only if the position still holds the bookie being replaced: when another
//!   worker (or the ledger's writer) got there first, this worker's copies are discarded
//!   (the target's garbage collection reclaims them) and counted.
//!
//! Readers never see a half-done copy: the metadata names the target only after every copy
//! is written and the target lists every entry (just before the swap: what the first
//! listing took as present may have been dropped since). After the swap the target's
//! entries are listed again: anything missing (the target's GC took the copy for
//! over-replication, a crash lost it) is marked for the target, so the mark stays until a
//! refill makes the copy whole. Copying stops as soon as the lease holding the claim is
//! lost, and the claim is released with a compare on its version: never the next worker's
//! claim. A worker that dies mid-copy leaves its claim to expire with its lease, and the
//! next worker starts the ledger over.
//!
//! The last fragment of an open ledger is its writer's: the writer replaces a failed bookie
//! itself (an ensemble change) when an add fails. Once the mark is older than
//! `open_ledger_grace`, the ledger is fenced and recovered (closed) and then handled like
//! any closed ledger.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use folio_client::{LedgerError, LedgerReader};
use folio_meta::records::{LedgerMetadata, LedgerState, Record, Update, update};
use folio_meta::{Expect, MetaError};
use folio_proto::EntryId;
use folio_proto::wire::master_key;
use tokio::task::JoinSet;

use super::Autorecovery;
use super::mark::{MarkedFragment, Reason, ReplicationMark};

use crate::limits::COPIES_IN_FLIGHT_MAX;
use crate::{During, RepairError};

/// What restoring one ledger came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every marked fragment is whole; the mark is dropped.
    Healed(Healed),
    /// The ledger (or its mark) is gone: nothing to do; the mark is dropped.
    Gone,
    /// Not now (a live writer's last fragment within its grace, no spare bookie); the mark
    /// stays and is tried again later.
    Deferred(String),
}

/// What a worker did for one ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Healed {
    /// Fragments given a replacement bookie (one metadata change each).
    pub replaced: u64,
    /// Fragments whose missing entries were copied back to the bookie itself.
    pub refilled: u64,
    /// Fragments another worker (or the writer) restored first: this worker's copies of
    /// them were discarded.
    pub lost_races: u64,
    pub entries_copied: u64,
    pub bytes_copied: u64,
}

/// A fragment of a ledger: its first entry, its last (`None` while it is the last fragment
/// of an open ledger), its ensemble, and the position of the bookie being restored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    pub first: EntryId,
    pub last: Option<EntryId>,
    pub ensemble: Vec<String>,
    pub pos: usize,
}

/// The fragments of `m` whose ensemble holds `bookie`.
pub fn fragments_of(m: &LedgerMetadata, bookie: &str) -> Vec<Fragment> {
    let starts: Vec<EntryId> = m.ensembles.keys().copied().collect();
    let mut out = Vec::new();
    for (i, (&first, ensemble)) in m.ensembles.iter().enumerate() {
        let Some(pos) = ensemble.iter().position(|b| b == bookie) else { continue };
        let last = match starts.get(i + 1) {
            Some(next) => Some(next - 1),
            None if m.state == LedgerState::Closed => Some(m.last_entry_id),
            None => None,
        };
        out.push(Fragment { first, last, ensemble: ensemble.clone(), pos });
    }
    out
}

/// Whether ensemble position `pos` is in the write set of `entry` (positions
/// `(entry + i) mod E`, `i < Qw`).
pub fn in_write_set(entry: EntryId, pos: usize, ensemble_size: usize, write_quorum: usize) -> bool {
    ((pos as i64 - entry).rem_euclid(ensemble_size as i64) as usize) < write_quorum
}

/// The entries of `[first, last]` whose write set holds `pos`.
pub fn entries_on(
    first: EntryId,
    last: EntryId,
    pos: usize,
    ensemble_size: usize,
    write_quorum: usize,
) -> impl Iterator<Item = EntryId> {
    (first..=last).filter(move |&e| in_write_set(e, pos, ensemble_size, write_quorum))
}

/// The entries of fragment `f` of `m` whose write set holds `f`'s position and that the
/// runs `present` (a bookie's `ListEntries` answer) do not list; none for a fragment still
/// being written.
pub fn missing_from(m: &LedgerMetadata, f: &Fragment, present: &[(EntryId, u32)]) -> Vec<EntryId> {
    let (e, w) = (m.ensemble_size as usize, m.write_quorum as usize);
    let Some(last) = f.last else { return Vec::new() };
    entries_on(f.first, last, f.pos, e, w).filter(|&x| !listed(present, x)).collect()
}

/// Whether `entry` is in one of the runs `(first, count)` (sorted, as bookies list them).
pub fn listed(ranges: &[(EntryId, u32)], entry: EntryId) -> bool {
    let i = ranges.partition_point(|&(first, _)| first <= entry);
    i > 0 && {
        let (first, count) = ranges[i - 1];
        entry < first + i64::from(count)
    }
}

impl Autorecovery {
    /// Restores every fragment `ledger_id`'s mark names, then drops the mark (see the
    /// module comment). Errors leave the mark for a later attempt.
    pub async fn replicate_ledger(&self, ledger_id: u64) -> Result<Outcome, RepairError> {
        let inner = &self.inner;
        let mark_key = inner.keys.under_replicated_ledger(ledger_id);
        let mut healed = Healed::default();
        // A few rounds: the auditor may add fragments meanwhile (then the mark's version
        // moved and it is read again), and recovering an open ledger changes its fragments.
        for _ in 0..4 {
            let Some(v) = inner.meta.get(&mark_key).await? else {
                // Dropped by another worker that restored the rest (or lost a race to us).
                return Ok(if healed == Healed::default() {
                    Outcome::Gone
                } else {
                    Outcome::Healed(healed)
                });
            };
            let mark = ReplicationMark::decode(&mark_key, &v.value)?;
            let metadata = match inner.client.metadata(ledger_id).await {
                Ok(m) => m,
                Err(LedgerError::NoSuchLedger(_)) => {
                    drop_mark(self, &mark_key, v.version).await?;
                    return Ok(Outcome::Gone);
                }
                Err(e) => return Err(e.into()),
            };
            let mut work = Vec::new();
            for bookie in mark.bookies() {
                for f in fragments_of(&metadata, &bookie) {
                    work.push((bookie.clone(), f));
                }
            }
            // The last fragment of an open ledger: its writer's, until the grace is over.
            if work.iter().any(|(_, f)| f.last.is_none()) {
                let age = self.now_ms().saturating_sub(mark.since_ms);
                if age < inner.config.open_ledger_grace.as_millis() as u64 {
                    work.retain(|(_, f)| f.last.is_some());
                    if work.is_empty() {
                        return Ok(Outcome::Deferred(format!(
                            "ledger {ledger_id} is open and its last fragment holds a marked bookie: left to its writer for {:?}",
                            inner.config.open_ledger_grace
                        )));
                    }
                } else {
                    tracing::info!(
                        ledger = ledger_id,
                        age_ms = age,
                        "fencing and recovering an open ledger whose last fragment holds a marked bookie"
                    );
                    inner.client.recover(ledger_id).await?;
                    continue;
                }
            }
            let reader = Arc::new(inner.client.open(ledger_id).await?);
            let draining = self.draining().await?;
            let registered = self.registered().await?;
            let mut deferred = None;
            for (bookie, f) in &work {
                let refill = registered.contains(bookie) && !draining.contains(bookie);
                match self.restore(&reader, &metadata, bookie, f, refill, &mut healed).await {
                    Ok(()) => {}
                    Err(Restore::Deferred(why)) => deferred = Some(why),
                    Err(Restore::Failed(e)) => return Err(e),
                }
            }
            if let Some(why) = deferred {
                return Ok(Outcome::Deferred(why));
            }
            if work.iter().any(|(_, f)| f.last.is_none()) {
                continue; // an open last fragment was skipped: not whole yet
            }
            // Every fragment restored: drop the mark, unless the auditor added to it.
            if drop_mark(self, &mark_key, v.version).await? {
                inner.stats.ledgers_healed.fetch_add(1, Relaxed);
                tracing::info!(
                    ledger = ledger_id,
                    replaced = healed.replaced,
                    refilled = healed.refilled,
                    entries = healed.entries_copied,
                    bytes = healed.bytes_copied,
                    "ledger re-replicated"
                );
                return Ok(Outcome::Healed(healed));
            }
        }
        Ok(Outcome::Deferred(format!("ledger {ledger_id}: its mark or fragments kept changing")))
    }

    /// Restores `bookie`'s copies of fragment `f`.
    async fn restore(
        &self,
        reader: &Arc<LedgerReader>,
        metadata: &LedgerMetadata,
        bookie: &str,
        f: &Fragment,
        refill: bool,
        healed: &mut Healed,
    ) -> Result<(), Restore> {
        let inner = &self.inner;
        let id = reader.id();
        let w = metadata.write_quorum as usize;
        assert!(f.last.is_some(), "only fragments with an end are restored");
        let target = if refill {
            bookie.to_string()
        } else {
            match inner.client.pick_replacement(&f.ensemble, f.pos, w).await {
                Ok(Some(t)) => t,
                Ok(None) => {
                    return Err(Restore::Deferred(format!(
                        "ledger {id}: no writable bookie outside ensemble {:?} to replace {bookie}",
                        f.ensemble
                    )));
                }
                Err(err) => return Err(Restore::Failed(err.into())),
            }
        };
        // What the target has already (a refill, or a replacement that an earlier worker
        // began to fill before it died).
        let present = inner
            .client
            .list_entries(&target, id)
            .await
            .during(|| format!("ledger {id}: listing entries on {target}"))
            .map_err(Restore::Failed)?;
        let key = master_key(metadata.password.as_deref().unwrap_or_default());
        let todo = missing_from(metadata, f, &present);
        let mut copies = JoinSet::new();
        let mut first_error = None;
        for entry_id in todo {
            while copies.len() >= COPIES_IN_FLIGHT_MAX {
                self.copied(copies.join_next().await, healed, &mut first_error);
            }
            if !self.claim_held() {
                copies.abort_all();
                break; // reported below
            }
            let (me, reader, target) = (self.clone(), reader.clone(), target.clone());
            copies.spawn(async move {
                let entry = reader.read(entry_id).await?;
                let n = entry.as_bytes().len() as u64;
                me.pace(n).await; // before the write: the rate bounds what the target takes
                me.inner.client.copy_entry_to(&target, key, &entry).await?;
                Ok::<u64, LedgerError>(n)
            });
        }
        while !copies.is_empty() {
            if !self.claim_held() {
                copies.abort_all();
                break; // reported below
            }
            self.copied(copies.join_next().await, healed, &mut first_error);
        }
        if let Some(err) = first_error {
            return Err(Restore::Failed(RepairError::During {
                what: format!("ledger {id}: copying fragment {} of {bookie} to {target}", f.first),
                source: Box::new(err),
            }));
        }
        if !self.claim_held() {
            // The claim went with the lease: the next worker owns this ledger now.
            inner.stats.copies_stopped.fetch_add(1, Relaxed);
            tracing::warn!(ledger = id, %target, "autorecovery lease lost: copying stopped, no swap");
            return Err(Restore::Failed(RepairError::LeaseLost { ledger: id, target }));
        }
        if refill {
            assert_eq!(target, bookie, "a refill copies back to the marked bookie itself");
            healed.refilled += 1;
        } else {
            assert!(!f.ensemble.contains(&target), "a replacement is outside the ensemble");
            // Whole before it is named: what the listing above took as present may have
            // gone since (the target's GC dropping a stale copy).
            self.verify(id, metadata, f, &target).await.map_err(Restore::Failed)?;
            let swapped = self.swap_in(id, f, bookie, &target, healed).await;
            if !swapped.map_err(Restore::Failed)? {
                return Ok(()); // another worker's copy is the one named
            }
        }
        self.verify(id, metadata, f, &target).await.map_err(Restore::Failed)
    }

    /// After the copy (and the swap), the target must list every entry of the fragment its
    /// position holds: the copy may have been cut short under it (a GC pass that took it
    /// for over-replication, a crash that lost it). What is missing is added to the mark
    /// for the target, so the mark stays and the next round refills it.
    async fn verify(
        &self,
        id: u64,
        metadata: &LedgerMetadata,
        f: &Fragment,
        target: &str,
    ) -> Result<(), RepairError> {
        let present = self
            .inner
            .client
            .list_entries(target, id)
            .await
            .during(|| format!("ledger {id}: verifying the copy on {target}"))?;
        let missing = missing_from(metadata, f, &present).len();
        if missing == 0 {
            return Ok(());
        }
        // Broken unless the target lost what it acknowledged (journal-less, or wiped): its
        // GC must keep a copy being made.
        tracing::warn!(
            ledger = id,
            fragment = f.first,
            target = %target,
            missing,
            invariant = "a copy being made is never collected",
            "copy incomplete after it was made; marking the target for a refill"
        );
        let again = MarkedFragment {
            first_entry: f.first,
            bookie: target.to_string(),
            reason: Reason::Missing,
        };
        self.mark(id, vec![again]).await?;
        Err(RepairError::CopyIncomplete {
            ledger: id,
            target: target.to_string(),
            fragment: f.first,
            missing,
        })
    }

    /// The compare-and-set that names `target` in place of `bookie` in fragment `f`.
    async fn swap_in(
        &self,
        id: u64,
        f: &Fragment,
        bookie: &str,
        target: &str,
        healed: &mut Healed,
    ) -> Result<bool, RepairError> {
        let key = self.inner.keys.ledger(id);
        let mut lost_race = false;
        let result = update::<LedgerMetadata>(self.inner.meta.as_ref(), &key, |m| {
            let Some(m) = m else { return Ok(Update::Nothing) };
            let ensemble = m.ensembles.get(&f.first);
            if ensemble.is_none_or(|ens| ens.get(f.pos).map(String::as_str) != Some(bookie)) {
                lost_race = true; // someone else replaced it first
                return Ok(Update::Nothing);
            }
            if ensemble.is_some_and(|ens| ens.iter().any(|b| b == target)) {
                // The target joined this ensemble meanwhile: pick again next round.
                return Err(MetaError::Conflict { key: key.clone() });
            }
            lost_race = false;
            let mut m = m.clone();
            m.ensembles.get_mut(&f.first).expect("checked above")[f.pos] = target.to_string();
            Ok(Update::Write(m))
        })
        .await;
        result.during(|| format!("ledger {id}: swapping {target} in for {bookie}"))?;
        if lost_race {
            healed.lost_races += 1;
            self.inner.stats.copies_discarded.fetch_add(1, Relaxed);
            tracing::info!(ledger = id, fragment = f.first, %bookie, %target, "another worker restored this fragment first; this copy is discarded");
        } else {
            healed.replaced += 1;
            tracing::info!(ledger = id, fragment = f.first, %bookie, replacement = %target, "fragment re-replicated");
        }
        Ok(!lost_race)
    }

    fn copied(
        &self,
        done: Option<Result<Result<u64, LedgerError>, tokio::task::JoinError>>,
        healed: &mut Healed,
        first_error: &mut Option<RepairError>,
    ) {
        let stats = &self.inner.stats;
        match done {
            Some(Ok(Ok(n))) => {
                healed.entries_copied += 1;
                healed.bytes_copied += n;
                stats.entries_copied.fetch_add(1, Relaxed);
                stats.bytes_copied.fetch_add(n, Relaxed);
            }
            Some(Ok(Err(e))) => {
                stats.copy_errors.fetch_add(1, Relaxed);
                first_error.get_or_insert(e.into());
            }
            Some(Err(e)) => {
                stats.copy_errors.fetch_add(1, Relaxed);
                first_error.get_or_insert(RepairError::Task {
                    what: format!("copying an entry: {e}"),
                    source: Some(Box::new(e)),
                });
            }
            None => {}
        }
    }
}

/// Why a fragment was not restored.
enum Restore {
    Deferred(String),
    Failed(RepairError),
}

/// Deletes the mark if it is still at `version`; whether it was.
async fn drop_mark(a: &Autorecovery, key: &str, version: u64) -> Result<bool, RepairError> {
    a.inner.meta.delete(key, Expect::Version(version)).await.or_else(|e| match e {
        MetaError::Conflict { .. } => Ok(false),
        e => Err(e.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_sets_and_fragment_entries_follow_the_striping() {
        // E=3, Qw=2: entry 0 on {0,1}, 1 on {1,2}, 2 on {2,0}.
        assert!(in_write_set(0, 0, 3, 2) && in_write_set(0, 1, 3, 2) && !in_write_set(0, 2, 3, 2));
        assert!(in_write_set(2, 0, 3, 2) && !in_write_set(1, 0, 3, 2));
        assert_eq!(entries_on(0, 5, 0, 3, 2).collect::<Vec<_>>(), [0, 2, 3, 5]);
        assert_eq!(entries_on(4, 3, 0, 3, 2).count(), 0, "an empty fragment");
        assert_eq!(entries_on(0, 3, 1, 2, 2).count(), 4, "E = Qw: every entry");
    }

    #[test]
    fn listed_finds_entries_in_runs() {
        let runs = [(0, 3), (5, 2), (9, 1)];
        let hits: Vec<EntryId> = (0..11).filter(|&e| listed(&runs, e)).collect();
        assert_eq!(hits, [0, 1, 2, 5, 6, 9]);
        assert!(!listed(&[], 0));
    }
}
