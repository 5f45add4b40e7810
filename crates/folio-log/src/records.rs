//! The managed log's metadata records and their binary formats (little-endian; strings are
//! u16 length + UTF-8). Every record starts with a 3-byte magic and a version byte.
//!
//! ```text
//! LogRecord     "FLG" 2 | state u8 (1 active, 2 deleting) | start_offset u64 | owner str
//!               | n u32 | n × LedgerInfo | m u32 | m × (key str, value str)
//!               | k u32 | k × (epoch u32 | start_offset u64)      owner epochs (`epochs`)
//!               (version 1, written before owner epochs, ends after the properties)
//! LedgerInfo    ledger_id u64 | entries u64 | bytes u64 | first_offset u64 | records u64
//!               | first_publish_ms i64 | max_publish_ms i64 | close_ms u64 (0 = open)
//! CursorRecord  "FCR" 1 | offset u64 | updated_ms u64
//! TrashRecord   "FTR" 1 | ledger_id u64 | log str | reason str | time_ms u64 | attempts u32
//!               | next_attempt_ms u64 | last_error str
//! OffsetIndexRecord "FOI" 1 | ledger_id u64 | entries u64 | stride u32 | n u32
//!               | n × uvarint: base offset of entry i × stride, each as the difference
//!               from the one before (the first from 0); strictly increasing
//! ```
//!
//! An offset index record is written with the log record that closes its ledger (same
//! transaction, so it exists only for a ledger the chain lists as closed) and deleted with
//! the ledger's trash record: it lives exactly as long as its ledger's place in the trash
//! or the chain (L1). It is a cache: a missing or damaged one costs a search, never a read
//! of wrong data.

use std::collections::BTreeMap;

use crate::epochs::{EPOCHS_MAX, EpochStart, Epochs};
use crate::limits::{OFFSET_INDEX_RECORD_BYTES_MAX, TEXT_BYTES_MAX};
use bytes::Bytes;
use folio_meta::Result;
use folio_meta::records::{Reader, Record, corrupt, put_string};
use folio_proto::InvalidRecord;

const LOG_MAGIC: &[u8; 3] = b"FLG";
const CURSOR_MAGIC: &[u8; 3] = b"FCR";
const TRASH_MAGIC: &[u8; 3] = b"FTR";
const OFFSET_INDEX_MAGIC: &[u8; 3] = b"FOI";
const VERSION: u8 = 1;
/// The log record's version: 2 added the owner epochs.
const LOG_VERSION: u8 = 2;

/// A log record's state in the metadata store: active, or being deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRecordState {
    /// Appendable by its owner.
    Active = 1,
    /// Being deleted: no one appends; the deleter moves its ledgers to the trash in batches
    /// and removes the record last.
    Deleting = 2,
}

/// One ledger of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerInfo {
    pub ledger_id: u64,
    /// Entries (batches); 0 while the ledger is open (the owner knows, metadata does not).
    pub entries: u64,
    pub bytes: u64,
    /// Offset of the first record in this ledger (set when the ledger joins the chain).
    pub first_offset: u64,
    /// Records in the ledger; set when it is closed.
    pub records: u64,
    pub first_publish_ms: i64,
    /// The highest timestamp in the ledger (the log's running maximum).
    pub max_publish_ms: i64,
    /// When it was closed (ms since the epoch); 0 while open.
    pub close_ms: u64,
}

impl LedgerInfo {
    /// The record of a ledger just opened at `first_offset`, with nothing in it yet.
    pub fn open(ledger_id: u64, first_offset: u64) -> LedgerInfo {
        LedgerInfo {
            ledger_id,
            entries: 0,
            bytes: 0,
            first_offset,
            records: 0,
            first_publish_ms: -1,
            max_publish_ms: -1,
            close_ms: 0,
        }
    }

    /// Whether the ledger was closed (its close time is set).
    pub fn is_closed(&self) -> bool {
        self.close_ms != 0
    }

    /// The offset after this ledger's last record (meaningful once closed).
    pub fn end_offset(&self) -> u64 {
        self.first_offset + self.records
    }
}

/// A managed log: its ledger chain, oldest first; only the last ledger may be open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub state: LogRecordState,
    /// Moved by `delete_records`: offsets below it are gone even if their ledger is not.
    pub start_offset: u64,
    /// Who opened the log last (a process or broker id), for humans.
    pub owner: String,
    pub ledgers: Vec<LedgerInfo>,
    pub properties: BTreeMap<String, String>,
    /// Its owners' epochs, one begun by each take-over (`crate::epochs`).
    pub epochs: Epochs,
}

impl LogRecord {
    /// The record of a new, empty log owned by `owner`.
    pub fn new(owner: &str) -> LogRecord {
        LogRecord {
            state: LogRecordState::Active,
            start_offset: 0,
            owner: owner.into(),
            ledgers: Vec::new(),
            properties: BTreeMap::new(),
            epochs: Epochs::default(),
        }
    }

    /// Chain invariants: distinct ledger ids; only the last ledger open; each closed
    /// ledger ends where the next begins. The epochs are in order (`Epochs::validate`).
    pub fn validate(&self) -> std::result::Result<(), InvalidRecord> {
        self.epochs.validate()?;
        let mut ids = std::collections::BTreeSet::new();
        for (i, l) in self.ledgers.iter().enumerate() {
            if !ids.insert(l.ledger_id) {
                return Err(InvalidRecord::new(format!("ledger {} appears twice", l.ledger_id)));
            }
            let last = i + 1 == self.ledgers.len();
            if !last && !l.is_closed() {
                return Err(InvalidRecord::new(format!(
                    "ledger {} is open but not last",
                    l.ledger_id
                )));
            }
            if let Some(next) = self.ledgers.get(i + 1)
                && l.end_offset() != next.first_offset
            {
                return Err(InvalidRecord::new(format!(
                    "ledger {} ends at {} but ledger {} starts at {}",
                    l.ledger_id,
                    l.end_offset(),
                    next.ledger_id,
                    next.first_offset
                )));
            }
        }
        Ok(())
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> u64 {
        let first = self.ledgers.first().map_or(0, |l| l.first_offset);
        self.start_offset.max(first)
    }

    /// Bytes in all of the log's ledgers.
    pub fn total_bytes(&self) -> u64 {
        self.ledgers.iter().map(|l| l.bytes).sum()
    }
}

fn check_magic(r: &mut Reader<'_>, key: &str, magic: &[u8; 3], what: &str) -> Result<()> {
    check_magic_versions(r, key, magic, what, VERSION..=VERSION).map(|_| ())
}

/// Checks the magic and that the version is one of `versions`; returns the version.
fn check_magic_versions(
    r: &mut Reader<'_>,
    key: &str,
    magic: &[u8; 3],
    what: &str,
    versions: std::ops::RangeInclusive<u8>,
) -> Result<u8> {
    if r.take(3)? != magic {
        return Err(corrupt(key, format!("not a {what}")));
    }
    let v = r.u8()?;
    if !versions.contains(&v) {
        return Err(corrupt(key, format!("unsupported {what} version {v}")));
    }
    Ok(v)
}

fn cut(s: &str) -> &str {
    let mut n = s.len().min(TEXT_BYTES_MAX);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

impl Record for LogRecord {
    fn encode(&self) -> Bytes {
        assert_eq!(self.validate(), Ok(()), "encoding an invalid log record");
        let mut v = LOG_MAGIC.to_vec();
        v.push(LOG_VERSION);
        v.push(self.state as u8);
        v.extend_from_slice(&self.start_offset.to_le_bytes());
        put_string(&mut v, cut(&self.owner));
        v.extend_from_slice(&(self.ledgers.len() as u32).to_le_bytes());
        for l in &self.ledgers {
            for x in [l.ledger_id, l.entries, l.bytes, l.first_offset, l.records] {
                v.extend_from_slice(&x.to_le_bytes());
            }
            v.extend_from_slice(&l.first_publish_ms.to_le_bytes());
            v.extend_from_slice(&l.max_publish_ms.to_le_bytes());
            v.extend_from_slice(&l.close_ms.to_le_bytes());
        }
        v.extend_from_slice(&(self.properties.len() as u32).to_le_bytes());
        for (k, val) in &self.properties {
            put_string(&mut v, cut(k));
            put_string(&mut v, cut(val));
        }
        let epochs = self.epochs.entries();
        v.extend_from_slice(&(epochs.len() as u32).to_le_bytes());
        for e in epochs {
            v.extend_from_slice(&e.epoch.to_le_bytes());
            v.extend_from_slice(&e.start_offset.to_le_bytes());
        }
        Bytes::from(v)
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, b);
        let version = check_magic_versions(&mut r, key, LOG_MAGIC, "log record", 1..=LOG_VERSION)?;
        let state = match r.u8()? {
            1 => LogRecordState::Active,
            2 => LogRecordState::Deleting,
            s => return Err(corrupt(key, format!("log state {s}"))),
        };
        let start_offset = r.u64()?;
        let owner = r.string()?;
        let n = r.u32()? as usize;
        // Each ledger takes 64 bytes: a count above what is left is corrupt, and is refused
        // before anything is allocated for it.
        if n > b.len() / 64 {
            return Err(corrupt(key, format!("{n} ledgers in {} bytes", b.len())));
        }
        let mut ledgers = Vec::with_capacity(n);
        for _ in 0..n {
            ledgers.push(LedgerInfo {
                ledger_id: r.u64()?,
                entries: r.u64()?,
                bytes: r.u64()?,
                first_offset: r.u64()?,
                records: r.u64()?,
                first_publish_ms: r.u64()? as i64,
                max_publish_ms: r.u64()? as i64,
                close_ms: r.u64()?,
            });
        }
        let m = r.u32()?;
        let mut properties = BTreeMap::new();
        for _ in 0..m {
            let k = r.string()?;
            properties.insert(k, r.string()?);
        }
        let mut epochs = Vec::new();
        if version >= 2 {
            let k = r.u32()? as usize;
            if k > EPOCHS_MAX {
                return Err(corrupt(key, format!("{k} owner epochs (at most {EPOCHS_MAX})")));
            }
            for _ in 0..k {
                epochs.push(EpochStart { epoch: r.u32()?, start_offset: r.u64()? });
            }
        }
        r.done()?;
        let epochs = Epochs::from_entries(epochs).map_err(|e| corrupt(key, e))?;
        let record = LogRecord { state, start_offset, owner, ledgers, properties, epochs };
        record.validate().map_err(|e| corrupt(key, e))?;
        Ok(record)
    }
}

/// A durable cursor: the next offset its consumer will read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorRecord {
    pub offset: u64,
    pub updated_ms: u64,
}

impl Record for CursorRecord {
    fn encode(&self) -> Bytes {
        let mut v = CURSOR_MAGIC.to_vec();
        v.push(VERSION);
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.updated_ms.to_le_bytes());
        Bytes::from(v)
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, b);
        check_magic(&mut r, key, CURSOR_MAGIC, "cursor record")?;
        let c = CursorRecord { offset: r.u64()?, updated_ms: r.u64()? };
        r.done()?;
        Ok(c)
    }
}

/// A ledger removed from its chain and not yet deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrashRecord {
    pub ledger_id: u64,
    /// The log that owned it: the ledger's owner tag must name the same log.
    pub log: String,
    /// Why it was trashed (`retention`, `delete-records`, `empty`, `log-deleted`, …).
    pub reason: String,
    pub time_ms: u64,
    pub attempts: u32,
    pub next_attempt_ms: u64,
    pub last_error: String,
}

impl TrashRecord {
    /// A trash record of `ledger_id`, sent by log `log` for `reason` at `time_ms`.
    pub fn new(ledger_id: u64, log: &str, reason: &str, time_ms: u64) -> TrashRecord {
        TrashRecord {
            ledger_id,
            log: log.into(),
            reason: reason.into(),
            time_ms,
            attempts: 0,
            next_attempt_ms: 0,
            last_error: String::new(),
        }
    }
}

impl Record for TrashRecord {
    fn encode(&self) -> Bytes {
        let mut v = TRASH_MAGIC.to_vec();
        v.push(VERSION);
        v.extend_from_slice(&self.ledger_id.to_le_bytes());
        put_string(&mut v, cut(&self.log));
        put_string(&mut v, cut(&self.reason));
        v.extend_from_slice(&self.time_ms.to_le_bytes());
        v.extend_from_slice(&self.attempts.to_le_bytes());
        v.extend_from_slice(&self.next_attempt_ms.to_le_bytes());
        put_string(&mut v, cut(&self.last_error));
        Bytes::from(v)
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(key, b);
        check_magic(&mut r, key, TRASH_MAGIC, "trash record")?;
        let t = TrashRecord {
            ledger_id: r.u64()?,
            log: r.string()?,
            reason: r.string()?,
            time_ms: r.u64()?,
            attempts: r.u32()?,
            next_attempt_ms: r.u64()?,
            last_error: r.string()?,
        };
        r.done()?;
        Ok(t)
    }
}

/// The persisted offset index of a closed ledger: the base offset of every `stride`-th
/// entry (every entry when `stride` is 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetIndexRecord {
    pub ledger_id: u64,
    /// Entries in the ledger.
    pub entries: u64,
    /// Entry `i * stride` starts at `base_offsets[i]`.
    pub stride: u32,
    pub base_offsets: Vec<u64>,
}

/// Bytes of the fixed part of an offset index record.
const OFFSET_INDEX_FIXED_BYTES: usize = 3 + 1 + 8 + 8 + 4 + 4;

fn put_uvarint(v: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        v.push((x as u8) | 0x80);
        x >>= 7;
    }
    v.push(x as u8);
}

fn uvarint_bytes(x: u64) -> usize {
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

impl OffsetIndexRecord {
    /// The record of a ledger whose entries start at `dense` (entry `i` at `dense[i]`,
    /// strictly increasing), keeping every entry if that fits in `bytes_max`, else every
    /// `stride`-th for the smallest power-of-two stride that fits. `None` if even one
    /// offset does not fit, or the offsets do not increase.
    pub fn from_dense(ledger_id: u64, dense: &[u64], bytes_max: usize) -> Option<Self> {
        if dense.windows(2).any(|w| w[0] >= w[1]) {
            return None;
        }
        let mut stride = 1usize;
        loop {
            let mut size = OFFSET_INDEX_FIXED_BYTES;
            let mut prev = 0;
            for b in dense.iter().step_by(stride) {
                size += uvarint_bytes(b - prev);
                prev = *b;
            }
            if size <= bytes_max {
                break;
            }
            if stride >= dense.len() {
                return None;
            }
            stride *= 2;
        }
        Some(OffsetIndexRecord {
            ledger_id,
            entries: dense.len() as u64,
            stride: u32::try_from(stride).ok()?,
            base_offsets: dense.iter().step_by(stride).copied().collect(),
        })
    }
}

impl Record for OffsetIndexRecord {
    fn encode(&self) -> Bytes {
        let mut v = OFFSET_INDEX_MAGIC.to_vec();
        v.push(VERSION);
        v.extend_from_slice(&self.ledger_id.to_le_bytes());
        v.extend_from_slice(&self.entries.to_le_bytes());
        v.extend_from_slice(&self.stride.to_le_bytes());
        v.extend_from_slice(&(self.base_offsets.len() as u32).to_le_bytes());
        let mut prev = 0;
        for b in &self.base_offsets {
            assert!(*b >= prev, "offset index offsets increase");
            put_uvarint(&mut v, b - prev);
            prev = *b;
        }
        debug_assert!(v.len() <= OFFSET_INDEX_RECORD_BYTES_MAX);
        Bytes::from(v)
    }

    fn decode(key: &str, b: &[u8]) -> Result<Self> {
        if b.len() > OFFSET_INDEX_RECORD_BYTES_MAX {
            return Err(corrupt(key, format!("an offset index of {} bytes", b.len())));
        }
        let mut r = Reader::new(key, b);
        check_magic(&mut r, key, OFFSET_INDEX_MAGIC, "offset index record")?;
        let ledger_id = r.u64()?;
        let entries = r.u64()?;
        let stride = r.u32()?;
        let n = r.u32()? as usize;
        if stride == 0 || n as u64 != entries.div_ceil(u64::from(stride)) {
            return Err(corrupt(key, format!("{n} offsets for {entries} entries by {stride}")));
        }
        // Each offset takes at least a byte: a count above what is left is corrupt.
        if n > b.len() {
            return Err(corrupt(key, format!("{n} offsets in {} bytes", b.len())));
        }
        let mut base_offsets = Vec::with_capacity(n);
        let mut prev = 0u64;
        for i in 0..n {
            let mut x = 0u64;
            let mut shift = 0;
            loop {
                let byte = r.u8()?;
                if shift > 63 || (shift == 63 && byte > 1) {
                    return Err(corrupt(key, "offset varint overflows"));
                }
                x |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            if i > 0 && x == 0 {
                return Err(corrupt(key, "offsets do not increase"));
            }
            prev = prev.checked_add(x).ok_or_else(|| corrupt(key, "offset overflows"))?;
            base_offsets.push(prev);
        }
        r.done()?;
        Ok(OffsetIndexRecord { ledger_id, entries, stride, base_offsets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> LogRecord {
        let mut r = LogRecord::new("broker-1");
        let mut a = LedgerInfo::open(7, 0);
        a.entries = 2;
        a.records = 10;
        a.bytes = 100;
        a.close_ms = 5;
        r.ledgers = vec![a, LedgerInfo::open(9, 10)];
        r.properties.insert("k".into(), "v".into());
        r.epochs.begin(0, 0);
        r.epochs.begin(10, 0);
        r
    }

    #[test]
    fn records_round_trip() {
        let r = chain();
        assert_eq!(LogRecord::decode("k", &r.encode()).unwrap(), r);
        let c = CursorRecord { offset: 5, updated_ms: 6 };
        assert_eq!(CursorRecord::decode("k", &c.encode()).unwrap(), c);
        let mut t = TrashRecord::new(3, "log", "retention", 9);
        t.last_error = "é".repeat(800);
        let back = TrashRecord::decode("k", &t.encode()).unwrap();
        assert_eq!(back.last_error.len(), 1000);
    }

    /// A log record of version 1 (before owner epochs) reads as all epoch 0; the next write
    /// is version 2.
    #[test]
    fn a_log_record_without_epochs_reads_as_epoch_zero() {
        let mut r = chain();
        r.epochs = Epochs::default();
        let mut b = r.encode().to_vec();
        assert_eq!(b[3], 2);
        b[3] = 1;
        b.truncate(b.len() - 4); // no epoch count
        let back = LogRecord::decode("k", &b).unwrap();
        assert_eq!((back.epochs.current(), back.epochs.epoch_of(5)), (0, 0));
        assert_eq!(back, r);
        let mut v3 = b.clone();
        v3[3] = 3;
        assert!(LogRecord::decode("k", &v3).unwrap_err().to_string().contains("version 3"));
    }

    #[test]
    fn corrupt_records_are_refused_with_the_key() {
        let b = chain().encode();
        for n in 0..b.len() {
            let e = LogRecord::decode("logs/x", &b[..n]).unwrap_err();
            assert!(e.to_string().contains("logs/x"), "{e}");
        }
        let mut huge = b.to_vec();
        huge[23..27].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(LogRecord::decode("k", &huge).is_err());
    }

    proptest::proptest! {
        /// Records come from the metadata store: arbitrary bytes never panic a decoder
        /// (and a huge count is refused before anything is allocated for it).
        #[test]
        fn decoders_never_panic_on_arbitrary_bytes(b in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = LogRecord::decode("k", &b);
            let _ = CursorRecord::decode("k", &b);
            let _ = TrashRecord::decode("k", &b);
            let _ = OffsetIndexRecord::decode("k", &b);
            let _ = crate::entry::decode(&bytes::Bytes::from(b));
        }

        /// Flipping any byte of a valid log record either fails to decode or decodes to a
        /// record that is itself valid (never a chain with gaps).
        #[test]
        fn a_damaged_log_record_is_refused_or_still_valid(at in 0usize..200, x in 1u8..=255) {
            let mut b = chain().encode().to_vec();
            let at = at % b.len();
            b[at] ^= x;
            if let Ok(r) = LogRecord::decode("k", &b) {
                proptest::prop_assert_eq!(r.validate(), Ok(()));
            }
        }
    }

    /// An offset index keeps every entry while it fits, else every stride-th for the least
    /// power-of-two stride that fits; it round-trips, and damage is refused or decodes to
    /// offsets that still increase.
    #[test]
    fn offset_index_records_fit_their_bound_and_round_trip() {
        let dense: Vec<u64> = (0..5000u64).map(|i| 1_000_000 + i * 300).collect();
        let full = OffsetIndexRecord::from_dense(4, &dense, OFFSET_INDEX_RECORD_BYTES_MAX).unwrap();
        assert_eq!((full.stride, full.base_offsets.len()), (1, 5000));
        assert_eq!(OffsetIndexRecord::decode("k", &full.encode()).unwrap(), full);
        let small = OffsetIndexRecord::from_dense(4, &dense, 2000).unwrap();
        assert!(small.encode().len() <= 2000, "{}", small.encode().len());
        assert!(small.stride > 1 && small.stride.is_power_of_two());
        let half = OffsetIndexRecord::from_dense(4, &dense, 2 * small.encode().len() - 40);
        assert!(half.unwrap().stride <= small.stride);
        for (i, b) in small.base_offsets.iter().enumerate() {
            assert_eq!(*b, dense[i * small.stride as usize]);
        }
        assert_eq!(small.entries, 5000);
        assert_eq!(OffsetIndexRecord::decode("k", &small.encode()).unwrap(), small);
        assert_eq!(OffsetIndexRecord::from_dense(4, &[5, 5], 1000), None, "not increasing");
        assert_eq!(OffsetIndexRecord::from_dense(4, &dense, 10), None, "nothing fits");
        let b = small.encode();
        for n in 0..b.len() {
            assert!(OffsetIndexRecord::decode("k", &b[..n]).is_err(), "cut at {n}");
        }
        for at in 0..b.len() {
            let mut d = b.to_vec();
            d[at] ^= 0x41;
            if let Ok(r) = OffsetIndexRecord::decode("k", &d) {
                assert!(r.base_offsets.windows(2).all(|w| w[0] < w[1]), "damage at {at}");
            }
        }
    }

    #[test]
    fn chain_gaps_are_invalid() {
        let mut r = chain();
        r.ledgers[1].first_offset = 11;
        assert!(r.validate().unwrap_err().0.contains("ends at 10"));
        let mut r = chain();
        r.ledgers[0].close_ms = 0;
        assert!(r.validate().unwrap_err().0.contains("open but not last"));
    }
}
