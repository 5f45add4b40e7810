//! One TCP connection to a bookie, shared by any number of concurrent callers: requests are
//! pipelined with request ids and matched to responses in whatever order they come back.
//! The number of requests in flight is bounded; callers wait for a slot.
//!
//! With a cluster secret, the connection proves it and checks the bookie's proof
//! (`folio_proto::auth`) before it carries any request; a bookie that refuses it, or cannot
//! prove the secret itself, fails the connect with `Refused`. A bookie that wants a secret
//! this client lacks answers its first request UNAUTHORIZED: the connection fails with
//! `Refused` too, saying so.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use folio_proto::Status;
use folio_proto::auth::{AuthToken, ClusterSecret};
use folio_proto::wire::{self, AuthStep, OpCode, Request, RequestFrame, Response, ResponseFrame};
use folio_rt::net::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Why a request to a bookie got no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectionError {
    #[error("connecting to bookie {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    #[error("connection to bookie {addr} closed: {reason}")]
    Closed { addr: SocketAddr, reason: String },
    #[error("bookie {addr} sent a malformed frame: {reason}")]
    Protocol { addr: SocketAddr, reason: String },
    #[error("bookie {addr}: {reason}")]
    Refused { addr: SocketAddr, reason: String },
}

/// How long the cluster-secret handshake may take.
const AUTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

type Pending = Arc<Mutex<BTreeMap<u64, oneshot::Sender<ResponseFrame>>>>;

/// One multiplexed connection to a bookie: requests in flight by id, answers matched back.
#[derive(Debug)]
pub struct BookieConnection {
    addr: SocketAddr,
    next_id: AtomicU64,
    tx: mpsc::Sender<RequestFrame>,
    pending: Pending,
    slots: Arc<Semaphore>,
    closed: Arc<Mutex<Option<ConnectionError>>>,
}

impl BookieConnection {
    /// Connects; at most `inflight_max` requests are outstanding at once.
    pub async fn connect(
        addr: SocketAddr,
        inflight_max: usize,
    ) -> Result<BookieConnection, ConnectionError> {
        BookieConnection::connect_with(addr, inflight_max, None).await
    }

    /// Connects, proving `secret` first when there is one.
    pub async fn connect_with(
        addr: SocketAddr,
        inflight_max: usize,
        secret: Option<&ClusterSecret>,
    ) -> Result<BookieConnection, ConnectionError> {
        BookieConnection::connect_from(None, addr, inflight_max, secret).await
    }

    /// Connects from the local address `from` (see `folio_rt::net::connect_from`), proving
    /// `secret` first when there is one.
    pub async fn connect_from(
        from: Option<std::net::IpAddr>,
        addr: SocketAddr,
        inflight_max: usize,
        secret: Option<&ClusterSecret>,
    ) -> Result<BookieConnection, ConnectionError> {
        let mut stream = folio_rt::net::connect_from(from, addr)
            .await
            .map_err(|e| ConnectionError::Connect { addr, reason: e.to_string() })?;
        let _ = stream.set_nodelay(true);
        if let Some(secret) = secret {
            handshake(&mut stream, addr, secret).await?;
        }
        let (mut rd, mut wr) = stream.into_split();
        let pending: Pending = Arc::new(Mutex::new(BTreeMap::new()));
        let closed = Arc::new(Mutex::new(None));
        let (tx, mut rx) = mpsc::channel::<RequestFrame>(inflight_max.max(1));
        let writer_closed = closed.clone();
        tokio::spawn(async move {
            let mut out = BytesMut::with_capacity(64 * 1024);
            while let Some(f) = rx.recv().await {
                wire::encode_request(&f, &mut out);
                while out.len() < 1024 * 1024 {
                    match rx.try_recv() {
                        Ok(f) => wire::encode_request(&f, &mut out),
                        Err(_) => break,
                    }
                }
                if let Err(e) = wr.write_all(&out).await {
                    let mut c = writer_closed.lock().expect("closed lock");
                    c.get_or_insert(ConnectionError::Closed { addr, reason: e.to_string() });
                    return;
                }
                out.clear();
            }
        });
        let (reader_pending, reader_closed) = (pending.clone(), closed.clone());
        tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            let reason = 'read: loop {
                loop {
                    match wire::take_frame(&mut buf) {
                        Ok(None) => break,
                        Ok(Some(body)) => match wire::decode_response(body) {
                            Ok(f)
                                if f.status == Status::Unauthorized
                                    && f.response.op() == OpCode::Auth =>
                            {
                                break 'read ConnectionError::Refused {
                                    addr,
                                    reason: "the bookie requires the cluster secret, and this \
                                             client has none (--cluster-secret-file)"
                                        .into(),
                                };
                            }
                            Ok(f) => {
                                let waiter = reader_pending
                                    .lock()
                                    .expect("pending lock")
                                    .remove(&f.request_id);
                                if let Some(w) = waiter {
                                    let _ = w.send(f);
                                }
                            }
                            Err(e) => {
                                break 'read ConnectionError::Protocol {
                                    addr,
                                    reason: e.to_string(),
                                };
                            }
                        },
                        Err(e) => {
                            break 'read ConnectionError::Protocol { addr, reason: e.to_string() };
                        }
                    }
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) => {
                        break ConnectionError::Closed {
                            addr,
                            reason: "closed by the bookie".into(),
                        };
                    }
                    Ok(_) => {}
                    Err(e) => break ConnectionError::Closed { addr, reason: e.to_string() },
                }
            };
            reader_closed.lock().expect("closed lock").get_or_insert(reason);
            // Waiters see their sender dropped and report the close reason.
            reader_pending.lock().expect("pending lock").clear();
        });
        Ok(BookieConnection {
            addr,
            next_id: AtomicU64::new(1),
            tx,
            pending,
            slots: Arc::new(Semaphore::new(inflight_max.max(1))),
            closed,
        })
    }

    /// The bookie's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the connection has failed (a new one is needed).
    pub fn is_closed(&self) -> bool {
        self.closed.lock().expect("closed lock").is_some()
    }

    fn closed_error(&self) -> ConnectionError {
        self.closed.lock().expect("closed lock").clone().unwrap_or(ConnectionError::Closed {
            addr: self.addr,
            reason: "connection task ended".into(),
        })
    }

    /// Sends a request and waits for its response.
    pub async fn request(&self, request: Request) -> Result<ResponseFrame, ConnectionError> {
        let _slot = self.slots.acquire().await.map_err(|_| self.closed_error())?;
        if let Some(e) = self.closed.lock().expect("closed lock").clone() {
            return Err(e);
        }
        let request_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (done_tx, done_rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(request_id, done_tx);
        if self.tx.send(RequestFrame { request_id, request }).await.is_err() {
            self.pending.lock().expect("pending lock").remove(&request_id);
            return Err(self.closed_error());
        }
        done_rx.await.map_err(|_| self.closed_error())
    }
}

/// The client's side of the cluster-secret handshake, on the bare stream, within
/// `AUTH_TIMEOUT`.
async fn handshake(
    stream: &mut Stream,
    addr: SocketAddr,
    secret: &ClusterSecret,
) -> Result<(), ConnectionError> {
    tokio::time::timeout(AUTH_TIMEOUT, prove(stream, addr, secret)).await.map_err(|_| {
        let reason = format!("no answer to the cluster-secret handshake in {AUTH_TIMEOUT:?}");
        ConnectionError::Refused { addr, reason }
    })?
}

async fn prove(
    stream: &mut Stream,
    addr: SocketAddr,
    secret: &ClusterSecret,
) -> Result<(), ConnectionError> {
    let refused = |reason: String| ConnectionError::Refused { addr, reason };
    let client_nonce: AuthToken = folio_rt::random();
    let hello = Request::Auth(AuthStep::Hello { client_nonce });
    let (status, response) = auth_step(stream, addr, hello).await?;
    let (server_nonce, proof) = match (status, response) {
        (Status::Ok, Response::Auth { step: 1, challenge: Some(c) }) => c,
        (Status::BadRequest, Response::Auth { .. }) => {
            return Err(refused(
                "the bookie has no cluster secret, and this client has one: give the same \
                 cluster_secret_file to every bookie, broker and tool of the cluster"
                    .into(),
            ));
        }
        (status, _) => return Err(refused(format!("the handshake's hello got {}", status.name()))),
    };
    if !secret.verify_server(&client_nonce, &server_nonce, &proof) {
        return Err(refused(
            "the bookie cannot prove the cluster secret (another cluster's bookie, or another \
             secret)"
                .into(),
        ));
    }
    let client_proof = secret.client_proof(&client_nonce, &server_nonce);
    match auth_step(stream, addr, Request::Auth(AuthStep::Proof { client_proof })).await? {
        (Status::Ok, Response::Auth { step: 2, .. }) => Ok(()),
        (Status::Unauthorized, _) => {
            Err(refused("the bookie refused this client's cluster secret (another secret)".into()))
        }
        (status, _) => Err(refused(format!("the handshake's proof got {}", status.name()))),
    }
}

/// Sends one AUTH request and reads its answer.
async fn auth_step(
    stream: &mut Stream,
    addr: SocketAddr,
    request: Request,
) -> Result<(Status, Response), ConnectionError> {
    let mut out = BytesMut::new();
    wire::encode_request(&RequestFrame { request_id: 0, request }, &mut out);
    let closed = |e: std::io::Error| ConnectionError::Closed { addr, reason: e.to_string() };
    stream.write_all(&out).await.map_err(closed)?;
    let mut buf = BytesMut::with_capacity(256);
    loop {
        match wire::take_frame(&mut buf) {
            Ok(Some(body)) => {
                let f = wire::decode_response(body)
                    .map_err(|e| ConnectionError::Protocol { addr, reason: e.to_string() })?;
                return Ok((f.status, f.response));
            }
            Ok(None) => {}
            Err(e) => return Err(ConnectionError::Protocol { addr, reason: e.to_string() }),
        }
        if buf.len() > 256 {
            let reason = "an oversized answer to the handshake".into();
            return Err(ConnectionError::Protocol { addr, reason });
        }
        if stream.read_buf(&mut buf).await.map_err(closed)? == 0 {
            let reason = "closed by the bookie during the handshake".into();
            return Err(ConnectionError::Closed { addr, reason });
        }
    }
}
