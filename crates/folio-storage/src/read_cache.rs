//! The read-ahead cache: entries fetched ahead of a sequential reader, bounded in bytes,
//! evicted first-in first-out.

use std::collections::{HashMap, VecDeque};

use folio_proto::{Entry, EntryId, LedgerId};

/// Entries read ahead, by ledger and entry id, at most `bytes_max` bytes (oldest evicted first).
#[derive(Debug)]
pub struct ReadCache {
    bytes_max: usize,
    bytes: usize,
    entries: HashMap<(LedgerId, EntryId), Entry>,
    order: VecDeque<(LedgerId, EntryId)>,
}

impl ReadCache {
    /// An empty cache of at most `bytes_max` bytes.
    pub fn new(bytes_max: usize) -> ReadCache {
        ReadCache { bytes_max, bytes: 0, entries: HashMap::new(), order: VecDeque::new() }
    }

    /// The entry, if cached.
    pub fn get(&self, ledger_id: LedgerId, entry_id: EntryId) -> Option<Entry> {
        self.entries.get(&(ledger_id, entry_id)).cloned()
    }

    /// Whether the entry is cached.
    pub fn contains(&self, ledger_id: LedgerId, entry_id: EntryId) -> bool {
        self.entries.contains_key(&(ledger_id, entry_id))
    }

    /// Caches `entry`, evicting the oldest entries beyond the limit.
    pub fn insert(&mut self, entry: Entry) {
        let key = (entry.ledger_id(), entry.entry_id());
        if entry.encoded_len() > self.bytes_max || self.entries.contains_key(&key) {
            return;
        }
        while self.bytes + entry.encoded_len() > self.bytes_max {
            let Some(old) = self.order.pop_front() else { break };
            if let Some(e) = self.entries.remove(&old) {
                self.bytes -= e.encoded_len();
            }
        }
        self.bytes += entry.encoded_len();
        self.entries.insert(key, entry);
        self.order.push_back(key);
        debug_assert!(self.bytes <= self.bytes_max);
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// Drops the ledger's entries.
    pub fn remove_ledger(&mut self, ledger_id: LedgerId) {
        let bytes = &mut self.bytes;
        self.entries.retain(|k, e| {
            let keep = k.0 != ledger_id;
            if !keep {
                *bytes -= e.encoded_len();
            }
            keep
        });
        self.order.retain(|k| k.0 != ledger_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_proto::EntryHeader;

    #[test]
    fn stays_within_its_byte_budget() {
        let mut c = ReadCache::new(1000);
        for e in 0..10 {
            c.insert(Entry::encode(
                EntryHeader { ledger_id: 1, entry_id: e, last_add_confirmed: -1, length: 0 },
                &[0; 264],
            ));
        }
        assert!(c.bytes <= 1000);
        assert!(c.get(1, 9).is_some() && c.get(1, 0).is_none(), "oldest evicted first");
        c.remove_ledger(1);
        assert_eq!(c.bytes, 0);
    }
}
