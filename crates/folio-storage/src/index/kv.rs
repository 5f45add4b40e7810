//! The key-value engine behind the index, as a small trait: the production engine is fjall
//! (pure Rust LSM), tests use [`MemKv`]. Every commit is atomic and durable when it returns.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::error::{Result, StorageError};

/// The tables of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// (ledger, entry) → entry-log location.
    Locations = 0,
    /// ledger → ledger state.
    Ledgers = 1,
    /// storage-wide records: flags, entry-log states, id counters.
    Meta = 2,
}

const TABLES: [Table; 3] = [Table::Locations, Table::Ledgers, Table::Meta];

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Locations => "locations",
            Table::Ledgers => "ledgers",
            Table::Meta => "meta",
        }
    }
}

/// A key and its value.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// Puts and deletes applied together.
#[derive(Debug, Default)]
pub struct KvBatch {
    ops: Vec<(Table, Vec<u8>, Option<Vec<u8>>)>,
}

impl KvBatch {
    /// Adds a put of `key` in `table`.
    pub fn put(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push((table, key, Some(value)));
    }
    /// Adds a delete of `key` in `table`.
    pub fn delete(&mut self, table: Table, key: Vec<u8>) {
        self.ops.push((table, key, None));
    }
    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// Whether the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The index's key-value store: tables of ordered keys, atomic batches, durable commits.
pub trait KvStore: Send + Sync + Debug {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Pairs with `start <= key < end`, ascending, at most `limit` of them.
    fn range(&self, table: Table, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KvPair>>;
    /// The greatest pair with `start <= key < end`.
    fn last_in_range(&self, table: Table, start: &[u8], end: &[u8]) -> Result<Option<KvPair>>;
    /// Applies `batch` atomically; durable when this returns.
    fn commit(&self, batch: KvBatch) -> Result<()>;
}

/// fjall, one keyspace per table.
pub struct FjallKv {
    db: fjall::Database,
    tables: Vec<fjall::Keyspace>,
}

impl Debug for FjallKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FjallKv")
    }
}

/// fjall's failure while `doing` something.
fn fjall_err(doing: &'static str) -> impl Fn(fjall::Error) -> StorageError {
    move |source| StorageError::Index { doing: doing.into(), source }
}

/// fjall's block cache (its default is 32 MiB).
pub const INDEX_CACHE_BYTES: u64 = 16 * 1024 * 1024;
/// Each table's memtable is sealed (and flushed to disk) at this size (fjall's default is
/// 64 MiB). With 1 KiB entries the locations table takes ~100k keys a second; at 64 MiB
/// the active and sealed memtables waiting for their flush held over 300 MiB
/// (`folio bench bookie`, full run).
pub const INDEX_MEMTABLE_BYTES: u64 = 8 * 1024 * 1024;

impl FjallKv {
    /// Opens (or creates) the index's fjall keyspace at `path`.
    pub fn open(path: &Path) -> Result<FjallKv> {
        folio_fjall::check_versions(path)?;
        let opening = |e: fjall::Error| StorageError::Index {
            doing: format!("opening {}", path.display()),
            source: e,
        };
        let db =
            fjall::Database::builder(path).cache_size(INDEX_CACHE_BYTES).open().map_err(opening)?;
        let mut tables = Vec::new();
        for t in TABLES {
            let options =
                || fjall::KeyspaceCreateOptions::default().max_memtable_size(INDEX_MEMTABLE_BYTES);
            tables.push(db.keyspace(t.name(), options).map_err(opening)?);
        }
        Ok(FjallKv { db, tables })
    }
}

impl KvStore for FjallKv {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tables[table as usize].get(key).map_err(fjall_err("reading"))?.map(|v| v.to_vec()))
    }

    fn range(&self, table: Table, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        let mut out = Vec::new();
        for guard in self.tables[table as usize].range(start..end).take(limit) {
            let (k, v) = guard.into_inner().map_err(fjall_err("reading"))?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn last_in_range(&self, table: Table, start: &[u8], end: &[u8]) -> Result<Option<KvPair>> {
        match self.tables[table as usize].range(start..end).next_back() {
            None => Ok(None),
            Some(guard) => {
                let (k, v) = guard.into_inner().map_err(fjall_err("reading"))?;
                Ok(Some((k.to_vec(), v.to_vec())))
            }
        }
    }

    fn commit(&self, batch: KvBatch) -> Result<()> {
        let mut b = self.db.batch().durability(Some(fjall::PersistMode::SyncData));
        for (table, key, value) in batch.ops {
            let ks = &self.tables[table as usize];
            match value {
                Some(v) => b.insert(ks, key, v),
                None => b.remove(ks, key),
            }
        }
        b.commit().map_err(fjall_err("committing a batch"))
    }
}

/// In-memory engine for tests. Clones share state, so a test can "reopen" after a crash by
/// handing the same `MemKv` to a new `Storage`: every committed batch is there, as with a
/// durable engine. `fail_commits` injects failures.
#[derive(Debug, Clone, Default)]
pub struct MemKv {
    inner: Arc<Mutex<MemKvState>>,
}

#[derive(Debug, Default)]
struct MemKvState {
    tables: [BTreeMap<Vec<u8>, Vec<u8>>; 3],
    fail_commits: bool,
}

impl MemKv {
    /// An empty in-memory store.
    pub fn new() -> MemKv {
        MemKv::default()
    }
    /// Makes every commit fail (or succeed again), for tests.
    pub fn fail_commits(&self, fail: bool) {
        self.inner.lock().expect("memkv lock").fail_commits = fail;
    }
}

impl KvStore for MemKv {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.inner.lock().expect("memkv lock").tables[table as usize].get(key).cloned())
    }

    fn range(&self, table: Table, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        if start >= end {
            return Ok(Vec::new());
        }
        let s = self.inner.lock().expect("memkv lock");
        Ok(s.tables[table as usize]
            .range(start.to_vec()..end.to_vec())
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn last_in_range(&self, table: Table, start: &[u8], end: &[u8]) -> Result<Option<KvPair>> {
        if start >= end {
            return Ok(None);
        }
        let s = self.inner.lock().expect("memkv lock");
        Ok(s.tables[table as usize]
            .range(start.to_vec()..end.to_vec())
            .next_back()
            .map(|(k, v)| (k.clone(), v.clone())))
    }

    fn commit(&self, batch: KvBatch) -> Result<()> {
        let mut s = self.inner.lock().expect("memkv lock");
        if s.fail_commits {
            let injected = std::io::Error::other("injected commit failure");
            let doing = "committing a batch".into();
            return Err(StorageError::Index { doing, source: fjall::Error::Io(injected) });
        }
        for (table, key, value) in batch.ops {
            match value {
                Some(v) => s.tables[table as usize].insert(key, v),
                None => s.tables[table as usize].remove(&key),
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(kv: &dyn KvStore) {
        let mut b = KvBatch::default();
        for i in 0u8..10 {
            b.put(Table::Locations, vec![1, i], vec![i]);
        }
        b.put(Table::Meta, b"k".to_vec(), b"v".to_vec());
        kv.commit(b).unwrap();
        assert_eq!(kv.get(Table::Meta, b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(kv.get(Table::Ledgers, b"k").unwrap(), None, "tables are separate");
        let r = kv.range(Table::Locations, &[1, 3], &[1, 7], 3).unwrap();
        assert_eq!(r.iter().map(|(k, _)| k[1]).collect::<Vec<_>>(), vec![3, 4, 5]);
        let last = kv.last_in_range(Table::Locations, &[1], &[2]).unwrap().unwrap();
        assert_eq!(last.0, vec![1, 9]);
        let mut b = KvBatch::default();
        b.delete(Table::Locations, vec![1, 9]);
        kv.commit(b).unwrap();
        let last = kv.last_in_range(Table::Locations, &[1], &[2]).unwrap().unwrap();
        assert_eq!(last.0, vec![1, 8]);
        assert!(kv.last_in_range(Table::Locations, &[2], &[3]).unwrap().is_none());
    }

    #[test]
    fn mem_kv_behaves() {
        exercise(&MemKv::new());
    }

    #[test]
    fn fjall_kv_behaves_and_keeps_commits_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = FjallKv::open(dir.path()).unwrap();
            exercise(&kv);
        }
        let kv = FjallKv::open(dir.path()).unwrap();
        assert_eq!(kv.get(Table::Meta, b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(kv.range(Table::Locations, &[1], &[2], 100).unwrap().len(), 9);
    }
}
