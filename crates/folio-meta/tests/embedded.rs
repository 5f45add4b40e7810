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

/// Transactions from many writers at once share group commits: each still sees every one
/// committed before it (a compare-and-set counter loses no increment), watchers get every
/// revision once and in order, and all of it is there after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transactions_commit_in_groups_as_if_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let mut watch = store.watch("counter", 0).await.unwrap();
    let (writers, increments) = (32, 20);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..writers {
        let store = store.clone();
        tasks.spawn(async move {
            for _ in 0..increments {
                loop {
                    let now = store.get("counter").await.unwrap();
                    let (n, compare) = match &now {
                        None => (0, Compare::Absent("counter".into())),
                        Some(v) => (
                            std::str::from_utf8(&v.value).unwrap().parse::<u64>().unwrap(),
                            Compare::Version("counter".into(), v.version),
                        ),
                    };
                    let txn = Txn::new().compare(compare).put("counter", (n + 1).to_string());
                    if store.txn(txn).await.unwrap().succeeded {
                        break;
                    }
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let total = writers * increments;
    let value = |v: &bytes::Bytes| std::str::from_utf8(v).unwrap().parse::<u64>().unwrap();
    let got = store.get("counter").await.unwrap().unwrap();
    assert_eq!(value(&got.value), total, "an increment was lost");
    let mut seen = Vec::new();
    while seen.len() < total as usize {
        seen.push(value(&watch.next().await.unwrap().unwrap().value));
    }
    assert_eq!(seen, (1..=total).collect::<Vec<_>>(), "watchers see every commit once, in order");
    drop(watch);
    drop(Arc::try_unwrap(store).expect("the only handle"));
    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(value(&store.get("counter").await.unwrap().unwrap().value), total);
}

/// Every non-empty file under `dir`, recursively.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if std::fs::metadata(&p).is_ok_and(|m| m.len() > 0) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[derive(Debug, Default)]
struct DamageOutcomes {
    refused: u32,
    intact: u32,
    answered_error: u32,
}

/// One seed: writes acknowledged, the store closed, one bit flipped in one of its files
/// (within what was written), the store opened again.
async fn damage_seed(seed: u64, outcomes: &mut DamageOutcomes) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let mut acked = std::collections::BTreeMap::new();
    {
        let store = Embedded::open(dir.path(), &clock);
        for i in 0..rng.random_range(5..80) {
            let key = format!("/test/k{}", rng.random_range(0..40));
            let len = rng.random_range(1..300);
            let value: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            store.put(&key, value.clone().into(), Expect::Any).await.unwrap();
            acked.insert(key, value);
            if i % 17 == 0 {
                let victim = format!("/test/k{}", rng.random_range(0..40));
                if store.delete(&victim, Expect::Any).await.unwrap() {
                    acked.remove(&victim);
                }
            }
        }
    }
    let files = files_under(dir.path());
    let file = &files[rng.random_range(0..files.len())];
    let mut bytes = std::fs::read(file).unwrap();
    let used = bytes.iter().rposition(|b| *b != 0).map_or(bytes.len(), |p| p + 1);
    let at = rng.random_range(0..used);
    bytes[at] ^= 1u8 << rng.random_range(0..8);
    std::fs::write(file, &bytes).unwrap();
    let case = format!("seed {seed}: bit flip in {} at offset {at}", file.display());
    let store =
        match EmbeddedStore::open_with(dir.path(), EmbeddedConfig::default(), Arc::new(clock)) {
            Err(e) => {
                let msg = e.to_string();
                let dir = dir.path().display().to_string();
                assert!(
                    msg.contains(&dir),
                    "{case}: the refusal names no file of the store: {msg}"
                );
                outcomes.refused += 1;
                return;
            }
            Ok(s) => s,
        };
    let mut errors = 0;
    for (key, want) in &acked {
        match store.get(key).await {
            Ok(Some(v)) => assert_eq!(&v.value[..], &want[..], "{case}: {key} came back different"),
            Ok(None) => panic!("{case}: acknowledged {key} is gone from a served store"),
            Err(_) => errors += 1,
        }
    }
    if errors == 0 {
        outcomes.intact += 1;
    } else {
        outcomes.answered_error += 1;
    }
}

/// Disk damage in the embedded store (D1, #21): a bit flipped in any of its files (fjall's
/// journal, tables, version files) ends in a refusal to open that names the store's
/// directory or a file in it, or in a store that serves every acknowledged key intact or
/// with an error. Never a panic (`folio_meta::fjall_files`), never a key silently gone
/// (fjall truncates its journal at a batch it cannot parse: the `commits` file, see
/// `embedded`). `FOLIO_DAMAGE_SEEDS=a..b` replays seeds (default `0..40`).
#[tokio::test]
async fn d1_bit_flips_in_the_store_files_are_refused_or_served_never_wrong_never_missing() {
    let mut outcomes = DamageOutcomes::default();
    let seeds = std::env::var("FOLIO_DAMAGE_SEEDS").ok();
    let range = match seeds.as_deref().and_then(|s| s.split_once("..")) {
        Some((a, b)) => a.parse().unwrap()..b.parse().unwrap(),
        None => 0..40u64,
    };
    for seed in range {
        damage_seed(seed, &mut outcomes).await;
    }
    println!("{outcomes:?}");
    if outcomes.refused + outcomes.intact + outcomes.answered_error >= 40 {
        assert!(outcomes.refused > 0 && outcomes.intact > 0, "{outcomes:?}");
    }
}
