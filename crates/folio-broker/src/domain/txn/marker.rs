//! Transaction markers: the control batch a transaction's end leaves in each of its
//! partitions (Kafka's `EndTransactionMarker`).
//!
//! ```text
//! batch     attributes: transactional (bit 4) | control (bit 5); the transaction's
//!           producer id and epoch; base sequence -1; one record
//! key       version i16 = 0, type i16 (0 ABORT, 1 COMMIT)
//! value     version i16 = 0, coordinator epoch i32
//! ```
//! Big-endian, as every Kafka field.

use super::super::batch::{self, BatchInfo, Record};

const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// The marker batch ending `producer_id`'s transaction at `epoch` (base offset 0: the log
/// assigns it), at time `now_ms`.
pub fn encode(
    producer_id: i64,
    epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
    now_ms: i64,
) -> Vec<u8> {
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&0i16.to_be_bytes());
    key.extend_from_slice(&i16::from(commit).to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&0i16.to_be_bytes());
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let mut records = Vec::new();
    batch::put_record(
        &mut records,
        &Record { key: Some(&key), value: Some(&value), ..Record::default() },
    );
    let info = BatchInfo {
        size: batch::HEADER_BYTES + records.len(),
        attributes: TRANSACTIONAL_BIT | CONTROL_BIT,
        last_offset_delta: 0,
        base_timestamp: now_ms,
        max_timestamp: now_ms,
        producer_id,
        producer_epoch: epoch,
        base_sequence: -1,
        records_count: 1,
    };
    batch::encode(0, &info, &records)
}

/// Whether the control batch `b` (its header `info`) is a commit (`Some(true)`) or an
/// abort (`Some(false)`) marker; `None` for another control record (Kafka's KRaft types)
/// or one that does not decode.
pub fn kind(b: &[u8], info: &BatchInfo) -> Option<bool> {
    if !info.is_control() {
        return None;
    }
    let (header, plain) = crate::domain::records::records_bytes(b).ok()?;
    let records = crate::domain::records::decode_records(&header, &plain).ok()?;
    let key = records.first()?.key?;
    if key.len() < 4 || key[..2] != [0, 0] {
        return None;
    }
    match i16::from_be_bytes([key[2], key[3]]) {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_a_control_batch_that_says_what_it_ends() {
        for commit in [true, false] {
            let b = encode(42, 7, commit, 3, 1_700_000_000_000);
            let info = batch::parse(&b).unwrap();
            assert!(info.is_control() && info.is_transactional());
            assert_eq!((info.producer_id, info.producer_epoch, info.base_sequence), (42, 7, -1));
            assert_eq!(kind(&b, &info), Some(commit));
        }
        let data = batch::build(1, 0, 0, |_| b"x".to_vec());
        assert_eq!(kind(&data, &batch::parse(&data).unwrap()), None);
    }
}
