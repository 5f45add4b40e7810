//! Owner epochs: the history of a managed log's take-overs, which Kafka clients see as the
//! partition's leader epochs (KIP-101, KIP-320).
//!
//! Every take-over of a log (a new owner, or the same one after a restart) begins a new
//! epoch, one above the last, at the offset the new owner's first append gets (the end the
//! take-over sealed the chain at). The history lives in the log record and is written by
//! the take-over's own CAS, so an epoch exists exactly when its owner does, and every
//! offset keeps the epoch it was appended in, whatever compaction or retention does to the
//! ledgers holding it. Epoch 0 is the time before the first take-over that was recorded
//! (a log record without a history, written by a Folio before epochs, is all epoch 0).
//!
//! The history is bounded ([`EPOCHS_MAX`]) without ever making a consumer believe the log
//! was truncated: a consumer that read a batch of epoch `e` at offset `x` asks where `e`
//! ends, and the answer must be above `x`. Three rules keep that true:
//! - an epoch in which nothing was appended (its start equals the next one's) is replaced
//!   by the next: no batch names it;
//! - epochs wholly below the log start are dropped: no batch of theirs can be read;
//! - past the limit, the second-oldest epoch is merged into the oldest, so the oldest ends
//!   later than it did, never earlier.
//!
//! ```text
//! in the log record: n u32 | n × (epoch u32 | start_offset u64)
//!                    epochs and start offsets both strictly increasing
//! ```

use folio_proto::InvalidRecord;

pub use crate::limits::EPOCH_MAX;
pub use crate::limits::EPOCHS_MAX;

/// Where an epoch begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: u32,
    /// The first offset appended in this epoch.
    pub start_offset: u64,
}

/// A log's epoch history, oldest first (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Epochs(Vec<EpochStart>);

impl Epochs {
    /// A history of these entries, if they obey the module doc's rules.
    pub fn from_entries(entries: Vec<EpochStart>) -> Result<Epochs, InvalidRecord> {
        let e = Epochs(entries);
        e.validate()?;
        Ok(e)
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochStart] {
        &self.0
    }

    /// Epochs and start offsets strictly increasing, at most [`EPOCHS_MAX`] entries, no
    /// epoch above [`EPOCH_MAX`].
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        if self.0.len() > EPOCHS_MAX {
            return Err(InvalidRecord::new(format!(
                "{} epochs (at most {EPOCHS_MAX})",
                self.0.len()
            )));
        }
        if let Some(e) = self.0.iter().find(|e| e.epoch > EPOCH_MAX) {
            return Err(InvalidRecord::new(format!("epoch {} is above {EPOCH_MAX}", e.epoch)));
        }
        for w in self.0.windows(2) {
            if w[1].epoch <= w[0].epoch || w[1].start_offset <= w[0].start_offset {
                return Err(InvalidRecord::new(format!(
                    "epoch {:?} does not follow {:?}",
                    w[1], w[0]
                )));
            }
        }
        Ok(())
    }

    /// The current epoch: the last one begun (0 before any).
    pub fn current(&self) -> u32 {
        self.0.last().map_or(0, |e| e.epoch)
    }

    /// Begins the next epoch at `start_offset` (where the next append goes), dropping and
    /// merging old ones as the module doc says for a log that now starts at `log_start`.
    /// Returns the new epoch. At [`EPOCH_MAX`] the epoch stays (a log taken over 2³¹
    /// times; no batch is then ever named by a wrong epoch, the epoch just stops moving).
    pub fn begin(&mut self, start_offset: u64, log_start: u64) -> u32 {
        let last = self.0.last().copied();
        if let Some(l) = last {
            assert!(
                start_offset >= l.start_offset,
                "epoch {} would begin at {start_offset}, before its predecessor's {}",
                l.epoch + 1,
                l.start_offset
            );
        }
        let epoch = self.current().saturating_add(1).min(EPOCH_MAX);
        if last.is_some_and(|l| l.epoch == epoch) {
            return epoch; // at EPOCH_MAX
        }
        if last.is_some_and(|l| l.start_offset == start_offset) {
            self.0.pop(); // nothing was appended in it
        }
        self.0.push(EpochStart { epoch, start_offset });
        while self.0.len() >= 2 && self.0[1].start_offset <= log_start {
            self.0.remove(0);
        }
        while self.0.len() > EPOCHS_MAX {
            self.0.remove(1);
        }
        debug_assert_eq!(self.validate(), Ok(()));
        epoch
    }

    /// The epoch `offset` was appended in.
    pub fn epoch_of(&self, offset: u64) -> u32 {
        match self.0.partition_point(|e| e.start_offset <= offset) {
            0 => 0,
            i => self.0[i - 1].epoch,
        }
    }

    /// OffsetForLeaderEpoch's answer for `requested` in a log that ends at `log_end`:
    /// the largest epoch at most `requested` and the offset where it ends (the next
    /// epoch's start, or the log end for the current epoch), Kafka's rules. `None` for an
    /// epoch above the current one (Kafka's undefined epoch and offset).
    pub fn end_of(&self, requested: u32, log_end: u64) -> Option<(u32, u64)> {
        let current = self.current();
        if requested == current {
            return Some((current, log_end));
        }
        let higher = self.0.iter().find(|e| e.epoch > requested)?;
        let floor = self.0.iter().rev().find(|e| e.epoch <= requested);
        Some((floor.map_or(requested, |f| f.epoch), higher.start_offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(e: &Epochs) -> Vec<(u32, u64)> {
        e.entries().iter().map(|e| (e.epoch, e.start_offset)).collect()
    }

    #[test]
    fn each_take_over_begins_the_next_epoch_where_the_next_append_goes() {
        let mut e = Epochs::default();
        assert_eq!((e.current(), e.epoch_of(0), e.epoch_of(99)), (0, 0, 0));
        assert_eq!(e.begin(0, 0), 1);
        assert_eq!(e.begin(10, 0), 2);
        assert_eq!(e.begin(25, 0), 3);
        assert_eq!(starts(&e), vec![(1, 0), (2, 10), (3, 25)]);
        assert_eq!([0, 9, 10, 24, 25, 1000].map(|o| e.epoch_of(o)), [1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn an_epoch_without_appends_is_replaced_by_the_next() {
        let mut e = Epochs::default();
        e.begin(5, 0);
        e.begin(5, 0);
        assert_eq!(e.begin(5, 0), 3);
        assert_eq!(starts(&e), vec![(3, 5)]);
        // Offsets before the first recorded epoch are epoch 0 (a log of an older Folio).
        assert_eq!((e.epoch_of(4), e.epoch_of(5)), (0, 3));
    }

    /// Kafka's LeaderEpochFileCache rules: the current epoch ends at the log end, an older
    /// one where the next begins, one between recorded epochs answers the one below it,
    /// one below all answers itself and the first start, one above the current is unknown.
    #[test]
    fn end_of_follows_kafkas_rules() {
        let mut e = Epochs::default();
        e.begin(0, 0);
        e.begin(10, 0);
        e.begin(10, 0); // epoch 2 had no appends: replaced by 3
        e.begin(30, 0);
        assert_eq!(starts(&e), vec![(1, 0), (3, 10), (4, 30)]);
        assert_eq!(e.end_of(4, 77), Some((4, 77)));
        assert_eq!(e.end_of(3, 77), Some((3, 30)));
        assert_eq!(e.end_of(2, 77), Some((1, 10)));
        assert_eq!(e.end_of(1, 77), Some((1, 10)));
        assert_eq!(e.end_of(0, 77), Some((0, 0)));
        assert_eq!(e.end_of(5, 77), None);
        assert_eq!(Epochs::default().end_of(0, 9), Some((0, 9)));
        assert_eq!(Epochs::default().end_of(1, 9), None);
    }

    /// The promise the bounds keep: whatever was dropped or merged, a batch read in epoch
    /// `epoch_of(x)` is answered an end above `x` (no false truncation).
    #[test]
    fn bounding_the_history_never_moves_an_epochs_end_below_its_offsets() {
        let mut e = Epochs::default();
        let mut seen = Vec::new(); // (offset, epoch it was read in)
        let mut log_start = 0;
        for i in 0..(3 * EPOCHS_MAX as u64) {
            let start = i * 10;
            e.begin(start, log_start);
            for x in [start, start + 9] {
                seen.push((x, e.epoch_of(x)));
            }
            if i % 7 == 6 {
                log_start = start - 15;
            }
            assert!(e.entries().len() <= EPOCHS_MAX);
            assert_eq!(e.validate(), Ok(()));
            let log_end = start + 10;
            for &(x, epoch) in seen.iter().filter(|(x, _)| *x >= log_start) {
                let (_, end) = e.end_of(epoch, log_end).expect("an epoch once current is known");
                assert!(end > x, "epoch {epoch} read at {x} now ends at {end}: {e:?}");
            }
        }
        assert_eq!(e.current(), 3 * EPOCHS_MAX as u32);
    }

    #[test]
    fn epochs_out_of_order_are_refused() {
        let at = |epoch, start_offset| EpochStart { epoch, start_offset };
        assert!(Epochs::from_entries(vec![at(1, 0), at(2, 5)]).is_ok());
        assert!(Epochs::from_entries(vec![at(2, 0), at(2, 5)]).is_err());
        assert!(Epochs::from_entries(vec![at(1, 5), at(2, 5)]).is_err());
        assert!(Epochs::from_entries(vec![at(EPOCH_MAX + 1, 0)]).is_err());
        let many = (0..=EPOCHS_MAX as u32).map(|i| at(i + 1, u64::from(i))).collect();
        assert!(Epochs::from_entries(many).is_err());
    }

    #[test]
    fn the_epoch_stops_at_its_maximum() {
        let mut e = Epochs::from_entries(vec![EpochStart { epoch: EPOCH_MAX, start_offset: 3 }])
            .expect("valid");
        assert_eq!(e.begin(8, 0), EPOCH_MAX);
        assert_eq!(starts(&e), vec![(EPOCH_MAX, 3)]);
    }
}
