//! Reads by offset and by time. The newest entries come from the tail cache (`tail.rs`);
//! a reader continuing where its last read ended takes its read stream (`stream.rs`);
//! otherwise the offset index (`index.rs`) finds the entry holding an offset without
//! reading entries when it knows the ledger (always for the ledger this process appends
//! to; for others once read from their start), else it narrows a binary search over entry
//! headers. A closed ledger the index does not know has its persisted index loaded first
//! (`records::OffsetIndexRecord`), so a new owner or a restarted broker searches only
//! within its stride. Closed ledgers are read through cached readers, the open one through
//! its writer.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use folio_client::{LedgerReader, LedgerWriter};
use folio_meta::records::Record;
use folio_meta::{Compare, Txn};
use folio_proto::{ENTRY_HEADER_BYTES, EntryId};

use super::index::Located;
use super::stream::ReadStream;
use super::{LogState, ManagedLog};
use crate::entry::{self, LogEntry};
use crate::error::{LogError, Result};
use crate::limits::{OFFSET_INDEX_RECORD_BYTES_MAX, READERS_MAX, STREAM_WINDOW_BYTES_MAX};
use crate::records::{LedgerInfo, OffsetIndexRecord};

/// The chain's record of `e`'s ledger if `e` is the last entry of that closed ledger;
/// `ledger` caches the record, so the chain is searched once per ledger a read passes.
fn ended_closed_ledger(
    view: &super::View,
    ledger: &mut Option<LedgerInfo>,
    e: &LogEntry,
) -> Option<LedgerInfo> {
    if ledger.is_none_or(|l| l.ledger_id != e.ledger_id) {
        *ledger = view.find(e.base_offset).and_then(|i| view.get(i));
    }
    ledger.filter(|l| {
        l.ledger_id == e.ledger_id && l.is_closed() && e.entry_id + 1 == l.entries as i64
    })
}

impl ManagedLog {
    /// Reads batches from the one holding `offset` on, up to `max_bytes` of payload (at
    /// least one batch; no batch that would go past it) and `max_entries` batches. An empty
    /// result means `offset` is the end of the log.
    ///
    /// The newest entries come from memory (`tail.rs`); others through the read stream
    /// that ends at `offset` if an earlier read left one (`stream.rs`), else through a new
    /// stream from the entry the offset index (or a search) finds. The stream keeps reading
    /// ahead for the next read.
    pub async fn read(
        &self,
        offset: u64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Result<Vec<LogEntry>> {
        let chain = self.view().chain;
        match self.read_once(offset, max_bytes, max_entries).await {
            // A compaction swapped ledgers this read stood in (and the trash may have
            // deleted them): the same offsets are in the new chain.
            Err(_) if !Arc::ptr_eq(&chain, &self.view().chain) => {
                self.read_once(offset, max_bytes, max_entries).await
            }
            other => other,
        }
    }

    async fn read_once(
        &self,
        offset: u64,
        max_bytes: usize,
        max_entries: usize,
    ) -> Result<Vec<LogEntry>> {
        let status = self.status();
        if matches!(status.state, LogState::Deleted) {
            return Err(LogError::Deleted(self.shared.name.clone()));
        }
        if offset < status.start_offset || offset > status.end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: status.start_offset,
                end: status.end_offset,
            });
        }
        if offset == status.end_offset || max_entries == 0 {
            return Ok(Vec::new());
        }
        let tail = self.shared.tail.lock().expect("tail lock").read(
            offset,
            status.end_offset,
            max_bytes,
            max_entries,
        );
        if let Some(out) = tail.filter(|o| !o.is_empty()) {
            self.shared.stats.reads_from_tail.fetch_add(1, Relaxed);
            // A stream left at this offset is behind the reader now.
            drop(self.shared.streams.lock().expect("streams lock").take(offset));
            return Ok(out);
        }
        let view = self.view();
        let kept = self.shared.streams.lock().expect("streams lock").take(offset);
        let mut stream = match kept {
            Some(s) => {
                self.shared.stats.reads_continued.fetch_add(1, Relaxed);
                s
            }
            None => {
                let Some(li) = view.find(offset) else {
                    return Ok(Vec::new());
                };
                let first = view.get(li).expect("found ledger exists");
                let entry_id = self.locate(&first, view.current.as_deref(), offset).await?;
                ReadStream::new(offset, &view, li, entry_id)
            }
        };
        let window = max_bytes
            .saturating_add(self.shared.config.read_window_bytes)
            .min(STREAM_WINDOW_BYTES_MAX.max(max_bytes));
        let mut out: Vec<LogEntry> = Vec::new();
        let mut bytes = 0usize;
        let mut ledger: Option<LedgerInfo> = None;
        while out.len() < max_entries && bytes < max_bytes {
            stream.fill(self, &view, window, max_bytes - bytes);
            let e = match stream.peek().await {
                None => break,
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    // The stream is dropped (its reads aborted); a trim may have taken its
                    // ledgers.
                    let start = self.start_offset();
                    if offset < start {
                        let end = self.end_offset();
                        return Err(LogError::OffsetOutOfRange { offset, start, end });
                    }
                    return Err(e);
                }
            };
            if e.next_offset() > status.end_offset
                || (!out.is_empty() && bytes + e.payload.len() > max_bytes)
            {
                break;
            }
            let e = stream.take();
            debug_assert!(
                out.last().map_or(e.base_offset <= offset && offset < e.next_offset(), |l| {
                    l.next_offset() == e.base_offset
                }),
                "read stream out of order at {}",
                e.base_offset
            );
            // In entry order, so the offset index's dense prefix grows.
            self.shared.index.lock().expect("index lock").learn(
                e.ledger_id,
                e.entry_id,
                e.base_offset,
            );
            if let Some(info) = ended_closed_ledger(&view, &mut ledger, &e) {
                self.persist_learned_index(&info).await;
            }
            bytes += e.payload.len();
            out.push(e);
        }
        // Keep reading ahead for the read that continues where this one ends.
        stream.fill(self, &view, window, 0);
        self.shared.streams.lock().expect("streams lock").put(stream);
        Ok(out)
    }

    /// The offset of the first batch whose timestamp (the log's running maximum) is at or
    /// after `timestamp`; `None` when every batch is older.
    pub async fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<u64>> {
        let start = self.start_offset();
        let view = self.view();
        let current = view.current.clone();
        let Some(info) = (0..view.len())
            .filter_map(|i| view.get(i))
            .find(|l| l.entries > 0 && l.max_publish_ms >= timestamp)
        else {
            return Ok(None);
        };
        let info = &info;
        // Binary search for the first entry with max_timestamp >= timestamp.
        let (mut lo, mut hi) = (0i64, info.entries as i64 - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.read_entry(info, current.as_deref(), mid).await?;
            if e.max_timestamp >= timestamp {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let e = self.read_entry(info, current.as_deref(), lo).await?;
        Ok(Some(e.base_offset.max(start)))
    }

    /// The entry of `info` that holds `offset`: from the offset index when it knows, else
    /// a binary search over entry headers in the range the index narrowed it to.
    async fn locate(
        &self,
        info: &LedgerInfo,
        current: Option<&LedgerWriter>,
        offset: u64,
    ) -> Result<EntryId> {
        let mut located = self.shared.index.lock().expect("index lock").locate(
            info.ledger_id,
            info.entries,
            offset,
        );
        if matches!(located, Located::Between(..)) && self.load_offset_index(info).await {
            located = self.shared.index.lock().expect("index lock").locate(
                info.ledger_id,
                info.entries,
                offset,
            );
        }
        let (mut lo, mut hi) = match located {
            Located::Exact(e) => {
                self.shared.stats.locate_exact.fetch_add(1, Relaxed);
                return Ok(e);
            }
            Located::Between(lo, hi) => (lo, hi),
        };
        self.shared.stats.locate_searches.fetch_add(1, Relaxed);
        // Invariant: the answer is in [lo, hi].
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            let e = self.read_entry(info, current, mid).await?;
            self.shared.index.lock().expect("index lock").learn(info.ledger_id, mid, e.base_offset);
            if e.base_offset <= offset {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(lo)
    }

    /// Loads the persisted offset index of closed ledger `info` (once per ledger): true if
    /// the index learned from it. A missing or damaged record only costs the search.
    async fn load_offset_index(&self, info: &LedgerInfo) -> bool {
        if !info.is_closed()
            || !self.shared.index.lock().expect("index lock").look_up(info.ledger_id)
        {
            return false;
        }
        let key = self.shared.env.keys.offset_index(info.ledger_id);
        let record = match self.shared.env.meta.get(&key).await {
            Ok(Some(v)) => OffsetIndexRecord::decode(&key, &v.value),
            Ok(None) => return false,
            Err(e) => Err(e),
        };
        match record {
            Ok(r) if r.ledger_id == info.ledger_id && r.entries == info.entries => {
                self.shared.index.lock().expect("index lock").load(&r);
                self.shared.stats.offset_indexes_loaded.fetch_add(1, Relaxed);
                true
            }
            Ok(r) => {
                tracing::warn!(
                    log = self.name(),
                    ledger = info.ledger_id,
                    entries = info.entries,
                    record_ledger = r.ledger_id,
                    record_entries = r.entries,
                    "a persisted offset index does not match its ledger; searching instead"
                );
                false
            }
            Err(e) => {
                tracing::warn!(log = self.name(), ledger = info.ledger_id, error = %e, "reading a persisted offset index failed; searching instead");
                false
            }
        }
    }

    /// After a read of the last entry of closed ledger `info`, if the reads taught its index
    /// whole (a ledger recovered after its writer died has none persisted): persists it, once,
    /// in a transaction that requires the ledger's metadata to exist and no index to be
    /// there. The deleter deletes a ledger's metadata before its index, so an index put
    /// here never outlives its ledger (L1). Best effort: a failure only costs later
    /// readers a search.
    async fn persist_learned_index(&self, info: &LedgerInfo) {
        let ledger_id = info.ledger_id;
        let record = {
            let mut index = self.shared.index.lock().expect("index lock");
            let Some(dense) = index.dense(ledger_id, info.entries) else { return };
            let record =
                OffsetIndexRecord::from_dense(ledger_id, dense, OFFSET_INDEX_RECORD_BYTES_MAX);
            if !index.offer(ledger_id) {
                return;
            }
            record
        };
        let Some(record) = record else { return };
        let keys = &self.shared.env.keys;
        let key = keys.offset_index(ledger_id);
        let txn = Txn::new()
            .compare(Compare::Exists(keys.ledger(ledger_id)))
            .compare(Compare::Absent(key.clone()))
            .put(key, record.encode());
        match self.shared.env.meta.txn(txn).await {
            Ok(out) if out.succeeded => {
                self.shared.stats.offset_indexes_rebuilt.fetch_add(1, Relaxed);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(log = self.name(), ledger = ledger_id, error = %e, "persisting a learned offset index failed")
            }
        }
    }

    pub(super) async fn read_entry(
        &self,
        info: &LedgerInfo,
        current: Option<&LedgerWriter>,
        entry_id: EntryId,
    ) -> Result<LogEntry> {
        let reader = match current {
            Some(w) if w.id() == info.ledger_id => Arc::new(w.reader()),
            _ => self.reader(info.ledger_id).await?,
        };
        let e = reader.read(entry_id).await?;
        let bytes = e.as_bytes().slice(ENTRY_HEADER_BYTES..);
        let (h, payload) = entry::decode(&bytes)
            .ok_or(LogError::CorruptEntry { ledger_id: info.ledger_id, entry_id })?;
        Ok(LogEntry {
            base_offset: h.base_offset,
            record_count: h.record_count,
            max_timestamp: h.max_timestamp,
            ledger_id: info.ledger_id,
            entry_id,
            payload,
        })
    }

    async fn reader(&self, ledger_id: u64) -> Result<Arc<LedgerReader>> {
        if let Some(r) = self.shared.readers.lock().expect("readers lock").get(&ledger_id) {
            return Ok(r.clone());
        }
        let r = Arc::new(self.shared.env.client.open(ledger_id).await?);
        let mut readers = self.shared.readers.lock().expect("readers lock");
        if readers.len() >= READERS_MAX
            && let Some(k) = readers.keys().next().copied()
        {
            readers.remove(&k);
        }
        readers.insert(ledger_id, r.clone());
        Ok(r)
    }
}
