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
    /// When it expires (clock ms), if its commit said (OffsetCommit v2-4's retention);
    /// else `offsets.retention.minutes` decides.
    pub expire_ms: Option<u64>,
}

const OFFSET_MAGIC: &[u8; 3] = b"FGO";

impl Record for OffsetRecord {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(32 + self.metadata.len());
        v.extend_from_slice(OFFSET_MAGIC);
        v.push(if self.expire_ms.is_some() { 2 } else { 1 });
        v.extend_from_slice(&self.offset.to_le_bytes());
        v.extend_from_slice(&self.leader_epoch.to_le_bytes());
        v.extend_from_slice(&self.commit_ms.to_le_bytes());
        put_string(&mut v, &self.metadata);
        if let Some(at) = self.expire_ms {
            v.extend_from_slice(&at.to_le_bytes());
        }
        v.into()
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(3)? != OFFSET_MAGIC {
            return Err(corrupt(key, "not a committed-offset record"));
        }
        let version = r.u8()?;
        if !matches!(version, 1 | 2) {
            return Err(corrupt(key, "a committed-offset record of an unknown version"));
        }
        let offset = r.u64()? as i64;
        let leader_epoch = r.u32()? as i32;
        let commit_ms = r.u64()?;
        let metadata = r.string()?;
        let expire_ms = if version == 2 { Some(r.u64()?) } else { None };
        r.done()?;
        Ok(OffsetRecord { offset, leader_epoch, commit_ms, metadata, expire_ms })
    }
}

/// `/` and `%` escaped, so a group id is one key segment.
pub(crate) fn escape(group: &str) -> String {
    group.replace('%', "%25").replace('/', "%2F")
}

pub(crate) fn unescape(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_records_round_trip_and_group_ids_escape() {
        let r = OffsetRecord {
            offset: 42,
            leader_epoch: -1,
            commit_ms: 7,
            metadata: "m".into(),
            expire_ms: None,
        };
        assert_eq!(OffsetRecord::decode("k", &r.encode()).unwrap(), r);
        let timed = OffsetRecord { expire_ms: Some(99), ..r.clone() };
        assert_eq!(OffsetRecord::decode("k", &timed.encode()).unwrap(), timed);
        assert!(OffsetRecord::decode("k", &r.encode()[..10]).is_err());
        for g in ["a/b", "100%", "%2F", "plain"] {
            assert_eq!(unescape(&escape(g)), g);
            assert!(!escape(g).contains('/'));
        }
    }
}
