//! A cache of metadata-store records kept current on every broker: listed once before
//! serving, then listed again on every change under its prefix (a watch), and after a
//! failed watch (a pause, then list and watch again), until the broker stops. The ACLs, the
//! client quotas and the leader epochs use it; a cache that can apply one change at a time
//! (`Watched::apply`: the leader epochs, whose prefix changes with every ledger roll) does,
//! the others list again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use folio_meta::keys::Keys;
use folio_meta::{MetadataStore, WatchEvent};
use tokio::sync::watch;

/// How long a cache waits after its watch failed before listing again.
const RESYNC_PAUSE: Duration = Duration::from_millis(500);

/// Something cached from the records under one prefix.
pub(crate) trait Watched: Send + Sync + 'static {
    /// What the cache holds, for logs ("ACL", "client quota").
    const WHAT: &'static str;
    /// The prefix its records live under.
    fn prefix(keys: &Keys) -> String;
    /// Lists the records again and replaces the cache.
    fn reload(
        &self,
        meta: &dyn MetadataStore,
        keys: &Keys,
    ) -> impl Future<Output = Result<(), folio_meta::MetaError>> + Send;
    /// Applies one change to the cache; `false` (the default) lists everything again.
    fn apply(&self, _keys: &Keys, _event: &WatchEvent) -> bool {
        false
    }
}

/// Keeps `cache` current until `stop` turns true (see the module doc).
pub(crate) async fn keep_current<T: Watched>(
    cache: Arc<T>,
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    mut stop: watch::Receiver<bool>,
) {
    let p = T::prefix(&keys);
    let what = T::WHAT;
    loop {
        let from = match meta.revision().await {
            Ok(r) => r + 1,
            Err(e) => {
                tracing::warn!(error = %e, "{what} cache: reading the revision failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RESYNC_PAUSE) => continue,
                    () = stopped(&mut stop) => return,
                }
            }
        };
        if let Err(e) = cache.reload(meta.as_ref(), &keys).await {
            tracing::warn!(error = %e, "{what} cache: listing failed; retrying");
        }
        let mut w = match meta.watch(&p, from).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "{what} cache: watching failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RESYNC_PAUSE) => continue,
                    () = stopped(&mut stop) => return,
                }
            }
        };
        loop {
            tokio::select! {
                ev = w.next() => match ev {
                    Some(Ok(event)) if cache.apply(&keys, &event) => {}
                    Some(Ok(_)) => {
                        if let Err(e) = cache.reload(meta.as_ref(), &keys).await {
                            tracing::warn!(error = %e, "{what} cache: listing failed");
                        }
                    }
                    _ => break, // ended: list and watch again
                },
                () = stopped(&mut stop) => return,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RESYNC_PAUSE) => {}
            () = stopped(&mut stop) => return,
        }
    }
}

/// Returns when `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
