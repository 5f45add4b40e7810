//! The records inside a v2 record batch, decoded only where Kafka needs a record: a
//! ListOffsets by timestamp answers the first *record* at or after the time, not its
//! batch; a produce to a compacted topic checks that every record has a key; the compactor
//! keeps the newest record per key. Fetch never comes here, nor does a produce to any other
//! topic (batches stay opaque bytes on the hot path).
//!
//! ```text
//! record (after the batch header, or after decompressing what follows it):
//!   length          varint (zigzag)  bytes after this field
//!   attributes      int8             unused
//!   timestampDelta  varlong          from the batch's base timestamp
//!   offsetDelta     varint           from the batch's base offset
//!   keyLength       varint           -1: null
//!   key             bytes
//!   valueLength     varint           -1: null (a tombstone)
//!   value           bytes
//!   headers         count varint, then each header (kept as bytes, up to `length`)
//! ```
//!
//! Codecs are in [`codec`]. Every length read from the batch is checked against what is
//! left: a hostile batch gets an error, never a panic or an allocation by its word.

mod codec;

pub use codec::{compress, decompress, recompressed, with_codec};

use crate::domain::batch::{self, Codec};

/// Why a batch's records could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record batch: {0}")]
pub struct RecordsError(pub String);

fn err(what: impl Into<String>) -> RecordsError {
    RecordsError(what.into())
}

/// `(offset delta, timestamp)` of the first record of `batch` (a whole v2 batch, header
/// included) from offset delta `from` on whose timestamp is at or after `timestamp`; `None`
/// if none is. With LogAppendTime every record has the batch's max timestamp.
pub fn first_at_or_after(
    batch: &[u8],
    from: i32,
    timestamp: i64,
) -> Result<Option<(i32, i64)>, RecordsError> {
    let h = batch::parse_stored(batch).map_err(|e| err(e.to_string()))?;
    if h.is_log_append_time() {
        let hit = h.max_timestamp >= timestamp && from <= h.last_offset_delta;
        return Ok(hit.then_some((from.max(0), h.max_timestamp)));
    }
    let plain = plain_records(batch, &h)?;
    let hit = decode_records(&h, &plain)?
        .into_iter()
        .find(|r| r.timestamp >= timestamp && r.offset_delta >= from)
        .map(|r| (r.offset_delta, r.timestamp));
    Ok(hit)
}

/// One record of a batch, borrowed from the batch's (decompressed) records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub attributes: u8,
    /// Its offset is the batch's base offset plus this.
    pub offset_delta: i32,
    /// The record's timestamp (the batch's max timestamp for LogAppendTime batches).
    pub timestamp: i64,
    /// `None`: a null key (Kafka refuses those on compacted topics).
    pub key: Option<&'a [u8]>,
    /// `None`: a null value, a tombstone on a compacted topic.
    pub value: Option<&'a [u8]>,
    /// The headers as stored: their count, then each header (copied as they are).
    pub headers: &'a [u8],
}

/// The records of `batch` (a whole v2 batch, header included, its CRC checked), decoded
/// from `plain`, what [`records_bytes`] returned for it.
pub fn decode_records<'a>(
    h: &batch::BatchInfo,
    plain: &'a [u8],
) -> Result<Vec<Record<'a>>, RecordsError> {
    let mut records = plain;
    let count = usize::try_from(h.records_count).map_err(|_| err("negative record count"))?;
    // Each record takes at least 7 bytes: a count beyond that is a lie.
    if count > records.len() / 7 + 1 {
        return Err(err(format!("{count} records in {} bytes", records.len())));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let len = varint(&mut records)?;
        let len = usize::try_from(len).map_err(|_| err("negative record length"))?;
        if len > records.len() {
            return Err(err(format!("a record of {len} bytes with {} left", records.len())));
        }
        let (mut r, rest) = records.split_at(len);
        records = rest;
        let attributes = take(&mut r, 1)?[0];
        let ts = h.base_timestamp.saturating_add(varint(&mut r)?);
        let timestamp = if h.is_log_append_time() { h.max_timestamp } else { ts };
        let offset_delta =
            i32::try_from(varint(&mut r)?).map_err(|_| err("offset delta out of range"))?;
        let key = bytes_field(&mut r)?;
        let value = bytes_field(&mut r)?;
        out.push(Record { attributes, offset_delta, timestamp, key, value, headers: r });
    }
    Ok(out)
}

/// What produce checks in every record of a batch (Kafka's log validator, `validate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The broker's time, for CreateTime bounds.
    pub now_ms: i64,
    /// `message.timestamp.type` is CreateTime: record timestamps are the producer's and
    /// must lie within the two bounds below.
    pub create_time: bool,
    /// `message.timestamp.before.max.ms`: how far in the past a record's timestamp may be.
    pub before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far in the future a record's timestamp may be.
    pub after_max_ms: i64,
    /// Every record needs a key (a compacted topic).
    pub keys_required: bool,
}

/// Why `validate` refused a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The records do not decode (a codec stream that does not decompress, or that
    /// decompresses beyond [`DECOMPRESSED_BYTES_MAX`]): Kafka's CORRUPT_MESSAGE.
    Corrupt(String),
    /// Records that do not match the batch header or break a record rule: Kafka's
    /// INVALID_RECORD, or INVALID_TIMESTAMP if any timestamp is out of bounds, with the
    /// indexes of the records at fault (empty: the batch as a whole).
    Records { message: String, records: Vec<i32>, timestamp: bool },
}

impl Refusal {
    fn batch(message: impl Into<String>) -> Refusal {
        Refusal::Records { message: message.into(), records: Vec::new(), timestamp: false }
    }
}

/// Kafka's log validator on one produced batch (`h` its header, CRC checked): the records are
/// walked, decompressed within [`DECOMPRESSED_BYTES_MAX`], and must match the header: as
/// many records as it counts, offset deltas 0, 1, 2..., each record exactly its length, no
/// bytes after the last, and the header's max timestamp the records' own. Each record must
/// be well formed (non-null header keys, no codec bits of its own), carry a key if `rules`
/// require it, and, under CreateTime, a timestamp within the bounds. A producer may not set
/// LogAppendTime itself. The batch is refused whole, with every record at fault named.
pub fn validate(batch: &[u8], h: &batch::BatchInfo, rules: &Rules) -> Result<(), Refusal> {
    if h.is_log_append_time() {
        return Err(Refusal::Records {
            message: "the producer set the LogAppendTime attribute; only the broker sets it".into(),
            records: Vec::new(),
            timestamp: true,
        });
    }
    let plain = plain_records(batch, h).map_err(|e| Refusal::Corrupt(e.0))?;
    let count = usize::try_from(h.records_count).map_err(|_| Refusal::batch("negative count"))?;
    // Each record takes at least 7 bytes: a count beyond that is a lie (and no allocation
    // by it).
    if count > plain.len() / 7 + 1 {
        return Err(Refusal::batch(format!(
            "the header counts {count} records, {} bytes of records hold fewer",
            plain.len()
        )));
    }
    let mut rest: &[u8] = &plain;
    let (mut bad, mut bad_ts) = (Vec::new(), Vec::new());
    let mut first_problem: Option<String> = None;
    let mut max_ts = i64::MIN;
    for i in 0..count {
        let at = i as i32;
        let record = walk_record(&mut rest).map_err(|e| Refusal::Records {
            message: format!("record {i}: {}", e.0),
            records: vec![at],
            timestamp: false,
        })?;
        let mut problem = |what: String, list: &mut Vec<i32>| {
            list.push(at);
            first_problem.get_or_insert(format!("record {i}: {what}"));
        };
        if record.offset_delta != i64::from(at) {
            problem(
                format!("offset delta {} (records are numbered from 0)", record.offset_delta),
                &mut bad,
            );
        }
        if record.attributes & 7 != 0 {
            problem(
                format!("attributes {:#04x} set a codec on a record", record.attributes),
                &mut bad,
            );
        }
        if rules.keys_required && record.key_null {
            problem("a compacted topic cannot accept a record without a key".into(), &mut bad);
        }
        let ts = h.base_timestamp.saturating_add(record.timestamp_delta);
        max_ts = max_ts.max(ts);
        if rules.create_time && ts != -1 {
            if rules.now_ms.saturating_sub(ts) > rules.before_max_ms {
                problem(
                    format!(
                        "timestamp {ts} is more than message.timestamp.before.max.ms={} before the broker's {}",
                        rules.before_max_ms, rules.now_ms
                    ),
                    &mut bad_ts,
                );
            } else if ts.saturating_sub(rules.now_ms) > rules.after_max_ms {
                problem(
                    format!(
                        "timestamp {ts} is more than message.timestamp.after.max.ms={} after the broker's {}",
                        rules.after_max_ms, rules.now_ms
                    ),
                    &mut bad_ts,
                );
            }
        }
    }
    if !rest.is_empty() {
        return Err(Refusal::batch(format!(
            "{} bytes follow the {count} records the header counts",
            rest.len()
        )));
    }
    if !bad.is_empty() || !bad_ts.is_empty() {
        let timestamp = !bad_ts.is_empty();
        let mut records = bad;
        records.extend(bad_ts);
        records.sort_unstable();
        records.dedup();
        let n = records.len();
        let first = first_problem.unwrap_or_default();
        return Err(Refusal::Records {
            message: format!("{n} of the batch's {count} records refused; {first}"),
            records,
            timestamp,
        });
    }
    if count > 0 && max_ts != h.max_timestamp {
        return Err(Refusal::batch(format!(
            "the header's max timestamp {} is not its records' ({max_ts})",
            h.max_timestamp
        )));
    }
    Ok(())
}

/// One record as `validate` walks it.
#[derive(Debug, Clone, Copy)]
struct Walked {
    attributes: u8,
    timestamp_delta: i64,
    offset_delta: i64,
    key_null: bool,
}

/// Reads one length-prefixed record strictly: every field within the record's length, the
/// headers counted and each with a key, and nothing left over.
fn walk_record(b: &mut &[u8]) -> Result<Walked, RecordsError> {
    let len = usize::try_from(varint(b)?).map_err(|_| err("a negative record length"))?;
    if len > b.len() {
        return Err(err(format!("a record of {len} bytes with {} left", b.len())));
    }
    let (mut r, rest) = b.split_at(len);
    *b = rest;
    let attributes = take(&mut r, 1)?[0];
    let timestamp_delta = varint(&mut r)?;
    let offset_delta = varint(&mut r)?;
    let key_null = bytes_field(&mut r)?.is_none();
    bytes_field(&mut r)?;
    let headers = varint(&mut r)?;
    let headers = usize::try_from(headers).map_err(|_| err("a negative header count"))?;
    // Each header takes at least 2 bytes.
    if headers > r.len() / 2 {
        return Err(err(format!("{headers} headers in {} bytes", r.len())));
    }
    for h in 0..headers {
        if bytes_field(&mut r)?.is_none() {
            return Err(err(format!("header {h} has a null key")));
        }
        bytes_field(&mut r)?;
    }
    if !r.is_empty() {
        return Err(err(format!("{} bytes after the record's fields", r.len())));
    }
    Ok(Walked { attributes, timestamp_delta, offset_delta, key_null })
}

/// The records part of `batch` (after its header), decompressed if it is compressed.
pub fn records_bytes(
    batch: &[u8],
) -> Result<(batch::BatchInfo, std::borrow::Cow<'_, [u8]>), RecordsError> {
    let h = batch::parse_stored(batch).map_err(|e| err(e.to_string()))?;
    let plain = plain_records(batch, &h)?;
    Ok((h, plain))
}

/// The records of `batch`, whose header `parse_stored` gave as `h`, decompressed.
pub(crate) fn plain_records<'a>(
    batch: &'a [u8],
    h: &batch::BatchInfo,
) -> Result<std::borrow::Cow<'a, [u8]>, RecordsError> {
    let body = &batch[batch::HEADER_BYTES..h.size];
    Ok(match h.codec().map_err(|e| err(e.to_string()))? {
        Codec::None => std::borrow::Cow::Borrowed(body),
        codec => std::borrow::Cow::Owned(decompress(codec, body)?),
    })
}

/// A varint length and that many bytes; -1 is null.
fn bytes_field<'a>(b: &mut &'a [u8]) -> Result<Option<&'a [u8]>, RecordsError> {
    let len = varint(b)?;
    if len < 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| err("field length out of range"))?;
    Ok(Some(take(b, len)?))
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], RecordsError> {
    if b.len() < n {
        return Err(err("a record ends early"));
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

/// A zigzag varint (up to 64 bits, at most 10 bytes).
fn varint(b: &mut &[u8]) -> Result<i64, RecordsError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let byte = take(b, 1)?[0];
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
        }
    }
    Err(err("a varint longer than 10 bytes"))
}

#[cfg(test)]
mod tests {
    use super::codec::XERIAL_MAGIC;
    use crate::limits::DECOMPRESSED_BYTES_MAX;
    use std::io::Write;

    use super::*;

    fn put_varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    /// Records with timestamps `base_ts + deltas[i]`, each value `v<i>`.
    fn records(deltas: &[i64]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, d) in deltas.iter().enumerate() {
            let mut r = vec![0u8];
            put_varint(&mut r, *d);
            put_varint(&mut r, i as i64);
            put_varint(&mut r, -1); // no key
            let value = format!("v{i}");
            put_varint(&mut r, value.len() as i64);
            r.extend_from_slice(value.as_bytes());
            put_varint(&mut r, 0); // no headers
            put_varint(&mut out, r.len() as i64);
            out.extend_from_slice(&r);
        }
        out
    }

    fn compress(codec: u8, plain: &[u8]) -> Vec<u8> {
        match codec {
            0 => plain.to_vec(),
            1 => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(plain).unwrap();
                e.finish().unwrap()
            }
            2 => snap::raw::Encoder::new().compress_vec(plain).unwrap(),
            3 => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(plain).unwrap();
                e.finish().unwrap()
            }
            _ => {
                let mut out = Vec::new();
                let level = ruzstd::encoding::CompressionLevel::Fastest;
                ruzstd::encoding::compress(plain, &mut out, level);
                out
            }
        }
    }

    fn batch(attributes: i16, base_ts: i64, count: usize, body: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((49 + body.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]); // CRC, below
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&(count as i32 - 1).to_be_bytes());
        b.extend_from_slice(&base_ts.to_be_bytes());
        b.extend_from_slice(&(base_ts + 1000).to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&(count as i32).to_be_bytes());
        b.extend_from_slice(body);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn every_codec_resolves_a_time_to_its_record() {
        let deltas: Vec<i64> = (0..10).map(|i| i * 10).collect();
        let plain = records(&deltas);
        for codec in 0..=4u8 {
            let b = batch(codec as i16, 1000, 10, &compress(codec, &plain));
            let at = |from, ts| first_at_or_after(&b, from, ts).unwrap();
            assert_eq!(at(0, 1035), Some((4, 1040)), "codec {codec}");
            assert_eq!(at(0, 0), Some((0, 1000)), "codec {codec}");
            assert_eq!(at(0, 1090), Some((9, 1090)), "codec {codec}");
            assert_eq!(at(0, 1091), None, "codec {codec}");
            assert_eq!(at(6, 1005), Some((6, 1060)), "codec {codec}: from a later start");
        }
        // Out-of-order timestamps: the first record (in offset order) at or after the time.
        let b = batch(0, 1000, 3, &records(&[50, 10, 60]));
        assert_eq!(first_at_or_after(&b, 0, 1020).unwrap(), Some((0, 1050)));
        // LogAppendTime: every record has the batch's max timestamp.
        let b = batch(1 << 3, 1000, 10, &plain);
        assert_eq!(first_at_or_after(&b, 0, 1500).unwrap(), Some((0, 2000)));
        assert_eq!(first_at_or_after(&b, 0, 2001).unwrap(), None);
    }

    #[test]
    fn xerial_framed_snappy_from_java_clients_decodes() {
        let plain = records(&[0, 5, 9]);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        // Two blocks, the second starting inside a record: blocks are a byte stream.
        for part in [&plain[..7], &plain[7..]] {
            let block = snap::raw::Encoder::new().compress_vec(part).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        let b = batch(2, 1000, 3, &framed);
        assert_eq!(first_at_or_after(&b, 0, 1004).unwrap(), Some((1, 1005)));
    }

    #[test]
    fn hostile_batches_get_errors_never_panics_or_huge_allocations() {
        let plain = records(&[0, 1, 2]);
        // Every truncation of the records, and a count above what is there.
        for cut in 0..plain.len() {
            let b = batch(0, 0, 3, &plain[..cut]);
            assert!(first_at_or_after(&b, 0, 5).is_err(), "cut at {cut}");
        }
        // A record length of i64::MAX and one of -1.
        for len in [i64::MAX, -1] {
            let mut body = Vec::new();
            put_varint(&mut body, len);
            body.extend_from_slice(&[0; 8]);
            assert!(first_at_or_after(&batch(0, 0, 1, &body), 0, 5).is_err());
        }
        // Garbage in every codec.
        for codec in 1..=4 {
            let b = batch(codec, 0, 1, &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
            assert!(first_at_or_after(&b, 0, 5).is_err(), "codec {codec}");
        }
        // A gzip bomb: 65 MiB of zeros decompress beyond DECOMPRESSED_BYTES_MAX.
        let zeros = vec![0u8; DECOMPRESSED_BYTES_MAX + 1024 * 1024];
        let b = batch(1, 0, 1, &compress(1, &zeros));
        let e = first_at_or_after(&b, 0, 5).unwrap_err();
        assert!(e.0.contains("DECOMPRESSED_BYTES_MAX"), "{e}");
    }

    /// Rules for a CreateTime topic at time 10 000, timestamps within ±1 000.
    fn rules() -> Rules {
        Rules {
            now_ms: 10_000,
            create_time: true,
            before_max_ms: 1_000,
            after_max_ms: 1_000,
            keys_required: false,
        }
    }

    fn check(b: &[u8], r: &Rules) -> Result<(), Refusal> {
        let h = crate::domain::batch::parse(b).map_err(|e| Refusal::Corrupt(e.to_string()))?;
        validate(b, &h, r)
    }

    /// `records` (already encoded) in a batch whose header says `count`, `last_delta`,
    /// timestamps `base_ts`/`max_ts`, with a valid CRC.
    fn forged(records: &[u8], count: i32, last_delta: i32, base_ts: i64, max_ts: i64) -> Vec<u8> {
        let info = crate::domain::batch::BatchInfo {
            size: 0,
            attributes: 0,
            last_offset_delta: last_delta,
            base_timestamp: base_ts,
            max_timestamp: max_ts,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: count,
        };
        crate::domain::batch::encode(0, &info, records)
    }

    fn record(offset_delta: i64, ts_delta: i64, key: Option<&[u8]>) -> Vec<u8> {
        let mut out = Vec::new();
        let r = crate::domain::batch::Record {
            offset_delta,
            timestamp_delta: ts_delta,
            key,
            value: Some(b"v"),
            ..Default::default()
        };
        crate::domain::batch::put_record(&mut out, &r);
        out
    }

    /// #44 item 5: the batches that moved a partition's end by 2^31 (a header counting
    /// i32::MAX records over one real record, 75 bytes, valid CRC; a 61-byte header with no
    /// records at all) and every other mismatch between header and records are refused.
    #[test]
    fn validation_refuses_headers_that_lie_about_their_records() {
        let one = record(0, 0, None);
        let max = i32::MAX;
        let huge = forged(&one, max, max - 1, 10_000, 10_000);
        assert!(huge.len() < 80, "one real record: {} bytes", huge.len());
        let e = check(&huge, &rules()).unwrap_err();
        assert!(
            matches!(&e, Refusal::Records { message, .. } if message.contains("counts")),
            "{e:?}"
        );
        let empty = forged(&[], 5, 4, 10_000, 10_000);
        assert_eq!(empty.len(), 61);
        assert!(matches!(check(&empty, &rules()), Err(Refusal::Records { .. })));
        // Fewer records than counted, more than counted, bytes after the last.
        let two: Vec<u8> = [record(0, 0, None), record(1, 0, None)].concat();
        assert!(check(&forged(&two, 3, 2, 10_000, 10_000), &rules()).is_err());
        assert!(check(&forged(&two, 1, 0, 10_000, 10_000), &rules()).is_err());
        let mut trailing = two.clone();
        trailing.push(0);
        assert!(check(&forged(&trailing, 2, 1, 10_000, 10_000), &rules()).is_err());
        // Offset deltas not 0, 1: the second record is named.
        let skewed: Vec<u8> = [record(0, 0, None), record(5, 0, None)].concat();
        let e = check(&forged(&skewed, 2, 1, 10_000, 10_000), &rules()).unwrap_err();
        assert!(
            matches!(&e, Refusal::Records { records, timestamp: false, .. } if records == &vec![1]),
            "{e:?}"
        );
        // A max timestamp the records do not have.
        let e = check(&forged(&two, 2, 1, 10_000, 10_500), &rules()).unwrap_err();
        assert!(
            matches!(&e, Refusal::Records { message, .. } if message.contains("max timestamp")),
            "{e:?}"
        );
        // A record whose length hides bytes after its fields.
        let mut padded = vec![0u8, 0, 0, 1, 0, 0, 0];
        let mut framed = Vec::new();
        crate::domain::batch::put_varint(&mut framed, padded.len() as i64);
        framed.append(&mut padded);
        assert!(check(&forged(&framed, 1, 0, 10_000, 10_000), &rules()).is_err());
        // A well-formed batch passes.
        check(&forged(&two, 2, 1, 10_000, 10_000), &rules()).unwrap();
    }

    /// #44 item 5: CreateTime bounds (INVALID_TIMESTAMP, each record named), keys on a
    /// compacted topic, a producer-set LogAppendTime, and every codec's batch walked.
    #[test]
    fn validation_checks_timestamps_keys_and_compressed_records() {
        let recs: Vec<u8> =
            [record(0, -2_000, Some(b"k")), record(1, 0, None), record(2, 1_500, Some(b"k"))]
                .concat();
        let b = forged(&recs, 3, 2, 10_000, 11_500);
        let e = check(&b, &rules()).unwrap_err();
        assert!(
            matches!(&e, Refusal::Records { records, timestamp: true, .. } if records == &vec![0, 2]),
            "{e:?}"
        );
        let wide = Rules { before_max_ms: i64::MAX, after_max_ms: 3_600_000, ..rules() };
        check(&b, &wide).unwrap();
        // LogAppendTime topics do not bound the producer's timestamps (the broker's replace them).
        check(&b, &Rules { create_time: false, ..rules() }).unwrap();
        let e = check(&b, &Rules { keys_required: true, ..wide }).unwrap_err();
        assert!(
            matches!(&e, Refusal::Records { records, timestamp: false, .. } if records == &vec![1]),
            "{e:?}"
        );
        let mut lat = b.clone();
        crate::domain::batch::set_log_append_time(&mut lat, 10_000);
        assert!(matches!(check(&lat, &wide), Err(Refusal::Records { timestamp: true, .. })));
        // Every codec: a good batch passes, one with a lying count does not, garbage is corrupt.
        let plain = crate::domain::batch::build(20, 10_000, 0, |i| vec![b'x'; i as usize]);
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let c = with_codec(&plain, codec).unwrap();
            check(&c, &rules()).unwrap_or_else(|e| panic!("{codec:?}: {e:?}"));
            let info = crate::domain::batch::parse(&c).unwrap();
            let body = &c[crate::domain::batch::HEADER_BYTES..];
            let lying = crate::domain::batch::encode(
                0,
                &crate::domain::batch::BatchInfo {
                    records_count: 21,
                    last_offset_delta: 20,
                    ..info
                },
                body,
            );
            assert!(check(&lying, &rules()).is_err(), "{codec:?}");
            let junk = crate::domain::batch::encode(0, &info, &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]);
            assert!(matches!(check(&junk, &rules()), Err(Refusal::Corrupt(_))), "{codec:?}");
        }
        // A bomb decompresses no further than the budget.
        let zeros = vec![0u8; DECOMPRESSED_BYTES_MAX + 1024];
        let bomb = batch(1, 10_000, 1, &compress(1, &zeros));
        assert!(
            matches!(check(&bomb, &rules()), Err(Refusal::Corrupt(e)) if e.contains("DECOMPRESSED_BYTES_MAX"))
        );
    }
}
