//! The offset index: per ledger, which entry holds which offset, so that a read finds its
//! first entry without reading entries.
//!
//! For each ledger the index keeps the base offsets of its entries *densely* from entry 0
//! as far as it knows them (`dense[i]` is entry `i`'s base offset), and a *sparse* map of
//! every `SPARSE_EVERY`-th entry beyond that. It learns from appends (the log's actor knows
//! every entry it writes, in order, so the open ledger's index is always complete) and
//! from reads (a consumer reading a closed ledger from its start fills it in as it goes).
//! Locating an offset is then a binary search in memory; only an offset past what the index
//! knows of a ledger costs entry reads (a binary search over entry headers, narrowed by the
//! sparse map).
//!
//! Memory is bounded: at most `INDEX_ENTRIES_MAX` dense offsets per log; beyond that the
//! oldest ledgers' dense offsets are thinned to the sparse map.
//!
//! A ledger's index outlives the process that wrote it: when the actor closes a ledger it
//! knows densely, it persists the index (`OffsetIndexRecord`, with the log record that
//! closes it), and a reader of a closed ledger the index does not know loads that record
//! once (`load`) before it would search.

use std::collections::{BTreeMap, BTreeSet};

use folio_proto::EntryId;

use crate::limits::INDEX_ENTRIES_MAX;
use crate::records::OffsetIndexRecord;

/// Beyond the dense prefix, every this many entries are remembered.
pub(super) const SPARSE_EVERY: i64 = 16;

#[derive(Debug, Default)]
struct LedgerOffsets {
    /// Entry `i`'s base offset, for entries `0..dense.len()`.
    dense: Vec<u64>,
    /// Base offset → entry id, for some entries at or past `dense.len()`.
    sparse: BTreeMap<u64, EntryId>,
}

impl LedgerOffsets {
    /// Moves the dense offsets to the sparse map (every `SPARSE_EVERY`-th kept); returns how
    /// many dense offsets it dropped.
    fn sparsify(&mut self) -> usize {
        let dense = std::mem::take(&mut self.dense);
        let n = dense.len();
        for (i, b) in dense.into_iter().enumerate() {
            if i as i64 % SPARSE_EVERY == 0 {
                self.sparse.insert(b, i as i64);
            }
        }
        n
    }
}

/// Per ledger, entry ids by base offset (see the module doc).
#[derive(Debug, Default)]
pub(super) struct OffsetIndex {
    ledgers: BTreeMap<u64, LedgerOffsets>,
    /// Ledgers whose persisted index was looked for (found or not): never again. At most
    /// the chain's ledgers (forgotten with them).
    looked_up: BTreeSet<u64>,
    /// Ledgers whose index, learned whole from reads, was offered to the store: never again.
    offered: BTreeSet<u64>,
    /// Dense offsets held, over all ledgers (at most `INDEX_ENTRIES_MAX`).
    dense_total: usize,
}

/// Where an offset's entry is, as far as the index knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Located {
    /// This entry holds it.
    Exact(EntryId),
    /// It is in `lo..=hi`: read entry headers to find out.
    Between(EntryId, EntryId),
}

impl OffsetIndex {
    /// Entry `entry_id` of `ledger_id` starts at `base_offset` (from an append or a read).
    pub(super) fn learn(&mut self, ledger_id: u64, entry_id: EntryId, base_offset: u64) {
        debug_assert!(entry_id >= 0);
        let l = self.ledgers.entry(ledger_id).or_default();
        if entry_id as usize == l.dense.len() {
            // Offsets only grow along a ledger; an entry read back that says otherwise
            // (damage) is not learned, and reads of it fail on their own.
            if l.dense.last().is_some_and(|last| *last >= base_offset) {
                tracing::warn!(
                    ledger_id,
                    entry_id,
                    base_offset,
                    "entry offset not after the previous one; not indexed"
                );
                return;
            }
            l.dense.push(base_offset);
            self.dense_total += 1;
            // Entries the sparse map knew are now in the dense prefix.
            while l.sparse.first_key_value().is_some_and(|(_, e)| (*e as usize) < l.dense.len()) {
                l.sparse.pop_first();
            }
            if self.dense_total > INDEX_ENTRIES_MAX {
                self.thin(ledger_id);
            }
        } else if entry_id as usize > l.dense.len() && entry_id % SPARSE_EVERY == 0 {
            l.sparse.insert(base_offset, entry_id);
        }
    }

    /// Where `offset` is in `ledger_id`, whose entries are `0..entries` and whose first
    /// offset is at or before `offset`.
    pub(super) fn locate(&self, ledger_id: u64, entries: u64, offset: u64) -> Located {
        let last = entries as i64 - 1;
        let Some(l) = self.ledgers.get(&ledger_id) else {
            return Located::Between(0, last.max(0));
        };
        // The last dense entry starting at or before `offset`.
        let n = l.dense.partition_point(|b| *b <= offset);
        if n > 0 && (n < l.dense.len() || n as i64 - 1 == last) {
            return Located::Exact(n as i64 - 1);
        }
        let lo = (n as i64 - 1).max(0);
        let lo = l.sparse.range(..=offset).next_back().map_or(lo, |(_, e)| (*e).max(lo));
        let hi = l.sparse.range(offset + 1..).next().map_or(last, |(_, e)| *e - 1);
        if lo >= hi { Located::Exact(lo) } else { Located::Between(lo, hi) }
    }

    /// Forgets a ledger (trimmed or deleted).
    pub(super) fn remove(&mut self, ledger_id: u64) {
        self.looked_up.remove(&ledger_id);
        self.offered.remove(&ledger_id);
        if let Some(l) = self.ledgers.remove(&ledger_id) {
            self.dense_total -= l.dense.len();
        }
    }

    /// Every entry's base offset of `ledger_id`, if the index knows all `entries` of it.
    pub(super) fn dense(&self, ledger_id: u64, entries: u64) -> Option<&[u64]> {
        let l = self.ledgers.get(&ledger_id)?;
        (l.dense.len() as u64 == entries && entries > 0).then_some(l.dense.as_slice())
    }

    /// Marks `ledger_id`'s index as offered to the store; false if it already was.
    pub(super) fn offer(&mut self, ledger_id: u64) -> bool {
        self.offered.insert(ledger_id)
    }

    /// Marks `ledger_id`'s persisted index as looked for; false if it already was.
    pub(super) fn look_up(&mut self, ledger_id: u64) -> bool {
        self.looked_up.insert(ledger_id)
    }

    /// Learns a ledger's persisted index: every entry when its stride is 1 (in order, as
    /// from appends), else every stride-th entry into the sparse map.
    pub(super) fn load(&mut self, r: &OffsetIndexRecord) {
        let stride = i64::from(r.stride.max(1));
        if stride == 1 {
            for (i, b) in r.base_offsets.iter().enumerate() {
                self.learn(r.ledger_id, i as EntryId, *b);
            }
            return;
        }
        let l = self.ledgers.entry(r.ledger_id).or_default();
        for (i, b) in r.base_offsets.iter().enumerate() {
            let entry = i as i64 * stride;
            if entry as usize >= l.dense.len() {
                l.sparse.insert(*b, entry);
            }
        }
    }

    /// Dense offsets held.
    #[cfg(test)]
    pub(super) fn dense_total(&self) -> usize {
        self.dense_total
    }

    /// Thins the oldest ledgers other than `keep` to sparse until within the limit.
    fn thin(&mut self, keep: u64) {
        let mut ids: Vec<u64> = self
            .ledgers
            .iter()
            .filter(|(id, l)| **id != keep && !l.dense.is_empty())
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            if self.dense_total <= INDEX_ENTRIES_MAX {
                return;
            }
            self.dense_total -= self.ledgers.get_mut(&id).expect("listed").sparsify();
        }
        if self.dense_total > INDEX_ENTRIES_MAX {
            // Only `keep` is left dense and it alone is over: thin it too.
            self.dense_total -= self.ledgers.get_mut(&keep).expect("being learned").sparsify();
        }
        assert!(self.dense_total <= INDEX_ENTRIES_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ledger 7 with entries at base offsets 100, 110, 120, ... (10 records each).
    fn index(entries: i64) -> OffsetIndex {
        let mut x = OffsetIndex::default();
        for e in 0..entries {
            x.learn(7, e, 100 + 10 * e as u64);
        }
        x
    }

    #[test]
    fn a_fully_known_ledger_locates_every_offset_exactly() {
        let x = index(50);
        for offset in 100..600 {
            assert_eq!(x.locate(7, 50, offset), Located::Exact((offset as i64 - 100) / 10));
        }
        // Past the last entry's start: the last entry (the caller checks the log's end).
        assert_eq!(x.locate(7, 50, 10_000), Located::Exact(49));
    }

    #[test]
    fn what_the_index_does_not_know_is_a_range_to_search() {
        let x = OffsetIndex::default();
        assert_eq!(x.locate(7, 50, 300), Located::Between(0, 49));
        // Known up to entry 9; the ledger has 50 entries: offsets past entry 9's start are
        // somewhere in 9..=49.
        let x = index(10);
        assert_eq!(x.locate(7, 50, 150), Located::Exact(5));
        assert_eq!(x.locate(7, 50, 195), Located::Between(9, 49));
        // Sparse entries learned from reads narrow it.
        let mut x = index(10);
        x.learn(7, 32, 100 + 320);
        x.learn(7, 33, 100 + 330); // not a multiple of SPARSE_EVERY: not kept
        assert_eq!(x.locate(7, 50, 300), Located::Between(9, 31));
        assert_eq!(x.locate(7, 50, 425), Located::Between(32, 49));
    }

    #[test]
    fn reads_in_order_extend_the_dense_prefix_and_absorb_the_sparse_map() {
        let mut x = OffsetIndex::default();
        x.learn(7, 16, 260);
        for e in 0..20 {
            x.learn(7, e, 100 + 10 * e as u64);
        }
        assert_eq!(x.locate(7, 20, 265), Located::Exact(16));
        assert_eq!(x.dense_total(), 20);
        x.remove(7);
        assert_eq!(x.dense_total(), 0);
    }

    /// A persisted index loaded whole locates exactly; one with a stride narrows every
    /// offset to fewer entries than the stride.
    #[test]
    fn a_loaded_index_locates_exactly_or_within_its_stride() {
        let dense: Vec<u64> = (0..100).map(|e| 100 + 10 * e).collect();
        let whole = OffsetIndexRecord::from_dense(7, &dense, 1 << 20).unwrap();
        let mut x = OffsetIndex::default();
        x.load(&whole);
        assert_eq!(x.dense(7, 100), Some(dense.as_slice()));
        for offset in 100..1100 {
            assert_eq!(x.locate(7, 100, offset), Located::Exact((offset as i64 - 100) / 10));
        }
        let strided = OffsetIndexRecord::from_dense(7, &dense, 60).unwrap();
        assert!(strided.stride > 1);
        let mut x = OffsetIndex::default();
        x.load(&strided);
        assert_eq!(x.dense(7, 100), None);
        for offset in 100..1100 {
            let want = (offset as i64 - 100) / 10;
            match x.locate(7, 100, offset) {
                Located::Exact(e) => assert_eq!(e, want),
                Located::Between(lo, hi) => {
                    assert!(lo <= want && want <= hi, "{offset}: {lo}..={hi}");
                    assert!(hi - lo < i64::from(strided.stride), "{offset}: {lo}..={hi}");
                }
            }
        }
        assert!(x.look_up(7) && !x.look_up(7));
        x.remove(7);
        assert!(x.look_up(7), "forgotten with its ledger");
    }

    #[test]
    fn an_offset_that_goes_backwards_is_not_learned() {
        let mut x = index(3);
        x.learn(7, 3, 105);
        assert_eq!(x.dense_total(), 3);
        assert_eq!(x.locate(7, 4, 125), Located::Between(2, 3));
    }

    #[test]
    fn the_dense_offsets_stay_within_their_limit() {
        let mut x = OffsetIndex::default();
        let per = (INDEX_ENTRIES_MAX / 2 + 1) as i64;
        for l in 1..=3u64 {
            for e in 0..per {
                x.learn(l, e, l * 1_000_000_000 + e as u64);
            }
        }
        assert!(x.dense_total() <= INDEX_ENTRIES_MAX);
        // The newest ledger stays exact; the thinned ones are still found by a search.
        assert_eq!(x.locate(3, per as u64, 3_000_000_000 + 77), Located::Exact(77));
        match x.locate(1, per as u64, 1_000_000_000 + 77) {
            Located::Between(lo, hi) => assert!(lo <= 77 && 77 <= hi && hi - lo < SPARSE_EVERY),
            Located::Exact(e) => assert_eq!(e, 77),
        }
    }
}
