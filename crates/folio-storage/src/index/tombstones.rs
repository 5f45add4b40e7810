//! Tombstones: the ledger ids this bookie deleted, so that it never creates them again.
//!
//! Garbage collection drops a ledger whose metadata is gone. Without a record of that, the
//! next add for the id (a zombie writer's add in flight, a recovery add of a stale copy job)
//! would create the ledger afresh with the key it presents and be acknowledged into nothing.
//! With it, an add, a fence, an explicit LAC or a limbo/prepare for a tombstoned id fails
//! with [`StorageError::Deleted`] (answered `NO_LEDGER`), and journal replay skips records
//! of tombstoned ledgers.
//!
//! Format, in the index's `Meta` table, one key per range of deleted ids:
//!
//! ```text
//! "tomb/" ‖ first u64 BE  →  end u64 LE      (ids first..end, end exclusive, are deleted)
//! ```
//!
//! Adjacent ranges are merged as ids are added, so a run of deleted ledgers costs one key.
//! The tombstone commits in the index batch *before* any of the ledger's state is dropped
//! (`Storage::delete_ledger`), so a crash leaves either the ledger or its tombstone.
//!
//! **Bound:** at most [`TOMBSTONE_RANGES_MAX`] ranges. Ledger ids only grow, so the lowest
//! ranges are the oldest deletions; past the bound they are forgotten (counted in
//! [`Tombstones::forgotten`], logged): an add for an id that old would create it again.

use std::collections::BTreeMap;

use folio_proto::LedgerId;

use super::{KvBatch, KvStore, Table};
use crate::error::{Result, StorageError};

/// The prefix of the `Meta` keys of tombstone ranges.
pub const META_TOMB_PREFIX: &[u8] = b"tomb/";

pub use crate::limits::TOMBSTONE_RANGES_MAX;

/// The deleted ledger ids, as ranges `first → end` (exclusive), merged when adjacent.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tombstones {
    ranges: BTreeMap<LedgerId, LedgerId>,
    forgotten: u64,
    max: usize,
}

#[allow(clippy::big_endian_bytes)] // Index keys sort numerically.
fn key(first: LedgerId) -> Vec<u8> {
    let mut k = META_TOMB_PREFIX.to_vec();
    k.extend_from_slice(&first.to_be_bytes());
    k
}

#[allow(clippy::big_endian_bytes)]
fn parse(k: &[u8], v: &[u8]) -> Result<(LedgerId, LedgerId)> {
    let bad =
        || StorageError::corruption("index tombstone", format!("{} + {} bytes", k.len(), v.len()));
    let first: [u8; 8] =
        k.strip_prefix(META_TOMB_PREFIX).ok_or_else(bad)?.try_into().map_err(|_| bad())?;
    let end: [u8; 8] = v.try_into().map_err(|_| bad())?;
    let (first, end) = (u64::from_be_bytes(first), u64::from_le_bytes(end));
    if end <= first {
        return Err(bad());
    }
    Ok((first, end))
}

impl Tombstones {
    /// No tombstone, holding at most `max` ranges.
    pub fn with_max(max: usize) -> Tombstones {
        assert!(max > 0, "a tombstone bound of 0 keeps nothing");
        Tombstones { ranges: BTreeMap::new(), forgotten: 0, max }
    }

    /// The tombstones the index holds, refusing damage (overlapping ranges included).
    pub fn load(kv: &dyn KvStore, max: usize) -> Result<Tombstones> {
        let mut t = Tombstones::with_max(max);
        let mut end_key = META_TOMB_PREFIX.to_vec();
        end_key.push(0xff);
        let mut prev_end = 0;
        for (k, v) in kv.range(Table::Meta, META_TOMB_PREFIX, &end_key, usize::MAX)? {
            let (first, end) = parse(&k, &v)?;
            if first < prev_end {
                return Err(StorageError::corruption("index tombstone", "overlapping ranges"));
            }
            prev_end = end;
            t.ranges.insert(first, end);
        }
        Ok(t)
    }

    /// Whether `id` was deleted here.
    pub fn contains(&self, id: LedgerId) -> bool {
        self.ranges.range(..=id).next_back().is_some_and(|(_, end)| id < *end)
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether no id is tombstoned.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Ranges dropped at the bound since this process started.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// Every range, lowest first.
    pub fn ranges(&self) -> impl Iterator<Item = (LedgerId, LedgerId)> + '_ {
        self.ranges.iter().map(|(a, b)| (*a, *b))
    }

    /// Tombstones `id`, merging with neighbouring ranges, and puts the index changes into
    /// `batch` (to be committed before the ledger's state is dropped). Past the bound, the
    /// lowest ranges are forgotten (also in `batch`).
    pub fn insert(&mut self, id: LedgerId, batch: &mut KvBatch) {
        if self.contains(id) {
            return;
        }
        let mut first = id;
        let mut end = id.saturating_add(1);
        if let Some((&f, &e)) = self.ranges.range(..id).next_back()
            && e == id
        {
            self.ranges.remove(&f);
            batch.delete(Table::Meta, key(f));
            first = f;
        }
        if let Some(e) = self.ranges.remove(&end) {
            batch.delete(Table::Meta, key(end));
            end = e;
        }
        self.ranges.insert(first, end);
        batch.put(Table::Meta, key(first), end.to_le_bytes().to_vec());
        while self.ranges.len() > self.max {
            let (f, e) = self.ranges.pop_first().expect("over the bound, so not empty");
            batch.delete(Table::Meta, key(f));
            self.forgotten += 1;
            tracing::warn!(
                first = f,
                end = e,
                bound = self.max,
                "tombstone range forgotten at the bound"
            );
        }
        debug_assert!(self.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::MemKv;
    use proptest::prelude::*;

    fn commit(kv: &MemKv, b: KvBatch) {
        kv.commit(b).unwrap();
    }

    #[test]
    fn adjacent_ids_merge_into_one_range_and_reload_the_same() {
        let kv = MemKv::new();
        let mut t = Tombstones::with_max(10);
        for id in [5, 7, 6, 9, 4] {
            let mut b = KvBatch::default();
            t.insert(id, &mut b);
            commit(&kv, b);
        }
        assert_eq!(t.ranges().collect::<Vec<_>>(), vec![(4, 8), (9, 10)]);
        assert!(t.contains(4) && t.contains(7) && t.contains(9));
        assert!(!t.contains(3) && !t.contains(8) && !t.contains(10));
        assert_eq!(Tombstones::load(&kv, 10).unwrap(), t);
    }

    #[test]
    fn past_the_bound_the_oldest_ranges_are_forgotten() {
        let kv = MemKv::new();
        let mut t = Tombstones::with_max(2);
        for id in [1, 3, 5] {
            let mut b = KvBatch::default();
            t.insert(id, &mut b);
            commit(&kv, b);
        }
        assert_eq!(t.ranges().collect::<Vec<_>>(), vec![(3, 4), (5, 6)]);
        assert_eq!(t.forgotten(), 1);
        assert!(!t.contains(1), "the lowest range went first");
        assert_eq!(Tombstones::load(&kv, 2).unwrap().ranges().count(), 2);
    }

    #[test]
    fn damaged_records_are_refused() {
        let kv = MemKv::new();
        let mut b = KvBatch::default();
        b.put(Table::Meta, key(5), 5u64.to_le_bytes().to_vec()); // empty range
        commit(&kv, b);
        assert!(Tombstones::load(&kv, 10).is_err());
        let kv = MemKv::new();
        let mut b = KvBatch::default();
        b.put(Table::Meta, key(1), 9u64.to_le_bytes().to_vec());
        b.put(Table::Meta, key(5), 7u64.to_le_bytes().to_vec()); // overlaps
        commit(&kv, b);
        assert!(Tombstones::load(&kv, 10).is_err());
    }

    proptest! {
        #[test]
        fn contains_exactly_the_inserted_ids(ids in proptest::collection::vec(0u64..200, 0..80)) {
            let kv = MemKv::new();
            let mut t = Tombstones::with_max(TOMBSTONE_RANGES_MAX);
            for id in &ids {
                let mut b = KvBatch::default();
                t.insert(*id, &mut b);
                commit(&kv, b);
            }
            for id in 0..210 {
                prop_assert_eq!(t.contains(id), ids.contains(&id));
            }
            let loaded = Tombstones::load(&kv, TOMBSTONE_RANGES_MAX).unwrap();
            prop_assert_eq!(&loaded, &t);
            // Ranges never touch: merged whenever adjacent.
            let r: Vec<_> = t.ranges().collect();
            for w in r.windows(2) {
                prop_assert!(w[0].1 < w[1].0);
            }
        }
    }
}
