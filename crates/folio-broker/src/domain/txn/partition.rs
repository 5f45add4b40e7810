//! One partition's transactions: which producers have a transaction open on it (from its
//! first batch's offset), the aborted ones (for read_committed fetches to skip), and the
//! last stable offset these give.
//!
//! A transaction opens on the partition with its producer's first transactional batch and
//! ends with the marker its coordinator has written (`marker`). Until then every offset from
//! the transaction's first on is above the last stable offset (LSO): read_committed
//! consumers read only below it. An aborted transaction is remembered as (producer id,
//! first offset, marker offset) while the log still holds its marker, at most
//! [`ABORTED_TXNS_MAX`] of them (the oldest forgotten first, with a warning).
//!
//! When the first batch is queued its offset is not known yet: the transaction opens at
//! the log's end as seen then (a lower bound, so the LSO holds back at once), and moves
//! up to the batch's own offset when the append lands.
//!
//! The state survives ownership changes like the idempotent producers' (`producers`): a
//! snapshot beside the log (`Keys::log_state(log, "transactions")`, written in the same
//! metadata transaction as the producers' with the same `upto`), then the batch headers
//! after it replayed (`restore`).

use std::collections::{BTreeMap, VecDeque};

use crate::domain::producers::DamagedSnapshot;

pub use crate::limits::ABORTED_TXNS_MAX;

/// An aborted transaction on one partition, as Fetch answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Its abort marker's offset.
    pub last_offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Open {
    first_offset: i64,
    epoch: i16,
    /// When this owner saw it open (clock ms): its first batch, or the rebuild.
    opened_ms: u64,
    /// `first_offset` is the log's end when the first batch was queued, not its own offset.
    provisional: bool,
}

/// The transactions of one partition.
#[derive(Debug, Default)]
pub struct PartitionTxns {
    open: BTreeMap<i64, Open>,
    aborted: VecDeque<AbortedTxn>,
    /// Highest marker epoch seen per producer: an older producer epoch's batch or marker
    /// is refused (a fenced zombie's).
    fenced_below: BTreeMap<i64, i16>,
    /// Bumped by every change (a snapshot is written only when it moved).
    changes: u64,
}

/// A marker that cannot apply: its epoch is older than the producer's last marker's.
#[derive(Debug, thiserror::Error)]
#[error("producer {producer_id}: a marker of epoch {epoch} after one of epoch {newer}")]
pub struct StaleMarker {
    pub producer_id: i64,
    pub epoch: i16,
    pub newer: i16,
}

const SNAPSHOT_VERSION: u8 = 1;

impl PartitionTxns {
    /// Whether a transactional batch of `producer_id` at `epoch` may be appended: not if a
    /// marker of a newer epoch fenced it (a zombie's late batch).
    pub fn admits(&self, producer_id: i64, epoch: i16) -> bool {
        self.fenced_below.get(&producer_id).is_none_or(|&e| epoch >= e)
    }

    /// Whether `producer_id` has a transaction open here at `epoch`.
    pub fn is_open(&self, producer_id: i64, epoch: i16) -> bool {
        self.open.get(&producer_id).is_some_and(|o| o.epoch == epoch)
    }

    /// A transactional batch of `producer_id` was queued while the log ended at `end`:
    /// its transaction is open from there on (if it was not open already).
    pub fn batch_queued(&mut self, producer_id: i64, epoch: i16, end: i64, now_ms: u64) {
        self.changes += 1;
        let open = Open { first_offset: end, epoch, opened_ms: now_ms, provisional: true };
        self.open.entry(producer_id).or_insert(open);
    }

    /// The batch `batch_queued` saw landed at `offset`: a provisional start moves up to it.
    pub fn batch_landed(&mut self, producer_id: i64, offset: i64) {
        if let Some(o) = self.open.get_mut(&producer_id)
            && o.provisional
        {
            debug_assert!(o.first_offset <= offset, "a transaction starts before its batch");
            o.first_offset = offset;
            o.provisional = false;
            self.changes += 1;
        }
    }

    /// A marker of `producer_id` at `epoch` is being queued: from now on its older epochs'
    /// batches are refused (`admits`), before the marker lands.
    pub fn fence(&mut self, producer_id: i64, epoch: i16) {
        let e = self.fenced_below.entry(producer_id).or_insert(epoch);
        *e = (*e).max(epoch);
        self.changes += 1;
    }

    /// The marker ending `producer_id`'s transaction landed at `offset`: the transaction is
    /// closed, and remembered if it aborted.
    pub fn marker(
        &mut self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        offset: i64,
    ) -> Result<(), StaleMarker> {
        if let Some(&newer) = self.fenced_below.get(&producer_id)
            && epoch < newer
        {
            return Err(StaleMarker { producer_id, epoch, newer });
        }
        self.changes += 1;
        self.fenced_below.insert(producer_id, epoch);
        if self.fenced_below.len() > crate::limits::PRODUCERS_MAX {
            // The lowest producer id was issued first: the longest unseen, most likely.
            self.fenced_below.pop_first();
        }
        if let Some(open) = self.open.remove(&producer_id)
            && !commit
        {
            self.aborted.push_back(AbortedTxn {
                producer_id,
                first_offset: open.first_offset,
                last_offset: offset,
            });
            if self.aborted.len() > ABORTED_TXNS_MAX {
                let dropped = self.aborted.pop_front().expect("over the limit");
                tracing::warn!(
                    producer_id = dropped.producer_id,
                    first_offset = dropped.first_offset,
                    "more aborted transactions than aborted_txns_max on one partition: the oldest is forgotten (read_committed consumers reading that far back would see its records)"
                );
            }
        }
        Ok(())
    }

    /// A batch read back from the log at `base_offset` (rebuilding after an open);
    /// `control` is the marker's kind when it is a control batch.
    pub fn restore(
        &mut self,
        (producer_id, epoch): (i64, i16),
        base_offset: i64,
        control: Option<bool>,
        now_ms: u64,
    ) {
        match control {
            Some(commit) => {
                if let Err(e) = self.marker(producer_id, epoch, commit, base_offset) {
                    tracing::warn!(error = %e, offset = base_offset, "a stale marker in the log");
                }
            }
            None => {
                self.changes += 1;
                self.open.entry(producer_id).or_insert(Open {
                    first_offset: base_offset,
                    epoch,
                    opened_ms: now_ms,
                    provisional: false,
                });
            }
        }
    }

    /// The last stable offset of a log ending at `end`: the first offset of the oldest
    /// transaction still open, else the end.
    pub fn last_stable_offset(&self, end: i64) -> i64 {
        self.open.values().map(|o| o.first_offset).min().map_or(end, |first| first.min(end))
    }

    /// The aborted transactions a read of `[from, to)` overlaps (their marker at or after
    /// `from`), oldest first.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= from && a.first_offset < to)
            .copied()
            .collect()
    }

    /// Forgets the aborted transactions whose marker the log no longer holds (below
    /// `start`).
    pub fn trim(&mut self, start: i64) {
        let before = self.aborted.len();
        self.aborted.retain(|a| a.last_offset >= start);
        if self.aborted.len() != before {
            self.changes += 1;
        }
    }

    /// Transactions open on the partition.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The first offset of `producer_id`'s open transaction here, if one is open
    /// (DescribeProducers' `current_txn_start_offset`: how hanging ones are found).
    pub fn open_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.open.get(&producer_id).map(|o| o.first_offset)
    }

    /// When the oldest open transaction was seen open here (clock ms), if one is.
    pub fn oldest_open_ms(&self) -> Option<u64> {
        self.open.values().map(|o| o.opened_ms).min()
    }

    /// How many changes the state has seen.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether there is nothing to snapshot.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.aborted.is_empty() && self.fenced_below.is_empty()
    }

    /// The state as its snapshot, for a replay from `upto`: open transactions and aborted
    /// ones that started (ended) below it, and the producers' marker epochs.
    ///
    /// ```text
    /// version        u8    1
    /// upto           u64   replay the log from here
    /// open           u32
    ///   producer id  i64
    ///   epoch        i16
    ///   first offset i64
    /// aborted        u32   oldest first, at most ABORTED_TXNS_MAX
    ///   producer id  i64
    ///   first offset i64
    ///   last offset  i64   the abort marker's offset
    /// fenced         u32   at most PRODUCERS_MAX
    ///   producer id  i64
    ///   epoch        i16   its last marker's
    /// crc32c         u32   of everything before it
    /// ```
    /// Big-endian throughout.
    pub fn snapshot(&self, upto: u64) -> Vec<u8> {
        let upto_i = upto as i64;
        let open: Vec<_> = self.open.iter().filter(|(_, o)| o.first_offset < upto_i).collect();
        let aborted: Vec<_> = self.aborted.iter().filter(|a| a.last_offset < upto_i).collect();
        let mut fenced: Vec<_> = self.fenced_below.iter().collect();
        fenced.truncate(crate::limits::PRODUCERS_MAX);
        let mut out = Vec::with_capacity(21 + open.len() * 18 + aborted.len() * 24);
        out.push(SNAPSHOT_VERSION);
        out.extend_from_slice(&upto.to_be_bytes());
        out.extend_from_slice(&(open.len() as u32).to_be_bytes());
        for (id, o) in open {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&o.epoch.to_be_bytes());
            out.extend_from_slice(&o.first_offset.to_be_bytes());
        }
        out.extend_from_slice(&(aborted.len() as u32).to_be_bytes());
        for a in aborted {
            out.extend_from_slice(&a.producer_id.to_be_bytes());
            out.extend_from_slice(&a.first_offset.to_be_bytes());
            out.extend_from_slice(&a.last_offset.to_be_bytes());
        }
        out.extend_from_slice(&(fenced.len() as u32).to_be_bytes());
        for (id, e) in fenced {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&e.to_be_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// The state from its snapshot, and the offset to replay from. A damaged one is an
    /// error (the caller then has no transaction state before the replay).
    /// `now_ms`: when the open transactions count as seen open.
    pub fn from_snapshot(b: &[u8], now_ms: u64) -> Result<(PartitionTxns, u64), DamagedSnapshot> {
        Self::decode_snapshot(b, now_ms).map_err(DamagedSnapshot)
    }

    fn decode_snapshot(b: &[u8], now_ms: u64) -> Result<(PartitionTxns, u64), String> {
        let body_len = b.len().checked_sub(4).ok_or("a snapshot shorter than its checksum")?;
        let (body, crc) = b.split_at(body_len);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().expect("4 bytes")) {
            return Err("transaction snapshot checksum mismatch".into());
        }
        let mut r = body;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if r.len() < n {
                return Err("transaction snapshot ends early".into());
            }
            let (h, t) = r.split_at(n);
            r = t;
            Ok(h)
        };
        let version = take(1)?[0];
        if version != SNAPSHOT_VERSION {
            return Err(format!("transaction snapshot version {version}"));
        }
        let upto = u64::from_be_bytes(take(8)?.try_into().expect("8"));
        let mut t = PartitionTxns::default();
        let n = u32::from_be_bytes(take(4)?.try_into().expect("4")) as usize;
        if n > crate::limits::PRODUCERS_MAX {
            return Err(format!("a transaction snapshot of {n} open transactions"));
        }
        for _ in 0..n {
            let id = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let epoch = i16::from_be_bytes(take(2)?.try_into().expect("2"));
            let first_offset = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            t.open.insert(id, Open { first_offset, epoch, opened_ms: now_ms, provisional: false });
        }
        let n = u32::from_be_bytes(take(4)?.try_into().expect("4")) as usize;
        if n > ABORTED_TXNS_MAX {
            return Err(format!("a transaction snapshot of {n} aborted transactions"));
        }
        for _ in 0..n {
            let producer_id = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let first_offset = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let last_offset = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            t.aborted.push_back(AbortedTxn { producer_id, first_offset, last_offset });
        }
        let n = u32::from_be_bytes(take(4)?.try_into().expect("4")) as usize;
        if n > crate::limits::PRODUCERS_MAX {
            return Err(format!("a transaction snapshot of {n} fenced producers"));
        }
        for _ in 0..n {
            let id = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let epoch = i16::from_be_bytes(take(2)?.try_into().expect("2"));
            t.fenced_below.insert(id, epoch);
        }
        if !r.is_empty() {
            return Err(format!("{} bytes after the transaction snapshot", r.len()));
        }
        Ok((t, upto))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #49 item 2: the LSO holds at an open transaction's first offset (its lower bound
    /// while the first batch is in flight), an abort is remembered for read_committed, a
    /// commit is not, and a marker of an older epoch than the last (a fenced zombie's) is
    /// refused, as is that epoch's batch.
    #[test]
    fn the_last_stable_offset_waits_for_markers_and_aborts_are_kept() {
        let mut t = PartitionTxns::default();
        assert_eq!(t.last_stable_offset(10), 10);
        t.batch_queued(7, 0, 10, 5);
        assert_eq!(t.last_stable_offset(12), 10);
        t.batch_landed(7, 11);
        assert_eq!(t.last_stable_offset(12), 11);
        t.batch_queued(8, 3, 12, 6);
        assert_eq!(t.oldest_open_ms(), Some(5));
        t.batch_landed(8, 12);
        t.marker(7, 0, false, 14).unwrap();
        assert_eq!(t.last_stable_offset(15), 12);
        t.marker(8, 3, true, 15).unwrap();
        assert_eq!(t.last_stable_offset(16), 16);
        assert_eq!(
            t.aborted_between(0, 16),
            vec![AbortedTxn { producer_id: 7, first_offset: 11, last_offset: 14 }]
        );
        assert!(t.aborted_between(15, 16).is_empty());
        assert!(t.marker(8, 2, false, 16).is_err());
        assert!(!t.admits(8, 2) && t.admits(8, 3) && t.admits(9, 0));
        t.trim(15);
        assert!(t.aborted_between(0, 16).is_empty());
    }

    /// #49 item 2: the state survives a snapshot and replay: what is below `upto` comes
    /// from the snapshot, the rest from the replayed batches; damage is refused.
    #[test]
    fn snapshots_and_replay_rebuild_the_same_state() {
        let mut t = PartitionTxns::default();
        t.restore((1, 0), 0, None, 0);
        t.restore((1, 0), 2, Some(false), 0);
        t.restore((2, 5), 3, None, 0);
        let snap = t.snapshot(4);
        let (mut back, upto) = PartitionTxns::from_snapshot(&snap, 0).unwrap();
        assert_eq!(upto, 4);
        back.restore((2, 5), 4, None, 0);
        back.restore((2, 5), 6, Some(true), 0);
        t.restore((2, 5), 6, Some(true), 0);
        assert_eq!(back.last_stable_offset(7), t.last_stable_offset(7));
        assert_eq!(back.aborted_between(0, 7), t.aborted_between(0, 7));
        assert!(!back.admits(2, 4));
        for cut in 0..snap.len() {
            assert!(PartitionTxns::from_snapshot(&snap[..cut], 0).is_err(), "cut at {cut}");
        }
        let mut flipped = snap.clone();
        flipped[9] ^= 1;
        assert!(PartitionTxns::from_snapshot(&flipped, 0).is_err());
    }
}
