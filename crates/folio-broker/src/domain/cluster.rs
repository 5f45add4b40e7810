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
//! Registration is create-if-absent on the broker's own lease: while a registration of the
//! node id exists (an earlier run whose lease has not expired, or another process with the
//! same id) a starting broker waits, at most twice the TTL, then refuses. Renewal,
//! re-registration and unregistration compare the lease, so one process never removes or
//! replaces another's registration, and two processes never both serve one node id.
//!
//! **Self-fencing.** A broker that cannot renew its lease for [`FENCE_AFTER`] of the TTL
//! (etcd unreachable, its lease lost, its registration held by another process) stops
//! serving: it takes itself out of its own view of the live brokers, so it owns no partition
//! and coordinates no group (they are closed and forgotten at once), Metadata and
//! FindCoordinator point elsewhere, and `/health` answers 503 with the reason. Its lease
//! can only have expired at etcd after that, so its successor starts after it stopped.
//! The moment to stop is counted on the process's clock ([`folio_rt::ProcessClock`]) and
//! checked at every use of the membership, not only by the loop that renews: a process
//! paused past it (SIGSTOP, a long GC pause, a starved VM) owns nothing from the moment it
//! runs again, before its loop has run once. It
//! comes back by renewing (or, its lease gone, registering again) and reading its
//! registration back as its own.
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
    /// Why this broker serves nothing now (it could not hold its registration), if it is
    /// fenced; `None` while it serves.
    fenced: RwLock<Option<String>>,
    /// The lease its registration is bound to (`NO_LEASE` before the first registration).
    lease: std::sync::atomic::AtomicI64,
    /// The process's clock, which the lease is counted on.
    clock: folio_rt::ProcessClock,
    /// The moment this broker must stop serving unless its lease is renewed before
    /// (`None`: no lease counted yet). Checked at every use, not only by the membership
    /// loop: a broker that was paused past it (its loop did not run) serves nothing from
    /// the moment it runs again.
    serve_until: RwLock<Option<tokio::time::Instant>>,
}

/// No lease held (before the first registration).
pub const NO_LEASE: LeaseId = 0;

/// The part of the lease TTL a broker may go without renewing before it fences itself. The
/// lease expires at etcd a full TTL after its last renewal reached it, so a broker that
/// stops at two thirds has stopped before any successor can start.
pub const FENCE_AFTER: (u32, u32) = (2, 3);

/// The owner when no broker can be: this one is fenced and sees no other live broker.
/// Clients get LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE and retry.
pub const NO_OWNER: i32 = -1;

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

/// The owner of `key` among brokers `node_ids` by the same rendezvous hashing every broker
/// uses (`None`: no broker). For tools and tests that must know who will coordinate what.
pub fn owner_among(key: &[u8], node_ids: &[i32]) -> Option<i32> {
    node_ids.iter().copied().max_by_key(|id| (score(key, *id), *id))
}

impl Membership {
    /// The membership of a broker that knows only itself so far, counting its lease on
    /// `clock`.
    pub fn new(me: BrokerInfo, clock: folio_rt::ProcessClock) -> Arc<Membership> {
        Arc::new(Membership {
            live: RwLock::new(vec![me.clone()]),
            me,
            changes: watch::channel(0).0,
            revoke_on_stop: std::sync::atomic::AtomicBool::new(true),
            controller: std::sync::atomic::AtomicI32::new(-1),
            is_controller: watch::channel(false).0,
            fenced: RwLock::new(None),
            lease: std::sync::atomic::AtomicI64::new(NO_LEASE),
            clock,
            serve_until: RwLock::new(None),
        })
    }

    /// Why this broker is fenced (serves no partition and no group), if it is.
    pub fn fenced(&self) -> Option<String> {
        let why = self.fenced.read().expect("fenced lock").clone();
        why.or_else(|| {
            self.lease_ran_out().then(|| {
                "its lease ran out before its membership loop could renew it (the process was paused?)".to_string()
            })
        })
    }

    /// Records that the lease was valid at `renewed_at`: the broker may serve until
    /// `renewed_at + fence_after` (see [`FENCE_AFTER`]).
    fn lease_renewed(&self, renewed_at: tokio::time::Instant, fence_after: Duration) {
        *self.serve_until.write().expect("serve_until lock") = Some(renewed_at + fence_after);
    }

    /// Whether the moment to stop serving has passed on this process's clock.
    fn lease_ran_out(&self) -> bool {
        let until = *self.serve_until.read().expect("serve_until lock");
        until.is_some_and(|t| self.clock.now() >= t)
    }

    /// Fences this broker (`Some(why)`) or lifts its fence (`None`); ownership is
    /// recomputed at once (the partitions and groups it held are released). Returns whether
    /// that changed anything.
    pub fn set_fenced(&self, why: Option<String>) -> bool {
        let mut f = self.fenced.write().expect("fenced lock");
        match (&*f, &why) {
            (None, None) => return false,
            (Some(was), Some(now)) if was == now => return false,
            (Some(_), Some(now)) => {
                tracing::warn!(node_id = self.me.node_id, reason = %now, "broker still fenced");
                *f = why;
                drop(f);
                self.changes.send_modify(|n| *n += 1);
                return true;
            }
            (None, Some(why)) => tracing::error!(
                node_id = self.me.node_id,
                reason = %why,
                "broker fenced: it serves no partition and no group until it holds its registration again"
            ),
            (Some(was), None) => tracing::warn!(
                node_id = self.me.node_id,
                was = %was,
                "broker registration held again: serving partitions and groups"
            ),
        }
        let fenced = why.is_some();
        *f = why;
        drop(f);
        if fenced {
            // A fenced broker does no controller work; the claim is read again once it
            // serves again.
            self.set_controller(-1);
        }
        self.changes.send_modify(|n| *n += 1);
        true
    }

    /// The lease this broker's registration is bound to.
    pub fn lease(&self) -> LeaseId {
        self.lease.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn set_lease(&self, lease: LeaseId) {
        self.lease.store(lease, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_fenced(&self) -> bool {
        self.fenced.read().expect("fenced lock").is_some() || self.lease_ran_out()
    }

    /// This broker.
    pub fn me(&self) -> &BrokerInfo {
        &self.me
    }

    /// Every broker registered as this one last saw them, itself included even while
    /// fenced: Metadata's broker list. Another broker may still name a fenced one as a
    /// coordinator until its lease expires, and a client that then finds no such broker
    /// in Metadata drops it and asks again at once (librdkafka looped so until its
    /// consumer hung; found by the partition test of #49). Leadership is `owner`'s.
    pub fn registered(&self) -> Vec<BrokerInfo> {
        self.live.read().expect("live lock").clone()
    }

    /// The live brokers (this one among them while it runs, unless it is fenced).
    pub fn live(&self) -> Vec<BrokerInfo> {
        let fenced = self.is_fenced();
        let live = self.live.read().expect("live lock");
        live.iter().filter(|b| !fenced || b.node_id != self.me.node_id).cloned().collect()
    }

    /// The owner of `key` among the live brokers; node id [`NO_OWNER`] if there is none
    /// (this broker is fenced and sees no other).
    pub fn owner(&self, key: &[u8]) -> BrokerInfo {
        let fenced = self.is_fenced();
        let live = self.live.read().expect("live lock");
        live.iter()
            .filter(|b| !fenced || b.node_id != self.me.node_id)
            .max_by_key(|b| (score(key, b.node_id), b.node_id))
            .cloned()
            .unwrap_or_else(|| {
                if fenced {
                    BrokerInfo { node_id: NO_OWNER, endpoints: Vec::new() }
                } else {
                    self.me.clone()
                }
            })
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
        let fenced = self.is_fenced();
        self.is_controller.send_if_modified(|was| {
            let now = id == self.me.node_id && !fenced;
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

/// The ownership key of a transactional id (its coordinator is the owner).
pub fn txn_key(transactional_id: &str) -> Vec<u8> {
    let mut k = b"txn:".to_vec();
    k.extend_from_slice(transactional_id.as_bytes());
    k
}

/// How one registration attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registered {
    /// The registration was created on this lease.
    Created(LeaseId),
    /// The node id is registered already, on another lease (the value is its holder's
    /// address): an earlier run whose lease has not expired, or another process.
    Held(String),
}

/// One attempt to register this broker on `lease`: the registration is created only if the
/// node id has none (a compare on its absence), bound to the lease.
pub async fn try_register(
    meta: &dyn MetadataStore,
    keys: &Keys,
    me: &BrokerInfo,
    lease: LeaseId,
) -> Result<Registered, MetaError> {
    let k = keys.broker(me.node_id);
    let create = Txn::new().compare(folio_meta::Compare::Absent(k.clone())).put_with_lease(
        k.clone(),
        me.registration().into_bytes(),
        lease,
    );
    if meta.txn(create).await?.succeeded {
        return Ok(Registered::Created(lease));
    }
    match meta.get(&k).await? {
        Some(v) if v.lease == Some(lease) => Ok(Registered::Created(lease)),
        Some(v) => Ok(Registered::Held(String::from_utf8_lossy(&v.value).to_string())),
        // Gone between the two calls (its lease expired): the next attempt creates it.
        None => Ok(Registered::Held("(a registration that just expired)".into())),
    }
}

/// Why a broker could not register its node id.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The metadata store failed; `what` says at which step.
    #[error("{what}: {source}")]
    Meta { what: String, source: folio_meta::MetaError },
    /// Another process holds this node id.
    #[error(
        "node id {node_id} is registered by {holder} and stayed so for twice the lease TTL \
         ({ttl:?}): another broker runs with this id; use another --node-id"
    )]
    NodeIdTaken { node_id: i32, holder: String, ttl: Duration },
}

/// Registers this broker on a fresh lease, create-if-absent. While a registration of the
/// same node id exists (this broker before a crash, whose lease has not expired yet, or
/// another process with the same id, whatever its address) it waits, up to twice the lease
/// TTL, then refuses.
pub async fn register(
    meta: &dyn MetadataStore,
    keys: &Keys,
    me: &BrokerInfo,
    ttl: Duration,
    clock: &folio_rt::ProcessClock,
) -> Result<Registration, RegisterError> {
    let k = keys.broker(me.node_id);
    let deadline = tokio::time::Instant::now() + 2 * ttl;
    // The lease is valid from before it is granted, and from before each keep-alive the
    // wait sends that is answered: the self-fence counts from the last of these.
    let mut valid_at = clock.now();
    let lease = meta
        .grant_lease(ttl)
        .await
        .map_err(|source| RegisterError::Meta { what: "granting a lease".into(), source })?;
    let mut logged = false;
    loop {
        match try_register(meta, keys, me, lease)
            .await
            .map_err(|source| RegisterError::Meta { what: format!("registering {k}"), source })?
        {
            Registered::Created(lease) => return Ok(Registration { lease, valid_at }),
            Registered::Held(holder) => {
                if tokio::time::Instant::now() >= deadline {
                    let _ = meta.revoke_lease(lease).await;
                    return Err(RegisterError::NodeIdTaken { node_id: me.node_id, holder, ttl });
                }
                if !logged {
                    tracing::info!(node_id = me.node_id, %holder, ?ttl, "node id still registered (an earlier run that died, or another process with this id?); waiting for its lease to expire");
                    logged = true;
                }
                // The lease must outlive the wait.
                let sent = clock.now();
                if meta.keep_alive(lease).await.is_ok() {
                    valid_at = sent;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A node id registered on a lease ([`register`]).
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    pub lease: LeaseId,
    /// When the lease was last known valid (on the process clock): where the self-fence
    /// counts from.
    pub valid_at: tokio::time::Instant,
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
/// controller claim, if it holds them on `lease`: a registration or claim of another
/// process (another lease) is never touched.
pub async fn unregister(meta: &dyn MetadataStore, keys: &Keys, node_id: i32, lease: LeaseId) {
    for key in [keys.controller(), keys.broker(node_id)] {
        match meta.get(&key).await {
            Ok(Some(v)) if v.lease == Some(lease) => {
                if let Err(e) = meta.delete(&key, folio_meta::Expect::Version(v.version)).await {
                    // Gone meanwhile (the lease was revoked: the stop's other path) is fine.
                    let still = meta.get(&key).await.ok().flatten();
                    if still.is_some_and(|s| s.lease == Some(lease)) {
                        tracing::warn!(node_id, %key, error = %e, "removing a registration failed; it expires with its lease");
                    }
                }
            }
            Ok(Some(v)) => {
                tracing::info!(node_id, %key, holder = ?v.lease, mine = lease, "left in place: held on another lease")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(node_id, %key, error = %e, "reading a registration failed; it expires with its lease")
            }
        }
    }
}

/// Lists the live brokers into `membership`; returns the lease this broker's node id is
/// registered on (`None`: not registered).
async fn refresh(
    meta: &dyn MetadataStore,
    keys: &Keys,
    membership: &Membership,
) -> Result<Option<Option<LeaseId>>, MetaError> {
    let p = keys.brokers();
    let mut live = Vec::new();
    let mut mine = None;
    for v in list_all(meta, &p).await? {
        let Ok(node_id) = v.key[p.len()..].parse::<i32>() else { continue };
        if node_id == membership.me.node_id {
            mine = Some(v.lease);
        }
        let value = String::from_utf8_lossy(&v.value);
        let Some(b) = BrokerInfo::parse_registration(node_id, &value) else {
            tracing::warn!(key = %v.key, %value, "a broker registration that does not parse; skipped");
            continue;
        };
        live.push(b);
    }
    membership.set_live(live);
    Ok(mine)
}

pub mod lease;

#[cfg(test)]
mod tests;
