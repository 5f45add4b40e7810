//! The conformance suite: every backend of `MetadataStore` must pass every test here.
//! A backend provides a [`Backend`]; `conformance_tests!` turns the suite into `#[test]`s.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_meta::records::{Record, Update, update};
use folio_meta::*;

pub trait Backend: Send + Sync {
    fn store(&self) -> Arc<dyn MetadataStore>;
    /// A prefix no other test uses.
    fn root(&self) -> String;
    /// Lets a lease of `ttl` run out without keep-alives, and returns once the backend has
    /// had the chance to expire it.
    fn expire(&self, ttl: Duration) -> impl std::future::Future<Output = ()> + Send;
    /// Closes and reopens the store (a restart that loses nothing committed).
    fn reopen(&mut self) -> impl std::future::Future<Output = ()> + Send;
    /// Drops watch history up to `revision`.
    fn compact(&self, revision: Revision) -> impl std::future::Future<Output = ()> + Send;
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

async fn next_event(w: &mut Watch) -> Result<WatchEvent> {
    tokio::time::timeout(Duration::from_secs(15), w.next())
        .await
        .expect("watch event in time")
        .expect("watch open")
}

pub async fn cas_versions_and_conflicts(be: &mut impl Backend) {
    let s = be.store();
    let k = format!("{}/k", be.root());
    let v1 = s.put(&k, b("one"), Expect::Absent).await.unwrap();
    let got = s.get(&k).await.unwrap().unwrap();
    assert_eq!((got.value.clone(), got.version, got.create_revision), (b("one"), v1, v1));
    assert!(matches!(s.put(&k, b("x"), Expect::Absent).await, Err(MetaError::Conflict { .. })));
    let v2 = s.put(&k, b("two"), Expect::Version(v1)).await.unwrap();
    assert!(v2 > v1);
    assert!(matches!(
        s.put(&k, b("stale"), Expect::Version(v1)).await,
        Err(MetaError::Conflict { .. })
    ));
    assert!(matches!(s.delete(&k, Expect::Version(v1)).await, Err(MetaError::Conflict { .. })));
    assert_eq!(s.get(&k).await.unwrap().unwrap().value, b("two"), "failed writes changed nothing");
    assert!(s.delete(&k, Expect::Version(v2)).await.unwrap());
    assert!(s.get(&k).await.unwrap().is_none());
    assert!(!s.delete(&k, Expect::Any).await.unwrap(), "deleting a missing key reports false");
    let v3 = s.put(&k, b("again"), Expect::Absent).await.unwrap();
    assert!(v3 > v2, "a re-created key never reuses a version (no ABA)");
    assert!(matches!(
        s.put(&k, b("x"), Expect::Version(v1)).await,
        Err(MetaError::Conflict { .. })
    ));
}

pub async fn paged_list_by_prefix(be: &mut impl Backend) {
    let s = be.store();
    let root = be.root();
    for i in 0..25 {
        s.put(&format!("{root}/items/{i:03}"), b("v"), Expect::Any).await.unwrap();
    }
    s.put(&format!("{root}/itemsX"), b("not mine"), Expect::Any).await.unwrap();
    s.put(&format!("{root}/item"), b("not mine"), Expect::Any).await.unwrap();
    let prefix = format!("{root}/items/");
    let p1 = s.list(&prefix, None, 10).await.unwrap();
    assert_eq!(p1.items.len(), 10);
    assert!(p1.more);
    let mut all: Vec<String> = p1.items.iter().map(|v| v.key.clone()).collect();
    let mut after = all.last().cloned();
    loop {
        let p = s.list(&prefix, after.as_deref(), 10).await.unwrap();
        all.extend(p.items.iter().map(|v| v.key.clone()));
        after = all.last().cloned();
        if !p.more {
            break;
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("{prefix}{i:03}")).collect();
    assert_eq!(all, expected, "every key once, in order, nothing outside the prefix");
    assert_eq!(list_all(s.as_ref(), &prefix).await.unwrap().len(), 25);
    let empty = s.list(&format!("{root}/none/"), None, 10).await.unwrap();
    assert!(empty.items.is_empty() && !empty.more);
}

pub async fn transactions_apply_all_or_nothing(be: &mut impl Backend) {
    let s = be.store();
    let root = be.root();
    let (a, bk, c) = (format!("{root}/a"), format!("{root}/b"), format!("{root}/c"));
    let va = s.put(&a, b("a1"), Expect::Any).await.unwrap();
    // One failing compare: no op applies.
    let failed = Txn::new()
        .compare(Compare::Version(a.clone(), va))
        .compare(Compare::Exists(c.clone()))
        .put(bk.clone(), b("b1"))
        .delete(a.clone());
    let out = s.txn(failed).await.unwrap();
    assert!(!out.succeeded);
    assert!(s.get(&bk).await.unwrap().is_none(), "half of a failed transaction applied");
    assert_eq!(s.get(&a).await.unwrap().unwrap().value, b("a1"));
    // All compares hold: every op applies at one revision.
    let ok = Txn::new()
        .compare(Compare::Version(a.clone(), va))
        .compare(Compare::Absent(c.clone()))
        .put(bk.clone(), b("b1"))
        .put(c.clone(), b("c1"))
        .delete(a.clone());
    let out = s.txn(ok).await.unwrap();
    assert!(out.succeeded);
    assert!(s.get(&a).await.unwrap().is_none());
    let (gb, gc) = (s.get(&bk).await.unwrap().unwrap(), s.get(&c).await.unwrap().unwrap());
    assert_eq!((gb.version, gc.version), (out.revision, out.revision));
    // The same transaction again fails: `a` is gone and `c` exists.
    let again = Txn::new().compare(Compare::Absent(c.clone())).put(bk.clone(), b("b2"));
    assert!(!s.txn(again).await.unwrap().succeeded);
    assert_eq!(s.get(&bk).await.unwrap().unwrap().value, b("b1"));
}

pub async fn watch_delivers_every_change_in_order_and_resumes(be: &mut impl Backend) {
    let s = be.store();
    let root = be.root();
    let prefix = format!("{root}/w/");
    let start = s.revision().await.unwrap() + 1;
    let mut w = s.watch(&prefix, start).await.unwrap();
    let mut expected = Vec::new();
    for i in 0..10 {
        let k = format!("{prefix}{}", i % 4);
        let rev = s.put(&k, b(&format!("v{i}")), Expect::Any).await.unwrap();
        expected.push((EventKind::Put, k, rev));
        s.put(&format!("{root}/elsewhere"), b("x"), Expect::Any).await.unwrap();
    }
    let k0 = format!("{prefix}0");
    let out = s.txn(Txn::new().delete(k0.clone()).put(format!("{prefix}t"), b("t"))).await.unwrap();
    expected.push((EventKind::Delete, k0, out.revision));
    expected.push((EventKind::Put, format!("{prefix}t"), out.revision));
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let e = next_event(&mut w).await.unwrap();
        got.push((e.kind, e.key, e.revision));
    }
    assert_eq!(got, expected, "exactly the changes under the prefix, in revision order");
    // Resume from the revision of the 6th event: the same tail, each once.
    let mut w2 = s.watch(&prefix, expected[5].2).await.unwrap();
    let mut tail = Vec::new();
    while tail.len() < expected.len() - 5 {
        let e = next_event(&mut w2).await.unwrap();
        tail.push((e.kind, e.key, e.revision));
    }
    assert_eq!(tail, expected[5..].to_vec());
    let last = s.put(&format!("{prefix}z"), b("z"), Expect::Any).await.unwrap();
    let e = next_event(&mut w2).await.unwrap();
    assert_eq!(e.revision, last, "no duplicate after the resumed history");
}

pub async fn watch_from_compacted_history_says_so(be: &mut impl Backend) {
    let s = be.store();
    let root = be.root();
    let first = s.put(&format!("{root}/c/1"), b("1"), Expect::Any).await.unwrap();
    for i in 2..6 {
        s.put(&format!("{root}/c/{i}"), b("x"), Expect::Any).await.unwrap();
    }
    let now = s.revision().await.unwrap();
    be.compact(now - 1).await;
    let err = match s.watch(&format!("{root}/c/"), first).await {
        Err(e) => e,
        Ok(mut w) => next_event(&mut w).await.unwrap_err(),
    };
    assert!(matches!(err, MetaError::Compacted { .. }), "{err}");
    assert!(err.to_string().contains("re-list"), "the error says what to do: {err}");
}

pub async fn leases_expire_and_revoke_their_keys(be: &mut impl Backend) {
    let s = be.store();
    let root = be.root();
    let ttl = Duration::from_secs(2);
    let revoked = s.grant_lease(ttl).await.unwrap();
    let k1 = format!("{root}/l/revoked");
    s.txn(Txn::new().put_with_lease(k1.clone(), b("x"), revoked)).await.unwrap();
    assert_eq!(s.get(&k1).await.unwrap().unwrap().lease, Some(revoked));
    s.keep_alive(revoked).await.unwrap();
    s.revoke_lease(revoked).await.unwrap();
    assert!(s.get(&k1).await.unwrap().is_none(), "revoking deletes the lease's keys");
    let ka = s.keep_alive(revoked).await;
    assert!(matches!(ka, Err(MetaError::LeaseNotFound(_))), "{ka:?}");
    let put = s.txn(Txn::new().put_with_lease(format!("{root}/l/x"), b("x"), revoked)).await;
    assert!(matches!(put, Err(MetaError::LeaseNotFound(_))), "{put:?}");

    let expiring = s.grant_lease(ttl).await.unwrap();
    let k2 = format!("{root}/l/expiring");
    let plain = format!("{root}/l/plain");
    s.txn(Txn::new().put_with_lease(k2.clone(), b("x"), expiring).put(plain.clone(), b("p")))
        .await
        .unwrap();
    let mut w = s.watch(&k2, 0).await.unwrap();
    be.expire(ttl).await;
    let e = next_event(&mut w).await.unwrap();
    assert_eq!((e.kind, e.key.as_str()), (EventKind::Delete, k2.as_str()));
    assert!(s.get(&k2).await.unwrap().is_none());
    assert!(s.get(&plain).await.unwrap().is_some(), "keys without the lease stay");
    assert!(matches!(s.keep_alive(expiring).await, Err(MetaError::LeaseNotFound(_))));
}

pub async fn ids_are_unique_under_concurrency_and_restart(be: &mut impl Backend) {
    let seq = format!("{}/ids/ledger", be.root());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (s, seq) = (be.store(), seq.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..25 {
                ids.push(s.next_id(&seq).await.unwrap());
            }
            ids
        }));
    }
    let mut seen = BTreeSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "id {id} handed out twice");
        }
    }
    be.reopen().await;
    let s = be.store();
    for _ in 0..20 {
        let id = s.next_id(&seq).await.unwrap();
        assert!(seen.insert(id), "id {id} handed out again after a restart");
    }
}

#[derive(Debug, PartialEq)]
struct Counter(u64);

impl Record for Counter {
    fn encode(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0.to_le_bytes())
    }
    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let a: [u8; 8] = b
            .try_into()
            .map_err(|_| MetaError::Corrupt { key: key.into(), detail: "len".into() })?;
        Ok(Counter(u64::from_le_bytes(a)))
    }
}

pub async fn cas_update_loop_loses_no_update_under_contention(be: &mut impl Backend) {
    let key = format!("{}/counter", be.root());
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (s, key) = (be.store(), key.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                update::<Counter>(s.as_ref(), &key, |c| {
                    Ok(Update::Write(Counter(c.map_or(0, |c| c.0) + 1)))
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let s = be.store();
    let (c, _) =
        update::<Counter>(s.as_ref(), &key, |_| Ok(Update::Nothing)).await.unwrap().unwrap();
    assert_eq!(c, Counter(90));
    assert!(update::<Counter>(s.as_ref(), &key, |_| Ok(Update::Delete)).await.unwrap().is_none());
    assert!(s.get(&key).await.unwrap().is_none());
}

pub async fn limits_and_bad_arguments_are_clear_errors(be: &mut impl Backend) {
    let s = be.store();
    let big = Bytes::from(vec![0u8; VALUE_BYTES_MAX + 1]);
    let e = s.put(&format!("{}/big", be.root()), big, Expect::Any).await.unwrap_err();
    assert!(matches!(e, MetaError::InvalidArgument(_)), "{e}");
    let k = format!("{}/dup", be.root());
    let e = s.txn(Txn::new().put(k.clone(), b("1")).put(k.clone(), b("2"))).await.unwrap_err();
    assert!(matches!(e, MetaError::InvalidArgument(_)), "{e}");
    assert!(s.get(&k).await.unwrap().is_none());
    // Keys above KEY_BYTES_MAX (a hostile name: 30 000 '/' as a group id once panicked the
    // embedded store under its lock and wedged every later write) are refused everywhere,
    // and the store goes on working.
    let long = format!("{}/{}", be.root(), "/".repeat(30_000));
    let invalid = |r: Result<()>, what: &str| match r {
        Err(MetaError::InvalidArgument(m)) => assert!(m.contains("byte limit"), "{what}: {m}"),
        other => panic!("{what}: {other:?}"),
    };
    invalid(s.put(&long, b("x"), Expect::Any).await.map(|_| ()), "put");
    invalid(s.get(&long).await.map(|_| ()), "get");
    invalid(s.list(&long, None, 10).await.map(|_| ()), "list");
    invalid(s.txn(Txn::new().compare(Compare::Absent(long.clone()))).await.map(|_| ()), "compare");
    invalid(s.txn(Txn::new().delete(long.clone())).await.map(|_| ()), "delete");
    invalid(s.watch(&long, 0).await.map(|_| ()), "watch");
    let at_limit = format!("{}/", be.root());
    let at_limit = format!("{at_limit}{}", "k".repeat(KEY_BYTES_MAX - at_limit.len()));
    s.put(&at_limit, b("fits"), Expect::Absent).await.unwrap();
    assert_eq!(s.get(&at_limit).await.unwrap().unwrap().value, b("fits"));
    s.put(&k, b("still writable"), Expect::Absent).await.unwrap();
}

#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            cas_versions_and_conflicts,
            paged_list_by_prefix,
            transactions_apply_all_or_nothing,
            watch_delivers_every_change_in_order_and_resumes,
            watch_from_compacted_history_says_so,
            leases_expire_and_revoke_their_keys,
            ids_are_unique_under_concurrency_and_restart,
            cas_update_loop_loses_no_update_under_contention,
            limits_and_bad_arguments_are_clear_errors
        );
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let mut be = $make(stringify!($name)).await;
                suite::$name(&mut be).await;
            }
        )*
    };
}
