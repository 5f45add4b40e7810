//! Brokers of a cluster and who serves what.
//!
//! Each broker registers `brokers/<node id>` → its advertised listeners
//! (`NAME://host:port,NAME://host:port`; a registration of an older Folio, `host:port`, is
//! one `PLAINTEXT` listener) on a lease it keeps alive; the live brokers are the
//! registrations that exist. Every partition and every group has one
//! owner among the live brokers, chosen by rendezvous hashing (the live broker with the
//! highest hash of (key, node id)), so every broker computes the same owner from the same
//! list, and a broker joining or leaving moves only its share.
//!
//! A broker that dies stops renewing its lease; once the lease expires its registration
//! disappears, the others recompute, and each new owner opens the partition's managed log,
//! which fences the dead owner's last ledger and recovers it before appending (D3): nothing
//! is copied, nothing acknowledged is lost.
//!
//! The controller (topic deletion) is elected by lease: `<root>/controller` holds a node id
//! and is written on that broker's lease, only when absent and only by the lowest live node
//! id; it disappears with the lease (a dead controller) or at a clean stop, and the next
//! lowest live broker claims it at its next poll. So there is at most one holder, and a
//! standalone's one broker is always it. A broker that sees it no longer owns an open
//! partition closes it (so the new owner's fence finds it idle); if it is slower than
//! that, the fence stops it anyway. Group membership moves the same way (members rejoin
//! at the new coordinator; committed offsets are in the metadata store).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use folio_meta::keys::Keys;
use folio_meta::{LeaseId, MetaError, MetadataStore, Txn, list_all};
use tokio::sync::watch;

/// A live broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    /// Its advertised listeners, in its configured order.
    pub endpoints: Vec<Endpoint>,
}

/// One advertised listener of a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub listener: String,
    pub host: String,
    pub port: i32,
}

impl BrokerInfo {
    /// The endpoint of the listener named `listener`, if the broker has one.
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.listener == listener)
    }

    /// The registration value (see the module doc).
    pub fn registration(&self) -> String {
        let eps: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| format!("{}://{}:{}", e.listener, e.host, e.port))
            .collect();
        eps.join(",")
    }

    /// Reads a registration value; `None` if it is damaged.
    pub fn parse_registration(node_id: i32, value: &str) -> Option<BrokerInfo> {
        let mut endpoints = Vec::new();
        for part in value.split(',') {
            let (listener, addr) = part.split_once("://").unwrap_or(("PLAINTEXT", part));
            let (host, port) = addr.rsplit_once(':')?;
            endpoints.push(Endpoint {
                listener: listener.to_string(),
                host: host.to_string(),
                port: port.parse().ok()?,
            });
        }
        Some(BrokerInfo { node_id, endpoints })
    }
}

/// The live brokers as this broker last saw them (sorted by node id).
#[derive(Debug)]
pub struct Membership {
    me: BrokerInfo,
    live: RwLock<Vec<BrokerInfo>>,
    /// Bumped whenever the live set changes.
    pub changes: watch::Sender<u64>,
    /// Revoke the lease when stopping (false after `Broker::abort`: a simulated crash).
    pub revoke_on_stop: std::sync::atomic::AtomicBool,
    /// The controller's node id as last read from its lease-bound claim (-1: none).
    controller: std::sync::atomic::AtomicI32,
    /// Whether this broker is the controller, for the work only the controller does (the
    /// trash deleter waits on it).
    is_controller: watch::Sender<bool>,
}

/// FNV-1a over `key` then `node_id`: stable across processes and versions.
fn score(key: &[u8], node_id: i32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.iter().chain(node_id.to_le_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Finalise (splitmix64) so nearby keys spread.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Membership {
    /// The membership of a broker that knows only itself so far.
    pub fn new(me: BrokerInfo) -> Arc<Membership> {
        Arc::new(Membership {
            live: RwLock::new(vec![me.clone()]),
            me,
            changes: watch::channel(0).0,
            revoke_on_stop: std::sync::atomic::AtomicBool::new(true),
            controller: std::sync::atomic::AtomicI32::new(-1),
            is_controller: watch::channel(false).0,
        })
    }

    /// This broker.
    pub fn me(&self) -> &BrokerInfo {
        &self.me
    }

    /// The live brokers (this one always among them while it runs).
    pub fn live(&self) -> Vec<BrokerInfo> {
        self.live.read().expect("live lock").clone()
    }

    /// The owner of `key` among the live brokers.
    pub fn owner(&self, key: &[u8]) -> BrokerInfo {
        let live = self.live.read().expect("live lock");
        live.iter()
            .max_by_key(|b| (score(key, b.node_id), b.node_id))
            .cloned()
            .unwrap_or_else(|| self.me.clone())
    }

    /// Whether this broker owns `key` (it coordinates the group or partition the key names).
    pub fn owns(&self, key: &[u8]) -> bool {
        self.owner(key).node_id == self.me.node_id
    }

    /// The controller: the holder of the lease-bound claim as last read (-1: none yet).
    pub fn controller(&self) -> i32 {
        self.controller.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Opens while this broker is the controller, closes when it stops being it.
    pub fn controller_gate(&self) -> watch::Receiver<bool> {
        self.is_controller.subscribe()
    }

    /// Whether this broker is the lowest live node id (the one that may claim the controller).
    fn lowest_live(&self) -> bool {
        self.live.read().expect("live lock").iter().map(|b| b.node_id).min()
            == Some(self.me.node_id)
    }

    fn set_controller(&self, id: i32) {
        let was = self.controller.swap(id, std::sync::atomic::Ordering::SeqCst);
        if was != id {
            tracing::info!(controller = id, me = self.me.node_id, "controller changed");
            self.changes.send_modify(|n| *n += 1);
        }
        self.is_controller.send_if_modified(|was| {
            let now = id == self.me.node_id;
            std::mem::replace(was, now) != now
        });
    }

    fn set_live(&self, mut live: Vec<BrokerInfo>) -> bool {
        if !live.iter().any(|b| b.node_id == self.me.node_id) {
            live.push(self.me.clone());
        }
        live.sort_by_key(|b| b.node_id);
        let mut cur = self.live.write().expect("live lock");
        if *cur == live {
            return false;
        }
        tracing::info!(
            brokers = ?live.iter().map(|b| b.node_id).collect::<Vec<_>>(),
            "live brokers changed"
        );
        *cur = live;
        self.changes.send_modify(|n| *n += 1);
        true
    }
}

/// The ownership key of a partition.
pub fn partition_key(topic: uuid::Uuid, partition: i32) -> Vec<u8> {
    let mut k = topic.as_bytes().to_vec();
    k.extend_from_slice(&partition.to_le_bytes());
    k
}

/// The ownership key of a group.
pub fn group_key(group: &str) -> Vec<u8> {
    let mut k = b"group:".to_vec();
    k.extend_from_slice(group.as_bytes());
    k
}

/// Registers this broker on a fresh lease. While a registration of the same node id with
/// another address exists (this broker before a crash, whose lease has not expired yet, or
/// another broker with the same id), it waits, up to twice the lease TTL, then refuses.
pub async fn register(
    meta: &dyn MetadataStore,
    keys: &Keys,
    me: &BrokerInfo,
    ttl: Duration,
) -> Result<LeaseId, String> {
    let k = keys.broker(me.node_id);
    let value = me.registration();
    let deadline = tokio::time::Instant::now() + 2 * ttl;
    let mut logged = false;
    loop {
        match meta.get(&k).await.map_err(|e| format!("reading {k}: {e}"))? {
            Some(v) if v.value != value.as_bytes() => {
                let holder = String::from_utf8_lossy(&v.value).to_string();
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!(
                        "node id {} is registered by {holder} and stayed so for twice the lease TTL ({ttl:?}): another broker runs with this id; use another --node-id",
                        me.node_id
                    ));
                }
                if !logged {
                    tracing::info!(node_id = me.node_id, %holder, ?ttl, "node id still registered (an earlier run that died?); waiting for its lease to expire");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => break,
        }
    }
    let lease = meta.grant_lease(ttl).await.map_err(|e| format!("granting a lease: {e}"))?;
    meta.txn(Txn::new().put_with_lease(k.clone(), value.into_bytes(), lease))
        .await
        .map_err(|e| format!("registering {k}: {e}"))?;
    Ok(lease)
}

/// Reads the live brokers, then the controller claim (claiming it if free and this broker
/// is the lowest live): what a broker does before it serves.
pub async fn join(
    meta: &dyn MetadataStore,
    keys: &Keys,
    membership: &Membership,
    lease: LeaseId,
) -> Result<(), MetaError> {
    refresh(meta, keys, membership).await?;
    elect(meta, keys, membership, lease).await?;
    Ok(())
}

/// Reads the controller claim, and claims it on `lease` if it is free and this broker is
/// the lowest live node id. Returns the holder (-1: none).
pub async fn elect(
    meta: &dyn MetadataStore,
    keys: &Keys,
    membership: &Membership,
    lease: LeaseId,
) -> Result<i32, MetaError> {
    let key = keys.controller();
    let read = |v: Option<folio_meta::Versioned>| {
        v.map_or(-1, |v| String::from_utf8_lossy(&v.value).parse::<i32>().unwrap_or(-1))
    };
    let mut holder = read(meta.get(&key).await?);
    if holder == -1 && membership.lowest_live() {
        let me = membership.me.node_id;
        let claim = Txn::new().compare(folio_meta::Compare::Absent(key.clone())).put_with_lease(
            key.clone(),
            me.to_string().into_bytes(),
            lease,
        );
        // Claimed, or someone else was faster: then read who.
        holder = if meta.txn(claim).await?.succeeded { me } else { read(meta.get(&key).await?) };
    }
    membership.set_controller(holder);
    Ok(holder)
}

/// Removes this broker's registration (a clean stop: its partitions move at once) and its
/// controller claim, if it holds it (the next broker claims it at once).
pub async fn unregister(meta: &dyn MetadataStore, keys: &Keys, node_id: i32) {
    let key = keys.controller();
    if let Ok(Some(v)) = meta.get(&key).await
        && v.value == node_id.to_string().as_bytes()
    {
        let _ = meta.delete(&key, folio_meta::Expect::Version(v.version)).await;
    }
    if let Err(e) = meta.delete(&keys.broker(node_id), folio_meta::Expect::Any).await {
        tracing::warn!(node_id, error = %e, "removing the broker registration failed; it expires with its lease");
    }
}

async fn refresh(
    meta: &dyn MetadataStore,
    keys: &Keys,
    membership: &Membership,
) -> Result<bool, MetaError> {
    let p = keys.brokers();
    let mut live = Vec::new();
    for v in list_all(meta, &p).await? {
        let Ok(node_id) = v.key[p.len()..].parse::<i32>() else { continue };
        let value = String::from_utf8_lossy(&v.value);
        let Some(b) = BrokerInfo::parse_registration(node_id, &value) else {
            tracing::warn!(key = %v.key, %value, "a broker registration that does not parse; skipped");
            continue;
        };
        live.push(b);
    }
    Ok(membership.set_live(live))
}

/// Keeps the lease alive (registering again if it expired), the live list fresh and the
/// controller claim read (claimed when free and this broker is the lowest live), every
/// `poll`, until `stop`.
pub async fn maintain(
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    membership: Arc<Membership>,
    mut lease: LeaseId,
    ttl: Duration,
    poll: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_renew = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = async { let _ = stop.wait_for(|s| *s).await; } => {
                if membership.revoke_on_stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let _ = meta.revoke_lease(lease).await;
                }
                return;
            }
        }
        if last_renew.elapsed() >= ttl / 3 {
            last_renew = tokio::time::Instant::now();
            match meta.keep_alive(lease).await {
                Ok(()) => {}
                Err(MetaError::LeaseNotFound(_)) => {
                    tracing::warn!(
                        node_id = membership.me.node_id,
                        "broker lease expired; registering again"
                    );
                    match register(meta.as_ref(), &keys, &membership.me, ttl).await {
                        Ok(l) => lease = l,
                        Err(e) => tracing::warn!(error = %e, "registering again failed"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "broker lease keep-alive failed; retrying"),
            }
        }
        if let Err(e) = refresh(meta.as_ref(), &keys, &membership).await {
            tracing::warn!(error = %e, "listing live brokers failed");
        }
        if let Err(e) = elect(meta.as_ref(), &keys, &membership, lease).await {
            tracing::warn!(error = %e, "reading the controller claim failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let m = Membership::new(b(1));
        m.set_live(vec![b(1), b(2), b(3)]);
        let keys: Vec<Vec<u8>> =
            (0..300).map(|p| partition_key(uuid::Uuid::from_u128(9), p)).collect();
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
        let (m1, m2) = (Membership::new(b(1)), Membership::new(b(2)));
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
        unregister(&meta, &keys, 2).await;
        assert_eq!(elect(&meta, &keys, &m1, l1).await.unwrap(), 1);
    }
}
