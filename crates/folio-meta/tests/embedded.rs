//! The conformance suite on the embedded backend, plus its own crash-durability tests.

mod suite;

use std::sync::Arc;
use std::time::Duration;

use folio_meta::embedded::{EmbeddedConfig, EmbeddedStore};
use folio_meta::*;
use suite::Backend;

struct Embedded {
    dir: tempfile::TempDir,
    clock: ManualClock,
    store: Option<Arc<EmbeddedStore>>,
}

impl Embedded {
    fn open(dir: &std::path::Path, clock: &ManualClock) -> Arc<EmbeddedStore> {
        Arc::new(
            EmbeddedStore::open_with(dir, EmbeddedConfig::default(), Arc::new(clock.clone()))
                .unwrap(),
        )
    }

    fn embedded(&self) -> &EmbeddedStore {
        self.store.as_ref().unwrap()
    }
}

async fn make(_name: &str) -> Embedded {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let store = Some(Embedded::open(dir.path(), &clock));
    Embedded { dir, clock, store }
}

impl Backend for Embedded {
    fn store(&self) -> Arc<dyn MetadataStore> {
        self.store.clone().unwrap()
    }
    fn root(&self) -> String {
        "test".into()
    }
    async fn expire(&self, ttl: Duration) {
        self.clock.advance(ttl + Duration::from_millis(1));
        self.embedded().expire_due().unwrap();
    }
    async fn reopen(&mut self) {
        let old = self.store.take().unwrap();
        assert_eq!(Arc::strong_count(&old), 1, "the test holds no other handle");
        drop(old);
        self.store = Some(Embedded::open(self.dir.path(), &self.clock));
    }
    async fn compact(&self, revision: Revision) {
        self.embedded().compact(revision).unwrap();
    }
}

conformance_tests!(make);

#[tokio::test]
async fn a_lease_kept_alive_outlives_its_ttl_and_leases_survive_a_restart() {
    let mut be = make("x").await;
    let s = be.store();
    let lease = s.grant_lease(Duration::from_secs(10)).await.unwrap();
    s.txn(Txn::new().put_with_lease("k", bytes::Bytes::from_static(b"v"), lease)).await.unwrap();
    for _ in 0..5 {
        be.clock.advance(Duration::from_secs(6));
        s.keep_alive(lease).await.unwrap();
        assert_eq!(be.embedded().expire_due().unwrap(), 0);
    }
    drop(s);
    be.reopen().await;
    let s = be.store();
    assert_eq!(
        s.get("k").await.unwrap().unwrap().lease,
        Some(lease),
        "the lease and its key survive"
    );
    be.clock.advance(Duration::from_secs(11));
    assert_eq!(be.embedded().expire_due().unwrap(), 1);
    assert!(s.get("k").await.unwrap().is_none());
}

#[tokio::test]
async fn a_watcher_that_falls_behind_is_cut_off_with_compacted_never_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig { watch_queue_depth: 4, ..EmbeddedConfig::default() };
    let s = EmbeddedStore::open_with(dir.path(), config, Arc::new(ManualClock::new())).unwrap();
    let mut w = s.watch("p/", 0).await.unwrap();
    for i in 0..10 {
        s.put(&format!("p/{i}"), bytes::Bytes::from_static(b"v"), Expect::Any).await.unwrap();
    }
    let mut n = 0;
    loop {
        match w.next().await.unwrap() {
            Ok(_) => n += 1,
            Err(e) => {
                assert!(matches!(e, MetaError::Compacted { .. }), "{e}");
                break;
            }
        }
    }
    assert!(n < 10, "the queue overflowed before every event was delivered");
}

/// A transaction up to `txn_ops_max` compares and operations commits as one; a bigger one
/// is refused with a clear error and writes nothing.
#[tokio::test]
async fn transactions_are_bounded_by_txn_ops_max() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let max = store.txn_ops_max();
    assert_eq!(max, folio_meta::embedded::TXN_OPS_MAX);
    let mut txn = Txn::new();
    for i in 0..max / 2 {
        txn = txn.compare(Compare::Absent(format!("k/{i:05}"))).put(format!("k/{i:05}"), "v");
    }
    assert!(store.txn(txn).await.unwrap().succeeded);
    assert_eq!(list_all(&store, "k/").await.unwrap().len(), max / 2);
    let mut txn = Txn::new();
    for i in 0..=max {
        txn = txn.put(format!("big/{i:05}"), "v");
    }
    match store.txn(txn).await {
        Err(MetaError::InvalidArgument(m)) => assert!(m.contains("at most"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(list_all(&store, "big/").await.unwrap().is_empty(), "nothing written");
}
