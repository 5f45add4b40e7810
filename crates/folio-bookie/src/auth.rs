//! The bookie's side of the cluster-secret handshake (`folio_proto::auth`): a connection
//! to a bookie with a secret proves it before its first request is served.
//!
//! Before the handshake ends, a connection holds at most `PRE_AUTH_BYTES_MAX` bytes: a
//! frame that is not AUTH is answered UNAUTHORIZED from its header alone (its request id,
//! so the client's waiter learns why), and the connection closes. The whole handshake must
//! finish within the listener's `request_read_timeout`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use folio_proto::InvalidConfig;
use folio_proto::Status;
use folio_proto::auth::{AuthToken, ClusterSecret};
use folio_proto::wire::{self, AuthStep, Request, Response, ResponseFrame};
use folio_rt::net::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

pub use crate::limits::PRE_AUTH_BYTES_MAX;

/// How long a refused connection is read and dropped before it closes, so that the client
/// reads the UNAUTHORIZED answer instead of a reset.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Whether a bookie may serve a connection that has not proven a secret.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// The cluster secret; when set, every connection must prove it (also on loopback).
    pub secret: Option<ClusterSecret>,
    /// Serve unauthenticated connections although the bookie listens beyond loopback.
    pub allow_unauthenticated: bool,
}

impl AuthConfig {
    /// Refuses to listen on `listen` beyond loopback without a secret unless told to.
    pub fn validate(&self, listen: SocketAddr) -> Result<(), InvalidConfig> {
        if self.secret.is_none() && !self.allow_unauthenticated && !listen.ip().is_loopback() {
            return Err(InvalidConfig::new(format!(
                "the bookie would listen on {listen}, beyond loopback, with no cluster secret: \
                 anyone who reaches the port could write, fence or read every ledger. Give \
                 cluster_secret_file (one secret file shared by the cluster's bookies, brokers \
                 and tools; they take --cluster-secret-file or FOLIO_CLUSTER_SECRET_FILE), or \
                 set allow_unauthenticated = true on a network you trust"
            )));
        }
        Ok(())
    }
}

/// Why a connection was refused, and the request to answer UNAUTHORIZED (`refuse`), if it
/// asked something.
#[derive(Debug)]
pub struct Refusal {
    pub why: String,
    /// The refused request's id and handshake step.
    pub answer: Option<(u64, u8)>,
}

impl From<String> for Refusal {
    fn from(why: String) -> Refusal {
        Refusal { why, answer: None }
    }
}

fn refusal(id: u64, step: u8, why: &str) -> Result<BytesMut, Refusal> {
    Err(Refusal { why: why.to_string(), answer: Some((id, step)) })
}

/// Runs the handshake on a new connection. `Ok`: the bytes read past it (the first
/// requests, if the client pipelined them). `Err`: why the peer was refused; the caller
/// counts it and then answers it with `refuse`.
pub async fn accept(
    stream: &mut Stream,
    peer: SocketAddr,
    secret: &ClusterSecret,
    timeout: Duration,
) -> Result<BytesMut, Refusal> {
    let deadline = Instant::now() + timeout;
    let mut buf = BytesMut::with_capacity(PRE_AUTH_BYTES_MAX);
    let hello = next_step(stream, &mut buf, deadline).await?;
    let (id, client_nonce) = match hello {
        Step::Auth(id, AuthStep::Hello { client_nonce }) => (id, client_nonce),
        Step::Auth(id, AuthStep::Proof { .. }) => {
            return refusal(id, 2, "a proof before the hello");
        }
        Step::Other(id, op) => {
            let why = format!("{op} before the cluster-secret handshake (a peer without it)");
            return refusal(id, 1, &why);
        }
    };
    let server_nonce: AuthToken = folio_rt::random();
    let proof = secret.server_proof(&client_nonce, &server_nonce);
    let challenge = Some((server_nonce, proof));
    answer(stream, id, Status::Ok, Response::Auth { step: 1, challenge }).await?;
    match next_step(stream, &mut buf, deadline).await? {
        Step::Auth(id, AuthStep::Proof { client_proof }) => {
            if !secret.verify_client(&client_nonce, &server_nonce, &client_proof) {
                return refusal(id, 2, "a wrong cluster secret");
            }
            answer(stream, id, Status::Ok, Response::Auth { step: 2, challenge: None }).await?;
            tracing::debug!(%peer, "bookie connection authenticated");
            Ok(buf)
        }
        Step::Auth(id, AuthStep::Hello { .. }) => refusal(id, 1, "a second hello"),
        Step::Other(id, op) => refusal(id, 2, &format!("{op} before the proof")),
    }
}

/// What a client sent next: a step of the handshake, or the header of another request.
enum Step {
    Auth(u64, AuthStep),
    Other(u64, String),
}

async fn next_step(
    stream: &mut Stream,
    buf: &mut BytesMut,
    deadline: Instant,
) -> Result<Step, String> {
    loop {
        if let Some(len) = wire::peek_frame_len(buf) {
            let whole = wire::FRAME_LEN_BYTES + len;
            if whole <= PRE_AUTH_BYTES_MAX && buf.len() >= whole {
                let body = wire::take_frame(buf).map_err(|e| e.to_string())?.expect("whole");
                return match wire::decode_request(body) {
                    Ok(f) => Ok(match f.request {
                        Request::Auth(step) => Step::Auth(f.request_id, step),
                        other => Step::Other(f.request_id, format!("{:?}", other.op())),
                    }),
                    Err(e) => Err(format!("a malformed frame before authenticating: {e}")),
                };
            }
            let header = wire::FRAME_LEN_BYTES + wire::HEADER_BYTES;
            if whole > PRE_AUTH_BYTES_MAX && buf.len() >= header {
                // Too large for AUTH: another request, or garbage. Its id and op only.
                let id = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
                let op = wire::OpCode::from_u8(buf[5])
                    .map_or("an unknown op".into(), |o| format!("{o:?}"));
                return Ok(Step::Other(id, op));
            }
        }
        let room = PRE_AUTH_BYTES_MAX - buf.len();
        let mut chunk = [0u8; PRE_AUTH_BYTES_MAX];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk[..room]))
            .await
            .map_err(|_| "no handshake within the request read timeout".to_string())?
            .map_err(|e| format!("reading the handshake: {e}"))?;
        if n == 0 {
            return Err("closed during the handshake".into());
        }
        buf.put_slice(&chunk[..n]);
    }
}

async fn answer(
    stream: &mut Stream,
    request_id: u64,
    status: Status,
    response: Response,
) -> Result<(), String> {
    let mut out = BytesMut::new();
    wire::encode_response(&ResponseFrame { request_id, status, response }, &mut out);
    stream.write_all(&out).await.map_err(|e| format!("answering the handshake: {e}"))
}

/// Answers a refused request UNAUTHORIZED and lets the client read it before the close.
pub async fn refuse(stream: &mut Stream, refusal: &Refusal) {
    let Some((id, step)) = refusal.answer else { return };
    let response = Response::Auth { step, challenge: None };
    if answer(stream, id, Status::Unauthorized, response).await.is_ok() {
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 4096];
        let until = Instant::now() + REFUSAL_LINGER;
        while let Ok(Ok(n)) = tokio::time::timeout_at(until, stream.read(&mut sink)).await {
            if n == 0 {
                break;
            }
        }
    }
}
