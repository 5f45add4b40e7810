//! A transactional id's state record (layout in the parent module's doc).

use bytes::Bytes;
use folio_meta::records::{Reader, Record, corrupt, put_string};

/// Kafka's `TransactionState` (the ids are Kafka's), less Dead and PrepareEpochFence: an
/// expired id's record is deleted, and a fence is a PrepareAbort at the bumped epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
}

impl TxnState {
    fn from_u8(v: u8) -> Option<TxnState> {
        Some(match v {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            _ => return None,
        })
    }

    /// Kafka's name (DescribeTransactions, ListTransactions, logs).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// Whether markers are being written (the transaction is ending).
    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    /// Whether a transaction may begin from here.
    pub fn is_idle(self) -> bool {
        matches!(self, TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort)
    }
}

/// What the store holds for one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub producer_id: i64,
    pub epoch: i16,
    pub state: TxnState,
    pub timeout_ms: u32,
    /// When the current transaction began (clock ms; 0 when none is open).
    pub started_ms: u64,
    /// When the record last changed (clock ms).
    pub updated_ms: u64,
    /// Bumped by every InitProducerId: markers carry it.
    pub coordinator_epoch: i32,
    /// Ongoing: the partitions the transaction wrote to. Prepare*: those still without
    /// their marker.
    pub partitions: Vec<(String, i32)>,
    /// Ongoing: the groups it commits offsets for. Prepare*: those whose offsets are still
    /// pending.
    pub groups: Vec<String>,
    /// Whether the current transaction runs under transaction version 2 (KIP-890: its end
    /// bumps the epoch; its partitions and groups join implicitly).
    pub tv2: bool,
    /// Prepare* under TV2 when the epoch is spent: the producer id the next transaction
    /// takes (at epoch 0) once this one completes; -1 otherwise.
    pub next_producer_id: i64,
}

const MAGIC: &[u8; 3] = b"FTX";
/// Version 2 adds `tv2` and `next_producer_id` (a version-1 record reads as TV1, none).
const VERSION: u8 = 2;

impl Record for TxnRecord {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(64 + self.partitions.len() * 32);
        v.extend_from_slice(MAGIC);
        v.push(VERSION);
        v.extend_from_slice(&self.producer_id.to_le_bytes());
        v.extend_from_slice(&self.epoch.to_le_bytes());
        v.push(self.state as u8);
        v.extend_from_slice(&self.timeout_ms.to_le_bytes());
        v.extend_from_slice(&self.started_ms.to_le_bytes());
        v.extend_from_slice(&self.updated_ms.to_le_bytes());
        v.extend_from_slice(&self.coordinator_epoch.to_le_bytes());
        v.extend_from_slice(&(self.partitions.len() as u32).to_le_bytes());
        for (topic, p) in &self.partitions {
            put_string(&mut v, topic);
            v.extend_from_slice(&p.to_le_bytes());
        }
        v.extend_from_slice(&(self.groups.len() as u32).to_le_bytes());
        for g in &self.groups {
            put_string(&mut v, g);
        }
        v.push(u8::from(self.tv2));
        v.extend_from_slice(&self.next_producer_id.to_le_bytes());
        v.into()
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(3)? != MAGIC {
            return Err(corrupt(key, "not a transaction record"));
        }
        let version = r.u8()?;
        if !matches!(version, 1 | VERSION) {
            return Err(corrupt(key, "a transaction record of an unknown version"));
        }
        let producer_id = r.u64()? as i64;
        let epoch = r.u16()? as i16;
        let state = TxnState::from_u8(r.u8()?)
            .ok_or_else(|| corrupt(key, "a transaction record in an unknown state"))?;
        let timeout_ms = r.u32()?;
        let started_ms = r.u64()?;
        let updated_ms = r.u64()?;
        let coordinator_epoch = r.u32()? as i32;
        let n = r.u32()? as usize;
        if n > crate::limits::TXN_PARTITIONS_MAX {
            return Err(corrupt(key, format!("a transaction of {n} partitions")));
        }
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            let topic = r.string()?;
            partitions.push((topic, r.u32()? as i32));
        }
        let n = r.u32()? as usize;
        if n > crate::limits::TXN_PARTITIONS_MAX {
            return Err(corrupt(key, format!("a transaction of {n} groups")));
        }
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            groups.push(r.string()?);
        }
        let (tv2, next_producer_id) =
            if version >= 2 { (r.u8()? == 1, r.u64()? as i64) } else { (false, -1) };
        r.done()?;
        Ok(TxnRecord {
            producer_id,
            epoch,
            state,
            timeout_ms,
            started_ms,
            updated_ms,
            coordinator_epoch,
            partitions,
            groups,
            tv2,
            next_producer_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let r = TxnRecord {
            producer_id: 9,
            epoch: 3,
            state: TxnState::PrepareCommit,
            timeout_ms: 60_000,
            started_ms: 5,
            updated_ms: 6,
            coordinator_epoch: 2,
            partitions: vec![("t".into(), 0), ("u/v".into(), 7)],
            groups: vec!["g".into()],
            tv2: true,
            next_producer_id: 12,
        };
        let b = r.encode();
        assert_eq!(TxnRecord::decode("k", &b).unwrap(), r);
        for cut in 0..b.len() {
            assert!(TxnRecord::decode("k", &b[..cut]).is_err(), "cut at {cut}");
        }
    }
}
