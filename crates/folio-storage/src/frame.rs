//! The record framing shared by journal files and entry logs. All integers little-endian.
//!
//! ```text
//! 0 crc u32 | 4 len u32 | 8 kind u8 | 9 reserved [u8; 3] = 0 | 12 body[len]
//! crc = crc32c(file_id u64 LE ‖ bytes[4, 12 + len))
//! ```
//!
//! The checksum covers the id of the file the record was written to: bytes left behind by an
//! earlier incarnation of a recycled file never validate. Kind 0 is never used, so zeroed
//! space reads as "nothing here".

use crate::fs::AlignedBuf;

/// The kind of an entry, in journal files and entry logs alike: in single-write mode the
/// index points at journal records and the entry-log reader reads them.
pub const KIND_ENTRY: u8 = 1;

/// Bytes of a frame's header: length, kind, checksum.
pub const FRAME_HEADER_BYTES: usize = 12;

/// Why a frame could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Zeros: the writer never got here.
    Zeros,
    /// The record runs past the end of the file.
    Truncated,
    /// Checksum mismatch: a torn write, or bytes of an older incarnation of the file.
    Checksum,
    /// The checksum is right but the record makes no sense.
    Malformed,
}

/// What reading a frame at an offset found.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A valid frame: its kind, body, and total length including the header.
    Valid {
        kind: u8,
        body: &'a [u8],
        total: usize,
    },
    /// More bytes are needed than the window holds: this many in total.
    NeedBytes(usize),
    Stop(StopReason),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn crc(file_id: u64, framed: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&file_id.to_le_bytes()), framed)
}

/// Appends one frame to `out`; returns the bytes appended.
pub fn encode(file_id: u64, kind: u8, body: &[u8], out: &mut AlignedBuf) -> usize {
    assert_ne!(kind, 0, "kind 0 is reserved for empty space");
    let len = u32::try_from(body.len()).expect("frame body fits in u32");
    let mut head = [0u8; FRAME_HEADER_BYTES];
    head[4..8].copy_from_slice(&len.to_le_bytes());
    head[8] = kind;
    let c = crc32c::crc32c_append(crc(file_id, &head[4..]), body);
    head[0..4].copy_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(body);
    FRAME_HEADER_BYTES + body.len()
}

/// Reads the frame at the start of `bytes`. `at_eof` says `bytes` reaches the end of the
/// file; `body_bytes_max` bounds the length field. Never panics, whatever the input.
pub fn decode(file_id: u64, bytes: &[u8], at_eof: bool, body_bytes_max: usize) -> Frame<'_> {
    let need = |n| if at_eof { Frame::Stop(StopReason::Truncated) } else { Frame::NeedBytes(n) };
    if bytes.len() < FRAME_HEADER_BYTES {
        if at_eof && bytes.iter().all(|b| *b == 0) {
            return Frame::Stop(StopReason::Zeros);
        }
        return need(FRAME_HEADER_BYTES);
    }
    let len = u32_at(bytes, 4) as usize;
    if bytes[..FRAME_HEADER_BYTES].iter().all(|b| *b == 0) {
        return Frame::Stop(StopReason::Zeros);
    }
    if len > body_bytes_max {
        return Frame::Stop(StopReason::Checksum);
    }
    let total = FRAME_HEADER_BYTES + len;
    if bytes.len() < total {
        return need(total);
    }
    if crc(file_id, &bytes[4..total]) != u32_at(bytes, 0) {
        return Frame::Stop(StopReason::Checksum);
    }
    Frame::Valid { kind: bytes[8], body: &bytes[FRAME_HEADER_BYTES..total], total }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip_and_bind_the_file_id() {
        let mut b = AlignedBuf::with_capacity(64);
        let n = encode(5, 3, b"body", &mut b);
        assert_eq!(
            decode(5, b.as_slice(), true, 100),
            Frame::Valid { kind: 3, body: b"body", total: n }
        );
        assert_eq!(decode(6, b.as_slice(), true, 100), Frame::Stop(StopReason::Checksum));
        assert_eq!(decode(5, &b.as_slice()[..n - 1], false, 100), Frame::NeedBytes(n));
        assert_eq!(
            decode(5, &b.as_slice()[..n - 1], true, 100),
            Frame::Stop(StopReason::Truncated)
        );
        assert_eq!(decode(5, b.as_slice(), true, 3), Frame::Stop(StopReason::Checksum));
        assert_eq!(decode(5, &[0u8; 40], false, 100), Frame::Stop(StopReason::Zeros));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64), eof in any::<bool>()) {
            let _ = decode(1, &bytes, eof, 1 << 20);
        }
    }
}
