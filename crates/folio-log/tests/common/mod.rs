#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use folio_client::LedgerClient;
use folio_log::records::{LogRecord, TrashRecord};
use folio_log::{LogConfig, LogEnv, WallClock};
use folio_meta::keys::Keys;
use folio_meta::records::Record;
use folio_meta::{Clock, MetadataStore, list_all};
use folio_testkit::Cluster;

pub fn env_with(meta: Arc<dyn MetadataStore>, clock: Arc<dyn Clock>, owner: &str) -> LogEnv {
    let client = LedgerClient::new(meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_millis(500));
    LogEnv { meta, client, keys: Keys::default(), clock, owner: owner.into() }
}

pub fn env(c: &Cluster, owner: &str) -> LogEnv {
    folio_testkit::trace();
    env_with(c.meta.clone(), Arc::new(WallClock), owner)
}

/// Small ledgers so tests cross rollovers quickly.
pub fn small(bookies: usize, entries_per_ledger: u64) -> LogConfig {
    LogConfig {
        rollover_entries: entries_per_ledger,
        retention_time: None,
        ..LogConfig::for_bookies(bookies)
    }
}

pub fn batch(i: u64) -> Vec<u8> {
    format!("batch-{i}-").repeat(1 + (i % 4) as usize).into_bytes()
}

/// Ledger ids: every ledger in the metadata store, every ledger named by a chain (or as a
/// compaction's output), and every ledger in the trash.
pub async fn ledger_sets(
    meta: &dyn MetadataStore,
) -> (BTreeSet<u64>, BTreeSet<u64>, BTreeSet<u64>) {
    let keys = Keys::default();
    let mut all = BTreeSet::new();
    for v in list_all(meta, &keys.ledgers()).await.unwrap() {
        all.insert(keys.parse_ledger(&v.key).unwrap());
    }
    let mut chained = BTreeSet::new();
    for v in list_all(meta, &keys.logs()).await.unwrap() {
        let r = LogRecord::decode(&v.key, &v.value).unwrap();
        chained.extend(r.ledgers.iter().map(|l| l.ledger_id));
        // A compaction's output is named by its log's record until it is swapped in.
        let output = r.properties.get(folio_log::COMPACTION_OUTPUT);
        chained.extend(output.and_then(|v| v.parse::<u64>().ok()));
    }
    let mut trashed = BTreeSet::new();
    for v in list_all(meta, &keys.trash()).await.unwrap() {
        trashed.insert(TrashRecord::decode(&v.key, &v.value).unwrap().ledger_id);
    }
    (all, chained, trashed)
}

/// The ledgers that have a persisted offset index.
pub async fn offset_indexed(meta: &dyn MetadataStore) -> BTreeSet<u64> {
    let keys = Keys::default();
    let prefix = keys.offset_indexes();
    let mut out = BTreeSet::new();
    for v in list_all(meta, &prefix).await.unwrap() {
        out.insert(v.key[prefix.len()..].parse().unwrap());
    }
    out
}

/// L1 at the metadata level: no ledger exists that neither a chain nor the trash names,
/// and no persisted offset index outlives its ledger's place in a chain or the trash.
pub async fn assert_no_leak(meta: &dyn MetadataStore, context: &str) {
    let (all, chained, trashed) = ledger_sets(meta).await;
    let leaked: Vec<u64> =
        all.iter().filter(|id| !chained.contains(id) && !trashed.contains(id)).copied().collect();
    assert!(
        leaked.is_empty(),
        "{context}: ledgers {leaked:?} are in no chain and not in the trash (chains {chained:?}, trash {trashed:?})"
    );
    let indexes = offset_indexed(meta).await;
    let stale: Vec<u64> = indexes
        .iter()
        .filter(|id| !chained.contains(id) && !trashed.contains(id))
        .copied()
        .collect();
    assert!(stale.is_empty(), "{context}: offset indexes {stale:?} outlive their ledgers");
}

/// A test compactor over the chain's first `n` ledgers, for logs of one-record entries
/// appended as `batch(i)` at offset `i`: keeps only the entries at odd offsets, each
/// spanning the even offset before it (the last kept spans to the end), so offsets stay
/// dense. Returns the swap's report.
pub async fn compact_keep_odd(
    log: &folio_log::ManagedLog,
    n: usize,
) -> folio_log::Result<folio_log::CompactionReport> {
    let ids: Vec<u64> = log.info().ledgers.iter().take(n).map(|l| l.ledger_id).collect();
    let mut c = log.compaction_begin(&ids).await?;
    let (start, end) = (c.next_offset(), c.end_offset());
    let entries = log.read(start, usize::MAX, usize::MAX).await?;
    let kept: Vec<_> =
        entries.iter().filter(|e| e.base_offset < end && e.base_offset % 2 == 1).collect();
    for (i, e) in kept.iter().enumerate() {
        let to = if i + 1 == kept.len() { end } else { e.base_offset + 1 };
        c.append(c.next_offset(), (to - c.next_offset()) as u32, e.max_timestamp, &e.payload)
            .await?;
    }
    c.finish().await
}
