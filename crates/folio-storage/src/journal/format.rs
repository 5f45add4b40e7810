//! Journal file format. All integers little-endian.
//!
//! ```text
//! file  = header block (4096 bytes) ‖ record* ‖ (zeros | bytes of an older file)
//! header: 0 magic "FOLIOJNL" | 8 version u32 = 1 | 12 reserved u32 | 16 file_id u64
//!         | 24 crc32c(bytes[0,24)) u32 | zeros to 4096
//! record: a frame (see `crate::frame`: crc bound to the file id ‖ len ‖ kind ‖ body)
//! kinds:  1 Entry       body = the encoded entry (it names its ledger and entry id)
//!         2 MasterKey   body = ledger_id u64 ‖ key [u8; 20]
//!         3 Fence       body = ledger_id u64
//!         4 ExplicitLac body = ledger_id u64 ‖ lac i64
//!         5 FileEnd     body = next_file_id u64; the file is complete, replay goes on in
//!                       the next file
//!         6 SyncMark    body = offset u64: every record of this file before `offset` was
//!                       durable (fdatasync returned) when this record was written
//! checkpoint file: magic "FOLIOCKP" ‖ file_id u64 ‖ offset u64 ‖ crc32c(previous 24) u32
//! ```
//!
//! The record checksum covers the file id, so bytes left in a recycled file by its previous
//! incarnation never validate, and zero-filled preallocation ends replay (kind 0 is invalid).
//! Records are contiguous: a group commit rewrites the last partial 4 KiB block with the
//! same prefix bytes plus new records, so a torn rewrite can damage only unacknowledged
//! records.
//!
//! Torn tail or damage: a crash can tear only unsynced writes, and at most a few groups are
//! unsynced at a time, so records after a torn spot are possible (a write's sectors land in
//! any order) but never past the last durable point. Each group therefore starts with a
//! SyncMark naming the durable end of the file when the group was written. A bad record at
//! `p` followed by a valid SyncMark whose offset is beyond `p` is damage to records that
//! were durable, not a torn tail: replay refuses to go on (see `replay`).
//!
//! Media assumptions: a synced write is durable; an unsynced write may be lost, applied or
//! torn at 512-byte sector granularity.

use bytes::Bytes;
use folio_proto::limits::MASTER_KEY_BYTES;
use folio_proto::{Entry, EntryId, LedgerId};

use crate::frame::{self, Frame};
use crate::fs::AlignedBuf;

/// Bytes of a journal file's header (one aligned block).
pub const HEADER_BYTES: usize = 4096;
pub use crate::frame::{FRAME_HEADER_BYTES as RECORD_HEADER_BYTES, StopReason};
pub use crate::limits::RECORD_BODY_BYTES_MAX;
const MAGIC: &[u8; 8] = b"FOLIOJNL";
const CHECKPOINT_MAGIC: &[u8; 8] = b"FOLIOCKP";
/// The journal format's version in each file header.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of an encoded checkpoint.
pub const CHECKPOINT_BYTES: usize = 28;

/// A position in the journal: the end of a record (or the start of the records of a file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalPosition {
    pub file_id: u64,
    pub offset: u64,
}

/// What a journal record holds: an entry, or a ledger's master key, fence or explicit LAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalRecord {
    Entry(Entry),
    MasterKey {
        ledger_id: LedgerId,
        key: [u8; MASTER_KEY_BYTES],
    },
    Fence {
        ledger_id: LedgerId,
    },
    ExplicitLac {
        ledger_id: LedgerId,
        lac: EntryId,
    },
    FileEnd {
        next_file_id: u64,
    },
    /// Everything in this file before `offset` was durable when this record was written.
    SyncMark {
        offset: u64,
    },
}

impl JournalRecord {
    /// The ledger a record is about (`None` for the journal's own records).
    pub fn ledger_id(&self) -> Option<LedgerId> {
        match self {
            JournalRecord::Entry(e) => Some(e.ledger_id()),
            JournalRecord::MasterKey { ledger_id, .. }
            | JournalRecord::Fence { ledger_id }
            | JournalRecord::ExplicitLac { ledger_id, .. } => Some(*ledger_id),
            JournalRecord::FileEnd { .. } | JournalRecord::SyncMark { .. } => None,
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The header block of journal file `file_id`.
pub fn encode_header(file_id: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&file_id.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a journal header or checkpoint was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("header is {0} bytes")]
    ShortHeader(usize),
    #[error("bad magic")]
    BadMagic,
    #[error("{0} checksum mismatch")]
    Checksum(&'static str),
    #[error("unsupported journal format version {0}")]
    Version(u32),
    #[error("not a checkpoint file ({0} bytes)")]
    NotACheckpoint(usize),
}

/// Checks a header block; returns its file id.
pub fn decode_header(h: &[u8]) -> Result<u64, FormatError> {
    if h.len() < 28 {
        return Err(FormatError::ShortHeader(h.len()));
    }
    if &h[0..8] != MAGIC {
        return Err(FormatError::BadMagic);
    }
    if u32_at(h, 24) != crc32c::crc32c(&h[0..24]) {
        return Err(FormatError::Checksum("header"));
    }
    let version = u32_at(h, 8);
    if version != FORMAT_VERSION {
        return Err(FormatError::Version(version));
    }
    Ok(u64_at(h, 16))
}

fn kind_and_body(record: &JournalRecord) -> (u8, Vec<u8>) {
    match record {
        JournalRecord::Entry(_) => (frame::KIND_ENTRY, Vec::new()),
        JournalRecord::MasterKey { ledger_id, key } => {
            let mut b = ledger_id.to_le_bytes().to_vec();
            b.extend_from_slice(key);
            (2, b)
        }
        JournalRecord::Fence { ledger_id } => (3, ledger_id.to_le_bytes().to_vec()),
        JournalRecord::ExplicitLac { ledger_id, lac } => {
            let mut b = ledger_id.to_le_bytes().to_vec();
            b.extend_from_slice(&lac.to_le_bytes());
            (4, b)
        }
        JournalRecord::FileEnd { next_file_id } => (5, next_file_id.to_le_bytes().to_vec()),
        JournalRecord::SyncMark { offset } => (6, offset.to_le_bytes().to_vec()),
    }
}

/// Appends `record` framed for file `file_id` to `out`; returns the bytes appended.
pub fn encode_record(file_id: u64, record: &JournalRecord, out: &mut AlignedBuf) -> usize {
    let (kind, owned) = kind_and_body(record);
    let body: &[u8] = match record {
        JournalRecord::Entry(e) => e.as_bytes(),
        _ => &owned,
    };
    frame::encode(file_id, kind, body, out)
}

/// Bytes of `record` as a frame (header and body).
pub fn record_len(record: &JournalRecord) -> usize {
    RECORD_HEADER_BYTES
        + match record {
            JournalRecord::Entry(e) => e.encoded_len(),
            JournalRecord::MasterKey { .. } => 8 + MASTER_KEY_BYTES,
            JournalRecord::Fence { .. }
            | JournalRecord::FileEnd { .. }
            | JournalRecord::SyncMark { .. } => 8,
            JournalRecord::ExplicitLac { .. } => 16,
        }
}

/// How a record at the front of `bytes` decodes.
#[derive(Debug)]
pub enum Decoded {
    Record(JournalRecord, usize),
    /// More bytes are needed than `bytes` holds: this many in total.
    NeedBytes(usize),
    Stop(StopReason),
}

/// Whether `h` (a record header's bytes) could start a record: a known kind, zero reserved
/// bytes and a length in bounds. A cheap filter before the checksum when searching.
pub fn plausible_record_header(h: &[u8]) -> bool {
    h.len() >= RECORD_HEADER_BYTES
        && (1..=6).contains(&h[8])
        && h[9..12] == [0, 0, 0]
        && u32_at(h, 4) as usize <= RECORD_BODY_BYTES_MAX
}

/// Decodes the record at the start of `bytes` (a record framed for `file_id`). `at_eof` says
/// that `bytes` reaches the end of the file. Never panics, whatever the input.
pub fn decode_record(file_id: u64, bytes: &[u8], at_eof: bool) -> Decoded {
    let (kind, body, total) = match frame::decode(file_id, bytes, at_eof, RECORD_BODY_BYTES_MAX) {
        Frame::Valid { kind, body, total } => (kind, body, total),
        Frame::NeedBytes(n) => return Decoded::NeedBytes(n),
        Frame::Stop(reason) => return Decoded::Stop(reason),
    };
    let record = match (kind, body.len()) {
        (1, _) => match Entry::decode(Bytes::copy_from_slice(body)) {
            Ok(e) => JournalRecord::Entry(e),
            Err(_) => return Decoded::Stop(StopReason::Malformed),
        },
        (2, 28) => {
            let mut key = [0u8; MASTER_KEY_BYTES];
            key.copy_from_slice(&body[8..28]);
            JournalRecord::MasterKey { ledger_id: u64_at(body, 0), key }
        }
        (3, 8) => JournalRecord::Fence { ledger_id: u64_at(body, 0) },
        (4, 16) => {
            JournalRecord::ExplicitLac { ledger_id: u64_at(body, 0), lac: u64_at(body, 8) as i64 }
        }
        (5, 8) => JournalRecord::FileEnd { next_file_id: u64_at(body, 0) },
        (6, 8) => JournalRecord::SyncMark { offset: u64_at(body, 0) },
        _ => return Decoded::Stop(StopReason::Malformed),
    };
    Decoded::Record(record, total)
}

/// The checkpoint of `pos`: magic, position and checksum.
pub fn encode_checkpoint(pos: JournalPosition) -> [u8; CHECKPOINT_BYTES] {
    let mut b = [0u8; CHECKPOINT_BYTES];
    b[0..8].copy_from_slice(CHECKPOINT_MAGIC);
    b[8..16].copy_from_slice(&pos.file_id.to_le_bytes());
    b[16..24].copy_from_slice(&pos.offset.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The position in a checkpoint, refusing damage.
pub fn decode_checkpoint(b: &[u8]) -> Result<JournalPosition, FormatError> {
    if b.len() != CHECKPOINT_BYTES || &b[0..8] != CHECKPOINT_MAGIC {
        return Err(FormatError::NotACheckpoint(b.len()));
    }
    if u32_at(b, 24) != crc32c::crc32c(&b[0..24]) {
        return Err(FormatError::Checksum("checkpoint"));
    }
    Ok(JournalPosition { file_id: u64_at(b, 8), offset: u64_at(b, 16) })
}

/// The file name of journal file `file_id`.
pub fn file_name(file_id: u64) -> String {
    format!("{file_id:016x}.jnl")
}

/// The file id of a journal file's name, if it is one.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".jnl")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_proto::EntryHeader;
    use proptest::prelude::*;

    fn records() -> Vec<JournalRecord> {
        let h = EntryHeader { ledger_id: 9, entry_id: 4, last_add_confirmed: 3, length: 10 };
        vec![
            JournalRecord::Entry(Entry::encode(h, b"0123456789")),
            JournalRecord::MasterKey { ledger_id: 9, key: [7; 20] },
            JournalRecord::Fence { ledger_id: 9 },
            JournalRecord::ExplicitLac { ledger_id: 9, lac: -1 },
            JournalRecord::FileEnd { next_file_id: 12 },
            JournalRecord::SyncMark { offset: 8192 },
        ]
    }

    #[test]
    fn records_round_trip_and_are_bound_to_their_file() {
        for r in records() {
            let mut buf = AlignedBuf::with_capacity(64);
            let n = encode_record(11, &r, &mut buf);
            assert_eq!(n, record_len(&r));
            match decode_record(11, buf.as_slice(), true) {
                Decoded::Record(d, len) => {
                    assert_eq!(d, r);
                    assert_eq!(len, n);
                }
                other => panic!("{other:?}"),
            }
            // The same bytes in a recycled file (another id) never validate.
            assert!(matches!(
                decode_record(12, buf.as_slice(), true),
                Decoded::Stop(StopReason::Checksum)
            ));
        }
    }

    #[test]
    fn zeros_and_partial_records_stop_cleanly() {
        assert!(matches!(decode_record(1, &[0u8; 64], true), Decoded::Stop(StopReason::Zeros)));
        let mut buf = AlignedBuf::with_capacity(64);
        encode_record(1, &records()[0], &mut buf);
        let part = &buf.as_slice()[..buf.len() - 1];
        assert!(matches!(decode_record(1, part, true), Decoded::Stop(StopReason::Truncated)));
        assert!(matches!(decode_record(1, part, false), Decoded::NeedBytes(n) if n == buf.len()));
    }

    #[test]
    fn header_and_checkpoint_round_trip_and_reject_damage() {
        let h = encode_header(77);
        assert_eq!(decode_header(&h), Ok(77));
        let mut bad = h;
        bad[17] ^= 1;
        assert!(decode_header(&bad).is_err());
        let p = JournalPosition { file_id: 3, offset: 4096 };
        assert_eq!(decode_checkpoint(&encode_checkpoint(p)), Ok(p));
        let mut bad = encode_checkpoint(p);
        bad[9] ^= 1;
        assert!(decode_checkpoint(&bad).is_err());
        assert_eq!(parse_file_name(&file_name(0xabc)), Some(0xabc));
        assert_eq!(parse_file_name("junk.jnl"), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..128),
                                                   at_eof in any::<bool>()) {
            let _ = decode_record(1, &bytes, at_eof);
            let _ = decode_header(&bytes);
            let _ = decode_checkpoint(&bytes);
        }
    }
}
