//! Read streams: a reader's position in the log with the entries after it already in
//! flight from the bookies, kept between reads.
//!
//! A consumer catching up reads the log in order, one fetch after another. Each `read`
//! that ends at offset `n` leaves its stream keyed by `n`; the next read at `n` takes it
//! and finds its first entries already read (or on their way), without locating `n` again
//! and without waiting for a round trip per window. A stream keeps entry reads in flight
//! up to a window in bytes (estimated from each ledger's average entry), across ledger
//! boundaries, and never asks for entries past the log's confirmed end.
//!
//! Limits: `STREAMS_MAX` streams per log (the least recently used goes, its reads
//! aborted), `STREAM_ENTRIES_MAX` reads in flight per stream, and `PREFETCH_BYTES_MAX`
//! bytes held or in flight in all streams of the process: past it a stream reads only what
//! the read in progress needs.

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use folio_proto::EntryId;
use tokio::task::JoinHandle;

use super::{ManagedLog, View};
use crate::entry::LogEntry;
use crate::error::{LogError, Result};
use crate::limits::{PREFETCH_BYTES_MAX, STREAM_ENTRIES_MAX, STREAMS_MAX};

/// Bytes (estimated for reads in flight) of the entries all read streams of the process
/// hold or have in flight: the sum of their `bytes`.
static PREFETCHED: AtomicUsize = AtomicUsize::new(0);

/// One entry read of a stream: in flight or done, with the bytes it was expected to hold.
#[derive(Debug)]
struct Pending {
    read: JoinHandle<Result<LogEntry>>,
    estimate: usize,
}

/// A reader's position and the entry reads in flight after it (see the module doc).
#[derive(Debug)]
pub(super) struct ReadStream {
    /// The offset the next read continues from: the end of the last entry handed out (or
    /// the offset a new stream was opened at).
    pub(super) next_offset: u64,
    /// Where the next entry read goes: the ledger (and its index in the chain, a hint)...
    ledger_id: u64,
    chain_index: usize,
    /// ...and the entry.
    entry_id: EntryId,
    /// Reads in flight or done, in entry order.
    pending: VecDeque<Pending>,
    /// The first pending entry once read, if the last read left it (it did not fit).
    ready: Option<LogEntry>,
    /// Bytes (estimated) of `pending` and `ready`.
    bytes: usize,
    /// When it was last used (a counter of the log's reads), for eviction.
    pub(super) last_used: u64,
}

impl ReadStream {
    /// A stream whose next entry is `entry_id` of the ledger at `chain_index`, holding
    /// `offset`.
    pub(super) fn new(offset: u64, view: &View, chain_index: usize, entry_id: EntryId) -> Self {
        let ledger_id = view.get(chain_index).map_or(0, |l| l.ledger_id);
        ReadStream {
            next_offset: offset,
            ledger_id,
            chain_index,
            entry_id,
            pending: VecDeque::new(),
            ready: None,
            bytes: 0,
            last_used: 0,
        }
    }

    /// Issues entry reads until `window` bytes (estimated) are in flight or ready, or
    /// `STREAM_ENTRIES_MAX` reads, or the stream reached the log's confirmed end (in
    /// `view`). Beyond `needed` bytes, only while the process's streams hold less than
    /// `PREFETCH_BYTES_MAX`.
    pub(super) fn fill(&mut self, log: &ManagedLog, view: &View, window: usize, needed: usize) {
        while self.bytes < window && self.pending.len() < STREAM_ENTRIES_MAX {
            if self.bytes >= needed && PREFETCHED.load(Relaxed) >= PREFETCH_BYTES_MAX {
                return;
            }
            let Some(info) = self.position(view) else { return };
            let estimate = (info.bytes / info.entries.max(1)).max(1) as usize;
            let (me, current, id) = (log.clone(), view.current.clone(), self.entry_id);
            let read =
                tokio::spawn(async move { me.read_entry(&info, current.as_deref(), id).await });
            self.pending.push_back(Pending { read, estimate });
            self.add_bytes(estimate);
            self.entry_id += 1;
        }
    }

    /// The ledger the next entry read goes to, moving past ledgers read to their end;
    /// `None` at the log's confirmed end (or if the stream's ledger left the chain).
    fn position(&mut self, view: &View) -> Option<crate::records::LedgerInfo> {
        if view.get(self.chain_index).is_none_or(|l| l.ledger_id != self.ledger_id) {
            // The chain changed (trimmed at the front): find the ledger again.
            self.chain_index = (0..view.len())
                .find(|&i| view.get(i).is_some_and(|l| l.ledger_id == self.ledger_id))?;
        }
        loop {
            let info = view.get(self.chain_index)?;
            if self.entry_id < info.entries as i64 {
                return Some(info);
            }
            // Past this ledger's (confirmed) entries: the next ledger, once there is one.
            let next = view.get(self.chain_index + 1)?;
            self.chain_index += 1;
            self.ledger_id = next.ledger_id;
            self.entry_id = 0;
        }
    }

    /// The next entry, read (waiting for its read); `None` when nothing is in flight.
    pub(super) async fn peek(&mut self) -> Option<Result<&LogEntry>> {
        if self.ready.is_none() {
            let p = self.pending.pop_front()?;
            let r = match p.read.await {
                Ok(r) => r,
                Err(e) => Err(LogError::LedgersUnavailable {
                    why: format!("a read task ended without its entry: {e}"),
                    source: Some(std::sync::Arc::new(e)),
                }),
            };
            // The estimate gives way to the entry's real size.
            self.sub_bytes(p.estimate);
            match r {
                Ok(e) => {
                    self.add_bytes(e.payload.len());
                    self.ready = Some(e);
                }
                Err(e) => return Some(Err(e)),
            }
        }
        self.ready.as_ref().map(Ok)
    }

    /// Hands out the entry `peek` returned.
    pub(super) fn take(&mut self) -> LogEntry {
        let e = self.ready.take().expect("take after a successful peek");
        self.sub_bytes(e.payload.len());
        self.next_offset = e.next_offset();
        e
    }

    fn add_bytes(&mut self, n: usize) {
        self.bytes += n;
        PREFETCHED.fetch_add(n, Relaxed);
    }

    fn sub_bytes(&mut self, n: usize) {
        assert!(n <= self.bytes, "read stream: releasing {n} of {} bytes", self.bytes);
        self.bytes -= n;
        PREFETCHED.fetch_sub(n, Relaxed);
    }
}

impl Drop for ReadStream {
    fn drop(&mut self) {
        for p in &self.pending {
            p.read.abort();
        }
        PREFETCHED.fetch_sub(self.bytes, Relaxed);
    }
}

/// Bytes held or in flight in the read streams of this process (see `PREFETCH_BYTES_MAX`).
pub fn prefetched_bytes() -> usize {
    PREFETCHED.load(Relaxed)
}

/// The read streams of one log, by the offset they continue from.
#[derive(Debug, Default)]
pub(super) struct Streams {
    streams: Vec<ReadStream>,
    /// Reads so far: the clock of `last_used`.
    uses: u64,
}

impl Streams {
    /// The stream continuing from `offset`, if one is kept.
    pub(super) fn take(&mut self, offset: u64) -> Option<ReadStream> {
        let i = self.streams.iter().position(|s| s.next_offset == offset)?;
        Some(self.streams.swap_remove(i))
    }

    /// Keeps `s` for the read that continues from it; the least recently used stream goes
    /// beyond `STREAMS_MAX`.
    pub(super) fn put(&mut self, mut s: ReadStream) {
        self.uses += 1;
        s.last_used = self.uses;
        self.streams.push(s);
        if self.streams.len() > STREAMS_MAX {
            let oldest = (0..self.streams.len())
                .min_by_key(|&i| self.streams[i].last_used)
                .expect("streams not empty");
            self.streams.swap_remove(oldest);
        }
    }

    /// Drops every stream (the chain under them changed).
    pub(super) fn clear(&mut self) {
        self.streams.clear();
    }

    /// Streams kept.
    pub(super) fn len(&self) -> usize {
        self.streams.len()
    }
}
