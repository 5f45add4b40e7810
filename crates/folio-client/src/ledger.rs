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

use std::collections::{BTreeMap, HashMap};
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
use tokio::sync::{Semaphore, mpsc, watch};

use crate::BookieConnection;
use crate::error::{LedgerError, Result};
use crate::pool::BookiePool;

/// `SHA1("ledger" ‖ password)`, as BookKeeper derives it.
pub fn master_key(password: &[u8]) -> MasterKey {
    let mut h = sha1_smol::Sha1::new();
    h.update(b"ledger");
    h.update(password);
    h.digest().bytes()
}

#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub ensemble_size: u16,
    pub write_quorum: u16,
    pub ack_quorum: u16,
    pub password: Vec<u8>,
    pub custom: BTreeMap<String, Bytes>,
}

impl CreateOptions {
    pub fn new(ensemble_size: u16, write_quorum: u16, ack_quorum: u16) -> CreateOptions {
        CreateOptions {
            ensemble_size,
            write_quorum,
            ack_quorum,
            password: Vec::new(),
            custom: BTreeMap::new(),
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
}

impl LedgerClient {
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys) -> LedgerClient {
        let pool = Arc::new(BookiePool::new(meta.clone(), keys.clone(), 4096));
        LedgerClient { meta, keys, pool }
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
        let id = self.meta.next_id(&self.keys.id_sequence(LEDGER_ID_SEQUENCE)).await?;
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
        self.meta.put(&self.keys.ledger(id), metadata.encode(), Expect::Absent).await?;
        let mut bookies = Vec::with_capacity(ensemble.len());
        for b in &ensemble {
            bookies.push((b.clone(), self.pool.get(b).await?));
        }
        tracing::debug!(ledger = id, ?ensemble, "ledger created");
        Ok(LedgerWriter::new(id, master_key(&opts.password), metadata, bookies, self.clone()))
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

#[derive(Debug, Default)]
struct WriterState {
    next_entry: EntryId,
    /// Cumulative length after each entry not yet confirmed: entry id → length.
    lengths: BTreeMap<EntryId, u64>,
    length: u64,
    /// Entries acknowledged by Qa bookies but not yet contiguous with the LAC.
    acked: BTreeMap<EntryId, ()>,
    lac: EntryId,
    lac_length: u64,
    failed: Option<String>,
    closed: bool,
}

/// The single writer of a ledger. Cheap to share: `add` takes `&self`, so many adds can be
/// in flight; they complete in entry order.
#[derive(Debug)]
pub struct LedgerWriter {
    id: LedgerId,
    key: MasterKey,
    metadata: Mutex<LedgerMetadata>,
    bookies: Vec<(String, Arc<BookieConnection>)>,
    state: Mutex<WriterState>,
    lac_tx: watch::Sender<EntryId>,
    slots: Arc<Semaphore>,
    client: LedgerClient,
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
        LedgerWriter {
            id,
            key,
            metadata: Mutex::new(metadata),
            bookies,
            state: Mutex::new(state),
            lac_tx: watch::channel(INVALID_ENTRY_ID).0,
            slots: Arc::new(Semaphore::new(OUTSTANDING_ADDS_MAX)),
            client,
        }
    }

    pub fn id(&self) -> LedgerId {
        self.id
    }

    pub fn last_add_confirmed(&self) -> EntryId {
        *self.lac_tx.borrow()
    }

    pub fn metadata(&self) -> LedgerMetadata {
        self.metadata.lock().expect("metadata lock").clone()
    }

    /// Appends `payload`; returns its entry id once it and every earlier entry reached the
    /// ack quorum.
    pub async fn add(&self, payload: &[u8]) -> Result<EntryId> {
        if ENTRY_HEADER_BYTES + payload.len() > ENTRY_BYTES_MAX {
            return Err(LedgerError::TooLarge(payload.len()));
        }
        let _slot = self.slots.acquire().await.map_err(|_| LedgerError::Closed(self.id))?;
        let (entry_id, lac, length) = {
            let mut st = self.state.lock().expect("writer lock");
            if let Some(f) = &st.failed {
                return Err(LedgerError::WriterFailed(self.id, f.clone()));
            }
            if st.closed {
                return Err(LedgerError::Closed(self.id));
            }
            let id = st.next_entry;
            st.next_entry += 1;
            st.length += payload.len() as u64;
            let length = st.length;
            st.lengths.insert(id, length);
            (id, st.lac, length)
        };
        let entry = Entry::encode(
            EntryHeader { ledger_id: self.id, entry_id, last_add_confirmed: lac, length },
            payload,
        );
        if let Err(e) = self.replicate(entry_id, entry.into_bytes()).await {
            let mut st = self.state.lock().expect("writer lock");
            st.failed.get_or_insert_with(|| e.to_string());
            drop(st);
            self.lac_tx.send_modify(|_| {}); // wake waiters so they see the failure
            return Err(e);
        }
        self.acknowledge(entry_id);
        let mut rx = self.lac_tx.subscribe();
        let ok = rx
            .wait_for(|lac| {
                *lac >= entry_id || self.state.lock().expect("writer lock").failed.is_some()
            })
            .await
            .map(|lac| *lac >= entry_id)
            .unwrap_or(false);
        if !ok {
            let f = self.state.lock().expect("writer lock").failed.clone().unwrap_or_default();
            return Err(LedgerError::WriterFailed(self.id, f));
        }
        Ok(entry_id)
    }

    /// Sends the entry to its write set; returns once `Qa` bookies acknowledged it.
    async fn replicate(&self, entry_id: EntryId, entry: Bytes) -> Result<()> {
        let (e, w, a) = {
            let m = self.metadata.lock().expect("metadata lock");
            (m.ensemble_size as i64, m.write_quorum as usize, m.ack_quorum as usize)
        };
        let (tx, mut rx) = mpsc::channel(w);
        for i in 0..w {
            let (bookie, conn) = self.bookies[((entry_id + i as i64) % e) as usize].clone();
            let (tx, entry, key) = (tx.clone(), entry.clone(), self.key);
            tokio::spawn(async move {
                let r =
                    conn.request(Request::Add { master_key: key, recovery: false, entry }).await;
                let _ = tx.send((bookie, r)).await;
            });
        }
        drop(tx);
        let (mut oks, mut failures) = (0, Vec::new());
        while let Some((bookie, r)) = rx.recv().await {
            match r {
                Ok(f) if f.status == Status::Ok => {
                    oks += 1;
                    if oks == a {
                        return Ok(());
                    }
                }
                Ok(f) => {
                    if matches!(f.status, Status::Fenced | Status::Unauthorized) {
                        return Err(LedgerError::from_status(self.id, entry_id, &bookie, f.status));
                    }
                    failures.push(format!("{bookie}: {}", f.status.name()));
                }
                Err(err) => failures.push(format!("{bookie}: {err}")),
            }
            if failures.len() > w - a {
                break;
            }
        }
        Err(LedgerError::NotEnoughAcks {
            ledger_id: self.id,
            entry_id,
            detail: failures.join("; "),
        })
    }

    fn acknowledge(&self, entry_id: EntryId) {
        let mut st = self.state.lock().expect("writer lock");
        st.acked.insert(entry_id, ());
        let mut lac = st.lac;
        while st.acked.remove(&(lac + 1)).is_some() {
            lac += 1;
        }
        if lac != st.lac {
            let length = st.lengths.get(&lac).copied().unwrap_or(st.lac_length);
            st.lengths = st.lengths.split_off(&(lac + 1));
            st.lac = lac;
            st.lac_length = length;
            drop(st);
            self.lac_tx.send_replace(lac);
        }
    }

    /// Waits for outstanding adds, then records the ledger as closed at its LAC.
    pub async fn close(&self) -> Result<EntryId> {
        let _all = self
            .slots
            .acquire_many(OUTSTANDING_ADDS_MAX as u32)
            .await
            .map_err(|_| LedgerError::Closed(self.id))?;
        let (lac, length) = {
            let mut st = self.state.lock().expect("writer lock");
            st.closed = true;
            (st.lac, st.lac_length)
        };
        let key = self.client.keys.ledger(self.id);
        let id = self.id;
        let closed = update::<LedgerMetadata>(self.client.meta.as_ref(), &key, |m| {
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
                *self.metadata.lock().expect("metadata lock") = m;
                Ok(lac)
            }
            Ok(None) => Err(LedgerError::NoSuchLedger(id)),
            Err(folio_meta::MetaError::Conflict { .. }) => Err(LedgerError::Fenced(id)),
            Err(e) => Err(e.into()),
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
            match self.client.pool.get(b).await {
                Ok(c) => match c.request(Request::ReadLac { ledger_id: self.id }).await {
                    Ok(f) => match f.response {
                        Response::ReadLac { lac: Some(l), .. } if f.status == Status::Ok => {
                            best = best.max(l)
                        }
                        _ => errors.push(format!("{b}: {}", f.status.name())),
                    },
                    Err(e) => errors.push(format!("{b}: {e}")),
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
        let mut errors: HashMap<String, String> = HashMap::new();
        for i in 0..w {
            let bookie = &ensemble[((entry_id + i) % e) as usize];
            let result = async {
                let c = self.client.pool.get(bookie).await?;
                let f =
                    c.request(Request::Read { ledger_id: self.id, entry_id, fence: None }).await?;
                match f.response {
                    Response::Read { entry: Some(bytes), .. } if f.status == Status::Ok => {
                        Ok(bytes)
                    }
                    _ => Err(LedgerError::ReadFailed {
                        ledger_id: self.id,
                        entry_id,
                        detail: f.status.name().to_string(),
                    }),
                }
            }
            .await;
            match result.map(Entry::decode) {
                Ok(Ok(entry)) if entry.ledger_id() == self.id && entry.entry_id() == entry_id => {
                    return Ok(entry);
                }
                Ok(Ok(_)) => errors.insert(bookie.clone(), "returned another entry".into()),
                Ok(Err(e)) => errors.insert(bookie.clone(), format!("bad copy: {e}")),
                Err(e) => errors.insert(bookie.clone(), e.to_string()),
            };
        }
        let mut detail: Vec<String> =
            errors.into_iter().map(|(b, e)| format!("{b}: {e}")).collect();
        detail.sort();
        Err(LedgerError::ReadFailed { ledger_id: self.id, entry_id, detail: detail.join("; ") })
    }
}

/// What one bookie said about an entry during recovery.
#[derive(Debug)]
enum Answer {
    Has(Entry),
    /// An explicit "no such entry / ledger" (this bookie is not in limbo for it).
    Missing,
    /// No definite answer: an error, a timeout, or `Unknown` (limbo). Never a negative.
    Unknown(String),
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
        let result = async {
            let c = self.pool.get(bookie).await?;
            Ok::<_, LedgerError>(
                c.request(Request::Read { ledger_id, entry_id, fence: Some(key) }).await?,
            )
        }
        .await;
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
                    Answer::Unknown(why) => unknown.push(why),
                }
            }
            if let Some(entry) = found {
                self.write_back(ledger_id, key, &ensemble, w, a, &entry).await?;
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
    async fn write_back(
        &self,
        ledger_id: LedgerId,
        key: MasterKey,
        ensemble: &[String],
        w: usize,
        a: usize,
        entry: &Entry,
    ) -> Result<()> {
        let entry_id = entry.entry_id();
        let mut oks = 0;
        let mut failures = Vec::new();
        for i in 0..w {
            let b = &ensemble[((entry_id + i as i64) % ensemble.len() as i64) as usize];
            let r = async {
                let c = self.pool.get(b).await?;
                Ok::<_, LedgerError>(
                    c.request(Request::Add {
                        master_key: key,
                        recovery: true,
                        entry: entry.as_bytes().clone(),
                    })
                    .await?,
                )
            }
            .await;
            match r {
                Ok(f) if f.status == Status::Ok => oks += 1,
                Ok(f) => failures.push(format!("{b}: {}", f.status.name())),
                Err(e) => failures.push(format!("{b}: {e}")),
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
