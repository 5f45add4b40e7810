//! The key-value engine under the embedded store: fjall on disk, or memory (the
//! simulator's, which keeps it across the store's restarts). Three keyspaces ([`Space`]); a
//! [`Batch`] is applied whole or not at all.
//!
//! A batch committed with `sync` is durable when `commit` returns; one committed without is
//! visible to [`Engine::get`] and [`Engine::range`] at once (the writer's own reads, under
//! the store's write lock) but durable only after the next [`Engine::sync`]. Readers outside
//! that lock use [`Engine::get_durable`], which sees what the last sync (or synced commit)
//! made durable and nothing after it: no reader acts on a write a crash could still undo.
//!
//! **Architecture invariant:** the only module of the store that knows fjall's API (the
//! store's `mod.rs` knows only `Engine`, `Batch` and `Space`).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use crate::store::{MetaError, Result};

/// The store's three keyspaces (see the layout in the store's docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Space {
    Kv,
    Events,
    Sys,
}

/// Writes to apply together.
#[derive(Debug, Default)]
pub(super) struct Batch {
    ops: Vec<(Space, Vec<u8>, Option<Vec<u8>>)>,
}

impl Batch {
    pub(super) fn insert(&mut self, space: Space, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.ops.push((space, key.as_ref().to_vec(), Some(value.as_ref().to_vec())));
    }

    pub(super) fn remove(&mut self, space: Space, key: impl AsRef<[u8]>) {
        self.ops.push((space, key.as_ref().to_vec(), None));
    }
}

/// A stored value.
pub(super) enum Value {
    Fjall(fjall::Slice),
    Memory(Vec<u8>),
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Value::Fjall(s) => s,
            Value::Memory(v) => v,
        }
    }
}

/// The memory engine: the three keyspaces as sorted maps. Commits are atomic (one lock)
/// and survive the store's drop, as synced batches survive a crash.
#[derive(Debug, Default)]
pub struct MemoryEngine {
    /// Copy on write: a snapshot shares a keyspace's map until the next commit changes it.
    spaces: Mutex<[Arc<Map>; 3]>,
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> Arc<MemoryEngine> {
        Arc::new(MemoryEngine::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, [Arc<Map>; 3]> {
        self.spaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub(super) struct FjallEngine {
    db: Database,
    spaces: [Keyspace; 3],
    /// A snapshot of what is durable: taken after every sync (see the module doc).
    durable: Mutex<fjall::Snapshot>,
}

/// fjall's engine or memory's.
pub(super) enum Engine {
    Fjall(Box<FjallEngine>),
    Memory(Arc<MemoryEngine>),
}

fn io(e: fjall::Error) -> MetaError {
    MetaError::io("reading or writing fjall", e)
}

/// Key-value pairs of one keyspace from `start` on while `more(key)` holds.
pub(super) type Pairs = Vec<(Vec<u8>, Value)>;

impl Engine {
    /// Opens fjall's database in `dir`.
    pub(super) fn open_fjall(dir: &Path) -> Result<Engine> {
        let opening = |e: fjall::Error| {
            MetaError::io(format!("opening the metadata store in {}", dir.display()), e)
        };
        let db = Database::builder(dir).open().map_err(opening)?;
        let space = |name: &str| db.keyspace(name, KeyspaceCreateOptions::default).map_err(opening);
        let spaces = [space("kv")?, space("events")?, space("sys")?];
        let durable = Mutex::new(db.snapshot());
        Ok(Engine::Fjall(Box::new(FjallEngine { db, spaces, durable })))
    }

    fn keyspace(f: &FjallEngine, space: Space) -> &Keyspace {
        &f.spaces[space as usize]
    }

    pub(super) fn get(&self, space: Space, key: &[u8]) -> Result<Option<Value>> {
        match self {
            Engine::Fjall(f) => {
                Ok(Engine::keyspace(f, space).get(key).map_err(io)?.map(Value::Fjall))
            }
            Engine::Memory(m) => Ok(m.lock()[space as usize].get(key).cloned().map(Value::Memory)),
        }
    }

    /// `key` of `space` as the last sync left it (see the module doc).
    pub(super) fn get_durable(&self, space: Space, key: &[u8]) -> Result<Option<Value>> {
        match self {
            Engine::Fjall(f) => {
                let snapshot =
                    f.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                let value = snapshot.get(Engine::keyspace(f, space), key).map_err(io)?;
                Ok(value.map(Value::Fjall))
            }
            // Every commit of the memory engine is as durable as it gets.
            Engine::Memory(_) => self.get(space, key),
        }
    }

    /// The pairs of `space` from `start` on, in key order, while `more` holds for the key,
    /// at most `limit` of them.
    pub(super) fn range(
        &self,
        space: Space,
        start: &[u8],
        limit: usize,
        more: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Pairs> {
        let mut out = Vec::new();
        match self {
            Engine::Fjall(f) => {
                for guard in Engine::keyspace(f, space).range(start.to_vec()..) {
                    let (k, v) = guard.into_inner().map_err(io)?;
                    if !more(&k) || out.len() == limit {
                        break;
                    }
                    out.push((k.to_vec(), Value::Fjall(v)));
                }
            }
            Engine::Memory(m) => {
                let spaces = m.lock();
                for (k, v) in spaces[space as usize].range(start.to_vec()..) {
                    if !more(k) || out.len() == limit {
                        break;
                    }
                    out.push((k.clone(), Value::Memory(v.clone())));
                }
            }
        }
        Ok(out)
    }

    /// A consistent view of `space` to read after the caller's lock is released: fjall's
    /// snapshot, or a copy of the memory engine's map.
    pub(super) fn snapshot(&self, space: Space) -> Snapshot<'_> {
        match self {
            Engine::Fjall(f) => Snapshot::Fjall(f.db.snapshot(), f, space),
            Engine::Memory(m) => Snapshot::Memory(Arc::clone(&m.lock()[space as usize])),
        }
    }

    /// Applies `batch`; with `sync`, durably before returning (see the module doc).
    pub(super) fn commit(&self, batch: Batch, sync: bool) -> Result<()> {
        match self {
            Engine::Fjall(f) => {
                let mode = if sync { PersistMode::SyncData } else { PersistMode::Buffer };
                let mut b = f.db.batch().durability(Some(mode));
                for (space, k, v) in batch.ops {
                    let ks = Engine::keyspace(f, space);
                    match v {
                        Some(v) => b.insert(ks, k, v),
                        None => b.remove(ks, k),
                    }
                }
                b.commit().map_err(io)?;
                if sync {
                    f.publish_durable();
                }
                Ok(())
            }
            Engine::Memory(m) => {
                let mut spaces = m.lock();
                for (space, k, v) in batch.ops {
                    let map = Arc::make_mut(&mut spaces[space as usize]);
                    match v {
                        Some(v) => map.insert(k, v),
                        None => map.remove(&k),
                    };
                }
                Ok(())
            }
        }
    }

    /// Makes every batch committed so far durable, and visible to `get_durable`. A failed
    /// sync leaves fjall refusing every later write (it poisons itself: what the failed
    /// fsync covered cannot be known, so nothing after it may be acknowledged).
    pub(super) fn sync(&self) -> Result<()> {
        if let Engine::Fjall(f) = self {
            f.db.persist(PersistMode::SyncData).map_err(io)?;
            f.publish_durable();
        }
        Ok(())
    }

    /// Makes everything durable (at a clean close).
    pub(super) fn persist(&self) {
        if let Engine::Fjall(f) = self {
            let _ = f.db.persist(PersistMode::SyncAll);
        }
    }
}

impl FjallEngine {
    /// Everything committed so far is durable: readers may see it.
    fn publish_durable(&self) {
        let now = self.db.snapshot();
        *self.durable.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
    }
}

/// See [`Engine::snapshot`].
pub(super) enum Snapshot<'a> {
    Fjall(fjall::Snapshot, &'a FjallEngine, Space),
    Memory(Arc<Map>),
}

impl Snapshot<'_> {
    /// [`Engine::range`] on the snapshot's keyspace.
    pub(super) fn range(
        &self,
        start: &[u8],
        limit: usize,
        more: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Pairs> {
        let mut out = Vec::new();
        match self {
            Snapshot::Memory(map) => {
                for (k, v) in map.range(start.to_vec()..) {
                    if !more(k) || out.len() == limit {
                        break;
                    }
                    out.push((k.clone(), Value::Memory(v.clone())));
                }
            }
            Snapshot::Fjall(snap, f, space) => {
                for guard in snap.range(Engine::keyspace(f, *space), start.to_vec()..) {
                    let (k, v) = guard.into_inner().map_err(io)?;
                    if !more(&k) || out.len() == limit {
                        break;
                    }
                    out.push((k.to_vec(), Value::Fjall(v)));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsynced_commit_is_seen_by_the_writer_and_by_durable_readers_only_after_the_sync() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = Engine::open_fjall(tmp.path()).unwrap();
        let mut batch = Batch::default();
        batch.insert(Space::Kv, "k", "synced");
        engine.commit(batch, true).unwrap();
        assert_eq!(&*engine.get_durable(Space::Kv, b"k").unwrap().unwrap(), b"synced");

        let mut batch = Batch::default();
        batch.insert(Space::Kv, "k", "buffered");
        engine.commit(batch, false).unwrap();
        assert_eq!(&*engine.get(Space::Kv, b"k").unwrap().unwrap(), b"buffered");
        assert_eq!(
            &*engine.get_durable(Space::Kv, b"k").unwrap().unwrap(),
            b"synced",
            "a reader outside the write lock saw a write a crash could undo"
        );
        engine.sync().unwrap();
        assert_eq!(&*engine.get_durable(Space::Kv, b"k").unwrap().unwrap(), b"buffered");
    }
}
