//! The tail cache: the newest confirmed entries of the log this process appends to, kept in
//! memory (up to `LogConfig::tail_cache_bytes`) so that a reader at the end of the log gets
//! them without a bookie round trip.
//!
//! The actor pushes each entry when it is confirmed, in offset order, so the cache is one
//! contiguous run of offsets ending at the log's confirmed end; the oldest entries go first.

use std::collections::VecDeque;

use crate::entry::LogEntry;

/// The newest confirmed entries, contiguous in offsets (see the module doc).
#[derive(Debug, Default)]
pub(super) struct TailCache {
    entries: VecDeque<LogEntry>,
    bytes: usize,
}

impl TailCache {
    /// Adds the entry confirmed next (it starts where the newest one ends, unless the cache
    /// is empty), then drops the oldest entries while over `bytes_max` (always keeping the
    /// newest, unless it alone is over).
    pub(super) fn push(&mut self, e: LogEntry, bytes_max: usize) {
        if let Some(last) = self.entries.back()
            && last.next_offset() != e.base_offset
        {
            // Not contiguous (cannot happen while offsets are assigned in order): start over
            // rather than serve a gap.
            debug_assert!(false, "tail cache: {} after {}", e.base_offset, last.next_offset());
            self.clear();
        }
        self.bytes += e.payload.len();
        self.entries.push_back(e);
        while self.bytes > bytes_max && self.entries.len() > 1 {
            let old = self.entries.pop_front().expect("more than one entry");
            self.bytes -= old.payload.len();
        }
    }

    /// Drops the entries starting below `offset` (a compaction replaced them).
    pub(super) fn drop_below(&mut self, offset: u64) {
        while self.entries.front().is_some_and(|e| e.base_offset < offset) {
            let old = self.entries.pop_front().expect("a front entry");
            self.bytes -= old.payload.len();
        }
    }

    /// Empties the cache (the log changed owner or was truncated by a deletion).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The entries from the one holding `offset` on, up to `max_bytes` (at least one entry)
    /// and `max_entries`, none ending past `end`; `None` if the cache does not hold
    /// `offset`.
    pub(super) fn read(
        &self,
        offset: u64,
        end: u64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Option<Vec<LogEntry>> {
        let first = self.entries.front()?;
        if offset < first.base_offset {
            return None;
        }
        let i = self.entries.partition_point(|e| e.next_offset() <= offset);
        if i == self.entries.len() {
            return None;
        }
        let (mut out, mut bytes) = (Vec::new(), 0usize);
        for e in self.entries.range(i..) {
            if out.len() >= max_entries
                || e.next_offset() > end
                || (!out.is_empty() && bytes + e.payload.len() > max_bytes)
            {
                break;
            }
            bytes += e.payload.len();
            out.push(e.clone());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn entry(base_offset: u64, records: u32, bytes: usize) -> LogEntry {
        LogEntry {
            base_offset,
            record_count: records,
            max_timestamp: 0,
            ledger_id: 1,
            entry_id: base_offset as i64,
            payload: Bytes::from(vec![0u8; bytes]),
        }
    }

    #[test]
    fn serves_the_newest_entries_within_its_bytes_and_the_limits() {
        let mut t = TailCache::default();
        for i in 0..10u64 {
            t.push(entry(i * 5, 5, 100), 450);
        }
        // Four entries fit in 450 bytes: offsets 30..50.
        assert_eq!(t.read(29, 50, 1000, 100), None, "below the cache: not served");
        let got = t.read(32, 50, 1000, 100).unwrap();
        assert_eq!(got.iter().map(|e| e.base_offset).collect::<Vec<_>>(), vec![30, 35, 40, 45]);
        assert_eq!(t.read(50, 50, 1000, 100), None, "at the end: nothing cached");
        let got = t.read(35, 45, 1000, 100).unwrap();
        assert_eq!(got.len(), 2, "nothing past the confirmed end");
        let got = t.read(35, 50, 150, 100).unwrap();
        assert_eq!(got.len(), 1, "max_bytes: only what fits, at least one");
        let got = t.read(35, 50, 1, 100).unwrap();
        assert_eq!(got.len(), 1, "at least one entry whatever max_bytes");
        assert_eq!(t.read(35, 50, 1000, 2).unwrap().len(), 2, "max_entries");
        t.push(entry(50, 1, 10_000), 450);
        assert_eq!(t.read(50, 51, 1000, 10).unwrap().len(), 1, "one entry over the cap stays");
        assert_eq!(t.read(45, 51, 1000, 10), None);
    }
}
