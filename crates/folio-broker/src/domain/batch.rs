//! Kafka record batches (magic 2) as opaque bytes: the broker reads the 61-byte header,
//! checks the CRC, and patches the offsets; produce and fetch never decode records (so
//! duplicate header keys, compression and any record layout pass through untouched). Only
//! a ListOffsets by timestamp reads the records of the one batch it lands in (`records`).
//!
//! ```text
//! offset  size  field
//!      0     8  base offset            (patched on fetch: the log assigns offsets)
//!      8     4  length                 (bytes after this field)
//!     12     4  partition leader epoch (patched on fetch: the epoch of its last offset)
//!     16     1  magic = 2
//!     17     4  CRC-32C of bytes 21..end
//!     21     2  attributes             (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control)
//!     23     4  last offset delta
//!     27     8  base timestamp
//!     35     8  max timestamp          (rewritten with the CRC for LogAppendTime topics)
//!     43     8  producer id
//!     51     2  producer epoch
//!     53     4  base sequence
//!     57     4  records count
//!     61        records
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use folio_log::Epochs;

/// Bytes of a record batch's header (v2), up to and including the record count.
pub const HEADER_BYTES: usize = 61;
/// Bytes before the length field ends: base offset (8) + length (4).
pub const LOG_OVERHEAD: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORDS_COUNT_AT: usize = 57;

/// Attribute bit 3: the batch's timestamps are the broker's (LogAppendTime).
pub const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// Compression codecs (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// Why a batch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Not a well-formed v2 batch or a CRC mismatch: Kafka's CORRUPT_MESSAGE.
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// Well-formed but not acceptable: Kafka's INVALID_RECORD.
    #[error("invalid record batch: {0}")]
    Invalid(String),
}

/// The header fields of one batch the broker cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Bytes of the whole batch, base offset and length fields included.
    pub size: usize,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl Codec {
    /// The codec's attribute bits (0-2).
    pub fn bits(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }

    /// The codec's name in Kafka's configs (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "uncompressed",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

impl BatchInfo {
    /// The batch's compression codec, from its attributes.
    pub fn codec(&self) -> Result<Codec, BatchError> {
        match self.attributes & 7 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            c => Err(BatchError::Corrupt(format!("unknown compression codec {c}"))),
        }
    }
    /// Whether the batch's timestamps are the broker's (LogAppendTime): every record
    /// then has the batch's max timestamp.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }
    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    /// Whether the batch is a control batch (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    /// Offsets the batch takes in the log.
    pub fn offsets(&self) -> u32 {
        self.last_offset_delta as u32 + 1
    }
    /// From an idempotent producer (it numbers its batches).
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }
    /// The sequence number of the batch's last record (sequences wrap at i32::MAX).
    pub fn last_sequence(&self) -> i32 {
        ((self.base_sequence as i64 + self.last_offset_delta as i64) % (i32::MAX as i64 + 1)) as i32
    }
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads and checks the batch at the start of `b`: magic 2, a length inside `b`, the CRC,
/// a known codec, and offsets that match the record count.
pub fn parse(b: &[u8]) -> Result<BatchInfo, BatchError> {
    let info = parse_stored(b)?;
    if i64::from(info.last_offset_delta) + 1 != i64::from(info.records_count) {
        return Err(BatchError::Invalid(format!(
            "last offset delta {} does not match the record count {}",
            info.last_offset_delta, info.records_count
        )));
    }
    Ok(info)
}

/// `parse` for a batch as the log may hold it: a compacted batch keeps fewer records than
/// its offsets (its last offset delta is above its record count less one).
pub fn parse_stored(b: &[u8]) -> Result<BatchInfo, BatchError> {
    let info = read_header(b)?;
    let stored = u32::from_be_bytes(b[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&b[ATTRIBUTES_AT..info.size]);
    if stored != computed {
        return Err(BatchError::Corrupt(format!(
            "CRC mismatch: batch says {stored:#010x}, bytes give {computed:#010x}"
        )));
    }
    info.codec()?;
    if info.records_count <= 0 || info.last_offset_delta < 0 {
        return Err(BatchError::Invalid(format!(
            "a batch holds at least one record (count {}, last offset delta {})",
            info.records_count, info.last_offset_delta
        )));
    }
    if info.last_offset_delta < info.records_count - 1 {
        return Err(BatchError::Invalid(format!(
            "last offset delta {} is below the record count {} less one",
            info.last_offset_delta, info.records_count
        )));
    }
    Ok(info)
}

/// The header fields of the batch at the start of `b`, checking only its magic and that
/// its length fits: for batches read back from the log, which `parse` checked on produce.
pub fn read_header(b: &[u8]) -> Result<BatchInfo, BatchError> {
    if b.len() < HEADER_BYTES {
        return Err(BatchError::Corrupt(format!(
            "{} bytes is shorter than a batch header ({HEADER_BYTES})",
            b.len()
        )));
    }
    let magic = b[MAGIC_AT] as i8;
    if magic != 2 {
        return Err(BatchError::Corrupt(format!(
            "message format v{magic} is not supported (only record batches, magic 2)"
        )));
    }
    let length = i32_at(b, 8);
    let size = (length as i64) + LOG_OVERHEAD as i64;
    if size < HEADER_BYTES as i64 || size > b.len() as i64 {
        return Err(BatchError::Corrupt(format!(
            "batch length {length} does not fit the {} bytes received",
            b.len()
        )));
    }
    Ok(BatchInfo {
        size: size as usize,
        attributes: i16_at(b, ATTRIBUTES_AT),
        last_offset_delta: i32_at(b, LAST_OFFSET_DELTA_AT),
        base_timestamp: i64_at(b, BASE_TIMESTAMP_AT),
        max_timestamp: i64_at(b, MAX_TIMESTAMP_AT),
        producer_id: i64_at(b, PRODUCER_ID_AT),
        producer_epoch: i16_at(b, PRODUCER_EPOCH_AT),
        base_sequence: i32_at(b, BASE_SEQUENCE_AT),
        records_count: i32_at(b, RECORDS_COUNT_AT),
    })
}

/// Splits a produce request's records into batches, each checked by `parse`. At most
/// `max_batches` (a limit on work per request).
pub fn split(b: &Bytes, max_batches: usize) -> Result<Vec<(BatchInfo, Bytes)>, BatchError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        if out.len() == max_batches {
            return Err(BatchError::Invalid(format!("more than {max_batches} batches")));
        }
        let info = parse(&b[at..])?;
        out.push((info, b.slice(at..at + info.size)));
        at += info.size;
    }
    if out.is_empty() {
        return Err(BatchError::Corrupt("no record batch".into()));
    }
    Ok(out)
}

/// Marks the batch as timestamped by the log at `now_ms` (LogAppendTime): sets the
/// timestamp-type bit, the max timestamp, and a new CRC.
pub fn set_log_append_time(b: &mut [u8], now_ms: i64) {
    assert!(b.len() >= HEADER_BYTES, "a parsed batch");
    let attributes = i16_at(b, ATTRIBUTES_AT) | TIMESTAMP_TYPE_BIT;
    b[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    b[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Appends `batch` to `out` as a fetch returns it: with its base offset and partition
/// leader epoch (neither covered by the CRC). The epoch is that of the batch's last offset:
/// a compacted batch's base offset may have moved down into an earlier epoch to cover the
/// gap before it (`compaction`), and a consumer's position after it must lie within the
/// epoch it is told, or OffsetForLeaderEpoch would answer an end below that position.
pub fn put_for_fetch(out: &mut BytesMut, batch: &[u8], base_offset: u64, epochs: &Epochs) {
    assert!(batch.len() >= HEADER_BYTES, "stored batches were parsed on produce");
    let delta = i32_at(batch, LAST_OFFSET_DELTA_AT).max(0) as u64;
    let epoch = epochs.epoch_of(base_offset.saturating_add(delta));
    out.reserve(batch.len());
    out.put_i64(base_offset as i64);
    out.put_slice(&batch[8..12]);
    out.put_i32(epoch as i32);
    out.put_slice(&batch[16..]);
}

/// Appends `x` as a zigzag varint (Kafka's record fields).
pub fn put_varint(v: &mut Vec<u8>, x: i64) {
    let mut z = ((x << 1) ^ (x >> 63)) as u64;
    while z >= 0x80 {
        v.push((z as u8) | 0x80);
        z >>= 7;
    }
    v.push(z as u8);
}

/// One record as `put_record` writes it: deltas from its batch's base timestamp and offset,
/// a null key or value as `None`, and its headers as stored (count, then each header).
#[derive(Debug, Clone, Copy, Default)]
pub struct Record<'a> {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Empty: no headers (a count of 0 is written).
    pub headers: &'a [u8],
}

/// Appends `r` to a batch's records, length-prefixed (Kafka's record format; see
/// `records.rs`).
pub fn put_record(out: &mut Vec<u8>, r: &Record<'_>) {
    let field = |b: &mut Vec<u8>, f: Option<&[u8]>| match f {
        Some(f) => {
            put_varint(b, f.len() as i64);
            b.extend_from_slice(f);
        }
        None => put_varint(b, -1),
    };
    let mut b = vec![r.attributes];
    put_varint(&mut b, r.timestamp_delta);
    put_varint(&mut b, r.offset_delta);
    field(&mut b, r.key);
    field(&mut b, r.value);
    if r.headers.is_empty() {
        put_varint(&mut b, 0);
    } else {
        b.extend_from_slice(r.headers);
    }
    put_varint(out, b.len() as i64);
    out.extend_from_slice(&b);
}

/// A v2 batch at `base_offset` with `info`'s header fields (its size taken from `records`)
/// and `records` (already compressed as `info.attributes` says), partition leader epoch
/// 0, and its CRC.
pub fn encode(base_offset: u64, info: &BatchInfo, records: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_BYTES + records.len());
    b.extend_from_slice(&(base_offset as i64).to_be_bytes());
    b.extend_from_slice(&((HEADER_BYTES - LOG_OVERHEAD + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&info.attributes.to_be_bytes());
    b.extend_from_slice(&info.last_offset_delta.to_be_bytes());
    b.extend_from_slice(&info.base_timestamp.to_be_bytes());
    b.extend_from_slice(&info.max_timestamp.to_be_bytes());
    b.extend_from_slice(&info.producer_id.to_be_bytes());
    b.extend_from_slice(&info.producer_epoch.to_be_bytes());
    b.extend_from_slice(&info.base_sequence.to_be_bytes());
    b.extend_from_slice(&info.records_count.to_be_bytes());
    b.extend_from_slice(records);
    let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
    b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A v2 record batch of `count` uncompressed records whose values `value(i)` gives (no
/// keys, no headers), base offset 0, timestamps `ts`, producer id -1. For tests and
/// benchmarks.
pub fn build(count: i32, ts: i64, attributes: i16, value: impl Fn(i32) -> Vec<u8>) -> Vec<u8> {
    build_keyed(count, ts, attributes, |i| (None, Some(value(i))))
}

/// `build` with a key and a value (either may be null) per record.
pub fn build_keyed(
    count: i32,
    ts: i64,
    attributes: i16,
    record: impl Fn(i32) -> (Option<Vec<u8>>, Option<Vec<u8>>),
) -> Vec<u8> {
    let mut records = Vec::new();
    for i in 0..count {
        let (key, value) = record(i);
        let r = Record { timestamp_delta: 0, offset_delta: i64::from(i), ..Record::default() };
        put_record(&mut records, &Record { key: key.as_deref(), value: value.as_deref(), ..r });
    }
    let info = BatchInfo {
        size: HEADER_BYTES + records.len(),
        attributes,
        last_offset_delta: count - 1,
        base_timestamp: ts,
        max_timestamp: ts,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: count,
    };
    encode(0, &info, &records)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A v2 batch of `count` uncompressed records with values `value`.
    pub fn batch(count: i32, value: &[u8], timestamp: i64) -> Vec<u8> {
        build(count, timestamp, 0, |_| value.to_vec())
    }

    #[test]
    fn parses_a_batch_and_refuses_every_corruption() {
        let b = batch(3, b"hello", 1_700_000_000_000);
        let info = parse(&b).unwrap();
        assert_eq!(info.size, b.len());
        assert_eq!(info.records_count, 3);
        assert_eq!(info.offsets(), 3);
        assert_eq!(info.max_timestamp, 1_700_000_000_000);
        assert_eq!(info.codec().unwrap(), Codec::None);
        // Any flipped byte the CRC covers, a wrong magic, or a truncation is refused.
        for i in MAGIC_AT..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(parse(&c).is_err(), "flipping byte {i} went unnoticed");
        }
        for n in 0..b.len() {
            assert!(matches!(parse(&b[..n]), Err(BatchError::Corrupt(_))), "truncated to {n}");
        }
        // Base offset and leader epoch are outside the CRC.
        let mut c = b.clone();
        c[0..8].copy_from_slice(&77i64.to_be_bytes());
        c[12..16].copy_from_slice(&5i32.to_be_bytes());
        assert!(parse(&c).is_ok());
    }

    #[test]
    fn split_reads_concatenated_batches_and_caps_their_number() {
        let mut all = batch(2, b"a", 1);
        all.extend(batch(5, b"bb", 2));
        let all = Bytes::from(all);
        let parts = split(&all, 10).unwrap();
        assert_eq!(parts.iter().map(|(i, _)| i.records_count).collect::<Vec<_>>(), vec![2, 5]);
        assert_eq!(parts[1].1.len(), parts[1].0.size);
        assert!(matches!(split(&all, 1), Err(BatchError::Invalid(_))));
        assert!(matches!(split(&Bytes::new(), 10), Err(BatchError::Corrupt(_))));
        // Trailing garbage after a good batch is refused, not ignored.
        let mut bad = all.to_vec();
        bad.extend_from_slice(&[1, 2, 3]);
        assert!(split(&Bytes::from(bad), 10).is_err());
    }

    #[test]
    fn mismatched_counts_are_invalid() {
        let mut b = batch(3, b"x", 1);
        b[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4].copy_from_slice(&5i32.to_be_bytes());
        let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(parse(&b), Err(BatchError::Invalid(_))));
    }

    #[test]
    fn log_append_time_rewrites_the_timestamp_with_a_valid_crc() {
        let mut b = batch(2, b"v", 1000);
        set_log_append_time(&mut b, 99_000);
        let info = parse(&b).unwrap();
        assert_eq!(info.max_timestamp, 99_000);
        assert_ne!(info.attributes & TIMESTAMP_TYPE_BIT, 0);
    }

    /// Base offset and leader epoch are patched, nothing else; the epoch is the one the
    /// batch's last offset was appended in (a compacted batch may start in an older one).
    #[test]
    fn fetch_patches_base_offset_and_epoch_only() {
        let b = batch(2, b"v", 1000); // offsets 42 and 43
        let mut epochs = Epochs::default();
        epochs.begin(0, 0);
        epochs.begin(43, 0);
        for (base, epoch) in [(42, 2), (41, 1), (0, 1), (100, 2)] {
            let mut out = BytesMut::new();
            put_for_fetch(&mut out, &b, base, &epochs);
            assert_eq!(i64_at(&out, 0), base as i64);
            assert_eq!(i32_at(&out, 12), epoch, "batch at {base}");
            assert_eq!(&out[16..], &b[16..]);
            assert_eq!(parse(&out).unwrap(), parse(&b).unwrap());
        }
    }
}
