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
//! A broker has several listeners (`security::ListenerConfig`), each with its protocol: a
//! TLS listener runs the handshake first (within `request_read_timeout`), a SASL listener
//! passes every frame through the connection's `SaslGate` before anything is served.
//! Each request runs with the connection's `Session` (listener and principal).
//!
//! A frame larger than `request_bytes_max`, a header that does not decode, an unknown API
//! key or a body that does not decode closes the connection (as Kafka does); nothing
//! read from the network can panic the broker.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use folio_rt::net::{Listener as Socket, Stream};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::api::framing::{Parsed, Pending, parse_header, ready};
use crate::budget::{Budgets, Held, RequestScope};
use crate::limits::Limit;
use crate::security::tls::TlsAcceptor;
use crate::security::{SecurityProtocol, Session};
use crate::state::Inner;
use crate::wire::sasl::{Gated, SaslGate, Store};

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

/// What every listener of a broker shares: the connection limits.
#[derive(Debug)]
pub(crate) struct Admission {
    permits: Arc<Semaphore>,
    per_address: Arc<PerAddress>,
}

impl Admission {
    pub(crate) fn new(limits: &crate::limits::ListenerLimits) -> Arc<Admission> {
        Arc::new(Admission {
            permits: Arc::new(Semaphore::new(limits.connections_max)),
            per_address: Arc::new(PerAddress::default()),
        })
    }
}

/// One listener as it runs: its name, its protocol and, for TLS, the acceptor.
#[derive(Debug)]
pub(crate) struct Listener {
    pub name: Arc<str>,
    pub protocol: SecurityProtocol,
    pub tls: Option<Arc<TlsAcceptor>>,
}

pub(crate) async fn accept(
    inner: Arc<Inner>,
    mut socket: Socket,
    listener: Arc<Listener>,
    admission: Arc<Admission>,
) {
    let mut shutdown = inner.shutdown.subscribe();
    let limits = inner.config.limits.clone();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            a = socket.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Ok(permit) = admission.permits.clone().try_acquire_owned() else {
                    inner.metrics.limit_hit(Limit::Connections);
                    tracing::warn!(%peer, max = limits.connections_max, "refusing a connection: too many open (connections_max)");
                    continue;
                };
                let Some(slot) =
                    admission.per_address.take(peer.ip(), limits.connections_per_address_max)
                else {
                    inner.metrics.limit_hit(Limit::ConnectionsPerAddress);
                    tracing::warn!(%peer, max = limits.connections_per_address_max, "refusing a connection: too many from this address (connections_per_address_max)");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                inner.metrics.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let inner = inner.clone();
                let listener = listener.clone();
                tokio::spawn(async move {
                    let (_permit, _slot) = (permit, slot);
                    let name = &listener.name;
                    match secure(inner, stream, &listener, peer).await {
                        Ok(()) => {
                            tracing::debug!(%peer, listener = %name, "connection closed by the client")
                        }
                        Err(e) => {
                            tracing::info!(%peer, listener = %name, reason = %e, "closing the connection")
                        }
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

/// Runs the TLS handshake if the listener has TLS (within `request_read_timeout`), then
/// serves the connection.
async fn secure(
    inner: Arc<Inner>,
    stream: Stream,
    listener: &Listener,
    peer: std::net::SocketAddr,
) -> Result<(), String> {
    let session =
        Session::anonymous(listener.name.clone(), peer.ip().to_canonical().to_string().into());
    let sasl = listener.protocol.sasl();
    let Some(tls) = &listener.tls else {
        return connection(inner, stream, session, sasl).await;
    };
    let wait = inner.config.limits.request_read_timeout;
    let stream = match tokio::time::timeout(wait, tls.acceptor().accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            inner.metrics.tls_handshake_failed();
            return Err(format!("TLS handshake failed: {e}"));
        }
        Err(_) => {
            inner.metrics.tls_handshake_failed();
            return Err(format!("no TLS handshake within {wait:?} (request_read_timeout)"));
        }
    };
    let mut session = session;
    if let Some(p) = crate::security::tls::principal(stream.get_ref().1) {
        session.principal = p.into();
    }
    // One task moves the bytes between the TLS stream and an in-memory pipe that the
    // connection splits into its reader and writer (`pump_tls`). Splitting the TLS stream
    // itself loses wake-ups: a read that flushes pending TLS records takes the socket's
    // write-readiness waker from the writer, which then sleeps for ever with a large
    // answer half sent (found by `bench kafka --tls`: 10 MiB fetches stalled).
    let (ours, theirs) = tokio::io::duplex(TLS_PIPE_BYTES);
    let mut pump = tokio::spawn(pump_tls(stream, theirs));
    let r = connection(inner.clone(), ours, session, sasl).await;
    // The pipe is closed: the pump flushes what is left and sends close_notify, within
    // reply_write_timeout (a client that never reads or closes does not keep it).
    if tokio::time::timeout(inner.config.limits.reply_write_timeout, &mut pump).await.is_err() {
        pump.abort();
    }
    r
}

/// Bytes buffered between a TLS connection's stream and its reader and writer.
const TLS_PIPE_BYTES: usize = 256 * 1024;

/// Moves bytes both ways between a TLS stream and the connection's pipe, in one task and
/// one poll (so both directions wake the same waker). Once the connection has ended and
/// everything it wrote is flushed to the TLS stream, what the client
/// still sends is read and dropped until it closes, at most `CLOSE_LINGER`: closing a
/// socket with unread bytes resets it, and a reset can make the client drop the last
/// answer unread (kafka-python lost a failed SASL exchange's answer so).
async fn pump_tls<T: AsyncRead + AsyncWrite + Unpin>(
    mut tls: T,
    mut pipe: tokio::io::DuplexStream,
) {
    // The TLS side is flushed, not shut down: a close_notify right behind the last answer
    // made kafka-python report "socket disconnected" instead of reading that answer (a
    // failed SASL exchange); the socket's close ends the connection all the same.
    let (mut up, mut down) = (Flow::new(false), Flow::new(true));
    let (mut up_done, mut down_done) = (false, false);
    let mut linger: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        use std::task::Poll;
        if !up_done && up.poll(cx, &mut pipe, &mut tls).is_ready() {
            up_done = true;
        }
        if !down_done && down.poll(cx, &mut tls, &mut pipe).is_ready() {
            down_done = true;
        }
        if !up_done {
            return Poll::Pending;
        }
        if down_done {
            return Poll::Ready(());
        }
        let l = linger.get_or_insert_with(|| Box::pin(tokio::time::sleep(CLOSE_LINGER)));
        l.as_mut().poll(cx)
    })
    .await;
}

/// One direction of `pump_tls`: a buffer between a reader and a writer.
struct Flow {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    eof: bool,
    /// The writer failed (the connection is gone): what is read is dropped.
    discard: bool,
    /// Whether the writer is shut down after the reader's end.
    shutdown: bool,
}

impl Flow {
    fn new(shutdown: bool) -> Flow {
        let buf = vec![0; 64 * 1024].into_boxed_slice();
        Flow { buf, start: 0, end: 0, eof: false, discard: false, shutdown }
    }

    /// Copies until `r` ends (then flushes `w`, and shuts it down if `shutdown`) or fails;
    /// once `w` failed, what `r` gives is dropped.
    fn poll<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        r: &mut R,
        w: &mut W,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::pin::Pin;
        use std::task::Poll;
        loop {
            if self.start < self.end {
                if self.discard {
                    self.start = self.end;
                    continue;
                }
                match Pin::new(&mut *w).poll_write(cx, &self.buf[self.start..self.end]) {
                    Poll::Ready(Ok(n)) if n > 0 => self.start += n,
                    Poll::Ready(_) => self.discard = true,
                    Poll::Pending => return Poll::Pending,
                }
                continue;
            }
            if self.eof {
                std::task::ready!(Pin::new(&mut *w).poll_flush(cx))?;
                if self.discard || !self.shutdown {
                    return Poll::Ready(Ok(()));
                }
                return Pin::new(&mut *w).poll_shutdown(cx);
            }
            let mut rb = tokio::io::ReadBuf::new(&mut self.buf);
            match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    (self.start, self.end, self.eof) = (0, n, n == 0);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Nothing to read now: push out what the writer buffered (TLS records).
                    if !self.discard
                        && let Poll::Ready(Err(e)) = Pin::new(&mut *w).poll_flush(cx)
                    {
                        return Poll::Ready(Err(e));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

async fn connection<S>(
    inner: Arc<Inner>,
    stream: S,
    mut session: Session,
    sasl: bool,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let limits = inner.config.limits.clone();
    let (mut rd, wr) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel::<Queued>(limits.inflight_per_connection.max(1));
    let mut writer = tokio::spawn(write_answers(inner.clone(), wr, rx));
    let budgets = Budgets {
        connection: Arc::new(Semaphore::new(limits.connection_bytes_max)),
        process: inner.request_budget.clone(),
        answers: inner.answer_budget.clone(),
    };
    let mut gate = SaslGate::new(inner.config.sasl.clone(), sasl);
    let mut shutdown = inner.shutdown.subscribe();
    let mute = Arc::new(Mutex::new(tokio::time::Instant::now()));
    loop {
        wait_to_read(&mute, &budgets, &limits, &mut shutdown).await?;
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
        let (min, max) = (gate.frame_bytes_min(), gate.frame_bytes_max(limits.request_bytes_max));
        if size < min as i32 || size as usize > max {
            inner.metrics.limit_hit(Limit::RequestBytes);
            let which = if max < limits.request_bytes_max {
                "before authentication: sasl.server.max.receive.size"
            } else {
                "request_bytes_max, socket.request.max.bytes"
            };
            return Err(format!("request size {size} is outside [{min}, {max}] ({which})"));
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
        let store = Store { meta: inner.env.meta.as_ref(), keys: &inner.env.keys };
        let pending = match gate.admit(&store, frame, &mut session).await? {
            Gated::Dispatch(frame) => {
                let held = Arc::new(Mutex::new(held));
                let p = dispatch(&inner, frame, &budgets, &held, &session, &mute).await?;
                (p, held)
            }
            Gated::Answer(f) => (ready(Ok(Some(f))), Arc::new(Mutex::new(held))),
            Gated::Authenticated(f) => {
                inner.metrics.sasl_authenticated(true);
                tracing::debug!(principal = %session.principal, listener = %session.listener, "SASL authentication succeeded");
                (ready(Ok(Some(f))), Arc::new(Mutex::new(held)))
            }
            Gated::Refused(f, why) => {
                inner.metrics.sasl_authenticated(false);
                tracing::info!(listener = %session.listener, reason = %why, "SASL authentication failed");
                let _ = tx.send((ready(Ok(Some(f))), Arc::new(Mutex::new(held)))).await;
                drop(tx);
                let written = writer.await.map_err(|e| e.to_string())?;
                linger(&mut rd).await;
                return written;
            }
        };
        if tx.send(pending).await.is_err() {
            break;
        }
    }
    drop(tx);
    writer.await.map_err(|e| e.to_string())?
}

/// Waits until the connection may read its next request: a client quota's throttle has
/// ended (KIP-219), and (the overload pushback) its earlier requests hold no more than
/// `connection_read_ahead_bytes`, so the next one waits in the client and the socket.
/// `Err` when the broker shuts down meanwhile.
async fn wait_to_read(
    mute: &Mutex<tokio::time::Instant>,
    budgets: &Budgets,
    limits: &crate::limits::ListenerLimits,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let until = *mute.lock().unwrap_or_else(|p| p.into_inner());
    let capacity = limits.connection_bytes_max;
    let read_ahead = limits.connection_read_ahead_bytes.min(capacity);
    let ready = async {
        if until > tokio::time::Instant::now() {
            tokio::time::sleep_until(until).await;
        }
        budgets.wait_below(read_ahead, capacity).await;
    };
    tokio::select! {
        () = ready => Ok(()),
        _ = shutdown.wait_for(|s| *s) => Err("the broker is shutting down".into()),
    }
}

/// After a last answer the broker closes on (a failed authentication): reads and drops
/// what the client still sends until it closes, at most `CLOSE_LINGER`. Closing a socket
/// with unread bytes resets it, and a reset can make the client drop that answer unread
/// (kafka-python did, now and then).
async fn linger<R: AsyncRead + Unpin>(rd: &mut R) {
    let mut scratch = [0u8; 4096];
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        while matches!(rd.read(&mut scratch).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// How long a connection the broker closes keeps reading (and dropping) what its client
/// sends.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// An answer being worked on, with the bytes its request holds.
type Queued = (Pending, Arc<Mutex<Held>>);

/// Writes the answers in request order, each within `reply_write_timeout`.
async fn write_answers<W: AsyncWrite + Unpin>(
    inner: Arc<Inner>,
    mut wr: W,
    mut rx: mpsc::Receiver<Queued>,
) -> Result<(), String> {
    let limits = inner.config.limits.clone();
    while let Some((p, held)) = rx.recv().await {
        match p.await {
            Ok(Ok(Some(mut frame))) => {
                let wait = limits.reply_write_timeout;
                match tokio::time::timeout(wait, wr.write_all_buf(&mut frame)).await {
                    Ok(r) => r.map_err(|e| format!("writing: {e}"))?,
                    Err(_) => {
                        inner.metrics.limit_hit(Limit::ReplyWriteTimeout);
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
    // No shutdown (FIN) here: a FIN right behind a last answer made kafka-python drop that
    // answer now and then; the socket's close sends it.
    Ok(())
}

enum ReadError {
    /// The request did not arrive within `request_read_timeout`.
    Slow(String),
    Io(String),
}

/// Reads a request body of `size` bytes, reserving them from the budgets step by step as
/// they arrive. The body must arrive within `request_read_timeout`; time spent waiting for
/// budget (the broker's doing, not the client's) does not count.
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
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
    session: &Session,
    mute: &Arc<Mutex<tokio::time::Instant>>,
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
            let scope = RequestScope {
                budgets: budgets.clone(),
                held: held.clone(),
                session: session.clone(),
                arrival: None,
                request_bytes: 0,
                client_id: header.client_id.as_deref().unwrap_or_default().into(),
                mute: mute.clone(),
            };
            crate::api::route(inner, key, header, body, scope).await
        }
    }
}
