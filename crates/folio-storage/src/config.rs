//! Storage configuration with defaults and validation. Every limit has a name and a unit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use folio_proto::InvalidConfig;
use folio_proto::clock::{Clock, SystemClock};
use folio_proto::limits::ENTRY_BYTES_MAX;

/// How the storage engine lays out, syncs, caches and rotates its files.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// Directory for journal files.
    pub journal_dir: PathBuf,
    /// Directory for entry logs and the index.
    pub ledger_dir: PathBuf,
    pub journal: JournalConfig,
    /// Where entries are written: once, to the journal's files (which are the data files),
    /// or twice, to the journal and then to entry logs (see [`StorageMode`]).
    pub mode: StorageMode,
    /// Total memory of the double-buffered write cache; each half gets half of it.
    /// 64 MiB by default: `folio bench bookie --quick` on this machine gave the same
    /// throughput at 32/64/256 MiB, but half-load p99 add latency of 29/57/197 ms, because
    /// a bigger half means a bigger flush competing with the journal's fdatasyncs.
    pub write_cache_bytes: usize,
    /// How long an add waits for write-cache space before failing with `Overloaded`.
    pub write_cache_throttle_max: Duration,
    /// Entry logs rotate when they reach this size.
    pub entry_log_bytes_max: u64,
    /// A flush fdatasyncs its entry log after every this many bytes (0 = once, at the end).
    /// Off by default: measured with `folio bench bookie`, syncing every 4 MiB while the
    /// journal fdatasyncs hundreds of times a second made one 128 MiB flush take 27 s.
    pub entry_log_sync_bytes: u64,
    /// One entry log per ledger instead of one shared log: a deleted ledger's space comes
    /// back without compaction. Off by default (many active ledgers mean many open files
    /// and syncs).
    pub entry_log_per_ledger: bool,
    /// Per-ledger mode: at most this many logs open; the least recently used is sealed.
    pub entry_log_per_ledger_open_max: usize,
    /// A log untouched this long is sealed (so GC can consider it): in per-ledger mode each
    /// ledger's log, in shared mode the one active log.
    pub entry_log_idle_rotation: Duration,
    /// Flush (and checkpoint) at least this often.
    pub flush_interval: Duration,
    /// Memory of the read-ahead cache.
    pub read_cache_bytes: usize,
    /// How many following entries a read miss fetches into the read-ahead cache, at most.
    pub read_ahead_entries: usize,
    /// How many bytes of following entries a read miss fetches, at most (and never more than
    /// half the read cache, so a window never evicts itself). 4 MiB by default: a window counted
    /// only in entries (100 batches of 1 MiB) was larger than the 64 MiB cache, evicted its
    /// own start and made a sequential reader re-read 100 MiB per entry.
    pub read_ahead_bytes: usize,
    /// How long a read waits for another read from disk that covers its entry (single
    /// flight) before it reads the entry itself: a bound on waiting, not a timeout of reads.
    pub read_wait_max: Duration,
    /// The time decisions read (idle entry logs); tests and the simulator pass their own.
    pub clock: Arc<dyn Clock>,
    /// Who runs the journal and the flusher: their own threads, or the caller (stepped).
    pub background: Background,
}

/// Where a storage writes an entry's bytes (config `storage.mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StorageMode {
    /// The journal takes every entry (group commit, fdatasync before the acknowledgement);
    /// a flush then writes the write cache sorted into entry logs, and journal files are
    /// recycled once a checkpoint covers them. Every byte reaches the disk twice. The mode
    /// of journal-less bookies.
    TwoWrite,
    /// The journal's files are the data files: an entry is written once, by the journal,
    /// and a flush only records where it is (the index points into journal files). Files
    /// a checkpoint covers are sealed and recorded, and GC deletes or compacts them like
    /// entry logs (compaction copies live entries into entry logs). The default: it takes
    /// twice the bytes per disk (`folio bench storage`), and its catch-up reads keep up.
    #[default]
    SingleWrite,
}

impl StorageMode {
    /// The name used in config files and bench output.
    pub fn name(self) -> &'static str {
        match self {
            StorageMode::TwoWrite => "two-write",
            StorageMode::SingleWrite => "single-write",
        }
    }

    /// Parses a name `name` gives back.
    pub fn parse(s: &str) -> Result<StorageMode, InvalidConfig> {
        match s {
            "two-write" => Ok(StorageMode::TwoWrite),
            "single-write" => Ok(StorageMode::SingleWrite),
            other => Err(InvalidConfig::new(format!(
                "storage.mode = {other:?}: expected \"single-write\" or \"two-write\""
            ))),
        }
    }
}

/// How the storage engine's background work (the journal's writer and syncer, the
/// flusher) runs.
#[derive(Debug, Clone, Default)]
pub enum Background {
    /// On threads of its own.
    #[default]
    Threads,
    /// On no thread of its own: the opener runs it with `Storage::stepper`, and
    /// is told by the [`Wake`] whenever a step has work. Nothing in the engine waits then
    /// (an add that finds the write cache full fails at once with `Overloaded`). The
    /// simulator's mode: one thread runs everything, in an order its seed fixes.
    Stepped(Wake),
}

/// Called when a stepped storage has background work (a record queued, a group written, a
/// flush requested).
#[derive(Clone)]
pub struct Wake(pub Arc<dyn Fn() + Send + Sync>);

impl Wake {
    /// Tells the opener there is work.
    pub fn wake(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Wake")
    }
}

/// How the journal syncs, groups commits and recycles its files.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// `false` skips the fdatasync before acknowledging (data can be lost on power loss).
    pub sync: bool,
    /// `false` is journal-less mode: only ledger meta records (master key, fence, explicit
    /// LAC) go to the journal; entries are acknowledged once in the write cache.
    pub write_data: bool,
    /// Longest time the first request of a group waits for others to join it while an
    /// earlier group is being synced (an idle journal writes a group at once).
    pub group_wait_max: Duration,
    /// A group is written as soon as it holds this many bytes.
    pub group_bytes_max: usize,
    /// Journal files rotate when they reach this size.
    pub file_bytes_max: u64,
    /// Files are zero-filled ahead of the writer in chunks of this size (0 = plain appends).
    /// Off by default: on this machine (`folio bench storage --quick`, same run) zero-filling
    /// a fresh file cost 0.52 vs 0.81 of the raw disk at 16 KiB entries, since every byte is
    /// written twice. Recycled files give the overwrite speed-up without that cost.
    pub prealloc_bytes: u64,
    /// Files kept to be written over (`journal::recycle`) instead of being deleted: two-write
    /// journal files a checkpoint covers, single-write data files GC is done with. They hold
    /// up to this many times `file_bytes_max` of disk.
    pub n_files_recycled_max: usize,
    /// Bounded request queue of the journal thread; submitters block when it is full.
    pub queue_depth: usize,
    /// Use O_DIRECT (with 4 KiB-aligned buffers) where the file system supports it.
    pub direct_io: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            sync: true,
            write_data: true,
            group_wait_max: Duration::from_millis(1),
            group_bytes_max: 512 * 1024,
            file_bytes_max: 512 * 1024 * 1024,
            prealloc_bytes: 0,
            n_files_recycled_max: 2,
            queue_depth: 10_000,
            direct_io: true,
        }
    }
}

impl StorageConfig {
    /// Defaults for a bookie keeping everything under `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> StorageConfig {
        let data_dir = data_dir.into();
        StorageConfig {
            journal_dir: data_dir.join("journal"),
            ledger_dir: data_dir.join("ledgers"),
            journal: JournalConfig::default(),
            mode: StorageMode::default(),
            write_cache_bytes: 64 * 1024 * 1024,
            write_cache_throttle_max: Duration::from_secs(10),
            entry_log_bytes_max: 1024 * 1024 * 1024,
            entry_log_sync_bytes: 0,
            entry_log_per_ledger: false,
            entry_log_per_ledger_open_max: 500,
            entry_log_idle_rotation: Duration::from_secs(300),
            flush_interval: Duration::from_secs(10),
            read_cache_bytes: 64 * 1024 * 1024,
            read_ahead_entries: 100,
            read_ahead_bytes: 4 * 1024 * 1024,
            read_wait_max: Duration::from_secs(1),
            clock: Arc::new(SystemClock::default()),
            background: Background::Threads,
        }
    }

    /// The wake of a stepped storage, if it is one.
    pub fn stepped(&self) -> Option<&Wake> {
        match &self.background {
            Background::Threads => None,
            Background::Stepped(w) => Some(w),
        }
    }

    /// Small sizes for tests: 1 MiB entry logs, 64 KiB journal files, a small cache.
    pub fn small_for_tests(data_dir: impl Into<PathBuf>) -> StorageConfig {
        let mut c = StorageConfig::new(data_dir);
        c.journal.file_bytes_max = 64 * 1024;
        c.journal.prealloc_bytes = 16 * 1024;
        c.write_cache_bytes = 2 * (ENTRY_BYTES_MAX + 4096);
        c.entry_log_bytes_max = 1024 * 1024;
        c.entry_log_sync_bytes = 256 * 1024;
        c.read_cache_bytes = 256 * 1024;
        c.read_ahead_entries = 8;
        c.read_ahead_bytes = 64 * 1024;
        c
    }

    /// Journal-less mode: only ledger meta records go to the journal, and entries are
    /// acknowledged once in the write cache. Two-write, so a flush puts them in entry logs
    /// (single-write keeps entries in the journal).
    pub fn make_journal_less(&mut self) {
        self.journal.write_data = false;
        self.mode = StorageMode::TwoWrite;
    }

    /// Rejects inconsistent settings with a message that names the setting.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let j = &self.journal;
        if self.write_cache_bytes / 2 < ENTRY_BYTES_MAX {
            return Err(InvalidConfig::new(format!(
                "write_cache_bytes = {} must be at least twice the largest entry ({ENTRY_BYTES_MAX})",
                self.write_cache_bytes
            )));
        }
        if self.entry_log_bytes_max < 1024 * 1024 {
            return Err(InvalidConfig::new(format!(
                "entry_log_bytes_max = {} is below 1 MiB",
                self.entry_log_bytes_max
            )));
        }
        if self.entry_log_bytes_max > u32::MAX as u64 * 4 {
            return Err(InvalidConfig::new("entry_log_bytes_max must stay below 16 GiB"));
        }
        if j.file_bytes_max < 64 * 1024 {
            return Err(InvalidConfig::new(format!(
                "journal.file_bytes_max = {} is below 64 KiB",
                j.file_bytes_max
            )));
        }
        if !j.prealloc_bytes.is_multiple_of(4096) {
            return Err(InvalidConfig::new(
                "journal.prealloc_bytes must be a multiple of 4096 (0 = off)",
            ));
        }
        if j.group_bytes_max == 0 || j.queue_depth == 0 {
            return Err(InvalidConfig::new(
                "journal.group_bytes_max and journal.queue_depth must be positive",
            ));
        }
        if j.group_wait_max > std::time::Duration::from_secs(1) {
            return Err(InvalidConfig::new(
                "journal.group_wait_max above 1 s would stall every add",
            ));
        }
        if self.entry_log_per_ledger && self.entry_log_per_ledger_open_max == 0 {
            return Err(InvalidConfig::new(
                "entry_log.open_max must be positive in per-ledger mode",
            ));
        }
        if self.mode == StorageMode::SingleWrite && !j.write_data {
            return Err(InvalidConfig::new(
                "journal-less mode (journal.write_data = false) needs storage.mode = \
                 \"two-write\": single-write (the default) keeps entries in the journal",
            ));
        }
        if self.flush_interval.is_zero() {
            return Err(InvalidConfig::new("flush_interval must be positive"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_settings_are_named() {
        StorageConfig::new("/x").validate().unwrap();
        StorageConfig::small_for_tests("/x").validate().unwrap();
        let mut c = StorageConfig::new("/x");
        c.write_cache_bytes = 1024;
        assert!(c.validate().unwrap_err().0.contains("write_cache_bytes"));
        let mut c = StorageConfig::new("/x");
        c.journal.prealloc_bytes = 100;
        assert!(c.validate().unwrap_err().0.contains("prealloc_bytes"));
    }
}
