//! What the workloads did and saw, as facts the checkers judge: per ledger the bytes sent
//! for each entry, the entries acknowledged, the LACs read and every end a close or a
//! recovery reported; per log the batches acknowledged at each offset and the batches read;
//! every operation in flight with its start (liveness); violations found during the run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use folio_proto::{EntryId, LedgerId};
use tokio::time::Instant;

/// A checksum of a payload (what the model keeps of it).
pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// One raw ledger.
#[derive(Debug, Default, Clone)]
pub struct LedgerFacts {
    /// Entry id → checksum of the payload the writer sent.
    pub sent: BTreeMap<EntryId, u32>,
    /// Entries the writer was told are durable.
    pub acked: BTreeSet<EntryId>,
    /// The highest LAC a reader was told.
    pub lac_seen: EntryId,
    /// Every end reported (by the writer's close, or a recovery), with who said it.
    pub ends: Vec<(EntryId, String)>,
    pub deleted: bool,
    /// A delete failed: it may have applied (its answer lost), so the ledger may be gone.
    pub delete_tried: bool,
}

/// One batch of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub records: u32,
    pub crc: u32,
}

/// One managed log.
#[derive(Debug, Default, Clone)]
pub struct LogFacts {
    /// Offset → the batch acknowledged there.
    pub acked: BTreeMap<u64, Batch>,
    /// Offset → the batch a read returned there.
    pub read: BTreeMap<u64, Batch>,
    /// Offset → the owner epoch of the log handle that acknowledged it.
    pub acked_epoch: BTreeMap<u64, u32>,
}

/// An operation in flight.
#[derive(Debug, Clone)]
pub struct Op {
    pub what: String,
    pub since: Instant,
}

/// See the module docs. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Model {
    inner: Arc<Mutex<Facts>>,
}

/// The facts behind a [`Model`].
#[derive(Debug, Default)]
pub struct Facts {
    pub ledgers: BTreeMap<LedgerId, LedgerFacts>,
    pub logs: BTreeMap<String, LogFacts>,
    pub violations: Vec<String>,
    pub ops: BTreeMap<u64, Op>,
    next_op: u64,
    /// Operations that ended, by kind and outcome ("add ok", "recover failed", ...).
    pub counts: BTreeMap<String, u64>,
    /// Ledgers a recovery is running for now (for faults timed to a recovery).
    pub recovering: BTreeSet<LedgerId>,
}

impl Model {
    /// The facts, locked.
    pub fn lock(&self) -> MutexGuard<'_, Facts> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes an operation starting; [`Model::end`] takes the id back.
    pub fn begin(&self, what: impl Into<String>) -> u64 {
        let mut f = self.lock();
        f.next_op += 1;
        let id = f.next_op;
        f.ops.insert(id, Op { what: what.into(), since: Instant::now() });
        id
    }

    /// Notes an operation's end and its outcome (counted under `outcome`).
    pub fn end(&self, id: u64, outcome: &str) {
        let mut f = self.lock();
        f.ops.remove(&id);
        *f.counts.entry(outcome.to_string()).or_default() += 1;
    }

    /// Records a broken promise seen during the run.
    pub fn violation(&self, what: String) {
        self.lock().violations.push(what);
    }

    /// Operations in flight for longer than `bound`.
    pub fn stuck(&self, bound: Duration) -> Vec<String> {
        let now = Instant::now();
        self.lock()
            .ops
            .values()
            .filter(|o| now.duration_since(o.since) > bound)
            .map(|o| format!("{} (pending {:?})", o.what, now.duration_since(o.since)))
            .collect()
    }

    /// The writer of `ledger` sent `payload` as `entry`.
    pub fn sent(&self, ledger: LedgerId, entry: EntryId, payload: &[u8]) {
        let mut f = self.lock();
        let l = f
            .ledgers
            .entry(ledger)
            .or_insert_with(|| LedgerFacts { lac_seen: -1, ..LedgerFacts::default() });
        l.sent.insert(entry, crc(payload));
    }

    /// The writer of `ledger` was told `entry` is durable.
    pub fn acked(&self, ledger: LedgerId, entry: EntryId) {
        if let Some(l) = self.lock().ledgers.get_mut(&ledger) {
            l.acked.insert(entry);
        }
    }

    /// A close or recovery of `ledger` reported `end` as its last entry. D3: every end of a
    /// ledger is the same (fenced is final), checked at once.
    pub fn ended(&self, ledger: LedgerId, end: EntryId, by: &str) {
        let mut f = self.lock();
        let Some(l) = f.ledgers.get_mut(&ledger) else { return };
        let first = l.ends.first().cloned();
        l.ends.push((end, by.to_string()));
        if let Some((e, who)) = first
            && e != end
        {
            let v = format!(
                "D3 ledger {ledger}: {by} ended it at {end}, {who} had ended it at {e} (fenced is final)"
            );
            f.violations.push(v);
        }
    }

    /// A reader of `ledger` read `entry` with `payload`: it must be what was sent.
    pub fn read_entry(&self, ledger: LedgerId, entry: EntryId, payload: &[u8]) {
        let mut f = self.lock();
        let Some(l) = f.ledgers.get(&ledger) else { return };
        match l.sent.get(&entry) {
            Some(c) if *c == crc(payload) => {}
            Some(_) => f.violations.push(format!(
                "D1 ledger {ledger} entry {entry}: read bytes differ from those sent"
            )),
            None => {
                f.violations.push(format!("D1 ledger {ledger} entry {entry}: read, but never sent"))
            }
        }
    }

    /// A reader of `ledger` was told its LAC is `lac`.
    pub fn lac(&self, ledger: LedgerId, lac: EntryId) {
        if let Some(l) = self.lock().ledgers.get_mut(&ledger) {
            l.lac_seen = l.lac_seen.max(lac);
        }
    }

    /// `ledger` was deleted.
    pub fn deleted(&self, ledger: LedgerId) {
        if let Some(l) = self.lock().ledgers.get_mut(&ledger) {
            l.deleted = true;
        }
    }

    /// A delete of `ledger` failed: it may or may not have applied.
    pub fn delete_tried(&self, ledger: LedgerId) {
        if let Some(l) = self.lock().ledgers.get_mut(&ledger) {
            l.delete_tried = true;
        }
    }

    /// An append to `log` was acknowledged at `offset` by its owner in `epoch`.
    pub fn log_acked(&self, log: &str, offset: u64, batch: Batch, epoch: u32) {
        let mut f = self.lock();
        let facts = f.logs.entry(log.to_string()).or_default();
        let old = facts.acked.insert(offset, batch);
        facts.acked_epoch.insert(offset, epoch);
        let read = facts.read.get(&offset).copied();
        let mut v = Vec::new();
        if let Some(o) = old.filter(|o| *o != batch) {
            v.push(format!("D1 log {log} offset {offset}: acknowledged twice ({o:?}, {batch:?})"));
        }
        if let Some(r) = read.filter(|r| *r != batch) {
            v.push(format!(
                "D1 log {log} offset {offset}: acknowledged {batch:?}, a reader had read {r:?}"
            ));
        }
        f.violations.extend(v);
    }

    /// A read of `log` returned `batch` at `offset`.
    pub fn log_read(&self, log: &str, offset: u64, batch: Batch) {
        let mut f = self.lock();
        let facts = f.logs.entry(log.to_string()).or_default();
        let acked = facts.acked.get(&offset).copied();
        let old = facts.read.insert(offset, batch);
        let mut v = Vec::new();
        if let Some(a) = acked.filter(|a| *a != batch) {
            v.push(format!("D1 log {log} offset {offset}: read {batch:?}, acknowledged {a:?}"));
        }
        if let Some(o) = old.filter(|o| *o != batch) {
            v.push(format!("D1 log {log} offset {offset}: read {batch:?}, earlier {o:?}"));
        }
        f.violations.extend(v);
    }
}
