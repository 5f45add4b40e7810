//! The bookie's network server: the wire protocol of `folio_proto::wire` over TCP.
//!
//! Per connection, a reader task decodes frames and dispatches each request; responses go
//! back through one writer task in completion order (not request order). In-flight requests
//! per connection are bounded in number and in bytes (see `crate::limits`): when a limit is
//! reached the reader stops reading, and TCP pushes back on the client. What a request
//! holds is given back when its reply is written, not when it is encoded. A malformed
//! frame closes its connection (logged with the peer and the reason) and nothing else; so
//! do an idle connection, a frame that trickles in, and a client that takes no replies.
//!
//! With a cluster secret (`Handler::secret`), a connection proves it first (`crate::auth`);
//! one that does not is answered UNAUTHORIZED and closed, counted in `auth_refused`.
//!
//! Storage calls that may block (an add, fence, LAC or force waiting for write-cache or
//! journal-queue room, reads from disk) run on blocking threads, never on the async
//! workers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::BytesMut;
use folio_proto::auth::ClusterSecret;
use folio_proto::clock::Clock as _;
use folio_proto::wire::{self, MasterKey, Request, RequestFrame, Response, ResponseFrame};
use folio_proto::{Entry, EntryId, LedgerId, Status};
use folio_rt::net::{Listener, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::limits::ServerLimits;
use crate::storage::Storage;
use folio_storage::StorageError;

/// Counters the server keeps (exported as metrics by the binary).
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections_open: AtomicU64,
    pub requests: AtomicU64,
    pub malformed_frames: AtomicU64,
    /// Connections closed at once: `connections_max` were open.
    pub connections_refused: AtomicU64,
    /// Connections closed by `idle_timeout`.
    pub idle_closed: AtomicU64,
    /// Connections closed because a frame did not arrive within `request_read_timeout`.
    pub slow_requests_closed: AtomicU64,
    /// Connections closed because a reply waited `reply_write_timeout`.
    pub slow_readers_closed: AtomicU64,
    /// Connections refused: they did not prove the cluster secret.
    pub auth_refused: AtomicU64,
}

/// What a connection needs to serve requests.
#[derive(Debug)]
pub struct Handler {
    pub storage: Arc<Storage>,
    /// Non-recovery adds answer READ_ONLY while set.
    pub read_only: Arc<AtomicBool>,
    /// Where GET_BOOKIE_INFO measures disk space.
    pub ledger_dir: PathBuf,
    pub limits: ServerLimits,
    /// Request and reply bytes all connections hold (`limits.process_bytes_max`).
    pub budget: Arc<Semaphore>,
    pub stats: ServerStats,
    /// The secret every connection must prove first; `None`: connections are trusted.
    pub secret: Option<ClusterSecret>,
    /// Since when (wall-clock ms) garbage collection has not listed the metadata: the
    /// start of its last good pass, or of the process (LIST_LEDGERS reports it).
    pub gc_listed_ms: Arc<AtomicU64>,
}

impl Handler {
    /// A handler over `storage`, refusing adds while `read_only` is set.
    pub fn new(
        storage: Arc<Storage>,
        read_only: Arc<AtomicBool>,
        ledger_dir: PathBuf,
        limits: ServerLimits,
    ) -> Handler {
        let budget = Arc::new(Semaphore::new(limits.process_bytes_max));
        let stats = ServerStats::default();
        let gc_listed_ms = Arc::new(AtomicU64::new(folio_proto::clock::WallClock.now_ms()));
        Handler {
            storage,
            read_only,
            ledger_dir,
            limits,
            budget,
            stats,
            secret: None,
            gc_listed_ms,
        }
    }

    /// The same handler, requiring `secret` of every connection when it is set.
    pub fn with_secret(mut self, secret: Option<ClusterSecret>) -> Handler {
        self.secret = secret;
        self
    }

    /// Request and reply bytes all connections hold now.
    pub fn bytes_held(&self) -> usize {
        self.limits.process_bytes_max - self.budget.available_permits()
    }
}

/// What a request holds until its reply is written: its in-flight slot and its bytes (of
/// the connection's budget and of the process's).
#[derive(Debug)]
pub struct Held {
    _slot: OwnedSemaphorePermit,
    connection: OwnedSemaphorePermit,
    process: OwnedSemaphorePermit,
}

impl Held {
    /// Keeps `n` bytes (a read's reply, once its size is known) and gives the rest back.
    fn keep(&mut self, n: usize) {
        let excess = self.connection.num_permits().saturating_sub(n);
        drop(self.connection.split(excess));
        drop(self.process.split(excess));
    }
}

type Reply = (ResponseFrame, Held);

/// The pause after a failed accept (out of file descriptors, say) before the next one.
const ACCEPT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    mut listener: Listener,
    handler: Arc<Handler>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    let slots = Arc::new(Semaphore::new(handler.limits.connections_max));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        handler.stats.connections_refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, max = handler.limits.connections_max, "refusing a connection: too many open (server.connections_max)");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let h = handler.clone();
                    let stop = shutdown.clone();
                    connections.spawn(async move {
                        let _slot = slot;
                        connection(stream, peer, h, stop).await
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
            _ = shutdown.changed() => break,
        }
        while connections.try_join_next().is_some() {}
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// The bytes a request reserves before it is dispatched: its frame, or for a read the
/// largest reply (cut down to the entry's size once it is read).
fn reserve_bytes(frame: &RequestFrame, frame_len: usize) -> usize {
    match frame.request {
        Request::Read { .. } => wire::FRAME_BYTES_MAX,
        _ => frame_len,
    }
}

/// The cluster-secret handshake, when the bookie has a secret: the bytes read past it, or
/// `None` when the peer was refused (counted before its answer goes out, so whoever reads
/// the answer sees the count).
async fn authenticate(stream: &mut Stream, peer: SocketAddr, h: &Handler) -> Option<BytesMut> {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let Some(secret) = &h.secret else { return Some(buf) };
    match crate::auth::accept(stream, peer, secret, h.limits.request_read_timeout).await {
        Ok(rest) => {
            buf.extend_from_slice(&rest);
            Some(buf)
        }
        Err(refusal) => {
            h.stats.auth_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, "refused a bookie connection: {}", refusal.why);
            crate::auth::refuse(stream, &refusal).await;
            None
        }
    }
}

async fn connection(
    mut stream: Stream,
    peer: SocketAddr,
    h: Arc<Handler>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(mut buf) = authenticate(&mut stream, peer, &h).await else { return };
    h.stats.connections_open.fetch_add(1, Ordering::Relaxed);
    let (mut rd, mut wr) = stream.into_split();
    // Unbounded in items, bounded in fact: every reply holds one of the connection's
    // `inflight_per_connection` slots until it is written.
    let (tx, mut rx) = mpsc::unbounded_channel::<Reply>();
    let limits = h.limits.clone();
    // Returns whether it closed the connection for a slow reader. Holds nothing of the
    // handler: a shutdown aborts connections, not their writers.
    let mut writer = tokio::spawn(async move {
        let mut out = BytesMut::with_capacity(64 * 1024);
        let mut held = Vec::new();
        while let Some((frame, h)) = rx.recv().await {
            wire::encode_response(&frame, &mut out);
            held.push(h);
            while out.len() < 1024 * 1024 {
                match rx.try_recv() {
                    Ok((frame, h)) => {
                        wire::encode_response(&frame, &mut out);
                        held.push(h);
                    }
                    Err(_) => break,
                }
            }
            match tokio::time::timeout(limits.reply_write_timeout, wr.write_all(&out)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return false,
                Err(_) => {
                    tracing::warn!(%peer, "the client took no reply for {:?}; closing (server.reply_write_timeout)", limits.reply_write_timeout);
                    return true;
                }
            }
            out.clear();
            held.clear(); // written: the slots and bytes are free again
        }
        false
    });
    let slots = Arc::new(Semaphore::new(h.limits.inflight_per_connection));
    let budget = Arc::new(Semaphore::new(h.limits.connection_bytes_max));
    // When the first byte of a frame not yet complete arrived.
    let mut frame_started: Option<tokio::time::Instant> = None;
    let mut slow_reader = None;
    let reason = 'conn: loop {
        loop {
            let len = wire::peek_frame_len(&buf);
            let body = match wire::take_frame(&mut buf) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => break 'conn Some(e.to_string()),
            };
            let frame = match wire::decode_request(body) {
                Ok(f) => f,
                Err(e) => break 'conn Some(e.to_string()),
            };
            let Ok(slot) = slots.clone().acquire_owned().await else { break 'conn None };
            let n = u32::try_from(reserve_bytes(&frame, len.unwrap_or(0))).expect("below 4 GiB");
            let Ok(connection) = budget.clone().acquire_many_owned(n).await else {
                break 'conn None;
            };
            let Ok(process) = h.budget.clone().acquire_many_owned(n).await else {
                break 'conn None;
            };
            h.stats.requests.fetch_add(1, Ordering::Relaxed);
            dispatch(&h, frame, Held { _slot: slot, connection, process }, tx.clone());
        }
        frame_started = match (buf.is_empty(), frame_started) {
            (true, _) => None,
            (false, None) => Some(tokio::time::Instant::now()),
            (false, started) => started,
        };
        let deadline = match frame_started {
            Some(t) => t + h.limits.request_read_timeout,
            None => tokio::time::Instant::now() + h.limits.idle_timeout,
        };
        tokio::select! {
            n = tokio::time::timeout_at(deadline, rd.read_buf(&mut buf)) => match n {
                Ok(Ok(0) | Err(_)) => break None,
                Ok(Ok(_)) => {}
                Err(_) if frame_started.is_some() => {
                    h.stats.slow_requests_closed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, bytes = buf.len(), "a frame did not arrive within {:?}; closing (server.request_read_timeout)", h.limits.request_read_timeout);
                    break None;
                }
                Err(_) => {
                    h.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, "closing an idle connection (server.idle_timeout)");
                    break None;
                }
            },
            w = &mut writer => {
                slow_reader = Some(matches!(w, Ok(true)));
                break None;
            }
            _ = shutdown.changed() => break None,
        }
    };
    if let Some(e) = reason {
        h.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%peer, error = %e, "malformed frame; closing the connection");
    }
    drop(tx);
    // Responses already in flight still go out before the connection closes.
    let slow_reader = match slow_reader {
        Some(slow) => slow,
        None => matches!(writer.await, Ok(true)),
    };
    if slow_reader {
        h.stats.slow_readers_closed.fetch_add(1, Ordering::Relaxed);
    }
    h.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
}

fn status_of(e: &StorageError) -> Status {
    if matches!(
        e,
        StorageError::Corruption { .. } | StorageError::Io { .. } | StorageError::Index { .. }
    ) {
        tracing::error!(error = %e, "storage error answered with IO");
    }
    e.status()
}

fn dispatch(h: &Arc<Handler>, frame: RequestFrame, permit: Held, tx: mpsc::UnboundedSender<Reply>) {
    let request_id = frame.request_id;
    let reply =
        move |tx: &mpsc::UnboundedSender<Reply>, status: Status, response: Response, permit| {
            let _ = tx.send((ResponseFrame { request_id, status, response }, permit));
        };
    match frame.request {
        Request::Add { master_key, recovery, entry } => {
            let (ledger_id, entry_id) = Entry::peek_ids(&entry).unwrap_or((0, -1));
            let response = Response::Add { ledger_id, entry_id };
            if h.read_only.load(Ordering::SeqCst) && !recovery {
                return reply(&tx, Status::ReadOnly, response, permit);
            }
            let bytes = entry.len();
            let submit = {
                let h = h.clone();
                move |done| h.storage.add_entry(entry, &master_key, recovery, done)
            };
            off_worker_if_blocking(h, bytes, move || {
                answer_once(request_id, response, permit, tx, submit)
            });
        }
        Request::Read { ledger_id, entry_id, fence } => {
            read_request(h, request_id, (ledger_id, entry_id), fence, permit, tx)
        }
        Request::ReadLac { ledger_id } => {
            let h = h.clone();
            folio_rt::spawn_blocking(move || match h.storage.read_lac(ledger_id) {
                Ok(lac) => {
                    reply(&tx, Status::Ok, Response::ReadLac { ledger_id, lac: Some(lac) }, permit)
                }
                Err(e) => {
                    reply(&tx, status_of(&e), Response::ReadLac { ledger_id, lac: None }, permit)
                }
            });
        }
        Request::WriteLac { ledger_id, lac, master_key } => {
            let storage = h.storage.clone();
            off_worker_if_blocking(h, 0, move || {
                answer_once(request_id, Response::WriteLac { ledger_id }, permit, tx, move |done| {
                    storage.set_explicit_lac(ledger_id, &master_key, lac, done)
                })
            });
        }
        Request::ForceLedger { ledger_id } => {
            let (storage, response) = (h.storage.clone(), Response::ForceLedger { ledger_id });
            off_worker_if_blocking(h, 0, move || {
                answer_once(request_id, response, permit, tx, move |done| storage.force(done))
            });
        }
        Request::GetBookieInfo => {
            let space = disk_space(&h.ledger_dir);
            let status = if space.is_ok() { Status::Ok } else { Status::Io };
            reply(&tx, status, Response::GetBookieInfo { space: space.ok() }, permit);
        }
        Request::ListEntries { ledger_id } => {
            let h = h.clone();
            folio_rt::spawn_blocking(move || match h.storage.list_entries(ledger_id) {
                Ok(ids) => {
                    let ranges = wire::entry_ranges(ids);
                    reply(&tx, Status::Ok, Response::ListEntries { ledger_id, ranges }, permit)
                }
                Err(e) => reply(
                    &tx,
                    status_of(&e),
                    Response::ListEntries { ledger_id, ranges: Vec::new() },
                    permit,
                ),
            });
        }
        Request::ListLedgers { from, limit } => {
            let h = h.clone();
            let limit = (limit as usize).min(wire::LEDGERS_PAGE_MAX);
            folio_rt::spawn_blocking(move || {
                // Read before the listing: a ledger GC dropped meanwhile is simply not listed.
                let gc_listed_ms = h.gc_listed_ms.load(Ordering::SeqCst);
                match h.storage.ledger_usages(from, limit) {
                    Ok((ledgers, more)) => {
                        let response = Response::ListLedgers { ledgers, more, gc_listed_ms };
                        reply(&tx, Status::Ok, response, permit)
                    }
                    Err(e) => reply(
                        &tx,
                        status_of(&e),
                        Response::ListLedgers { ledgers: Vec::new(), more: false, gc_listed_ms },
                        permit,
                    ),
                }
            });
        }
        // The handshake is over (or this bookie has no secret): AUTH means nothing now.
        Request::Auth(step) => {
            let response = Response::Auth { step: step.code(), challenge: None };
            reply(&tx, Status::BadRequest, response, permit)
        }
    }
}

/// Reply bytes of a read beyond its entry (frame header and fields).
const READ_REPLY_OVERHEAD: usize = 64;

/// Runs `submit` (a call into storage) here when it will not block, which is the common
/// case, or on a blocking thread when it may wait: for write-cache room or for room in the
/// journal's queue. Never blocks an async worker (in standalone that would stall the
/// broker too).
fn off_worker_if_blocking(h: &Handler, bytes: usize, submit: impl FnOnce() + Send + 'static) {
    if h.storage.has_room(bytes) {
        submit();
    } else {
        folio_rt::spawn_blocking(submit);
    }
}

/// Answers a request exactly once: from the storage's completion callback, or at once with
/// the error if the storage refused the request before taking the callback.
fn answer_once(
    request_id: u64,
    response: Response,
    permit: Held,
    tx: mpsc::UnboundedSender<Reply>,
    submit: impl FnOnce(crate::storage::AddCallback) -> Result<(), StorageError>,
) {
    let slot = Arc::new(std::sync::Mutex::new(Some((permit, tx))));
    let send = move |slot: &std::sync::Mutex<Option<(Held, mpsc::UnboundedSender<Reply>)>>,
                     status: Status,
                     response: Response| {
        if let Some((permit, tx)) = slot.lock().expect("reply slot").take() {
            let _ = tx.send((ResponseFrame { request_id, status, response }, permit));
        }
    };
    let (cb_slot, cb_response) = (slot.clone(), response.clone());
    let submitted = submit(Box::new(move |r| {
        let status = r.as_ref().map_or_else(status_of, |()| Status::Ok);
        send(&cb_slot, status, cb_response);
    }));
    if let Err(e) = submitted {
        send(&slot, status_of(&e), response);
    }
}

/// A READ: with `fence`, the fence is made durable first and the read answers after it.
fn read_request(
    h: &Arc<Handler>,
    request_id: u64,
    (ledger_id, entry_id): (LedgerId, EntryId),
    fence: Option<MasterKey>,
    mut held: Held,
    tx: mpsc::UnboundedSender<Reply>,
) {
    let storage = h.storage.clone();
    let h = h.clone();
    let answer = move |fenced: Result<(), Status>| {
        let (status, entry) = match fenced {
            Ok(()) => read(&h, ledger_id, entry_id),
            Err(status) => (status, None),
        };
        let entry_id = entry.as_ref().map_or(entry_id, |e: &Entry| e.entry_id());
        held.keep(entry.as_ref().map_or(0, |e| e.encoded_len()) + READ_REPLY_OVERHEAD);
        let response = Response::Read { ledger_id, entry_id, entry: entry.map(Entry::into_bytes) };
        let _ = tx.send((ResponseFrame { request_id, status, response }, held));
    };
    match fence {
        None => folio_rt::spawn_blocking(move || answer(Ok(()))),
        Some(key) => {
            tokio::spawn(async move {
                let fenced = fence_durably(storage, ledger_id, key).await;
                folio_rt::spawn_blocking(move || answer(fenced));
            });
        }
    }
}

/// Fences the ledger and waits, without holding a thread, until the fence is durable: a
/// fencing read answers only after that.
async fn fence_durably(
    storage: Arc<Storage>,
    ledger_id: LedgerId,
    key: MasterKey,
) -> Result<(), Status> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Submitting may wait for room in the journal's queue: off the async workers.
    let submitted = folio_rt::blocking(move || {
        storage.fence(ledger_id, &key, Box::new(move |r| drop(tx.send(r))))
    });
    match submitted.await {
        Err(_) => Err(Status::Io),
        Ok(Err(e)) => Err(status_of(&e)),
        Ok(Ok(())) => match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(status_of(&e)),
            Err(_) => Err(Status::Io),
        },
    }
}

/// A read of one entry (`-1`: the last this bookie has).
fn read(h: &Handler, ledger_id: LedgerId, entry_id: EntryId) -> (Status, Option<Entry>) {
    match h.storage.read_entry(ledger_id, entry_id) {
        Ok(e) => (Status::Ok, Some(e)),
        Err(e) => (status_of(&e), None),
    }
}

/// Total and free bytes of the file system holding `dir`.
pub fn disk_space(dir: &std::path::Path) -> std::io::Result<(u64, u64)> {
    let s = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok((s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize))
}
