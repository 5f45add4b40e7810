//! The index: where each entry lives, each ledger's state, and storage-wide records, kept in
//! an embedded key-value store (see [`kv`]).
//!
//! Key layout (index keys are big-endian so that byte order is numeric order):
//!
//! ```text
//! Locations  ledger_id u64 BE ‖ entry_id u64 BE      → log_id u64 ‖ offset u64 ‖ len u32   (LE)
//! Ledgers    ledger_id u64 BE                         → LedgerState (see `LedgerState::encode`)
//! Meta       "flags"                                  → u64 LE storage flags
//!            "next_log_id"                            → u64 LE
//!            "elog/" ‖ log_id u64 BE                  → EntryLogState
//!            "checkpoint"                             → journal position (see below)
//!            "tomb/" ‖ first ledger u64 BE            → end ledger u64 LE (see `tombstones`)
//! ```

pub mod kv;
pub mod tombstones;

use folio_proto::limits::MASTER_KEY_BYTES;
use folio_proto::{EntryId, LedgerId};

pub use kv::{FjallKv, KvBatch, KvStore, MemKv, Table};
pub use tombstones::Tombstones;

use crate::error::{Result, StorageError};

/// The index key of an entry's location: ledger id and entry id, big-endian so they sort.
#[allow(clippy::big_endian_bytes)] // Index keys sort numerically.
pub fn location_key(ledger_id: LedgerId, entry_id: EntryId) -> Vec<u8> {
    debug_assert!(entry_id >= 0);
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&ledger_id.to_be_bytes());
    k.extend_from_slice(&(entry_id as u64).to_be_bytes());
    k
}

/// The ledger and entry id of a location key.
#[allow(clippy::big_endian_bytes)]
pub fn parse_location_key(key: &[u8]) -> Result<(LedgerId, EntryId)> {
    if key.len() != 16 {
        return Err(StorageError::corruption(
            "index",
            format!("location key of {} bytes", key.len()),
        ));
    }
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&key[..8]);
    b.copy_from_slice(&key[8..]);
    Ok((u64::from_be_bytes(a), u64::from_be_bytes(b) as i64))
}

/// The index key of a ledger's state.
#[allow(clippy::big_endian_bytes)]
pub fn ledger_key(ledger_id: LedgerId) -> Vec<u8> {
    ledger_id.to_be_bytes().to_vec()
}

/// The ledger id of a ledger-state key.
#[allow(clippy::big_endian_bytes)]
pub fn parse_ledger_key(key: &[u8]) -> Result<LedgerId> {
    let a: [u8; 8] = key.try_into().map_err(|_| {
        StorageError::corruption("index", format!("ledger key of {} bytes", key.len()))
    })?;
    Ok(u64::from_be_bytes(a))
}

/// The range of location keys of one ledger: `[start, end)`.
pub fn ledger_location_range(ledger_id: LedgerId) -> (Vec<u8>, Vec<u8>) {
    let start = location_key(ledger_id, 0);
    let mut end = start.clone();
    end[8] = 0x80; // entry ids are non-negative i64: all below 2^63
    (start, end)
}

/// The meta key of the storage flags (`NEEDS_INTEGRITY_CHECK`).
pub const META_FLAGS: &[u8] = b"flags";
/// The meta key of the next entry log id.
pub const META_NEXT_LOG_ID: &[u8] = b"next_log_id";
/// The prefix of the meta keys of entry log states.
pub const META_ELOG_PREFIX: &[u8] = b"elog/";
/// The journal position the last flush checkpointed (the journal's checkpoint format),
/// committed with that flush's locations, before the journal's `checkpoint` file moves.
/// An index whose record is behind the file lost commits (fjall drops the batches after a
/// damaged one in its own journal): the bookie refuses to start, since the journal files
/// that would replay them are gone.
pub const META_CHECKPOINT: &[u8] = b"checkpoint";

/// Set in a log id that names a journal file holding entries (single-write mode: the
/// journal's files are the data files, see `storage::data_files`); the other bits are the
/// journal file's id. Entry-log ids stay far below it.
pub const DATA_FILE_BIT: u64 = 1 << 63;

/// The log id (in locations and entry-log states) of journal file `file_id` as a data file.
pub fn data_file_log_id(file_id: u64) -> u64 {
    assert!(file_id & DATA_FILE_BIT == 0, "journal file id {file_id} has the data-file bit");
    file_id | DATA_FILE_BIT
}

/// The journal file id of a log id that names a data file; `None` for an entry log.
pub fn data_file_id(log_id: u64) -> Option<u64> {
    (log_id & DATA_FILE_BIT != 0).then_some(log_id & !DATA_FILE_BIT)
}

/// The meta key of entry log `log_id`'s state.
#[allow(clippy::big_endian_bytes)]
pub fn elog_key(log_id: u64) -> Vec<u8> {
    let mut k = META_ELOG_PREFIX.to_vec();
    k.extend_from_slice(&log_id.to_be_bytes());
    k
}

/// The log id of an entry log state key, if it is one.
#[allow(clippy::big_endian_bytes)]
pub fn parse_elog_key(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(META_ELOG_PREFIX)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

fn u64_le(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Where an entry is stored: the record at `offset` of entry log `log_id`, `len` bytes of
/// entry (the record header comes on top).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryLocation {
    pub log_id: u64,
    pub offset: u64,
    pub len: u32,
}

impl EntryLocation {
    /// `log_id u64 ‖ offset u64 ‖ len u32`, little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(20);
        v.extend_from_slice(&self.log_id.to_le_bytes());
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v
    }

    /// Decodes what `encode` wrote, refusing any other length.
    pub fn decode(b: &[u8]) -> Result<EntryLocation> {
        if b.len() != 20 {
            return Err(StorageError::corruption(
                "index",
                format!("location value of {} bytes", b.len()),
            ));
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&b[16..20]);
        Ok(EntryLocation {
            log_id: u64_le(b, 0),
            offset: u64_le(b, 8),
            len: u32::from_le_bytes(len),
        })
    }
}

/// Per-ledger state the bookie must never forget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerState {
    pub master_key: Option<[u8; MASTER_KEY_BYTES]>,
    pub fenced: bool,
    /// This bookie may have lost data of the ledger: "no" answers become "unknown".
    pub limbo: bool,
    pub explicit_lac: Option<EntryId>,
    /// Recovery adds (autorecovery's copies) brought it here: garbage collection keeps it
    /// while the copy may still be going on, even if no ensemble names this bookie yet.
    pub incoming: bool,
}

const LEDGER_STATE_VERSION: u8 = 1;
const FLAG_FENCED: u8 = 1;
const FLAG_LIMBO: u8 = 2;
const FLAG_HAS_KEY: u8 = 4;
const FLAG_HAS_LAC: u8 = 8;
const FLAG_INCOMING: u8 = 16;

impl LedgerState {
    /// `version u8 ‖ flags u8 ‖ [key 20 bytes if HAS_KEY] ‖ [lac i64 LE if HAS_LAC]`; flags:
    /// 1 fenced, 2 limbo, 4 has key, 8 has LAC, 16 incoming.
    pub fn encode(&self) -> Vec<u8> {
        let mut flags = 0u8;
        if self.fenced {
            flags |= FLAG_FENCED;
        }
        if self.limbo {
            flags |= FLAG_LIMBO;
        }
        if self.incoming {
            flags |= FLAG_INCOMING;
        }
        let mut v = vec![LEDGER_STATE_VERSION, 0];
        if let Some(k) = self.master_key {
            flags |= FLAG_HAS_KEY;
            v.extend_from_slice(&k);
        }
        if let Some(lac) = self.explicit_lac {
            flags |= FLAG_HAS_LAC;
            v.extend_from_slice(&lac.to_le_bytes());
        }
        v[1] = flags;
        v
    }

    /// Decodes what `encode` wrote, refusing damage.
    pub fn decode(b: &[u8]) -> Result<LedgerState> {
        let bad = |d: &str| StorageError::corruption("index ledger state", d.to_string());
        if b.len() < 2 || b[0] != LEDGER_STATE_VERSION {
            return Err(bad("unknown version or too short"));
        }
        let flags = b[1];
        let mut at = 2;
        let mut s = LedgerState {
            fenced: flags & FLAG_FENCED != 0,
            limbo: flags & FLAG_LIMBO != 0,
            incoming: flags & FLAG_INCOMING != 0,
            ..Default::default()
        };
        if flags & FLAG_HAS_KEY != 0 {
            let k = b.get(at..at + MASTER_KEY_BYTES).ok_or_else(|| bad("truncated key"))?;
            let mut key = [0u8; MASTER_KEY_BYTES];
            key.copy_from_slice(k);
            s.master_key = Some(key);
            at += MASTER_KEY_BYTES;
        }
        if flags & FLAG_HAS_LAC != 0 {
            if b.len() < at + 8 {
                return Err(bad("truncated lac"));
            }
            s.explicit_lac = Some(u64_le(b, at) as i64);
            at += 8;
        }
        if at != b.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(s)
    }
}

/// The persisted state of one entry log. A log is listed here before any index entry points
/// into it; `sealed` means it is flushed, rotated and will never be written again: the set
/// the garbage collector may consider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryLogState {
    pub sealed: bool,
    /// Size in bytes when sealed; while active, the durable end of its entries as of the
    /// last flush that wrote to it (0: nothing flushed yet).
    pub size_bytes: u64,
    /// Ledger → bytes of its entries in this log, when sealed.
    pub ledgers: Vec<(LedgerId, u64)>,
}

impl EntryLogState {
    /// A new log being written, with nothing durable yet.
    pub fn active() -> EntryLogState {
        EntryLogState { sealed: false, size_bytes: 0, ledgers: Vec::new() }
    }

    /// An active log whose entries up to `end` are durable and may be in the index.
    pub fn active_up_to(end: u64) -> EntryLogState {
        EntryLogState { sealed: false, size_bytes: end, ledgers: Vec::new() }
    }

    /// `sealed u8 ‖ size u64 ‖ n u32 ‖ n × (ledger u64, bytes u64)`, LE.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![u8::from(self.sealed)];
        v.extend_from_slice(&self.size_bytes.to_le_bytes());
        v.extend_from_slice(&(self.ledgers.len() as u32).to_le_bytes());
        for (l, n) in &self.ledgers {
            v.extend_from_slice(&l.to_le_bytes());
            v.extend_from_slice(&n.to_le_bytes());
        }
        v
    }

    /// Decodes what `encode` wrote, refusing damage.
    pub fn decode(b: &[u8]) -> Result<EntryLogState> {
        let bad =
            || StorageError::corruption("index entry log state", format!("{} bytes", b.len()));
        if b.len() < 13 {
            return Err(bad());
        }
        let mut n = [0u8; 4];
        n.copy_from_slice(&b[9..13]);
        let n = u32::from_le_bytes(n) as usize;
        if b.len() != 13 + n * 16 || b[0] > 1 {
            return Err(bad());
        }
        let ledgers = (0..n).map(|i| (u64_le(b, 13 + i * 16), u64_le(b, 21 + i * 16))).collect();
        Ok(EntryLogState { sealed: b[0] == 1, size_bytes: u64_le(b, 1), ledgers })
    }
}

/// Storage-wide flags.
pub mod flags {
    /// Set by the journal-less pre-boot check; cleared when the full integrity check ends.
    pub const NEEDS_INTEGRITY_CHECK: u64 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn location_keys_sort_numerically_and_ranges_cover_one_ledger() {
        assert!(location_key(1, 255) < location_key(1, 256));
        assert!(location_key(1, i64::MAX) < location_key(2, 0));
        let (s, e) = ledger_location_range(1);
        assert!(s <= location_key(1, 0) && location_key(1, i64::MAX) < e);
        assert!(location_key(2, 0) >= e);
        assert_eq!(parse_location_key(&location_key(7, 9)).unwrap(), (7, 9));
    }

    proptest! {
        #[test]
        fn records_round_trip(key in proptest::option::of(any::<[u8; 20]>()), fenced in any::<bool>(),
                              limbo in any::<bool>(), lac in proptest::option::of(-1..i64::MAX),
                              ledgers in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..10)) {
            let s = LedgerState { master_key: key, fenced, limbo, explicit_lac: lac, incoming: fenced ^ limbo };
            prop_assert_eq!(LedgerState::decode(&s.encode()).unwrap(), s);
            let l = EntryLogState { sealed: true, size_bytes: 5, ledgers };
            prop_assert_eq!(EntryLogState::decode(&l.encode()).unwrap(), l);
        }

        #[test]
        fn arbitrary_values_never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = LedgerState::decode(&b);
            let _ = EntryLogState::decode(&b);
            let _ = EntryLocation::decode(&b);
            let _ = parse_location_key(&b);
            let _ = parse_ledger_key(&b);
        }
    }
}
