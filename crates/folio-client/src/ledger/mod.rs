//! Replicated ledgers: create, add (striped over an ensemble, acknowledged at the ack
//! quorum, completed in order), read, close, delete, list.
//!
//! Write set of entry `e` in an ensemble of `E` bookies: positions `(e + i) mod E` for
//! `i < Qw`. An add is acknowledged once `Qa` bookies of its write set answered OK, and
//! completes only after every earlier entry completed, so the last-add-confirmed (LAC) is
//! the highest entry with every entry up to it acknowledged. Each entry carries the LAC known
//! when it was sent (piggybacked).
//!
//! The client and the types live here; their work is split by job: `writer.rs` (adds,
//! ensemble changes, close, the explicit LAC), `reader.rs` (reads, speculative reads,
//! long-poll tailing), `recovery.rs` (fencing and recovering a ledger, writing back what
//! a quorum saw).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use folio_meta::keys::{Keys, LEDGER_ID_SEQUENCE};
use folio_meta::records::{DigestType, LedgerMetadata, LedgerState, Record};
use folio_meta::{Expect, MetadataStore, list_all};
use folio_proto::auth::ClusterSecret;
use folio_proto::wire::{MasterKey, Request};
use folio_proto::{Entry, EntryId, INVALID_ENTRY_ID, LedgerId};
use tokio::sync::{Semaphore, watch};

use crate::BookieConnection;
use crate::error::{LedgerError, Result, WriterFailure};
use crate::limits::BOOKIE_INFLIGHT_MAX;
pub use crate::limits::OUTSTANDING_ADDS_MAX;
use crate::pool::BookiePool;

mod check;
mod reader;
mod recovery;
mod stall;
mod writer;

pub use check::BookieListing;

pub use check::{MissingCopy, ReplicaCheck};
pub use stall::adds_stalled_total;

pub use folio_proto::wire::master_key;

/// A new ledger's ensemble size, quorums, password and custom metadata.
///
/// The password is random unless set: kept in the ledger's metadata, it is how bookies
/// tell the ledger's writer (and recovery, which reads the metadata) from anyone else, so
/// an add or fence with another ledger's key is refused UNAUTHORIZED.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub ensemble_size: u16,
    pub write_quorum: u16,
    pub ack_quorum: u16,
    pub password: Vec<u8>,
    pub custom: BTreeMap<String, Bytes>,
    /// Create under this id (allocated earlier with `allocate_id`) instead of a fresh one.
    /// Fails with a metadata conflict if a ledger with this id exists already.
    pub ledger_id: Option<LedgerId>,
    /// Compares checked in the transaction that writes the ledger's metadata: the ledger is
    /// created only while they hold (`CreateRefused` otherwise). An owner that recorded the
    /// id first (a managed log's chain) compares its own record, so a ledger id whose
    /// owner was deleted (and the ledger with it) can never be created again.
    pub guard: Vec<folio_meta::Compare>,
}

impl CreateOptions {
    /// Options for an ensemble of `ensemble_size` with the given write and ack quorums.
    pub fn new(ensemble_size: u16, write_quorum: u16, ack_quorum: u16) -> CreateOptions {
        CreateOptions {
            ensemble_size,
            write_quorum,
            ack_quorum,
            password: folio_rt::random::<[u8; LEDGER_PASSWORD_BYTES]>().to_vec(),
            custom: BTreeMap::new(),
            ledger_id: None,
            guard: Vec::new(),
        }
    }
}

/// Creates, opens, recovers and deletes ledgers over the bookies registered in the metadata store.
#[derive(Debug, Clone)]
pub struct LedgerClient {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    pool: Arc<BookiePool>,
    /// How long one request to one bookie may take before that bookie counts as failed
    /// for it (BookKeeper's `addEntryTimeoutSec` / `readEntryTimeout`, 5 s).
    request_timeout: std::time::Duration,
    /// A read asks the next replica too when one has not answered within this (2 s).
    speculative_read_timeout: std::time::Duration,
    /// Writers send the LAC to their ensemble this often when it moved and no add carried
    /// it (`None`: only piggybacked on adds).
    explicit_lac_interval: Option<std::time::Duration>,
    /// An add not confirmed this long after it started is reported and handled
    /// (`stall.rs`); `None` turns the watchdog off.
    add_stall_after: Option<std::time::Duration>,
}

impl LedgerClient {
    /// A client over `meta`'s bookie registrations and ledger metadata under `keys`.
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys) -> LedgerClient {
        let pool = Arc::new(BookiePool::new(meta.clone(), keys.clone(), BOOKIE_INFLIGHT_MAX));
        LedgerClient {
            meta,
            keys,
            pool,
            request_timeout: REQUEST_TIMEOUT,
            speculative_read_timeout: std::time::Duration::from_secs(2),
            explicit_lac_interval: Some(std::time::Duration::from_secs(1)),
            add_stall_after: Some(ADD_STALL_AFTER),
        }
    }

    /// The same client proving `secret` to every bookie (a fresh pool of connections).
    pub fn with_cluster_secret(mut self, secret: Option<ClusterSecret>) -> LedgerClient {
        let pool = BookiePool::new(self.meta.clone(), self.keys.clone(), BOOKIE_INFLIGHT_MAX);
        self.pool = Arc::new(pool.with_secret(secret).with_source(self.pool.source()));
        self
    }

    /// The same client connecting to bookies from the local address `source` (a fresh pool
    /// of connections; a simulated node's address under the simulator).
    pub fn with_source_address(mut self, source: Option<std::net::IpAddr>) -> LedgerClient {
        let pool = BookiePool::new(self.meta.clone(), self.keys.clone(), BOOKIE_INFLIGHT_MAX);
        self.pool = Arc::new(pool.with_secret(self.pool.secret().cloned()).with_source(source));
        self
    }

    /// The cluster secret this client proves to bookies, if any.
    pub fn cluster_secret(&self) -> Option<&ClusterSecret> {
        self.pool.secret()
    }

    /// The same client with another per-request timeout.
    pub fn with_request_timeout(mut self, timeout: std::time::Duration) -> LedgerClient {
        self.request_timeout = timeout;
        self
    }

    /// The same client with another speculative read timeout.
    pub fn with_speculative_read_timeout(mut self, timeout: std::time::Duration) -> LedgerClient {
        self.speculative_read_timeout = timeout;
        self
    }

    /// The same client with another stalled-add bound (`None` turns the watchdog off).
    pub fn with_add_stall_after(mut self, after: Option<std::time::Duration>) -> LedgerClient {
        self.add_stall_after = after;
        self
    }

    /// The same client with another explicit-LAC interval (`None` turns it off).
    pub fn with_explicit_lac_interval(
        mut self,
        interval: Option<std::time::Duration>,
    ) -> LedgerClient {
        self.explicit_lac_interval = interval;
        self
    }

    /// One request to one bookie, bounded by the request timeout.
    async fn call(
        &self,
        bookie: &str,
        request: Request,
    ) -> Result<folio_proto::wire::ResponseFrame> {
        let conn = self.pool.get(bookie).await?;
        match tokio::time::timeout(self.request_timeout, conn.request(request)).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(LedgerError::ReadFailed {
                ledger_id: 0,
                entry_id: INVALID_ENTRY_ID,
                detail: format!("bookie {bookie}: no answer within {:?}", self.request_timeout),
            }),
        }
    }

    /// Creates a ledger on `E` writable bookies (never read-only ones), spread over racks
    /// (`placement::ensemble`).
    pub async fn create(&self, opts: CreateOptions) -> Result<LedgerWriter> {
        let (e, w, a) = (opts.ensemble_size, opts.write_quorum, opts.ack_quorum);
        if !(e >= w && w >= a && a >= 1) {
            return Err(LedgerError::InvalidQuorum(format!(
                "need E >= Qw >= Qa >= 1, got E={e} Qw={w} Qa={a}"
            )));
        }
        let writable = self.pool.writable_candidates().await?;
        let Some(ensemble) =
            crate::placement::ensemble(&writable, e as usize, w as usize, &mut folio_rt::rng())
        else {
            return Err(LedgerError::NotEnoughBookies { need: e as usize, have: writable.len() });
        };
        let id = match opts.ledger_id {
            Some(id) => id,
            None => self.allocate_id().await?,
        };
        let metadata = LedgerMetadata {
            ensemble_size: e,
            write_quorum: w,
            ack_quorum: a,
            state: LedgerState::Open,
            last_entry_id: INVALID_ENTRY_ID,
            length: 0,
            digest_type: DigestType::Crc32c,
            password: Some(opts.password.clone()),
            ensembles: [(0, ensemble.clone())].into(),
            custom: opts.custom,
            ctime_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            creator_token: folio_rt::random(),
        };
        let key = self.keys.ledger(id);
        match folio_meta::create_guarded(self.meta.as_ref(), &key, metadata.encode(), opts.guard)
            .await?
        {
            folio_meta::Created::Now(_) => {}
            folio_meta::Created::Exists => {
                return Err(LedgerError::Meta(folio_meta::MetaError::Conflict { key }));
            }
            folio_meta::Created::GuardFailed => return Err(LedgerError::CreateRefused(id)),
        }
        let mut bookies = Vec::with_capacity(ensemble.len());
        for b in &ensemble {
            bookies.push((b.clone(), self.pool.get(b).await?));
        }
        tracing::debug!(ledger = id, ?ensemble, "ledger created");
        Ok(LedgerWriter::new(id, master_key(&opts.password), metadata, bookies, self.clone()))
    }

    /// A ledger id never handed out before, for a later `create` with
    /// `CreateOptions::ledger_id` (so a caller can record the id durably before the ledger
    /// exists, and no crash can leave a ledger nobody knows about).
    pub async fn allocate_id(&self) -> Result<LedgerId> {
        Ok(self.meta.next_id(&self.keys.id_sequence(LEDGER_ID_SEQUENCE)).await?)
    }

    /// Ids of the bookies registered as writable.
    pub async fn writable_bookies(&self) -> Result<Vec<String>> {
        self.pool.writable().await
    }

    /// The ledger's metadata as stored now.
    pub async fn metadata(&self, ledger_id: LedgerId) -> Result<LedgerMetadata> {
        let key = self.keys.ledger(ledger_id);
        let v = self.meta.get(&key).await?.ok_or(LedgerError::NoSuchLedger(ledger_id))?;
        Ok(LedgerMetadata::decode(&key, &v.value)?)
    }

    /// Opens a ledger for reading, without recovery (it may still be written).
    pub async fn open(&self, ledger_id: LedgerId) -> Result<LedgerReader> {
        Ok(LedgerReader::new(ledger_id, self.metadata(ledger_id).await?, self.clone()))
    }

    /// Deletes the ledger's metadata; bookies reclaim its data through garbage collection.
    pub async fn delete(&self, ledger_id: LedgerId) -> Result<()> {
        if !self.meta.delete(&self.keys.ledger(ledger_id), Expect::Any).await? {
            return Err(LedgerError::NoSuchLedger(ledger_id));
        }
        Ok(())
    }

    /// Every ledger id in the metadata store.
    pub async fn list(&self) -> Result<Vec<LedgerId>> {
        let prefix = self.keys.ledgers();
        Ok(list_all(self.meta.as_ref(), &prefix)
            .await?
            .iter()
            .filter_map(|v| self.keys.parse_ledger(&v.key))
            .collect())
    }
}

/// An add not yet covered by the LAC.
#[derive(Debug)]
struct PendingAdd {
    entry: Bytes,
    length: u64,
    /// When the add was started (the stall watchdog's clock).
    since: tokio::time::Instant,
    /// Ensemble positions whose bookie acknowledged this entry.
    acked: std::collections::BTreeSet<usize>,
}

#[derive(Debug, Default)]
struct WriterState {
    next_entry: EntryId,
    length: u64,
    lac: EntryId,
    lac_length: u64,
    pending: BTreeMap<EntryId, PendingAdd>,
    failed: Option<WriterFailure>,
    closed: bool,
    /// An ensemble change is in progress: the LAC must not move (BookKeeper's
    /// `changingEnsemble`), so the new fragment's start stays right.
    changing: bool,
    /// Positions whose bookie failed with no replacement available: skipped while the
    /// others can still give every entry its ack quorum.
    down: std::collections::BTreeSet<usize>,
}

/// Bytes of the random password a new ledger gets (`CreateOptions::new`).
pub const LEDGER_PASSWORD_BYTES: usize = 20;

/// Default per-request timeout (see `LedgerClient::with_request_timeout`).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Default stalled-add bound (`LedgerClient::with_add_stall_after`): two request timeouts,
/// so a bookie that does not answer is replaced by its request timeout first.
pub const ADD_STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug)]
struct WriterInner {
    id: LedgerId,
    key: MasterKey,
    metadata: Mutex<LedgerMetadata>,
    /// The current (last) ensemble, by position.
    ensemble: Mutex<Vec<(String, Arc<BookieConnection>)>>,
    state: Mutex<WriterState>,
    lac_tx: watch::Sender<EntryId>,
    /// Told of every add queued: the stall watcher of an idle writer waits on it instead
    /// of ticking (its receiver ends with the writer, as this sender drops).
    added: watch::Sender<()>,
    change_lock: tokio::sync::Mutex<()>,
    client: LedgerClient,
}

/// The single writer of a ledger. `add` takes `&self`, so many adds can be in flight; they
/// complete in entry order. A bookie that fails is replaced (ensemble change) and the
/// entries it had not confirmed are resent to its replacement.
#[derive(Debug)]
pub struct LedgerWriter {
    inner: Arc<WriterInner>,
    slots: Arc<Semaphore>,
}

/// Reads a ledger. Entries are verified (digest, ledger and entry ids) before they are
/// returned; a bad or missing copy makes the reader try the next bookie of the write set.
#[derive(Debug)]
pub struct LedgerReader {
    id: LedgerId,
    metadata: LedgerMetadata,
    client: LedgerClient,
    /// Sticky reads: when every bookie of an ensemble holds every entry (E = Qw), entries
    /// are read from this one (an index into the ensemble) until it fails, so that one
    /// bookie's read-ahead serves a sequential reader instead of every bookie reading the
    /// same span ahead. Starts at `ledger_id % E`, so ledgers spread their readers.
    sticky: std::sync::atomic::AtomicUsize,
}

impl LedgerReader {
    pub(crate) fn new(id: LedgerId, metadata: LedgerMetadata, client: LedgerClient) -> Self {
        LedgerReader {
            id,
            metadata,
            client,
            sticky: std::sync::atomic::AtomicUsize::new(id as usize),
        }
    }
}

/// Where a recovery writes entries back, and the fragments its bookie replacements started.
#[derive(Debug)]
struct WriteBack {
    ledger_id: LedgerId,
    key: MasterKey,
    ensemble: Vec<String>,
    fragments: BTreeMap<EntryId, Vec<String>>,
    w: usize,
    a: usize,
}

/// What one bookie said about an entry during recovery.
#[derive(Debug)]
enum Answer {
    Has(Entry),
    /// An explicit "no such entry / ledger" (this bookie is not in limbo for it).
    Missing,
    /// No definite answer: an error or a timeout. Never a negative.
    Unknown(String),
    /// The bookie answered `Unknown`: it may have lost data of this ledger (limbo). Never a
    /// negative; but on a fencing read it is definite that the bookie is fenced (it fences
    /// before it answers), so it counts toward fencing coverage.
    Limbo(String),
}

/// Moves a writer's published LAC forward to `lac`; never back (the writer's acks and the
/// stall watch both publish).
fn publish_lac(tx: &tokio::sync::watch::Sender<EntryId>, lac: EntryId) {
    tx.send_if_modified(|published| {
        let forward = lac > *published;
        if forward {
            *published = lac;
        }
        forward
    });
}

#[cfg(test)]
mod tests {
    use super::publish_lac;
    use super::recovery::quorum_coverage;
    use super::*;

    #[test]
    fn a_stale_lac_never_moves_the_published_lac_back() {
        let (tx, mut rx) = watch::channel(INVALID_ENTRY_ID);
        publish_lac(&tx, 6);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 6);
        // A thread that computed LAC 5 before another computed 6 publishes late.
        publish_lac(&tx, 5);
        assert!(!rx.has_changed().unwrap(), "a stale LAC is not a change");
        assert_eq!(*rx.borrow(), 6);
        publish_lac(&tx, 7);
        assert_eq!(*rx.borrow_and_update(), 7);
    }

    #[test]
    fn quorum_coverage_needs_enough_definite_answers_in_every_write_set() {
        // E=3, Qw=2, Qa=2: every write set needs 1 definite answer.
        assert!(quorum_coverage(&[true, false, true], 2, 2));
        assert!(!quorum_coverage(&[true, false, false], 2, 2), "write set {{1,2}} has none");
        // E=3, Qw=3, Qa=2: every write set needs 2.
        assert!(quorum_coverage(&[true, true, false], 3, 2));
        assert!(!quorum_coverage(&[true, false, false], 3, 2));
        // E=Qw=Qa=1: the one bookie must answer.
        assert!(!quorum_coverage(&[false], 1, 1));
        assert!(quorum_coverage(&[true], 1, 1));
    }

    #[test]
    fn master_key_matches_bookkeeper_derivation() {
        // SHA1("ledger") and SHA1("ledgerpw"), computed independently (Python hashlib).
        assert_eq!(
            master_key(b""),
            [
                133, 11, 241, 7, 28, 94, 61, 140, 36, 35, 86, 118, 248, 129, 106, 224, 203, 226,
                241, 79
            ]
        );
        assert_eq!(
            master_key(b"pw"),
            [
                42, 162, 38, 186, 9, 91, 105, 105, 166, 72, 113, 151, 118, 147, 177, 70, 113, 113,
                13, 118
            ]
        );
    }
}
