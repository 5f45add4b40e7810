//! The trash: the second phase of two-phase deletion, and whole-log deletion.
//!
//! A trash record (`<root>/trash/<ledger id>`) is written in the same transaction that
//! removes its ledger from a chain. The deleter then, per record: reads the ledger's
//! metadata; if the ledger is gone, the record goes; if the ledger's owner tag names
//! another log, it is **never** deleted (the record stays, saying why); otherwise the
//! ledger is deleted, then its persisted offset index, and only then the record. Failures
//! back off (1 s doubling to 5 min) and are retried for ever; every process that runs a
//! deleter resumes the whole trash, and every log left in the `deleting` state.
//!
//! Deleting a log: its last ledger is recovered (fencing its writer), or, if the owner has
//! put it in the chain but not created it yet, created closed (so the owner's create
//! fails); then one transaction,
//! compared on the record's version (so the owner's next CAS fails), moves every ledger to
//! the trash and removes the cursors and the log record. A log too big for one transaction
//! (etcd takes 128 operations) is first marked `deleting`, then moved in batches, the last
//! of which removes the record. A crash anywhere leaves each ledger in the chain or in the
//! trash, and a `deleting` log is finished by any deleter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_client::LedgerError;
use folio_meta::records::Record;
use folio_meta::{Compare, Expect, MetaError, Txn, list_all};
use tokio::sync::{Notify, watch};

use crate::env::{LogEnv, OWNER_TAG};
use crate::error::{LogError, Result};
use crate::records::{LogRecord, LogRecordState, TrashRecord};

/// The trash reason of the ledgers of a deleted log.
pub const LOG_DELETED: &str = "log-deleted";

/// After background work that took `busy`, waits so that it takes at most `fraction` of
/// the time (1.0 or more: no wait), leaving the metadata store to foreground requests.
pub async fn pace(busy: Duration, fraction: f64) {
    if fraction > 0.0 && fraction < 1.0 {
        tokio::time::sleep(busy.mul_f64((1.0 - fraction) / fraction)).await;
    }
}

const BACKOFF_MIN_MS: u64 = 1000;
const BACKOFF_MAX_MS: u64 = 5 * 60 * 1000;

/// Deletes the log `name`: see the module docs. Safe to repeat and to run concurrently;
/// resumes a deletion another process started. A missing log is already deleted.
pub async fn delete_log(env: &LogEnv, name: &str, reason: &str) -> Result<()> {
    let key = env.keys.log(name);
    // Ledgers and cursors per transaction: the store's cap less the record's compare and
    // its final put or delete.
    let per_txn = env.meta.txn_ops_max().saturating_sub(2).max(1);
    let mut fenced = std::collections::BTreeSet::new();
    loop {
        let Some(v) = env.meta.get(&key).await? else { return Ok(()) };
        let mut record = LogRecord::decode(&key, &v.value)?;
        let now = env.now_ms();
        if let Some(last) = record.ledgers.last()
            && !fenced.contains(&last.ledger_id)
        {
            // Fence the last ledger's writer, so nothing more is acknowledged in it (one not
            // created yet is created closed, at the smallest quorums); then look again (the
            // owner may have rolled meanwhile).
            let id = last.ledger_id;
            crate::env::fence_ledger(&env.client, id, || {
                let mut o = crate::env::ledger_options(name, id, (1, 1, 1));
                o.guard.push(Compare::Version(key.clone(), v.version));
                o
            })
            .await?;
            fenced.insert(id);
            continue;
        }
        // Cursors and what the owner keeps beside the log go with it.
        let mut cursors = list_all(env.meta.as_ref(), &env.keys.cursors(name)).await?;
        cursors.extend(list_all(env.meta.as_ref(), &env.keys.log_states(name)).await?);
        let small = record.ledgers.len() + cursors.len() < per_txn;
        if record.state != LogRecordState::Deleting && !small {
            // Too big for one transaction: mark it, then move it in batches.
            record.state = LogRecordState::Deleting;
            record.properties.insert("deleting.reason".into(), reason.into());
            match env.meta.put(&key, record.encode(), Expect::Version(v.version)).await {
                Ok(_) => tracing::info!(log = name, reason, "log marked for deletion"),
                Err(MetaError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let n = record.ledgers.len().min(per_txn);
        let states = folio_meta::keys::LOG_STATES.len();
        let last_batch = n == record.ledgers.len() && cursors.len() + states + n < per_txn;
        let mut txn = Txn::new().compare(Compare::Version(key.clone(), v.version));
        for l in record.ledgers.drain(..n) {
            let t = TrashRecord::new(l.ledger_id, name, LOG_DELETED, now);
            txn = txn.put(env.keys.trash_ledger(l.ledger_id), t.encode());
        }
        if last_batch {
            // Ledgers, cursors and the log record: one transaction.
            txn = txn.delete(key.clone());
            for c in &cursors {
                txn = txn.delete(c.key.clone());
            }
            // By name too: one written since the listing (its writer compares the log
            // record's existence, so none is written after this).
            for what in folio_meta::keys::LOG_STATES {
                let k = env.keys.log_state(name, what);
                if !cursors.iter().any(|c| c.key == k) {
                    txn = txn.delete(k);
                }
            }
        } else if n == 0 {
            // Only cursors left, more than one transaction takes: remove a batch first.
            let mut txn = Txn::new();
            for c in cursors.iter().take(per_txn) {
                txn = txn.delete(c.key.clone());
            }
            env.meta.txn(txn).await?;
            continue;
        } else {
            txn = txn.put(key.clone(), record.encode());
        }
        let out = env.meta.txn(txn).await?;
        if out.succeeded && last_batch {
            tracing::info!(log = name, reason, "log deleted; its ledgers are in the trash");
            return Ok(());
        }
    }
}

/// How the trash deleter runs: interval, batch sizes, retries.
#[derive(Debug, Clone)]
pub struct TrashConfig {
    /// How often the deleter passes over the trash when nobody wakes it.
    pub interval: Duration,
    /// Ledgers deleted at once.
    pub concurrency: usize,
    /// The share of time each of those spends deleting while there is work (it waits
    /// for the rest after each ledger), so a large deletion leaves the metadata store to
    /// foreground requests (measured with `folio bench delete`). 1.0: no pause.
    pub busy_fraction: f64,
}

impl Default for TrashConfig {
    fn default() -> Self {
        TrashConfig { interval: Duration::from_secs(10), concurrency: 8, busy_fraction: 0.5 }
    }
}

/// What one deleter pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrashPass {
    /// Ledgers deleted (or found gone) and their records removed.
    pub deleted: u64,
    /// Records whose deletion failed this time (retried later).
    pub failed: u64,
    /// Records not yet due (backing off).
    pub waiting: u64,
    /// Logs in the `deleting` state whose deletion this pass continued.
    pub logs_resumed: u64,
}

/// The trash as it stands, for metrics and admin views.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrashStatus {
    pub ledgers: u64,
    /// Age of the oldest record (ms).
    pub oldest_age_ms: u64,
    /// Records whose last attempt failed.
    pub failing: u64,
}

/// Counters of a deleter.
#[derive(Debug, Default)]
pub struct TrashStats {
    pub deleted: AtomicU64,
    pub failed: AtomicU64,
}

/// The deleter. `run_once` is one pass; `spawn` runs passes for ever.
#[derive(Debug, Clone)]
pub struct Trash {
    env: LogEnv,
    config: TrashConfig,
    stats: Arc<TrashStats>,
    wake: Arc<Notify>,
    /// Backoff also kept in memory: when the store cannot record it, the deleter still
    /// does not hammer it. Ledger id → (attempts, next attempt ms).
    backoff: Arc<Mutex<BTreeMap<u64, (u32, u64)>>>,
}

impl Trash {
    /// A trash over `env`; nothing runs until it is started.
    pub fn new(env: LogEnv, config: TrashConfig) -> Trash {
        Trash { env, config, stats: Arc::default(), wake: Arc::default(), backoff: Arc::default() }
    }

    /// The deleter's counters.
    pub fn stats(&self) -> &TrashStats {
        &self.stats
    }

    /// Makes the background loop pass now.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Every trash record, oldest ledger id first.
    pub async fn list(&self) -> Result<Vec<TrashRecord>> {
        list(&self.env).await
    }

    /// What is in the trash now (counts and the oldest record's age), read from the store.
    pub async fn status(&self) -> Result<TrashStatus> {
        let now = self.env.now_ms();
        let all = self.list().await?;
        Ok(TrashStatus {
            ledgers: all.len() as u64,
            oldest_age_ms: all.iter().map(|t| now.saturating_sub(t.time_ms)).max().unwrap_or(0),
            failing: all.iter().filter(|t| !t.last_error.is_empty()).count() as u64,
        })
    }

    /// One pass: resume deleting logs, then delete every due trashed ledger.
    pub async fn run_once(&self) -> Result<TrashPass> {
        let mut pass = TrashPass::default();
        let env = &self.env;
        for v in list_all(env.meta.as_ref(), &env.keys.logs()).await? {
            let Some(name) = env.keys.parse_log(&v.key) else { continue };
            let Ok(r) = LogRecord::decode(&v.key, &v.value) else { continue };
            if r.state == LogRecordState::Deleting {
                let reason = r.properties.get("deleting.reason").cloned().unwrap_or_default();
                match delete_log(env, name, &reason).await {
                    Ok(()) => pass.logs_resumed += 1,
                    Err(e) => {
                        tracing::warn!(log = name, error = %e, "resuming a log deletion failed")
                    }
                }
            }
        }
        let now = env.now_ms();
        let due: Vec<(TrashRecord, u64)> = list_versioned(env)
            .await?
            .into_iter()
            .filter(|(t, _)| {
                let mem = self.backoff.lock().expect("backoff lock").get(&t.ledger_id).copied();
                let due = t.next_attempt_ms <= now && mem.is_none_or(|(_, next)| next <= now);
                if !due {
                    pass.waiting += 1;
                }
                due
            })
            .collect();
        let sem = Arc::new(tokio::sync::Semaphore::new(self.config.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for (t, version) in due {
            let permit = sem.clone().acquire_owned().await.expect("semaphore open");
            let this = self.clone();
            tasks.spawn(async move {
                let _permit = permit;
                let started = tokio::time::Instant::now();
                let r = this.delete_one(t, version).await;
                pace(started.elapsed(), this.config.busy_fraction).await;
                r
            });
        }
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(Ok(())) => pass.deleted += 1,
                Ok(Err(_)) | Err(_) => pass.failed += 1,
            }
        }
        self.stats.deleted.fetch_add(pass.deleted, Ordering::Relaxed);
        self.stats.failed.fetch_add(pass.failed, Ordering::Relaxed);
        Ok(pass)
    }

    async fn delete_one(&self, t: TrashRecord, version: u64) -> Result<()> {
        let env = &self.env;
        let key = env.keys.trash_ledger(t.ledger_id);
        let outcome: Result<()> = async {
            let gone: Result<()> = match env.client.metadata(t.ledger_id).await {
                Err(LedgerError::NoSuchLedger(_)) => Ok(()),
                Err(e) => Err(e.into()),
                Ok(m) => {
                    let tag = m.custom.get(OWNER_TAG).map(|b| String::from_utf8_lossy(b).into_owned());
                    if tag.as_deref() != Some(t.log.as_str()) {
                        return Err(LogError::Invalid(format!(
                            "owner tag mismatch: ledger {} is tagged {:?}, the trash says log {:?}; not deleting it",
                            t.ledger_id, tag, t.log
                        )));
                    }
                    match env.client.delete(t.ledger_id).await {
                        Ok(()) | Err(LedgerError::NoSuchLedger(_)) => Ok(()),
                        Err(e) => Err(e.into()),
                    }
                }
            };
            gone?;
            // Only after the ledger is gone do its offset index (if it had one) and then its
            // record go: a crash in between leaves the record, and the next pass redoes both.
            env.meta.delete(&env.keys.offset_index(t.ledger_id), Expect::Any).await?;
            match env.meta.delete(&key, Expect::Version(version)).await {
                Ok(_) | Err(MetaError::Conflict { .. }) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        .await;
        match outcome {
            Ok(()) => {
                self.backoff.lock().expect("backoff lock").remove(&t.ledger_id);
                tracing::info!(ledger = t.ledger_id, log = %t.log, reason = %t.reason, "trashed ledger deleted");
                Ok(())
            }
            Err(e) => {
                let mut next = t.clone();
                let mem = self.backoff.lock().expect("backoff lock").get(&t.ledger_id).map(|m| m.0);
                next.attempts = t.attempts.max(mem.unwrap_or(0)).saturating_add(1);
                let backoff =
                    BACKOFF_MIN_MS.saturating_mul(1 << next.attempts.min(20)).min(BACKOFF_MAX_MS);
                next.next_attempt_ms = env.now_ms() + backoff;
                next.last_error = e.to_string();
                self.backoff
                    .lock()
                    .expect("backoff lock")
                    .insert(t.ledger_id, (next.attempts, next.next_attempt_ms));
                tracing::warn!(ledger = t.ledger_id, attempts = next.attempts, error = %e, "deleting a trashed ledger failed; will retry");
                let _ = env.meta.put(&key, next.encode(), Expect::Version(version)).await;
                Err(e)
            }
        }
    }

    /// Runs passes until the returned handle is dropped: every `interval`, or when woken.
    /// For a process that is the only deleter of its metadata store (standalone, tests).
    pub fn spawn(self) -> TrashHandle {
        // The gate's sender lives in the handle: a gate whose sender is gone ends the loop
        // after its first pass (found by the simulator, #26).
        let (open, gate) = watch::channel(true);
        let mut handle = self.spawn_gated(gate);
        handle.gate = Some(open);
        handle
    }

    /// Runs passes only while `gate` says this process is the cluster's deleter (a broker
    /// holding the controller lease): at once when the gate opens, then every `interval` or
    /// when woken, until the gate closes; ends when the gate's sender is gone or the handle
    /// is dropped. A pass that is running when the gate closes finishes: two deleters
    /// overlapping for one pass is safe (deleting a ledger and then its record compared on
    /// version are both idempotent), only wasteful.
    pub fn spawn_gated(self, mut gate: watch::Receiver<bool>) -> TrashHandle {
        let this = self.clone();
        let active = Arc::new(AtomicBool::new(false));
        let running = active.clone();
        let task = tokio::spawn(async move {
            loop {
                if gate.wait_for(|open| *open).await.is_err() {
                    return;
                }
                if !running.swap(true, Ordering::SeqCst) {
                    tracing::info!(owner = %this.env.owner, "trash deleter active here");
                }
                match this.run_once().await {
                    Ok(p) if p.deleted + p.failed > 0 => {
                        tracing::debug!(?p, "trash pass");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "trash pass failed"),
                }
                tokio::select! {
                    () = tokio::time::sleep(this.config.interval) => {}
                    () = this.wake.notified() => {}
                    r = gate.wait_for(|open| !*open) => {
                        running.store(false, Ordering::SeqCst);
                        if r.is_err() {
                            return;
                        }
                        tracing::info!(owner = %this.env.owner, "trash deleter no longer active here");
                    }
                }
            }
        });
        TrashHandle { trash: self, task, active, gate: None }
    }
}

/// A running deleter; stops when dropped.
#[derive(Debug)]
pub struct TrashHandle {
    pub trash: Trash,
    task: tokio::task::JoinHandle<()>,
    active: Arc<AtomicBool>,
    /// `spawn`'s always-open gate.
    gate: Option<watch::Sender<bool>>,
}

impl TrashHandle {
    /// Whether this process is deleting now (its gate is open and its loop runs).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::SeqCst) && !self.task.is_finished()
    }
}

impl Drop for TrashHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn list_versioned(env: &LogEnv) -> Result<Vec<(TrashRecord, u64)>> {
    let mut out = Vec::new();
    for v in list_all(env.meta.as_ref(), &env.keys.trash()).await? {
        match TrashRecord::decode(&v.key, &v.value) {
            Ok(t) => out.push((t, v.version)),
            Err(e) => tracing::error!(key = %v.key, error = %e, "corrupt trash record left alone"),
        }
    }
    Ok(out)
}

/// Every trash record.
pub async fn list(env: &LogEnv) -> Result<Vec<TrashRecord>> {
    Ok(list_versioned(env).await?.into_iter().map(|(t, _)| t).collect())
}
