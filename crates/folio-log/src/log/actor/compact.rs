//! The actor's side of compaction (`log/compaction.rs`): granting a run of closed ledgers
//! with an output ledger whose id is committed first, swapping the output in, and
//! abandoning it. Each is one compare-and-set of the log record.

use std::sync::atomic::Ordering::Relaxed;

use super::Actor;
use crate::LogState;
use crate::error::{LogError, Result};
use crate::log::compaction::{COMPACTION_CLEAN_END, COMPACTION_OUTPUT, CompactionReport, Granted};
use crate::records::{LedgerInfo, OffsetIndexRecord, TrashRecord};

impl Actor {
    fn usable(&self) -> Result<()> {
        if matches!(self.state, LogState::Open | LogState::Rolling | LogState::Failed) {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    /// The output ledger a compaction in progress writes, if any.
    pub(super) fn compaction_output(&self) -> Option<u64> {
        self.record.properties.get(COMPACTION_OUTPUT).and_then(|v| v.parse().ok())
    }

    /// Takes over a previous owner's compaction that never swapped in: its output (if it
    /// was ever created) goes to the trash with the take-over's commit.
    pub(super) fn orphaned_compaction(&mut self, now: u64) -> Option<TrashRecord> {
        let id = self.compaction_output();
        self.record.properties.remove(COMPACTION_OUTPUT);
        let id = id?;
        if self.record.ledgers.iter().any(|l| l.ledger_id == id) {
            return None;
        }
        tracing::info!(
            log = self.name(),
            ledger = id,
            "a compaction that never finished: its output goes to the trash"
        );
        Some(TrashRecord::new(id, self.name(), "compaction-abandoned", now))
    }

    pub(super) async fn compact_begin(&mut self, ids: &[u64]) -> Result<Granted> {
        self.usable()?;
        let ledgers = &self.record.ledgers;
        let prefix_ok = !ids.is_empty()
            && ids.len() < ledgers.len()
            && ledgers.iter().zip(ids).all(|(l, id)| l.ledger_id == *id && l.is_closed());
        if !prefix_ok {
            return Err(LogError::Invalid(format!(
                "compaction of {}: ledgers {ids:?} are not the chain's closed head",
                self.name()
            )));
        }
        if let Some(running) = self.compaction_output() {
            return Err(LogError::Invalid(format!(
                "compaction of {}: output ledger {running} is still being written",
                self.name()
            )));
        }
        let replaced: Vec<LedgerInfo> = ledgers[..ids.len()].to_vec();
        let env = self.env().clone();
        let id = env.client.allocate_id().await?;
        let mut record = self.record.clone();
        record.properties.insert(COMPACTION_OUTPUT.into(), id.to_string());
        self.commit(record, &[]).await?;
        match env.client.create(self.create_options(id)).await {
            Ok(writer) => Ok(Granted { replaced, writer }),
            Err(e) => {
                self.compact_abandon(id).await?;
                Err(e.into())
            }
        }
    }

    pub(super) async fn compact_swap(
        &mut self,
        output: LedgerInfo,
        replaced: &[LedgerInfo],
        index: Option<OffsetIndexRecord>,
    ) -> Result<CompactionReport> {
        self.usable()?;
        let ids: Vec<u64> = replaced.iter().map(|l| l.ledger_id).collect();
        let head: Vec<u64> =
            self.record.ledgers.iter().take(ids.len()).map(|l| l.ledger_id).collect();
        if self.compaction_output() != Some(output.ledger_id) || head != ids {
            return Err(LogError::Invalid(format!(
                "compaction of {}: the chain moved on (ledgers {ids:?} are no longer its head)",
                self.name()
            )));
        }
        let (first, last) = (replaced[0], replaced[replaced.len() - 1]);
        assert!(
            output.entries == 0
                || (output.first_offset == first.first_offset
                    && output.end_offset() == last.end_offset()
                    && output.is_closed()),
            "a compaction output covers exactly what it replaces"
        );
        let now = self.env().now_ms();
        let mut record = self.record.clone();
        record.ledgers.drain(..ids.len());
        let mut trash: Vec<TrashRecord> =
            ids.iter().map(|id| TrashRecord::new(*id, self.name(), "compacted", now)).collect();
        let kept = output.entries > 0;
        if kept {
            record.ledgers.insert(0, output);
        } else {
            trash.push(TrashRecord::new(output.ledger_id, self.name(), "empty", now));
        }
        record.properties.remove(COMPACTION_OUTPUT);
        let clean_end = last.end_offset();
        record.properties.insert(COMPACTION_CLEAN_END.into(), clean_end.to_string());
        let index = index.filter(|_| kept);
        self.commit_with_index(record, &trash, index.as_ref()).await?;
        self.sh.clean_end.store(clean_end, Relaxed);
        self.sh.stats.ledgers_trashed.fetch_add(trash.len() as u64, Relaxed);
        // Readers' streams and the tail cache may hold the replaced ledgers' entries.
        self.sh.streams.lock().expect("streams lock").clear();
        self.sh.tail.lock().expect("tail lock").drop_below(clean_end);
        Ok(CompactionReport {
            output: kept.then_some(output),
            replaced: ids,
            bytes_in: replaced.iter().map(|l| l.bytes).sum(),
            bytes_out: output.bytes,
        })
    }

    /// Sends a compaction's output to the trash and forgets it (a no-op when the record
    /// no longer names it).
    pub(super) async fn compact_abandon(&mut self, output: u64) -> Result<()> {
        self.usable()?;
        if self.compaction_output() != Some(output) {
            return Ok(());
        }
        let now = self.env().now_ms();
        let mut record = self.record.clone();
        record.properties.remove(COMPACTION_OUTPUT);
        let trash = [TrashRecord::new(output, self.name(), "compaction-abandoned", now)];
        self.commit(record, &trash).await
    }
}
