//! Kafka framing: a request frame's header in, an answer's frame out, and the handle of
//! an answer being worked on. Used by the listener (`server`) and the APIs (`api`).
//!
//! Architecture invariant: depends on nothing else in this crate, so the listener and the
//! APIs share it without depending on each other.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::task::JoinHandle;

/// An answer being worked on: its encoded frame, nothing (acks=0), or a reason to close.
pub(crate) type Pending = JoinHandle<Result<Option<Bytes>, String>>;

/// Bytes of the fixed request-header prefix: API key, version, correlation id.
pub(crate) const HEADER_PREFIX_BYTES: usize = 8;

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

/// An answer that is already known.
pub(crate) fn ready(r: Result<Option<Bytes>, String>) -> Pending {
    tokio::spawn(async move { r })
}

/// Starts the work of an answer. The future is boxed: a finished task keeps its cell
/// until its answer is written, and the cell of an unboxed future is as large as the
/// future's state (kilobytes for a Fetch), so a client that pipelines requests and never
/// reads its answers would pin that much per queued answer (`inflight_per_connection` of
/// them per connection) outside every byte budget. Boxed, the state is freed when the
/// work ends and only the encoded answer stays.
pub(crate) fn spawn_answer(
    work: impl std::future::Future<Output = Result<Option<Bytes>, String>> + Send + 'static,
) -> Pending {
    tokio::spawn(Box::pin(work))
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
