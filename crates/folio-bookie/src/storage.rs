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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use folio_proto::limits::MASTER_KEY_BYTES;
use folio_proto::wire::LedgerUsage;
use folio_proto::{Entry, EntryId, INVALID_ENTRY_ID, LedgerId};

use crate::config::StorageConfig;
use crate::entry_log::{self, EntryLogReader, EntryLogWriter};
use crate::error::{Poison, Result, StorageError};
use crate::fs::{FileSystem, RealFs};
use crate::index::{
    self, EntryLocation, EntryLogState, FjallKv, KvBatch, KvStore, LedgerState, Table,
};
use crate::journal::{self, Journal, JournalPosition, JournalRecord, ReplayReport};
use crate::read_cache::ReadCache;
use crate::write_cache::{CacheHalf, WriteCache};

/// Runs once an add (or fence, or explicit-LAC write) is durable, or failed.
pub type AddCallback = Box<dyn FnOnce(Result<()>) + Send>;

pub type MasterKey = [u8; MASTER_KEY_BYTES];

const INDEX_PAGE: usize = 10_000;

#[derive(Debug, Default, Clone)]
struct Ledger {
    state: LedgerState,
    /// Highest last-add-confirmed piggybacked on an entry; `None` until computed.
    piggybacked_lac: Option<EntryId>,
    dirty: bool,
}

/// What the last open recovered, for logs and `folio bookie inspect`.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub journal: ReplayReport,
    pub entry_logs_sealed_at_open: Vec<u64>,
    pub orphan_entry_logs_removed: Vec<u64>,
    pub n_ledgers: usize,
}

#[derive(Debug)]
struct FlushState {
    writer: Option<EntryLogWriter>,
    /// Shared mode: when a flush last wrote to `writer`.
    writer_touched: std::time::Instant,
    /// Per-ledger mode: each ledger's open log and when a flush last wrote to it.
    per_ledger: HashMap<LedgerId, (EntryLogWriter, std::time::Instant)>,
    next_log_id: u64,
    last_mark: Option<JournalPosition>,
    /// When the cache halves were last swapped: the flushed half filled since then.
    last_swap: std::time::Instant,
}

/// A background flush spreads its entry-log writes over this fraction of the time the
/// flushed half took to fill, so it ends well before the next half is full...
const FLUSH_PACE_FRACTION: f64 = 0.5;
/// ... but never over more than this.
const FLUSH_PACE_MAX: std::time::Duration = std::time::Duration::from_secs(1);
/// The pace is checked after every this many bytes written.
const FLUSH_PACE_STEP_BYTES: usize = 256 * 1024;
/// Pacing stops once the active half is this full: writers must not wait for a flush
/// that is sleeping.
const FLUSH_PACE_ACTIVE_FRACTION_MAX: f64 = 0.75;

/// Paces a background flush. A disk cache flush persists everything written before it
/// (on this kind of VM the host's flush is file-wide), so a flush that writes its half as
/// fast as it can makes the journal's next fdatasyncs carry megabytes of entry-log data:
/// add latency spikes of tens of ms at half load. Written at an even rate, each journal
/// fdatasync carries only a share.
struct FlushPace {
    start: std::time::Instant,
    budget: std::time::Duration,
    total: usize,
    done: usize,
    unpaced: usize,
}

impl FlushPace {
    fn new(total: usize, budget: std::time::Duration, start: std::time::Instant) -> FlushPace {
        FlushPace { start, budget, total, done: 0, unpaced: 0 }
    }

    /// Counts `bytes` written; sleeps when ahead of schedule.
    fn wrote(&mut self, bytes: usize, cache: &WriteCache) {
        if let Some(d) = self.delay(bytes, || cache.active_fraction(), std::time::Instant::now) {
            std::thread::sleep(d);
        }
    }

    /// How long to pause after `bytes` more were written, if at all. The cache and the
    /// clock are read only once per step, not per entry.
    fn delay(
        &mut self,
        bytes: usize,
        active_fraction: impl FnOnce() -> f64,
        now: impl FnOnce() -> std::time::Instant,
    ) -> Option<std::time::Duration> {
        self.done += bytes;
        self.unpaced += bytes;
        if self.budget.is_zero() || self.unpaced < FLUSH_PACE_STEP_BYTES {
            return None;
        }
        self.unpaced = 0;
        if active_fraction() >= FLUSH_PACE_ACTIVE_FRACTION_MAX {
            self.budget = std::time::Duration::ZERO; // unpaced for the rest of this flush
            return None;
        }
        let due = self.start + self.budget.mul_f64(self.done as f64 / self.total.max(1) as f64);
        let now = now();
        (due > now).then(|| due - now)
    }
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
    reader: EntryLogReader,
    ledgers: Mutex<HashMap<LedgerId, Ledger>>,
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
        let index_dir = config.ledger_dir.join("index");
        std::fs::create_dir_all(&index_dir)
            .map_err(|e| StorageError::io("creating index dir", e))?;
        let kv = Arc::new(FjallKv::open(&index_dir)?);
        Storage::open(config, Arc::new(RealFs), kv)
    }

    /// Opens (and recovers) storage: seal entry logs left active by a crash, replay the
    /// journal from the checkpoint, flush what was replayed, start the journal and flusher.
    pub fn open(
        config: StorageConfig,
        fs: Arc<dyn FileSystem>,
        kv: Arc<dyn KvStore>,
    ) -> Result<Storage> {
        config.validate().map_err(StorageError::BadRequest)?;
        let log_dir = config.ledger_dir.join("entrylogs");
        for d in [&config.journal_dir, &config.ledger_dir, &log_dir] {
            fs.create_dir_all(d)
                .map_err(|e| StorageError::io(format!("creating {}", d.display()), e))?;
        }
        check_index_checkpoint(fs.as_ref(), kv.as_ref(), &config.journal_dir)?;
        let mut recovery = RecoveryReport::default();
        let ledgers = load_ledgers(kv.as_ref())?;
        recovery.n_ledgers = ledgers.len();
        let next_log_id = recover_entry_logs(fs.as_ref(), kv.as_ref(), &log_dir, &mut recovery)?;
        let inner = Arc::new(Inner {
            cache: WriteCache::new(config.write_cache_bytes),
            read_cache: Mutex::new(ReadCache::new(config.read_cache_bytes)),
            reader: EntryLogReader::new(fs.clone(), log_dir.clone()),
            ledgers: Mutex::new(ledgers),
            flush: Mutex::new(FlushState {
                writer: None,
                writer_touched: std::time::Instant::now(),
                per_ledger: HashMap::new(),
                next_log_id,
                last_mark: None,
                last_swap: std::time::Instant::now(),
            }),
            signal: Mutex::new(FlushSignal::default()),
            signal_cond: Condvar::new(),
            poison: Poison::default(),
            closed: AtomicBool::new(false),
            journal: OnceLock::new(),
            config,
            fs,
            kv,
            log_dir,
        });
        recovery.journal = inner.replay_journal()?;
        let journal = Journal::start(
            inner.fs.clone(),
            inner.config.journal_dir.clone(),
            inner.config.journal.clone(),
            &recovery.journal,
            inner.poison.clone(),
        )?;
        let mark = journal.written_mark();
        inner.journal.set(journal).expect("journal set once");
        // The index learns the checkpoint before the journal's file does (index::META_CHECKPOINT).
        let mut b = KvBatch::default();
        b.put(
            Table::Meta,
            index::META_CHECKPOINT.to_vec(),
            journal::format::encode_checkpoint(mark).to_vec(),
        );
        inner.kv.commit(b)?;
        journal::write_checkpoint(inner.fs.as_ref(), &inner.config.journal_dir, mark)?;
        inner.journal().release_before(mark.file_id);
        inner.flush.lock().expect("flush lock").last_mark = Some(mark);
        let flusher_inner = inner.clone();
        let flusher = std::thread::Builder::new()
            .name("folio-flusher".into())
            .spawn(move || flusher_inner.run_flusher())
            .map_err(|e| StorageError::io("spawning flusher", e))?;
        tracing::info!(
            journal_records = recovery.journal.n_records,
            ledgers = recovery.n_ledgers,
            sealed_at_open = recovery.entry_logs_sealed_at_open.len(),
            "storage opened"
        );
        Ok(Storage { inner, flusher: Mutex::new(Some(flusher)), recovery })
    }

    /// Why the storage is poisoned (an earlier write or fsync failed), if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.poison.reason()
    }

    /// Sees the poison reason as soon as it is set.
    pub fn subscribe_poison(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.poison.subscribe()
    }

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
        let ledger = ledgers.entry(ledger_id).or_default();
        ledger.state.master_key.get_or_insert(master_key);
        ledger.state.fenced |= fence;
        ledger.state.limbo |= limbo;
        let mut b = KvBatch::default();
        b.put(Table::Ledgers, index::ledger_key(ledger_id), ledger.state.encode());
        self.inner.kv.commit(b)
    }

    /// Drops a ledger's entries and state locally (used by garbage collection). The entry
    /// log bytes are reclaimed later by entry-log GC.
    pub fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        self.inner.delete_ledger(ledger_id)
    }

    pub fn storage_flags(&self) -> Result<u64> {
        self.inner.storage_flags()
    }

    pub fn journal_stats(&self) -> &journal::JournalStats {
        self.inner.journal().stats()
    }

    pub fn config(&self) -> &StorageConfig {
        &self.inner.config
    }

    pub fn set_storage_flags(&self, flags: u64) -> Result<()> {
        let mut b = KvBatch::default();
        b.put(Table::Meta, index::META_FLAGS.to_vec(), flags.to_le_bytes().to_vec());
        self.inner.kv.commit(b)
    }

    /// Deletes a sealed entry log that holds no live ledger; returns the bytes freed.
    ///
    /// Order matters for L1: the index record goes first, then the file. A crash between
    /// the two leaves a file the index does not list, which `open` removes; the reverse
    /// order could leave an index record without its file, which `open` refuses.
    pub fn delete_entry_log(&self, log_id: u64) -> Result<u64> {
        self.inner.check_poison()?;
        let _flush = self.inner.flush.lock().expect("flush lock");
        let Some(state) = self.inner.kv.get(Table::Meta, &index::elog_key(log_id))? else {
            return Ok(0);
        };
        let state = EntryLogState::decode(&state)?;
        assert!(state.sealed, "only sealed entry logs are ever deleted");
        let live: Vec<LedgerId> = {
            let ledgers = self.inner.lock_ledgers();
            state.ledgers.iter().map(|(l, _)| *l).filter(|l| ledgers.contains_key(l)).collect()
        };
        if !live.is_empty() {
            return Err(StorageError::BadRequest(format!(
                "entry log {log_id} still holds live ledgers {live:?}"
            )));
        }
        let mut b = KvBatch::default();
        b.delete(Table::Meta, index::elog_key(log_id));
        self.inner.kv.commit(b)?;
        self.inner.reader.forget(log_id);
        let path = self.inner.log_dir.join(entry_log::file_name(log_id));
        self.inner
            .fs
            .remove_file(&path)
            .map_err(|e| StorageError::io(format!("removing {}", path.display()), e))?;
        self.inner
            .fs
            .sync_dir(&self.inner.log_dir)
            .map_err(|e| StorageError::io("syncing entry log dir", e))?;
        tracing::info!(log_id, bytes = state.size_bytes, "entry log deleted");
        Ok(state.size_bytes)
    }

    /// Compacts a sealed entry log: copies its live entries into the current log, syncs,
    /// then in one index batch points their locations at the copies *and* removes the old
    /// log's record, and only then removes the old file. A crash before the batch leaves the
    /// old log in force (the copies are unreferenced bytes in a newer log); a crash after it
    /// leaves an unlisted file that `open` removes. Returns the bytes freed.
    pub fn compact_entry_log(&self, log_id: u64) -> Result<u64> {
        self.inner.check_poison()?;
        let result = self.inner.compact(log_id);
        if let Err(e) = &result
            && matches!(e, StorageError::Io { .. })
        {
            self.inner.poison(format!("compaction of entry log {log_id} failed: {e}"));
        }
        result
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

fn load_ledgers(kv: &dyn KvStore) -> Result<HashMap<LedgerId, Ledger>> {
    let mut out = HashMap::new();
    let mut start = Vec::new();
    loop {
        let page = kv.range(Table::Ledgers, &start, &[0xff; 9], INDEX_PAGE)?;
        let Some(last) = page.last() else { break };
        start = last.0.clone();
        start.push(0);
        let full = page.len() == INDEX_PAGE;
        for (k, v) in page {
            let id = index::parse_ledger_key(&k)?;
            out.insert(
                id,
                Ledger { state: LedgerState::decode(&v)?, piggybacked_lac: None, dirty: false },
            );
        }
        if !full {
            break;
        }
    }
    Ok(out)
}

fn entry_log_states(kv: &dyn KvStore) -> Result<Vec<(u64, EntryLogState)>> {
    let mut end = index::META_ELOG_PREFIX.to_vec();
    end.push(0xff);
    kv.range(Table::Meta, index::META_ELOG_PREFIX, &end, usize::MAX)?
        .into_iter()
        .map(|(k, v)| {
            let id = index::parse_elog_key(&k)
                .ok_or_else(|| StorageError::corruption("index", "bad entry log key"))?;
            Ok((id, EntryLogState::decode(&v)?))
        })
        .collect()
}

/// Seals logs the index lists as active (a crash interrupted them), removes log files the
/// index never listed (created by a flush that did not commit), and returns the next log id.
fn recover_entry_logs(
    fs: &dyn FileSystem,
    kv: &dyn KvStore,
    dir: &Path,
    report: &mut RecoveryReport,
) -> Result<u64> {
    let states = entry_log_states(kv)?;
    let on_disk: Vec<u64> = fs
        .list_dir(dir)
        .map_err(|e| StorageError::io("listing entry logs", e))?
        .iter()
        .filter_map(|n| entry_log::parse_file_name(n))
        .collect();
    let known: HashMap<u64, &EntryLogState> = states.iter().map(|(id, s)| (*id, s)).collect();
    let mut batch = KvBatch::default();
    for (id, state) in &states {
        if !on_disk.contains(id) {
            return Err(StorageError::corruption(
                dir.display().to_string(),
                format!(
                    "entry log {} is in the index but missing on disk",
                    entry_log::file_name(*id)
                ),
            ));
        }
        if !state.sealed {
            let scan = entry_log::scan(fs, dir, *id, &mut |_, _| {})?;
            if scan.valid_end < state.size_bytes {
                // The index may point at entries up to `size_bytes`, synced before it was
                // committed: a bad frame before there is damage, and sealing the log at it
                // would overwrite entries a reader still finds through the index.
                return Err(StorageError::corruption(
                    dir.join(entry_log::file_name(*id)).display().to_string(),
                    format!(
                        "the frame at offset {} is damaged ({:?}) but entries up to offset {} \
                         were durable and indexed. Refusing to start; restore the disk, or \
                         format this bookie and re-replicate its ledgers from their other copies",
                        scan.valid_end, scan.stop, state.size_bytes
                    ),
                ));
            }
            let sealed = EntryLogWriter::reopen_for_seal(fs, dir, &scan)?.seal()?;
            batch.put(Table::Meta, index::elog_key(*id), sealed.encode());
            report.entry_logs_sealed_at_open.push(*id);
        }
    }
    for id in &on_disk {
        if !known.contains_key(id) {
            fs.remove_file(&dir.join(entry_log::file_name(*id)))
                .map_err(|e| StorageError::io("removing orphan entry log", e))?;
            report.orphan_entry_logs_removed.push(*id);
        }
    }
    fs.sync_dir(dir).map_err(|e| StorageError::io("syncing entry log dir", e))?;
    let stored_next = kv.get(Table::Meta, index::META_NEXT_LOG_ID)?.map_or(Ok(1), |v| {
        v.try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| StorageError::corruption("index", "next_log_id"))
    })?;
    let next = on_disk
        .iter()
        .map(|id| id + 1)
        .chain(states.iter().map(|(id, _)| id + 1))
        .fold(stored_next, u64::max);
    batch.put(Table::Meta, index::META_NEXT_LOG_ID.to_vec(), next.to_le_bytes().to_vec());
    kv.commit(batch)?;
    Ok(next)
}

impl Inner {
    fn journal(&self) -> &Journal {
        self.journal.get().expect("journal started")
    }

    fn lock_ledgers(&self) -> MutexGuard<'_, HashMap<LedgerId, Ledger>> {
        self.ledgers.lock().expect("ledgers lock")
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

    fn poison(&self, reason: String) {
        tracing::error!(%reason, "storage poisoned; restart to recover from the journal");
        self.poison.set(reason);
    }

    fn request_flush(&self) {
        let mut s = self.signal.lock().expect("signal lock");
        s.requested = true;
        self.signal_cond.notify_all();
    }

    fn add_entry(
        &self,
        bytes: Bytes,
        key: &MasterKey,
        recovery: bool,
        done: AddCallback,
    ) -> Result<()> {
        self.check_poison()?;
        let entry = Entry::decode(bytes)?;
        let ledger_id = entry.ledger_id();
        let mut key_written: Option<std::sync::mpsc::Receiver<Result<()>>> = None;
        {
            let mut ledgers = self.lock_ledgers();
            let ledger = ledgers.entry(ledger_id).or_default();
            match ledger.state.master_key {
                Some(k) if k != *key => return Err(StorageError::Unauthorized(ledger_id)),
                Some(_) => {}
                None => {
                    ledger.state.master_key = Some(*key);
                    ledger.dirty = true;
                    let (tx, rx) = std::sync::mpsc::sync_channel(1);
                    let record = JournalRecord::MasterKey { ledger_id, key: *key };
                    self.journal().append(
                        record,
                        Box::new(move |r| {
                            let _ = tx.send(r.map(|_| ()));
                        }),
                    );
                    key_written = Some(rx);
                }
            }
            if ledger.state.fenced && !recovery {
                return Err(StorageError::Fenced(ledger_id));
            }
            let lac = entry.last_add_confirmed();
            ledger.piggybacked_lac = Some(ledger.piggybacked_lac.map_or(lac, |l| l.max(lac)));
        }
        self.cache.insert(entry.clone(), self.config.write_cache_throttle_max, &|| {
            self.request_flush()
        })?;
        if self.config.journal.write_data {
            self.journal()
                .append(JournalRecord::Entry(entry), Box::new(move |r| done(r.map(|_| ()))));
        } else {
            // Journal-less: acknowledged once cached, after a newly learned key is durable.
            match key_written {
                Some(rx) => done(rx.recv().unwrap_or(Err(StorageError::ShutDown))),
                None => done(Ok(())),
            }
        }
        Ok(())
    }

    fn update_ledger(
        &self,
        ledger_id: LedgerId,
        key: &MasterKey,
        record: JournalRecord,
        done: AddCallback,
    ) -> Result<()> {
        self.check_poison()?;
        let mut ledgers = self.lock_ledgers();
        let ledger = ledgers.entry(ledger_id).or_default();
        match ledger.state.master_key {
            Some(k) if k != *key => return Err(StorageError::Unauthorized(ledger_id)),
            Some(_) => {}
            None => {
                ledger.state.master_key = Some(*key);
                self.journal()
                    .append(JournalRecord::MasterKey { ledger_id, key: *key }, Box::new(|_| {}));
            }
        }
        match &record {
            JournalRecord::Fence { .. } => ledger.state.fenced = true,
            JournalRecord::ExplicitLac { lac, .. } => {
                ledger.state.explicit_lac =
                    Some(ledger.state.explicit_lac.map_or(*lac, |l| l.max(*lac)));
            }
            other => unreachable!("not a ledger update: {other:?}"),
        }
        ledger.dirty = true;
        // Submitted under the ledger lock: journal order matches the order of state changes.
        self.journal().append(record, Box::new(move |r| done(r.map(|_| ()))));
        Ok(())
    }

    fn missing(&self, ledger_id: LedgerId, entry_id: EntryId) -> StorageError {
        match self.lock_ledgers().get(&ledger_id) {
            None => StorageError::NoLedger(ledger_id),
            Some(l) if l.state.limbo => StorageError::Unknown(ledger_id, entry_id),
            Some(_) => StorageError::NoEntry(ledger_id, entry_id),
        }
    }

    fn ledger_usage(&self, ledger_id: LedgerId) -> Result<LedgerUsage> {
        self.check_poison()?;
        let cached = self.cache.usage(ledger_id);
        let (mut entries, mut bytes) = (cached.len() as u64, cached.values().sum::<u64>());
        self.location_pages(ledger_id, |page, _| {
            for (k, v) in &page {
                if !cached.contains_key(&index::parse_location_key(k)?.1) {
                    entries += 1;
                    bytes += u64::from(EntryLocation::decode(v)?.len);
                }
            }
            Ok(())
        })?;
        Ok(LedgerUsage { ledger_id, entries, bytes })
    }

    fn list_entries(&self, ledger_id: LedgerId) -> Result<Vec<EntryId>> {
        self.check_poison()?;
        if !self.lock_ledgers().contains_key(&ledger_id) {
            return Err(self.missing(ledger_id, INVALID_ENTRY_ID));
        }
        let mut ids: std::collections::BTreeSet<EntryId> =
            self.cache.entry_ids(ledger_id).into_iter().collect();
        self.location_pages(ledger_id, |page, _| {
            for (k, _) in &page {
                ids.insert(index::parse_location_key(k)?.1);
            }
            Ok(())
        })?;
        Ok(ids.into_iter().collect())
    }

    /// Calls `f` with each page of a ledger's index locations, in entry order, and whether
    /// it is the last page.
    fn location_pages(
        &self,
        ledger_id: LedgerId,
        mut f: impl FnMut(Vec<index::kv::KvPair>, bool) -> Result<()>,
    ) -> Result<()> {
        let (mut start, end) = index::ledger_location_range(ledger_id);
        loop {
            let page = self.kv.range(Table::Locations, &start, &end, INDEX_PAGE)?;
            let last = page.len() < INDEX_PAGE;
            if let Some((k, _)) = page.last() {
                start = k.clone();
                start.push(0);
            }
            f(page, last)?;
            if last {
                return Ok(());
            }
        }
    }

    fn last_entry(&self, ledger_id: LedgerId) -> Result<Option<EntryId>> {
        let cached = self.cache.last_entry(ledger_id);
        let (start, end) = index::ledger_location_range(ledger_id);
        let indexed = match self.kv.last_in_range(Table::Locations, &start, &end)? {
            Some((k, _)) => Some(index::parse_location_key(&k)?.1),
            None => None,
        };
        Ok(cached.max(indexed))
    }

    fn read_entry(&self, ledger_id: LedgerId, entry_id: EntryId) -> Result<Entry> {
        self.check_poison()?;
        let entry_id = if entry_id == INVALID_ENTRY_ID {
            match self.last_entry(ledger_id)? {
                Some(e) => e,
                None => return Err(self.missing(ledger_id, entry_id)),
            }
        } else if entry_id < 0 {
            return Err(StorageError::BadRequest(format!("entry id {entry_id}")));
        } else {
            entry_id
        };
        if !self.lock_ledgers().contains_key(&ledger_id) {
            return Err(self.missing(ledger_id, entry_id));
        }
        if let Some(e) = self.cache.get(ledger_id, entry_id) {
            return Ok(e);
        }
        if let Some(e) = self.read_cache.lock().expect("read cache lock").get(ledger_id, entry_id) {
            return Ok(e);
        }
        let Some(loc) = self.kv.get(Table::Locations, &index::location_key(ledger_id, entry_id))?
        else {
            // It may have been flushed between the cache lookup and the index lookup.
            return self
                .cache
                .get(ledger_id, entry_id)
                .ok_or_else(|| self.missing(ledger_id, entry_id));
        };
        let loc = EntryLocation::decode(&loc)?;
        let entry = match self.reader.read(loc, ledger_id, entry_id) {
            Ok(e) => e,
            // Compaction may have moved the entry and removed the log since the lookup.
            Err(StorageError::Io { .. }) => {
                let key = index::location_key(ledger_id, entry_id);
                let Some(again) = self.kv.get(Table::Locations, &key)? else {
                    return Err(self.missing(ledger_id, entry_id));
                };
                self.reader.read(EntryLocation::decode(&again)?, ledger_id, entry_id)?
            }
            Err(e) => return Err(e),
        };
        self.read_ahead(ledger_id, entry_id, loc);
        Ok(entry)
    }

    /// Loads the entries that follow `entry_id` in the same log into the read cache, with one
    /// read. Best effort: a failure here is logged, never returned.
    fn read_ahead(&self, ledger_id: LedgerId, entry_id: EntryId, first: EntryLocation) {
        let n = self.config.read_ahead_entries;
        if n == 0 {
            return;
        }
        let start = index::location_key(ledger_id, entry_id + 1);
        let end = index::location_key(ledger_id, entry_id.saturating_add(1 + n as i64));
        let Ok(next) = self.kv.range(Table::Locations, &start, &end, n) else { return };
        let mut span_end =
            first.offset + (crate::frame::FRAME_HEADER_BYTES as u64) + u64::from(first.len);
        let span_start = span_end;
        for (_, v) in next {
            let Ok(loc) = EntryLocation::decode(&v) else { break };
            if loc.log_id != first.log_id || loc.offset != span_end {
                break;
            }
            span_end += crate::frame::FRAME_HEADER_BYTES as u64 + u64::from(loc.len);
        }
        if span_end == span_start {
            return;
        }
        match self.reader.read_span(first.log_id, span_start, (span_end - span_start) as usize) {
            Ok(entries) => {
                let mut rc = self.read_cache.lock().expect("read cache lock");
                for e in entries {
                    rc.insert(e);
                }
            }
            Err(e) => tracing::warn!(error = %e, "read-ahead failed"),
        }
    }

    fn read_lac(&self, ledger_id: LedgerId) -> Result<EntryId> {
        self.check_poison()?;
        let (explicit, piggybacked) = match self.lock_ledgers().get(&ledger_id) {
            None => return Err(StorageError::NoLedger(ledger_id)),
            Some(l) => (l.state.explicit_lac, l.piggybacked_lac),
        };
        let piggybacked = match piggybacked {
            Some(p) => p,
            None => {
                let p = match self.last_entry(ledger_id)? {
                    Some(e) => self.read_entry(ledger_id, e)?.last_add_confirmed(),
                    None => INVALID_ENTRY_ID,
                };
                if let Some(l) = self.lock_ledgers().get_mut(&ledger_id) {
                    l.piggybacked_lac = Some(l.piggybacked_lac.map_or(p, |x| x.max(p)));
                }
                p
            }
        };
        let lac = explicit.map_or(piggybacked, |x| x.max(piggybacked));
        if lac == INVALID_ENTRY_ID
            && self.lock_ledgers().get(&ledger_id).is_some_and(|l| l.state.limbo)
        {
            return Err(StorageError::Unknown(ledger_id, INVALID_ENTRY_ID));
        }
        Ok(lac)
    }

    fn set_limbo(&self, ledger_id: LedgerId, limbo: bool) -> Result<()> {
        self.check_poison()?;
        let mut ledgers = self.lock_ledgers();
        let ledger = ledgers.entry(ledger_id).or_default();
        ledger.state.limbo = limbo;
        let mut b = KvBatch::default();
        b.put(Table::Ledgers, index::ledger_key(ledger_id), ledger.state.encode());
        self.kv.commit(b)
    }

    fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        self.check_poison()?;
        self.lock_ledgers().remove(&ledger_id);
        self.cache.remove_ledger(ledger_id);
        self.read_cache.lock().expect("read cache lock").remove_ledger(ledger_id);
        // The flush lock keeps a concurrent flush from re-adding this ledger's locations.
        let mut flush = self.flush.lock().expect("flush lock");
        self.location_pages(ledger_id, |page, last| {
            let mut b = KvBatch::default();
            for (k, _) in page {
                b.delete(Table::Locations, k);
            }
            if last {
                b.delete(Table::Ledgers, index::ledger_key(ledger_id));
                // Per-ledger mode: its log is sealed now, so GC can take it back.
                if let Some((w, _)) = flush.per_ledger.remove(&ledger_id) {
                    let id = w.log_id();
                    b.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
                }
            }
            self.kv.commit(b)
        })?;
        tracing::info!(ledger_id, "ledger deleted locally");
        Ok(())
    }

    fn compact(&self, log_id: u64) -> Result<u64> {
        let mut flush = self.flush.lock().expect("flush lock");
        let Some(state) = self.kv.get(Table::Meta, &index::elog_key(log_id))? else { return Ok(0) };
        let state = EntryLogState::decode(&state)?;
        assert!(state.sealed, "only sealed entry logs are compacted");
        if flush.writer.as_ref().is_some_and(|w| w.log_id() == log_id)
            || flush.per_ledger.values().any(|(w, _)| w.log_id() == log_id)
        {
            return Ok(0);
        }
        let live: Vec<LedgerId> = {
            let ledgers = self.lock_ledgers();
            state.ledgers.iter().map(|(l, _)| *l).filter(|l| ledgers.contains_key(l)).collect()
        };
        let mut batch = KvBatch::default();
        let mut copied = 0u64;
        for ledger_id in live {
            self.location_pages(ledger_id, |page, _| {
                for (k, v) in &page {
                    let loc = EntryLocation::decode(v)?;
                    if loc.log_id != log_id {
                        continue;
                    }
                    let (_, entry_id) = index::parse_location_key(k)?;
                    let entry = self.reader.read(loc, ledger_id, entry_id)?;
                    let writer = self.writer_with_room(&mut flush, &mut batch)?;
                    let new = writer.append(&entry)?;
                    batch.put(Table::Locations, k.clone(), new.encode());
                    copied += 1;
                }
                Ok(())
            })?;
        }
        if let Some(w) = flush.writer.as_mut() {
            w.sync()?;
        }
        // Per-ledger mode: no flush writes to the shared log, so nothing would ever seal
        // the compaction output (size aside). It is sealed in this batch, collectable like
        // any other log (L2 with compaction on).
        if self.config.entry_log_per_ledger
            && let Some(w) = flush.writer.take()
        {
            let id = w.log_id();
            batch.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
        }
        batch.delete(Table::Meta, index::elog_key(log_id));
        batch.put(
            Table::Meta,
            index::META_NEXT_LOG_ID.to_vec(),
            flush.next_log_id.to_le_bytes().to_vec(),
        );
        self.kv.commit(batch)?;
        self.reader.forget(log_id);
        self.read_cache.lock().expect("read cache lock").clear();
        let path = self.log_dir.join(entry_log::file_name(log_id));
        self.fs
            .remove_file(&path)
            .map_err(|e| StorageError::io(format!("removing {}", path.display()), e))?;
        self.fs
            .sync_dir(&self.log_dir)
            .map_err(|e| StorageError::io("syncing entry log dir", e))?;
        tracing::info!(log_id, copied, bytes = state.size_bytes, "entry log compacted");
        Ok(state.size_bytes)
    }

    fn storage_flags(&self) -> Result<u64> {
        match self.kv.get(Table::Meta, index::META_FLAGS)? {
            None => Ok(0),
            Some(v) => v
                .try_into()
                .map(u64::from_le_bytes)
                .map_err(|_| StorageError::corruption("index", "storage flags value")),
        }
    }

    fn replay_journal(&self) -> Result<ReplayReport> {
        let dir = self.config.journal_dir.clone();
        let mark = journal::read_checkpoint(self.fs.as_ref(), &dir)?;
        let mut apply = |record: JournalRecord| -> Result<()> {
            match record {
                JournalRecord::Entry(e) => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(e.ledger_id()).or_default();
                    l.dirty = true;
                    let lac = e.last_add_confirmed();
                    l.piggybacked_lac = Some(l.piggybacked_lac.map_or(lac, |x| x.max(lac)));
                    drop(ledgers);
                    self.cache.insert_unbounded(e);
                    if self.cache.is_active_full() {
                        self.flush_with_mark(None, false)?;
                    }
                }
                JournalRecord::MasterKey { ledger_id, key } => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(ledger_id).or_default();
                    if l.state.master_key.is_none() {
                        l.state.master_key = Some(key);
                        l.dirty = true;
                    }
                }
                JournalRecord::Fence { ledger_id } => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(ledger_id).or_default();
                    l.state.fenced = true;
                    l.dirty = true;
                }
                JournalRecord::ExplicitLac { ledger_id, lac } => {
                    let mut ledgers = self.lock_ledgers();
                    let l = ledgers.entry(ledger_id).or_default();
                    l.state.explicit_lac = Some(l.state.explicit_lac.map_or(lac, |x| x.max(lac)));
                    l.dirty = true;
                }
                JournalRecord::FileEnd { .. } | JournalRecord::SyncMark { .. } => {}
            }
            Ok(())
        };
        let report = journal::replay(self.fs.as_ref(), &dir, mark, &mut apply)?;
        self.flush_with_mark(None, false)?;
        Ok(report)
    }

    fn run_flusher(&self) {
        loop {
            {
                let mut s = self.signal.lock().expect("signal lock");
                if !s.requested && !s.shutdown {
                    s = self
                        .signal_cond
                        .wait_timeout(s, self.config.flush_interval)
                        .expect("signal lock")
                        .0;
                }
                if s.shutdown {
                    return;
                }
                s.requested = false;
            }
            if self.check_poison().is_err() {
                continue;
            }
            if let Err(e) = self.flush_with_mark(Some(self.journal()), true) {
                tracing::error!(error = %e, "flush failed");
            }
        }
    }

    fn flush_now(&self) -> Result<()> {
        let journal = self.journal();
        self.flush_with_mark(Some(journal), false)
    }

    /// One flush. With a journal, the checkpoint moves to the mark read at the swap.
    /// `paced`: a background flush, spread over time (see [`FlushPace`]).
    fn flush_with_mark(&self, journal: Option<&Journal>, paced: bool) -> Result<()> {
        let mut flush = self.flush.lock().expect("flush lock");
        let Some((half, mark)) = self.cache.swap(|| journal.map(Journal::written_mark)) else {
            unreachable!("only the holder of the flush lock swaps the cache");
        };
        let dirty = self.take_dirty_ledgers();
        let started = std::time::Instant::now();
        let filled_in = started - std::mem::replace(&mut flush.last_swap, started);
        let budget = if paced {
            filled_in.mul_f64(FLUSH_PACE_FRACTION).min(FLUSH_PACE_MAX)
        } else {
            std::time::Duration::ZERO
        };
        let mut pace = FlushPace::new(half.bytes, budget, started);
        let result = self.write_flush(&mut flush, &half, &dirty, mark, &mut pace);
        self.cache.finish_flush();
        let took = started.elapsed();
        if took > std::time::Duration::from_secs(1) {
            tracing::warn!(
                took_ms = took.as_millis() as u64,
                bytes = half.bytes,
                entries = half.entries.len(),
                "slow flush"
            );
        } else {
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                bytes = half.bytes,
                entries = half.entries.len(),
                "flush"
            );
        }
        match result {
            Ok(()) => Ok(()),
            Err(e) => {
                self.poison(format!("flush failed: {e}"));
                Err(e)
            }
        }
    }

    fn take_dirty_ledgers(&self) -> Vec<(LedgerId, LedgerState)> {
        let mut ledgers = self.lock_ledgers();
        let mut dirty = Vec::new();
        for (id, l) in ledgers.iter_mut().filter(|(_, l)| l.dirty) {
            l.dirty = false;
            dirty.push((*id, l.state.clone()));
        }
        dirty
    }

    fn write_flush(
        &self,
        flush: &mut FlushState,
        half: &CacheHalf,
        dirty: &[(LedgerId, LedgerState)],
        mark: Option<JournalPosition>,
        pace: &mut FlushPace,
    ) -> Result<()> {
        let mut batch = KvBatch::default();
        let live: std::collections::HashSet<LedgerId> = {
            let ledgers = self.lock_ledgers();
            half.entries.keys().map(|k| k.0).filter(|l| ledgers.contains_key(l)).collect()
        };
        for ((ledger_id, entry_id), entry) in &half.entries {
            if !live.contains(ledger_id) {
                continue; // deleted while in the cache
            }
            let writer = if self.config.entry_log_per_ledger {
                self.ledger_writer(flush, &mut batch, *ledger_id)?
            } else {
                self.writer_with_room(flush, &mut batch)?
            };
            let loc = writer.append(entry)?;
            writer.sync_if_due(self.config.entry_log_sync_bytes)?;
            batch.put(Table::Locations, index::location_key(*ledger_id, *entry_id), loc.encode());
            pace.wrote(entry.encoded_len(), &self.cache);
        }
        if let Some(w) = flush.writer.as_mut() {
            w.sync()?;
        }
        if self.config.entry_log_per_ledger {
            self.rotate_per_ledger_logs(flush, &mut batch)?;
        } else {
            self.rotate_idle_shared_log(flush, &mut batch, !half.entries.is_empty())?;
        }
        // Logs still active: how far their entries are durable (checked by recovery).
        let active = flush.writer.iter_mut().chain(flush.per_ledger.values_mut().map(|(w, _)| w));
        for w in active {
            if let Some(state) = w.durable_state() {
                batch.put(Table::Meta, index::elog_key(w.log_id()), state.encode());
            }
        }
        for (id, state) in dirty {
            batch.put(Table::Ledgers, index::ledger_key(*id), state.encode());
        }
        let moved = mark.is_some() && mark != flush.last_mark;
        if batch.is_empty() && !moved {
            return Ok(());
        }
        batch.put(
            Table::Meta,
            index::META_NEXT_LOG_ID.to_vec(),
            flush.next_log_id.to_le_bytes().to_vec(),
        );
        if let (Some(m), Some(_)) = (mark, self.journal.get()) {
            batch.put(
                Table::Meta,
                index::META_CHECKPOINT.to_vec(),
                journal::format::encode_checkpoint(m).to_vec(),
            );
        }
        self.kv.commit(batch)?;
        if let (Some(m), Some(journal)) = (mark, self.journal.get()) {
            journal::write_checkpoint(self.fs.as_ref(), &self.config.journal_dir, m)?;
            journal.release_before(m.file_id);
            flush.last_mark = Some(m);
        }
        Ok(())
    }

    /// Per-ledger mode: the ledger's own log (rotated when full; the least recently used
    /// log is sealed when too many are open).
    fn ledger_writer<'a>(
        &self,
        flush: &'a mut FlushState,
        batch: &mut KvBatch,
        ledger_id: LedgerId,
    ) -> Result<&'a mut EntryLogWriter> {
        let full = flush
            .per_ledger
            .get(&ledger_id)
            .is_some_and(|(w, _)| w.size() >= self.config.entry_log_bytes_max);
        if full {
            let (w, _) = flush.per_ledger.remove(&ledger_id).expect("checked");
            let id = w.log_id();
            batch.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
        }
        if !flush.per_ledger.contains_key(&ledger_id) {
            if flush.per_ledger.len() >= self.config.entry_log_per_ledger_open_max {
                let lru = flush
                    .per_ledger
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(l, _)| *l)
                    .expect("non-empty");
                let (w, _) = flush.per_ledger.remove(&lru).expect("listed");
                let id = w.log_id();
                batch.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
            }
            let id = flush.next_log_id;
            flush.next_log_id += 1;
            let w = EntryLogWriter::create(self.fs.as_ref(), &self.log_dir, id)?;
            batch.put(Table::Meta, index::elog_key(id), EntryLogState::active().encode());
            flush.per_ledger.insert(ledger_id, (w, std::time::Instant::now()));
        }
        let slot = flush.per_ledger.get_mut(&ledger_id).expect("just ensured");
        slot.1 = std::time::Instant::now();
        Ok(&mut slot.0)
    }

    /// Shared mode, end of a flush: a log with entries that no flush has written to for
    /// `entry_log_idle_rotation` is sealed, so GC can give its space back once its ledgers
    /// are deleted (an idle bookie would otherwise hold up to `entry_log_bytes_max` of
    /// deleted data for ever). The next entry opens a new log.
    fn rotate_idle_shared_log(
        &self,
        flush: &mut FlushState,
        batch: &mut KvBatch,
        wrote: bool,
    ) -> Result<()> {
        if wrote {
            flush.writer_touched = std::time::Instant::now();
            return Ok(());
        }
        let idle = flush.writer_touched.elapsed() >= self.config.entry_log_idle_rotation;
        if idle && flush.writer.as_ref().is_some_and(|w| !w.is_empty()) {
            let w = flush.writer.take().expect("checked");
            let id = w.log_id();
            batch.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
            tracing::debug!(log_id = id, "sealed an idle entry log");
        }
        Ok(())
    }

    /// Per-ledger mode, end of a flush: sync every log written, then seal the logs of
    /// ledgers that are gone or idle longer than `entry_log_idle_rotation`.
    fn rotate_per_ledger_logs(&self, flush: &mut FlushState, batch: &mut KvBatch) -> Result<()> {
        for (w, _) in flush.per_ledger.values_mut() {
            w.sync()?;
        }
        let idle = self.config.entry_log_idle_rotation;
        let done: Vec<LedgerId> = {
            let ledgers = self.lock_ledgers();
            flush
                .per_ledger
                .iter()
                .filter(|(l, (_, t))| !ledgers.contains_key(l) || t.elapsed() >= idle)
                .map(|(l, _)| *l)
                .collect()
        };
        for l in done {
            let (w, _) = flush.per_ledger.remove(&l).expect("listed");
            let id = w.log_id();
            batch.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
        }
        Ok(())
    }

    /// The current writer, after sealing it and starting a new log if it is full.
    fn writer_with_room<'a>(
        &self,
        flush: &'a mut FlushState,
        batch: &mut KvBatch,
    ) -> Result<&'a mut EntryLogWriter> {
        let full =
            flush.writer.as_ref().is_some_and(|w| w.size() >= self.config.entry_log_bytes_max);
        if full {
            let w = flush.writer.take().expect("checked");
            let id = w.log_id();
            batch.put(Table::Meta, index::elog_key(id), w.seal()?.encode());
        }
        if flush.writer.is_none() {
            let id = flush.next_log_id;
            flush.next_log_id += 1;
            flush.writer = Some(EntryLogWriter::create(self.fs.as_ref(), &self.log_dir, id)?);
            batch.put(Table::Meta, index::elog_key(id), EntryLogState::active().encode());
        }
        Ok(flush.writer.as_mut().expect("just ensured"))
    }
}

/// The index must hold every flush up to the journal's checkpoint file (see
/// `index::META_CHECKPOINT`). Checked before anything is written at open; an index from
/// before that record (it has a next log id and no record) passes.
fn check_index_checkpoint(fs: &dyn FileSystem, kv: &dyn KvStore, dir: &Path) -> Result<()> {
    let Some(file_mark) = journal::read_checkpoint(fs, dir)? else {
        return Ok(());
    };
    let lost = |held: String| {
        StorageError::corruption(
            format!(
                "index (its files under the ledger dir's index/), checked against {}",
                dir.join("checkpoint").display()
            ),
            format!(
                "the index lost committed flushes: it holds {held}, the journal's checkpoint says {file_mark:?} (the journal files that would replay the rest are gone); the index is damaged"
            ),
        )
    };
    let Some(v) = kv.get(Table::Meta, index::META_CHECKPOINT)? else {
        // Every open commits the next log id before the journal's first checkpoint: an
        // index without one lost everything; one with it predates the record.
        if kv.get(Table::Meta, index::META_NEXT_LOG_ID)?.is_none() {
            return Err(lost("no flush at all".into()));
        }
        tracing::warn!(
            "the index has no checkpoint record yet (written by older versions); the next flush writes one"
        );
        return Ok(());
    };
    let index_mark = journal::format::decode_checkpoint(&v)
        .map_err(|d| StorageError::corruption("index: checkpoint record", d))?;
    if index_mark < file_mark {
        return Err(lost(format!("the flushes up to journal position {index_mark:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    const MIB: usize = 1024 * 1024;

    #[test]
    fn a_paced_flush_spreads_its_writes_over_the_budget() {
        let start = Instant::now();
        let mut pace = FlushPace::new(8 * MIB, Duration::from_millis(800), start);
        // Below one step nothing is checked.
        assert_eq!(pace.delay(FLUSH_PACE_STEP_BYTES - 1, || 0.0, || start), None);
        // Written instantly, the first MiB is due at 100 ms.
        let d = pace.delay(MIB - (FLUSH_PACE_STEP_BYTES - 1), || 0.0, || start).unwrap();
        assert_eq!(d, Duration::from_millis(100));
        // Behind schedule: no pause.
        assert_eq!(pace.delay(MIB, || 0.0, || start + Duration::from_millis(500)), None);
        // Ahead again: 3 MiB done at 200 ms, due at 300 ms.
        let d = pace.delay(MIB, || 0.0, || start + Duration::from_millis(200)).unwrap();
        assert_eq!(d, Duration::from_millis(100));
    }

    #[test]
    fn pacing_stops_once_the_active_half_fills_and_never_applies_without_a_budget() {
        let start = Instant::now();
        let mut pace = FlushPace::new(8 * MIB, Duration::from_millis(800), start);
        assert_eq!(pace.delay(MIB, || FLUSH_PACE_ACTIVE_FRACTION_MAX, || start), None);
        // Once writers may soon wait, the rest of the flush runs flat out.
        assert_eq!(pace.delay(MIB, || 0.0, || start), None);
        let mut unpaced = FlushPace::new(8 * MIB, Duration::ZERO, start);
        assert_eq!(unpaced.delay(4 * MIB, || 0.0, || start), None);
    }
}
