//! Garbage collection: give the disk back for ledgers that no longer exist (L1), looking at
//! every sealed entry log whatever the state of the others (L2).
//!
//! One pass:
//! 1. List the metadata store's ledgers. Any error, including one on a later page, ends
//!    the pass having deleted nothing: a partial listing looks like "everything else was
//!    deleted", which is how other systems lost live data.
//! 2. Every local ledger missing from the listing is a candidate. Its metadata is read again
//!    on its own, and it is dropped only on a definite "does not exist" (a ledger created
//!    after the listing, or any error, keeps it).
//!    Dropping it tombstones its id first (`folio_storage::index::tombstones`): no later
//!    add, fence or recovery add creates it here again.
//! 3. A listed ledger that is closed and whose ensembles no longer include this bookie
//!    (its copy here is over-replication) is dropped too, without a tombstone, unless it is
//!    **incoming**: recovery adds brought it (autorecovery copying it here before the swap
//!    names this bookie): that one is kept for `incoming_grace` after its last recovery
//!    add. Any such copy is also kept while its ledger has an under-replication mark or a
//!    replication claim (a worker may be copying to it, counting on what it holds); the
//!    metadata is read again after the mark, so a swap that finished meanwhile is seen.
//!    Once an ensemble names this bookie the incoming mark is cleared.
//! 4. Every sealed entry log (from the index's explicit record, never an id threshold, never
//!    an active log) whose ledgers are all gone is deleted. The others are reported with the
//!    live ledgers that pin them and their usage (live bytes / size), from the ledgers map
//!    persisted at sealing, so no log is rescanned.
//!
//! **Architecture invariant:** GC decides from the metadata store and the index only; it
//! never infers that a log is flushed from its id.

use std::collections::BTreeSet;
use std::sync::Arc;

use folio_meta::keys::Keys;
use folio_meta::records::{LedgerMetadata, LedgerState, Record};
use folio_meta::{MetaError, MetadataStore};
use folio_proto::LedgerId;

use crate::storage::Storage;
use folio_storage::StorageError;

/// How garbage collection and compaction run: interval, thresholds, rate limits.
#[derive(Debug, Clone)]
pub struct GcConfig {
    /// Time between passes.
    pub interval: std::time::Duration,
    /// An incoming copy (recovery adds, no ensemble naming this bookie yet) is kept this
    /// long after its last recovery add even without a mark or claim (10 min).
    pub incoming_grace: std::time::Duration,
    /// Ledgers per listing page.
    pub list_page: usize,
    /// This pass compacts sealed logs whose live bytes are below this fraction of their
    /// size (0 = no compaction). The bookie's loop sets it from the minor/major schedule.
    pub compaction_threshold: f64,
    /// Bytes of logs compacted per pass, at most (bounds the work of one pass).
    pub compaction_bytes_max_per_pass: u64,
    /// Time spent compacting per pass, at most; the rest waits for the next pass.
    pub compaction_time_max_per_pass: std::time::Duration,
    /// Minor compaction: logs below `minor_threshold` (0.2), every `minor_interval` (1 h).
    pub minor_threshold: f64,
    pub minor_interval: std::time::Duration,
    /// Major compaction: logs below `major_threshold` (0.8), every `major_interval` (1 day).
    pub major_threshold: f64,
    pub major_interval: std::time::Duration,
    /// Live bytes copied per second by compaction, at most (0 = unlimited).
    pub compaction_bytes_per_s: u64,
}

/// Which compaction (if any) a pass at `now` runs, given when the last ones ran: major
/// when due, else minor when due. Returns the threshold and whether it is major.
pub fn compaction_due(
    config: &GcConfig,
    now_ms: u64,
    last_minor_ms: u64,
    last_major_ms: u64,
) -> Option<(f64, bool)> {
    let since = |last_ms: u64| std::time::Duration::from_millis(now_ms.saturating_sub(last_ms));
    if config.major_threshold > 0.0 && since(last_major_ms) >= config.major_interval {
        return Some((config.major_threshold, true));
    }
    if config.minor_threshold > 0.0 && since(last_minor_ms) >= config.minor_interval {
        return Some((config.minor_threshold, false));
    }
    None
}

/// How long to wait after copying `copied` bytes in `elapsed` to stay at `rate` bytes/s.
pub fn pace(copied: u64, elapsed: std::time::Duration, rate: u64) -> std::time::Duration {
    if rate == 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::from_secs_f64(copied as f64 / rate as f64).saturating_sub(elapsed)
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            interval: std::time::Duration::from_secs(60),
            incoming_grace: std::time::Duration::from_secs(600),
            list_page: 1000,
            compaction_threshold: 0.2,
            compaction_bytes_max_per_pass: 4 * 1024 * 1024 * 1024,
            compaction_time_max_per_pass: std::time::Duration::from_secs(600),
            minor_threshold: 0.2,
            minor_interval: std::time::Duration::from_secs(3600),
            major_threshold: 0.8,
            major_interval: std::time::Duration::from_secs(86_400),
            compaction_bytes_per_s: 64 * 1024 * 1024,
        }
    }
}

/// A sealed log GC kept, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptLog {
    pub log_id: u64,
    pub size_bytes: u64,
    pub live_bytes: u64,
    /// The live ledgers that pin it.
    pub pinned_by: Vec<LedgerId>,
}

impl KeptLog {
    /// Live bytes over size (0 for an empty log).
    pub fn usage(&self) -> f64 {
        if self.size_bytes == 0 { 0.0 } else { self.live_bytes as f64 / self.size_bytes as f64 }
    }
}

/// What one GC pass did: ledgers dropped, logs deleted and compacted, bytes reclaimed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcReport {
    pub ledgers_dropped: Vec<LedgerId>,
    pub over_replicated_dropped: Vec<LedgerId>,
    /// Copies no ensemble names yet, kept because they are (or may be) being copied here.
    pub incoming_kept: Vec<LedgerId>,
    pub logs_deleted: Vec<u64>,
    pub logs_compacted: Vec<u64>,
    pub bytes_reclaimed: u64,
    pub logs_kept: Vec<KeptLog>,
}

/// What the last pass found, for metrics.
#[derive(Debug, Clone, Default)]
pub struct GcStatus {
    pub passes: u64,
    pub failures: u64,
    pub last_run_unix_ms: u64,
    pub last_duration_ms: u64,
    pub bytes_reclaimed_total: u64,
    pub last: GcReport,
}

impl GcStatus {
    /// Records a finished pass that started at `started`.
    pub fn record(&mut self, started: std::time::Instant, result: &Result<GcReport, GcError>) {
        self.passes += 1;
        self.last_duration_ms = started.elapsed().as_millis() as u64;
        self.last_run_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        match result {
            Ok(r) => {
                self.bytes_reclaimed_total += r.bytes_reclaimed;
                self.last = r.clone();
            }
            Err(_) => self.failures += 1,
        }
    }

    /// Live and garbage bytes in the sealed logs GC kept.
    pub fn live_and_garbage_bytes(&self) -> (u64, u64) {
        let live: u64 = self.last.logs_kept.iter().map(|k| k.live_bytes).sum();
        let size: u64 = self.last.logs_kept.iter().map(|k| k.size_bytes).sum();
        (live, size.saturating_sub(live))
    }

    /// Kept logs by usage: [<20 %, 20–50 %, 50–80 %, ≥80 %].
    pub fn usage_buckets(&self) -> [u64; 4] {
        let mut b = [0u64; 4];
        for k in &self.last.logs_kept {
            let u = k.usage();
            b[if u < 0.2 {
                0
            } else if u < 0.5 {
                1
            } else if u < 0.8 {
                2
            } else {
                3
            }] += 1;
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn major_wins_when_due_then_minor_then_none() {
        let c = GcConfig {
            minor_interval: Duration::from_secs(10),
            major_interval: Duration::from_secs(100),
            ..GcConfig::default()
        };
        let t0 = 5_000;
        let now = t0 + 150_000;
        assert_eq!(compaction_due(&c, now, t0, t0), Some((0.8, true)));
        assert_eq!(compaction_due(&c, now, t0, now), Some((0.2, false)));
        assert_eq!(compaction_due(&c, now, now, now), None);
        let off = GcConfig { minor_threshold: 0.0, major_threshold: 0.0, ..c };
        assert_eq!(compaction_due(&off, now, t0, t0), None);
    }

    #[test]
    fn pacing_holds_compaction_to_its_rate() {
        assert_eq!(pace(100, Duration::ZERO, 0), Duration::ZERO, "0 = unlimited");
        assert_eq!(pace(100, Duration::ZERO, 50), Duration::from_secs(2));
        assert_eq!(pace(100, Duration::from_secs(1), 50), Duration::from_secs(1));
        assert_eq!(pace(100, Duration::from_secs(5), 50), Duration::ZERO, "already slow enough");
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("listing ledgers failed, nothing deleted: {0}")]
    Listing(MetaError),
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// A deletion or compaction step off the async workers did not finish (it panicked).
    #[error("a GC step did not finish: {0}")]
    Blocking(#[from] folio_rt::BlockingFailed),
}

/// Lists every ledger id in the metadata store, page by page; any error fails the whole list.
async fn list_ledgers(
    meta: &dyn MetadataStore,
    keys: &Keys,
    page: usize,
) -> Result<BTreeSet<LedgerId>, MetaError> {
    let prefix = keys.ledgers();
    let mut ids = BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let p = meta.list(&prefix, after.as_deref(), page).await?;
        for v in &p.items {
            if let Some(id) = keys.parse_ledger(&v.key) {
                ids.insert(id);
            }
        }
        after = p.items.last().map(|v| v.key.clone());
        if !p.more {
            return Ok(ids);
        }
    }
}

fn holds(m: &LedgerMetadata, bookie_id: &str) -> bool {
    m.ensembles.values().any(|e| e.iter().any(|b| b == bookie_id))
}

/// What a GC pass does with one local ledger.
enum Drop {
    Keep,
    /// Kept: a copy being made here (step 3 of the module docs).
    Incoming,
    /// Its metadata is gone: tombstoned and dropped.
    Deleted,
    /// Closed and no ensemble names this bookie: this copy is dropped.
    OverReplicated,
}

/// Whether the copy of listed ledger `id` here is over-replication to drop (step 3).
async fn over_replicated(
    storage: &Storage,
    meta: &dyn MetadataStore,
    keys: &Keys,
    id: LedgerId,
    bookie_id: &str,
    config: &GcConfig,
) -> Drop {
    let key = keys.ledger(id);
    let read = |v: Option<folio_meta::Versioned>| {
        v.and_then(|v| LedgerMetadata::decode(&key, &v.value).ok())
    };
    let Ok(Some(m)) = meta.get(&key).await.map(read) else { return Drop::Keep };
    if holds(&m, bookie_id) {
        storage.clear_incoming(id); // named here now: an ordinary copy
        return Drop::Keep;
    }
    if m.state != LedgerState::Closed {
        return Drop::Keep;
    }
    let age = storage.incoming_age(id);
    if age.is_some_and(|a| a < config.incoming_grace) {
        return Drop::Incoming;
    }
    // Kept while a worker holds the ledger (mark or claim): this copy may be the one it
    // copies to (what it found here already, before its first recovery add)...
    for k in [keys.under_replicated_ledger(id), keys.replication_claim(id)] {
        match meta.get(&k).await {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => return Drop::Incoming,
        }
    }
    // ...and read again after them: a swap that named this bookie meanwhile is seen.
    match meta.get(&key).await.map(read) {
        Ok(Some(m)) if holds(&m, bookie_id) => {
            storage.clear_incoming(id);
            Drop::Keep
        }
        Ok(Some(m)) if m.state == LedgerState::Closed => {
            assert!(
                !holds(&m, bookie_id),
                "ledger {id}: a copy its ensembles name is never dropped"
            );
            if let Some(age) = age {
                tracing::info!(
                    ledger = id,
                    age_ms = age.as_millis() as u64,
                    "incoming copy abandoned (no mark, no claim, past its grace): dropping it"
                );
            }
            Drop::OverReplicated
        }
        _ => Drop::Keep,
    }
}

/// One GC pass for the bookie `bookie_id` (see the module docs).
pub async fn gc_once(
    storage: &Arc<Storage>,
    meta: &dyn MetadataStore,
    keys: &Keys,
    bookie_id: &str,
    config: &GcConfig,
) -> Result<GcReport, GcError> {
    let local = storage.ledger_ids();
    let listed = list_ledgers(meta, keys, config.list_page).await.map_err(GcError::Listing)?;
    let mut report = GcReport::default();
    for id in local {
        let drop = if listed.contains(&id) {
            over_replicated(storage, meta, keys, id, bookie_id, config).await
        } else {
            // Not listed: read it again on its own; only a definite "absent" drops it.
            match meta.get(&keys.ledger(id)).await {
                Ok(None) => Drop::Deleted,
                Ok(Some(_)) => Drop::Keep,
                Err(e) => {
                    tracing::warn!(ledger = id, error = %e, "GC could not re-read a candidate; keeping it");
                    Drop::Keep
                }
            }
        };
        let s = storage.clone();
        match drop {
            Drop::Keep => continue,
            Drop::Incoming => {
                report.incoming_kept.push(id);
                continue;
            }
            Drop::Deleted => {
                folio_rt::blocking(move || s.delete_ledger(id)).await??;
                assert!(storage.is_tombstoned(id), "ledger {id} deleted without its tombstone");
                report.ledgers_dropped.push(id);
            }
            Drop::OverReplicated => {
                folio_rt::blocking(move || s.drop_copy(id)).await??;
                assert!(
                    !storage.is_tombstoned(id),
                    "a copy dropped as over-replicated: no tombstone"
                );
                report.over_replicated_dropped.push(id);
            }
        }
    }
    for (log_id, state) in storage.entry_log_states()? {
        if !state.sealed {
            continue; // still being written: never a GC candidate
        }
        let live: Vec<(LedgerId, u64)> =
            state.ledgers.iter().copied().filter(|(l, _)| storage.ledger_exists(*l)).collect();
        if live.is_empty() {
            assert!(state.sealed, "entry log {log_id}: only a sealed log is ever deleted");
            let s = storage.clone();
            let freed = folio_rt::blocking(move || s.delete_entry_log(log_id)).await??;
            report.logs_deleted.push(log_id);
            report.bytes_reclaimed += freed;
        } else {
            report.logs_kept.push(KeptLog {
                log_id,
                size_bytes: state.size_bytes,
                live_bytes: live.iter().map(|(_, b)| b).sum(),
                pinned_by: live.into_iter().map(|(l, _)| l).collect(),
            });
        }
    }
    // Compaction: rewrite the emptiest logs first, within this pass's byte budget.
    let mut candidates: Vec<KeptLog> = report
        .logs_kept
        .iter()
        .filter(|k| k.usage() < config.compaction_threshold)
        .cloned()
        .collect();
    candidates.sort_by(|a, b| a.usage().total_cmp(&b.usage()));
    let mut budget = config.compaction_bytes_max_per_pass;
    let (started, mut copied) = (tokio::time::Instant::now(), 0u64);
    for k in candidates {
        if k.size_bytes > budget || started.elapsed() >= config.compaction_time_max_per_pass {
            break;
        }
        budget -= k.size_bytes;
        let s = storage.clone();
        let freed = folio_rt::blocking(move || s.compact_entry_log(k.log_id)).await??;
        report.logs_compacted.push(k.log_id);
        report.bytes_reclaimed += freed.saturating_sub(k.live_bytes);
        report.logs_kept.retain(|x| x.log_id != k.log_id);
        copied += k.live_bytes;
        tokio::time::sleep(pace(copied, started.elapsed(), config.compaction_bytes_per_s)).await;
    }
    tracing::info!(
        compacted = report.logs_compacted.len(),
        dropped = report.ledgers_dropped.len(),
        over_replicated = report.over_replicated_dropped.len(),
        incoming_kept = report.incoming_kept.len(),
        logs_deleted = report.logs_deleted.len(),
        bytes = report.bytes_reclaimed,
        "GC pass done"
    );
    Ok(report)
}
