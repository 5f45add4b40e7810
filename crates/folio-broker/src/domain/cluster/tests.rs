//! Membership, registration, self-fencing and the controller claim.
use super::lease::maintain;
use super::*;
use folio_testkit::poll::until;

fn b(id: i32) -> BrokerInfo {
    let e = |l: &str, port| Endpoint { listener: l.into(), host: "h".into(), port };
    BrokerInfo { node_id: id, endpoints: vec![e("PLAINTEXT", id), e("SASL_SSL", id + 100)] }
}

#[test]
fn registrations_round_trip_and_read_the_old_form() {
    let one = b(7);
    assert_eq!(BrokerInfo::parse_registration(7, &one.registration()), Some(one.clone()));
    assert_eq!(one.endpoint("SASL_SSL").map(|e| e.port), Some(107));
    let old = BrokerInfo::parse_registration(3, "10.0.0.1:9092").unwrap();
    assert_eq!(
        old.endpoint("PLAINTEXT").map(|e| (e.host.as_str(), e.port)),
        Some(("10.0.0.1", 9092))
    );
    for bad in ["", "PLAINTEXT://h", "X://h:port", "h:1,"] {
        assert_eq!(BrokerInfo::parse_registration(1, bad), None, "{bad}");
    }
}

#[test]
fn owners_spread_and_only_the_leavers_share_moves() {
    let m = Membership::new(b(1), folio_rt::ProcessClock::default());
    m.set_live(vec![b(1), b(2), b(3)]);
    let keys: Vec<Vec<u8>> = (0..300).map(|p| partition_key(uuid::Uuid::from_u128(9), p)).collect();
    let before: Vec<i32> = keys.iter().map(|k| m.owner(k).node_id).collect();
    for id in [1, 2, 3] {
        let n = before.iter().filter(|o| **o == id).count();
        assert!(n > 60, "broker {id} owns only {n} of 300");
    }
    m.set_live(vec![b(1), b(3)]);
    for (k, was) in keys.iter().zip(&before) {
        let now = m.owner(k).node_id;
        if *was != 2 {
            assert_eq!(now, *was, "a partition of a surviving broker moved");
        } else {
            assert_ne!(now, 2);
        }
    }
    // The broker itself is always live in its own view.
    m.set_live(vec![b(3)]);
    assert_eq!(m.live().len(), 2);
}

/// The controller claim: only the lowest live broker claims a free one; it holds it
/// until its lease ends, then the next lowest claims it.
#[tokio::test]
async fn the_controller_is_claimed_on_a_lease_by_the_lowest_live_broker() {
    let dir = tempfile::tempdir().unwrap();
    let meta = folio_meta::embedded::EmbeddedStore::open(dir.path()).unwrap();
    let keys = Keys::default();
    let (m1, m2) = (
        Membership::new(b(1), folio_rt::ProcessClock::default()),
        Membership::new(b(2), folio_rt::ProcessClock::default()),
    );
    m1.set_live(vec![b(1), b(2)]);
    m2.set_live(vec![b(1), b(2)]);
    let (l1, l2) = (
        meta.grant_lease(Duration::from_secs(60)).await.unwrap(),
        meta.grant_lease(Duration::from_secs(60)).await.unwrap(),
    );
    assert_eq!(elect(&meta, &keys, &m2, l2).await.unwrap(), -1, "2 is not the lowest");
    assert_eq!(elect(&meta, &keys, &m1, l1).await.unwrap(), 1);
    assert_eq!(elect(&meta, &keys, &m2, l2).await.unwrap(), 1);
    assert_eq!((m1.controller(), m2.controller()), (1, 1));
    // Broker 1's lease ends: the claim goes with it; broker 2, now the lowest, claims.
    meta.revoke_lease(l1).await.unwrap();
    m2.set_live(vec![b(2)]);
    assert_eq!(elect(&meta, &keys, &m2, l2).await.unwrap(), 2);
    // A broker 1 that comes back does not take it over.
    m1.set_live(vec![b(1), b(2)]);
    let l1 = meta.grant_lease(Duration::from_secs(60)).await.unwrap();
    assert_eq!(elect(&meta, &keys, &m1, l1).await.unwrap(), 2);
    // A clean stop of the holder frees it at once.
    unregister(&meta, &keys, 2, l2).await;
    assert_eq!(elect(&meta, &keys, &m1, l1).await.unwrap(), 1);
}

/// Waits for the next change of `m` that satisfies `cond` (membership events).
async fn changed_until(m: &Membership, what: &str, cond: impl Fn(&Membership) -> bool) {
    let mut rx = m.changes.subscribe();
    let wait = async {
        while !cond(m) {
            rx.changed().await.expect("membership alive");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: no such change within 30 s"));
}

/// #44 item 1: a node id is registered once. A second process with the same id and
/// the same address is refused while the first holds it, and its stop (another lease)
/// removes nothing of the first's registration or controller claim.
#[tokio::test]
async fn a_node_id_is_registered_once_and_only_its_holder_unregisters_it() {
    let dir = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> =
        Arc::new(folio_meta::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let keys = Keys::default();
    let ttl = Duration::from_secs(1);
    let first =
        register(meta.as_ref(), &keys, &b(1), ttl, &Default::default()).await.unwrap().lease;
    let m1 = Membership::new(b(1), folio_rt::ProcessClock::default());
    assert_eq!(elect(meta.as_ref(), &keys, &m1, first).await.unwrap(), 1);
    let keeper = {
        let meta = meta.clone();
        tokio::spawn(async move {
            loop {
                meta.keep_alive(first).await.unwrap();
                tokio::time::sleep(ttl / 5).await;
            }
        })
    };
    let e = register(meta.as_ref(), &keys, &b(1), ttl, &Default::default()).await.unwrap_err();
    assert!(matches!(e, super::RegisterError::NodeIdTaken { node_id: 1, .. }), "{e}");
    assert!(e.to_string().contains("another broker runs with this id"), "{e}");
    let other = meta.grant_lease(ttl).await.unwrap();
    assert_eq!(
        try_register(meta.as_ref(), &keys, &b(1), other).await.unwrap(),
        Registered::Held(b(1).registration())
    );
    unregister(meta.as_ref(), &keys, 1, other).await;
    let held = |k: String| {
        let meta = meta.clone();
        async move { meta.get(&k).await.unwrap().map(|v| v.lease) }
    };
    assert_eq!(held(keys.broker(1)).await, Some(Some(first)), "the other's stop removed it");
    assert_eq!(held(keys.controller()).await, Some(Some(first)));
    keeper.abort();
    unregister(meta.as_ref(), &keys, 1, first).await;
    assert_eq!(held(keys.broker(1)).await, None);
    assert_eq!(held(keys.controller()).await, None);
}

/// #44 item 1: a broker cut off from the store stops serving before its lease can
/// expire there (it owns nothing, its live view leaves itself out, it drops the
/// controller), stays fenced while another process holds its node id, and serves again
/// once it holds its registration on a new lease.
#[tokio::test]
async fn a_broker_cut_from_the_store_fences_itself_within_its_lease_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetadataStore> =
        Arc::new(folio_meta::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let faulty = Arc::new(folio_meta::faulty::FaultyStore::new(store.clone()));
    let keys = Keys::default();
    let ttl = Duration::from_secs(3);
    let granted_at = tokio::time::Instant::now();
    let first =
        register(faulty.as_ref(), &keys, &b(1), ttl, &Default::default()).await.unwrap().lease;
    let m = Membership::new(b(1), folio_rt::ProcessClock::default());
    m.set_lease(first);
    let (stop, stopped) = watch::channel(false);
    let poll = Duration::from_millis(50);
    tokio::spawn(maintain(faulty.clone(), keys.clone(), m.clone(), granted_at, ttl, poll, stopped));
    // Broker 2, on the store itself, kept alive throughout.
    let two = register(store.as_ref(), &keys, &b(2), ttl, &Default::default()).await.unwrap().lease;
    let keeper = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                let _ = store.keep_alive(two).await;
                tokio::time::sleep(ttl / 6).await;
            }
        })
    };
    changed_until(&m, "broker 2 seen", |m| m.live().len() == 2).await;
    changed_until(&m, "controller claimed", |m| m.controller() == 1).await;
    let ours: Vec<Vec<u8>> =
        (0..40).map(|p| partition_key(uuid::Uuid::from_u128(5), p)).filter(|k| m.owns(k)).collect();
    assert!(!ours.is_empty());

    faulty.cut(true);
    changed_until(&m, "fenced", |m| m.fenced().is_some()).await;
    // Fenced before its lease expired at the store: its registration is still there.
    let registered = store.get(&keys.broker(1)).await.unwrap().map(|v| v.lease);
    assert_eq!(registered, Some(Some(first)), "fenced only after its lease expired");
    assert!(ours.iter().all(|k| !m.owns(k) && m.owner(k).node_id == 2));
    assert_eq!(m.live().iter().map(|b| b.node_id).collect::<Vec<_>>(), vec![2]);
    // Metadata still lists it: broker 2 may name it coordinator until its lease expires.
    let listed: Vec<i32> = m.registered().iter().map(|b| b.node_id).collect();
    assert_eq!(listed, vec![1, 2]);
    assert_eq!(m.controller(), -1);
    assert!(!*m.controller_gate().borrow());
    assert!(m.fenced().unwrap().contains("not renewed"), "{:?}", m.fenced());

    // Its lease expires at the store; another process takes node id 1 meanwhile.
    until(Duration::from_secs(30), "the lease expired", || {
        let store = store.clone();
        let k = keys.broker(1);
        async move { store.get(&k).await.unwrap().is_none() }
    })
    .await;
    let intruder = store.grant_lease(Duration::from_secs(60)).await.unwrap();
    let taken = try_register(store.as_ref(), &keys, &b(1), intruder).await.unwrap();
    assert_eq!(taken, Registered::Created(intruder));
    faulty.cut(false);
    changed_until(&m, "told another process holds the id", |m| {
        m.fenced().is_some_and(|f| f.contains("another process"))
    })
    .await;
    assert!(ours.iter().all(|k| !m.owns(k)));
    // The other process stops: broker 1 registers again on its new lease and serves.
    unregister(store.as_ref(), &keys, 1, intruder).await;
    changed_until(&m, "serving again", |m| m.fenced().is_none()).await;
    let now = store.get(&keys.broker(1)).await.unwrap().and_then(|v| v.lease);
    assert_eq!(now, Some(m.lease()));
    assert_ne!(m.lease(), first);
    assert!(ours.iter().all(|k| m.owns(k)));
    stop.send_replace(true);
    keeper.abort();
}

/// #46: a paused broker (its process clock stopped, the store out of reach) does not notice
/// its lease running out, so its membership loop never fences it during the pause; the
/// moment it runs again it owns nothing, before its loop has run once (the lease is checked
/// at every use), and it serves again once it holds its registration on a new lease.
#[tokio::test]
async fn a_broker_paused_past_its_lease_owns_nothing_the_moment_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetadataStore> =
        Arc::new(folio_meta::embedded::EmbeddedStore::open(dir.path()).unwrap());
    let faulty = Arc::new(folio_meta::faulty::FaultyStore::new(store.clone()));
    let keys = Keys::default();
    let ttl = Duration::from_secs(1);
    let clock = folio_rt::ProcessClock::stoppable();
    let granted_at = clock.now();
    let first =
        register(faulty.as_ref(), &keys, &b(1), ttl, &Default::default()).await.unwrap().lease;
    let m = Membership::new(b(1), clock.clone());
    m.set_lease(first);
    let (stop, stopped) = watch::channel(false);
    let poll = Duration::from_millis(50);
    tokio::spawn(maintain(faulty.clone(), keys.clone(), m.clone(), granted_at, ttl, poll, stopped));
    changed_until(&m, "controller claimed", |m| m.controller() == 1).await;
    let ours: Vec<Vec<u8>> = (0..8).map(|p| partition_key(uuid::Uuid::from_u128(5), p)).collect();
    assert!(ours.iter().all(|k| m.owns(k)), "alone, it owns everything");

    // The pause: its clock stops and nothing it sends arrives.
    assert!(clock.stop());
    faulty.cut(true);
    let paused = tokio::time::Instant::now();
    until(Duration::from_secs(30), "its lease expired at the store", || {
        let store = store.clone();
        let k = keys.broker(1);
        async move { store.get(&k).await.unwrap().is_none() }
    })
    .await;
    assert!(paused.elapsed() > ttl * FENCE_AFTER.0 / FENCE_AFTER.1);
    assert_eq!(m.fenced(), None, "paused, it saw no time pass: its loop did not fence it");
    // It runs again: no await between here and the checks, so its loop has not run.
    clock.resume();
    assert!(ours.iter().all(|k| !m.owns(k)), "owns a partition on a lease that ran out");
    assert!(ours.iter().all(|k| m.owner(k).node_id == NO_OWNER));
    assert!(m.fenced().is_some_and(|f| f.contains("ran out")), "{:?}", m.fenced());
    faulty.cut(false);
    changed_until(&m, "serving again", |m| m.fenced().is_none()).await;
    assert_ne!(m.lease(), first, "on a new lease");
    assert!(ours.iter().all(|k| m.owns(k)));
    stop.send_replace(true);
}
