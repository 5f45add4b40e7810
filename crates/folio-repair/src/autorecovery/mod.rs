//! Autorecovery (#23): a lost, wiped or decommissioned bookie's copies are restored on
//! live bookies without anyone running a command.
//!
//! Every process that runs an [`Autorecovery`] (each bookie, standalone, or a dedicated
//! `folio autorecovery`) holds one lease and runs two loops:
//! - the **auditor** (`auditor.rs`), elected by a lease-bound claim at
//!   `<root>/autorecovery/auditor` so that one runs per cluster: it notices bookies gone
//!   longer than `lost_after`, bookies back with formatted disks, and decommission
//!   requests, and writes durable under-replication marks (`mark.rs`); a periodic check
//!   lists each bookie's entries of each ledger and marks what is missing;
//! - the **replication worker** (`worker.rs`): claims one marked ledger at a time by a
//!   lease-bound claim, restores its copies and drops the mark.
//!
//! A process that dies loses its lease, and with it the auditor role and its claim: another
//! process takes over, and a ledger half-copied is started over (nothing a reader can see
//! changed before the copy was whole).
//!
//! **Architecture invariant:** autorecovery changes ledger metadata only through
//! compare-and-set on one fragment's ensemble position, and only after the copies are
//! written; it never deletes a ledger and never writes an entry that is not a verified copy.

pub mod auditor;
pub mod decommission;
pub mod mark;
mod status;
pub mod worker;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use folio_proto::clock::{Clock, WallClock};
use tokio::time::Instant;

use crate::RepairError;
use folio_client::LedgerClient;
use folio_meta::keys::Keys;
use folio_meta::{Compare, LeaseId, MetadataStore, Txn, list_all};
use rand::seq::SliceRandom;
use tokio::sync::watch;

pub use status::{Status, status};

pub use crate::limits::MARKS_PER_ROUND_MAX;

/// How autorecovery behaves; every field has a config key of the same name under
/// `autorecovery.` (see `folio bookie --help`).
#[derive(Debug, Clone)]
pub struct AutorecoveryConfig {
    /// A bookie unregistered this long is lost and its copies restored elsewhere (60 s).
    pub lost_after: Duration,
    /// How often the auditor looks at registrations and workers at marks (5 s).
    pub poll_interval: Duration,
    /// How often the periodic check lists every ledger's entries on its bookies (daily;
    /// `None` turns it off).
    pub check_interval: Option<Duration>,
    /// `ListEntries` requests the periodic check sends per second at most (100).
    pub check_requests_per_s: u32,
    /// How long a marked open ledger's last fragment is left to its writer before the
    /// ledger is fenced and recovered (30 s, BookKeeper's open-ledger grace period).
    pub open_ledger_grace: Duration,
    /// Bytes a worker copies per second at most (32 MiB/s; 0 = unlimited).
    pub bytes_per_s: u64,
    /// The lease holding this process's auditor role and claims (10 s).
    pub lease_ttl: Duration,
    /// Run the auditor election here (false: a worker only).
    pub auditor: bool,
    /// A bookie's absences are added up over this window: one gone for `lost_after` in
    /// total within it is lost, even if it came back in between (a crash-looping bookie).
    /// `10 × lost_after` by default.
    pub absence_window: Duration,
    /// The wall clock that mark times and absences are read on (the simulator's own).
    pub clock: Arc<dyn Clock>,
}

impl Default for AutorecoveryConfig {
    fn default() -> Self {
        AutorecoveryConfig {
            lost_after: Duration::from_secs(60),
            poll_interval: Duration::from_secs(5),
            check_interval: Some(Duration::from_secs(86_400)),
            check_requests_per_s: 100,
            open_ledger_grace: Duration::from_secs(30),
            bytes_per_s: 32 << 20,
            lease_ttl: Duration::from_secs(10),
            auditor: true,
            absence_window: Duration::from_secs(600),
            clock: Arc::new(WallClock),
        }
    }
}

/// What this process's autorecovery did (the `folio_autorecovery_*` metrics).
#[derive(Debug, Default)]
pub struct Stats {
    pub entries_copied: AtomicU64,
    pub bytes_copied: AtomicU64,
    pub copy_errors: AtomicU64,
    pub copies_discarded: AtomicU64,
    /// Copies stopped half-way because the lease holding their claim was lost.
    pub copies_stopped: AtomicU64,
    pub ledgers_healed: AtomicU64,
    pub ledgers_marked: AtomicU64,
    /// Marks and their fragments as the last round listed them (its first
    /// `MARKS_PER_ROUND_MAX`), and the oldest mark's age.
    pub marks: AtomicU64,
    pub marked_fragments: AtomicU64,
    pub oldest_mark_age_ms: AtomicU64,
    /// 1 while this process is the auditor.
    pub auditor: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    client: LedgerClient,
    config: AutorecoveryConfig,
    /// Who this is, in claims and logs (e.g. the bookie id).
    host: String,
    stats: Arc<Stats>,
    /// The pacing window: when it started and the bytes copied since.
    pace: std::sync::Mutex<(Instant, u64)>,
    /// The lease held now (the keeper drops it when a renewal fails).
    lease: std::sync::Mutex<Option<LeaseId>>,
    /// The lease the current claim is on, while a worker copies: copying stops as soon
    /// as it is no longer the lease held.
    claimed_on: std::sync::Mutex<Option<LeaseId>>,
}

/// One process's auditor candidate and replication worker (see the module comment).
#[derive(Debug, Clone)]
pub struct Autorecovery {
    inner: Arc<Inner>,
}

impl Autorecovery {
    /// Autorecovery over `meta` for the ledgers under `keys`, named `host` in claims.
    pub fn new(
        meta: Arc<dyn MetadataStore>,
        keys: Keys,
        client: LedgerClient,
        config: AutorecoveryConfig,
        host: impl Into<String>,
    ) -> Autorecovery {
        Autorecovery {
            inner: Arc::new(Inner {
                meta,
                keys,
                client,
                config,
                host: host.into(),
                stats: Arc::new(Stats::default()),
                pace: std::sync::Mutex::new((Instant::now(), 0)),
                lease: std::sync::Mutex::new(None),
                claimed_on: std::sync::Mutex::new(None),
            }),
        }
    }

    /// This process's counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.inner.stats.clone()
    }

    /// Runs the auditor election and the worker until `stop` turns true; the lease (and
    /// with it the auditor role and any claim) is revoked on the way out.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let _ = PROCESS_STATS.set(self.inner.stats.clone());
        let mut auditor = auditor::AuditorState::default();
        // The lease is renewed on its own task: a round copying for longer than the TTL
        // must not lose its claims and the auditor role.
        let keeper = KeeperGuard(tokio::spawn(keep_alive(self.clone())));
        let poll = self.inner.config.poll_interval;
        tracing::info!(host = %self.inner.host, auditor = self.inner.config.auditor, "autorecovery running");
        loop {
            if let Err(e) = self.round(&mut auditor).await {
                tracing::warn!(host = %self.inner.host, error = %e, "autorecovery round failed; retrying");
            }
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                () = tokio::time::sleep(poll) => {}
            }
        }
        drop(keeper);
        self.inner.stats.auditor.store(0, Relaxed);
        let held = self.inner.lease.lock().expect("lease lock").take();
        if let Some(l) = held {
            let _ = self.inner.meta.revoke_lease(l).await;
        }
    }

    /// Milliseconds on the wall clock the configuration names.
    fn now_ms(&self) -> u64 {
        self.inner.config.clock.now_ms()
    }

    /// Whether copying may go on: no claim is being worked (a direct call), or the lease
    /// the claim is on is still the one held.
    fn claim_held(&self) -> bool {
        let claimed = *self.inner.claimed_on.lock().expect("claim lock");
        claimed.is_none_or(|c| *self.inner.lease.lock().expect("lease lock") == Some(c))
    }

    /// One round: hold a lease, audit if elected, restore marked ledgers.
    async fn round(&self, auditor: &mut auditor::AuditorState) -> Result<(), RepairError> {
        let lease = &self.inner.lease;
        let held = *lease.lock().expect("lease lock");
        let l = match held {
            Some(l) => l,
            None => {
                let ttl = self.inner.config.lease_ttl;
                let l = self.inner.meta.grant_lease(ttl).await?;
                *lease.lock().expect("lease lock") = Some(l);
                l
            }
        };
        if self.inner.config.auditor && self.elect(l).await? {
            self.audit_once(auditor).await?;
        } else {
            self.inner.stats.auditor.store(0, Relaxed);
        }
        self.work_once(l).await
    }

    /// Whether this process holds the auditor claim (claiming it when free).
    async fn elect(&self, lease: LeaseId) -> Result<bool, RepairError> {
        let (meta, key) = (&self.inner.meta, self.inner.keys.auditor());
        let claim = Txn::new().compare(Compare::Absent(key.clone())).put_with_lease(
            key.clone(),
            self.inner.host.clone().into_bytes(),
            lease,
        );
        meta.txn(claim).await?;
        let holder = meta.get(&key).await?;
        let me = holder.is_some_and(|v| v.value == self.inner.host.as_bytes());
        let was = self.inner.stats.auditor.swap(u64::from(me), Relaxed) == 1;
        if me && !was {
            tracing::info!(host = %self.inner.host, "this process is the autorecovery auditor");
        }
        Ok(me)
    }

    /// Lists the marks and restores the ledgers they name, one claimed ledger at a time.
    pub async fn work_once(&self, lease: LeaseId) -> Result<(), RepairError> {
        let inner = &self.inner;
        inner.lease.lock().expect("lease lock").get_or_insert(lease);
        let prefix = inner.keys.under_replicated();
        let page = inner.meta.list(&prefix, None, MARKS_PER_ROUND_MAX).await?;
        self.record_marks(&page.items);
        let mut ids: Vec<u64> =
            page.items.iter().filter_map(|v| inner.keys.parse_under_replicated(&v.key)).collect();
        // Workers in other processes start elsewhere in the list.
        ids.shuffle(&mut folio_rt::rng());
        for id in ids {
            let claim_key = inner.keys.replication_claim(id);
            let claim = Txn::new().compare(Compare::Absent(claim_key.clone())).put_with_lease(
                claim_key.clone(),
                inner.host.clone().into_bytes(),
                lease,
            );
            // The claim's version, to release exactly this claim: once its lease expired,
            // the key may be the next worker's claim. A claim on this lease is this
            // worker's own, also when the answer to taking it was lost (the store failed
            // after applying it): taken again here, never left held until the lease ends.
            let version = match inner.meta.txn(claim).await {
                Ok(out) if out.succeeded => out.revision,
                _ => match inner.meta.get(&claim_key).await? {
                    Some(v) if v.lease == Some(lease) => v.version,
                    _ => continue, // another worker has it
                },
            };
            let before = inner.claimed_on.lock().expect("claim lock").replace(lease);
            assert!(before.is_none(), "a worker works one claim at a time");
            let outcome = self.replicate_ledger(id).await;
            *inner.claimed_on.lock().expect("claim lock") = None;
            let _ = inner.meta.delete(&claim_key, folio_meta::Expect::Version(version)).await;
            match outcome {
                Ok(worker::Outcome::Deferred(why)) => {
                    tracing::debug!(ledger = id, why, "re-replication deferred");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(ledger = id, error = %e, "re-replication failed; the mark stays for a later attempt")
                }
            }
        }
        Ok(())
    }

    fn record_marks(&self, marks: &[folio_meta::Versioned]) {
        use folio_meta::records::Record;
        let (mut fragments, mut oldest) = (0u64, u64::MAX);
        for v in marks {
            if let Ok(m) = mark::ReplicationMark::decode(&v.key, &v.value) {
                fragments += m.fragments.len() as u64;
                oldest = oldest.min(m.since_ms);
            }
        }
        let s = &self.inner.stats;
        s.marks.store(marks.len() as u64, Relaxed);
        s.marked_fragments.store(fragments, Relaxed);
        let age = if oldest == u64::MAX { 0 } else { self.now_ms().saturating_sub(oldest) };
        s.oldest_mark_age_ms.store(age, Relaxed);
    }

    /// Waits as long as it takes to keep copies at `bytes_per_s` (a window restarting every
    /// second, so an idle worker does not save up a burst).
    async fn pace(&self, bytes: u64) {
        let rate = self.inner.config.bytes_per_s;
        if rate == 0 {
            return;
        }
        let wait = {
            let mut p = self.inner.pace.lock().expect("pace lock");
            if p.0.elapsed() > Duration::from_secs(1) && p.1 <= rate {
                *p = (Instant::now(), 0);
            }
            p.1 += bytes;
            folio_bookie::gc::pace(p.1, p.0.elapsed(), rate)
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Bookies registered now, writable or read-only.
    async fn registered(&self) -> Result<BTreeSet<String>, RepairError> {
        let k = &self.inner.keys;
        let mut out = BTreeSet::new();
        for prefix in [k.bookies_writable(), k.bookies_readonly()] {
            for v in list_all(self.inner.meta.as_ref(), &prefix).await? {
                out.insert(v.key[prefix.len()..].to_string());
            }
        }
        Ok(out)
    }

    /// Bookies being drained.
    /// The ids under `prefix` (a key per bookie: draining, in maintenance).
    async fn listed_ids(&self, prefix: &str) -> Result<BTreeSet<String>, RepairError> {
        Ok(list_all(self.inner.meta.as_ref(), prefix)
            .await?
            .into_iter()
            .map(|v| v.key[prefix.len()..].to_string())
            .collect())
    }

    async fn draining(&self) -> Result<BTreeSet<String>, RepairError> {
        self.listed_ids(&self.inner.keys.decommissions()).await
    }
}

/// Stops the lease keeper when `run` ends or is dropped (a task aborted like a crashed
/// process: its lease must then expire, not be renewed by an orphaned keeper).
struct KeeperGuard(tokio::task::JoinHandle<()>);

impl Drop for KeeperGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease every third of its TTL; one that expired is dropped (the next round
/// takes a new one: the claims on the old one are gone with it).
async fn keep_alive(a: Autorecovery) {
    let lease = &a.inner.lease;
    loop {
        tokio::time::sleep(a.inner.config.lease_ttl / 3).await;
        let held = *lease.lock().expect("lease lock");
        let Some(l) = held else { continue };
        if let Err(e) = a.inner.meta.keep_alive(l).await {
            tracing::warn!(host = %a.inner.host, error = %e, "autorecovery lease lost; the next round takes a new one");
            let mut cur = lease.lock().expect("lease lock");
            if *cur == Some(l) {
                *cur = None;
            }
        }
    }
}

static PROCESS_STATS: std::sync::OnceLock<Arc<Stats>> = std::sync::OnceLock::new();

/// The counters of the first autorecovery this process ran (what `/metrics` shows).
pub fn process_stats() -> Option<Arc<Stats>> {
    PROCESS_STATS.get().cloned()
}
