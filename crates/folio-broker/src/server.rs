//! The Kafka listener: connections, request framing, and answers in request order.
//!
//! Each connection has a reader (this task) and a writer task. The reader takes one frame
//! (a size, then the request), decodes its header, and hands the request to its API:
//! the API's work runs as its own task, and a handle on it goes into a bounded queue
//! (`inflight_per_connection`) that the writer drains in order, so answers leave in the
//! order requests came, as Kafka requires, while several requests are worked on at once.
//! A produce queues its batches on the partition logs *before* the reader takes the next
//! frame, so pipelined produces to one partition keep their order.
//!
//! A frame larger than `request_bytes_max`, a header that does not decode, an unknown API
//! key or a body that does not decode closes the connection (as Kafka does); nothing
//! read from the network can panic the broker.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::budget::{Budgets, Held, RequestScope};
use crate::framing::{HEADER_PREFIX_BYTES, Parsed, Pending, parse_header, ready};
use crate::limits::Limit;
use crate::state::Inner;

/// Request bytes are reserved and read in steps of this size, as they arrive.
const READ_STEP_BYTES: usize = 64 * 1024;
/// The pause after a failed accept (EMFILE and the like) before the next one.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Open connections per client address.
#[derive(Debug, Default)]
struct PerAddress(Mutex<HashMap<IpAddr, usize>>);

/// One connection counted against its address until dropped.
struct AddressSlot(Arc<PerAddress>, IpAddr);

impl PerAddress {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<AddressSlot> {
        let mut m = self.0.lock().expect("per-address lock");
        let n = m.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(AddressSlot(self.clone(), ip))
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut m = self.0.0.lock().expect("per-address lock");
        if let Some(n) = m.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.1);
            }
        }
    }
}

pub(crate) async fn accept(inner: Arc<Inner>, listener: TcpListener) {
    let mut shutdown = inner.shutdown.subscribe();
    let limits = inner.config.limits.clone();
    let permits = Arc::new(Semaphore::new(limits.connections_max));
    let per_address = Arc::new(PerAddress::default());
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    inner.metrics.limit_hit(Limit::Connections);
                    tracing::warn!(%peer, max = limits.connections_max, "refusing a connection: too many open (connections_max)");
                    continue;
                };
                let Some(slot) = per_address.take(peer.ip(), limits.connections_per_address_max)
                else {
                    inner.metrics.limit_hit(Limit::ConnectionsPerAddress);
                    tracing::warn!(%peer, max = limits.connections_per_address_max, "refusing a connection: too many from this address (connections_per_address_max)");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                inner.metrics.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let inner = inner.clone();
                tokio::spawn(async move {
                    let (_permit, _slot) = (permit, slot);
                    match connection(inner, stream).await {
                        Ok(()) => tracing::debug!(%peer, "connection closed by the client"),
                        Err(e) => tracing::info!(%peer, reason = %e, "closing the connection"),
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                // E.g. out of file descriptors: do not spin.
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

async fn connection(inner: Arc<Inner>, stream: TcpStream) -> Result<(), String> {
    let limits = inner.config.limits.clone();
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) =
        mpsc::channel::<(Pending, Arc<Mutex<Held>>)>(limits.inflight_per_connection.max(1));
    let writer_inner = inner.clone();
    let mut writer = tokio::spawn(async move {
        while let Some((p, held)) = rx.recv().await {
            match p.await {
                Ok(Ok(Some(mut frame))) => {
                    let wait = limits.reply_write_timeout;
                    match tokio::time::timeout(wait, wr.write_all_buf(&mut frame)).await {
                        Ok(r) => r.map_err(|e| format!("writing: {e}"))?,
                        Err(_) => {
                            writer_inner.metrics.limit_hit(Limit::ReplyWriteTimeout);
                            return Err(format!(
                                "the client took no answer for {wait:?} (reply_write_timeout)"
                            ));
                        }
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(format!("a request task failed: {e}")),
            }
            drop(held); // the request's and its answer's bytes are free again
        }
        Ok(())
    });
    let limits = inner.config.limits.clone();
    let budgets = Budgets {
        connection: Arc::new(Semaphore::new(limits.connection_bytes_max)),
        process: inner.request_budget.clone(),
        answers: inner.answer_budget.clone(),
    };
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        let mut size = [0u8; 4];
        tokio::select! {
            r = tokio::time::timeout(limits.idle_timeout, rd.read_exact(&mut size)) => match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Ok(Err(e)) => return Err(format!("reading: {e}")),
                Err(_) => {
                    inner.metrics.limit_hit(Limit::IdleTimeout);
                    return Err(format!("no request for {:?} (idle_timeout)", limits.idle_timeout));
                }
            },
            w = &mut writer => return w.map_err(|e| e.to_string()).and_then(|r| r),
            _ = shutdown.wait_for(|s| *s) => return Err("the broker is shutting down".into()),
        }
        let size = i32::from_be_bytes(size);
        if size < HEADER_PREFIX_BYTES as i32 || size as usize > limits.request_bytes_max {
            inner.metrics.limit_hit(Limit::RequestBytes);
            return Err(format!(
                "request size {size} is outside [{HEADER_PREFIX_BYTES}, {}] (request_bytes_max, socket.request.max.bytes)",
                limits.request_bytes_max
            ));
        }
        let mut held = Held::default();
        let frame = match read_frame(&mut rd, size as usize, &budgets, &mut held, &limits).await {
            Ok(f) => f,
            Err(ReadError::Slow(why)) => {
                inner.metrics.limit_hit(Limit::RequestReadTimeout);
                return Err(why);
            }
            Err(ReadError::Io(why)) => return Err(why),
        };
        let held = Arc::new(Mutex::new(held));
        let pending = dispatch(&inner, frame, &budgets, &held).await?;
        if tx.send((pending, held)).await.is_err() {
            break;
        }
    }
    drop(tx);
    writer.await.map_err(|e| e.to_string())?
}

enum ReadError {
    /// The request did not arrive within `request_read_timeout`.
    Slow(String),
    Io(String),
}

/// Reads a request body of `size` bytes, reserving them from the budgets step by step as
/// they arrive. The body must arrive within `request_read_timeout`; time spent waiting for
/// budget (the broker's doing, not the client's) does not count.
async fn read_frame(
    rd: &mut OwnedReadHalf,
    size: usize,
    budgets: &Budgets,
    held: &mut Held,
    limits: &crate::limits::ListenerLimits,
) -> Result<Bytes, ReadError> {
    let mut deadline = Instant::now() + limits.request_read_timeout;
    let mut frame = BytesMut::new();
    while frame.len() < size {
        if held.bytes() <= frame.len() {
            let step = (size - frame.len()).min(READ_STEP_BYTES);
            let waited = Instant::now();
            held.merge(budgets.reserve(step).await);
            deadline += waited.elapsed();
        }
        let step = held.bytes() - frame.len();
        frame.reserve(step);
        let mut part = (&mut *rd).take(step as u64);
        match tokio::time::timeout_at(deadline, part.read_buf(&mut frame)).await {
            Ok(Ok(0)) => {
                return Err(ReadError::Io(format!(
                    "the connection closed {} bytes into a {size}-byte request",
                    frame.len()
                )));
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(ReadError::Io(format!("reading a request: {e}"))),
            Err(_) => {
                return Err(ReadError::Slow(format!(
                    "a {size}-byte request was not complete after {:?} ({} bytes came; request_read_timeout)",
                    limits.request_read_timeout,
                    frame.len()
                )));
            }
        }
    }
    Ok(frame.freeze())
}

/// Decodes the header and starts the request's work.
async fn dispatch(
    inner: &Arc<Inner>,
    frame: Bytes,
    budgets: &Budgets,
    held: &Arc<Mutex<Held>>,
) -> Result<Pending, String> {
    match parse_header(frame)? {
        Parsed::ApiVersions { version, correlation, frame } => {
            Ok(ready(crate::api::api_versions::answer(inner, version, correlation, frame)))
        }
        Parsed::Request { key, header, body } => {
            tracing::trace!(api = ?key, version = header.request_api_version, correlation = header.correlation_id, client = ?header.client_id, "request");
            let max = inner.config.limits.client_id_bytes_max;
            if header.client_id.as_ref().is_some_and(|c| c.len() > max) {
                inner.metrics.limit_hit(Limit::ClientId);
                return Err(format!("a client id above {max} bytes (client_id_bytes_max)"));
            }
            let scope = RequestScope { budgets: budgets.clone(), held: held.clone() };
            crate::api::route(inner, key, header, body, scope).await
        }
    }
}
