//! What a bookie keeps on disk, as deletion tests count it.
//!
//! In single-write mode the journal's files are the data files, but not every byte in the
//! journal dir is data: files GC is done with wait in the recycle pool (`<id>.recycled`),
//! and the file being written may be a recycled one, as long as ever whatever it holds.
//! Both are bounded (`journal.files_recycled_max`, `journal.file_bytes_max` plus one group),
//! so a test that data comes back counts the journal files before the current one, and
//! bounds the other two on their own.

use std::path::Path;

/// Which files of a bookie's journal dir to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalFiles {
    /// Every journal file (in single-write mode, the data files).
    All,
    /// Every journal file but the newest, the one being written.
    Sealed,
    /// The newest journal file: the one being written.
    Current,
    /// Files waiting in the recycle pool.
    Recycled,
}

impl JournalFiles {
    /// Bytes (file lengths) of these files in journal dir `dir`; 0 when it does not exist.
    pub fn bytes(self, dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        let mut journal = Vec::new();
        let mut recycled = 0;
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            let len = e.metadata().map_or(0, |m| m.len());
            if let Some(id) = folio_bookie::journal::format::parse_file_name(&name) {
                journal.push((id, len));
            } else if folio_bookie::journal::is_recycled_name(&name) {
                recycled += len;
            }
        }
        journal.sort_unstable();
        let current = journal.last().map_or(0, |(_, len)| *len);
        let all: u64 = journal.iter().map(|(_, len)| len).sum();
        match self {
            JournalFiles::All => all,
            JournalFiles::Sealed => all - current,
            JournalFiles::Current => current,
            JournalFiles::Recycled => recycled,
        }
    }
}

/// Bytes of every file under `dir`, recursively; 0 when it does not exist.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
