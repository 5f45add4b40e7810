//! The journal: a write-ahead log with group commit.
//!
//! One thread owns the current file. Submitters queue records (a bounded queue: they block
//! when it is full); the thread gathers a group and writes it with one aligned write: at
//! once when no earlier group waits for its sync (light load pays no timer), else until that
//! sync ends, `group_wait_max` after the first record, or `group_bytes_max`. A second thread,
//! the syncer, `fdatasync`s and only then runs the callbacks, so the next group is written
//! while the previous one is being synced (one fdatasync may cover several groups). At
//! most `SYNC_PIPELINE_GROUPS` written groups wait for the syncer. A failed write or fsync
//! poisons the journal: that group and every later request fail, and nothing is retried
//! (the data the kernel dropped cannot be recovered by a second fsync).
//!
//! Stepped (`Background::Stepped`, the simulator's mode): no threads. Whoever opened the
//! storage calls [`Journal::step_write`] (write what is queued as one group) and
//! [`Journal::step_sync`] (sync what was written, then run the callbacks); the same
//! writer and syncer code runs, on the caller's thread, and submitters never wait for room.
//!
//! Single-write mode (`StorageMode::SingleWrite`): the journal's files are the data files.
//! A [`LocatedHook`] is told where each entry record of a group starts, and no checkpoint
//! releases a file: the storage seals, deletes and compacts them like entry logs, and hands
//! the ones GC is done with to the recycle pool ([`Journal::recycle`], `recycle`).
//!
//! **Architecture invariant:** the journal knows records, not ledgers: it never looks inside
//! an entry and keeps no per-ledger state.

pub mod format;
mod queue;
mod recycle;
mod replay;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub use format::{JournalPosition, JournalRecord, StopReason};
pub use recycle::{is_recycled_name, recycled_name};
pub use replay::{ReplayReport, replay};

use crate::config::JournalConfig;
use crate::error::{Poison, PoisonReason, Result, StorageError};
use crate::fs::{AlignedBuf, DIRECT_IO_ALIGN, FileHandle, FileSystem, OpenOptions};
use format::{HEADER_BYTES, encode_header, encode_record, file_name, parse_file_name, record_len};
use queue::{Queue, QueueState};
use recycle::RecyclePool;

/// Called on the journal's syncer thread once the record is durable (or failed).
pub type JournalCallback = Box<dyn FnOnce(Result<JournalPosition>) + Send>;

/// Single-write mode: told, on the writer's thread, where each entry record of a group
/// starts, once the group is written and before it can be synced. So every entry record
/// before the durable mark ([`Journal::written_mark`]) has been reported.
pub type LocatedHook = Arc<dyn Fn(Vec<(JournalPosition, JournalRecord)>) + Send + Sync>;

enum Request {
    Append(JournalRecord, Option<JournalCallback>),
    /// Runs its callback once everything queued before it is durable.
    Barrier(JournalCallback),
    /// Files before this id are no longer needed (a checkpoint covers them).
    ReleaseBefore(u64),
    /// Ends the current file (if it holds anything) and starts the next; the callback runs
    /// once that is durable and the written mark is in the new file.
    Rotate(JournalCallback),
    Shutdown,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Append(r, _) => write!(f, "Append({:?})", record_len(r)),
            Request::Barrier(_) => f.write_str("Barrier"),
            Request::ReleaseBefore(id) => write!(f, "ReleaseBefore({id})"),
            Request::Rotate(_) => f.write_str("Rotate"),
            Request::Shutdown => f.write_str("Shutdown"),
        }
    }
}

#[derive(Debug)]
struct Shared {
    written: Mutex<JournalPosition>,
    poison: Poison,
    stats: JournalStats,
}

/// Counters of the journal thread.
#[derive(Debug, Default)]
pub struct JournalStats {
    /// Commits: fdatasyncs (or, without `sync`, batches handed to the syncer), each
    /// covering one or more written groups.
    pub n_commits: std::sync::atomic::AtomicU64,
    /// Record bytes in those commits.
    pub bytes_committed: std::sync::atomic::AtomicU64,
    pub n_records: std::sync::atomic::AtomicU64,
}

/// Handle to the journal thread. Dropping it stops the thread after the queued requests.
#[derive(Debug)]
pub struct Journal {
    queue: Arc<Queue>,
    shared: Arc<Shared>,
    /// The writer, then the syncer (which stops once the writer has).
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Stepped: the writer and the groups it wrote that wait for a sync.
    stepped: Option<Mutex<Stepped>>,
    /// Files to write over, shared with the writer.
    pool: Arc<RecyclePool>,
}

/// A stepped journal's writer side (see the module docs).
struct Stepped {
    writer: Writer,
    written: VecDeque<Written>,
    stopped: bool,
}

impl std::fmt::Debug for Stepped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stepped").field("written", &self.written.len()).finish_non_exhaustive()
    }
}

/// Writes the checkpoint file: replay starts at `mark` from now on.
pub fn write_checkpoint(fs: &dyn FileSystem, dir: &Path, mark: JournalPosition) -> Result<()> {
    fs.write_atomic(&dir.join("checkpoint"), &format::encode_checkpoint(mark))
        .map_err(|e| StorageError::io("writing journal checkpoint", e))
}

/// Reads the checkpoint file, if there is one.
pub fn read_checkpoint(fs: &dyn FileSystem, dir: &Path) -> Result<Option<JournalPosition>> {
    let path = dir.join("checkpoint");
    if !fs.exists(&path) {
        return Ok(None);
    }
    let bytes =
        fs.read_all(&path).map_err(|e| StorageError::io("reading journal checkpoint", e))?;
    format::decode_checkpoint(&bytes)
        .map(Some)
        .map_err(|d| StorageError::corruption(path.display().to_string(), d.to_string()))
}

impl Journal {
    /// Starts the journal after `replay` has read it: seals the last file at the end of its
    /// valid records (so the torn tail it may have is never read as corruption later) and
    /// opens a new file.
    /// `wake`: stepped (no threads), told whenever a step has work.
    /// `located`: single-write mode (files are data, recycled only once GC is done with
    /// them; see [`LocatedHook`]).
    pub fn start(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        config: JournalConfig,
        report: &ReplayReport,
        poison: Poison,
        wake: Option<crate::config::Wake>,
        located: Option<LocatedHook>,
    ) -> Result<Journal> {
        fs.create_dir_all(&dir).map_err(|e| StorageError::io("creating journal dir", e))?;
        let pool = RecyclePool::load(fs.clone(), &dir, config.n_files_recycled_max)
            .map_err(|e| StorageError::io("loading the journal's recycled files", e))?;
        let pool = Arc::new(pool);
        let mut writer = Writer::new(fs, dir, config.clone(), pool.clone());
        if let Some(end) = report.end {
            writer
                .seal_existing(end)
                .map_err(|e| StorageError::io("sealing last journal file", e))?;
        }
        let first_id = report.next_file_id();
        if located.is_none() {
            // Two-write: what a checkpoint covers is done with (single-write: the storage
            // decides, by its index).
            for id in &report.files_before_mark {
                pool.give(*id).map_err(|e| StorageError::io("recycling a journal file", e))?;
            }
        }
        writer.located = located;
        writer.open_new_file(first_id).map_err(|e| StorageError::io("creating journal file", e))?;
        let written = JournalPosition { file_id: first_id, offset: HEADER_BYTES as u64 };
        let shared = Arc::new(Shared {
            written: Mutex::new(written),
            poison,
            stats: JournalStats::default(),
        });
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState::default()),
            work: Condvar::new(),
            room: Condvar::new(),
            depth_max: config.queue_depth,
            group_bytes_max: config.group_bytes_max,
            len: std::sync::atomic::AtomicUsize::new(0),
            wake: wake.clone(),
            unsynced: std::sync::atomic::AtomicUsize::new(0),
        });
        if wake.is_some() {
            let stepped = Stepped { writer, written: VecDeque::new(), stopped: false };
            let stepped = Some(Mutex::new(stepped));
            let threads = Mutex::new(Vec::new());
            return Ok(Journal { queue, shared, threads, stepped, pool });
        }
        let (to_syncer, from_writer) = std::sync::mpsc::sync_channel(SYNC_PIPELINE_GROUPS);
        let (syncer_shared, syncer_queue, sync) = (shared.clone(), queue.clone(), config.sync);
        let syncer = std::thread::Builder::new()
            .name("folio-journal-sync".into())
            .spawn(move || run_syncer(&from_writer, &syncer_shared, &syncer_queue, sync))
            .map_err(|e| StorageError::io("spawning journal syncer thread", e))?;
        let (thread_shared, thread_queue) = (shared.clone(), queue.clone());
        let thread = std::thread::Builder::new()
            .name("folio-journal".into())
            .spawn(move || writer.run(&thread_queue, &thread_shared, to_syncer))
            .map_err(|e| StorageError::io("spawning journal thread", e))?;
        let threads = Mutex::new(vec![thread, syncer]);
        Ok(Journal { queue, shared, threads, stepped: None, pool })
    }

    /// Stepped: writes what is queued as one group (at most `SYNC_PIPELINE_GROUPS` written
    /// groups wait for a sync). Whether it did anything.
    pub fn step_write(&self) -> bool {
        let Some(stepped) = &self.stepped else { return false };
        let mut st = stepped.lock().expect("stepped journal lock");
        if st.stopped || st.written.len() >= SYNC_PIPELINE_GROUPS {
            return false;
        }
        let requests = self.queue.take_now();
        if requests.is_empty() {
            return false;
        }
        let (written, stop) = st.writer.write_requests(requests, &self.shared);
        if !written.is_empty() {
            st.written.push_back(written);
        }
        st.stopped = stop;
        drop(st);
        if let Some(wake) = &self.queue.wake {
            wake.wake();
        }
        true
    }

    /// Stepped: syncs every written group and runs their callbacks (outside any lock of
    /// the journal's). Whether it did anything.
    pub fn step_sync(&self) -> bool {
        let Some(stepped) = &self.stepped else { return false };
        let (batch, sync): (Vec<Written>, bool) = {
            let mut st = stepped.lock().expect("stepped journal lock");
            (st.written.drain(..).collect(), st.writer.config.sync)
        };
        if batch.is_empty() {
            return false;
        }
        sync_written(batch, &self.shared, sync, &|_| {});
        if let Some(wake) = &self.queue.wake {
            wake.wake(); // the writer may have waited for the pipeline
        }
        true
    }

    /// Stepped: whether a step has work.
    pub fn has_work(&self) -> bool {
        let Some(stepped) = &self.stepped else { return false };
        let st = stepped.lock().expect("stepped journal lock");
        !st.written.is_empty()
            || (!st.stopped && self.queue.len.load(std::sync::atomic::Ordering::Relaxed) > 0)
    }

    /// Queues `record`; `done` runs once it is durable (or failed).
    pub fn append(&self, record: JournalRecord, done: JournalCallback) {
        if let Err(Request::Append(_, Some(done))) =
            self.queue.push(Request::Append(record, Some(done)))
        {
            done(Err(StorageError::ShutDown));
        }
    }

    /// Whether a record can be queued now without waiting for room (a hint, read without
    /// the queue's lock).
    pub fn has_room(&self) -> bool {
        self.queue.len.load(std::sync::atomic::Ordering::Relaxed) < self.queue.depth_max
    }

    /// Runs `done` once every record queued before this call is durable.
    pub fn barrier(&self, done: JournalCallback) {
        if let Err(Request::Barrier(done)) = self.queue.push(Request::Barrier(done)) {
            done(Err(StorageError::ShutDown));
        }
    }

    /// The position up to which every queued record has been written. Every record before
    /// it was submitted before this call returned.
    pub fn written_mark(&self) -> JournalPosition {
        *self.shared.written.lock().expect("journal mark lock")
    }

    /// Ends the current file if it holds anything and starts the next one (single-write
    /// mode: an idle data file is sealed this way). `done` runs once the written mark is in
    /// the new file.
    pub fn rotate(&self, done: JournalCallback) {
        if let Err(Request::Rotate(done)) = self.queue.push(Request::Rotate(done)) {
            done(Err(StorageError::ShutDown));
        }
    }

    /// Tells the journal that files before `file_id` are covered by a checkpoint.
    pub fn release_before(&self, file_id: u64) {
        let _ = self.queue.push(Request::ReleaseBefore(file_id));
    }

    /// Single-write mode: GC is done with data file `file_id` (the index no longer lists
    /// it): it goes to the recycle pool, or is deleted when the pool is full. Durable when
    /// this returns. Never the current file.
    pub fn recycle(&self, file_id: u64) -> Result<()> {
        assert!(
            file_id < self.written_mark().file_id,
            "file {file_id} is still being written: only sealed data files are recycled"
        );
        self.pool
            .give(file_id)
            .map_err(|e| StorageError::io(format!("recycling {}", file_name(file_id)), e))
    }

    /// Files waiting in the recycle pool now, and journal files that were recycled files
    /// since the journal started.
    pub fn recycled(&self) -> (usize, u64) {
        (self.pool.len(), self.pool.n_reused())
    }

    /// The journal's counters.
    pub fn stats(&self) -> &JournalStats {
        &self.shared.stats
    }

    /// Why the journal stopped taking writes, if it did.
    pub fn poisoned(&self) -> Option<PoisonReason> {
        self.shared.poison.reason()
    }

    /// Stops the thread after everything queued so far.
    pub fn shutdown(&self) {
        let _ = self.queue.push(Request::Shutdown);
        if self.stepped.is_some() {
            while self.step_write() || self.step_sync() {}
            self.queue.close();
            for request in self.queue.take_remaining() {
                if let Request::Append(_, Some(cb)) | Request::Barrier(cb) | Request::Rotate(cb) =
                    request
                {
                    cb(Err(StorageError::ShutDown))
                }
            }
            return;
        }
        for t in self.threads.lock().expect("journal thread lock").drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Writer {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    config: JournalConfig,
    file: Option<Arc<dyn FileHandle>>,
    file_id: u64,
    /// File offset where `buf` starts; always aligned.
    block_offset: u64,
    /// The not-yet-full last block already on disk, followed by new records.
    buf: AlignedBuf,
    /// Bytes of the file known to be zero-filled or written.
    prealloc_end: u64,
    zeros: AlignedBuf,
    pool: Arc<RecyclePool>,
    /// The offset named by the last SyncMark written to the current file.
    sync_mark: u64,
    /// Single-write mode: told where each entry record starts; no checkpoint releases a file.
    located: Option<LocatedHook>,
}

impl Writer {
    fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        config: JournalConfig,
        pool: Arc<RecyclePool>,
    ) -> Writer {
        let mut zeros = AlignedBuf::with_capacity(config.prealloc_bytes.max(1) as usize);
        zeros.extend_from_slice(&vec![0u8; config.prealloc_bytes as usize]);
        Writer {
            fs,
            dir,
            buf: AlignedBuf::with_capacity(config.group_bytes_max + 2 * DIRECT_IO_ALIGN),
            config,
            file: None,
            file_id: 0,
            block_offset: 0,
            prealloc_end: 0,
            zeros,
            pool,
            sync_mark: 0,
            located: None,
        }
    }

    fn path(&self, file_id: u64) -> PathBuf {
        self.dir.join(file_name(file_id))
    }

    fn file(&self) -> &Arc<dyn FileHandle> {
        self.file.as_ref().expect("journal writer has a file")
    }

    /// Loads the partial block at `end` of an existing file and appends a FileEnd record.
    fn seal_existing(&mut self, end: JournalPosition) -> std::io::Result<()> {
        let file = self.fs.open(&self.path(end.file_id), OpenOptions::EXISTING)?;
        let block = end.offset / DIRECT_IO_ALIGN as u64 * DIRECT_IO_ALIGN as u64;
        let mut tail = vec![0u8; (end.offset - block) as usize];
        file.read_exact_at(&mut tail, block)?;
        let direct = self.config.direct_io;
        self.file = Some(
            self.fs
                .open(&self.path(end.file_id), OpenOptions { direct, ..OpenOptions::EXISTING })?,
        );
        self.file_id = end.file_id;
        self.sync_mark = end.offset;
        self.block_offset = block;
        self.prealloc_end = file.len()?;
        self.buf.clear();
        self.buf.extend_from_slice(&tail);
        self.append_file_end(end.file_id + 1)
    }

    fn append_file_end(&mut self, next_file_id: u64) -> std::io::Result<()> {
        encode_record(self.file_id, &JournalRecord::FileEnd { next_file_id }, &mut self.buf);
        self.write_buf()?;
        self.file().sync_data()
    }

    fn open_new_file(&mut self, file_id: u64) -> std::io::Result<()> {
        let path = self.path(file_id);
        let direct = self.config.direct_io;
        let file = if self.pool.take(&path)? {
            self.fs.open(&path, OpenOptions { direct, ..OpenOptions::EXISTING })?
        } else {
            self.fs.open(&path, OpenOptions { direct, ..OpenOptions::CREATE_NEW })?
        };
        self.prealloc_end = file.len()? / DIRECT_IO_ALIGN as u64 * DIRECT_IO_ALIGN as u64;
        self.file = Some(file);
        self.file_id = file_id;
        self.sync_mark = 0;
        self.block_offset = 0;
        self.buf.clear();
        self.buf.extend_from_slice(&encode_header(file_id));
        self.write_buf()?;
        self.file().sync_data()?;
        self.fs.sync_dir(&self.dir)?;
        tracing::debug!(file_id, "journal file opened");
        Ok(())
    }

    /// Writes `buf` (padded) at `block_offset`, then keeps the last partial block in `buf`.
    fn write_buf(&mut self) -> std::io::Result<()> {
        let used = self.buf.len();
        self.buf.pad_to_alignment();
        let end = self.block_offset + self.buf.len() as u64;
        while self.config.prealloc_bytes > 0 && self.prealloc_end < end {
            let at = self.prealloc_end;
            self.file.as_ref().expect("file").write_all_at(self.zeros.as_slice(), at)?;
            self.prealloc_end += self.zeros.len() as u64;
        }
        self.file().write_all_at(self.buf.as_slice(), self.block_offset)?;
        let full = used / DIRECT_IO_ALIGN * DIRECT_IO_ALIGN;
        let tail = self.buf.as_slice()[full..used].to_vec();
        self.block_offset += full as u64;
        self.buf.clear();
        self.buf.extend_from_slice(&tail);
        Ok(())
    }

    /// Starts a group with a SyncMark when the durable end of the current file moved since
    /// the last one: replay tells damage from a torn tail by it (see `format`). Without
    /// `sync` nothing is durable, so nothing is claimed.
    fn write_sync_mark(&mut self, shared: &Shared) {
        let durable = *shared.written.lock().expect("journal mark lock");
        if self.config.sync && durable.file_id == self.file_id && durable.offset > self.sync_mark {
            let mark = JournalRecord::SyncMark { offset: durable.offset };
            encode_record(self.file_id, &mark, &mut self.buf);
            self.sync_mark = durable.offset;
        }
    }

    fn position(&self) -> JournalPosition {
        JournalPosition { file_id: self.file_id, offset: self.block_offset + self.buf.len() as u64 }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let next = self.file_id + 1;
        self.append_file_end(next)?;
        self.open_new_file(next)
    }

    fn release_before(&mut self, file_id: u64) {
        if self.located.is_some() {
            return; // single-write: the files are data; the storage deletes them
        }
        let names = match self.fs.list_dir(&self.dir) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "listing journal dir failed");
                return;
            }
        };
        for id in names.iter().filter_map(|n| parse_file_name(n)) {
            if id < file_id
                && id != self.file_id
                && let Err(e) = self.pool.give(id)
            {
                // Left under its journal name: the next release or restart tries again.
                tracing::warn!(file_id = id, error = %e, "recycling a journal file failed");
            }
        }
    }

    /// Writes groups until a shutdown request, handing each to the syncer; then fails what
    /// was queued after the shutdown.
    fn run(mut self, queue: &Queue, shared: &Shared, to_syncer: SyncSender<Written>) {
        loop {
            let (written, stop) =
                self.write_requests(queue.take_group(self.config.group_wait_max), shared);
            if !written.is_empty() {
                queue.handed_to_syncer();
                if let Err(std::sync::mpsc::SendError(w)) = to_syncer.send(written) {
                    // The syncer is gone only if it panicked.
                    let reason = PoisonReason::SyncerStopped;
                    fail_all(w.callbacks.into_iter().map(|(cb, _)| cb), &reason);
                    fail_all(w.barriers.into_iter(), &reason);
                }
            }
            if stop {
                break;
            }
        }
        queue.close();
        for request in queue.take_remaining() {
            if let Request::Append(_, Some(cb)) | Request::Barrier(cb) | Request::Rotate(cb) =
                request
            {
                cb(Err(StorageError::ShutDown))
            }
        }
    }

    /// Writes one group of requests: the batch for the syncer, and whether a shutdown
    /// request was among them.
    fn write_requests(&mut self, requests: Vec<Request>, shared: &Shared) -> (Written, bool) {
        let mut group: Vec<(JournalRecord, Option<JournalCallback>)> = Vec::new();
        let mut stop = false;
        let mut rotate = false;
        let mut barriers = Vec::new();
        for request in requests {
            match request {
                Request::Append(r, cb) => group.push((r, cb)),
                Request::Barrier(cb) => barriers.push(cb),
                Request::Rotate(cb) => {
                    rotate = true;
                    barriers.push(cb);
                }
                Request::ReleaseBefore(id) => self.release_before(id),
                Request::Shutdown => stop = true,
            }
        }
        let mut written = if group.is_empty() {
            Written::empty(self.file().clone(), self.position())
        } else {
            self.write_group(&mut group, shared)
        };
        if rotate
            && shared.poison.reason().is_none()
            && self.position().offset > HEADER_BYTES as u64
        {
            // The FileEnd record's sync makes everything before it durable, this group too.
            match self.rotate() {
                Ok(()) => {
                    written.end = self.position();
                    written.moved = true;
                }
                Err(e) => {
                    let reason =
                        PoisonReason::JournalWrite { file_id: self.file_id, error: e.to_string() };
                    tracing::error!(%reason, "journal rotation failed; journal poisoned");
                    shared.poison.set(reason);
                }
            }
        }
        // Everything queued before a barrier is in this batch or an earlier one.
        written.barriers = barriers;
        (written, stop)
    }

    /// Writes `group` (not synced) and returns it for the syncer. On a failed write, or on
    /// a poisoned journal, the group's callbacks fail here and an empty batch is returned.
    fn write_group(
        &mut self,
        group: &mut Vec<(JournalRecord, Option<JournalCallback>)>,
        shared: &Shared,
    ) -> Written {
        if let Some(reason) = shared.poison.reason() {
            fail_all(group.drain(..).filter_map(|(_, cb)| cb), &reason);
            return Written::empty(self.file().clone(), self.position());
        }
        if self.located.is_some() {
            // Single-write: the group's records are the data. Grouped by ledger (a stable
            // sort: each ledger's records keep their order; no order between ledgers is
            // promised), a catch-up read of one ledger finds runs of its entries instead of
            // every entry between other ledgers'. The group is written and synced as one,
            // and acknowledged only after that, so nothing else changes.
            group.sort_by_key(|(record, _)| record.ledger_id());
        }
        let mut callbacks = Vec::with_capacity(group.len());
        let mut located = Vec::new();
        let mut bytes = 0;
        let n_records = group.len();
        let result = (|| -> std::io::Result<()> {
            if self.position().offset >= self.config.file_bytes_max {
                self.rotate()?;
            }
            self.write_sync_mark(shared);
            for (record, cb) in group.drain(..) {
                bytes += record_len(&record);
                let start = self.position();
                encode_record(self.file_id, &record, &mut self.buf);
                if let Some(cb) = cb {
                    callbacks.push((cb, self.position()));
                }
                if self.located.is_some() && matches!(record, JournalRecord::Entry(_)) {
                    located.push((start, record));
                }
            }
            self.write_buf()
        })();
        if result.is_ok()
            && !located.is_empty()
            && let Some(hook) = &self.located
        {
            hook(located);
        }
        match result {
            Ok(()) => Written {
                file: self.file().clone(),
                end: self.position(),
                bytes,
                n_records,
                callbacks,
                barriers: Vec::new(),
                moved: false,
            },
            Err(e) => {
                let reason =
                    PoisonReason::JournalWrite { file_id: self.file_id, error: e.to_string() };
                tracing::error!(%reason, "journal write failed; journal poisoned");
                shared.poison.set(reason.clone());
                fail_all(callbacks.into_iter().map(|(cb, _)| cb), &reason);
                fail_all(group.drain(..).filter_map(|(_, cb)| cb), &reason);
                Written::empty(self.file().clone(), self.position())
            }
        }
    }
}

/// Written groups waiting for the syncer at most; the writer blocks beyond this.
const SYNC_PIPELINE_GROUPS: usize = 2;

/// A written, not yet synced batch handed from the writer to the syncer.
struct Written {
    file: Arc<dyn FileHandle>,
    /// Position just past the batch's last record.
    end: JournalPosition,
    bytes: usize,
    n_records: usize,
    callbacks: Vec<(JournalCallback, JournalPosition)>,
    /// Run once everything up to `end` is durable.
    barriers: Vec<JournalCallback>,
    /// A rotation moved `end` into a new file (everything before it is synced already).
    moved: bool,
}

impl Written {
    fn empty(file: Arc<dyn FileHandle>, end: JournalPosition) -> Written {
        Written {
            file,
            end,
            bytes: 0,
            n_records: 0,
            callbacks: Vec::new(),
            barriers: Vec::new(),
            moved: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.n_records == 0 && self.barriers.is_empty() && !self.moved
    }
}

fn fail_all(callbacks: impl Iterator<Item = JournalCallback>, reason: &PoisonReason) {
    for cb in callbacks {
        cb(Err(StorageError::Poisoned(reason.clone())));
    }
}

/// The syncer thread: until the writer hangs up, takes every batch written so far,
/// fdatasyncs once, and runs their callbacks in order.
fn run_syncer(from_writer: &Receiver<Written>, shared: &Shared, queue: &Queue, sync: bool) {
    while let Ok(first) = from_writer.recv() {
        let mut batch = vec![first];
        batch.extend(from_writer.try_iter());
        sync_written(batch, shared, sync, &|groups| queue.synced(groups));
    }
}

/// Syncs the written batches (in file order) once, tells `synced` how many it synced (the
/// writer may write the next group while the callbacks run), then runs their callbacks in
/// order.
fn sync_written(batch: Vec<Written>, shared: &Shared, sync: bool, synced: &dyn Fn(usize)) {
    use std::sync::atomic::Ordering::Relaxed;
    let bytes: usize = batch.iter().map(|w| w.bytes).sum();
    let n_records: usize = batch.iter().map(|w| w.n_records).sum();
    let mut result = match shared.poison.reason() {
        Some(reason) => Err(reason),
        None => Ok(()),
    };
    if result.is_ok() && sync && n_records > 0 {
        // Batches are in file order; a rotation between them synced the older file already,
        // so syncing each distinct file handle once is enough.
        let mut synced: Vec<&Arc<dyn FileHandle>> = Vec::new();
        for w in batch.iter().filter(|w| w.n_records > 0) {
            if synced.iter().any(|f| Arc::ptr_eq(f, &w.file)) {
                continue;
            }
            if let Err(e) = w.file.sync_data() {
                let reason =
                    PoisonReason::JournalSync { file_id: w.end.file_id, error: e.to_string() };
                tracing::error!(%reason, "journal fsync failed; journal poisoned");
                shared.poison.set(reason.clone());
                result = Err(reason);
                break;
            }
            synced.push(&w.file);
        }
    }
    let moved = batch.iter().any(|w| w.moved);
    if result.is_ok() && n_records > 0 {
        shared.stats.n_commits.fetch_add(1, Relaxed);
        shared.stats.bytes_committed.fetch_add(bytes as u64, Relaxed);
        shared.stats.n_records.fetch_add(n_records as u64, Relaxed);
    }
    if result.is_ok() && (n_records > 0 || moved) {
        let end = batch.last().expect("non-empty").end;
        let mut written = shared.written.lock().expect("mark lock");
        // D1: the durable mark (what a checkpoint may cover) only moves forward.
        assert!(end >= *written, "journal written mark {:?} -> {end:?} moves back", *written);
        *written = end;
        drop(written);
    }
    synced(batch.len());
    for w in batch {
        let end = w.end;
        for (cb, pos) in w.callbacks {
            cb(result.clone().map(|()| pos).map_err(StorageError::Poisoned));
        }
        for cb in w.barriers {
            cb(result.clone().map(|()| end).map_err(StorageError::Poisoned));
        }
    }
}
