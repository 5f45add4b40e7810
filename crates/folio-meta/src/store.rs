//! The `MetadataStore` trait and its types.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::limits::{ETCD_TXN_OPS_MAX, KEY_BYTES_MAX, LIST_LIMIT_MAX, VALUE_BYTES_MAX};
use bytes::Bytes;
use tokio::sync::mpsc;

pub use crate::error::MetaError;

/// A store-wide counter that increases with every write. Every key's [`Version`] is the
/// revision of its last write, so versions are never reused, even across delete and
/// re-create (no ABA in compare-and-set).
pub type Revision = u64;
/// The compare-and-set token of a key: the revision of its last write.
pub type Version = Revision;
/// A lease's id; keys put with it go when it expires.
pub type LeaseId = i64;

/// The future a store method returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// A metadata operation's result.
pub type Result<T, E = MetaError> = std::result::Result<T, E>;

/// A stored value with its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub key: String,
    pub value: Bytes,
    /// Revision of the last write: pass it back as `Expect::Version` to compare-and-set.
    pub version: Version,
    pub create_revision: Revision,
    pub lease: Option<LeaseId>,
}

/// The precondition of a put or delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Any,
    /// Create only: fail if the key exists.
    Absent,
    /// Fail unless the key exists with exactly this version.
    Version(Version),
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Keys in ascending order.
    pub items: Vec<Versioned>,
    /// More keys follow: list again with `start_after` = the last key.
    pub more: bool,
    /// The store revision the page was read at.
    pub revision: Revision,
}

/// A condition of a transaction on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    Version(String, Version),
    Absent(String),
    Exists(String),
}

/// A write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put { key: String, value: Bytes, lease: Option<LeaseId> },
    Delete { key: String },
}

/// All compares hold, then all ops apply atomically at one revision; or nothing applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub ops: Vec<Op>,
}

impl Txn {
    /// An empty transaction (it applies nothing and succeeds).
    pub fn new() -> Txn {
        Txn::default()
    }
    /// Adds a condition.
    pub fn compare(mut self, c: Compare) -> Txn {
        self.compares.push(c);
        self
    }
    /// Adds a put.
    pub fn put(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Txn {
        self.ops.push(Op::Put { key: key.into(), value: value.into(), lease: None });
        self
    }
    /// Adds a put bound to `lease`.
    pub fn put_with_lease(
        mut self,
        key: impl Into<String>,
        value: impl Into<Bytes>,
        lease: LeaseId,
    ) -> Txn {
        self.ops.push(Op::Put { key: key.into(), value: value.into(), lease: Some(lease) });
        self
    }
    /// Adds a delete.
    pub fn delete(mut self, key: impl Into<String>) -> Txn {
        self.ops.push(Op::Delete { key: key.into() });
        self
    }
}

/// Whether a transaction applied, and at which revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnOutcome {
    pub succeeded: bool,
    /// The revision of the transaction's writes (or the store's, if it did not apply).
    pub revision: Revision,
}

/// What a watch event did to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub key: String,
    /// The new value (empty for deletes).
    pub value: Bytes,
    pub revision: Revision,
}

/// A stream of changes under a prefix, in revision order, each exactly once. Ends with an
/// error (`Compacted` if it fell behind, `Unavailable` if the backend went away); then the
/// caller re-lists and watches again from the list's revision + 1.
#[derive(Debug)]
pub struct Watch {
    backlog: VecDeque<WatchEvent>,
    rx: mpsc::Receiver<Result<Vec<WatchEvent>>>,
    ended: bool,
    /// Why the sender went away, when it could not say so through the channel.
    end_reason: Arc<Mutex<Option<MetaError>>>,
    _guard: Option<Box<dyn Send + Sync + Debug>>,
}

impl Watch {
    pub(crate) fn new(
        backlog: VecDeque<WatchEvent>,
        rx: mpsc::Receiver<Result<Vec<WatchEvent>>>,
        end_reason: Arc<Mutex<Option<MetaError>>>,
        guard: Option<Box<dyn Send + Sync + Debug>>,
    ) -> Watch {
        Watch { backlog, rx, ended: false, end_reason, _guard: guard }
    }

    /// A watch fed by `rx`, for a store that wraps another (a relay that delays or drops
    /// what the inner watch reports): the sender's going away ends it with `Closed`.
    pub fn from_channel(rx: mpsc::Receiver<Result<Vec<WatchEvent>>>) -> Watch {
        Watch::new(VecDeque::new(), rx, Arc::new(Mutex::new(None)), None)
    }

    /// The next change; `None` once the watch has ended after reporting its error.
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        loop {
            if let Some(e) = self.backlog.pop_front() {
                return Some(Ok(e));
            }
            if self.ended {
                return None;
            }
            match self.rx.recv().await {
                Some(Ok(events)) => self.backlog.extend(events),
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(e));
                }
                None => {
                    self.ended = true;
                    let reason = self.end_reason.lock().expect("watch end lock").take();
                    return Some(Err(reason.unwrap_or(MetaError::Closed)));
                }
            }
        }
    }
}

/// The metadata store. Object-safe: use it as `Arc<dyn MetadataStore>`.
pub trait MetadataStore: Send + Sync + Debug {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>>;
    /// Writes `value` if `expect` holds; returns the new version.
    fn put<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expect: Expect,
    ) -> BoxFuture<'a, Result<Version>> {
        // One transaction: every backend gets the same semantics from its `txn`.
        Box::pin(async move {
            check_value(key, &value)?;
            let mut txn = Txn::new().put(key, value);
            match expect {
                Expect::Any => {}
                Expect::Absent => txn = txn.compare(Compare::Absent(key.into())),
                Expect::Version(v) => txn = txn.compare(Compare::Version(key.into(), v)),
            }
            let out = self.txn(txn).await?;
            if !out.succeeded {
                return Err(MetaError::Conflict { key: key.into() });
            }
            Ok(out.revision)
        })
    }
    /// Deletes if `expect` holds; returns whether a key was deleted.
    fn delete<'a>(&'a self, key: &'a str, expect: Expect) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut txn = Txn::new().compare(Compare::Exists(key.into())).delete(key);
            match expect {
                Expect::Any => {}
                Expect::Absent => {
                    return Err(MetaError::InvalidArgument("delete expecting absence".into()));
                }
                Expect::Version(v) => txn = txn.compare(Compare::Version(key.into(), v)),
            }
            let out = self.txn(txn).await?;
            if !out.succeeded && matches!(expect, Expect::Version(_)) {
                return Err(MetaError::Conflict { key: key.into() });
            }
            Ok(out.succeeded)
        })
    }
    /// Up to `limit` keys with `prefix`, ascending, strictly after `start_after`.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page>>;
    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>>;
    /// Compares plus operations one transaction may hold (etcd's default `--max-txn-ops`
    /// is 128; the embedded store takes far more). Callers that batch size by it.
    fn txn_ops_max(&self) -> usize {
        ETCD_TXN_OPS_MAX
    }
    /// Every change under `prefix` with revision `>= from`, in order.
    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>>;
    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>>;
    /// Renews the lease for another TTL.
    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>>;
    /// Ends the lease now; its keys are deleted.
    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>>;
    /// A 64-bit id never handed out before by this store for `sequence`, across restarts.
    /// `sequence` is a key under the caller's root (e.g. `Keys::id_sequence("ledger")`).
    fn next_id<'a>(&'a self, sequence: &'a str) -> BoxFuture<'a, Result<u64>>;
    /// The store's current revision.
    fn revision(&self) -> BoxFuture<'_, Result<Revision>>;
}

/// What a guarded creation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Created at this revision.
    Now(Revision),
    /// The key was there already.
    Exists,
    /// A guard did not hold (what the key belongs to changed or is gone): nothing written.
    GuardFailed,
}

/// Creates `key` with `value` in one transaction that also checks every `guard`, so a key
/// that belongs to something (a log to its topic, a ledger to its log) is created at most
/// once and never after its owner changed or was deleted, whatever the caller's caches say.
pub async fn create_guarded(
    store: &dyn MetadataStore,
    key: &str,
    value: Bytes,
    guard: Vec<Compare>,
) -> Result<Created> {
    let mut txn = Txn::new().compare(Compare::Absent(key.to_string())).put(key, value);
    txn.compares.extend(guard);
    let out = store.txn(txn).await?;
    if out.succeeded {
        return Ok(Created::Now(out.revision));
    }
    Ok(if store.get(key).await?.is_some() { Created::Exists } else { Created::GuardFailed })
}

/// Lists every key under `prefix`, page by page.
pub async fn list_all(store: &dyn MetadataStore, prefix: &str) -> Result<Vec<Versioned>> {
    let mut out: Vec<Versioned> = Vec::new();
    loop {
        let after = out.last().map(|v| v.key.clone());
        let page = store.list(prefix, after.as_deref(), LIST_LIMIT_MAX).await?;
        out.extend(page.items);
        if !page.more {
            return Ok(out);
        }
    }
}

/// Where a listing page starts: at `prefix`, or just after `start_after`.
pub(crate) fn list_start(prefix: &str, start_after: Option<&str>) -> Vec<u8> {
    match start_after {
        Some(k) => {
            let mut start = k.as_bytes().to_vec();
            start.push(0);
            start
        }
        None => prefix.as_bytes().to_vec(),
    }
}

/// A key or prefix the store can take: at most `KEY_BYTES_MAX` bytes.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.len() > KEY_BYTES_MAX {
        return Err(MetaError::InvalidArgument(format!(
            "key of {} bytes (starting {:?}) is above the {KEY_BYTES_MAX}-byte limit",
            key.len(),
            key.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

/// Every key a transaction names (compares and operations) passes `check_key`.
pub(crate) fn check_txn_keys(txn: &Txn) -> Result<()> {
    for c in &txn.compares {
        match c {
            Compare::Version(k, _) | Compare::Absent(k) | Compare::Exists(k) => check_key(k)?,
        }
    }
    for op in &txn.ops {
        match op {
            Op::Put { key, .. } | Op::Delete { key } => check_key(key)?,
        }
    }
    Ok(())
}

pub(crate) fn check_value(key: &str, value: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(MetaError::InvalidArgument("empty key".into()));
    }
    check_key(key)?;
    if value.len() > VALUE_BYTES_MAX {
        return Err(MetaError::InvalidArgument(format!(
            "value for {key} is {} bytes, above the {VALUE_BYTES_MAX}-byte limit",
            value.len()
        )));
    }
    Ok(())
}
