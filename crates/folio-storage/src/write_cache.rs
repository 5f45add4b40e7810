//! The double-buffered write cache: adds go into the active half; a flush swaps it out and
//! writes it to an entry log while adds continue into the (new) active half.
//!
//! Memory is bounded: each half holds at most `half_bytes_max`. When the active half is full
//! and the other half is still flushing, writers wait (backpressure) up to a limit and then
//! get `Overloaded`. There is no unbounded queue anywhere.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use folio_proto::{Entry, EntryId, LedgerId};

use crate::error::{Result, StorageError};

/// An entry's ledger and entry id.
pub type EntryKey = (LedgerId, EntryId);

/// One half of the cache, sorted by (ledger, entry): the flush order.
#[derive(Debug, Default)]
pub struct CacheHalf {
    pub entries: BTreeMap<EntryKey, Entry>,
    pub bytes: usize,
}

impl CacheHalf {
    fn last_entry(&self, ledger_id: LedgerId) -> Option<EntryId> {
        self.entries.range((ledger_id, 0)..=(ledger_id, EntryId::MAX)).next_back().map(|(k, _)| k.1)
    }
}

#[derive(Debug, Default)]
struct State {
    active: CacheHalf,
    flushing: Option<Arc<CacheHalf>>,
}

/// Entries added but not yet flushed: an active half taking adds and a half being flushed.
#[derive(Debug)]
pub struct WriteCache {
    half_bytes_max: usize,
    state: Mutex<State>,
    space: Condvar,
}

impl WriteCache {
    /// An empty cache of `total_bytes`, half for each half.
    pub fn new(total_bytes: usize) -> WriteCache {
        WriteCache {
            half_bytes_max: total_bytes / 2,
            state: Mutex::new(State::default()),
            space: Condvar::new(),
        }
    }

    /// Inserts an entry, waiting up to `wait_max` for space; `request_flush` is called while
    /// waiting so the flusher swaps the halves.
    pub fn insert(&self, entry: Entry, wait_max: Duration, request_flush: &dyn Fn()) -> Result<()> {
        let size = entry.encoded_len();
        assert!(
            size <= self.half_bytes_max,
            "config validation keeps entries below half the cache"
        );
        let start = Instant::now();
        let mut state = self.state.lock().expect("write cache lock");
        while state.active.bytes + size > self.half_bytes_max {
            request_flush();
            let waited = start.elapsed();
            if waited >= wait_max {
                return Err(StorageError::Overloaded { waited_ms: waited.as_millis() as u64 });
            }
            state = self.space.wait_timeout(state, wait_max - waited).expect("write cache lock").0;
        }
        let key = (entry.ledger_id(), entry.entry_id());
        if let Some(old) = state.active.entries.insert(key, entry) {
            state.active.bytes -= old.encoded_len();
        }
        state.active.bytes += size;
        Ok(())
    }

    /// Inserts without waiting (journal replay, which flushes when `is_active_full`).
    pub fn insert_unbounded(&self, entry: Entry) {
        let mut state = self.state.lock().expect("write cache lock");
        let size = entry.encoded_len();
        if let Some(old) = state.active.entries.insert((entry.ledger_id(), entry.entry_id()), entry)
        {
            state.active.bytes -= old.encoded_len();
        }
        state.active.bytes += size;
    }

    /// Whether the active half has room for `bytes` more.
    pub fn has_room(&self, bytes: usize) -> bool {
        self.state.lock().expect("write cache lock").active.bytes + bytes <= self.half_bytes_max
    }

    /// How full the active half is, from 0 to 1.
    pub fn active_fraction(&self) -> f64 {
        let bytes = self.state.lock().expect("write cache lock").active.bytes;
        bytes as f64 / self.half_bytes_max.max(1) as f64
    }

    /// Whether the active half is full (time to flush).
    pub fn is_active_full(&self) -> bool {
        self.state.lock().expect("write cache lock").active.bytes >= self.half_bytes_max
    }

    /// The entry, from either half.
    pub fn get(&self, ledger_id: LedgerId, entry_id: EntryId) -> Option<Entry> {
        let state = self.state.lock().expect("write cache lock");
        if let Some(e) = state.active.entries.get(&(ledger_id, entry_id)) {
            return Some(e.clone());
        }
        state.flushing.as_ref()?.entries.get(&(ledger_id, entry_id)).cloned()
    }

    /// The highest entry id of the ledger in either half.
    pub fn last_entry(&self, ledger_id: LedgerId) -> Option<EntryId> {
        let state = self.state.lock().expect("write cache lock");
        let a = state.active.last_entry(ledger_id);
        let f = state.flushing.as_ref().and_then(|h| h.last_entry(ledger_id));
        a.max(f)
    }

    /// Swaps the halves; runs `under_lock` while no insert can happen, so a journal mark
    /// read there is consistent with the snapshot. Returns `None` if a flush is in progress.
    pub fn swap<T>(&self, under_lock: impl FnOnce() -> T) -> Option<(Arc<CacheHalf>, T)> {
        let mut state = self.state.lock().expect("write cache lock");
        if state.flushing.is_some() {
            return None;
        }
        let half = Arc::new(std::mem::take(&mut state.active));
        state.flushing = Some(half.clone());
        let t = under_lock();
        self.space.notify_all();
        Some((half, t))
    }

    /// Drops the flushed half: its entries are now readable through the index.
    pub fn finish_flush(&self) {
        self.finish_flush_carrying(Vec::new());
    }

    /// Drops the flushed half but for `carry`, its entries not readable through the index
    /// yet (single-write mode: written to the journal after the flush's mark), which move
    /// into the active half in the same critical section. A newer copy of an entry already
    /// in the active half wins.
    pub fn finish_flush_carrying(&self, carry: Vec<Entry>) {
        let mut state = self.state.lock().expect("write cache lock");
        assert!(state.flushing.is_some(), "finish_flush without a flush");
        for e in carry {
            let size = e.encoded_len();
            if let std::collections::btree_map::Entry::Vacant(v) =
                state.active.entries.entry((e.ledger_id(), e.entry_id()))
            {
                v.insert(e);
                state.active.bytes += size;
            }
        }
        state.flushing = None;
        self.space.notify_all();
    }

    /// The entry ids of a ledger in either half.
    pub fn entry_ids(&self, ledger_id: LedgerId) -> Vec<EntryId> {
        let state = self.state.lock().expect("write cache lock");
        let range = (ledger_id, 0)..=(ledger_id, EntryId::MAX);
        let mut ids: Vec<EntryId> =
            state.active.entries.range(range.clone()).map(|(k, _)| k.1).collect();
        if let Some(f) = &state.flushing {
            ids.extend(f.entries.range(range).map(|(k, _)| k.1));
        }
        ids
    }

    /// Entries of a ledger in either half, with their encoded bytes (an entry being flushed
    /// may also be in the index already: counted once, here).
    pub fn usage(&self, ledger_id: LedgerId) -> std::collections::BTreeMap<EntryId, u64> {
        let state = self.state.lock().expect("write cache lock");
        let range = (ledger_id, 0)..=(ledger_id, EntryId::MAX);
        let mut out = std::collections::BTreeMap::new();
        let halves = std::iter::once(&state.active).chain(state.flushing.as_deref());
        for half in halves {
            for (k, e) in half.entries.range(range.clone()) {
                out.insert(k.1, e.encoded_len() as u64);
            }
        }
        out
    }

    /// Drops the ledger's entries from both halves.
    pub fn remove_ledger(&self, ledger_id: LedgerId) {
        let mut state = self.state.lock().expect("write cache lock");
        let keys: Vec<EntryKey> = state
            .active
            .entries
            .range((ledger_id, 0)..=(ledger_id, EntryId::MAX))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(e) = state.active.entries.remove(&k) {
                state.active.bytes -= e.encoded_len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_proto::EntryHeader;

    fn entry(l: u64, e: i64, n: usize) -> Entry {
        Entry::encode(
            EntryHeader { ledger_id: l, entry_id: e, last_add_confirmed: -1, length: 0 },
            &vec![0; n],
        )
    }

    #[test]
    fn a_full_cache_applies_backpressure_then_overloads() {
        let c = WriteCache::new(2 * 1000);
        c.insert(entry(1, 0, 900), Duration::ZERO, &|| {}).unwrap();
        let asked = std::cell::Cell::new(0);
        let r =
            c.insert(entry(1, 1, 900), Duration::from_millis(1), &|| asked.set(asked.get() + 1));
        assert!(matches!(r, Err(StorageError::Overloaded { .. })));
        assert!(asked.get() >= 1, "a waiting writer asks for a flush");
        let (half, ()) = c.swap(|| ()).unwrap();
        assert_eq!(half.entries.len(), 1);
        assert!(c.swap(|| ()).is_none(), "one flush at a time");
        c.insert(entry(1, 1, 900), Duration::ZERO, &|| {}).unwrap();
        assert_eq!(c.get(1, 0).unwrap(), entry(1, 0, 900), "the flushing half is still readable");
        assert_eq!(c.last_entry(1), Some(1));
        c.finish_flush();
        assert!(c.get(1, 0).is_none());
    }

    #[test]
    fn a_waiting_writer_proceeds_when_the_flusher_swaps() {
        let c = Arc::new(WriteCache::new(2 * 1000));
        c.insert(entry(1, 0, 900), Duration::ZERO, &|| {}).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let c2 = c.clone();
        let writer = std::thread::spawn(move || {
            c2.insert(entry(1, 1, 900), Duration::from_secs(60), &|| {
                let _ = tx.send(());
            })
        });
        rx.recv().unwrap(); // the writer is waiting and asked for a flush
        c.swap(|| ()).unwrap();
        writer.join().unwrap().unwrap();
        assert!(c.get(1, 1).is_some());
    }
}
