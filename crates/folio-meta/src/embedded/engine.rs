//! The key-value engine under the embedded store: fjall on disk (every batch synced), or
//! memory (the simulator's, which keeps it across the store's restarts). Three keyspaces
//! ([`Space`]); a [`Batch`] is applied whole or not at all.
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
}

/// fjall's engine or memory's.
pub(super) enum Engine {
    Fjall(Box<FjallEngine>),
    Memory(Arc<MemoryEngine>),
}

fn io(e: fjall::Error) -> MetaError {
    MetaError::Io(e.to_string())
}

/// Key-value pairs of one keyspace from `start` on while `more(key)` holds.
pub(super) type Pairs = Vec<(Vec<u8>, Value)>;

impl Engine {
    /// Opens fjall's database in `dir`.
    pub(super) fn open_fjall(dir: &Path) -> Result<Engine> {
        let opening = |e: fjall::Error| {
            MetaError::Io(format!("opening the metadata store in {}: {e}", dir.display()))
        };
        let db = Database::builder(dir).open().map_err(opening)?;
        let space = |name: &str| db.keyspace(name, KeyspaceCreateOptions::default).map_err(opening);
        let spaces = [space("kv")?, space("events")?, space("sys")?];
        Ok(Engine::Fjall(Box::new(FjallEngine { db, spaces })))
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

    pub(super) fn commit(&self, batch: Batch) -> Result<()> {
        match self {
            Engine::Fjall(f) => {
                let mut b = f.db.batch().durability(Some(PersistMode::SyncData));
                for (space, k, v) in batch.ops {
                    let ks = Engine::keyspace(f, space);
                    match v {
                        Some(v) => b.insert(ks, k, v),
                        None => b.remove(ks, k),
                    }
                }
                b.commit().map_err(io)
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

    /// Makes everything durable (at a clean close).
    pub(super) fn persist(&self) {
        if let Engine::Fjall(f) = self {
            let _ = f.db.persist(PersistMode::SyncAll);
        }
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
