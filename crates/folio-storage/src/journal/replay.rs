//! Journal replay: read every record after the checkpoint, in order, stopping cleanly at a
//! torn or corrupt tail of the last file. Damage anywhere else means acknowledged records
//! may be gone, and replay refuses to go on, naming the file and offset.
//!
//! "The tail" is told from damage by the SyncMark records (see `format`): when the last
//! file's records stop at `p`, the bytes after `p` (up to [`DAMAGE_SCAN_BYTES_MAX`]) are
//! searched for a valid SyncMark of this file naming an offset beyond `p`. One means the
//! record at `p` had been durable and was damaged afterwards, with acknowledged records
//! after it; sealing the file at `p` would silently drop them.

use std::path::Path;

use super::format::{Decoded, HEADER_BYTES, JournalPosition, JournalRecord, StopReason};
use super::format::{decode_header, decode_record, file_name, parse_file_name};
use crate::error::{Result, StorageError};
use crate::fs::{FileHandle, FileSystem, OpenOptions};

/// What replay found.
#[derive(Debug, Default, Clone)]
pub struct ReplayReport {
    /// Where replay started (the checkpoint), if there was one.
    pub start: Option<JournalPosition>,
    pub files_read: Vec<u64>,
    /// Files wholly covered by the checkpoint: free to reuse or delete.
    pub files_before_mark: Vec<u64>,
    pub n_records: u64,
    /// End of the valid records of the last file, when that file is not sealed yet.
    pub end: Option<JournalPosition>,
    /// Where and why the last file's records ended, if not at a FileEnd record.
    pub stop: Option<(JournalPosition, StopReason)>,
    pub max_file_id: u64,
}

impl ReplayReport {
    /// The id the next journal file gets.
    pub fn next_file_id(&self) -> u64 {
        self.max_file_id + 1
    }
}

struct ChunkReader<'a> {
    file: &'a dyn FileHandle,
    len: u64,
    buf: Vec<u8>,
    buf_start: u64,
}

impl ChunkReader<'_> {
    /// The bytes from `pos` on (at least `min` of them unless the file ends first), and
    /// whether they reach the end of the file.
    fn window(&mut self, pos: u64, min: usize) -> std::io::Result<(&[u8], bool)> {
        let have_end = self.buf_start + self.buf.len() as u64;
        if pos < self.buf_start || pos + min as u64 > have_end {
            let want = min.max(READ_CHUNK_BYTES) as u64;
            let n = want.min(self.len.saturating_sub(pos)) as usize;
            self.buf.resize(n, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_start = pos;
        }
        let from = (pos - self.buf_start) as usize;
        let at_eof = self.buf_start + self.buf.len() as u64 >= self.len;
        Ok((&self.buf[from..], at_eof))
    }
}

/// What replay hands each record to: the record and where it starts.
pub type Apply<'a> = dyn FnMut(JournalRecord, JournalPosition) -> Result<()> + 'a;

/// Replays the journal in `dir` from `mark`, handing every record and where it starts to
/// `apply`, in order.
pub fn replay(
    fs: &dyn FileSystem,
    dir: &Path,
    mark: Option<JournalPosition>,
    apply: &mut Apply<'_>,
) -> Result<ReplayReport> {
    let mut report = ReplayReport { start: mark, ..ReplayReport::default() };
    if !fs.exists(dir) {
        return Ok(report);
    }
    let names = fs.list_dir(dir).map_err(|e| StorageError::io("listing journal dir", e))?;
    let mut ids: Vec<u64> = names.iter().filter_map(|n| parse_file_name(n)).collect();
    ids.sort_unstable();
    report.max_file_id = ids.last().copied().unwrap_or(0);
    let first = mark.map_or(0, |m| m.file_id);
    report.files_before_mark = ids.iter().copied().filter(|id| *id < first).collect();
    let to_read: Vec<u64> = ids.iter().copied().filter(|id| *id >= first).collect();
    if let Some(m) = mark
        && to_read.first() != Some(&m.file_id)
    {
        return Err(StorageError::corruption(
            dir.display().to_string(),
            format!("the checkpoint names journal file {} which is missing", file_name(m.file_id)),
        ));
    }
    for (i, id) in to_read.iter().copied().enumerate() {
        let is_last = i + 1 == to_read.len();
        let start = match mark {
            Some(m) if m.file_id == id => m.offset,
            _ => HEADER_BYTES as u64,
        };
        let sealed = replay_file(fs, dir, id, start, is_last, apply, &mut report)?;
        report.files_read.push(id);
        if sealed && is_last {
            report.end = None;
        }
    }
    Ok(report)
}

/// Replays one file; returns whether it ended with a FileEnd record.
fn replay_file(
    fs: &dyn FileSystem,
    dir: &Path,
    id: u64,
    start: u64,
    is_last: bool,
    apply: &mut Apply<'_>,
    report: &mut ReplayReport,
) -> Result<bool> {
    let path = dir.join(file_name(id));
    let ctx = || path.display().to_string();
    let file = fs.open(&path, OpenOptions::EXISTING).map_err(|e| StorageError::io(ctx(), e))?;
    let len = file.len().map_err(|e| StorageError::io(ctx(), e))?;
    let mut header = vec![0u8; HEADER_BYTES.min(len as usize)];
    file.read_exact_at(&mut header, 0).map_err(|e| StorageError::io(ctx(), e))?;
    match decode_header(&header) {
        Ok(h) if h == id => {}
        Ok(h) if is_last => {
            tracing::warn!(file = %ctx(), header_id = h, "last journal file was being recycled; ignoring it");
            return Ok(true);
        }
        Err(e) if is_last => {
            tracing::warn!(file = %ctx(), error = %e, "last journal file has no valid header; ignoring it");
            return Ok(true);
        }
        Ok(h) => return Err(StorageError::corruption(ctx(), format!("header names file {h}"))),
        Err(e) => return Err(StorageError::corruption(ctx(), e.to_string())),
    }
    let mut reader = ChunkReader { file: file.as_ref(), len, buf: Vec::new(), buf_start: 0 };
    let mut pos = start;
    let mut min = format::RECORD_HEADER_BYTES;
    loop {
        let (window, at_eof) = reader.window(pos, min).map_err(|e| StorageError::io(ctx(), e))?;
        match decode_record(id, window, at_eof) {
            Decoded::NeedBytes(n) => min = n,
            Decoded::Record(JournalRecord::FileEnd { .. }, _) => {
                report.n_records += 1;
                return Ok(true);
            }
            Decoded::Record(record, n) => {
                let at = JournalPosition { file_id: id, offset: pos };
                pos += n as u64;
                min = format::RECORD_HEADER_BYTES;
                report.n_records += 1;
                apply(record, at)?;
            }
            Decoded::Stop(reason) => {
                let at = JournalPosition { file_id: id, offset: pos };
                if !is_last {
                    return Err(StorageError::corruption(
                        ctx(),
                        format!(
                            "record at offset {pos} is damaged ({reason:?}) and later journal \
                                 files exist: acknowledged entries may be lost"
                        ),
                    ));
                }
                if let Some((at, mark)) = durable_mark_after(&mut reader, id, pos)
                    .map_err(|e| StorageError::io(ctx(), e))?
                {
                    return Err(StorageError::corruption(
                        ctx(),
                        format!(
                            "record at offset {pos} is damaged ({reason:?}), but the sync mark at \
                             offset {at} says everything before offset {mark} was durable: \
                             acknowledged records after the damage would be lost. Refusing to \
                             start; restore the disk, or format this bookie and re-replicate \
                             its ledgers from their other copies"
                        ),
                    ));
                }
                if reason != StopReason::Zeros {
                    tracing::warn!(file = %ctx(), offset = pos, ?reason, "journal replay stopped at a torn tail");
                }
                report.end = Some(at);
                report.stop = Some((at, reason));
                return Ok(false);
            }
        }
    }
}

/// Searches the bytes after `stop` (up to [`DAMAGE_SCAN_BYTES_MAX`]) for a valid SyncMark of
/// file `id` naming an offset beyond `stop`; returns its position and offset.
fn durable_mark_after(
    reader: &mut ChunkReader<'_>,
    id: u64,
    stop: u64,
) -> std::io::Result<Option<(u64, u64)>> {
    let end = reader.len.min(stop.saturating_add(DAMAGE_SCAN_BYTES_MAX));
    let header = format::RECORD_HEADER_BYTES as u64;
    let mut at = stop + 1;
    while at + header <= end {
        // Cheap filter first: a record header has a known kind and zero reserved bytes.
        let (window, _) = reader.window(at, format::RECORD_HEADER_BYTES)?;
        let scan_to = window.len().min((end - at) as usize);
        let skip = window[..scan_to]
            .windows(format::RECORD_HEADER_BYTES)
            .position(format::plausible_record_header);
        let Some(skip) = skip else {
            at += (scan_to.saturating_sub(format::RECORD_HEADER_BYTES) + 1) as u64;
            continue;
        };
        at += skip as u64;
        let mut need = format::RECORD_HEADER_BYTES;
        let decoded = loop {
            let (window, at_eof) = reader.window(at, need)?;
            match decode_record(id, window, at_eof) {
                Decoded::NeedBytes(n) => need = n,
                other => break other,
            }
        };
        match decoded {
            Decoded::Record(JournalRecord::SyncMark { offset }, _) if offset > stop => {
                return Ok(Some((at, offset)));
            }
            Decoded::Record(_, n) => at += n as u64,
            _ => at += 1,
        }
    }
    Ok(None)
}

use super::format;
pub use crate::limits::DAMAGE_SCAN_BYTES_MAX;
use crate::limits::READ_CHUNK_BYTES;
