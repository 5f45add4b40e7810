//! The metadata store as the simulated components reach it: the embedded store (its own
//! code, on the memory engine) behind a seeded delay per call, as a remote etcd would be,
//! and, when the plan says so, transactions that fail: before they apply (the store was
//! unreachable) or after (the answer was lost: the caller cannot tell whether it applied).
//! The store can restart (`restart`): a new store on the same engine, every lease with a
//! full TTL again, as after an etcd leader change.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use folio_meta::clock::Clock;
use folio_meta::embedded::{EmbeddedConfig, EmbeddedStore, MemoryEngine};
use folio_meta::{
    BoxFuture, LeaseId, MetaError, MetadataStore, Page, Result, Revision, Txn, TxnOutcome,
    Versioned, Watch,
};
use rand::Rng;

use crate::trace::Trace;

/// The store with delays and failures (see the module docs).
#[derive(Debug)]
pub struct SimMeta {
    inner: std::sync::RwLock<Arc<EmbeddedStore>>,
    engine: Arc<MemoryEngine>,
    config: EmbeddedConfig,
    clock: Arc<dyn Clock>,
    /// Each call waits this long, at most (drawn per call).
    delay_max: Duration,
    /// Transactions failed before they apply, per 1000.
    fail_per_1000: AtomicU32,
    /// Transactions failed after they applied, per 1000.
    lost_answer_per_1000: AtomicU32,
    trace: Trace,
}

impl SimMeta {
    /// A store on `engine` behind delays up to `delay_max`, with no failures yet.
    pub fn new(
        engine: Arc<MemoryEngine>,
        config: EmbeddedConfig,
        clock: Arc<dyn Clock>,
        delay_max: Duration,
        trace: Trace,
    ) -> SimMeta {
        let store = EmbeddedStore::open_memory(engine.clone(), config.clone(), clock.clone())
            .expect("the metadata store opens");
        SimMeta {
            inner: std::sync::RwLock::new(Arc::new(store)),
            engine,
            config,
            clock,
            delay_max,
            fail_per_1000: AtomicU32::new(0),
            lost_answer_per_1000: AtomicU32::new(0),
            trace,
        }
    }

    /// The store under the delays now.
    pub fn store(&self) -> Arc<EmbeddedStore> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Restarts the store on its engine: calls in flight finish on the old one.
    pub fn restart(&self) {
        let store = EmbeddedStore::open_memory(
            self.engine.clone(),
            self.config.clone(),
            self.clock.clone(),
        )
        .expect("the metadata store reopens");
        *self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(store);
        self.trace.event("meta: the store restarted");
    }

    /// Sets how many transactions per 1000 fail before and after they apply.
    pub fn set_failures(&self, before: u32, after: u32) {
        self.fail_per_1000.store(before, Ordering::Relaxed);
        self.lost_answer_per_1000.store(after, Ordering::Relaxed);
    }

    async fn delay(&self) {
        let max = self.delay_max.as_micros() as u64;
        let d = folio_rt::with_rng(|r| r.random_range(0..=max));
        tokio::time::sleep(Duration::from_micros(d)).await;
    }

    fn roll(&self, per_1000: &AtomicU32) -> bool {
        let p = per_1000.load(Ordering::Relaxed);
        p > 0 && folio_rt::with_rng(|r| r.random_range(0..1000) < p)
    }
}

impl MetadataStore for SimMeta {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>> {
        Box::pin(async move {
            self.delay().await;
            let r = self.store().get(key).await;
            self.delay().await;
            r
        })
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page>> {
        Box::pin(async move {
            self.delay().await;
            let r = self.store().list(prefix, start_after, limit).await;
            self.delay().await;
            r
        })
    }

    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>> {
        Box::pin(async move {
            self.delay().await;
            if self.roll(&self.fail_per_1000) {
                self.trace.event("meta: a transaction failed before it applied");
                return Err(MetaError::unavailable("simulated: the store is unreachable"));
            }
            let r = self.store().txn(txn).await;
            self.delay().await;
            if r.is_ok() && self.roll(&self.lost_answer_per_1000) {
                self.trace.event("meta: a transaction applied and its answer was lost");
                return Err(MetaError::unavailable("simulated: the answer was lost"));
            }
            r
        })
    }

    fn txn_ops_max(&self) -> usize {
        self.store().txn_ops_max()
    }

    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>> {
        Box::pin(async move {
            self.delay().await;
            self.store().watch(prefix, from).await
        })
    }

    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>> {
        Box::pin(async move {
            self.delay().await;
            self.store().grant_lease(ttl).await
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.delay().await;
            self.store().keep_alive(lease).await
        })
    }

    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.delay().await;
            self.store().revoke_lease(lease).await
        })
    }

    fn next_id<'a>(&'a self, sequence: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            self.delay().await;
            self.store().next_id(sequence).await
        })
    }

    fn revision(&self) -> BoxFuture<'_, Result<Revision>> {
        Box::pin(async move { self.store().revision().await })
    }
}
