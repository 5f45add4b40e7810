//! Sealing and extending the chain: the last ledger closed with what its writer knows (or
//! fenced and recovered by a new owner), a new ledger id added, both in one compare-and-set
//! of the log record, with the trash records and the closed ledger's offset index
//! (`records::OffsetIndexRecord`) in the same transaction.

use std::sync::Arc;

use folio_client::CreateOptions;
use folio_meta::records::Record;
use folio_meta::{Compare, Txn};
use folio_proto::{ENTRY_HEADER_BYTES, EntryId};

use super::{Actor, Current};
use crate::LogState;
use crate::entry;
use crate::env::{fence_ledger, ledger_options};
use crate::error::{LogError, Result};
use crate::limits::OFFSET_INDEX_RECORD_BYTES_MAX;
use crate::records::{LedgerInfo, LogRecord, OffsetIndexRecord, TrashRecord};

impl Actor {
    /// Seals the chain's last ledger (with what this owner knows of it, or by recovering
    /// it), then commits the chain with a new ledger id and creates that ledger.
    pub(super) async fn seal_and_extend(&mut self, known: Option<Current>) -> Result<()> {
        self.seal_and_extend_then(known, true).await
    }

    /// `seal_and_extend`, creating the new ledger only if `create` (else it is left to
    /// `retry`, as `uncreated`).
    pub(super) async fn seal_and_extend_then(
        &mut self,
        known: Option<Current>,
        create: bool,
    ) -> Result<()> {
        let env = self.env().clone();
        let now = env.now_ms();
        let mut record = self.record.clone();
        let mut trash = Vec::new();
        let mut offset_index = None;
        if let Some(last) = record.ledgers.last().copied()
            && !last.is_closed()
        {
            let sealed = match known {
                Some(c) => sealed_info(last, c, now),
                None => {
                    let info = self.recover_ledger(last, now).await?;
                    if self.cur.ledger_id == last.ledger_id {
                        self.confirm_recovered(last.ledger_id, info.end_offset());
                    }
                    info
                }
            };
            offset_index = self.seal_into(&mut record, &mut trash, sealed, now);
        }
        let end = record.ledgers.last().map_or(record.start_offset, |l| l.end_offset());
        let end = end.max(record.start_offset);
        if let Some(l) = record.ledgers.iter().rev().find(|l| l.entries > 0) {
            self.max_ts = self.max_ts.max(l.max_publish_ms);
        }
        let id = env.client.allocate_id().await?;
        record.ledgers.push(LedgerInfo::open(id, end));
        let begin_epoch = self.begin_epoch;
        if begin_epoch {
            let epoch = record.epochs.begin(end, record.log_start_offset());
            tracing::debug!(log = self.name(), epoch, start = end, "owner epoch begun");
        }
        self.commit_with_index(record, &trash, offset_index.as_ref()).await?;
        self.begin_epoch &= !begin_epoch;
        // Whatever was left uncreated is sealed now: `id` is the ledger to create.
        let _sealed = self.uncreated.take();
        self.sh
            .stats
            .ledgers_trashed
            .fetch_add(trash.len() as u64, std::sync::atomic::Ordering::Relaxed);
        // Appends still queued keep their offsets: they start this ledger.
        self.next_offset = end + self.queue.iter().map(|p| u64::from(p.records)).sum::<u64>();
        debug_assert!(self.queue.front().is_none_or(|p| p.base_offset == end));
        let c = &self.sh.config;
        let jitter = folio_rt::random::<f64>() * 0.05;
        self.cur = Current {
            ledger_id: id,
            created_ms: now,
            max_age_ms: (c.rollover_max_age.as_millis() as f64 * (1.0 + jitter)) as u64,
            first_ts: -1,
            max_ts: -1,
            ..Current::default()
        };
        if !create {
            self.uncreated = Some(id);
            return Ok(());
        }
        match env.client.create(self.create_options(id)).await {
            Ok(w) => {
                self.set_writer(Some(Arc::new(w)));
                tracing::debug!(log = self.name(), ledger = id, first_offset = end, "ledger added");
                self.set_state(LogState::Open);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(log = self.name(), ledger = id, error = %e, "creating a ledger failed; retrying");
                self.uncreated = Some(id);
                Err(e.into())
            }
        }
    }

    /// After recovering the current ledger `ledger_id`: the queued appends it holds (sent
    /// before its writer failed, and found by the recovery) are durable now. They are
    /// acknowledged as its next entries, not sent again: sent again they would take
    /// offsets the ledger already holds.
    fn confirm_recovered(&mut self, ledger_id: u64, end: u64) {
        while self.queue.front().is_some_and(|p| p.base_offset + u64::from(p.records) <= end) {
            let p = self.queue.pop_front().expect("front exists");
            let entry_id = self.cur.entries as EntryId;
            self.confirm(p, ledger_id, entry_id);
        }
    }

    /// Replaces the chain's open last ledger in `record` by `sealed` (or, empty, moves it to
    /// `trash`). Returns its offset index to persist when this actor wrote the ledger (its
    /// index is then complete).
    pub(super) fn seal_into(
        &self,
        record: &mut LogRecord,
        trash: &mut Vec<TrashRecord>,
        sealed: LedgerInfo,
        now: u64,
    ) -> Option<OffsetIndexRecord> {
        let last = record.ledgers.pop();
        assert!(
            last.is_some_and(|l| l.ledger_id == sealed.ledger_id && !l.is_closed()),
            "sealing the chain's open last ledger"
        );
        if sealed.entries == 0 {
            trash.push(TrashRecord::new(sealed.ledger_id, self.name(), "empty", now));
            // With every earlier ledger trimmed the chain is empty now: the log start keeps
            // the end, so no offset is ever handed out twice.
            if record.ledgers.is_empty() {
                record.start_offset = record.start_offset.max(sealed.first_offset);
            }
            return None;
        }
        record.ledgers.push(sealed);
        let index = self.sh.index.lock().expect("index lock");
        let dense = index.dense(sealed.ledger_id, sealed.entries)?;
        OffsetIndexRecord::from_dense(sealed.ledger_id, dense, OFFSET_INDEX_RECORD_BYTES_MAX)
    }

    /// After a clean close of the current ledger: the chain records it closed, with its
    /// offset index, so the next owner neither recovers it nor searches it.
    pub(super) async fn seal_on_close(&mut self, ledger_id: u64) -> Result<()> {
        let mut record = self.record.clone();
        let Some(last) = record.ledgers.last().copied() else { return Ok(()) };
        if last.ledger_id != ledger_id || last.is_closed() {
            return Ok(());
        }
        let now = self.env().now_ms();
        let mut trash = Vec::new();
        let index = self.seal_into(&mut record, &mut trash, sealed_info(last, self.cur, now), now);
        self.commit_with_index(record, &trash, index.as_ref()).await
    }

    /// Ledger `id` is created only while the log's record is still the one this actor
    /// committed (listing the id): after the log was deleted, and its ledgers with it, a
    /// slow owner can never create the id again and acknowledge appends into it (L1, D1).
    pub(super) fn create_options(&self, id: u64) -> CreateOptions {
        let c = &self.sh.config;
        let mut o =
            ledger_options(self.name(), id, (c.ensemble_size, c.write_quorum, c.ack_quorum));
        o.guard.push(Compare::Version(self.env().keys.log(self.name()), self.version));
        o
    }

    /// Fences and recovers a ledger that the chain lists as open; a ledger that was never
    /// created is created and closed here, so nobody can create it later.
    pub(super) async fn recover_ledger(
        &mut self,
        last: LedgerInfo,
        now: u64,
    ) -> Result<LedgerInfo> {
        let client = self.env().client.clone();
        let id = last.ledger_id;
        let reader = fence_ledger(&client, id, || self.create_options(id)).await?;
        let last_entry = reader.last_entry_id().unwrap_or(-1);
        let mut info =
            LedgerInfo { entries: (last_entry + 1) as u64, bytes: 0, close_ms: now, ..last };
        if last_entry >= 0 {
            let read = |e: EntryId| {
                let reader = &reader;
                async move {
                    let entry = reader.read(e).await?;
                    let bytes = entry.as_bytes().slice(ENTRY_HEADER_BYTES..);
                    entry::decode(&bytes)
                        .map(|(h, _)| h)
                        .ok_or(LogError::CorruptEntry { ledger_id: id, entry_id: e })
                }
            };
            let first = read(0).await?;
            let lastly = read(last_entry).await?;
            info.bytes = reader.metadata().length;
            info.records = lastly.base_offset + u64::from(lastly.record_count) - last.first_offset;
            info.first_publish_ms = first.max_timestamp;
            info.max_publish_ms = lastly.max_timestamp;
        }
        tracing::info!(
            log = self.name(),
            ledger = id,
            entries = info.entries,
            "recovered the last ledger"
        );
        Ok(info)
    }

    /// Commits `record` (CAS on the version) with `trash` records, in one transaction;
    /// memory follows only a commit.
    pub(super) async fn commit(&mut self, record: LogRecord, trash: &[TrashRecord]) -> Result<()> {
        self.commit_with_index(record, trash, None).await
    }

    /// `commit`, also putting a closed ledger's offset index (see `records.rs`).
    pub(super) async fn commit_with_index(
        &mut self,
        record: LogRecord,
        trash: &[TrashRecord],
        offset_index: Option<&OffsetIndexRecord>,
    ) -> Result<()> {
        // Only a take-over begins an epoch; every other commit keeps the history.
        assert!(
            self.begin_epoch || record.epochs == self.record.epochs,
            "log {}: a commit changes the owner epochs outside a take-over",
            self.name()
        );
        let env = self.env().clone();
        let key = env.keys.log(self.name());
        let mut txn = Txn::new()
            .compare(Compare::Version(key.clone(), self.version))
            .put(key.clone(), record.encode());
        let carried = std::mem::take(&mut self.carried_trash);
        let trash: Vec<TrashRecord> = trash.iter().chain(&carried).cloned().collect();
        for t in &trash {
            txn = txn.put(env.keys.trash_ledger(t.ledger_id), t.encode());
        }
        if let Some(x) = offset_index {
            debug_assert!(
                record.ledgers.iter().any(|l| l.ledger_id == x.ledger_id && l.is_closed())
            );
            txn = txn.put(env.keys.offset_index(x.ledger_id), x.encode());
        }
        let out = env.meta.txn(txn).await?;
        if !out.succeeded {
            self.fenced();
            return Err(LogError::Fenced(self.name().into()));
        }
        self.version = out.revision;
        self.chain = Arc::new(record.ledgers.clone());
        self.record = record;
        let gone: Vec<u64> = trash.iter().map(|t| t.ledger_id).collect();
        if !gone.is_empty() {
            let mut index = self.sh.index.lock().expect("index lock");
            let mut readers = self.sh.readers.lock().expect("readers lock");
            for id in &gone {
                index.remove(*id);
                readers.remove(id);
            }
        }
        self.publish();
        Ok(())
    }
}

/// The chain's record of `last`, closed at `now` with what its writer knows (`c`).
fn sealed_info(last: LedgerInfo, c: Current, now: u64) -> LedgerInfo {
    LedgerInfo {
        entries: c.entries,
        bytes: c.bytes,
        records: c.records,
        first_publish_ms: c.first_ts,
        max_publish_ms: c.max_ts,
        close_ms: now,
        ..last
    }
}
