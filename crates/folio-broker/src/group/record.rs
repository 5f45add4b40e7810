//! The committed-offset record (its layout is in the parent module's doc) and the escaping
//! that makes a group id one key segment.

use bytes::Bytes;
use folio_meta::records::{Reader, Record, corrupt, put_string};

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRecord {
    pub offset: i64,
    pub leader_epoch: i32,
    pub commit_ms: u64,
    pub metadata: String,
}

const OFFSET_MAGIC: &[u8; 3] = b"FGO";

impl Record for OffsetRecord {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(32 + self.metadata.len());
        v.extend_from_slice(OFFSET_MAGIC);
        v.push(1);
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.leader_epoch.to_le_bytes());
        v.extend_from_slice(&self.commit_ms.to_le_bytes());
        put_string(&mut v, &self.metadata);
        v.into()
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(3)? != OFFSET_MAGIC || r.u8()? != 1 {
            return Err(corrupt(key, "not a committed-offset record"));
        }
        let offset = r.u64()? as i64;
        let leader_epoch = r.u32()? as i32;
        let commit_ms = r.u64()?;
        let metadata = r.string()?;
        r.done()?;
        Ok(OffsetRecord { offset, leader_epoch, commit_ms, metadata })
    }
}

/// `/` and `%` escaped, so a group id is one key segment.
pub(super) fn escape(group: &str) -> String {
    group.replace('%', "%25").replace('/', "%2F")
}

pub(super) fn unescape(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_records_round_trip_and_group_ids_escape() {
        let r = OffsetRecord { offset: 42, leader_epoch: -1, commit_ms: 7, metadata: "m".into() };
        assert_eq!(OffsetRecord::decode("k", &r.encode()).unwrap(), r);
        assert!(OffsetRecord::decode("k", &r.encode()[..10]).is_err());
        for g in ["a/b", "100%", "%2F", "plain"] {
            assert_eq!(unescape(&escape(g)), g);
            assert!(!escape(g).contains('/'));
        }
    }
}
