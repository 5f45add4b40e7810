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

/// The storage mode the suite runs in (`FOLIO_STORAGE_MODE`, `two-write` when unset).
pub fn mode_from_env() -> StorageMode {
    match std::env::var("FOLIO_STORAGE_MODE") {
        Ok(m) => StorageMode::parse(&m).expect("FOLIO_STORAGE_MODE"),
        Err(_) => StorageMode::TwoWrite,
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
