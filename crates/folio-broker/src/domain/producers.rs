//! Idempotent producers: per partition, the last batches of each producer id, so a retried
//! batch is answered with its first offset instead of being stored twice, and a gap in the
//! sequence is refused (OUT_OF_ORDER_SEQUENCE_NUMBER).
//!
//! A batch is registered *before* it is queued on the log, with a channel its outcome is
//! published on: a retry that arrives while the original is still in flight waits for the
//! original's outcome. A batch whose append failed is forgotten, so its retry is appended.
//!
//! The table survives ownership changes. Its owner snapshots it durably beside the log
//! (`Keys::log_state(log, "producers")`, see [`Producers::snapshot`] for the format) every
//! `producer_snapshot_interval` while it changes and when the partition closes; the next
//! owner restores the snapshot and replays the batch headers appended after it, so a
//! retried batch is answered as a duplicate on any broker, however many offsets later. A
//! producer is kept by time: one that appended nothing for `producer.id.expiration.ms`
//! (`producer_id_expiration`) is dropped, as Kafka does. Without a snapshot (a log written
//! before snapshots), the table is rebuilt from the batch headers of the log's last
//! `REBUILD_OFFSETS` offsets.

use std::collections::{HashMap, VecDeque};

use tokio::sync::watch;

use crate::domain::batch::BatchInfo;
use crate::errors::BrokerError;
pub use crate::limits::PRODUCERS_MAX;
pub use crate::limits::SNAPSHOT_PRODUCERS_MAX;

/// Batches remembered per producer (Kafka: 5, the most a client keeps in flight).
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Offsets at the end of a partition whose batch headers rebuild the table on open.
pub const REBUILD_OFFSETS: u64 = 20_000;

/// The outcome of an append: its first offset, or a Kafka error code. `None` while pending.
pub type Outcome = Option<Result<i64, i16>>;

#[derive(Debug)]
struct Batch {
    first_seq: i32,
    last_seq: i32,
    outcome: watch::Receiver<Outcome>,
}

#[derive(Debug)]
struct Producer {
    epoch: i16,
    batches: VecDeque<Batch>,
    last_used: u64,
    /// The max timestamp of its last batch (for DescribeProducers).
    last_timestamp: i64,
    /// The broker's time of its last batch (`producer_id_expiration` counts from it).
    last_append_ms: i64,
}

impl Producer {
    fn new(epoch: i16, clock: u64, now_ms: i64) -> Producer {
        Producer {
            epoch,
            batches: VecDeque::new(),
            last_used: clock,
            last_timestamp: -1,
            last_append_ms: now_ms,
        }
    }
}

const SNAPSHOT_VERSION: u8 = 1;
/// Bytes of one producer in a snapshot, with all its batches.
const SNAPSHOT_PRODUCER_BYTES: usize = 8 + 2 + 8 + 8 + 1 + BATCHES_PER_PRODUCER * 16;
const _: () = assert!(
    1 + 8 + 4 + SNAPSHOT_PRODUCERS_MAX * SNAPSHOT_PRODUCER_BYTES + 4
        <= folio_meta::limits::VALUE_BYTES_MAX
);

/// What DescribeProducers reports of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    pub producer_id: i64,
    pub epoch: i16,
    /// The sequence of its last batch's last record; -1 before any batch of this epoch.
    pub last_sequence: i32,
    pub last_timestamp: i64,
}

/// What to do with an idempotent batch.
#[derive(Debug)]
pub enum Check {
    /// Append it, and publish the outcome on this sender.
    Append(watch::Sender<Outcome>),
    /// A retry of a batch already taken: answer with that batch's outcome.
    Duplicate(watch::Receiver<Outcome>),
    /// Refuse it.
    Refuse(BrokerError),
}

/// The idempotent producers of one partition: each one's epoch and recent batches (up to
/// `PRODUCERS_MAX` producers, least recently used evicted).
#[derive(Debug, Default)]
pub struct Producers {
    by_id: HashMap<i64, Producer>,
    clock: u64,
    /// Bumped by every change (a snapshot is written only when it moved).
    changes: u64,
}

/// A producer snapshot that does not decode (too short, a checksum mismatch, an unknown
/// version, counts past their limits): what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("a damaged producer snapshot: {0}")]
pub struct DamagedSnapshot(pub String);

impl Producers {
    /// Checks an idempotent batch against the producer's state and registers it (at the
    /// broker's time `now_ms`).
    pub fn check(&mut self, b: &BatchInfo, now_ms: i64) -> Check {
        debug_assert!(b.is_idempotent());
        self.clock += 1;
        self.changes += 1;
        let clock = self.clock;
        let (first_seq, last_seq) = (b.base_sequence, b.last_sequence());
        if first_seq < 0 {
            return Check::Refuse(BrokerError::InvalidRecord(format!(
                "idempotent batch with sequence {first_seq}"
            )));
        }
        if !self.by_id.contains_key(&b.producer_id) && self.by_id.len() >= PRODUCERS_MAX {
            self.evict();
        }
        let p = self
            .by_id
            .entry(b.producer_id)
            .or_insert_with(|| Producer::new(b.producer_epoch, clock, now_ms));
        p.last_used = clock;
        if b.producer_epoch < p.epoch {
            return Check::Refuse(BrokerError::InvalidProducerEpoch(format!(
                "producer {} epoch {} is older than {}",
                b.producer_id, b.producer_epoch, p.epoch
            )));
        }
        if b.producer_epoch > p.epoch {
            // A new epoch starts its sequence over.
            p.epoch = b.producer_epoch;
            p.batches.clear();
        }
        if let Some(dup) =
            p.batches.iter().find(|x| x.first_seq == first_seq && x.last_seq == last_seq)
        {
            return Check::Duplicate(dup.outcome.clone());
        }
        if let Some(last) = p.batches.back() {
            let expected = if last.last_seq == i32::MAX { 0 } else { last.last_seq + 1 };
            if first_seq != expected {
                return Check::Refuse(BrokerError::OutOfOrderSequence(format!(
                    "producer {}: expected sequence {expected}, got {first_seq}",
                    b.producer_id
                )));
            }
        }
        let (tx, rx) = watch::channel(None);
        p.batches.push_back(Batch { first_seq, last_seq, outcome: rx });
        p.last_timestamp = b.max_timestamp;
        p.last_append_ms = now_ms;
        if p.batches.len() > BATCHES_PER_PRODUCER {
            p.batches.pop_front();
        }
        Check::Append(tx)
    }

    /// Forgets a batch whose append failed (its retry must be appended).
    pub fn forget(&mut self, producer_id: i64, first_seq: i32) {
        if let Some(p) = self.by_id.get_mut(&producer_id)
            && let Some(i) = p.batches.iter().position(|x| x.first_seq == first_seq)
        {
            // Later batches depended on it: they fail too and are retried in order.
            p.batches.truncate(i);
        }
    }

    /// Records a batch read back from the log (rebuilding after an open, at `now_ms`).
    pub fn restore(&mut self, b: &BatchInfo, base_offset: i64, now_ms: i64) {
        if !b.is_idempotent() {
            return;
        }
        self.clock += 1;
        self.changes += 1;
        let clock = self.clock;
        let p = self
            .by_id
            .entry(b.producer_id)
            .or_insert_with(|| Producer::new(b.producer_epoch, clock, now_ms));
        p.last_append_ms = p.last_append_ms.max(now_ms);
        if b.producer_epoch < p.epoch {
            return;
        }
        p.last_timestamp = b.max_timestamp;
        if b.producer_epoch > p.epoch {
            p.epoch = b.producer_epoch;
            p.batches.clear();
        }
        p.last_used = clock;
        let (_, rx) = watch::channel(Some(Ok(base_offset)));
        p.batches.push_back(Batch {
            first_seq: b.base_sequence,
            last_seq: b.last_sequence(),
            outcome: rx,
        });
        if p.batches.len() > BATCHES_PER_PRODUCER {
            p.batches.pop_front();
        }
    }

    /// Every producer tracked, by id.
    pub fn describe(&self) -> Vec<ProducerState> {
        let mut out: Vec<ProducerState> = self
            .by_id
            .iter()
            .map(|(id, p)| ProducerState {
                producer_id: *id,
                epoch: p.epoch,
                last_sequence: p.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: p.last_timestamp,
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// Producers tracked.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no producer is tracked.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// How many changes the table has seen (a snapshot is due when this moved).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Drops the producers that appended nothing since `now_ms - expiration_ms`
    /// (`producer.id.expiration.ms`); returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.by_id.len();
        let oldest = now_ms.saturating_sub(expiration_ms);
        self.by_id.retain(|_, p| p.last_append_ms >= oldest);
        let dropped = before - self.by_id.len();
        if dropped > 0 {
            self.changes += 1;
        }
        dropped
    }

    /// The table as its snapshot: every batch below offset `upto` that completed, of at
    /// most [`SNAPSHOT_PRODUCERS_MAX`] producers (the most recently used). The next owner
    /// restores it and replays the log from `upto`.
    ///
    /// ```text
    /// version         u8     1
    /// upto            u64    batches below this offset are here; replay the log from it
    /// producers       u32
    ///   producer id   i64
    ///   epoch         i16
    ///   last append   i64    the broker's ms (producer_id_expiration counts from it)
    ///   last ts       i64    its last batch's max timestamp
    ///   batches       u8     at most BATCHES_PER_PRODUCER, oldest first
    ///     first seq   i32
    ///     last seq    i32
    ///     offset      i64    the batch's base offset
    /// crc32c          u32    of everything before it
    /// ```
    /// Big-endian throughout.
    pub fn snapshot(&self, upto: u64) -> Vec<u8> {
        let mut ids: Vec<(&i64, &Producer)> = self.by_id.iter().collect();
        ids.sort_by_key(|(_, p)| std::cmp::Reverse(p.last_used));
        ids.truncate(SNAPSHOT_PRODUCERS_MAX);
        let mut out = Vec::with_capacity(17 + ids.len() * SNAPSHOT_PRODUCER_BYTES);
        out.push(SNAPSHOT_VERSION);
        out.extend_from_slice(&upto.to_be_bytes());
        out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for (id, p) in ids {
            let done: Vec<(i32, i32, i64)> = p
                .batches
                .iter()
                .filter_map(|b| match *b.outcome.borrow() {
                    Some(Ok(offset)) if (offset as u64) < upto => {
                        Some((b.first_seq, b.last_seq, offset))
                    }
                    _ => None,
                })
                .collect();
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&p.epoch.to_be_bytes());
            out.extend_from_slice(&p.last_append_ms.to_be_bytes());
            out.extend_from_slice(&p.last_timestamp.to_be_bytes());
            out.push(done.len() as u8);
            for (first, last, offset) in done {
                out.extend_from_slice(&first.to_be_bytes());
                out.extend_from_slice(&last.to_be_bytes());
                out.extend_from_slice(&offset.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// A table from its snapshot, and the offset to replay the log from (`snapshot`'s
    /// `upto`). A damaged snapshot is an error (the caller rebuilds from the log instead).
    pub fn from_snapshot(b: &[u8]) -> Result<(Producers, u64), DamagedSnapshot> {
        Self::decode_snapshot(b).map_err(DamagedSnapshot)
    }

    fn decode_snapshot(b: &[u8]) -> Result<(Producers, u64), String> {
        let body_len = b.len().checked_sub(4).ok_or("a snapshot shorter than its checksum")?;
        let (body, crc) = b.split_at(body_len);
        let stored = u32::from_be_bytes(crc.try_into().expect("4 bytes"));
        if crc32c::crc32c(body) != stored {
            return Err("producer snapshot checksum mismatch".into());
        }
        let mut r = body;
        let mut take = |n: usize| -> Result<&[u8], String> {
            if r.len() < n {
                return Err("producer snapshot ends early".into());
            }
            let (h, t) = r.split_at(n);
            r = t;
            Ok(h)
        };
        let version = take(1)?[0];
        if version != SNAPSHOT_VERSION {
            return Err(format!("producer snapshot version {version} is not {SNAPSHOT_VERSION}"));
        }
        let upto = u64::from_be_bytes(take(8)?.try_into().expect("8"));
        let n = u32::from_be_bytes(take(4)?.try_into().expect("4")) as usize;
        if n > SNAPSHOT_PRODUCERS_MAX {
            return Err(format!("a producer snapshot of {n} producers"));
        }
        let mut producers = Producers::default();
        for _ in 0..n {
            let id = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let epoch = i16::from_be_bytes(take(2)?.try_into().expect("2"));
            let last_append_ms = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let last_timestamp = i64::from_be_bytes(take(8)?.try_into().expect("8"));
            let batches = take(1)?[0] as usize;
            if batches > BATCHES_PER_PRODUCER {
                return Err(format!("producer {id} with {batches} batches in the snapshot"));
            }
            producers.clock += 1;
            let mut p = Producer::new(epoch, producers.clock, last_append_ms);
            p.last_timestamp = last_timestamp;
            for _ in 0..batches {
                let first_seq = i32::from_be_bytes(take(4)?.try_into().expect("4"));
                let last_seq = i32::from_be_bytes(take(4)?.try_into().expect("4"));
                let offset = i64::from_be_bytes(take(8)?.try_into().expect("8"));
                let (_, outcome) = watch::channel(Some(Ok(offset)));
                p.batches.push_back(Batch { first_seq, last_seq, outcome });
            }
            producers.by_id.insert(id, p);
        }
        if !r.is_empty() {
            return Err(format!("{} bytes after the producer snapshot's producers", r.len()));
        }
        Ok((producers, upto))
    }

    fn evict(&mut self) {
        if let Some(id) = self.by_id.iter().min_by_key(|(_, p)| p.last_used).map(|(id, _)| *id) {
            self.by_id.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(pid: i64, epoch: i16, seq: i32, count: i32) -> BatchInfo {
        BatchInfo {
            base_timestamp: 0,
            size: 100,
            attributes: 0,
            last_offset_delta: count - 1,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: count,
        }
    }

    impl Producers {
        fn check_now(&mut self, b: &BatchInfo) -> Check {
            self.check(b, 0)
        }
    }

    fn append(p: &mut Producers, b: &BatchInfo, offset: i64) {
        match p.check(b, 0) {
            Check::Append(tx) => {
                tx.send_replace(Some(Ok(offset)));
            }
            other => panic!("expected an append, got {other:?}"),
        }
    }

    #[test]
    fn duplicates_get_the_original_offset_and_gaps_are_refused() {
        let mut p = Producers::default();
        append(&mut p, &info(7, 0, 0, 3), 100);
        append(&mut p, &info(7, 0, 3, 2), 103);
        match p.check_now(&info(7, 0, 0, 3)) {
            Check::Duplicate(rx) => assert_eq!(*rx.borrow(), Some(Ok(100))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            p.check_now(&info(7, 0, 9, 1)),
            Check::Refuse(BrokerError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            p.check_now(&info(7, -1, 5, 1)),
            Check::Refuse(BrokerError::InvalidProducerEpoch(_))
        ));
        // A new epoch starts over at 0; other producers are independent.
        append(&mut p, &info(7, 1, 0, 1), 200);
        append(&mut p, &info(8, 0, 42, 1), 201);
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn a_failed_batch_is_forgotten_with_the_ones_after_it() {
        let mut p = Producers::default();
        append(&mut p, &info(1, 0, 0, 1), 0);
        let Check::Append(_tx) = p.check_now(&info(1, 0, 1, 1)) else { panic!() };
        let Check::Append(_tx2) = p.check_now(&info(1, 0, 2, 1)) else { panic!() };
        p.forget(1, 1);
        // The retry of sequence 1 is appended again, not answered as a duplicate.
        assert!(matches!(p.check_now(&info(1, 0, 1, 1)), Check::Append(_)));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_state_rebuilds() {
        let mut p = Producers::default();
        for i in 0..10 {
            append(&mut p, &info(3, 0, i, 1), i as i64);
        }
        assert!(matches!(p.check_now(&info(3, 0, 9, 1)), Check::Duplicate(_)));
        // Sequence 2 fell out of the window: not a duplicate, and out of order.
        assert!(matches!(
            p.check_now(&info(3, 0, 2, 1)),
            Check::Refuse(BrokerError::OutOfOrderSequence(_))
        ));
        let mut rebuilt = Producers::default();
        for i in 0..10 {
            rebuilt.restore(&info(3, 0, i, 1), i as i64, 0);
        }
        match rebuilt.check_now(&info(3, 0, 8, 1)) {
            Check::Duplicate(rx) => assert_eq!(*rx.borrow(), Some(Ok(8))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(rebuilt.check_now(&info(3, 0, 10, 1)), Check::Append(_)));
    }

    /// #44 item 4: the snapshot carries every producer's epoch and last batches with their
    /// offsets, so a retry is a duplicate after a restore however far the log moved on;
    /// batches at or past `upto`, or not completed, are left to the replay; a damaged
    /// snapshot is refused; producers idle past the expiration are dropped.
    #[test]
    fn snapshots_restore_producers_and_expire_them_by_time() {
        let mut p = Producers::default();
        for i in 0..7 {
            append(&mut p, &info(1, 2, i * 2, 2), 1000 + i as i64);
        }
        append(&mut p, &info(9, 0, 0, 1), 5000);
        let Check::Append(_pending) = p.check(&info(9, 0, 1, 1), 50) else { panic!() };
        let snap = p.snapshot(5000);
        let (mut back, upto) = Producers::from_snapshot(&snap).unwrap();
        assert_eq!(upto, 5000);
        match back.check(&info(1, 2, 10, 2), 60) {
            Check::Duplicate(rx) => assert_eq!(*rx.borrow(), Some(Ok(1005))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            back.check(&info(1, 1, 14, 2), 60),
            Check::Refuse(BrokerError::InvalidProducerEpoch(_))
        ));
        assert!(matches!(back.check(&info(1, 2, 14, 2), 60), Check::Append(_)));
        // Producer 9's batch at 5000 is for the replay, its pending one is not there.
        assert_eq!(
            back.describe().iter().find(|d| d.producer_id == 9).map(|d| d.last_sequence),
            Some(-1)
        );
        for cut in 0..snap.len() {
            assert!(Producers::from_snapshot(&snap[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = snap.clone();
        flipped[10] ^= 1;
        assert!(Producers::from_snapshot(&flipped).is_err());
        // By time: producer 1 appended at 60 (after the restore), 9 last at 50.
        assert_eq!(back.expire(105, 50), 1);
        assert_eq!(back.describe().iter().map(|d| d.producer_id).collect::<Vec<_>>(), vec![1]);
    }
}
