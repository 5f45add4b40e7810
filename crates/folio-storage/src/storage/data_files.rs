//! Single-write mode (`StorageMode::SingleWrite`): the journal's files are the data files.
//!
//! An entry is written once, by the journal (group commit, fdatasync before the
//! acknowledgement). The journal tells [`Located::hook`] where each entry record starts, on
//! its writer thread before the group can be synced, so every entry record before the
//! journal's durable mark has been reported. A flush then
//! 1. indexes every reported record before the mark it read at the swap, in journal order:
//!    the checkpoint it writes means exactly "every entry record before here is in the
//!    index", and replay after a crash indexes the rest from the journal;
//! 2. carries the cached entries it did not index (written after the mark) over into the
//!    active half of the write cache, so they stay readable;
//! 3. counts the bytes it indexed per file and ledger, and records a file **sealed** with
//!    those counts once the checkpoint is past its end. From then on GC deletes or compacts
//!    it like a sealed entry log (seed 002: collectable only when sealed and recorded so).
//!    Files still in use keep their counts so far in an **active** state, committed in the
//!    same batch as the locations: a crash forgets none of the bytes before the checkpoint.
//!
//! An idle bookie must give deleted ledgers' space back too: when no flush has indexed
//! anything for `entry_log_idle_rotation` and a file not sealed holds indexed bytes, the
//! flush has the journal rotate first (`Journal::rotate`), so it seals that file.
//!
//! Reads: the journal groups each written group's records by ledger, so one ledger's
//! entries come in runs (about `group_bytes_max` divided by the ledgers writing). A
//! read-ahead window is one read per run (a run steps over other ledgers' bytes while that
//! reads at most half again what it loads); it first asks the kernel for all of the window's
//! runs and the next window's, so the disk reads them in parallel and nothing of other
//! ledgers is fetched (data files bypass the page cache when written).
//!
//! A data file's log id (in locations and states) is `index::data_file_log_id(file_id)`.
//! Compaction copies live entries out into entry logs, sorted by ledger, as in two-write
//! mode. A file GC deleted or compacted goes to the journal's recycle pool (`Journal::recycle`)
//! and is written over as a later data file, under a new id.
//!
//! Architecture invariant: nothing but this module decides when a data file is sealed, and
//! only a flush holding the flush lock does it.

use std::collections::{BTreeMap, HashSet, VecDeque};

use super::*;

/// Where one entry record starts in the journal, as the journal reported it.
#[derive(Debug, Clone, Copy)]
pub(super) struct LocatedEntry {
    ledger_id: LedgerId,
    entry_id: EntryId,
    at: JournalPosition,
    /// Bytes of the encoded entry (the record header comes on top).
    len: u32,
}

impl LocatedEntry {
    fn location(&self) -> EntryLocation {
        EntryLocation {
            log_id: index::data_file_log_id(self.at.file_id),
            offset: self.at.offset,
            len: self.len,
        }
    }

    /// Bytes of the file the record takes (header and entry).
    fn record_bytes(&self) -> u64 {
        crate::frame::FRAME_HEADER_BYTES as u64 + u64::from(self.len)
    }
}

/// Entry records written to the journal and not indexed yet, in journal order. Bounded by
/// the write cache: each one's entry stays cached (carried over) until a flush indexes it,
/// and a deleted ledger's records go with its cached entries (`forget_ledger`).
#[derive(Debug, Default)]
pub(super) struct Located {
    queue: Mutex<VecDeque<LocatedEntry>>,
}

impl Located {
    /// The journal's hook: appends the records of a written group.
    pub(super) fn hook(located: Arc<Located>) -> journal::LocatedHook {
        Arc::new(move |records: Vec<(JournalPosition, JournalRecord)>| {
            let mut q = located.queue.lock().expect("located lock");
            for (at, record) in records {
                if let JournalRecord::Entry(e) = record {
                    located.push_locked(&mut q, &e, at);
                }
            }
        })
    }

    /// Replay: an entry record read back from the journal at `at`.
    pub(super) fn push(&self, entry: &Entry, at: JournalPosition) {
        let mut q = self.queue.lock().expect("located lock");
        self.push_locked(&mut q, entry, at);
    }

    fn push_locked(&self, q: &mut VecDeque<LocatedEntry>, entry: &Entry, at: JournalPosition) {
        // D1: the journal reports records in the order it wrote them.
        assert!(q.back().is_none_or(|b| b.at < at), "journal records reported out of order");
        let len = u32::try_from(entry.encoded_len()).expect("entries are far below 4 GiB");
        q.push_back(LocatedEntry {
            ledger_id: entry.ledger_id(),
            entry_id: entry.entry_id(),
            at,
            len,
        });
    }

    /// Takes the records before `mark` (all of them for `None`: replay, where everything
    /// read is synced).
    fn take_before(&self, mark: Option<JournalPosition>) -> Vec<LocatedEntry> {
        let mut q = self.queue.lock().expect("located lock");
        let n = match mark {
            None => q.len(),
            Some(m) => q.iter().take_while(|e| e.at < m).count(),
        };
        q.drain(..n).collect()
    }

    /// Whether no record waits to be indexed.
    fn is_empty(&self) -> bool {
        self.queue.lock().expect("located lock").is_empty()
    }

    /// Forgets a deleted ledger's records (called under the flush lock).
    pub(super) fn forget_ledger(&self, ledger_id: LedgerId) {
        self.queue.lock().expect("located lock").retain(|e| e.ledger_id != ledger_id);
    }
}

/// Byte counts of the data files not sealed yet (under the flush lock).
#[derive(Debug, Default)]
pub(super) struct DataFiles {
    /// File id → ledger → bytes of its indexed records in that file.
    usage: BTreeMap<u64, BTreeMap<LedgerId, u64>>,
    /// Every data file below this id is sealed and recorded (or deleted since).
    sealed_below: u64,
    /// When (storage clock, ms) a flush last indexed something; `None`: not since the open.
    last_indexed_ms: Option<u64>,
}

impl DataFiles {
    /// The state a recovery found: active files' counts, and the first file not sealed.
    pub(super) fn recovered(
        usage: BTreeMap<u64, BTreeMap<LedgerId, u64>>,
        sealed_below: u64,
    ) -> DataFiles {
        DataFiles { usage, sealed_below, last_indexed_ms: None }
    }

    /// Whether a file not sealed yet holds indexed bytes and nothing was indexed for
    /// `idle_ms` (counted from the open when nothing was since).
    fn idle(&mut self, now_ms: u64, idle_ms: u64) -> bool {
        let last = *self.last_indexed_ms.get_or_insert(now_ms);
        now_ms.saturating_sub(last) >= idle_ms
            && self.usage.range(self.sealed_below..).any(|(_, u)| !u.is_empty())
    }
}

impl Inner {
    /// Single-write: before a flush swaps, has the journal end an idle data file so this
    /// flush seals it. A stepped storage cannot wait: a later flush seals it then.
    pub(super) fn rotate_idle_data_file(&self, flush: &mut FlushState, journal: &Journal) {
        if self.located.is_empty()
            && flush.data.idle(
                self.config.clock.now_ms(),
                self.config.entry_log_idle_rotation.as_millis() as u64,
            )
        {
            tracing::debug!("rotating an idle data file so it is sealed");
            if self.config.stepped().is_some() {
                journal.rotate(Box::new(|_| {}));
                return;
            }
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            journal.rotate(Box::new(move |r| {
                let _ = tx.send(r);
            }));
            // A failure poisons the journal; the flush finds out on its own.
            let _ = rx.recv();
        }
    }

    /// The path of a log id's file: an entry log, or a journal file in single-write mode.
    pub(super) fn log_path(&self, log_id: u64) -> PathBuf {
        match index::data_file_id(log_id) {
            Some(f) => self.config.journal_dir.join(journal::format::file_name(f)),
            None => self.log_dir.join(entry_log::file_name(log_id)),
        }
    }

    /// One single-write flush: indexes what the journal wrote before `mark` (everything
    /// replayed, for `None`), seals files the checkpoint passed, and commits with the
    /// checkpoint. Returns the cached entries of `half` not indexed, to carry over.
    pub(super) fn index_flush(
        &self,
        flush: &mut FlushState,
        half: &CacheHalf,
        dirty: &[(LedgerId, LedgerState)],
        mark: Option<JournalPosition>,
    ) -> Result<Vec<Entry>> {
        let taken = self.located.take_before(mark);
        // The ledgers that still exist, among those indexed and those cached.
        let live: HashSet<LedgerId> = {
            let ledgers = self.lock_ledgers();
            let ids = taken.iter().map(|e| e.ledger_id).chain(half.entries.keys().map(|k| k.0));
            ids.filter(|l| ledgers.contains_key(l)).collect()
        };
        let mut batch = KvBatch::default();
        let mut indexed = HashSet::with_capacity(taken.len());
        let mut touched = HashSet::new();
        for e in taken.iter().filter(|e| live.contains(&e.ledger_id)) {
            if let Some(m) = mark {
                assert!(e.at < m, "a record after the mark {m:?} is indexed");
            }
            let key = index::location_key(e.ledger_id, e.entry_id);
            batch.put(Table::Locations, key, e.location().encode());
            let file = flush.data.usage.entry(e.at.file_id).or_default();
            *file.entry(e.ledger_id).or_default() += e.record_bytes();
            touched.insert(e.at.file_id);
            indexed.insert((e.ledger_id, e.entry_id));
        }
        if !indexed.is_empty() {
            flush.data.last_indexed_ms = Some(self.config.clock.now_ms());
        }
        let carry: Vec<Entry> = half
            .entries
            .iter()
            .filter(|(k, _)| !indexed.contains(*k) && live.contains(&k.0))
            .map(|(_, e)| e.clone())
            .collect();
        for (id, state) in dirty {
            batch.put(Table::Ledgers, index::ledger_key(*id), state.encode());
        }
        if let Some(m) = mark {
            self.seal_data_files_before(flush, m.file_id, &mut batch)?;
        }
        for f in touched.into_iter().filter(|f| *f >= flush.data.sealed_below) {
            let ledgers = flush.data.usage.get(&f).map(|u| u.iter().map(|(l, b)| (*l, *b)));
            let state = EntryLogState {
                sealed: false,
                size_bytes: 0,
                ledgers: ledgers.into_iter().flatten().collect(),
            };
            batch.put(Table::Meta, index::elog_key(index::data_file_log_id(f)), state.encode());
        }
        let moved = mark.is_some() && mark != flush.last_mark;
        if batch.is_empty() && !moved {
            return Ok(carry);
        }
        self.commit_checkpointed(flush, batch, mark)?;
        Ok(carry)
    }

    /// Records every data file below `end` sealed, with its byte counts and size.
    fn seal_data_files_before(
        &self,
        flush: &mut FlushState,
        end: u64,
        batch: &mut KvBatch,
    ) -> Result<()> {
        for f in flush.data.sealed_below..end {
            let usage = flush.data.usage.remove(&f).unwrap_or_default();
            let log_id = index::data_file_log_id(f);
            let path = self.log_path(log_id);
            if !self.fs.exists(&path) {
                if !usage.is_empty() {
                    return Err(StorageError::corruption(
                        path.display().to_string(),
                        "a data file the index points into is missing",
                    ));
                }
                continue; // an id the journal never used
            }
            let size_bytes = self
                .fs
                .open(&path, crate::fs::OpenOptions::EXISTING)
                .and_then(|h| h.len())
                .map_err(|e| StorageError::io(format!("sizing {}", path.display()), e))?;
            let state =
                EntryLogState { sealed: true, size_bytes, ledgers: usage.into_iter().collect() };
            batch.put(Table::Meta, index::elog_key(log_id), state.encode());
            tracing::debug!(file_id = f, size_bytes, "data file sealed");
        }
        flush.data.sealed_below = flush.data.sealed_below.max(end);
        Ok(())
    }
}

/// Single-write recovery, before replay: checks the data files the index lists, removes
/// files the index never recorded that no replay reads (GC deleted their record and
/// crashed before the file), and syncs the files replay reads (records a crash left
/// written but unsynced are indexed after replay, so they must be durable first).
/// Returns the byte counts of active files and the first file not sealed.
pub(super) fn recover_data_files(
    fs: &dyn FileSystem,
    kv: &dyn KvStore,
    journal_dir: &Path,
    replay_from: Option<JournalPosition>,
    report: &mut RecoveryReport,
) -> Result<DataFiles> {
    let first_replayed = replay_from.map_or(0, |m| m.file_id);
    let mut usage = BTreeMap::new();
    let mut sealed = HashSet::new();
    for (log_id, state) in entry_log_states(kv)? {
        let Some(f) = index::data_file_id(log_id) else { continue };
        if state.sealed {
            sealed.insert(f);
        } else {
            usage.insert(f, state.ledgers.into_iter().collect::<BTreeMap<_, _>>());
        }
    }
    let on_disk: Vec<u64> = fs
        .list_dir(journal_dir)
        .map_err(|e| StorageError::io("listing journal dir", e))?
        .iter()
        .filter_map(|n| journal::format::parse_file_name(n))
        .collect();
    for f in sealed.iter().chain(usage.keys()) {
        if !on_disk.contains(f) {
            return Err(StorageError::corruption(
                journal_dir.display().to_string(),
                format!(
                    "data file {} is in the index but missing on disk",
                    journal::format::file_name(*f)
                ),
            ));
        }
    }
    for f in on_disk.iter().copied() {
        let path = journal_dir.join(journal::format::file_name(f));
        if f < first_replayed && !sealed.contains(&f) && !usage.contains_key(&f) {
            fs.remove_file(&path).map_err(|e| StorageError::io("removing orphan data file", e))?;
            tracing::info!(file_id = f, "orphan data file removed");
            report.orphan_entry_logs_removed.push(index::data_file_log_id(f));
        } else if f >= first_replayed {
            fs.open(&path, crate::fs::OpenOptions::EXISTING)
                .and_then(|h| h.sync_data())
                .map_err(|e| StorageError::io(format!("syncing {}", path.display()), e))?;
        }
    }
    fs.sync_dir(journal_dir).map_err(|e| StorageError::io("syncing journal dir", e))?;
    let sealed_below = usage.keys().copied().min().unwrap_or(first_replayed).min(first_replayed);
    Ok(DataFiles::recovered(usage, sealed_below))
}
