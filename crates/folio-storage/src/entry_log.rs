//! Entry logs: append-only files holding entries sorted by (ledger, entry) per flush.
//!
//! ```text
//! file   = header (64 bytes) ‖ frame* ‖ [ledgers-map frame ‖ seal frame]
//! header: 0 magic "FOLIOELG" | 8 version u32 = 1 | 12 reserved u32 | 16 log_id u64
//!         | 24 crc32c(bytes[0,24)) u32 | zeros to 64
//! frames (see `crate::frame`, checksum bound to the log id):
//!   kind 1 entry        body = the encoded entry, exactly as the client sent it
//!   kind 2 ledgers map  body = n u32 ‖ n × (ledger_id u64, bytes u64)
//!   kind 3 seal         body = map_offset u64 ‖ n_entries u64
//! ```
//!
//! A log is written by one flush at a time and synced at the end of each flush, before the
//! index that points into it is committed. At rotation the ledgers map and the seal frame
//! are appended and synced, and the log's state in the index becomes `sealed` in the same
//! index batch as the entries' locations. The index, not a log-id threshold, is the record
//! of which logs are flushed and rotated.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use folio_proto::limits::ENTRY_BYTES_MAX;
use folio_proto::{Entry, EntryId, LedgerId};

use crate::error::{Result, StorageError};
use crate::frame::{self, FRAME_HEADER_BYTES, Frame, StopReason};
use crate::fs::{AlignedBuf, FileHandle, FileSystem, OpenOptions};
use crate::index::{EntryLocation, EntryLogState};
use crate::limits::{FRAME_BODY_BYTES_MAX, WRITE_BUFFER_BYTES};

/// Bytes of an entry log's file header (magic, version, log id).
pub const HEADER_BYTES: u64 = 64;
const MAGIC: &[u8; 8] = b"FOLIOELG";
const VERSION: u32 = 1;
/// The same kind as a journal entry record: single-write mode reads those as entries.
const KIND_ENTRY: u8 = crate::frame::KIND_ENTRY;
const KIND_LEDGERS_MAP: u8 = 2;
const KIND_SEAL: u8 = 3;

/// The file name of entry log `log_id` (16 hex digits, `.log`).
pub fn file_name(log_id: u64) -> String {
    format!("{log_id:016x}.log")
}

/// The log id of an entry log's file name, if it is one.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".log")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn encode_header(log_id: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&log_id.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn check_header(h: &[u8], log_id: u64) -> std::result::Result<(), String> {
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&h[24..28]);
    if &h[0..8] != MAGIC || u32::from_le_bytes(crc) != crc32c::crc32c(&h[0..24]) {
        return Err("bad entry log header".into());
    }
    if h[8..12] != VERSION.to_le_bytes() {
        return Err("unsupported entry log version".into());
    }
    if u64_at(h, 16) != log_id {
        return Err(format!("header names log {}", u64_at(h, 16)));
    }
    Ok(())
}

/// Appends entries to one log. Owned by the flush path.
#[derive(Debug)]
pub struct EntryLogWriter {
    log_id: u64,
    path: PathBuf,
    file: Arc<dyn FileHandle>,
    /// File offset of `buf`'s first byte.
    buf_offset: u64,
    buf: AlignedBuf,
    ledgers: BTreeMap<LedgerId, u64>,
    n_entries: u64,
    /// Bytes written to the file since its last fdatasync.
    unsynced_bytes: u64,
    /// The durable end last recorded in the index (see [`EntryLogWriter::durable_state`]).
    recorded_end: u64,
}

impl EntryLogWriter {
    /// Creates a new log file and makes its name durable.
    pub fn create(fs: &dyn FileSystem, dir: &Path, log_id: u64) -> Result<EntryLogWriter> {
        let path = dir.join(file_name(log_id));
        let ctx = || format!("creating entry log {}", path.display());
        let file =
            fs.open(&path, OpenOptions::CREATE_NEW).map_err(|e| StorageError::io(ctx(), e))?;
        fs.sync_dir(dir).map_err(|e| StorageError::io(ctx(), e))?;
        let mut buf = AlignedBuf::with_capacity(WRITE_BUFFER_BYTES + ENTRY_BYTES_MAX);
        buf.extend_from_slice(&encode_header(log_id));
        Ok(EntryLogWriter {
            log_id,
            path,
            file,
            buf_offset: 0,
            buf,
            ledgers: BTreeMap::new(),
            n_entries: 0,
            unsynced_bytes: 0,
            recorded_end: 0,
        })
    }

    /// Reopens a log whose valid records end at `end` (found by [`scan`]) to seal it.
    pub fn reopen_for_seal(
        fs: &dyn FileSystem,
        dir: &Path,
        scan: &ScanResult,
    ) -> Result<EntryLogWriter> {
        let path = dir.join(file_name(scan.log_id));
        let file = fs
            .open(&path, OpenOptions::EXISTING)
            .map_err(|e| StorageError::io(path.display().to_string(), e))?;
        Ok(EntryLogWriter {
            log_id: scan.log_id,
            path,
            file,
            buf_offset: scan.valid_end,
            buf: AlignedBuf::with_capacity(64 * 1024),
            ledgers: scan.ledgers.clone(),
            n_entries: scan.n_entries,
            unsynced_bytes: 0,
            recorded_end: scan.valid_end,
        })
    }

    /// The log's id.
    pub fn log_id(&self) -> u64 {
        self.log_id
    }

    /// Whether no entry was appended yet.
    pub fn is_empty(&self) -> bool {
        self.n_entries == 0
    }

    /// Bytes written so far (buffered or not).
    pub fn size(&self) -> u64 {
        self.buf_offset + self.buf.len() as u64
    }

    /// Appends `entry` as a frame (buffered) and returns where it will be.
    pub fn append(&mut self, entry: &Entry) -> Result<EntryLocation> {
        let offset = self.size();
        frame::encode(self.log_id, KIND_ENTRY, entry.as_bytes(), &mut self.buf);
        *self.ledgers.entry(entry.ledger_id()).or_default() += entry.encoded_len() as u64;
        self.n_entries += 1;
        if self.buf.len() >= WRITE_BUFFER_BYTES {
            self.write_out()?;
        }
        Ok(EntryLocation { log_id: self.log_id, offset, len: entry.encoded_len() as u32 })
    }

    fn write_out(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.file
            .write_all_at(self.buf.as_slice(), self.buf_offset)
            .map_err(|e| StorageError::io(format!("writing {}", self.path.display()), e))?;
        // Writeback starts now, in steps of this size, instead of piling up as dirty pages
        // that one fdatasync at the end of the flush pushes out at once while the
        // journal's fdatasyncs queue behind it. A hint: a failure here changes nothing.
        if let Err(e) = self.file.start_writeback(self.buf_offset, self.buf.len() as u64) {
            tracing::debug!(path = %self.path.display(), error = %e, "starting writeback failed");
        }
        self.buf_offset += self.buf.len() as u64;
        self.unsynced_bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes out and fdatasyncs once `sync_bytes` have been written since the last sync;
    /// keeps a flush's writeback in small steps. Not a durability point by itself.
    pub fn sync_if_due(&mut self, sync_bytes: u64) -> Result<()> {
        if sync_bytes > 0 && self.unsynced_bytes + self.buf.len() as u64 >= sync_bytes {
            self.sync()?;
        }
        Ok(())
    }

    /// Writes everything buffered and fsyncs. After this the index may point into the log.
    pub fn sync(&mut self) -> Result<()> {
        self.write_out()?;
        self.file
            .sync_data()
            .map_err(|e| StorageError::io(format!("fsync {}", self.path.display()), e))?;
        self.unsynced_bytes = 0;
        Ok(())
    }

    /// After [`EntryLogWriter::sync`]: the active state to record in the index with the
    /// entries' locations, when the durable end moved since the last one recorded. Recovery
    /// of an unsealed log checks its frames reach this end: a bad frame before it is damage
    /// to synced entries, not a torn tail.
    pub fn durable_state(&mut self) -> Option<EntryLogState> {
        debug_assert!(self.buf.is_empty() && self.unsynced_bytes == 0, "call after sync");
        if self.buf_offset <= self.recorded_end {
            return None;
        }
        self.recorded_end = self.buf_offset;
        Some(EntryLogState::active_up_to(self.buf_offset))
    }

    /// Appends the ledgers map and the seal frame and syncs. The returned state goes to the
    /// index; the writer must not be used afterwards.
    pub fn seal(mut self) -> Result<EntryLogState> {
        let map_offset = self.size();
        let mut map = Vec::with_capacity(4 + self.ledgers.len() * 16);
        map.extend_from_slice(&(self.ledgers.len() as u32).to_le_bytes());
        for (l, n) in &self.ledgers {
            map.extend_from_slice(&l.to_le_bytes());
            map.extend_from_slice(&n.to_le_bytes());
        }
        frame::encode(self.log_id, KIND_LEDGERS_MAP, &map, &mut self.buf);
        let mut seal = map_offset.to_le_bytes().to_vec();
        seal.extend_from_slice(&self.n_entries.to_le_bytes());
        frame::encode(self.log_id, KIND_SEAL, &seal, &mut self.buf);
        self.sync()?;
        tracing::debug!(
            log_id = self.log_id,
            size = self.size(),
            ledgers = self.ledgers.len(),
            "entry log sealed"
        );
        Ok(EntryLogState {
            sealed: true,
            size_bytes: self.size(),
            ledgers: self.ledgers.into_iter().collect(),
        })
    }
}

/// Reads entries from logs, keeping one open handle per log.
#[derive(Debug)]
pub struct EntryLogReader {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    /// Single-write mode: the journal's dir, where the data files are (their log ids have
    /// `index::DATA_FILE_BIT` set; see `storage::data_files`).
    journal_dir: Option<PathBuf>,
    handles: Mutex<HashMap<u64, Arc<dyn FileHandle>>>,
    /// Bytes read from entry-log files, for metrics (read amplification).
    bytes_read: std::sync::atomic::AtomicU64,
}

impl EntryLogReader {
    /// A reader of the entry logs in `dir` (and in single-write mode of the data files in
    /// `journal_dir`), opening files on first use.
    pub fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        journal_dir: Option<PathBuf>,
    ) -> EntryLogReader {
        EntryLogReader {
            fs,
            dir,
            journal_dir,
            handles: Mutex::new(HashMap::new()),
            bytes_read: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Bytes read from entry-log files so far (entries and read-ahead spans).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn handle(&self, log_id: u64) -> Result<Arc<dyn FileHandle>> {
        let mut handles = self.handles.lock().expect("entry log handles lock");
        if let Some(h) = handles.get(&log_id) {
            return Ok(h.clone());
        }
        let path = match (crate::index::data_file_id(log_id), &self.journal_dir) {
            (Some(f), Some(dir)) => dir.join(crate::journal::format::file_name(f)),
            (Some(f), None) => {
                return Err(StorageError::corruption(
                    "index",
                    format!("a location names journal file {f} but this is a two-write storage"),
                ));
            }
            (None, _) => self.dir.join(file_name(log_id)),
        };
        let h = self
            .fs
            .open(&path, OpenOptions::EXISTING)
            .map_err(|e| StorageError::io(path.display().to_string(), e))?;
        handles.insert(log_id, h.clone());
        Ok(h)
    }

    /// Forgets the handle of a log (before it is deleted).
    pub fn forget(&self, log_id: u64) {
        self.handles.lock().expect("entry log handles lock").remove(&log_id);
    }

    /// Reads the entry at `loc` and checks it is `ledger_id/entry_id`, intact.
    pub fn read(
        &self,
        loc: EntryLocation,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> Result<Entry> {
        let len = FRAME_HEADER_BYTES + loc.len as usize;
        let buf = self.read_bytes(loc.log_id, loc.offset, len)?;
        let (e, total) = decode_entry_frame(loc.log_id, &buf, 0, loc.offset)?;
        match e {
            e if total == len && e.ledger_id() == ledger_id && e.entry_id() == entry_id => Ok(e),
            _ => Err(StorageError::corruption(
                log_name(loc.log_id),
                format!("offset {} does not hold entry {ledger_id}/{entry_id}", loc.offset),
            )),
        }
    }

    /// Reads `len` bytes at `offset` once and the entry frames starting at `frames` (offsets
    /// into those bytes, ascending; read-ahead: contiguous in an entry log, with other
    /// ledgers' entries between them in a single-write data file). Every frame must verify;
    /// the entries share the one buffer read (no copy per entry).
    pub fn read_frames(
        &self,
        log_id: u64,
        offset: u64,
        len: usize,
        frames: &[u64],
    ) -> Result<Vec<Entry>> {
        let buf = self.read_bytes(log_id, offset, len)?;
        frames
            .iter()
            .map(|at| decode_entry_frame(log_id, &buf, *at as usize, offset).map(|(e, _)| e))
            .collect()
    }

    /// Asks the kernel to read `len` bytes at `offset` of a log into the page cache in the
    /// background (the next read-ahead window of a sequential reader). Best effort.
    pub fn prefetch(&self, log_id: u64, offset: u64, len: u64) {
        if let Ok(h) = self.handle(log_id)
            && let Err(e) = h.will_need(offset, len)
        {
            tracing::debug!(error = %e, log_id, "prefetch hint failed");
        }
    }

    fn read_bytes(&self, log_id: u64, offset: u64, len: usize) -> Result<Bytes> {
        let mut buf = vec![0u8; len];
        self.handle(log_id)?
            .read_exact_at(&mut buf, offset)
            .map_err(|e| StorageError::io(log_name(log_id), e))?;
        self.bytes_read.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(Bytes::from(buf))
    }
}

/// The entry of the frame at `at` in `buf` (read from `offset` of the log), and the frame's
/// length; a frame that is not a valid entry is corruption.
fn decode_entry_frame(log_id: u64, buf: &Bytes, at: usize, offset: u64) -> Result<(Entry, usize)> {
    let ctx = || log_name(log_id);
    let frame = match buf.get(at..) {
        Some(rest) => frame::decode(crc_id(log_id), rest, true, FRAME_BODY_BYTES_MAX),
        None => Frame::Stop(StopReason::Truncated),
    };
    match frame {
        Frame::Valid { kind: KIND_ENTRY, body, total } => {
            let body = buf.slice(at + FRAME_HEADER_BYTES..at + FRAME_HEADER_BYTES + body.len());
            let e =
                Entry::decode(body).map_err(|e| StorageError::corruption(ctx(), e.to_string()))?;
            Ok((e, total))
        }
        other => Err(StorageError::corruption(
            ctx(),
            format!("at offset {}: {other:?}", offset + at as u64),
        )),
    }
}

/// The id a log's frame checksums are bound to: the entry log's, or the journal file's.
fn crc_id(log_id: u64) -> u64 {
    crate::index::data_file_id(log_id).unwrap_or(log_id)
}

/// A log's name for messages.
fn log_name(log_id: u64) -> String {
    match crate::index::data_file_id(log_id) {
        Some(f) => format!("data file {}", crate::journal::format::file_name(f)),
        None => format!("entry log {}", file_name(log_id)),
    }
}

/// What a full scan of a log found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanResult {
    pub log_id: u64,
    /// Offset just past the last valid entry frame.
    pub valid_end: u64,
    pub n_entries: u64,
    pub ledgers: BTreeMap<LedgerId, u64>,
    /// Whether a seal frame was found (the log is complete).
    pub sealed: bool,
    /// Why the scan stopped, when not at a seal frame.
    pub stop: Option<StopReason>,
}

/// Scans a whole log, calling `visit(entry, location)` for each valid entry.
pub fn scan(
    fs: &dyn FileSystem,
    dir: &Path,
    log_id: u64,
    visit: &mut dyn FnMut(&Entry, EntryLocation),
) -> Result<ScanResult> {
    let path = dir.join(file_name(log_id));
    let ctx = || path.display().to_string();
    let file = fs.open(&path, OpenOptions::EXISTING).map_err(|e| StorageError::io(ctx(), e))?;
    let len = file.len().map_err(|e| StorageError::io(ctx(), e))?;
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0).map_err(|e| StorageError::io(ctx(), e))?;
    let mut result = ScanResult {
        log_id,
        valid_end: HEADER_BYTES,
        n_entries: 0,
        ledgers: BTreeMap::new(),
        sealed: false,
        stop: None,
    };
    if bytes.len() < HEADER_BYTES as usize {
        result.stop = Some(StopReason::Truncated);
        result.valid_end = 0;
        return Ok(result);
    }
    check_header(&bytes[..HEADER_BYTES as usize], log_id)
        .map_err(|d| StorageError::corruption(ctx(), d))?;
    let mut at = HEADER_BYTES as usize;
    loop {
        match frame::decode(log_id, &bytes[at..], true, FRAME_BODY_BYTES_MAX) {
            Frame::Valid { kind: KIND_ENTRY, body, total } => {
                let Ok(e) = Entry::decode(Bytes::copy_from_slice(body)) else {
                    result.stop = Some(StopReason::Malformed);
                    return Ok(result);
                };
                *result.ledgers.entry(e.ledger_id()).or_default() += e.encoded_len() as u64;
                result.n_entries += 1;
                visit(&e, EntryLocation { log_id, offset: at as u64, len: body.len() as u32 });
                at += total;
                result.valid_end = at as u64;
            }
            Frame::Valid { kind: KIND_LEDGERS_MAP, total, .. } => at += total,
            Frame::Valid { kind: KIND_SEAL, .. } => {
                result.sealed = true;
                return Ok(result);
            }
            Frame::Valid { .. } => {
                result.stop = Some(StopReason::Malformed);
                return Ok(result);
            }
            Frame::NeedBytes(_) => unreachable!("at_eof is set"),
            Frame::Stop(reason) => {
                result.stop = Some(reason);
                return Ok(result);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{CrashPlan, FaultFs};
    use folio_proto::EntryHeader;

    fn entry(l: u64, e: i64, n: usize) -> Entry {
        Entry::encode(
            EntryHeader { ledger_id: l, entry_id: e, last_add_confirmed: e - 1, length: 0 },
            &vec![e as u8; n],
        )
    }

    #[test]
    fn written_entries_read_back_and_a_sealed_log_scans_complete() {
        let fs = FaultFs::new();
        let dir = Path::new("/logs");
        let mut w = EntryLogWriter::create(&fs, dir, 7).unwrap();
        let mut locs = Vec::new();
        for e in 0..50 {
            locs.push(w.append(&entry(1 + e as u64 % 3, e, 100 + e as usize)).unwrap());
        }
        w.sync().unwrap();
        let state = w.seal().unwrap();
        assert!(state.sealed);
        assert_eq!(state.ledgers.len(), 3);
        let r = EntryLogReader::new(Arc::new(fs.clone()), dir.to_path_buf(), None);
        for (e, loc) in locs.iter().enumerate() {
            let got = r.read(*loc, 1 + e as u64 % 3, e as i64).unwrap();
            assert_eq!(got, entry(1 + e as u64 % 3, e as i64, 100 + e));
        }
        assert!(r.read(locs[1], 1, 0).is_err(), "a location holding another entry is corruption");
        let mut n = 0;
        let s = scan(&fs, dir, 7, &mut |_, _| n += 1).unwrap();
        assert!(s.sealed);
        assert_eq!(n, 50);
        assert_eq!(s.ledgers.values().sum::<u64>(), state.ledgers.iter().map(|x| x.1).sum::<u64>());
    }

    #[test]
    fn a_torn_unsynced_tail_scans_up_to_the_last_synced_entry() {
        for seed in 0..20 {
            let fs = FaultFs::new();
            let dir = Path::new("/logs");
            let mut w = EntryLogWriter::create(&fs, dir, 1).unwrap();
            for e in 0..10 {
                w.append(&entry(1, e, 700)).unwrap();
            }
            w.sync().unwrap();
            for e in 10..20 {
                w.append(&entry(1, e, 700)).unwrap();
            }
            w.write_out().unwrap();
            fs.crash(CrashPlan::Random { seed });
            let s = scan(&fs, dir, 1, &mut |_, _| {}).unwrap();
            assert!(s.n_entries >= 10, "seed {seed}: synced entries lost");
            assert!(!s.sealed);
        }
    }
}

#[cfg(test)]
mod real_fs_tests {
    //! The writer on the real file system, where each write-out also starts its writeback.
    use super::*;
    use crate::fs::RealFs;
    use folio_proto::EntryHeader;

    fn entry(e: i64) -> Entry {
        // Sizes that never line up with a page.
        let n = 1000 + (e as usize * 37) % 3001;
        Entry::encode(
            EntryHeader { ledger_id: 9, entry_id: e, last_add_confirmed: e - 1, length: 0 },
            &vec![e as u8; n],
        )
    }

    fn file_len(dir: &Path, log_id: u64) -> u64 {
        std::fs::metadata(dir.join(file_name(log_id))).unwrap().len()
    }

    #[test]
    fn entries_written_in_steps_with_writeback_read_back_and_seal() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut w = EntryLogWriter::create(&RealFs, dir, 3).unwrap();
        let mut locs = Vec::new();
        // ~700 KB: several 256 KiB write-outs.
        for e in 0..300 {
            locs.push(w.append(&entry(e)).unwrap());
            if e % 97 == 0 {
                w.sync().unwrap(); // a flush ending mid-step, then more entries
            }
        }
        w.sync().unwrap();
        assert_eq!(file_len(dir, 3), w.size());
        let reader = EntryLogReader::new(Arc::new(RealFs), dir.to_path_buf(), None);
        for (e, loc) in locs.iter().enumerate() {
            assert_eq!(reader.read(*loc, 9, e as i64).unwrap(), entry(e as i64));
        }
        // An unsealed log (a crash before the seal) scans to its last entry.
        let mut n = 0;
        let s = scan(&RealFs, dir, 3, &mut |_, _| n += 1).unwrap();
        assert_eq!((n, s.sealed, s.valid_end), (300, false, w.size()));
        let size = w.size();
        let state = w.seal().unwrap();
        assert!(state.sealed);
        assert!(state.size_bytes > size);
        assert_eq!(file_len(dir, 3), state.size_bytes);
        let s = scan(&RealFs, dir, 3, &mut |_, _| {}).unwrap();
        assert_eq!((s.n_entries, s.sealed), (300, true));
        reader.forget(3);
        for (e, loc) in locs.iter().enumerate().step_by(17) {
            assert_eq!(reader.read(*loc, 9, e as i64).unwrap(), entry(e as i64));
        }
    }

    #[test]
    fn a_log_reopened_after_a_crash_seals_at_its_last_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut w = EntryLogWriter::create(&RealFs, dir, 4).unwrap();
        for e in 0..40 {
            w.append(&entry(e)).unwrap();
        }
        w.sync().unwrap();
        drop(w); // the process dies: no seal
        let s = scan(&RealFs, dir, 4, &mut |_, _| {}).unwrap();
        assert_eq!((s.n_entries, s.sealed), (40, false));
        let state = EntryLogWriter::reopen_for_seal(&RealFs, dir, &s).unwrap().seal().unwrap();
        assert_eq!(file_len(dir, 4), state.size_bytes);
        let s = scan(&RealFs, dir, 4, &mut |_, _| {}).unwrap();
        assert_eq!((s.n_entries, s.sealed), (40, true));
    }
}
