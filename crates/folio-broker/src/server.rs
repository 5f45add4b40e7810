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

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use crate::broker::Inner;

/// An answer being worked on: its encoded frame, nothing (acks=0), or a reason to close.
pub(crate) type Pending = JoinHandle<Result<Option<Bytes>, String>>;

/// Bytes of the fixed request-header prefix: API key, version, correlation id.
const HEADER_PREFIX_BYTES: usize = 8;

pub(crate) async fn accept(inner: Arc<Inner>, listener: TcpListener) {
    let mut shutdown = inner.shutdown.subscribe();
    let permits = Arc::new(Semaphore::new(inner.config.connections_max));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, max = inner.config.connections_max, "refusing a connection: too many open");
                    continue;
                };
                let _ = stream.set_nodelay(true);
                inner.metrics.connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let inner = inner.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    match connection(inner, stream).await {
                        Ok(()) => tracing::debug!(%peer, "connection closed by the client"),
                        Err(e) => tracing::info!(%peer, reason = %e, "closing the connection"),
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                // E.g. out of file descriptors: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(inner: Arc<Inner>, stream: TcpStream) -> Result<(), String> {
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Pending>(inner.config.inflight_per_connection.max(1));
    let mut writer = tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            match p.await {
                Ok(Ok(Some(frame))) => {
                    wr.write_all(&frame).await.map_err(|e| format!("writing: {e}"))?
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => return Err(e),
                Err(e) => return Err(format!("a request task failed: {e}")),
            }
        }
        Ok(())
    });
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        let mut size = [0u8; 4];
        tokio::select! {
            r = rd.read_exact(&mut size) => match r {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(format!("reading: {e}")),
            },
            w = &mut writer => return w.map_err(|e| e.to_string()).and_then(|r| r),
            _ = shutdown.wait_for(|s| *s) => return Err("the broker is shutting down".into()),
        }
        let size = i32::from_be_bytes(size);
        if size < HEADER_PREFIX_BYTES as i32 || size as usize > inner.config.request_bytes_max {
            return Err(format!(
                "request size {size} is outside [{HEADER_PREFIX_BYTES}, {}] (socket.request.max.bytes)",
                inner.config.request_bytes_max
            ));
        }
        let mut frame = BytesMut::zeroed(size as usize);
        rd.read_exact(&mut frame).await.map_err(|e| format!("reading a request: {e}"))?;
        let pending = dispatch(&inner, frame.freeze()).await?;
        if tx.send(pending).await.is_err() {
            break;
        }
    }
    drop(tx);
    writer.await.map_err(|e| e.to_string())?
}

/// A request frame after its header.
pub(crate) enum Parsed {
    /// ApiVersions decodes its own header: it must answer versions it does not know.
    ApiVersions {
        version: i16,
        correlation: i32,
        frame: Bytes,
    },
    Request {
        key: ApiKey,
        header: RequestHeader,
        body: Bytes,
    },
}

/// Reads a frame's header: the API key must be known and the version one the protocol
/// crate decodes.
pub(crate) fn parse_header(frame: Bytes) -> Result<Parsed, String> {
    if frame.len() < HEADER_PREFIX_BYTES {
        return Err(format!("a {}-byte request is shorter than a request header", frame.len()));
    }
    let mut prefix = &frame[..HEADER_PREFIX_BYTES];
    let (api_key, version, correlation) = (prefix.get_i16(), prefix.get_i16(), prefix.get_i32());
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Err(format!("unknown API key {api_key}"));
    };
    if key == ApiKey::ApiVersions {
        return Ok(Parsed::ApiVersions { version, correlation, frame });
    }
    let known = key.valid_versions();
    if !(known.min..=known.max).contains(&version) {
        return Err(format!("{key:?} v{version} is unknown to this broker"));
    }
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, key.request_header_version(version))
        .map_err(|e| format!("{key:?} v{version}: bad request header: {e}"))?;
    Ok(Parsed::Request { key, header, body })
}

/// Decodes the header and starts the request's work.
async fn dispatch(inner: &Arc<Inner>, frame: Bytes) -> Result<Pending, String> {
    match parse_header(frame)? {
        Parsed::ApiVersions { version, correlation, frame } => {
            Ok(ready(crate::api::api_versions::answer(inner, version, correlation, frame)))
        }
        Parsed::Request { key, header, body } => {
            tracing::trace!(api = ?key, version = header.request_api_version, correlation = header.correlation_id, client = ?header.client_id, "request");
            crate::api::route(inner, key, header, body).await
        }
    }
}

/// An answer that is already known.
pub(crate) fn ready(r: Result<Option<Bytes>, String>) -> Pending {
    tokio::spawn(async move { r })
}

/// Frames an answer: size, response header (at the API's header version), body.
pub(crate) fn encode_response<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    body: &R,
) -> Result<Bytes, String> {
    let header_version = key.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation);
    let fail = |e: anyhow::Error| format!("encoding a {key:?} v{version} answer: {e}");
    let size = header.compute_size(header_version).map_err(fail)?
        + body.compute_size(version).map_err(fail)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version).map_err(fail)?;
    body.encode(&mut buf, version).map_err(fail)?;
    Ok(buf.freeze())
}
