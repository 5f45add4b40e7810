//! A metadata store that fails on command, for crash tests of the layers above.
//!
//! `crash_after(n, applied)`: the next `n` operations pass; the one after is the crash —
//! if it is a write and `applied` is set, it is applied first (the process died after the
//! commit, before it learned of it); from then on every operation fails with
//! `Unavailable`, as if the process were dead. `fail_txns(k)` fails the next `k`
//! transactions without applying them (a store that is briefly unreachable). `cut(true)`
//! is a network partition: every operation waits, unanswered, until `cut(false)` (a caller
//! that bounds its calls sees time-outs, as against an unreachable etcd).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::store::*;

/// A store wrapped with faults for tests: a crash after N operations (applying the last or not),
/// failing transactions, held creates.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn MetadataStore>,
    /// Operations left before the crash (`u64::MAX`: no crash planned).
    ops_left: AtomicU64,
    apply_at_crash: AtomicBool,
    crashed: AtomicBool,
    fail_txns: AtomicU64,
    ops: AtomicU64,
    /// Transactions that create a key under this prefix wait until it is cleared.
    hold: tokio::sync::watch::Sender<Option<String>>,
    /// Transactions that have started waiting on `hold` (ever).
    held: tokio::sync::watch::Sender<u64>,
    /// While set, every operation waits unanswered (a partition from the store).
    cut: tokio::sync::watch::Sender<bool>,
}

impl FaultyStore {
    /// Wraps `inner` with no fault planned.
    pub fn new(inner: Arc<dyn MetadataStore>) -> FaultyStore {
        FaultyStore {
            inner,
            ops_left: AtomicU64::new(u64::MAX),
            apply_at_crash: AtomicBool::new(false),
            crashed: AtomicBool::new(false),
            fail_txns: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            hold: tokio::sync::watch::channel(None).0,
            held: tokio::sync::watch::channel(0).0,
            cut: tokio::sync::watch::channel(false).0,
        }
    }

    /// Cuts this process off from the store (`true`: every operation waits, unanswered)
    /// or heals the cut (`false`: the waiting operations go on).
    pub fn cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }

    /// `step`, once the store is reachable.
    async fn reach(&self) -> Result<bool> {
        let _ = self.cut.subscribe().wait_for(|c| !*c).await;
        self.step()
    }

    /// Crash after `n` more operations (see the module docs).
    pub fn crash_after(&self, n: u64, applied: bool) {
        self.apply_at_crash.store(applied, Ordering::SeqCst);
        self.ops_left.store(n, Ordering::SeqCst);
    }

    /// Fail the next `k` transactions (not applied); later ones pass.
    pub fn fail_txns(&self, k: u64) {
        self.fail_txns.store(k, Ordering::SeqCst);
    }

    /// Holds every transaction that creates a key under `prefix` (compares it absent: a
    /// slow process between two steps) until [`FaultyStore::release`]; others pass.
    pub fn hold_creations_under(&self, prefix: &str) {
        self.hold.send_replace(Some(prefix.to_string()));
    }

    /// Lets held transactions go on.
    pub fn release(&self) {
        self.hold.send_replace(None);
    }

    /// Waits until `n` transactions in all have been held.
    pub async fn wait_held(&self, n: u64) {
        let _ = self.held.subscribe().wait_for(|h| *h >= n).await;
    }

    /// Whether the planned crash happened (every operation fails since).
    pub fn has_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Operations seen so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::SeqCst)
    }

    /// Counts an operation: `Ok(false)` pass, `Ok(true)` this is the crash, `Err` dead.
    fn step(&self) -> Result<bool> {
        self.ops.fetch_add(1, Ordering::SeqCst);
        if self.crashed.load(Ordering::SeqCst) {
            return Err(dead());
        }
        let left = self.ops_left.load(Ordering::SeqCst);
        if left == u64::MAX {
            return Ok(false);
        }
        if left == 0 {
            self.crashed.store(true, Ordering::SeqCst);
            return Ok(true);
        }
        self.ops_left.store(left - 1, Ordering::SeqCst);
        Ok(false)
    }
}

fn dead() -> MetaError {
    MetaError::unavailable("injected crash: the store is gone for this process")
}

impl MetadataStore for FaultyStore {
    fn txn_ops_max(&self) -> usize {
        self.inner.txn_ops_max()
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.get(key).await
        })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.list(prefix, start_after, limit).await
        })
    }

    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>> {
        Box::pin(async move {
            if self.reach().await? {
                if self.apply_at_crash.load(Ordering::SeqCst) {
                    let _ = self.inner.txn(txn).await;
                }
                return Err(dead());
            }
            let k = self.fail_txns.load(Ordering::SeqCst);
            if k > 0 {
                self.fail_txns.store(k - 1, Ordering::SeqCst);
                return Err(MetaError::unavailable("injected transaction failure"));
            }
            let creates_under = |prefix: &str| {
                txn.compares
                    .iter()
                    .any(|c| matches!(c, Compare::Absent(key) if key.starts_with(prefix)))
            };
            let held = self.hold.borrow().as_deref().is_some_and(creates_under);
            if held {
                self.held.send_modify(|h| *h += 1);
                let _ = self
                    .hold
                    .subscribe()
                    .wait_for(|h| !h.as_deref().is_some_and(creates_under))
                    .await;
            }
            self.inner.txn(txn).await
        })
    }

    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.watch(prefix, from).await
        })
    }

    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.grant_lease(ttl).await
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.keep_alive(lease).await
        })
    }

    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.revoke_lease(lease).await
        })
    }

    fn next_id<'a>(&'a self, sequence: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.next_id(sequence).await
        })
    }

    fn revision(&self) -> BoxFuture<'_, Result<Revision>> {
        Box::pin(async move {
            if self.reach().await? {
                return Err(dead());
            }
            self.inner.revision().await
        })
    }
}
