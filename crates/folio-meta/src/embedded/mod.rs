//! The embedded backend: one process, persistent on fjall, every commit fsynced.
//!
//! Layout (three fjall keyspaces):
//! ```text
//! kv      key bytes           → create_rev u64 ‖ mod_rev u64 ‖ lease i64 (0 = none) ‖ value
//! events  revision u64 BE     → n u32 ‖ n × (kind u8 ‖ key_len u32 ‖ key ‖ value_len u32 ‖ value)
//! sys     "revision"          → u64      the last committed revision
//!         "compacted"         → u64      events at or below it are gone
//!         "lease_next"        → i64
//!         "lease/" ‖ id BE    → ttl_ms u64
//!         "id/" ‖ name        → u64      the last id handed out
//!         "commits"           → u64      batches committed (every write and compaction)
//! ```
//! Beside the database, the file `commits` holds the commit count twice (16 bytes),
//! rewritten after every commit without an fsync. fjall drops the batches after one it
//! cannot parse in its journal, silently; a store that opens with fewer commits than that
//! file saw lost acknowledged writes, and refuses to open (a stale file, after a power
//! loss, is behind, never ahead: it is written after the commit is durable).
//! (all values little-endian). A write — put, delete, transaction, lease revoke — is one
//! fjall batch: it is all there after a crash or not at all, and it is durable (fdatasync)
//! before it is answered or seen by any reader. Transactions commit in groups that share
//! one fdatasync (`group`); readers outside the write lock read the last durable snapshot.
//! Watch history is kept for the last `events_retained` revisions; a watch from before
//! that, or a watcher whose queue overflows, gets `Compacted`.
//!
//! Leases live in memory with their deadlines on the injected [`Clock`]; their TTLs are
//! persisted, and on reopen every lease gets a full TTL again (as etcd does after a leader
//! change). [`EmbeddedStore::expire_due`] expires leases; a background thread calls it every
//! `lease_check_interval`, and tests call it directly after advancing a `ManualClock`.
//!
//! Under the simulator the store runs on the memory engine ([`MemoryEngine`], kept across
//! restarts as synced batches are), without its expiry thread (`lease_expiry_thread`):
//! the simulator calls `expire_due` on simulated time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

mod engine;
mod group;
pub use engine::MemoryEngine;
use engine::{Batch, Engine, Space};

use crate::clock::{Clock, SystemClock};
pub use crate::limits::EMBEDDED_TXN_OPS_MAX as TXN_OPS_MAX;
use crate::store::*;

/// How the embedded store keeps history, queues watches, expires leases and bounds transactions.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Revisions of watch history kept on disk.
    pub events_retained: u64,
    /// Batches a watcher may have queued before it is cut off with `Compacted`.
    pub watch_queue_depth: usize,
    pub lease_check_interval: Duration,
    /// Compares plus operations one transaction may hold, at most [`TXN_OPS_MAX`]. Tests
    /// set etcd's [`crate::ETCD_TXN_OPS_MAX`], so batching code runs as it does on etcd.
    pub txn_ops_max: usize,
    /// Whether a thread expires leases every `lease_check_interval` (the simulator calls
    /// [`EmbeddedStore::expire_due`] itself instead).
    pub lease_expiry_thread: bool,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            events_retained: 100_000,
            watch_queue_depth: 4096,
            lease_check_interval: Duration::from_millis(100),
            txn_ops_max: TXN_OPS_MAX,
            lease_expiry_thread: true,
        }
    }
}

#[derive(Debug)]
struct Lease {
    ttl_ms: u64,
    deadline_ms: u64,
    keys: BTreeSet<String>,
}

#[derive(Debug)]
struct Watcher {
    prefix: String,
    tx: mpsc::Sender<Result<Vec<WatchEvent>>>,
    end_reason: Arc<Mutex<Option<MetaError>>>,
}

#[derive(Debug)]
struct State {
    /// Batches committed (sys "commits").
    commits: u64,
    revision: Revision,
    compacted: Revision,
    leases: BTreeMap<LeaseId, Lease>,
    lease_next: LeaseId,
    watchers: Vec<Watcher>,
    /// Inside a group commit (`group`): the events of its writes, told to the watchers
    /// once the group's sync has made them durable. `None`: every write syncs and tells
    /// its own.
    deferred: Option<Vec<Vec<WatchEvent>>>,
}

struct Inner {
    engine: Engine,
    config: EmbeddedConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// The `commits` file (see the module doc); none on the memory engine.
    commits_file: Option<Mutex<std::fs::File>>,
    /// Transactions waiting to be committed together (see `group`).
    queue: group::Queue,
}

/// The file beside the database that counts commits (see the module doc).
const COMMITS_FILE: &str = "commits";

/// The count the `commits` file holds, if it is whole.
fn read_commits_file(path: &Path) -> Option<u64> {
    let b = std::fs::read(path).ok()?;
    let (a, c) = (u64::from_le_bytes(b.get(0..8)?.try_into().ok()?), b.get(8..16)?);
    (c == a.to_le_bytes() && b.len() == 16).then_some(a)
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").field("config", &self.config).finish_non_exhaustive()
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    stop: Arc<AtomicBool>,
    expiry: Option<JoinHandle<()>>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[allow(clippy::big_endian_bytes)] // event keys sort numerically
fn event_key(rev: Revision) -> [u8; 8] {
    rev.to_be_bytes()
}

#[allow(clippy::big_endian_bytes)]
fn lease_key(id: LeaseId) -> Vec<u8> {
    let mut k = b"lease/".to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn encode_record(
    create: Revision,
    modified: Revision,
    lease: Option<LeaseId>,
    value: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + value.len());
    v.extend_from_slice(&create.to_le_bytes());
    v.extend_from_slice(&modified.to_le_bytes());
    v.extend_from_slice(&lease.unwrap_or(0).to_le_bytes());
    v.extend_from_slice(value);
    v
}

fn decode_record(key: &str, b: &[u8]) -> Result<Versioned> {
    if b.len() < 24 {
        return Err(MetaError::Corrupt { key: key.into(), detail: format!("{} bytes", b.len()) });
    }
    let lease = u64_at(b, 16) as i64;
    Ok(Versioned {
        key: key.to_string(),
        value: Bytes::copy_from_slice(&b[24..]),
        version: u64_at(b, 8),
        create_revision: u64_at(b, 0),
        lease: (lease != 0).then_some(lease),
    })
}

fn encode_events(events: &[WatchEvent]) -> Vec<u8> {
    let mut v = (events.len() as u32).to_le_bytes().to_vec();
    for e in events {
        v.push(match e.kind {
            EventKind::Put => 1,
            EventKind::Delete => 2,
        });
        v.extend_from_slice(&(e.key.len() as u32).to_le_bytes());
        v.extend_from_slice(e.key.as_bytes());
        v.extend_from_slice(&(e.value.len() as u32).to_le_bytes());
        v.extend_from_slice(&e.value);
    }
    v
}

fn decode_events(rev: Revision, b: &[u8]) -> Result<Vec<WatchEvent>> {
    let bad = || MetaError::Corrupt { key: format!("events/{rev}"), detail: "truncated".into() };
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let s = b.get(*at..*at + n).ok_or_else(bad)?;
        *at += n;
        Ok(s)
    };
    let u32_of = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize;
    let mut at = 0;
    let n = u32_of(take(&mut at, 4)?);
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let kind = match take(&mut at, 1)?[0] {
            1 => EventKind::Put,
            2 => EventKind::Delete,
            _ => return Err(bad()),
        };
        let klen = u32_of(take(&mut at, 4)?);
        let key = String::from_utf8(take(&mut at, klen)?.to_vec()).map_err(|_| bad())?;
        let vlen = u32_of(take(&mut at, 4)?);
        let value = Bytes::copy_from_slice(take(&mut at, vlen)?);
        out.push(WatchEvent { kind, key, value, revision: rev });
    }
    Ok(out)
}

fn check_config(config: &EmbeddedConfig) -> Result<()> {
    if !(1..=TXN_OPS_MAX).contains(&config.txn_ops_max) {
        return Err(MetaError::InvalidArgument(format!(
            "txn_ops_max must be 1..={TXN_OPS_MAX}, not {}",
            config.txn_ops_max
        )));
    }
    Ok(())
}

/// A u64 of the `sys` keyspace (0 when absent).
fn stored_u64(engine: &Engine, key: &str) -> Result<u64> {
    Ok(engine
        .get(Space::Sys, key.as_bytes())?
        .filter(|v| v.len() == 8)
        .map_or(0, |v| u64_at(&v, 0)))
}

/// The persisted leases, each with a full TTL from `now_ms`, and the keys they hold.
fn load_leases(engine: &Engine, now_ms: u64) -> Result<BTreeMap<LeaseId, Lease>> {
    let mut leases = BTreeMap::new();
    let prefix = b"lease/";
    for (k, v) in engine.range(Space::Sys, prefix, usize::MAX, &|k| k.starts_with(prefix))? {
        if k.len() != 14 || v.len() != 8 {
            return Err(MetaError::Corrupt {
                key: "sys/lease".into(),
                detail: "bad record".into(),
            });
        }
        let id = i64::from_le_bytes(k[6..14].try_into().expect("8 bytes")).swap_bytes();
        let ttl_ms = u64_at(&v, 0);
        leases.insert(id, Lease { ttl_ms, deadline_ms: now_ms + ttl_ms, keys: BTreeSet::new() });
    }
    for (k, v) in engine.range(Space::Kv, b"", usize::MAX, &|_| true)? {
        let key = String::from_utf8_lossy(&k).into_owned();
        if let Some(lease) = decode_record(&key, &v)?.lease
            && let Some(l) = leases.get_mut(&lease)
        {
            l.keys.insert(key);
        }
    }
    Ok(leases)
}

impl EmbeddedStore {
    /// Opens (or creates) a store in `dir` on the real clock.
    pub fn open(dir: &Path) -> Result<EmbeddedStore> {
        EmbeddedStore::open_with(dir, EmbeddedConfig::default(), Arc::new(SystemClock::default()))
    }

    /// Opens (or creates) a store in `dir` with `config`, reading lease time from `clock`.
    pub fn open_with(
        dir: &Path,
        config: EmbeddedConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<EmbeddedStore> {
        check_config(&config)?;
        crate::fjall_files::check_versions(dir).map_err(|e| MetaError::Corrupt {
            key: format!("(the store's files in {})", dir.display()),
            detail: e.to_string(),
        })?;
        let engine = Engine::open_fjall(dir)?;
        let commits = stored_u64(&engine, "commits")?;
        let commits_path = dir.join(COMMITS_FILE);
        if let Some(seen) = read_commits_file(&commits_path)
            && seen > commits
        {
            return Err(MetaError::Corrupt {
                key: format!("(the store's files in {})", dir.display()),
                detail: format!(
                    "the store in {} lost acknowledged writes: it holds {commits} commits, {} saw {seen} (its journal, {}/*.jnl, is damaged); restore it from a backup",
                    dir.display(),
                    commits_path.display(),
                    dir.display()
                ),
            });
        }
        let commits_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&commits_path)
            .map_err(|e| MetaError::io(format!("opening {}", commits_path.display()), e))?;
        EmbeddedStore::start(engine, Some(commits_file), config, clock)
    }

    /// Opens a store on the memory engine `engine` (the simulator's): what earlier stores on
    /// it committed is there, as after a crash.
    pub fn open_memory(
        engine: Arc<MemoryEngine>,
        config: EmbeddedConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<EmbeddedStore> {
        check_config(&config)?;
        EmbeddedStore::start(Engine::Memory(engine), None, config, clock)
    }

    /// Loads the state from `engine` and starts the expiry thread (if configured).
    fn start(
        engine: Engine,
        commits_file: Option<std::fs::File>,
        config: EmbeddedConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<EmbeddedStore> {
        let commits = stored_u64(&engine, "commits")?;
        let revision = stored_u64(&engine, "revision")?;
        let compacted = stored_u64(&engine, "compacted")?;
        let lease_next = (stored_u64(&engine, "lease_next")? as i64).max(1);
        let leases = load_leases(&engine, clock.now_ms())?;
        let state = State {
            commits,
            revision,
            compacted,
            leases,
            lease_next,
            watchers: Vec::new(),
            deferred: None,
        };
        let inner = Arc::new(Inner {
            engine,
            config,
            clock,
            state: Mutex::new(state),
            commits_file: commits_file.map(Mutex::new),
            queue: group::Queue::default(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let expiry = if inner.config.lease_expiry_thread {
            let (thread_inner, thread_stop) = (inner.clone(), stop.clone());
            let thread = std::thread::Builder::new()
                .name("folio-meta-leases".into())
                .spawn(move || {
                    while !thread_stop.load(Ordering::SeqCst) {
                        std::thread::sleep(thread_inner.config.lease_check_interval);
                        if let Err(e) = thread_inner.expire_due() {
                            tracing::warn!(error = %e, "lease expiry failed");
                        }
                    }
                })
                .map_err(|e| MetaError::io("starting the lease expiry thread", e))?;
            Some(thread)
        } else {
            None
        };
        tracing::debug!(revision, compacted, "embedded metadata store opened");
        Ok(EmbeddedStore { inner, stop, expiry })
    }

    /// Drops watch history up to and including `revision` (like etcd's compaction).
    pub fn compact(&self, revision: Revision) -> Result<()> {
        let mut st = self.inner.lock()?;
        let upto = revision.min(st.revision);
        if upto <= st.compacted {
            return Ok(());
        }
        let mut batch = Batch::default();
        for rev in st.compacted + 1..=upto {
            batch.remove(Space::Events, event_key(rev));
        }
        batch.insert(Space::Sys, "compacted", upto.to_le_bytes());
        self.inner.commit(&mut st, batch)?;
        st.compacted = upto;
        Ok(())
    }

    /// Expires every lease whose deadline has passed on the store's clock; returns how many.
    pub fn expire_due(&self) -> Result<usize> {
        self.inner.expire_due()
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.expiry.take() {
            let _ = t.join();
        }
        self.inner.engine.persist();
    }
}

impl Inner {
    /// Commits `batch` with the commit count; outside a group commit durably, and then
    /// records the count in the `commits` file (a group does both at its end).
    fn commit(&self, st: &mut State, mut batch: Batch) -> Result<()> {
        let n = st.commits + 1;
        batch.insert(Space::Sys, "commits", n.to_le_bytes());
        let sync = st.deferred.is_none();
        self.engine.commit(batch, sync)?;
        st.commits = n;
        if sync {
            self.record_commits(n);
        }
        Ok(())
    }

    /// Records `n` durable commits in the `commits` file (best effort: a failure there only
    /// weakens the check at the next open).
    fn record_commits(&self, n: u64) {
        let Some(file) = &self.commits_file else { return };
        let mut twice = [0u8; 16];
        twice[..8].copy_from_slice(&n.to_le_bytes());
        twice[8..].copy_from_slice(&n.to_le_bytes());
        let file = file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = std::os::unix::fs::FileExt::write_all_at(&*file, &twice, 0) {
            tracing::warn!(error = %e, "recording the commit count failed");
        }
    }

    /// The write state. A panic while it was held (a bug: input is checked before the lock)
    /// leaves it poisoned: from then on writes fail with a clear error naming the cause, and
    /// reads (which need no lock) go on, instead of a panic in every later caller.
    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| {
            MetaError::unavailable(
                "the embedded metadata store refuses writes after a panic in an earlier write (a bug; see the log); restart the process",
            )
        })
    }

    /// `key` as writers see it (under the write lock: a group's earlier writes included).
    fn read(&self, key: &str) -> Result<Option<Versioned>> {
        match self.engine.get(Space::Kv, key.as_bytes())? {
            None => Ok(None),
            Some(v) => decode_record(key, &v).map(Some),
        }
    }

    /// `key` as it is durably: what readers outside the write lock see.
    fn read_durable(&self, key: &str) -> Result<Option<Versioned>> {
        match self.engine.get_durable(Space::Kv, key.as_bytes())? {
            None => Ok(None),
            Some(v) => decode_record(key, &v).map(Some),
        }
    }

    fn holds(&self, c: &Compare) -> Result<bool> {
        Ok(match c {
            Compare::Version(k, v) => self.read(k)?.is_some_and(|x| x.version == *v),
            Compare::Absent(k) => self.read(k)?.is_none(),
            Compare::Exists(k) => self.read(k)?.is_some(),
        })
    }

    /// Applies `ops` (plus `extra` sys writes) as one durable batch at the next revision.
    fn write(&self, st: &mut State, ops: &[Op], extra: &dyn Fn(&mut Batch)) -> Result<Revision> {
        let rev = st.revision + 1;
        let mut batch = Batch::default();
        let mut events = Vec::new();
        let mut lease_moves: Vec<(String, Option<LeaseId>, Option<LeaseId>)> = Vec::new();
        let mut seen = BTreeSet::new();
        for op in ops {
            let key = match op {
                Op::Put { key, .. } | Op::Delete { key } => key,
            };
            if !seen.insert(key.clone()) {
                return Err(MetaError::InvalidArgument(format!(
                    "key {key} appears twice in one transaction"
                )));
            }
            let old = self.read(key)?;
            match op {
                Op::Put { key, value, lease } => {
                    check_value(key, value)?;
                    if let Some(l) = lease
                        && !st.leases.contains_key(l)
                    {
                        return Err(MetaError::LeaseNotFound(*l));
                    }
                    let create = old.as_ref().map_or(rev, |o| o.create_revision);
                    batch.insert(Space::Kv, key, encode_record(create, rev, *lease, value));
                    events.push(WatchEvent {
                        kind: EventKind::Put,
                        key: key.clone(),
                        value: value.clone(),
                        revision: rev,
                    });
                    lease_moves.push((key.clone(), old.and_then(|o| o.lease), *lease));
                }
                Op::Delete { key } => {
                    if let Some(o) = old {
                        batch.remove(Space::Kv, key);
                        events.push(WatchEvent {
                            kind: EventKind::Delete,
                            key: key.clone(),
                            value: Bytes::new(),
                            revision: rev,
                        });
                        lease_moves.push((key.clone(), o.lease, None));
                    }
                }
            }
        }
        extra(&mut batch);
        if events.is_empty() {
            self.commit(st, batch)?;
            return Ok(st.revision);
        }
        batch.insert(Space::Events, event_key(rev), encode_events(&events));
        batch.insert(Space::Sys, "revision", rev.to_le_bytes());
        let mut compacted = st.compacted;
        // Trim history a few revisions per write, so the work per write stays bounded.
        for _ in 0..8 {
            if rev.saturating_sub(compacted) <= self.config.events_retained {
                break;
            }
            compacted += 1;
            batch.remove(Space::Events, event_key(compacted));
        }
        if compacted != st.compacted {
            batch.insert(Space::Sys, "compacted", compacted.to_le_bytes());
        }
        self.commit(st, batch)?;
        st.revision = rev;
        st.compacted = compacted;
        for (key, from, to) in lease_moves {
            if let Some(l) = from.and_then(|l| st.leases.get_mut(&l)) {
                l.keys.remove(&key);
            }
            if let Some(l) = to.and_then(|l| st.leases.get_mut(&l)) {
                l.keys.insert(key);
            }
        }
        match &mut st.deferred {
            Some(deferred) => deferred.push(events),
            None => notify(st, &events),
        }
        Ok(rev)
    }

    /// The next id of sequence `name`, under the write lock `st` holds (a member of a group
    /// commit).
    fn next_id_locked(&self, st: &mut State, name: &str) -> Result<u64> {
        let key = format!("id/{name}");
        let id = stored_u64(&self.engine, &key)? + 1;
        self.write(st, &[], &|b| b.insert(Space::Sys, key.as_str(), id.to_le_bytes()))?;
        Ok(id)
    }

    /// `txn` under the write lock `st` holds (a member of a group commit).
    fn txn_locked(&self, st: &mut State, txn: &Txn) -> Result<TxnOutcome> {
        for c in &txn.compares {
            if !self.holds(c)? {
                return Ok(TxnOutcome { succeeded: false, revision: st.revision });
            }
        }
        let revision = self.write(st, &txn.ops, &|_| {})?;
        Ok(TxnOutcome { succeeded: true, revision })
    }

    fn revoke(&self, st: &mut State, id: LeaseId) -> Result<()> {
        let Some(lease) = st.leases.get(&id) else { return Err(MetaError::LeaseNotFound(id)) };
        let ops: Vec<Op> = lease.keys.iter().map(|k| Op::Delete { key: k.clone() }).collect();
        self.write(st, &ops, &|b| b.remove(Space::Sys, lease_key(id)))?;
        st.leases.remove(&id);
        Ok(())
    }

    fn expire_due(&self) -> Result<usize> {
        let mut st = self.lock()?;
        let now = self.clock.now_ms();
        let due: Vec<LeaseId> =
            st.leases.iter().filter(|(_, l)| l.deadline_ms <= now).map(|(id, _)| *id).collect();
        for id in &due {
            tracing::debug!(lease = id, "lease expired");
            self.revoke(&mut st, *id)?;
        }
        Ok(due.len())
    }

    fn watch(&self, prefix: &str, from: Revision) -> Result<Watch> {
        let mut st = self.lock()?;
        let from = if from == 0 { st.revision + 1 } else { from };
        if from <= st.compacted {
            return Err(MetaError::Compacted { requested: from, compacted: st.compacted });
        }
        let mut backlog = VecDeque::new();
        for (k, v) in self.engine.range(Space::Events, &event_key(from), usize::MAX, &|_| true)? {
            let rev = u64_at(&k.iter().rev().copied().collect::<Vec<u8>>(), 0);
            backlog
                .extend(decode_events(rev, &v)?.into_iter().filter(|e| e.key.starts_with(prefix)));
        }
        let (tx, rx) = mpsc::channel(self.config.watch_queue_depth);
        let end_reason = Arc::new(Mutex::new(None));
        st.watchers.push(Watcher {
            prefix: prefix.to_string(),
            tx,
            end_reason: end_reason.clone(),
        });
        Ok(Watch::new(backlog, rx, end_reason, None))
    }
}

/// Hands a committed revision's events to every watcher whose prefix matches. A watcher
/// whose queue is full is cut off with `Compacted`, never silently skipped.
fn notify(st: &mut State, events: &[WatchEvent]) {
    let revision = events[0].revision;
    let compacted = st.compacted;
    st.watchers.retain(|w| {
        let mine: Vec<WatchEvent> =
            events.iter().filter(|e| e.key.starts_with(&w.prefix)).cloned().collect();
        if mine.is_empty() {
            return !w.tx.is_closed();
        }
        match w.tx.try_send(Ok(mine)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(prefix = %w.prefix, revision, "watcher fell behind; cutting it off");
                *w.end_reason.lock().expect("watch end lock") = Some(MetaError::Compacted {
                    requested: revision,
                    compacted: compacted.max(revision - 1),
                });
                false
            }
        }
    });
}

/// Runs blocking store work off the async runtime's threads.
async fn blocking<T: Send + 'static>(
    inner: &Arc<Inner>,
    f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
) -> Result<T> {
    let inner = inner.clone();
    folio_rt::blocking(move || f(&inner)).await.map_err(|e| MetaError::io("blocking work", e))?
}

impl MetadataStore for EmbeddedStore {
    /// One fjall batch per transaction: thousands of operations are fine.
    fn txn_ops_max(&self) -> usize {
        self.inner.config.txn_ops_max
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>> {
        Box::pin(async move {
            check_key(key)?;
            self.inner.read_durable(key)
        })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page>> {
        if let Err(e) = check_key(prefix).and_then(|()| check_key(start_after.unwrap_or_default()))
        {
            return Box::pin(async move { Err(e) });
        }
        let (prefix, start_after) = (prefix.to_string(), start_after.map(str::to_string));
        // A snapshot taken under the state lock is consistent with the revision read there;
        // the page is read from it after the lock is released, so writers (which hold the
        // lock through their fsync) neither wait for a long listing nor make it wait on an
        // async worker. On a blocking thread: taking the lock may wait for a writer's fsync.
        Box::pin(async move {
            blocking(&self.inner, move |i| {
                let limit = limit.clamp(1, LIST_LIMIT_MAX);
                let (revision, snapshot) = {
                    let st = i.lock()?;
                    (st.revision, i.engine.snapshot(Space::Kv))
                };
                let start = list_start(&prefix, start_after.as_deref());
                let pairs = snapshot
                    .range(start.as_ref(), limit + 1, &|k| k.starts_with(prefix.as_bytes()))?;
                let more = pairs.len() > limit;
                let mut items = Vec::with_capacity(pairs.len().min(limit));
                for (k, v) in pairs.into_iter().take(limit) {
                    let key = String::from_utf8_lossy(&k).into_owned();
                    items.push(decode_record(&key, &v)?);
                }
                Ok(Page { items, more, revision })
            })
            .await
        })
    }

    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>> {
        Box::pin(async move {
            check_txn_keys(&txn)?;
            // Checked before it queues for a group (nothing is checked under the lock).
            let (n, max) = (txn.compares.len() + txn.ops.len(), self.inner.config.txn_ops_max);
            if n > max {
                return Err(MetaError::InvalidArgument(format!(
                    "a transaction of {n} compares and operations (at most {max})"
                )));
            }
            blocking(&self.inner, move |i| i.txn(txn)).await
        })
    }

    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>> {
        Box::pin(async move {
            check_key(prefix)?;
            self.inner.watch(prefix, from)
        })
    }

    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>> {
        Box::pin(async move {
            let ttl_ms = ttl.as_millis() as u64;
            if ttl_ms == 0 {
                return Err(MetaError::InvalidArgument("lease TTL must be positive".into()));
            }
            blocking(&self.inner, move |i| {
                let mut st = i.lock()?;
                let id = st.lease_next;
                i.write(&mut st, &[], &|b| {
                    b.insert(Space::Sys, "lease_next", (id + 1).to_le_bytes());
                    b.insert(Space::Sys, lease_key(id), ttl_ms.to_le_bytes());
                })?;
                st.lease_next = id + 1;
                let deadline_ms = i.clock.now_ms() + ttl_ms;
                st.leases.insert(id, Lease { ttl_ms, deadline_ms, keys: BTreeSet::new() });
                Ok(id)
            })
            .await
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let now = self.inner.clock.now_ms();
            let mut st = self.inner.lock()?;
            let l = st.leases.get_mut(&lease).ok_or(MetaError::LeaseNotFound(lease))?;
            l.deadline_ms = now + l.ttl_ms;
            Ok(())
        })
    }

    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(
            async move { blocking(&self.inner, move |i| i.revoke(&mut *i.lock()?, lease)).await },
        )
    }

    fn next_id<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<u64>> {
        let name = name.to_string();
        Box::pin(async move { blocking(&self.inner, move |i| i.next_id(&name)).await })
    }

    fn revision(&self) -> BoxFuture<'_, Result<Revision>> {
        Box::pin(async move { Ok(self.inner.lock()?.revision) })
    }
}
