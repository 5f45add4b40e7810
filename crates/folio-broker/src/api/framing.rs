//! Kafka framing: a request frame's header in, an answer's frame out, and the handle of
//! an answer being worked on. Used by the APIs and by the listener (`wire`), which knows
//! Kafka's bytes only through this module and `api::sasl`.
//!
//! An answer is a [`Frame`]: its bytes as a list of chunks, written with vectored writes.
//! Encoding copies small fields into chunks of their own, but keeps byte fields of at
//! least [`SHARE_MIN_BYTES`] (a Fetch answer's records) as references to the buffers they
//! are in, so a batch is copied once between the bookie's buffer and the socket (into its
//! partition's records, with its base offset patched), not a second time into the frame.
//!
//! Architecture invariant: depends on nothing else in this crate but its limits, so the
//! listener takes it without taking the APIs' state.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::task::JoinHandle;

use crate::limits::HEAD_RESERVE_MAX;

/// An answer being worked on: its encoded frame, nothing (acks=0), or a reason to close.
pub(crate) type Pending = JoinHandle<Result<Option<Frame>, String>>;

/// Byte fields at least this long are kept by reference in an answer's frame, shorter
/// ones copied (a chunk costs an I/O vector entry; copying a few KiB costs less).
pub(crate) const SHARE_MIN_BYTES: usize = 4096;

/// Bytes of the fixed request-header prefix: API key, version, correlation id.
pub(crate) const HEADER_PREFIX_BYTES: usize = 8;

/// The name of API `key` (`Produce`), or the number when no API has it.
pub(crate) fn api_name(key: i16) -> String {
    ApiKey::try_from(key).map_or_else(|_| key.to_string(), |k| format!("{k:?}"))
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

/// An answer that is already known.
pub(crate) fn ready(r: Result<Option<Frame>, String>) -> Pending {
    tokio::spawn(async move { r })
}

/// Starts the work of an answer. The future is boxed: a finished task keeps its cell
/// until its answer is written, and the cell of an unboxed future is as large as the
/// future's state (kilobytes for a Fetch), so a client that pipelines requests and never
/// reads its answers would pin that much per queued answer (`inflight_per_connection` of
/// them per connection) outside every byte budget. Boxed, the state is freed when the
/// work ends and only the encoded answer stays.
pub(crate) fn spawn_answer(
    work: impl std::future::Future<Output = Result<Option<Frame>, String>> + Send + 'static,
) -> Pending {
    tokio::spawn(Box::pin(work))
}

/// Frames an answer: size, response header (at the API's header version), body.
pub(crate) fn encode_response<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation: i32,
    body: &R,
) -> Result<Frame, String> {
    let header_version = key.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation);
    let fail = |e: anyhow::Error| format!("encoding a {key:?} v{version} answer: {e}");
    let size = header.compute_size(header_version).map_err(fail)?
        + body.compute_size(version).map_err(fail)?;
    let Ok(size_field) = i32::try_from(size) else {
        return Err(format!("a {key:?} v{version} answer of {size} bytes is too large to frame"));
    };
    let mut buf = FrameBuf::with_capacity(4 + size);
    buf.put_i32(size_field);
    header.encode(&mut buf, header_version).map_err(fail)?;
    body.encode(&mut buf, version).map_err(fail)?;
    let frame = buf.finish();
    debug_assert_eq!(frame.len(), 4 + size, "{key:?} v{version}: computed and encoded sizes");
    Ok(frame)
}

/// An encoded answer as chunks (see the module doc). Never holds an empty chunk.
#[derive(Debug, Default)]
pub(crate) struct Frame {
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Frame {
    /// Bytes of the whole frame, size field included.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The chunks, in order.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> impl Iterator<Item = &Bytes> {
        self.chunks.iter()
    }

    /// The frame's bytes in one buffer (a copy, for tests).
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.len);
        for c in &self.chunks {
            b.put_slice(c);
        }
        b.freeze()
    }

    fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push_back(chunk);
        }
    }
}

impl From<Bytes> for Frame {
    fn from(b: Bytes) -> Frame {
        let mut f = Frame::default();
        f.push(b);
        f
    }
}

impl Buf for Frame {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        self.chunks.front().map_or(&[], |c| c.as_ref())
    }

    fn advance(&mut self, mut n: usize) {
        assert!(n <= self.len, "advancing {n} bytes past a frame's {}", self.len);
        self.len -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("the chunks hold len bytes");
            if n < front.len() {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.chunks.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, c) in dst.iter_mut().zip(&self.chunks) {
            *slot = IoSlice::new(c);
            n += 1;
        }
        n
    }
}

/// The buffer answers are encoded into: written fields go to `head`; a shared byte field
/// closes `head` as a chunk and is kept as a chunk of its own.
#[derive(Debug)]
pub(crate) struct FrameBuf {
    done: Frame,
    head: BytesMut,
}

impl FrameBuf {
    /// A buffer for an answer of about `size` bytes (reserving at most `HEAD_RESERVE_MAX`).
    pub(crate) fn with_capacity(size: usize) -> FrameBuf {
        FrameBuf {
            done: Frame::default(),
            head: BytesMut::with_capacity(size.min(HEAD_RESERVE_MAX)),
        }
    }

    /// The encoded frame.
    pub(crate) fn finish(mut self) -> Frame {
        self.close_head();
        self.done
    }

    fn close_head(&mut self) {
        let head = self.head.split().freeze();
        self.done.push(head);
    }
}

// SAFETY: every method forwards to the `BytesMut` in `head`, whose `BufMut` implementation
// keeps the trait's contract (`chunk_mut` hands out spare capacity, `advance_mut` only
// counts bytes written into it); `FrameBuf` keeps no other state those methods touch.
// Tested by `framing::tests` (every Fetch version encoded here equals its plain encoding).
#[allow(unsafe_code)]
unsafe impl BufMut for FrameBuf {
    fn remaining_mut(&self) -> usize {
        self.head.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's promise (cnt bytes of `chunk_mut` initialised) is passed on
        // to the same buffer `chunk_mut` came from.
        unsafe { self.head.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.head.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        self.head.put_slice(src)
    }
}

impl ByteBufMut for FrameBuf {
    fn offset(&self) -> usize {
        self.done.len + self.head.len()
    }

    // Gaps (seek and range) are used by record encoders, never by the answers' encoders:
    // they stay inside `head`, which is all that is writable.
    fn seek(&mut self, offset: usize) {
        let base = self.done.len;
        assert!(offset >= base, "seeking back over a shared chunk of an answer");
        self.head.resize(offset - base, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let base = self.done.len;
        assert!(r.start >= base, "writing into a shared chunk of an answer");
        &mut self.head[r.start - base..r.end - base]
    }

    fn put_shared(&mut self, b: &Bytes) {
        if b.len() < SHARE_MIN_BYTES {
            self.head.put_slice(b);
        } else {
            self.close_head();
            self.done.push(b.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};

    use super::*;

    fn answer(records: &[Bytes]) -> FetchResponse {
        let partitions = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_high_watermark(7)
                    .with_records(Some(r.clone()))
            })
            .collect();
        let topic = FetchableTopicResponse::default()
            .with_topic(kafka_protocol::protocol::StrBytes::from_static_str("t").into())
            .with_partitions(partitions);
        FetchResponse::default().with_responses(vec![topic])
    }

    /// The records of a Fetch answer reach the frame by reference (the batches are not
    /// copied into it), and the frame's bytes are exactly the plain encoding, in every
    /// Fetch version this broker answers.
    #[test]
    fn fetch_records_are_shared_not_copied_and_frames_equal_the_plain_encoding() {
        let big: Vec<Bytes> =
            (0..3u8).map(|i| Bytes::from(vec![i; SHARE_MIN_BYTES * (i as usize + 1)])).collect();
        let small = Bytes::from(vec![9u8; SHARE_MIN_BYTES - 1]);
        let mut records = big.clone();
        records.push(small.clone());
        let resp = answer(&records);
        let versions = ApiKey::Fetch.valid_versions();
        for version in versions.min..=versions.max {
            let frame = encode_response(ApiKey::Fetch, version, 5, &resp).expect("encodes");
            // The plain encoding, as the protocol crate writes it into one buffer.
            let hv = ApiKey::Fetch.response_header_version(version);
            let header = ResponseHeader::default().with_correlation_id(5);
            let mut plain = BytesMut::new();
            let size = header.compute_size(hv).unwrap() + resp.compute_size(version).unwrap();
            plain.put_i32(size as i32);
            header.encode(&mut plain, hv).unwrap();
            resp.encode(&mut plain, version).unwrap();
            assert_eq!(frame.len(), plain.len(), "v{version}");
            assert_eq!(frame.to_bytes(), plain.freeze(), "v{version}");
            // Each large records buffer is a chunk of the frame: the same memory.
            for r in &big {
                assert!(
                    frame.chunks().any(|c| c.as_ptr() == r.as_ptr() && c.len() == r.len()),
                    "v{version}: records of {} bytes were copied",
                    r.len()
                );
            }
            assert!(!frame.chunks().any(|c| c.as_ptr() == small.as_ptr()), "v{version}");
        }
    }

    /// Writing a frame in pieces (as a socket that takes part of a vectored write does)
    /// yields its bytes in order.
    #[test]
    fn a_frame_advanced_in_pieces_yields_its_bytes_in_order() {
        let resp = answer(&[Bytes::from(vec![1u8; 3 * SHARE_MIN_BYTES])]);
        let mut frame = encode_response(ApiKey::Fetch, 12, 1, &resp).unwrap();
        let want = frame.to_bytes();
        let mut got = Vec::new();
        let mut step = 1;
        while frame.has_remaining() {
            let mut slices = [IoSlice::new(&[]); 4];
            let n = frame.chunks_vectored(&mut slices);
            assert!(n > 0);
            let take = step.min(frame.remaining()).min(slices[0].len());
            got.extend_from_slice(&slices[0][..take]);
            frame.advance(take);
            step = step * 3 + 1;
        }
        assert_eq!(got, want);
        assert_eq!(frame.chunk(), &[] as &[u8]);
    }
}
