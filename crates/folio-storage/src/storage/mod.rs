//! Ledger storage: the semantics of a bookie's disk.
//!
//! Add path: verify the entry's digest; check the master key and the fence under the ledger
//! lock (and journal a newly learned master key there, so it is durable no later than any
//! entry acknowledged after it); insert into the write cache; journal the entry; acknowledge
//! after the journal's fsync. In journal-less mode the acknowledgement follows the cache
//! insert (only meta records are journaled) and durability comes from the flush.
//!
//! Flush (= checkpoint): swap the cache halves and read the journal's written mark under the
//! cache lock, so every record before the mark is in the snapshot; write the snapshot sorted
//! into the current entry log (rotating and sealing at the size limit); fsync the log; commit
//! locations, dirty ledger states and entry-log states in one index batch; then write the
//! journal checkpoint and release older journal files. A crash anywhere leaves either the
//! old checkpoint (and the journal replays) or the new one (and the index has everything).
//!
//! Any failed write or fsync poisons the instance: every later call fails until a reopen,
//! which recovers from the journal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use folio_proto::limits::MASTER_KEY_BYTES;
use folio_proto::wire::LedgerUsage;
use folio_proto::{Entry, EntryId, INVALID_ENTRY_ID, LedgerId};

use crate::config::{StorageConfig, StorageMode};
use crate::entry_log::{self, EntryLogReader, EntryLogWriter};
use crate::error::{Poison, PoisonReason, Result, StorageError};
use crate::fs::{FileSystem, RealFs};
use crate::index::{
    self, EntryLocation, EntryLogState, FjallKv, KvBatch, KvStore, LedgerState, Table, Tombstones,
};
use crate::journal::{self, Journal, JournalPosition, JournalRecord, ReplayReport};
use crate::limits::INDEX_PAGE;
use crate::read_cache::ReadCache;
use crate::write_cache::{CacheHalf, WriteCache};
use data_files::{DataFiles, Located};
use entry_logs::EntryLogSet;
use flush::FlushState;
use recovery::entry_log_states;

mod add;
mod compact;
mod data_files;
mod entry_logs;
mod flush;
mod read;
mod recovery;

/// Runs once an add (or fence, or explicit-LAC write) is durable, or failed.
pub type AddCallback = Box<dyn FnOnce(Result<()>) + Send>;

/// The key an add must carry for its ledger.
pub type MasterKey = [u8; MASTER_KEY_BYTES];

#[derive(Debug, Default, Clone)]
struct Ledger {
    state: LedgerState,
    /// Highest last-add-confirmed piggybacked on an entry; `None` until computed.
    piggybacked_lac: Option<EntryId>,
    dirty: bool,
    /// While the journal record of a newly learned master key may not be synced yet: set
    /// once it is (`None`: durable). Journal-less adds are acknowledged from the cache, so
    /// each one waits for this first: a second add of a new ledger must not be acknowledged
    /// before the key the first one brought is on disk.
    key_unsynced: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// When (storage clock) the last recovery add arrived, while `state.incoming`; a ledger
    /// loaded incoming counts from the open.
    incoming_ms: Option<u64>,
}

impl Ledger {
    /// The flag of a key whose record is not known synced yet (dropped once it is).
    fn key_pending(&mut self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        if self.key_unsynced.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) {
            self.key_unsynced = None;
        }
        self.key_unsynced.clone()
    }

    /// Notes a newly learned key whose record was just queued; returns its flag.
    fn key_learned(&mut self) -> Arc<std::sync::atomic::AtomicBool> {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.key_unsynced = Some(flag.clone());
        flag
    }
}

/// What the last open recovered, for logs and `folio bookie inspect`.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub journal: ReplayReport,
    pub entry_logs_sealed_at_open: Vec<u64>,
    /// Log ids (entry logs, and single-write data files: `index::data_file_log_id`).
    pub orphan_entry_logs_removed: Vec<u64>,
    pub n_ledgers: usize,
}

#[derive(Debug, Default)]
struct FlushSignal {
    requested: bool,
    shutdown: bool,
}

#[derive(Debug)]
struct Inner {
    config: StorageConfig,
    fs: Arc<dyn FileSystem>,
    kv: Arc<dyn KvStore>,
    log_dir: PathBuf,
    journal: OnceLock<Journal>,
    cache: WriteCache,
    read_cache: Mutex<ReadCache>,
    /// Entries being read from disk into the read cache now (ledger, first, end): a read
    /// of one of them waits for that read instead of reading the same bytes again
    /// (`read.rs`).
    reads_from_disk: Mutex<Vec<(LedgerId, EntryId, EntryId)>>,
    reads_from_disk_done: Condvar,
    reader: EntryLogReader,
    /// Single-write mode: entry records the journal wrote that no flush indexed yet.
    located: Arc<Located>,
    ledgers: Mutex<BTreeMap<LedgerId, Ledger>>,
    /// The ids deleted here (`index::tombstones`). Lock order: `ledgers`, then this.
    tombstones: Mutex<Tombstones>,
    flush: Mutex<FlushState>,
    signal: Mutex<FlushSignal>,
    signal_cond: Condvar,
    poison: Poison,
    closed: AtomicBool,
}

/// A bookie's storage. Cheap to share behind an `Arc`; all methods take `&self`.
#[derive(Debug)]
pub struct Storage {
    inner: Arc<Inner>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    recovery: RecoveryReport,
}

impl Storage {
    /// Opens storage on the real file system with the fjall index under `ledger_dir/index`.
    pub fn open_default(config: StorageConfig) -> Result<Storage> {
        Storage::open_on(config, Arc::new(RealFs))
    }

    /// Opens storage with its journal and data files on `fs` (tests gate or crash it) and
    /// the fjall index under `ledger_dir/index` on the real file system.
    pub fn open_on(config: StorageConfig, fs: Arc<dyn FileSystem>) -> Result<Storage> {
        let index_dir = config.ledger_dir.join("index");
        std::fs::create_dir_all(&index_dir)
            .map_err(|e| StorageError::io("creating index dir", e))?;
        let kv = Arc::new(FjallKv::open(&index_dir)?);
        Storage::open(config, fs, kv)
    }

    /// Why the storage is poisoned (an earlier write or fsync failed), if it is.
    pub fn poisoned(&self) -> Option<PoisonReason> {
        self.inner.poison.reason()
    }

    /// Runs `f` once the storage is poisoned (at once if it is already).
    pub fn on_poison(&self, f: impl Fn(&PoisonReason) + Send + Sync + 'static) {
        self.inner.poison.on_set(f);
    }

    /// The steps of a stepped storage (`Background::Stepped`); `None` for one with threads.
    pub fn stepper(&self) -> Option<Stepper> {
        self.inner.config.stepped().map(|_| Stepper { inner: self.inner.clone() })
    }

    /// What recovery found and did when the storage opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Adds an entry. `done` runs once it is durable (or failed). Errors found before the
    /// entry is accepted (bad digest, fenced, wrong key, overload) are returned directly and
    /// `done` is not called.
    pub fn add_entry(
        &self,
        bytes: Bytes,
        master_key: &MasterKey,
        recovery: bool,
        done: AddCallback,
    ) -> Result<()> {
        self.inner.add_entry(bytes, master_key, recovery, done)
    }

    /// Whether an add of `bytes` (or a fence, LAC or force: 0) would find room in the write
    /// cache and the journal's queue now, so it will not wait. A hint: another call may take
    /// the room first.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.inner.cache.has_room(bytes) && self.inner.journal.get().is_none_or(Journal::has_room)
    }

    /// Reads an entry; `entry_id == -1` reads the last entry this bookie has.
    pub fn read_entry(&self, ledger_id: LedgerId, entry_id: EntryId) -> Result<Entry> {
        self.inner.read_entry(ledger_id, entry_id)
    }

    /// Fences a ledger: later non-recovery adds fail with `Fenced`. `done` runs once the
    /// fence is durable; a fencing read answers only after that.
    pub fn fence(
        &self,
        ledger_id: LedgerId,
        master_key: &MasterKey,
        done: AddCallback,
    ) -> Result<()> {
        self.inner.update_ledger(ledger_id, master_key, JournalRecord::Fence { ledger_id }, done)
    }

    /// Sets the ledger's explicit LAC (journaled first), calling `done` once durable.
    pub fn set_explicit_lac(
        &self,
        ledger_id: LedgerId,
        master_key: &MasterKey,
        lac: EntryId,
        done: AddCallback,
    ) -> Result<()> {
        self.inner.update_ledger(
            ledger_id,
            master_key,
            JournalRecord::ExplicitLac { ledger_id, lac },
            done,
        )
    }

    /// Runs `done` once everything accepted before this call is durable.
    pub fn force(&self, done: AddCallback) -> Result<()> {
        self.inner.check_poison()?;
        self.inner.journal().barrier(Box::new(move |r| done(r.map(|_| ()))));
        Ok(())
    }

    /// The entry ids this bookie has for a ledger, sorted.
    pub fn list_entries(&self, ledger_id: LedgerId) -> Result<Vec<EntryId>> {
        self.inner.list_entries(ledger_id)
    }

    /// The ledger's last-add-confirmed as this bookie knows it: the larger of the explicit
    /// LAC and the highest LAC piggybacked on its entries.
    pub fn read_lac(&self, ledger_id: LedgerId) -> Result<EntryId> {
        self.inner.read_lac(ledger_id)
    }

    /// The highest entry id stored for the ledger, if any.
    pub fn last_entry_id(&self, ledger_id: LedgerId) -> Result<Option<EntryId>> {
        self.inner.last_entry(ledger_id)
    }

    /// The ledger's state (master key, fenced, limbo, explicit LAC), if it exists here.
    pub fn ledger_state(&self, ledger_id: LedgerId) -> Option<LedgerState> {
        self.inner.lock_ledgers().get(&ledger_id).map(|l| l.state.clone())
    }

    /// What this bookie stores of the ledgers with ids from `from` on, at most `limit` of
    /// them in id order, and whether more follow: entries and bytes in its entry logs and
    /// its write cache (not yet flushed). For `folio audit`.
    pub fn ledger_usages(&self, from: LedgerId, limit: usize) -> Result<(Vec<LedgerUsage>, bool)> {
        let ids: Vec<LedgerId> = self.ledger_ids().into_iter().filter(|l| *l >= from).collect();
        let more = ids.len() > limit;
        let usages = ids
            .into_iter()
            .take(limit)
            .map(|l| self.inner.ledger_usage(l))
            .collect::<Result<Vec<_>>>()?;
        Ok((usages, more))
    }

    /// Whether the ledger was deleted here (its id is tombstoned: never created again).
    pub fn is_tombstoned(&self, ledger_id: LedgerId) -> bool {
        self.inner.tombstones.lock().expect("tombstones lock").contains(ledger_id)
    }

    /// Tombstone ranges held, and ranges forgotten at the bound since the process started.
    pub fn tombstone_counts(&self) -> (usize, u64) {
        let t = self.inner.tombstones.lock().expect("tombstones lock");
        (t.len(), t.forgotten())
    }

    /// How long ago (storage clock) the last recovery add of a ledger still marked incoming
    /// arrived: `None` when it is not incoming (or not here).
    pub fn incoming_age(&self, ledger_id: LedgerId) -> Option<std::time::Duration> {
        let now = self.inner.config.clock.now_ms();
        let ledgers = self.inner.lock_ledgers();
        let l = ledgers.get(&ledger_id).filter(|l| l.state.incoming)?;
        Some(std::time::Duration::from_millis(now.saturating_sub(l.incoming_ms.unwrap_or(now))))
    }

    /// Ends a ledger's incoming mark (its copy is named in its metadata, or abandoned);
    /// persisted with the next flush.
    pub fn clear_incoming(&self, ledger_id: LedgerId) {
        if let Some(l) = self.inner.lock_ledgers().get_mut(&ledger_id)
            && l.state.incoming
        {
            l.state.incoming = false;
            l.incoming_ms = None;
            l.dirty = true;
        }
    }

    /// Whether this bookie has the ledger.
    pub fn ledger_exists(&self, ledger_id: LedgerId) -> bool {
        self.inner.lock_ledgers().contains_key(&ledger_id)
    }

    /// Every ledger this bookie has, sorted.
    pub fn ledger_ids(&self) -> Vec<LedgerId> {
        let mut ids: Vec<LedgerId> = self.inner.lock_ledgers().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Puts a ledger in limbo (or takes it out), durably, before returning.
    pub fn set_limbo(&self, ledger_id: LedgerId, limbo: bool) -> Result<()> {
        self.inner.set_limbo(ledger_id, limbo)
    }

    /// Makes the ledger exist with `master_key` (if it has none yet), and sets fenced and
    /// limbo as asked, durably in the index before returning (the pre-boot check).
    pub fn prepare_ledger(
        &self,
        ledger_id: LedgerId,
        master_key: MasterKey,
        fence: bool,
        limbo: bool,
    ) -> Result<()> {
        self.inner.check_poison()?;
        let mut ledgers = self.inner.lock_ledgers();
        let ledger = self.inner.live_entry(&mut ledgers, ledger_id)?;
        ledger.state.master_key.get_or_insert(master_key);
        ledger.state.fenced |= fence;
        ledger.state.limbo |= limbo;
        let mut b = KvBatch::default();
        b.put(Table::Ledgers, index::ledger_key(ledger_id), ledger.state.encode());
        self.inner.kv.commit(b)
    }

    /// Drops a ledger whose metadata is gone: its id is tombstoned first (durably), then its
    /// entries and state are dropped; it is never created here again. The entry log bytes
    /// are reclaimed later by entry-log GC.
    pub fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        self.inner.delete_ledger(ledger_id, true)
    }

    /// Drops this bookie's copy of a ledger that lives on elsewhere (over-replication), with
    /// no tombstone: autorecovery may copy it here again later.
    pub fn drop_copy(&self, ledger_id: LedgerId) -> Result<()> {
        self.inner.delete_ledger(ledger_id, false)
    }

    /// The persistent storage flags.
    pub fn storage_flags(&self) -> Result<u64> {
        self.inner.storage_flags()
    }

    /// Bytes read from entry-log files so far (reads that missed the caches, and
    /// read-ahead): against bytes served, the read amplification.
    pub fn entry_log_bytes_read(&self) -> u64 {
        self.inner.reader.bytes_read()
    }

    /// The journal's counters.
    pub fn journal_stats(&self) -> &journal::JournalStats {
        self.inner.journal().stats()
    }

    /// Files waiting in the journal's recycle pool, and journal files opened since start
    /// that were recycled files (`journal::recycle`).
    pub fn journal_recycled(&self) -> (usize, u64) {
        self.inner.journal().recycled()
    }

    /// The settings the storage was opened with.
    pub fn config(&self) -> &StorageConfig {
        &self.inner.config
    }

    /// Replaces the persistent storage flags (durably).
    pub fn set_storage_flags(&self, flags: u64) -> Result<()> {
        let mut b = KvBatch::default();
        b.put(Table::Meta, index::META_FLAGS.to_vec(), flags.to_le_bytes().to_vec());
        self.inner.kv.commit(b)
    }

    /// Flushes the write cache and checkpoints the journal now.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_poison()?;
        self.inner.flush_now()
    }

    /// The persisted states of all entry logs (sealed ones are flushed and rotated).
    pub fn entry_log_states(&self) -> Result<Vec<(u64, EntryLogState)>> {
        entry_log_states(self.inner.kv.as_ref())
    }

    /// Clean shutdown: flush, checkpoint, stop the threads.
    pub fn close(self) -> Result<()> {
        let result = self.inner.check_poison().and_then(|()| self.inner.flush_now());
        self.stop();
        result
    }

    fn stop(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        {
            let mut s = self.inner.signal.lock().expect("signal lock");
            s.shutdown = true;
            self.inner.signal_cond.notify_all();
        }
        if let Some(t) = self.flusher.lock().expect("flusher lock").take() {
            let _ = t.join();
        }
        if let Some(j) = self.inner.journal.get() {
            j.shutdown();
        }
    }
}

impl Drop for Storage {
    /// Stops the threads without flushing: like a crash that loses nothing already synced.
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    fn journal(&self) -> &Journal {
        self.journal.get().expect("journal started")
    }

    fn lock_ledgers(&self) -> MutexGuard<'_, BTreeMap<LedgerId, Ledger>> {
        self.ledgers.lock().expect("ledgers lock")
    }

    /// The ledger's state, created empty if it is new here, unless its id is tombstoned.
    /// Called with `ledgers` locked (the tombstones' lock is taken inside it).
    fn live_entry<'a>(
        &self,
        ledgers: &'a mut BTreeMap<LedgerId, Ledger>,
        ledger_id: LedgerId,
    ) -> Result<&'a mut Ledger> {
        if !ledgers.contains_key(&ledger_id)
            && self.tombstones.lock().expect("tombstones lock").contains(ledger_id)
        {
            return Err(StorageError::Deleted(ledger_id));
        }
        Ok(ledgers.entry(ledger_id).or_default())
    }

    fn check_poison(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(StorageError::ShutDown);
        }
        match self.poison.reason() {
            Some(reason) => Err(StorageError::Poisoned(reason)),
            None => Ok(()),
        }
    }

    fn poison(&self, reason: PoisonReason) {
        tracing::error!(%reason, "storage poisoned; restart to recover from the journal");
        self.poison.set(reason);
    }

    fn request_flush(&self) {
        let mut s = self.signal.lock().expect("signal lock");
        s.requested = true;
        self.signal_cond.notify_all();
        drop(s);
        if let Some(wake) = self.config.stepped() {
            wake.wake();
        }
    }
}

/// The background work of a stepped storage (`Background::Stepped`), run by whoever opened
/// it: the same journal writer, syncer and flush as the threads run, one step per call.
#[derive(Debug, Clone)]
pub struct Stepper {
    inner: Arc<Inner>,
}

impl Stepper {
    /// Writes what the journal has queued as one group. Whether there was any.
    pub fn write_journal(&self) -> bool {
        self.inner.journal.get().is_some_and(Journal::step_write)
    }

    /// Syncs the journal's written groups and acknowledges them. Whether there were any.
    pub fn sync_journal(&self) -> bool {
        self.inner.journal.get().is_some_and(Journal::step_sync)
    }

    /// Whether the journal has a step to take.
    pub fn journal_has_work(&self) -> bool {
        self.inner.journal.get().is_some_and(Journal::has_work)
    }

    /// Whether a flush was asked for (the write cache's active half filled) since the
    /// last one.
    pub fn flush_requested(&self) -> bool {
        self.inner.signal.lock().expect("signal lock").requested
    }

    /// One background flush (and checkpoint), as the flusher thread runs it every
    /// `flush_interval` or when asked.
    pub fn flush(&self) -> Result<()> {
        self.inner.signal.lock().expect("signal lock").requested = false;
        self.inner.check_poison()?;
        self.inner.flush_with_mark(Some(self.inner.journal()), false)
    }

    /// Whether the storage was closed or dropped (the opener's steps end then).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }
}
