//! Replicated ledgers: create, add (striped over an ensemble, acknowledged at the ack
//! quorum, completed in order), read, close, delete, list.
//!
//! Write set of entry `e` in an ensemble of `E` bookies: positions `(e + i) mod E` for
//! `i < Qw`. An add is acknowledged once `Qa` bookies of its write set answered OK, and
//! completes only after every earlier entry completed, so the last-add-confirmed (LAC) is
//! the highest entry with every entry up to it acknowledged. Each entry carries the LAC known
//! when it was sent (piggybacked).
//!
//! Not here yet (next): ensemble change on a failed bookie, open with recovery (fencing),
//! explicit LAC on an interval, speculative reads, long-poll tailing. Until then a failed
//! add breaks the writer: every later add fails with `WriterFailed`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use folio_meta::keys::{Keys, LEDGER_ID_SEQUENCE};
use folio_meta::records::{DigestType, LedgerMetadata, LedgerState, Record, Update, update};
use folio_meta::{Expect, MetadataStore, list_all};
use folio_proto::limits::ENTRY_BYTES_MAX;
use folio_proto::wire::{MasterKey, Request, Response};
use folio_proto::{
    ENTRY_HEADER_BYTES, Entry, EntryHeader, EntryId, INVALID_ENTRY_ID, LedgerId, Status,
};
use tokio::sync::{Semaphore, watch};

use crate::BookieConnection;
use crate::error::{LedgerError, Result};
use crate::pool::BookiePool;

pub use folio_proto::wire::master_key;

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
    pub fn new(ensemble_size: u16, write_quorum: u16, ack_quorum: u16) -> CreateOptions {
        CreateOptions {
            ensemble_size,
            write_quorum,
            ack_quorum,
            password: Vec::new(),
            custom: BTreeMap::new(),
            ledger_id: None,
            guard: Vec::new(),
        }
    }
}

/// Adds in flight per writer before `add` waits (backpressure).
pub const OUTSTANDING_ADDS_MAX: usize = 10_000;

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
}

impl LedgerClient {
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys) -> LedgerClient {
        let pool = Arc::new(BookiePool::new(meta.clone(), keys.clone(), 4096));
        LedgerClient {
            meta,
            keys,
            pool,
            request_timeout: REQUEST_TIMEOUT,
            speculative_read_timeout: std::time::Duration::from_secs(2),
            explicit_lac_interval: Some(std::time::Duration::from_secs(1)),
        }
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

    /// Creates a ledger on `E` writable bookies chosen at random (never read-only ones).
    pub async fn create(&self, opts: CreateOptions) -> Result<LedgerWriter> {
        let (e, w, a) = (opts.ensemble_size, opts.write_quorum, opts.ack_quorum);
        if !(e >= w && w >= a && a >= 1) {
            return Err(LedgerError::InvalidQuorum(format!(
                "need E >= Qw >= Qa >= 1, got E={e} Qw={w} Qa={a}"
            )));
        }
        let writable = self.pool.writable().await?;
        if writable.len() < e as usize {
            return Err(LedgerError::NotEnoughBookies { need: e as usize, have: writable.len() });
        }
        let ensemble: Vec<String> = {
            let mut rng = rand::rng();
            rand::seq::index::sample(&mut rng, writable.len(), e as usize)
                .into_iter()
                .map(|i| writable[i].clone())
                .collect()
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
            creator_token: rand::random(),
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

    pub async fn metadata(&self, ledger_id: LedgerId) -> Result<LedgerMetadata> {
        let key = self.keys.ledger(ledger_id);
        let v = self.meta.get(&key).await?.ok_or(LedgerError::NoSuchLedger(ledger_id))?;
        Ok(LedgerMetadata::decode(&key, &v.value)?)
    }

    /// Opens a ledger for reading, without recovery (it may still be written).
    pub async fn open(&self, ledger_id: LedgerId) -> Result<LedgerReader> {
        Ok(LedgerReader {
            id: ledger_id,
            metadata: self.metadata(ledger_id).await?,
            client: self.clone(),
        })
    }

    /// Deletes the ledger's metadata; bookies reclaim its data through garbage collection.
    pub async fn delete(&self, ledger_id: LedgerId) -> Result<()> {
        if !self.meta.delete(&self.keys.ledger(ledger_id), Expect::Any).await? {
            return Err(LedgerError::NoSuchLedger(ledger_id));
        }
        Ok(())
    }

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
    failed: Option<String>,
    closed: bool,
    /// An ensemble change is in progress: the LAC must not move (BookKeeper's
    /// `changingEnsemble`), so the new fragment's start stays right.
    changing: bool,
    /// Positions whose bookie failed with no replacement available: skipped while the
    /// others can still give every entry its ack quorum.
    down: std::collections::BTreeSet<usize>,
}

/// Moves the published LAC forward to `lac`; never back.
fn publish_lac(tx: &watch::Sender<EntryId>, lac: EntryId) {
    tx.send_if_modified(|published| {
        let forward = lac > *published;
        if forward {
            *published = lac;
        }
        forward
    });
}

/// Default per-request timeout (see `LedgerClient::with_request_timeout`).
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug)]
struct WriterInner {
    id: LedgerId,
    key: MasterKey,
    metadata: Mutex<LedgerMetadata>,
    /// The current (last) ensemble, by position.
    ensemble: Mutex<Vec<(String, Arc<BookieConnection>)>>,
    state: Mutex<WriterState>,
    lac_tx: watch::Sender<EntryId>,
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

impl LedgerWriter {
    fn new(
        id: LedgerId,
        key: MasterKey,
        metadata: LedgerMetadata,
        bookies: Vec<(String, Arc<BookieConnection>)>,
        client: LedgerClient,
    ) -> LedgerWriter {
        let state = WriterState { lac: INVALID_ENTRY_ID, ..WriterState::default() };
        let inner = WriterInner {
            id,
            key,
            metadata: Mutex::new(metadata),
            ensemble: Mutex::new(bookies),
            state: Mutex::new(state),
            lac_tx: watch::channel(INVALID_ENTRY_ID).0,
            change_lock: tokio::sync::Mutex::new(()),
            client,
        };
        let inner = Arc::new(inner);
        if let Some(interval) = inner.client.explicit_lac_interval {
            tokio::spawn(explicit_lac(Arc::downgrade(&inner), interval));
        }
        LedgerWriter { inner, slots: Arc::new(Semaphore::new(OUTSTANDING_ADDS_MAX)) }
    }

    pub fn id(&self) -> LedgerId {
        self.inner.id
    }

    pub fn last_add_confirmed(&self) -> EntryId {
        *self.inner.lac_tx.borrow()
    }

    pub fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata.lock().expect("metadata lock").clone()
    }

    /// A reader over this ledger as the writer knows it now (its current ensembles), for
    /// entries up to `last_add_confirmed`.
    pub fn reader(&self) -> LedgerReader {
        LedgerReader {
            id: self.inner.id,
            metadata: self.metadata(),
            client: self.inner.client.clone(),
        }
    }

    /// Appends `payload`; returns its entry id once it and every earlier entry reached the
    /// ack quorum.
    pub async fn add(&self, payload: &[u8]) -> Result<EntryId> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LedgerError::Closed(self.inner.id))?;
        self.start_add(payload, Some(slot))?.1.await
    }

    /// Starts an add and returns its entry id at once; the caller follows completion
    /// through `lac_watch` (entries at or below the LAC are confirmed) and `failure`, and
    /// bounds its own outstanding adds (this takes no slot).
    pub fn add_detached(&self, payload: &[u8]) -> Result<EntryId> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        Ok(self.start_add(payload, None)?.0)
    }

    /// The LAC as it moves; also changes (to the same value) when the writer fails.
    pub fn lac_watch(&self) -> watch::Receiver<EntryId> {
        self.inner.lac_tx.subscribe()
    }

    /// Why the writer failed, once it has: no add after that succeeds.
    pub fn failure(&self) -> Option<String> {
        self.inner.state.lock().expect("writer lock").failed.clone()
    }

    /// Starts an add without waiting: the entry id is assigned before this returns (so
    /// callers that start adds in order get ids in that order), and the future completes
    /// when the entry is confirmed, as `add` does. Fails with `Busy` when
    /// `OUTSTANDING_ADDS_MAX` adds are outstanding.
    pub fn add_nowait(
        &self,
        payload: &[u8],
    ) -> Result<(EntryId, impl Future<Output = Result<EntryId>> + Send + 'static)> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        let slot =
            self.slots.clone().try_acquire_owned().map_err(|_| LedgerError::Busy(self.inner.id))?;
        self.start_add(payload, Some(slot))
    }

    fn start_add(
        &self,
        payload: &[u8],
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Result<(EntryId, impl Future<Output = Result<EntryId>> + Send + 'static)> {
        let inner = &self.inner;
        let entry_id = {
            let mut st = inner.state.lock().expect("writer lock");
            if let Some(f) = &st.failed {
                return Err(LedgerError::WriterFailed(inner.id, f.clone()));
            }
            if st.closed {
                return Err(LedgerError::Closed(inner.id));
            }
            let id = st.next_entry;
            st.next_entry += 1;
            st.length += payload.len() as u64;
            let header = EntryHeader {
                ledger_id: inner.id,
                entry_id: id,
                last_add_confirmed: st.lac,
                length: st.length,
            };
            let entry = Entry::encode(header, payload).into_bytes();
            let length = st.length;
            st.pending.insert(id, PendingAdd { entry, length, acked: Default::default() });
            id
        };
        let down = inner.state.lock().expect("writer lock").down.clone();
        let positions: Vec<usize> =
            inner.write_set(entry_id).into_iter().filter(|p| !down.contains(p)).collect();
        if positions.len() < inner.quorums().1 {
            inner.fail(format!(
                "only {} bookies of entry {entry_id}'s write set are up, fewer than the ack quorum",
                positions.len()
            ));
        }
        for pos in positions {
            inner.send(entry_id, pos);
        }
        let inner = inner.clone();
        Ok((entry_id, async move {
            let _slot = slot;
            inner.wait_confirmed(entry_id).await
        }))
    }
}

impl WriterInner {
    async fn wait_confirmed(self: &Arc<Self>, entry_id: EntryId) -> Result<EntryId> {
        let inner = self;
        let mut rx = inner.lac_tx.subscribe();
        let confirmed = rx
            .wait_for(|lac| {
                *lac >= entry_id || inner.state.lock().expect("writer lock").failed.is_some()
            })
            .await
            .map(|lac| *lac >= entry_id)
            .unwrap_or(false);
        if confirmed {
            return Ok(entry_id);
        }
        let f = inner.state.lock().expect("writer lock").failed.clone().unwrap_or_default();
        if f.contains("fenced") {
            return Err(LedgerError::Fenced(inner.id));
        }
        Err(LedgerError::WriterFailed(inner.id, f))
    }
}

impl LedgerWriter {
    /// Waits for outstanding adds, then records the ledger as closed at its LAC.
    pub async fn close(&self) -> Result<EntryId> {
        let inner = &self.inner;
        let _all = self
            .slots
            .acquire_many(OUTSTANDING_ADDS_MAX as u32)
            .await
            .map_err(|_| LedgerError::Closed(inner.id))?;
        let (lac, length) = {
            let mut st = inner.state.lock().expect("writer lock");
            st.closed = true;
            (st.lac, st.lac_length)
        };
        let key = inner.client.keys.ledger(inner.id);
        let id = inner.id;
        let closed = update::<LedgerMetadata>(inner.client.meta.as_ref(), &key, |m| {
            let Some(m) = m else {
                return Err(folio_meta::MetaError::Corrupt {
                    key: key.clone(),
                    detail: format!("ledger {id} vanished"),
                });
            };
            match m.state {
                LedgerState::Closed if m.last_entry_id == lac => Ok(Update::Nothing),
                LedgerState::Open => {
                    let mut m = m.clone();
                    m.state = LedgerState::Closed;
                    m.last_entry_id = lac;
                    m.length = length;
                    Ok(Update::Write(m))
                }
                // Someone recovered (or is recovering) the ledger: it is theirs to close.
                _ => Err(folio_meta::MetaError::Conflict { key: key.clone() }),
            }
        })
        .await;
        match closed {
            Ok(Some((m, _))) => {
                *inner.metadata.lock().expect("metadata lock") = m;
                Ok(lac)
            }
            Ok(None) => Err(LedgerError::NoSuchLedger(id)),
            Err(folio_meta::MetaError::Conflict { .. }) => Err(LedgerError::Fenced(id)),
            Err(e) => Err(e.into()),
        }
    }
}

/// Sends the LAC to the ensemble whenever it moved since the last time, so tailing readers
/// see the last entries even when no later add piggybacks them. Ends with the writer.
async fn explicit_lac(writer: std::sync::Weak<WriterInner>, interval: std::time::Duration) {
    let mut sent = INVALID_ENTRY_ID;
    loop {
        tokio::time::sleep(interval).await;
        let Some(w) = writer.upgrade() else { return };
        let (lac, done) = {
            let st = w.state.lock().expect("writer lock");
            (st.lac, st.closed || st.failed.is_some())
        };
        if done {
            return;
        }
        if lac <= sent {
            continue;
        }
        let ensemble: Vec<String> =
            w.ensemble.lock().expect("ensemble lock").iter().map(|(b, _)| b.clone()).collect();
        for b in ensemble {
            let request = Request::WriteLac { ledger_id: w.id, lac, master_key: w.key };
            if let Err(e) = w.client.call(&b, request).await {
                tracing::debug!(ledger = w.id, bookie = %b, error = %e, "explicit LAC not delivered");
            }
        }
        sent = lac;
    }
}

impl WriterInner {
    fn quorums(&self) -> (usize, usize) {
        let m = self.metadata.lock().expect("metadata lock");
        (m.write_quorum as usize, m.ack_quorum as usize)
    }

    /// Ensemble positions of entry `e`'s write set: `(e + i) mod E` for `i < Qw`.
    fn write_set(&self, entry_id: EntryId) -> Vec<usize> {
        let (w, _) = self.quorums();
        let e = self.ensemble.lock().expect("ensemble lock").len() as i64;
        (0..w).map(|i| ((entry_id + i as i64) % e) as usize).collect()
    }

    fn fail(&self, reason: String) {
        tracing::warn!(ledger = self.id, %reason, "ledger writer failed");
        self.state.lock().expect("writer lock").failed.get_or_insert(reason);
        self.lac_tx.send_modify(|_| {}); // wake every waiting add
    }

    /// Sends a pending entry to the bookie at `pos`; the answer comes back to `on_answer`.
    fn send(self: &Arc<Self>, entry_id: EntryId, pos: usize) {
        let Some(entry) =
            self.state.lock().expect("writer lock").pending.get(&entry_id).map(|p| p.entry.clone())
        else {
            return; // already confirmed
        };
        let (bookie, conn) = self.ensemble.lock().expect("ensemble lock")[pos].clone();
        let this = self.clone();
        tokio::spawn(async move {
            let request = Request::Add { master_key: this.key, recovery: false, entry };
            let timeout = this.client.request_timeout;
            let answer = match tokio::time::timeout(timeout, conn.request(request)).await {
                Ok(Ok(f)) => Ok(f.status),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            };
            this.on_answer(entry_id, pos, &bookie, answer);
        });
    }

    fn on_answer(
        self: &Arc<Self>,
        entry_id: EntryId,
        pos: usize,
        bookie: &str,
        answer: std::result::Result<Status, String>,
    ) {
        match answer {
            Ok(Status::Ok) => {
                let still_there = self.ensemble.lock().expect("ensemble lock")[pos].0 == bookie;
                if still_there {
                    let mut st = self.state.lock().expect("writer lock");
                    if let Some(p) = st.pending.get_mut(&entry_id) {
                        p.acked.insert(pos);
                    }
                    drop(st);
                    self.advance_lac();
                }
            }
            Ok(Status::Fenced) => {
                self.fail(format!("ledger {} is fenced (bookie {bookie})", self.id))
            }
            Ok(Status::Unauthorized) => {
                self.fail(format!("bookie {bookie} rejected the master key"))
            }
            Ok(status) => self.replace_later(pos, bookie, status.name().to_string()),
            Err(e) => self.replace_later(pos, bookie, e),
        }
    }

    /// Moves the LAC over every leading entry with `Qa` acks (unless an ensemble change is
    /// in progress) and wakes the adds it confirms.
    fn advance_lac(&self) {
        let (_, a) = self.quorums();
        let mut st = self.state.lock().expect("writer lock");
        if st.changing {
            return;
        }
        let before = st.lac;
        let mut lac = st.lac;
        let mut lac_length = st.lac_length;
        while let Some(entry) = st.pending.first_entry() {
            if *entry.key() != lac + 1 || entry.get().acked.len() < a {
                break;
            }
            let (id, p) = entry.remove_entry();
            lac = id;
            lac_length = p.length;
        }
        st.lac = lac;
        st.lac_length = lac_length;
        drop(st);
        if lac != before {
            // Acks of two entries can advance the LAC on two threads and publish in either
            // order; the watch only moves forward. (It once went back from 6 to 5, leaving
            // the add of entry 6 waiting for ever when no later add came to move it: a
            // produce never acknowledged, with nothing logged.) Not published under the
            // state lock: `wait_confirmed` takes that lock inside the watch's read lock.
            publish_lac(&self.lac_tx, lac);
        }
    }

    fn replace_later(self: &Arc<Self>, pos: usize, bookie: &str, why: String) {
        tracing::info!(ledger = self.id, bookie, %why, "bookie failed an add; changing the ensemble");
        let (this, bookie) = (self.clone(), bookie.to_string());
        tokio::spawn(async move {
            match this.change_ensemble(pos, &bookie).await {
                Ok(()) => {}
                Err(LedgerError::NotEnoughBookies { .. }) => this.mark_down(pos, &bookie),
                Err(e) => this.fail(format!("ensemble change after {bookie} failed ({why}): {e}")),
            }
        });
    }

    /// No replacement for `pos`: go on without it while every unconfirmed entry can still
    /// reach its ack quorum from the other bookies of its write set.
    fn mark_down(&self, pos: usize, bookie: &str) {
        let (_, a) = self.quorums();
        let mut st = self.state.lock().expect("writer lock");
        st.down.insert(pos);
        let ids: Vec<EntryId> = st.pending.keys().copied().collect();
        let short = ids
            .into_iter()
            .find(|id| self.write_set(*id).iter().filter(|p| !st.down.contains(p)).count() < a);
        drop(st);
        match short {
            Some(id) => self.fail(format!("bookie {bookie} failed, no replacement, and entry {id} can no longer reach its ack quorum")),
            None => tracing::warn!(ledger = self.id, bookie, "no replacement bookie; writing to the rest of the ensemble"),
        }
    }

    /// Replaces the bookie at `pos` (if it is still `failed`): a new fragment from LAC + 1
    /// through the metadata compare-and-set loop, then every unconfirmed entry whose write
    /// set holds `pos` is resent to the replacement.
    async fn change_ensemble(self: &Arc<Self>, pos: usize, failed: &str) -> Result<()> {
        let _one_at_a_time = self.change_lock.lock().await;
        if self.ensemble.lock().expect("ensemble lock")[pos].0 != failed {
            return Ok(()); // already replaced for another entry's failure
        }
        self.state.lock().expect("writer lock").changing = true;
        let result = self.install_replacement(pos, failed).await;
        self.state.lock().expect("writer lock").changing = false;
        if result.is_err() {
            // Acks that arrived while the LAC was frozen count now: nothing else may come
            // to move it (without this, adds waited for ever when no replacement existed).
            self.advance_lac();
        }
        result?;
        let resend: Vec<EntryId> = {
            let mut st = self.state.lock().expect("writer lock");
            let ids: Vec<EntryId> = st.pending.keys().copied().collect();
            let mut out = Vec::new();
            for id in ids {
                if self.write_set(id).contains(&pos) {
                    if let Some(p) = st.pending.get_mut(&id) {
                        // The failed bookie's ack no longer counts: the entry now belongs to
                        // the new fragment, where that position is the replacement.
                        p.acked.remove(&pos);
                    }
                    out.push(id);
                }
            }
            out
        };
        for id in resend {
            self.send(id, pos);
        }
        self.advance_lac();
        Ok(())
    }

    async fn install_replacement(&self, pos: usize, failed: &str) -> Result<()> {
        let client = &self.client;
        let current: Vec<String> =
            self.ensemble.lock().expect("ensemble lock").iter().map(|(b, _)| b.clone()).collect();
        let mut candidates: Vec<String> =
            client.pool.writable().await?.into_iter().filter(|b| !current.contains(b)).collect();
        loop {
            if candidates.is_empty() {
                return Err(LedgerError::NotEnoughBookies {
                    need: current.len() + 1,
                    have: current.len(),
                });
            }
            let pick = candidates.swap_remove(rand::random_range(0..candidates.len()));
            let Ok(conn) = client.pool.get(&pick).await else { continue };
            let start = self.state.lock().expect("writer lock").lac + 1;
            let key = client.keys.ledger(self.id);
            let (id, failed_s, pick_s) = (self.id, failed.to_string(), pick.clone());
            let updated = update::<LedgerMetadata>(client.meta.as_ref(), &key, |m| {
                let Some(m) = m else {
                    return Err(folio_meta::MetaError::Corrupt {
                        key: key.clone(),
                        detail: format!("ledger {id} vanished"),
                    });
                };
                if m.state != LedgerState::Open {
                    return Err(folio_meta::MetaError::Conflict { key: key.clone() });
                }
                let (&last_start, last) = m.ensembles.last_key_value().expect("validated metadata");
                if last[pos] != failed_s {
                    return Ok(Update::Nothing);
                }
                let mut ens = last.clone();
                ens[pos] = pick_s.clone();
                let mut m = m.clone();
                if last_start == start {
                    m.ensembles.insert(last_start, ens);
                } else {
                    m.ensembles.insert(start, ens);
                }
                Ok(Update::Write(m))
            })
            .await;
            let m = match updated {
                Ok(Some((m, _))) => m,
                Ok(None) => return Err(LedgerError::NoSuchLedger(self.id)),
                Err(folio_meta::MetaError::Conflict { .. }) => {
                    return Err(LedgerError::Fenced(self.id));
                }
                Err(e) => return Err(e.into()),
            };
            tracing::info!(ledger = self.id, failed, replacement = %pick, from_entry = start, "ensemble changed");
            *self.metadata.lock().expect("metadata lock") = m;
            self.ensemble.lock().expect("ensemble lock")[pos] = (pick, conn);
            return Ok(());
        }
    }
}

/// Reads a ledger. Entries are verified (digest, ledger and entry ids) before they are
/// returned; a bad or missing copy makes the reader try the next bookie of the write set.
#[derive(Debug)]
pub struct LedgerReader {
    id: LedgerId,
    metadata: LedgerMetadata,
    client: LedgerClient,
}

impl LedgerReader {
    pub fn id(&self) -> LedgerId {
        self.id
    }

    pub fn metadata(&self) -> &LedgerMetadata {
        &self.metadata
    }

    /// The last entry of a closed ledger; `None` while it is open.
    pub fn last_entry_id(&self) -> Option<EntryId> {
        (self.metadata.state == LedgerState::Closed).then_some(self.metadata.last_entry_id)
    }

    /// The highest LAC any bookie of the last ensemble reports.
    pub async fn read_lac(&self) -> Result<EntryId> {
        let (_, ensemble) = self.metadata.ensembles.last_key_value().expect("validated metadata");
        let mut best = INVALID_ENTRY_ID;
        let mut errors = Vec::new();
        for b in ensemble {
            match self.client.call(b, Request::ReadLac { ledger_id: self.id }).await {
                Ok(f) => match f.response {
                    Response::ReadLac { lac: Some(l), .. } if f.status == Status::Ok => {
                        best = best.max(l)
                    }
                    _ => errors.push(format!("{b}: {}", f.status.name())),
                },
                Err(e) => errors.push(format!("{b}: {e}")),
            }
        }
        if best == INVALID_ENTRY_ID && errors.len() == ensemble.len() {
            return Err(LedgerError::ReadFailed {
                ledger_id: self.id,
                entry_id: INVALID_ENTRY_ID,
                detail: errors.join("; "),
            });
        }
        Ok(best)
    }

    /// Reads one entry from its write set, trying each bookie in turn.
    pub async fn read(&self, entry_id: EntryId) -> Result<Entry> {
        if let Some(last) = self.last_entry_id()
            && entry_id > last
        {
            return Err(LedgerError::PastEnd { ledger_id: self.id, entry_id, last });
        }
        let ensemble = self.metadata.ensemble_for(entry_id);
        let (e, w) = (ensemble.len() as i64, self.metadata.write_quorum as i64);
        let replicas: Vec<String> =
            (0..w).map(|i| ensemble[((entry_id + i) % e) as usize].clone()).collect();
        let (tx, mut rx) = tokio::sync::mpsc::channel(replicas.len());
        let attempt = |bookie: String| {
            let (client, tx, id) = (self.client.clone(), tx.clone(), self.id);
            tokio::spawn(async move {
                let r = client.read_one(&bookie, id, entry_id).await;
                let _ = tx.send((bookie, r)).await;
            });
        };
        let (mut next, mut outstanding) = (1, 1);
        attempt(replicas[0].clone());
        let mut errors: Vec<String> = Vec::new();
        loop {
            tokio::select! {
                Some((bookie, r)) = rx.recv() => {
                    outstanding -= 1;
                    match r {
                        Ok(entry) => return Ok(entry),
                        Err(e) => errors.push(format!("{bookie}: {e}")),
                    }
                    if next < replicas.len() {
                        attempt(replicas[next].clone());
                        next += 1;
                        outstanding += 1;
                    } else if outstanding == 0 {
                        break;
                    }
                }
                // Speculative read: the next replica, without waiting for this one.
                () = tokio::time::sleep(self.client.speculative_read_timeout), if next < replicas.len() => {
                    attempt(replicas[next].clone());
                    next += 1;
                    outstanding += 1;
                }
            }
        }
        errors.sort();
        Err(LedgerError::ReadFailed { ledger_id: self.id, entry_id, detail: errors.join("; ") })
    }

    /// Waits until the LAC passes `after` (tailing a ledger that is still written), polling
    /// every `poll`; returns the new LAC, or the last entry if the ledger got closed.
    pub async fn wait_for_lac(
        &mut self,
        after: EntryId,
        poll: std::time::Duration,
    ) -> Result<EntryId> {
        loop {
            let lac = self.read_lac().await?;
            if lac > after {
                return Ok(lac);
            }
            self.metadata = self.client.metadata(self.id).await?;
            if let Some(last) = self.last_entry_id() {
                return Ok(last);
            }
            tokio::time::sleep(poll).await;
        }
    }
}

impl LedgerClient {
    /// One entry from one bookie, verified (digest, ledger and entry ids).
    async fn read_one(
        &self,
        bookie: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> Result<Entry> {
        let f = self.call(bookie, Request::Read { ledger_id, entry_id, fence: None }).await?;
        let bytes = match f.response {
            Response::Read { entry: Some(bytes), .. } if f.status == Status::Ok => bytes,
            _ => {
                return Err(LedgerError::ReadFailed {
                    ledger_id,
                    entry_id,
                    detail: f.status.name().to_string(),
                });
            }
        };
        match Entry::decode(bytes) {
            Ok(e) if e.ledger_id() == ledger_id && e.entry_id() == entry_id => Ok(e),
            Ok(_) => Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id,
                detail: "returned another entry".into(),
            }),
            Err(e) => Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id,
                detail: format!("bad copy: {e}"),
            }),
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

/// For every write set (Qw consecutive positions) of `ensemble_size`, at least
/// `Qw − Qa + 1` definite answers: then no Qa bookies are left that could still accept a
/// write, so the fence covers the ledger.
fn quorum_coverage(definite: &[bool], write_quorum: usize, ack_quorum: usize) -> bool {
    let e = definite.len();
    (0..e).all(|start| {
        (0..write_quorum).filter(|i| definite[(start + i) % e]).count() > write_quorum - ack_quorum
    })
}

impl LedgerClient {
    async fn ask(
        &self,
        bookie: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
        key: MasterKey,
    ) -> Answer {
        let result =
            self.call(bookie, Request::Read { ledger_id, entry_id, fence: Some(key) }).await;
        match result {
            Ok(f) => match (f.status, f.response) {
                (Status::Ok, Response::Read { entry: Some(bytes), .. }) => {
                    match Entry::decode(bytes) {
                        Ok(e)
                            if e.ledger_id() == ledger_id
                                && (entry_id < 0 || e.entry_id() == entry_id) =>
                        {
                            Answer::Has(e)
                        }
                        Ok(_) => Answer::Unknown(format!("{bookie}: returned another entry")),
                        Err(err) => Answer::Unknown(format!("{bookie}: bad copy: {err}")),
                    }
                }
                (Status::NoEntry | Status::NoLedger, _) => Answer::Missing,
                (Status::Unknown, _) => Answer::Limbo(format!("{bookie}: UNKNOWN (limbo)")),
                (status, _) => Answer::Unknown(format!("{bookie}: {}", status.name())),
            },
            Err(e) => Answer::Unknown(format!("{bookie}: {e}")),
        }
    }

    /// Opens a ledger with recovery: fences it so its writer can never add again (D3),
    /// finds its end without trusting bookies that may have lost data (D2), writes back what
    /// it finds so every entry reaches its write quorum, and closes it so that every entry
    /// the writer saw acknowledged lies at or below the last entry (D1).
    pub async fn recover(&self, ledger_id: LedgerId) -> Result<LedgerReader> {
        let key_name = self.keys.ledger(ledger_id);
        // 1. Mark IN_RECOVERY (a second recovery joins the first; both are idempotent).
        let marked = update::<LedgerMetadata>(self.meta.as_ref(), &key_name, |m| match m {
            None => Ok(Update::Nothing),
            Some(m) if m.state == LedgerState::Open => {
                let mut m = m.clone();
                m.state = LedgerState::InRecovery;
                Ok(Update::Write(m))
            }
            Some(_) => Ok(Update::Nothing),
        })
        .await?;
        let Some((metadata, _)) = marked else { return Err(LedgerError::NoSuchLedger(ledger_id)) };
        if metadata.state == LedgerState::Closed {
            return Ok(LedgerReader { id: ledger_id, metadata, client: self.clone() });
        }
        let key = master_key(metadata.password.as_deref().unwrap_or_default());
        let (w, a) = (metadata.write_quorum as usize, metadata.ack_quorum as usize);
        let (&first, ensemble) = metadata.ensembles.last_key_value().expect("validated metadata");
        let ensemble = ensemble.clone();

        // 2. Fence every bookie of the last ensemble and learn the LAC, under quorum coverage.
        let mut asks = Vec::new();
        for b in &ensemble {
            let (client, b) = (self.clone(), b.clone());
            asks.push(tokio::spawn(async move {
                client.ask(&b, ledger_id, INVALID_ENTRY_ID, key).await
            }));
        }
        let mut lac = INVALID_ENTRY_ID;
        let (mut definite, mut unknown) = (Vec::new(), Vec::new());
        for t in asks {
            match t.await.unwrap_or(Answer::Unknown("task failed".into())) {
                Answer::Has(e) => {
                    lac = lac.max(e.last_add_confirmed());
                    definite.push(true);
                }
                Answer::Missing => definite.push(true),
                // Fenced, but its LAC is unknown: the others' LAC (or the last fragment's
                // start) is where reading starts, which is only ever earlier.
                Answer::Limbo(_) => definite.push(true),
                Answer::Unknown(why) => {
                    definite.push(false);
                    unknown.push(why);
                }
            }
        }
        if !quorum_coverage(&definite, w, a) {
            return Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id: INVALID_ENTRY_ID,
                detail: format!("fencing did not reach quorum coverage: {}", unknown.join("; ")),
            });
        }
        // 3. Start after the LAC, and never before the last fragment (BookKeeper #2615).
        lac = lac.max(first - 1);
        // Where write-backs go; replaced bookies start new fragments, recorded at close.
        let mut target = WriteBack {
            ledger_id,
            key,
            ensemble: ensemble.clone(),
            fragments: BTreeMap::new(),
            w,
            a,
        };
        let mut last_length = None;

        // 4–5. Read forward with fencing reads (BookKeeper #2614); write back positives.
        let mut entry_id = lac + 1;
        loop {
            let set: Vec<String> = (0..w)
                .map(|i| ensemble[((entry_id + i as i64) % ensemble.len() as i64) as usize].clone())
                .collect();
            let mut asks = Vec::new();
            for b in &set {
                let (client, b) = (self.clone(), b.clone());
                asks.push(tokio::spawn(
                    async move { client.ask(&b, ledger_id, entry_id, key).await },
                ));
            }
            let (mut found, mut missing, mut unknown) = (None, 0, Vec::new());
            for t in asks {
                match t.await.unwrap_or(Answer::Unknown("task failed".into())) {
                    Answer::Has(e) => found = Some(e),
                    Answer::Missing => missing += 1,
                    Answer::Unknown(why) | Answer::Limbo(why) => unknown.push(why),
                }
            }
            if let Some(entry) = found {
                self.write_back(&mut target, &entry).await?;
                last_length = Some(entry.header().length);
                lac = entry_id;
                entry_id += 1;
                continue;
            }
            if missing > w - a {
                break; // a definite negative: nothing at or after it was ever acknowledged
            }
            return Err(LedgerError::ReadFailed {
                ledger_id,
                entry_id,
                detail: format!(
                    "recovery cannot decide entry {entry_id}: {missing} of the {} no-entry answers needed, the rest unknown ({})",
                    w - a + 1,
                    unknown.join("; ")
                ),
            });
        }
        let length = match last_length {
            Some(l) => l,
            None if lac >= 0 => {
                self.open(ledger_id).await?.read_unchecked(lac).await?.header().length
            }
            None => 0,
        };
        // 6. Close. If a concurrent recovery closed first, its end is the ledger's end.
        let closed = update::<LedgerMetadata>(self.meta.as_ref(), &key_name, |m| match m {
            None => Ok(Update::Nothing),
            Some(m) if m.state == LedgerState::Closed => Ok(Update::Nothing),
            Some(m) => {
                let mut m = m.clone();
                m.state = LedgerState::Closed;
                m.last_entry_id = lac;
                m.length = length;
                for (start, ensemble) in target.fragments.range(..=lac) {
                    m.ensembles.insert(*start, ensemble.clone());
                }
                Ok(Update::Write(m))
            }
        })
        .await?;
        let Some((metadata, _)) = closed else { return Err(LedgerError::NoSuchLedger(ledger_id)) };
        tracing::info!(
            ledger = ledger_id,
            last_entry = metadata.last_entry_id,
            "ledger recovered and closed"
        );
        Ok(LedgerReader { id: ledger_id, metadata, client: self.clone() })
    }

    /// Re-adds a recovered entry to its write set with the recovery flag (which passes the
    /// fence) and waits for the ack quorum.
    /// Re-adds a recovered entry to its write set with the recovery flag (which passes the
    /// fence) and waits for every position to take it. A bookie that fails is replaced in
    /// the recovery's own ensemble (BookKeeper's `newEnsemblesFromRecovery`): the new
    /// fragment starts at this entry and is written to the metadata when the ledger closes.
    async fn write_back(&self, t: &mut WriteBack, entry: &Entry) -> Result<()> {
        let WriteBack { ledger_id, key, ensemble, fragments, w, a } = t;
        let (ledger_id, key, w, a) = (*ledger_id, *key, *w, *a);
        let entry_id = entry.entry_id();
        let e = ensemble.len() as i64;
        let mut oks = 0;
        let mut failures = Vec::new();
        for i in 0..w {
            let pos = ((entry_id + i as i64) % e) as usize;
            // Each position gets a few chances: the bookie, then replacements.
            for _ in 0..3 {
                let b = ensemble[pos].clone();
                let add = Request::Add {
                    master_key: key,
                    recovery: true,
                    entry: entry.as_bytes().clone(),
                };
                match self.call(&b, add).await {
                    Ok(f) if f.status == Status::Ok => {
                        oks += 1;
                        break;
                    }
                    Ok(f) if matches!(f.status, Status::Unauthorized) => {
                        return Err(LedgerError::Unauthorized(ledger_id));
                    }
                    other => {
                        let why = match other {
                            Ok(f) => f.status.name().to_string(),
                            Err(e) => e.to_string(),
                        };
                        failures.push(format!("{b}: {why}"));
                        let spare: Vec<String> = self
                            .pool
                            .writable()
                            .await?
                            .into_iter()
                            .filter(|x| !ensemble.contains(x))
                            .collect();
                        if spare.is_empty() {
                            break;
                        }
                        let pick = spare[rand::random_range(0..spare.len())].clone();
                        tracing::info!(ledger = ledger_id, failed = %b, replacement = %pick, from_entry = entry_id, "recovery replaces a bookie");
                        ensemble[pos] = pick;
                        fragments.insert(entry_id, ensemble.clone());
                    }
                }
            }
        }
        if oks >= a {
            return Ok(());
        }
        Err(LedgerError::NotEnoughAcks {
            ledger_id,
            entry_id,
            detail: format!("recovery write-back: {}", failures.join("; ")),
        })
    }
}

impl LedgerReader {
    /// Reads an entry without checking it against the closed end (recovery uses it).
    async fn read_unchecked(&self, entry_id: EntryId) -> Result<Entry> {
        let mut m = self.metadata.clone();
        m.state = LedgerState::Open;
        LedgerReader { id: self.id, metadata: m, client: self.client.clone() }.read(entry_id).await
    }
}

#[cfg(test)]
mod tests {
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
