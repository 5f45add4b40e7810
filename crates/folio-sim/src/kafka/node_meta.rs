//! The metadata store as one broker reaches it: the cluster's store ([`SimMeta`]) behind a
//! link the nemesis can cut. While cut, a call waits (its request is held in the network,
//! as a partitioned etcd client's is) until the link heals or [`HELD_MAX`] passes; then it
//! fails with `Unavailable` without applying. A transaction that applied while the link
//! was up but whose answer meets a cut link waits the same way and, past [`HELD_MAX`],
//! fails although it applied (the answer was lost). A transaction is on the wire once
//! sent: it lands when the link heals even if its caller gave up on it meanwhile. So a
//! broker cut off from the store sees its writes hang and fail, and a write that hung may
//! land after the caller gave up on it: what fencing must make harmless. A watch opened
//! before the cut delivers nothing while it lasts (its events wait, in order, up to
//! [`WATCH_HELD_MAX`] batches, and arrive once the link heals), so a cut-off or paused
//! broker's caches are as stale as a real partition leaves them.

use std::sync::Arc;
use std::time::Duration;

use folio_meta::{
    BoxFuture, LeaseId, MetaError, MetadataStore, Page, Result, Revision, Txn, TxnOutcome,
    Versioned, Watch,
};
use tokio::sync::watch;

use crate::limits::{HELD_MAX, WATCH_HELD_MAX};
use crate::meta::SimMeta;

/// See the module docs.
#[derive(Debug)]
pub struct NodeMeta {
    inner: Arc<SimMeta>,
    cut: watch::Sender<bool>,
}

impl NodeMeta {
    /// The store behind an uncut link.
    pub fn new(inner: Arc<SimMeta>) -> NodeMeta {
        NodeMeta { inner, cut: watch::channel(false).0 }
    }

    /// Cuts (`true`) or heals the link.
    pub fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }

    /// Whether the link is cut now.
    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }

    /// Waits until the link is up (at most [`HELD_MAX`]).
    async fn pass(&self, what: &str) -> Result<()> {
        let mut rx = self.cut.subscribe();
        match tokio::time::timeout(HELD_MAX, rx.wait_for(|cut| !cut)).await {
            Ok(_) => Ok(()),
            Err(_) => {
                Err(MetaError::unavailable(format!("simulated: the store is cut off ({what})")))
            }
        }
    }
}

impl MetadataStore for NodeMeta {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>> {
        Box::pin(async move {
            self.pass("get").await?;
            let r = self.inner.get(key).await;
            self.pass("get's answer").await?;
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
            self.pass("list").await?;
            let r = self.inner.list(prefix, start_after, limit).await;
            self.pass("list's answer").await?;
            r
        })
    }

    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>> {
        // The request is on the wire once sent: it lands when the link heals (within
        // `HELD_MAX`) even if the caller gave up on it meanwhile.
        let (inner, mut cut) = (self.inner.clone(), self.cut.subscribe());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let up = tokio::time::timeout(HELD_MAX, cut.wait_for(|cut| !cut)).await.is_ok();
            let r = if up {
                inner.txn(txn).await
            } else {
                Err(MetaError::unavailable("simulated: the store is cut off (txn)"))
            };
            let _ = tx.send(r);
        });
        Box::pin(async move {
            let r = rx.await.unwrap_or_else(|_| {
                Err(MetaError::unavailable("simulated: the transaction was lost"))
            })?;
            self.pass("txn's answer").await?;
            Ok(r)
        })
    }

    fn txn_ops_max(&self) -> usize {
        self.inner.txn_ops_max()
    }

    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>> {
        Box::pin(async move {
            self.pass("watch").await?;
            let mut inner = self.inner.watch(prefix, from).await?;
            // The relay: each event passes the link, waiting while it is cut.
            let (tx, rx) = tokio::sync::mpsc::channel(WATCH_HELD_MAX);
            let mut cut = self.cut.subscribe();
            tokio::spawn(async move {
                loop {
                    let next = tokio::select! {
                        () = tx.closed() => return,
                        next = inner.next() => next,
                    };
                    let Some(event) = next else { return };
                    if cut.wait_for(|cut| !cut).await.is_err() {
                        return;
                    }
                    if tx.send(event.map(|e| vec![e])).await.is_err() {
                        return;
                    }
                }
            });
            Ok(Watch::from_channel(rx))
        })
    }

    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>> {
        Box::pin(async move {
            self.pass("grant").await?;
            let r = self.inner.grant_lease(ttl).await;
            self.pass("grant's answer").await?;
            r
        })
    }

    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.pass("keep-alive").await?;
            let r = self.inner.keep_alive(lease).await;
            self.pass("keep-alive's answer").await?;
            r
        })
    }

    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.pass("revoke").await?;
            self.inner.revoke_lease(lease).await
        })
    }

    fn next_id<'a>(&'a self, sequence: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            self.pass("next id").await?;
            let r = self.inner.next_id(sequence).await;
            self.pass("next id's answer").await?;
            r
        })
    }

    fn revision(&self) -> BoxFuture<'_, Result<Revision>> {
        Box::pin(async move {
            self.pass("revision").await?;
            self.inner.revision().await
        })
    }
}
