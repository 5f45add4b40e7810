//! Helpers shared by the storage integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use bytes::Bytes;
use folio_proto::{Entry, EntryHeader};
use folio_storage::fs::FaultFs;
use folio_storage::index::MemKv;
use folio_storage::storage::MasterKey;
use folio_storage::{Result, Storage, StorageConfig, StorageMode};

pub const KEY: MasterKey = [7u8; 20];

pub fn entry(ledger_id: u64, entry_id: i64, payload: &[u8]) -> Entry {
    let h = EntryHeader { ledger_id, entry_id, last_add_confirmed: entry_id - 1, length: 0 };
    Entry::encode(h, payload)
}

/// Small files so rotations happen; no timed flushes (tests flush explicitly). The storage
/// mode is `FOLIO_STORAGE_MODE`'s (`two-write` when unset): the test runner runs these
/// suites once per mode.
pub fn config() -> StorageConfig {
    let mut c = StorageConfig::small_for_tests(Path::new("/data"));
    c.flush_interval = Duration::from_secs(3600);
    c.mode = mode_from_env();
    c
}

/// [`config`] in two-write mode, for what only that mode has (entry logs written by every
/// flush, journal-less mode, journal files released at checkpoints).
pub fn two_write_config() -> StorageConfig {
    StorageConfig { mode: StorageMode::TwoWrite, ..config() }
}

/// The file of a log id as the index names it: an entry log, or (single-write mode) a
/// journal file holding entries.
pub fn log_file(log_id: u64) -> std::path::PathBuf {
    match folio_storage::index::data_file_id(log_id) {
        Some(f) => Path::new("/data/journal").join(folio_storage::journal::format::file_name(f)),
        None => {
            Path::new("/data/ledgers/entrylogs").join(folio_storage::entry_log::file_name(log_id))
        }
    }
}

/// The log ids of the files on disk that hold entries: entry logs, and in single-write mode
/// the journal's files (every one of them, the one being written included).
pub fn log_ids_on_disk(fs: &FaultFs, mode: StorageMode) -> Vec<u64> {
    use folio_storage::fs::FileSystem;
    let logs = fs.list_dir(Path::new("/data/ledgers/entrylogs")).unwrap_or_default();
    let mut ids: Vec<u64> =
        logs.iter().filter_map(|n| folio_storage::entry_log::parse_file_name(n)).collect();
    if mode == StorageMode::SingleWrite {
        let journal = fs.list_dir(Path::new("/data/journal")).unwrap_or_default();
        ids.extend(
            journal
                .iter()
                .filter_map(|n| folio_storage::journal::format::parse_file_name(n))
                .map(folio_storage::index::data_file_log_id),
        );
    }
    ids.sort_unstable();
    ids
}

/// Bytes of the files [`log_ids_on_disk`] lists.
pub fn log_bytes_on_disk(fs: &FaultFs, mode: StorageMode) -> usize {
    log_ids_on_disk(fs, mode)
        .iter()
        .map(|id| fs.contents(&log_file(*id)).map_or(0, |c| c.len()))
        .sum()
}

/// The storage mode the suite runs in (`FOLIO_STORAGE_MODE`, the default mode when unset).
pub fn mode_from_env() -> StorageMode {
    match std::env::var("FOLIO_STORAGE_MODE") {
        Ok(m) => StorageMode::parse(&m).expect("FOLIO_STORAGE_MODE"),
        Err(_) => StorageMode::default(),
    }
}

pub fn open(fs: &FaultFs, kv: &MemKv, config: &StorageConfig) -> Result<Storage> {
    Storage::open(config.clone(), Arc::new(fs.mount()), Arc::new(kv.clone()))
}

/// Adds and returns a receiver for the acknowledgement.
pub fn add_async(
    s: &Storage,
    e: &Entry,
    key: &MasterKey,
    recovery: bool,
) -> Result<Receiver<Result<()>>> {
    let (tx, rx) = mpsc::sync_channel(1);
    s.add_entry(
        e.as_bytes().clone(),
        key,
        recovery,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )?;
    Ok(rx)
}

/// Adds and waits for the acknowledgement.
pub fn add(s: &Storage, e: &Entry) -> Result<()> {
    add_async(s, e, &KEY, false)?.recv().expect("callback runs")
}

pub fn fence(s: &Storage, ledger_id: u64, key: &MasterKey) -> Result<()> {
    let (tx, rx) = mpsc::sync_channel(1);
    s.fence(
        ledger_id,
        key,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )?;
    rx.recv().expect("callback runs")
}

pub fn set_lac(s: &Storage, ledger_id: u64, lac: i64) -> Result<()> {
    let (tx, rx) = mpsc::sync_channel(1);
    s.set_explicit_lac(
        ledger_id,
        &KEY,
        lac,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    )?;
    rx.recv().expect("callback runs")
}

pub fn raw(e: &Entry) -> Bytes {
    e.as_bytes().clone()
}

/// The seeds named by environment variable `var` (`a..b` or `a,b,c`), else `default`.
pub fn seeds_from_env(var: &str, default: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var(var) {
        Ok(s) => match s.split_once("..") {
            Some((a, b)) => (a.parse().unwrap()..b.parse().unwrap()).collect(),
            None => s.split(',').map(|x| x.trim().parse().unwrap()).collect(),
        },
        Err(_) => default.collect(),
    }
}

/// The last (highest-named) file of `dir` on `fs` whose name ends with `ext`.
pub fn last_file(fs: &FaultFs, dir: &Path, ext: &str) -> String {
    use folio_storage::fs::FileSystem;
    let mut names: Vec<String> =
        fs.list_dir(dir).unwrap().into_iter().filter(|n| n.ends_with(ext)).collect();
    names.sort();
    names.pop().unwrap_or_else(|| panic!("no {ext} file in {}", dir.display()))
}
