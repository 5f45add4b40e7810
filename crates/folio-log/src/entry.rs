//! The format of one log entry: one ledger entry per appended batch.
//!
//! ```text
//! offset  size  field
//! 0       1     format version (1)
//! 1       8     base offset (u64 LE): the offset of the batch's first record
//! 9       4     record count (u32 LE, >= 1)
//! 13      8     max timestamp (i64 LE, ms): the highest timestamp in the log up to and
//!               including this batch, so it never decreases along the log and a binary
//!               search by time is valid whatever clocks the producers had
//! 21      ..    the batch (opaque bytes)
//! ```
//! The ledger entry around it carries its own checksum; this header has none.

use bytes::{Bytes, BytesMut};

/// The version byte of the log entry header.
pub const LOG_ENTRY_VERSION: u8 = 1;
/// Bytes of the log entry header in front of each payload.
pub const LOG_ENTRY_HEADER_BYTES: usize = 21;

/// One batch as stored in the log, with where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub base_offset: u64,
    pub record_count: u32,
    pub max_timestamp: i64,
    pub ledger_id: u64,
    pub entry_id: i64,
    pub payload: Bytes,
}

impl LogEntry {
    /// The offset after this batch's last record.
    pub fn next_offset(&self) -> u64 {
        self.base_offset + u64::from(self.record_count)
    }
}

/// The header fields of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    pub base_offset: u64,
    pub record_count: u32,
    pub max_timestamp: i64,
}

/// A log entry: the header `h` followed by `payload`.
pub fn encode(h: EntryHeader, payload: &[u8]) -> Bytes {
    let mut b = with_header_room(payload);
    write_header(&mut b, h);
    b.freeze()
}

/// The batch behind `LOG_ENTRY_HEADER_BYTES` of room for the header (filled later by
/// `write_header`, once the offset is known), so an append copies the batch once.
pub fn with_header_room(payload: &[u8]) -> BytesMut {
    let mut b = BytesMut::with_capacity(LOG_ENTRY_HEADER_BYTES + payload.len());
    b.resize(LOG_ENTRY_HEADER_BYTES, 0);
    b.extend_from_slice(payload);
    b
}

/// Fills the header room of a buffer made by `with_header_room`.
pub fn write_header(b: &mut [u8], h: EntryHeader) {
    b[0] = LOG_ENTRY_VERSION;
    b[1..9].copy_from_slice(&h.base_offset.to_le_bytes());
    b[9..13].copy_from_slice(&h.record_count.to_le_bytes());
    b[13..21].copy_from_slice(&h.max_timestamp.to_le_bytes());
}

/// Splits a stored entry into header and payload; `None` if it is not a log entry.
pub fn decode(b: &Bytes) -> Option<(EntryHeader, Bytes)> {
    if b.len() < LOG_ENTRY_HEADER_BYTES || b[0] != LOG_ENTRY_VERSION {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let h = EntryHeader {
        base_offset: u64_at(1),
        record_count: u32::from_le_bytes(b[9..13].try_into().expect("4 bytes")),
        max_timestamp: u64_at(13) as i64,
    };
    if h.record_count == 0 {
        return None;
    }
    Some((h, b.slice(LOG_ENTRY_HEADER_BYTES..)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trips_and_rejects_garbage() {
        let h = EntryHeader { base_offset: 42, record_count: 3, max_timestamp: -5 };
        let b = encode(h, b"batch");
        assert_eq!(decode(&b), Some((h, Bytes::from_static(b"batch"))));
        assert_eq!(decode(&b.slice(..10)), None);
        let mut bad = b.to_vec();
        bad[0] = 9;
        assert_eq!(decode(&Bytes::from(bad)), None);
        let zero = encode(EntryHeader { record_count: 0, ..h }, b"");
        assert_eq!(decode(&zero), None);
    }
}
