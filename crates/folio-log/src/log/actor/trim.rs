//! Trimming: the contiguous prefix of closed ledgers that retention (time, size),
//! `delete_records` and (with `require_consumed`) the slowest durable cursor release goes
//! from the chain to the trash in one transaction; memory changes only after it commits.

use super::Actor;
use crate::LogState;
use crate::error::{LogError, Result};
use crate::log::TrimReport;
use crate::records::{LedgerInfo, TrashRecord};

impl Actor {
    /// The closed ledgers at the head of the chain that may go, with why.
    pub(super) fn trim_candidates(&self, now: u64) -> Vec<(LedgerInfo, &'static str)> {
        let c = &self.sh.config;
        let retention = *self.sh.retention.lock().expect("retention lock");
        let ledgers = &self.record.ledgers;
        let total: u64 = ledgers.iter().map(|l| l.bytes).sum::<u64>() + self.cur.bytes;
        let slowest = if c.require_consumed {
            let cursors = self.sh.cursors.lock().expect("cursor lock");
            cursors.values().map(|c| c.persisted.unwrap_or(0)).min().unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
        let mut out = Vec::new();
        let mut removed = 0u64;
        for l in ledgers.iter().take(ledgers.len().saturating_sub(1)) {
            if !l.is_closed() || l.end_offset() > slowest || out.len() >= c.trash_batch_max {
                break;
            }
            let reason = if l.end_offset() <= self.record.start_offset {
                "delete-records"
            } else if retention.time.is_some_and(|t| {
                // A ledger without timestamps ages from its close.
                let newest =
                    if l.max_publish_ms >= 0 { l.max_publish_ms } else { l.close_ms as i64 };
                (now as i64).saturating_sub(newest) > t.as_millis() as i64
            }) {
                "retention-time"
            } else if retention.bytes.is_some_and(|b| total - removed - l.bytes >= b) {
                "retention-size"
            } else {
                break;
            };
            removed += l.bytes;
            out.push((*l, reason));
        }
        out
    }

    pub(super) async fn trim(&mut self) -> Result<TrimReport> {
        let mut report = TrimReport::default();
        if !matches!(self.state, LogState::Open | LogState::Rolling | LogState::Failed) {
            return Err(self.error());
        }
        loop {
            let now = self.env().now_ms();
            let cands = self.trim_candidates(now);
            if cands.is_empty() {
                break;
            }
            let mut record = self.record.clone();
            record.ledgers.drain(..cands.len());
            let trash: Vec<TrashRecord> = cands
                .iter()
                .map(|(l, why)| TrashRecord::new(l.ledger_id, self.name(), why, now))
                .collect();
            self.commit(record, &trash).await?;
            self.sh
                .stats
                .ledgers_trashed
                .fetch_add(trash.len() as u64, std::sync::atomic::Ordering::Relaxed);
            for (l, why) in &cands {
                tracing::info!(
                    log = self.name(),
                    ledger = l.ledger_id,
                    reason = why,
                    "ledger trimmed to the trash"
                );
                report.trashed.push(l.ledger_id);
            }
        }
        report.start_offset = self.start();
        Ok(report)
    }

    pub(super) async fn delete_records(&mut self, offset: u64) -> Result<u64> {
        let end = self.record.ledgers.last().map_or(0, |l| l.first_offset) + self.cur.records;
        let start = self.start();
        if offset > end {
            return Err(LogError::OffsetOutOfRange { offset, start, end });
        }
        if offset > self.record.start_offset {
            let mut record = self.record.clone();
            record.start_offset = offset;
            self.commit(record, &[]).await?;
        }
        self.trim().await?;
        Ok(self.start())
    }
}
