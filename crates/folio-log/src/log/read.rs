//! Reads by offset and by time. The offset index (`index.rs`) finds the entry holding an
//! offset without reading entries when it knows the ledger (always for the ledger this
//! process appends to; for others once read from their start), otherwise it narrows a binary
//! search over entry headers; closed ledgers are read through cached readers, the open one
//! through its writer.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use folio_client::{LedgerReader, LedgerWriter};
use folio_proto::{ENTRY_HEADER_BYTES, EntryId};

use super::index::Located;
use super::{LogState, ManagedLog};
use crate::entry::{self, LogEntry};
use crate::error::{LogError, Result};
use crate::limits::{READ_AHEAD_MAX, READERS_MAX};
use crate::records::LedgerInfo;

impl ManagedLog {
    /// Reads batches from the one holding `offset` on, up to `max_bytes` of payload (at
    /// least one batch) and `max_entries` batches. An empty result means `offset` is the
    /// end of the log.
    pub async fn read(
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
        let mut out: Vec<LogEntry> = Vec::new();
        if offset == status.end_offset || max_entries == 0 {
            return Ok(out);
        }
        let view = self.view();
        let current = view.current.clone();
        let Some(mut li) = view.find(offset) else {
            return Ok(out);
        };
        let first = view.get(li).expect("found ledger exists");
        let mut entry_id = self.locate(&first, current.as_deref(), offset).await?;
        let mut bytes = 0usize;
        while out.len() < max_entries && (out.is_empty() || bytes < max_bytes) {
            let info = view.get(li).expect("ledger index in range");
            if entry_id >= info.entries as i64 {
                li += 1;
                entry_id = 0;
                match view.get(li) {
                    Some(l) if l.entries > 0 => continue,
                    _ => break,
                }
            }
            // Read ahead: as many entries at once as the bytes left probably hold (by the
            // average entry of what was read so far, or of the ledger), within this ledger
            // and the limits.
            let average = if out.is_empty() {
                (info.bytes / info.entries.max(1)) as usize
            } else {
                bytes / out.len()
            }
            .max(1);
            let window = (max_bytes.saturating_sub(bytes) / average)
                .clamp(1, READ_AHEAD_MAX)
                .min(max_entries - out.len())
                .min((info.entries as i64 - entry_id) as usize);
            let mut reads = Vec::with_capacity(window);
            for id in entry_id..entry_id + window as i64 {
                let (me, current) = (self.clone(), current.clone());
                reads.push(tokio::spawn(async move {
                    me.read_entry(&info, current.as_deref(), id).await
                }));
            }
            let mut done = false;
            for r in reads {
                let e = r
                    .await
                    .map_err(|e| LogError::LedgersUnavailable(format!("read task: {e}")))??;
                // In entry order (the reads ran in parallel), so the dense prefix grows.
                self.shared.index.lock().expect("index lock").learn(
                    e.ledger_id,
                    e.entry_id,
                    e.base_offset,
                );
                if done || e.next_offset() > status.end_offset {
                    done = true;
                    continue;
                }
                bytes += e.payload.len();
                out.push(e);
                entry_id += 1;
            }
            if done {
                break;
            }
        }
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
        let located = self.shared.index.lock().expect("index lock").locate(
            info.ledger_id,
            info.entries,
            offset,
        );
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

    async fn read_entry(
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
