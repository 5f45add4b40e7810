//! Idempotent producers: per partition, the last batches of each producer id, so a retried
//! batch is answered with its first offset instead of being stored twice, and a gap in the
//! sequence is refused (OUT_OF_ORDER_SEQUENCE_NUMBER).
//!
//! A batch is registered *before* it is queued on the log, with a channel its outcome is
//! published on: a retry that arrives while the original is still in flight waits for the
//! original's outcome. A batch whose append failed is forgotten, so its retry is appended.
//!
//! The table is memory only. When a partition is opened (broker restart, or the partition
//! moving here) it is rebuilt from the batch headers of the log's tail
//! (`REBUILD_OFFSETS`): a producer idle for longer than that is treated as new, as Kafka
//! does once `producer.id.expiration.ms` has passed.

use std::collections::{HashMap, VecDeque};

use tokio::sync::watch;

use crate::batch::BatchInfo;
use crate::errors::BrokerError;
pub use crate::limits::PRODUCERS_MAX;

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
}

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
}

impl Producers {
    /// Checks an idempotent batch against the producer's state and registers it.
    pub fn check(&mut self, b: &BatchInfo) -> Check {
        debug_assert!(b.is_idempotent());
        self.clock += 1;
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
        let p = self.by_id.entry(b.producer_id).or_insert_with(|| Producer {
            epoch: b.producer_epoch,
            batches: VecDeque::new(),
            last_used: clock,
            last_timestamp: -1,
        });
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

    /// Records a batch read back from the log (rebuilding after an open).
    pub fn restore(&mut self, b: &BatchInfo, base_offset: i64) {
        if !b.is_idempotent() {
            return;
        }
        self.clock += 1;
        let clock = self.clock;
        let p = self.by_id.entry(b.producer_id).or_insert_with(|| Producer {
            epoch: b.producer_epoch,
            batches: VecDeque::new(),
            last_used: clock,
            last_timestamp: -1,
        });
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

    fn append(p: &mut Producers, b: &BatchInfo, offset: i64) {
        match p.check(b) {
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
        match p.check(&info(7, 0, 0, 3)) {
            Check::Duplicate(rx) => assert_eq!(*rx.borrow(), Some(Ok(100))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            p.check(&info(7, 0, 9, 1)),
            Check::Refuse(BrokerError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            p.check(&info(7, -1, 5, 1)),
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
        let Check::Append(_tx) = p.check(&info(1, 0, 1, 1)) else { panic!() };
        let Check::Append(_tx2) = p.check(&info(1, 0, 2, 1)) else { panic!() };
        p.forget(1, 1);
        // The retry of sequence 1 is appended again, not answered as a duplicate.
        assert!(matches!(p.check(&info(1, 0, 1, 1)), Check::Append(_)));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_state_rebuilds() {
        let mut p = Producers::default();
        for i in 0..10 {
            append(&mut p, &info(3, 0, i, 1), i as i64);
        }
        assert!(matches!(p.check(&info(3, 0, 9, 1)), Check::Duplicate(_)));
        // Sequence 2 fell out of the window: not a duplicate, and out of order.
        assert!(matches!(
            p.check(&info(3, 0, 2, 1)),
            Check::Refuse(BrokerError::OutOfOrderSequence(_))
        ));
        let mut rebuilt = Producers::default();
        for i in 0..10 {
            rebuilt.restore(&info(3, 0, i, 1), i as i64);
        }
        match rebuilt.check(&info(3, 0, 8, 1)) {
            Check::Duplicate(rx) => assert_eq!(*rx.borrow(), Some(Ok(8))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(rebuilt.check(&info(3, 0, 10, 1)), Check::Append(_)));
    }
}
