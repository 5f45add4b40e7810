//! Compacted topics (`cleanup.policy=compact`): the compactor keeps the newest record of
//! every key in a partition's closed ledgers, as Kafka's log cleaner does.
//!
//! Every `check_interval` this broker looks at each compacted partition it has open. The
//! compactable ledgers are the chain's closed head whose newest record is older than
//! `min.compaction.lag.ms` (the open ledger never is; `segment.ms` closes it). The part
//! below the log's clean end was compacted before; the rest is dirty. A pass runs when the
//! dirty share of the compactable bytes reaches `min.cleanable.dirty.ratio`, or when a
//! dirty ledger's oldest record is older than `max.compaction.lag.ms`.
//!
//! A pass reads the compactable ledgers twice through the log. First it maps each key
//! (its 128-bit hash) to the offset of its newest record (at most `keys_max` keys: past
//! that the pass covers only the ledgers read before the map filled). Then it writes one
//! output ledger through `folio_log::Compaction`: every batch with a record that is the
//! newest of its key is rewritten with only those records, in its own codec. A tombstone (a
//! null value) goes too once its ledger was compacted more than `delete.retention.ms`
//! ago. Records keep their offsets; each output batch also covers the offsets of what was
//! removed before it (its base offset moves down and its last offset delta up), so the
//! log stays dense and consumers step over the gaps as they do on Kafka. The log swaps the
//! output in and sends the replaced ledgers to the trash in one transaction (see
//! `folio_log::Compaction` for what a crash leaves). The pass is paced: it works at most
//! `busy_fraction` of the time.
//!
//! Rewritten batches lose their producer id (a compacted batch belongs to no producer's
//! sequence any more, as Kafka drops the state of producers whose batches are all gone).
//! Transactions: a pass stops at the last stable offset; below it, the batches of aborted
//! transactions and the markers are dropped, and committed transactions' records become
//! plain records (their markers are no longer needed to read them).

use crate::errors::BrokerError;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use tokio::time::Instant;

use folio_log::records::LedgerInfo;
use folio_log::{Compaction, CompactionReport, LogEntry, ManagedLog};

pub use crate::config::CompactionConfig;
use crate::domain::batch::{self, BatchInfo};
use crate::domain::records::{self, Record};
use crate::domain::topics::TopicConfig;
pub use crate::metrics::CompactionStats;
use crate::state::Inner;

/// Bytes read per pass and ledger to look at: the batch of entries one read returns.
const READ_BYTES: usize = 4 << 20;

/// How many of `ledgers` (the chain, oldest first) a pass should compact now; `None`
/// when nothing is due. At most `ledgers_max`.
pub fn plan(
    ledgers: &[LedgerInfo],
    clean_end: u64,
    c: &TopicConfig,
    now_ms: i64,
    ledgers_max: usize,
) -> Option<usize> {
    let newest =
        |l: &LedgerInfo| if l.max_publish_ms >= 0 { l.max_publish_ms } else { l.close_ms as i64 };
    let oldest = |l: &LedgerInfo| {
        if l.first_publish_ms >= 0 { l.first_publish_ms } else { l.close_ms as i64 }
    };
    let n = ledgers
        .iter()
        .take(ledgers.len().saturating_sub(1).min(ledgers_max))
        .take_while(|l| {
            l.is_closed() && now_ms.saturating_sub(newest(l)) >= c.min_compaction_lag_ms
        })
        .count();
    let candidates = &ledgers[..n];
    let dirty: Vec<&LedgerInfo> =
        candidates.iter().filter(|l| l.first_offset >= clean_end).collect();
    if dirty.is_empty() {
        return None;
    }
    let total: u64 = candidates.iter().map(|l| l.bytes).sum();
    let dirty_bytes: u64 = dirty.iter().map(|l| l.bytes).sum();
    let ratio_due =
        dirty_bytes as u128 * 1_000_000 >= total as u128 * c.min_cleanable_dirty_ppm as u128;
    let lag_due = dirty.iter().any(|l| now_ms.saturating_sub(oldest(l)) >= c.max_compaction_lag_ms);
    (ratio_due || lag_due).then_some(n)
}

/// The compactor: every `check_interval`, a pass over each due partition open here.
pub(crate) async fn run(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(inner.config.compaction.check_interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        for (id, partition) in inner.open_partitions() {
            let topic = match inner.topics.by_id(id).await {
                Ok(Some(t)) => t,
                _ => continue,
            };
            let tc = inner.topic_config(&topic);
            if !tc.cleanup_compact {
                continue;
            }
            let Ok(part) = inner.partition(&topic, partition).await else { continue };
            if let Err(e) = compact_if_due(&inner, &part, &tc).await {
                inner.metrics.compaction.failures.fetch_add(1, Relaxed);
                tracing::warn!(log = part.log.name(), topic = %topic.name, partition, error = %e, "compaction failed; retried at the next check");
            }
        }
    }
}

/// Runs a pass over `part`'s log if one is due under `tc`; returns its report. A pass
/// never reaches past the last stable offset (an open transaction's records keep their
/// producer until its marker says what they are).
pub(crate) async fn compact_if_due(
    inner: &Inner,
    part: &crate::state::Partition,
    tc: &TopicConfig,
) -> Result<Option<CompactionReport>, BrokerError> {
    let log = &part.log;
    let ledgers = log.info().ledgers;
    let max = inner.config.log.trash_batch_max.saturating_sub(1).max(1);
    let Some(n) = plan(&ledgers, log.clean_end_offset(), tc, inner.now_ms(), max) else {
        return Ok(None);
    };
    let (stable, aborted) = {
        let t = part.txns.lock().expect("txns lock");
        let lso = t.last_stable_offset(log.status().end_offset as i64);
        (lso, t.aborted_between(0, lso))
    };
    let n = ledgers[..n].iter().take_while(|l| l.end_offset() as i64 <= stable).count();
    if n == 0 {
        return Ok(None);
    }
    let c = &inner.config.compaction;
    let pass = Pass {
        log,
        tc,
        aborted,
        now_ms: inner.now_ms(),
        busy_fraction: c.busy_fraction,
        pause_before_swap: c.pause_before_swap,
        stats: &inner.metrics.compaction,
    };
    let report = pass.run(&ledgers[..n], c.keys_max).await?;
    inner.metrics.compaction.passes.fetch_add(1, Relaxed);
    Ok(Some(report))
}

/// A key's identity in the map: 128 bits of two independent hashes.
fn key_hash(key: &[u8]) -> u128 {
    let mut a = std::hash::DefaultHasher::new();
    let mut b = std::hash::DefaultHasher::new();
    (0u8, key).hash(&mut a);
    (1u8, key).hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

struct Pass<'a> {
    log: &'a ManagedLog,
    tc: &'a TopicConfig,
    /// The partition's aborted transactions: their records are dropped.
    aborted: Vec<crate::domain::txn::partition::AbortedTxn>,
    now_ms: i64,
    busy_fraction: f64,
    pause_before_swap: bool,
    stats: &'a CompactionStats,
}

/// A kept record, owned (its batch's buffer is gone by the time it is written).
struct Kept {
    offset: u64,
    timestamp: i64,
    attributes: u8,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    headers: Vec<u8>,
}

/// An output batch waiting to learn where it ends (where the next one starts).
struct Pending {
    records: Vec<Kept>,
    log_append_time: Option<i64>,
    entry_max_ts: i64,
    /// The codec of the batch it came from (it is written in that codec again).
    codec: batch::Codec,
}

impl Pass<'_> {
    /// Whether a batch is left out of the output whole: a transaction marker (the records
    /// of its transaction become plain, or go), or a batch of an aborted transaction (as
    /// Kafka's cleaner drops them).
    fn dropped(&self, h: &BatchInfo, base_offset: u64) -> bool {
        let at = base_offset as i64;
        h.is_control()
            || (h.is_transactional()
                && self.aborted.iter().any(|a| {
                    a.producer_id == h.producer_id && a.first_offset <= at && at <= a.last_offset
                }))
    }

    async fn run(
        &self,
        ledgers: &[LedgerInfo],
        keys_max: usize,
    ) -> Result<CompactionReport, BrokerError> {
        let (newest, n) = self.map_keys(ledgers, keys_max).await?;
        let ledgers = &ledgers[..n];
        let ids: Vec<u64> = ledgers.iter().map(|l| l.ledger_id).collect();
        let mut comp = self.log.compaction_begin(&ids).await?;
        match self.rewrite(&mut comp, ledgers, &newest).await {
            Ok(removed) => {
                if self.pause_before_swap {
                    self.stats.paused.fetch_add(1, Relaxed);
                    tracing::warn!(
                        log = self.log.name(),
                        "compaction output written; pausing before the swap (pause_before_swap)"
                    );
                    std::future::pending::<()>().await;
                }
                let r = comp.finish().await?;
                self.stats.bytes_written.fetch_add(r.bytes_out, Relaxed);
                self.stats.records_removed.fetch_add(removed, Relaxed);
                Ok(r)
            }
            Err(e) => {
                comp.abandon().await;
                Err(e)
            }
        }
    }

    /// The next entries from `*offset` (moved past them) that start below `to`; `None`
    /// at `to`. Paced: waits after each read for the share of time it may not work.
    async fn chunk(&self, offset: &mut u64, to: u64) -> Result<Option<Vec<LogEntry>>, BrokerError> {
        *offset = (*offset).max(self.log.start_offset());
        if *offset >= to {
            return Ok(None);
        }
        let started = Instant::now();
        let mut entries = self.log.read(*offset, READ_BYTES, 4096).await?;
        entries.retain(|e| e.base_offset < to);
        let Some(last) = entries.last() else {
            let name = self.log.name();
            return Err(BrokerError::Storage(format!("{name}: nothing to read at {offset}")));
        };
        *offset = last.next_offset();
        let bytes: usize = entries.iter().map(|e| e.payload.len()).sum();
        self.stats.bytes_read.fetch_add(bytes as u64, Relaxed);
        folio_log::trash::pace(started.elapsed(), self.busy_fraction).await;
        Ok(Some(entries))
    }

    /// The newest offset of every key in `ledgers`, and how many of them the map covers.
    async fn map_keys(
        &self,
        ledgers: &[LedgerInfo],
        keys_max: usize,
    ) -> Result<(HashMap<u128, u64>, usize), BrokerError> {
        let mut newest: HashMap<u128, u64> = HashMap::new();
        let mut offset = ledgers[0].first_offset;
        let to = ledgers[ledgers.len() - 1].end_offset();
        let mut reading = 0;
        while let Some(entries) = self.chunk(&mut offset, to).await? {
            for e in &entries {
                let at = ledgers.iter().position(|l| l.ledger_id == e.ledger_id).unwrap_or(reading);
                if at > reading && newest.len() >= keys_max {
                    // Ledgers before `at` were read whole: the pass covers those.
                    if at == 0 {
                        break;
                    }
                    return Ok((newest, at));
                }
                reading = at;
                let (h, plain) = records::records_bytes(&e.payload).map_err(stored)?;
                if self.dropped(&h, e.base_offset) {
                    continue;
                }
                for r in records::decode_records(&h, &plain).map_err(stored)? {
                    if let Some(k) = r.key {
                        newest.insert(key_hash(k), e.base_offset + r.offset_delta as u64);
                    }
                }
            }
        }
        Ok((newest, ledgers.len()))
    }

    /// Writes what `ledgers` keep into `comp`; returns the records removed.
    async fn rewrite(
        &self,
        comp: &mut Compaction,
        ledgers: &[LedgerInfo],
        newest: &HashMap<u128, u64>,
    ) -> Result<u64, BrokerError> {
        let clean_end = self.log.clean_end_offset();
        let start = self.log.start_offset();
        let (from, to) = (comp.next_offset(), comp.end_offset());
        let mut pending: Option<Pending> = None;
        let mut removed = 0u64;
        let mut offset = from;
        while let Some(entries) = self.chunk(&mut offset, to).await? {
            for e in &entries {
                let ledger = ledgers.iter().find(|l| l.ledger_id == e.ledger_id);
                let expired = ledger.is_some_and(|l| {
                    l.first_offset < clean_end
                        && (l.close_ms as i64).saturating_add(self.tc.delete_retention_ms)
                            <= self.now_ms
                });
                let (h, plain) = records::records_bytes(&e.payload).map_err(stored)?;
                if self.dropped(&h, e.base_offset) {
                    removed += h.records_count.max(0) as u64;
                    continue;
                }
                let mut kept = Vec::new();
                for r in records::decode_records(&h, &plain).map_err(stored)? {
                    let offset = e.base_offset + r.offset_delta as u64;
                    if keep(&r, offset, start, newest, expired) {
                        kept.push(owned(&r, offset));
                    } else {
                        removed += 1;
                    }
                }
                if kept.is_empty() {
                    continue;
                }
                // The batch before this one ends after its last record.
                if let Some(p) = pending.take() {
                    let end = p.records.last().expect("kept").offset + 1;
                    write(comp, end, &p).await?;
                }
                pending = Some(Pending {
                    records: kept,
                    log_append_time: h.is_log_append_time().then_some(h.max_timestamp),
                    entry_max_ts: e.max_timestamp,
                    codec: h.codec().map_err(stored)?,
                });
            }
        }
        // The last batch covers the offsets up to the end of what is replaced.
        if let Some(p) = pending {
            write(comp, to, &p).await?;
        }
        Ok(removed)
    }
}

/// Appends `p` to `comp` as one batch from where the output stands up to `end`.
async fn write(comp: &mut Compaction, end: u64, p: &Pending) -> Result<(), BrokerError> {
    let base = comp.next_offset();
    let b = encode_batch(base, end, p)?;
    let span = u32::try_from(end - base).map_err(|_| gap("2^32"))?;
    Ok(comp.append(base, span, p.entry_max_ts, &b).await?)
}

/// Whether record `r` at `offset` survives: keyed, the newest of its key, not below the
/// log start, and not a tombstone past its retention.
fn keep(
    r: &Record<'_>,
    offset: u64,
    start: u64,
    newest: &HashMap<u128, u64>,
    expired: bool,
) -> bool {
    let Some(k) = r.key else { return false };
    offset >= start
        && newest.get(&key_hash(k)).is_none_or(|n| *n <= offset)
        && !(r.value.is_none() && expired)
}

fn owned(r: &Record<'_>, offset: u64) -> Kept {
    Kept {
        offset,
        timestamp: r.timestamp,
        attributes: r.attributes,
        key: r.key.unwrap_or_default().to_vec(),
        value: r.value.map(<[u8]>::to_vec),
        headers: r.headers.to_vec(),
    }
}

/// A v2 batch of `p`'s records at `base` whose offsets end at `end`, in `p`'s codec.
fn encode_batch(base: u64, end: u64, p: &Pending) -> Result<Vec<u8>, BrokerError> {
    let last_delta = i32::try_from(end - base - 1).map_err(|_| gap("2^31"))?;
    let base_ts = p.log_append_time.unwrap_or_else(|| p.records[0].timestamp);
    let max_ts = p
        .log_append_time
        .unwrap_or_else(|| p.records.iter().map(|r| r.timestamp).max().unwrap_or(base_ts));
    let mut body = Vec::new();
    for r in &p.records {
        let record = batch::Record {
            attributes: r.attributes,
            timestamp_delta: r.timestamp.saturating_sub(base_ts),
            offset_delta: (r.offset - base) as i64,
            key: Some(&r.key),
            value: r.value.as_deref(),
            headers: &r.headers,
        };
        batch::put_record(&mut body, &record);
    }
    let body = records::compress(p.codec, &body)
        .map_err(|e| BrokerError::background("compressing a compacted batch", e))?;
    let timestamp_type = if p.log_append_time.is_some() { batch::TIMESTAMP_TYPE_BIT } else { 0 };
    let info = BatchInfo {
        size: batch::HEADER_BYTES + body.len(),
        attributes: timestamp_type | p.codec.bits(),
        last_offset_delta: last_delta,
        base_timestamp: base_ts,
        max_timestamp: max_ts,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: p.records.len() as i32,
    };
    Ok(batch::encode(base, &info, &body))
}

/// A stored batch the compactor cannot read.
fn stored(e: impl std::error::Error + Send + Sync + 'static) -> BrokerError {
    BrokerError::background("reading a stored batch to compact it", e)
}

/// Offsets too far apart for one batch.
fn gap(most: &str) -> BrokerError {
    BrokerError::Storage(format!("a gap of more than {most} offsets inside one batch"))
}

#[cfg(test)]
mod tests;
