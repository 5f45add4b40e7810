//! Compaction: closed ledgers at the head of a chain rewritten into one ledger that keeps
//! their offsets, swapped in for them in one transaction.
//!
//! The log knows nothing of what is kept (that is the caller's: for Kafka, the newest
//! record per key). It guarantees the lifecycle:
//!
//! 1. `compaction_begin` commits the output ledger's id in the log record (property
//!    [`COMPACTION_OUTPUT`]) before the ledger exists, then creates it (guarded by that
//!    record's version, so an owner that lost the log can never create it later).
//! 2. The caller appends entries ([`Compaction::append`]): each covers offsets
//!    `[base_offset, base_offset + span)`, contiguous from the first replaced ledger's first
//!    offset; the last must end where the last replaced ledger ends. The log's offsets stay
//!    dense: what compaction removed lies inside the spans (a Kafka batch's offsets may
//!    have gaps).
//! 3. [`Compaction::finish`] closes the output and swaps it in: one compare-and-set puts the
//!    chain without the replaced ledgers (and with the output, unless it is empty), their
//!    trash records, the output's offset index, and clears the property.
//!
//! A crash (or lost ownership) at any step leaves the old chain (the output named by the
//! property; the next owner trashes it when it takes over) or the new one (the replaced
//! ledgers in the trash): never both, never neither, and no ledger that nothing names (L1).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

use folio_client::{LedgerError, LedgerWriter};
use folio_proto::EntryId;

use super::{Command, ManagedLog};
use crate::entry::{self, EntryHeader};
use crate::error::{LogError, Result};
pub use crate::limits::COMPACTION_ADDS_IN_FLIGHT_MAX;
use crate::limits::OFFSET_INDEX_RECORD_BYTES_MAX;
use crate::records::{LedgerInfo, OffsetIndexRecord};

/// Log record property: the id of a compaction output ledger not yet swapped in.
pub const COMPACTION_OUTPUT: &str = "compaction.output";
/// Log record property: the offset below which the chain was compacted (the clean part).
pub const COMPACTION_CLEAN_END: &str = "compaction.clean_end";

type Confirm = Pin<Box<dyn Future<Output = std::result::Result<EntryId, LedgerError>> + Send>>;

/// What a compaction replaces, granted by `compaction_begin`.
#[derive(Debug)]
pub(super) struct Granted {
    pub replaced: Vec<LedgerInfo>,
    pub writer: LedgerWriter,
}

/// The result of a compaction's swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    /// The output ledger (`None` when nothing was kept: the replaced ledgers just went).
    pub output: Option<LedgerInfo>,
    /// The ledgers that went to the trash.
    pub replaced: Vec<u64>,
    /// Bytes of the replaced ledgers, and of the output.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// A compaction in progress: its output ledger being written.
pub struct Compaction {
    log: ManagedLog,
    replaced: Vec<LedgerInfo>,
    writer: Option<LedgerWriter>,
    info: LedgerInfo,
    next_offset: u64,
    /// Base offsets of the entries written, for the output's offset index.
    bases: Vec<u64>,
    in_flight: VecDeque<Confirm>,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("log", &self.log.name())
            .field("replaced", &self.replaced)
            .field("output", &self.info)
            .field("next_offset", &self.next_offset)
            .finish_non_exhaustive()
    }
}

impl ManagedLog {
    /// The offset below which the log was compacted (0: never).
    pub fn clean_end_offset(&self) -> u64 {
        self.shared.clean_end.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts compacting the chain's first `ledgers.len()` ledgers, which must be exactly
    /// `ledgers` (ids), closed, and not the last of the chain. `Invalid` if the chain
    /// moved on (trimmed, another compaction running): call again with what `info` says.
    pub async fn compaction_begin(&self, ledgers: &[u64]) -> Result<Compaction> {
        let ids = ledgers.to_vec();
        let g = self.call(|reply| Command::CompactBegin { ids, reply }).await?;
        let first = g.replaced.first().expect("a compaction replaces a ledger");
        let last = g.replaced.last().expect("a compaction replaces a ledger");
        let info = LedgerInfo {
            first_offset: first.first_offset,
            records: last.end_offset() - first.first_offset,
            first_publish_ms: first.first_publish_ms,
            max_publish_ms: g.replaced.iter().map(|l| l.max_publish_ms).max().unwrap_or(-1),
            ..LedgerInfo::open(g.writer.id(), first.first_offset)
        };
        tracing::info!(
            log = self.name(),
            output = info.ledger_id,
            ledgers = g.replaced.len(),
            first_offset = info.first_offset,
            end_offset = info.end_offset(),
            "compaction started"
        );
        Ok(Compaction {
            log: self.clone(),
            next_offset: info.first_offset,
            replaced: g.replaced,
            writer: Some(g.writer),
            info,
            bases: Vec::new(),
            in_flight: VecDeque::new(),
        })
    }
}

impl Compaction {
    /// The ledgers being replaced, oldest first.
    pub fn replaced(&self) -> &[LedgerInfo] {
        &self.replaced
    }

    /// The offset the next entry must start at.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The offset the last entry must end at.
    pub fn end_offset(&self) -> u64 {
        self.info.end_offset()
    }

    /// The output ledger's id.
    pub fn output_ledger(&self) -> u64 {
        self.info.ledger_id
    }

    /// Appends one entry covering `[base_offset, base_offset + span)` whose newest
    /// timestamp (the log's running maximum, as the replaced entry had it) is
    /// `max_timestamp`. Waits only when `COMPACTION_ADDS_IN_FLIGHT_MAX` adds are in flight.
    pub async fn append(
        &mut self,
        base_offset: u64,
        span: u32,
        max_timestamp: i64,
        payload: &[u8],
    ) -> Result<()> {
        if base_offset != self.next_offset
            || span == 0
            || base_offset + u64::from(span) > self.end_offset()
        {
            return Err(LogError::Invalid(format!(
                "compaction of {}: an entry at {base_offset} spanning {span} where {} is next \
                 and {} the end",
                self.log.name(),
                self.next_offset,
                self.end_offset()
            )));
        }
        if self.writer.is_none() {
            return Err(self.log.gone());
        }
        let data =
            entry::encode(EntryHeader { base_offset, record_count: span, max_timestamp }, payload);
        while self.in_flight.len() >= COMPACTION_ADDS_IN_FLIGHT_MAX {
            self.confirm_oldest().await?;
        }
        let confirm = loop {
            let added = self.writer.as_ref().expect("checked above").add_nowait(&data);
            match added {
                Ok((_, confirm)) => break confirm,
                Err(LedgerError::Busy(_)) => self.confirm_oldest().await?,
                Err(e) => return Err(e.into()),
            }
        };
        self.in_flight.push_back(Box::pin(confirm));
        self.bases.push(base_offset);
        self.next_offset += u64::from(span);
        self.info.entries += 1;
        self.info.bytes += data.len() as u64;
        Ok(())
    }

    async fn confirm_oldest(&mut self) -> Result<()> {
        if let Some(c) = self.in_flight.pop_front() {
            c.await?;
        }
        Ok(())
    }

    /// Waits for every entry, closes the output and swaps it in for the replaced ledgers.
    /// Every offset up to `end_offset` must be covered, or nothing at all (every record was
    /// removed: the replaced ledgers go and the output with them). On an error the output
    /// is abandoned (to the trash) and the chain is as before.
    pub async fn finish(mut self) -> Result<CompactionReport> {
        let result = self.seal().await;
        let writer = self.writer.take();
        let out = match result {
            Ok(()) => {
                let index = OffsetIndexRecord::from_dense(
                    self.info.ledger_id,
                    &self.bases,
                    OFFSET_INDEX_RECORD_BYTES_MAX,
                );
                let (output, replaced) = (self.info, self.replaced.clone());
                let report = self
                    .log
                    .call(|reply| Command::CompactSwap { output, replaced, index, reply })
                    .await;
                if let Ok(r) = &report {
                    tracing::info!(
                        log = self.log.name(),
                        output = self.info.ledger_id,
                        entries = self.info.entries,
                        bytes_in = r.bytes_in,
                        bytes_out = r.bytes_out,
                        "compaction swapped in"
                    );
                }
                report
            }
            Err(e) => Err(e),
        };
        drop(writer);
        if let Err(e) = &out {
            tracing::warn!(log = self.log.name(), output = self.info.ledger_id, error = %e, "compaction failed; its output goes to the trash");
            self.abandon_output().await;
        }
        out
    }

    async fn seal(&mut self) -> Result<()> {
        if self.info.entries > 0 && self.next_offset != self.end_offset() {
            return Err(LogError::Invalid(format!(
                "compaction of {} ends at {}, short of {}",
                self.log.name(),
                self.next_offset,
                self.end_offset()
            )));
        }
        while !self.in_flight.is_empty() {
            self.confirm_oldest().await?;
        }
        let writer = self.writer.as_ref().ok_or_else(|| self.log.gone())?;
        writer.close().await?;
        self.info.close_ms = self.log.shared.env.now_ms();
        Ok(())
    }

    /// Gives the compaction up: its output goes to the trash, the chain stays as it is.
    pub async fn abandon(mut self) {
        self.writer = None;
        self.in_flight.clear();
        self.abandon_output().await;
    }

    async fn abandon_output(&mut self) {
        let output = self.info.ledger_id;
        if let Err(e) = self.log.call(|reply| Command::CompactAbandon { output, reply }).await {
            // The next owner trashes it (the property still names it).
            tracing::warn!(log = self.log.name(), output, error = %e, "abandoning a compaction output failed");
        }
    }
}
