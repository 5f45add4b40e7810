//! The bookie's network server: the wire protocol of `folio_proto::wire` over TCP.
//!
//! Per connection, a reader task decodes frames and dispatches each request; responses go
//! back through one writer task in completion order (not request order). In-flight requests
//! per connection are bounded by a semaphore: when the limit is reached the reader stops
//! reading, and TCP pushes back on the client. A malformed frame closes its connection
//! (logged with the peer and the reason) and nothing else.
//!
//! Storage calls that may block (an add waiting for write-cache space, reads from disk) run
//! on blocking threads, never on the async workers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::BytesMut;
use folio_proto::wire::{self, MasterKey, Request, RequestFrame, Response, ResponseFrame};
use folio_proto::{Entry, EntryId, LedgerId, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::error::StorageError;
use crate::storage::Storage;

/// Counters the server keeps (exported as metrics by the binary).
#[derive(Debug, Default)]
pub struct ServerStats {
    pub connections_open: AtomicU64,
    pub requests: AtomicU64,
    pub malformed_frames: AtomicU64,
}

/// What a connection needs to serve requests.
#[derive(Debug)]
pub struct Handler {
    pub storage: Arc<Storage>,
    /// Non-recovery adds answer READ_ONLY while set.
    pub read_only: Arc<AtomicBool>,
    /// Where GET_BOOKIE_INFO measures disk space.
    pub ledger_dir: PathBuf,
    pub inflight_per_connection: usize,
    pub stats: ServerStats,
}

type Reply = (ResponseFrame, OwnedSemaphorePermit);

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    handler: Arc<Handler>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let h = handler.clone();
                    let stop = shutdown.clone();
                    connections.spawn(async move { connection(stream, peer, h, stop).await });
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            _ = shutdown.changed() => break,
        }
        while connections.try_join_next().is_some() {}
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    h: Arc<Handler>,
    mut shutdown: watch::Receiver<bool>,
) {
    h.stats.connections_open.fetch_add(1, Ordering::Relaxed);
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Reply>();
    let writer = tokio::spawn(async move {
        let mut out = BytesMut::with_capacity(64 * 1024);
        while let Some((frame, permit)) = rx.recv().await {
            wire::encode_response(&frame, &mut out);
            drop(permit);
            while out.len() < 1024 * 1024 {
                match rx.try_recv() {
                    Ok((frame, permit)) => {
                        wire::encode_response(&frame, &mut out);
                        drop(permit);
                    }
                    Err(_) => break,
                }
            }
            if wr.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    });
    let permits = Arc::new(Semaphore::new(h.inflight_per_connection));
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let reason = 'conn: loop {
        loop {
            let body = match wire::take_frame(&mut buf) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => break 'conn Some(e),
            };
            let frame = match wire::decode_request(body) {
                Ok(f) => f,
                Err(e) => break 'conn Some(e),
            };
            let Ok(permit) = permits.clone().acquire_owned().await else { break 'conn None };
            h.stats.requests.fetch_add(1, Ordering::Relaxed);
            dispatch(&h, frame, permit, tx.clone());
        }
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => break None,
                Ok(_) => {}
            },
            _ = shutdown.changed() => break None,
        }
    };
    if let Some(e) = reason {
        h.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%peer, error = %e, "malformed frame; closing the connection");
    }
    drop(tx);
    // Responses already in flight still go out before the connection closes.
    let _ = writer.await;
    h.stats.connections_open.fetch_sub(1, Ordering::Relaxed);
}

fn status_of(e: &StorageError) -> Status {
    if matches!(
        e,
        StorageError::Corruption { .. } | StorageError::Io { .. } | StorageError::Index(_)
    ) {
        tracing::error!(error = %e, "storage error answered with IO");
    }
    e.status()
}

fn dispatch(
    h: &Arc<Handler>,
    frame: RequestFrame,
    permit: OwnedSemaphorePermit,
    tx: mpsc::UnboundedSender<Reply>,
) {
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
            if h.storage.has_room(bytes) {
                // The common case: the add will not wait for cache space, so no blocking
                // thread is needed.
                answer_once(request_id, response, permit, tx, submit);
            } else {
                tokio::task::spawn_blocking(move || {
                    answer_once(request_id, response, permit, tx, submit)
                });
            }
        }
        Request::Read { ledger_id, entry_id, fence } => {
            let h = h.clone();
            tokio::task::spawn_blocking(move || {
                let (status, entry) = read(&h, ledger_id, entry_id, fence);
                let entry_id = entry.as_ref().map_or(entry_id, |e: &Entry| e.entry_id());
                let response =
                    Response::Read { ledger_id, entry_id, entry: entry.map(Entry::into_bytes) };
                reply(&tx, status, response, permit)
            });
        }
        Request::ReadLac { ledger_id } => {
            let h = h.clone();
            tokio::task::spawn_blocking(move || match h.storage.read_lac(ledger_id) {
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
            answer_once(request_id, Response::WriteLac { ledger_id }, permit, tx, move |done| {
                storage.set_explicit_lac(ledger_id, &master_key, lac, done)
            });
        }
        Request::ForceLedger { ledger_id } => {
            let storage = h.storage.clone();
            answer_once(request_id, Response::ForceLedger { ledger_id }, permit, tx, move |done| {
                storage.force(done)
            });
        }
        Request::GetBookieInfo => {
            let space = disk_space(&h.ledger_dir);
            let status = if space.is_ok() { Status::Ok } else { Status::Io };
            reply(&tx, status, Response::GetBookieInfo { space: space.ok() }, permit);
        }
        Request::ListEntries { ledger_id } => {
            let h = h.clone();
            tokio::task::spawn_blocking(move || match h.storage.list_entries(ledger_id) {
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
            tokio::task::spawn_blocking(move || match h.storage.ledger_usages(from, limit) {
                Ok((ledgers, more)) => {
                    reply(&tx, Status::Ok, Response::ListLedgers { ledgers, more }, permit)
                }
                Err(e) => reply(
                    &tx,
                    status_of(&e),
                    Response::ListLedgers { ledgers: Vec::new(), more: false },
                    permit,
                ),
            });
        }
    }
}

/// Answers a request exactly once: from the storage's completion callback, or at once with
/// the error if the storage refused the request before taking the callback.
fn answer_once(
    request_id: u64,
    response: Response,
    permit: OwnedSemaphorePermit,
    tx: mpsc::UnboundedSender<Reply>,
    submit: impl FnOnce(crate::storage::AddCallback) -> Result<(), StorageError>,
) {
    let slot = Arc::new(std::sync::Mutex::new(Some((permit, tx))));
    let send = move |slot: &std::sync::Mutex<
        Option<(OwnedSemaphorePermit, mpsc::UnboundedSender<Reply>)>,
    >,
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

/// A read; with `fence`, the fence is made durable first and the read answers after it.
fn read(
    h: &Handler,
    ledger_id: LedgerId,
    entry_id: EntryId,
    fence: Option<MasterKey>,
) -> (Status, Option<Entry>) {
    if let Some(key) = fence {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if let Err(e) = h.storage.fence(ledger_id, &key, Box::new(move |r| drop(tx.send(r)))) {
            return (status_of(&e), None);
        }
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return (status_of(&e), None),
            Err(_) => return (Status::Io, None),
        }
    }
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
