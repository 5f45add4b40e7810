//! The entry logs a flush writes to: one shared log, or one per ledger
//! (`entry_log_per_ledger`, at most `entry_log_per_ledger_open_max` open).
//!
//! This set is the one place that creates, rotates, seals and records entry logs. Every
//! change of a log's state is put into the caller's index batch, so it commits together
//! with the locations that point into the log: a log is recorded active before any
//! location in it commits, and sealed no earlier than the batch that holds its last one.
//!
//! Architecture invariant: nothing outside this module creates or seals an entry-log
//! writer of a running storage (recovery seals logs a crash left active, before this set
//! exists).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use folio_proto::clock::Clock;
use folio_proto::{Entry, LedgerId};

use crate::config::StorageConfig;
use crate::entry_log::EntryLogWriter;
use crate::error::Result;
use crate::fs::FileSystem;
use crate::index::{self, EntryLocation, EntryLogState, KvBatch, Table};

/// When logs rotate, from [`StorageConfig`].
#[derive(Debug, Clone)]
struct Rotation {
    bytes_max: u64,
    sync_bytes: u64,
    per_ledger: bool,
    per_ledger_open_max: usize,
    idle_ms: u64,
}

#[derive(Debug)]
pub(super) struct EntryLogSet {
    fs: Arc<dyn FileSystem>,
    clock: Arc<dyn Clock>,
    dir: PathBuf,
    rotation: Rotation,
    /// Shared mode (and compaction output in both modes): the current log.
    shared: Option<EntryLogWriter>,
    /// When (clock ms) a flush last wrote to `shared`.
    shared_touched_ms: u64,
    /// Per-ledger mode: each ledger's open log and when (clock ms) a flush last wrote to it.
    per_ledger: BTreeMap<LedgerId, (EntryLogWriter, u64)>,
    next_log_id: u64,
}

impl EntryLogSet {
    /// A set with no log open; the next log created gets `next_log_id`.
    pub(super) fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        config: &StorageConfig,
        next_log_id: u64,
    ) -> EntryLogSet {
        assert!(next_log_id >= 1, "entry log ids start at 1");
        EntryLogSet {
            fs,
            clock: config.clock.clone(),
            dir,
            rotation: Rotation {
                bytes_max: config.entry_log_bytes_max,
                sync_bytes: config.entry_log_sync_bytes,
                per_ledger: config.entry_log_per_ledger,
                per_ledger_open_max: config.entry_log_per_ledger_open_max,
                idle_ms: config.entry_log_idle_rotation.as_millis() as u64,
            },
            shared: None,
            shared_touched_ms: config.clock.now_ms(),
            per_ledger: BTreeMap::new(),
            next_log_id,
        }
    }

    /// Appends a flushed entry to its log (its ledger's own in per-ledger mode, else the
    /// shared one), rotating a full log first; syncs when `entry_log_sync_bytes` are due.
    pub(super) fn append(&mut self, entry: &Entry, batch: &mut KvBatch) -> Result<EntryLocation> {
        let sync_bytes = self.rotation.sync_bytes;
        let writer = if self.rotation.per_ledger {
            self.ledger_writer(entry.ledger_id(), batch)?
        } else {
            self.shared_with_room(batch)?
        };
        let loc = writer.append(entry)?;
        writer.sync_if_due(sync_bytes)?;
        Ok(loc)
    }

    /// Appends a live entry copied out of a log being compacted, to the shared log.
    pub(super) fn append_copy(
        &mut self,
        entry: &Entry,
        batch: &mut KvBatch,
    ) -> Result<EntryLocation> {
        self.shared_with_room(batch)?.append(entry)
    }

    /// End of a flush: syncs every log written, seals logs that went idle (and, per ledger,
    /// those whose ledger is gone), and records how far the still-active logs are durable
    /// (checked by recovery). `wrote`: the flush wrote entries.
    pub(super) fn finish_flush(
        &mut self,
        batch: &mut KvBatch,
        wrote: bool,
        ledger_exists: impl Fn(LedgerId) -> bool,
    ) -> Result<()> {
        if let Some(w) = self.shared.as_mut() {
            w.sync()?;
        }
        if self.rotation.per_ledger {
            for (w, _) in self.per_ledger.values_mut() {
                w.sync()?;
            }
            let (idle_ms, now_ms) = (self.rotation.idle_ms, self.clock.now_ms());
            let done: Vec<LedgerId> = self
                .per_ledger
                .iter()
                .filter(|(l, (_, t))| now_ms.saturating_sub(*t) >= idle_ms || !ledger_exists(**l))
                .map(|(l, _)| *l)
                .collect();
            for l in done {
                self.seal_ledger_log(l, batch)?;
            }
        } else if wrote {
            self.shared_touched_ms = self.clock.now_ms();
        } else if self.clock.now_ms().saturating_sub(self.shared_touched_ms)
            >= self.rotation.idle_ms
            && self.shared.as_ref().is_some_and(|w| !w.is_empty())
        {
            // A log nobody writes to any more is sealed so GC can give its space back once
            // its ledgers are deleted; the next entry opens a new log.
            let w = self.shared.take().expect("checked");
            tracing::debug!(log_id = w.log_id(), "sealing an idle entry log");
            Self::seal(w, batch)?;
        }
        let active = self.shared.iter_mut().chain(self.per_ledger.values_mut().map(|(w, _)| w));
        for w in active {
            if let Some(state) = w.durable_state() {
                batch.put(Table::Meta, index::elog_key(w.log_id()), state.encode());
            }
        }
        Ok(())
    }

    /// End of a compaction: syncs the copies; in per-ledger mode also seals the shared
    /// log, which no flush writes to and so nothing else would ever seal (L2).
    pub(super) fn finish_compaction(&mut self, batch: &mut KvBatch) -> Result<()> {
        if let Some(w) = self.shared.as_mut() {
            w.sync()?;
        }
        if self.rotation.per_ledger
            && let Some(w) = self.shared.take()
        {
            Self::seal(w, batch)?;
        }
        Ok(())
    }

    /// Seals a ledger's own log (per-ledger mode), if it has one open.
    pub(super) fn seal_ledger_log(
        &mut self,
        ledger_id: LedgerId,
        batch: &mut KvBatch,
    ) -> Result<()> {
        match self.per_ledger.remove(&ledger_id) {
            Some((w, _)) => Self::seal(w, batch),
            None => Ok(()),
        }
    }

    /// Whether a flush or compaction may still write to this log.
    pub(super) fn is_active(&self, log_id: u64) -> bool {
        self.shared.as_ref().is_some_and(|w| w.log_id() == log_id)
            || self.per_ledger.values().any(|(w, _)| w.log_id() == log_id)
    }

    /// Records the next log id, so no id is reused after a crash.
    pub(super) fn record_next_log_id(&self, batch: &mut KvBatch) {
        batch.put(
            Table::Meta,
            index::META_NEXT_LOG_ID.to_vec(),
            self.next_log_id.to_le_bytes().to_vec(),
        );
    }

    /// The ledger's own log: rotated when full; the least recently used log is sealed when
    /// `entry_log_per_ledger_open_max` are open.
    fn ledger_writer(
        &mut self,
        ledger_id: LedgerId,
        batch: &mut KvBatch,
    ) -> Result<&mut EntryLogWriter> {
        let full = self
            .per_ledger
            .get(&ledger_id)
            .is_some_and(|(w, _)| w.size() >= self.rotation.bytes_max);
        if full {
            self.seal_ledger_log(ledger_id, batch)?;
        }
        if !self.per_ledger.contains_key(&ledger_id) {
            if self.per_ledger.len() >= self.rotation.per_ledger_open_max {
                let lru = self
                    .per_ledger
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(l, _)| *l)
                    .expect("at the limit, so not empty");
                self.seal_ledger_log(lru, batch)?;
            }
            let w = self.create(batch)?;
            self.per_ledger.insert(ledger_id, (w, self.clock.now_ms()));
        }
        assert!(self.per_ledger.len() <= self.rotation.per_ledger_open_max.max(1));
        let slot = self.per_ledger.get_mut(&ledger_id).expect("just ensured");
        slot.1 = self.clock.now_ms();
        Ok(&mut slot.0)
    }

    /// The shared log, after sealing it and starting a new one if it is full.
    fn shared_with_room(&mut self, batch: &mut KvBatch) -> Result<&mut EntryLogWriter> {
        if self.shared.as_ref().is_some_and(|w| w.size() >= self.rotation.bytes_max) {
            let w = self.shared.take().expect("checked");
            Self::seal(w, batch)?;
        }
        if self.shared.is_none() {
            self.shared = Some(self.create(batch)?);
        }
        Ok(self.shared.as_mut().expect("just ensured"))
    }

    /// Creates the next log and records it active.
    fn create(&mut self, batch: &mut KvBatch) -> Result<EntryLogWriter> {
        let id = self.next_log_id;
        self.next_log_id += 1;
        let w = EntryLogWriter::create(self.fs.as_ref(), &self.dir, id)?;
        batch.put(Table::Meta, index::elog_key(id), EntryLogState::active().encode());
        Ok(w)
    }

    /// Seals a log and records its final state: the one place a running storage seals.
    fn seal(w: EntryLogWriter, batch: &mut KvBatch) -> Result<()> {
        let id = w.log_id();
        let state = w.seal()?;
        assert!(state.sealed, "a sealed log's state says sealed");
        batch.put(Table::Meta, index::elog_key(id), state.encode());
        Ok(())
    }
}
