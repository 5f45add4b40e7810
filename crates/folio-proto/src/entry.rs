//! The entry format: what a writer sends, what a bookie stores and what a reader verifies.
//!
//! ```text
//! offset  size  field
//!      0     8  ledger_id            u64  LE
//!      8     8  entry_id             i64  LE, >= 0
//!     16     8  last_add_confirmed   i64  LE, -1 = nothing confirmed yet
//!     24     8  length               u64  LE, the ledger's cumulative payload bytes up to and
//!                                          including this entry
//!     32     4  digest               u32  LE, CRC32C over bytes [0, 32) then the payload
//!     36     -  payload
//! ```
//!
//! The digest covers the header, so an entry cannot be replayed under another ledger or entry
//! id. The bookie verifies it on add (a corrupt entry is rejected, never stored) and the reader
//! verifies it on every read (a bad replica is skipped, never returned).

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::ENTRY_BYTES_MAX;
use crate::{EntryId, LedgerId};

const _: () = assert!(ENTRY_BYTES_MAX > ENTRY_HEADER_BYTES, "an entry must fit its header");

/// Bytes of the entry header: ledger id, entry id, LAC, length, digest.
pub const ENTRY_HEADER_BYTES: usize = 36;
const DIGEST_OFFSET: usize = 32;

/// The fields of an entry's header, without the digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    pub ledger_id: LedgerId,
    pub entry_id: EntryId,
    pub last_add_confirmed: EntryId,
    pub length: u64,
}

/// Why bytes are not a valid entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("entry is {len} bytes, shorter than its {ENTRY_HEADER_BYTES}-byte header")]
    TooShort { len: usize },
    #[error("entry is {len} bytes, more than the limit of {ENTRY_BYTES_MAX}")]
    TooLarge { len: usize },
    #[error("entry {ledger_id}/{entry_id} has a negative entry id")]
    InvalidEntryId { ledger_id: LedgerId, entry_id: EntryId },
    #[error(
        "entry {ledger_id}/{entry_id}: digest {actual:#010x} does not match stored {stored:#010x}"
    )]
    DigestMismatch { ledger_id: LedgerId, entry_id: EntryId, stored: u32, actual: u32 },
}

/// An encoded entry whose digest has been verified (or that was just encoded).
///
/// Invariant: `bytes` is at least a header long, at most `ENTRY_BYTES_MAX`, its entry id is
/// non-negative and its digest matches. Cloning is cheap (`Bytes` is reference-counted).
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    bytes: Bytes,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = self.header();
        write!(
            f,
            "Entry({}/{}, lac={}, {} payload bytes)",
            h.ledger_id,
            h.entry_id,
            h.last_add_confirmed,
            self.payload().len()
        )
    }
}

fn digest(bytes: &[u8]) -> u32 {
    let header = &bytes[..DIGEST_OFFSET];
    let payload = &bytes[ENTRY_HEADER_BYTES..];
    crc32c::crc32c_append(crc32c::crc32c(header), payload)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

impl Entry {
    /// Packages a payload under `header`. Panics if the result would exceed the entry limit
    /// or the entry id is negative: callers check sizes against `limits` first.
    pub fn encode(header: EntryHeader, payload: &[u8]) -> Entry {
        assert!(header.entry_id >= 0, "encoding an entry with a negative id");
        assert!(ENTRY_HEADER_BYTES + payload.len() <= ENTRY_BYTES_MAX, "entry too large");
        let mut buf = BytesMut::with_capacity(ENTRY_HEADER_BYTES + payload.len());
        buf.put_u64_le(header.ledger_id);
        buf.put_i64_le(header.entry_id);
        buf.put_i64_le(header.last_add_confirmed);
        buf.put_u64_le(header.length);
        buf.put_u32_le(0);
        buf.put_slice(payload);
        let crc = digest(&buf);
        buf[DIGEST_OFFSET..ENTRY_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
        let entry = Entry { bytes: buf.freeze() };
        debug_assert!(Entry::decode(entry.bytes.clone()).is_ok());
        entry
    }

    /// Verifies `bytes` as an entry. Never panics, whatever the input.
    pub fn decode(bytes: Bytes) -> Result<Entry, EntryError> {
        let (ledger_id, entry_id) = Entry::peek_ids(&bytes)?;
        if bytes.len() > ENTRY_BYTES_MAX {
            return Err(EntryError::TooLarge { len: bytes.len() });
        }
        if entry_id < 0 {
            return Err(EntryError::InvalidEntryId { ledger_id, entry_id });
        }
        let mut stored = [0u8; 4];
        stored.copy_from_slice(&bytes[DIGEST_OFFSET..ENTRY_HEADER_BYTES]);
        let stored = u32::from_le_bytes(stored);
        let actual = digest(&bytes);
        if stored != actual {
            return Err(EntryError::DigestMismatch { ledger_id, entry_id, stored, actual });
        }
        Ok(Entry { bytes })
    }

    /// Reads the ledger and entry ids without verifying anything else.
    pub fn peek_ids(bytes: &[u8]) -> Result<(LedgerId, EntryId), EntryError> {
        if bytes.len() < ENTRY_HEADER_BYTES {
            return Err(EntryError::TooShort { len: bytes.len() });
        }
        Ok((read_u64(bytes, 0), read_u64(bytes, 8) as i64))
    }

    /// The entry's header fields.
    pub fn header(&self) -> EntryHeader {
        EntryHeader {
            ledger_id: read_u64(&self.bytes, 0),
            entry_id: read_u64(&self.bytes, 8) as i64,
            last_add_confirmed: read_u64(&self.bytes, 16) as i64,
            length: read_u64(&self.bytes, 24),
        }
    }

    /// The ledger the entry belongs to.
    pub fn ledger_id(&self) -> LedgerId {
        read_u64(&self.bytes, 0)
    }

    /// The entry's position in its ledger.
    pub fn entry_id(&self) -> EntryId {
        read_u64(&self.bytes, 8) as i64
    }

    /// The LAC the writer piggybacked on this entry.
    pub fn last_add_confirmed(&self) -> EntryId {
        read_u64(&self.bytes, 16) as i64
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.bytes[ENTRY_HEADER_BYTES..]
    }

    /// The whole encoded entry, header and payload.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The whole encoded entry, header and payload, owned.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// Bytes of the whole encoded entry.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(ledger_id: u64, entry_id: i64) -> EntryHeader {
        EntryHeader { ledger_id, entry_id, last_add_confirmed: entry_id - 1, length: 99 }
    }

    #[test]
    fn encode_lays_out_documented_bytes() {
        let e = Entry::encode(header(0x0102, 7), b"abc");
        let b = e.as_bytes();
        assert_eq!(b.len(), ENTRY_HEADER_BYTES + 3);
        assert_eq!(&b[0..8], &0x0102u64.to_le_bytes());
        assert_eq!(&b[8..16], &7i64.to_le_bytes());
        assert_eq!(&b[16..24], &6i64.to_le_bytes());
        assert_eq!(&b[24..32], &99u64.to_le_bytes());
        let mut expected = crc32c::crc32c(&b[..32]);
        expected = crc32c::crc32c_append(expected, b"abc");
        assert_eq!(&b[32..36], &expected.to_le_bytes());
        assert_eq!(&b[36..], b"abc");
    }

    #[test]
    fn a_flipped_bit_anywhere_fails_the_digest() {
        let e = Entry::encode(header(5, 3), b"payload bytes");
        for at in 0..e.encoded_len() {
            for bit in 0..8 {
                let mut b = e.as_bytes().to_vec();
                b[at] ^= 1 << bit;
                let r = Entry::decode(Bytes::from(b));
                assert!(r.is_err(), "flip at byte {at} bit {bit} was accepted");
            }
        }
    }

    #[test]
    fn short_and_negative_entries_are_rejected() {
        assert_eq!(
            Entry::decode(Bytes::from_static(b"short")),
            Err(EntryError::TooShort { len: 5 })
        );
        let mut b = Entry::encode(header(1, 0), b"").as_bytes().to_vec();
        b[8..16].copy_from_slice(&(-1i64).to_le_bytes());
        assert!(matches!(Entry::decode(Bytes::from(b)), Err(EntryError::InvalidEntryId { .. })));
    }

    proptest! {
        #[test]
        fn round_trip(ledger in any::<u64>(), entry in 0..i64::MAX, lac in -1..i64::MAX,
                      length in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let h = EntryHeader { ledger_id: ledger, entry_id: entry, last_add_confirmed: lac, length };
            let e = Entry::encode(h, &payload);
            let d = Entry::decode(e.as_bytes().clone()).unwrap();
            prop_assert_eq!(d.header(), h);
            prop_assert_eq!(d.payload(), &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Entry::decode(Bytes::from(bytes));
        }
    }
}
