//! The read path (#22) on real in-process bookies: read streams that continue where the
//! last read ended, across ledger boundaries, within the bytes asked; the tail cache that
//! serves the newest entries from memory; the persisted offset index of closed ledgers.

use crate::common;

use std::sync::atomic::Ordering::Relaxed;

use common::*;
use folio_log::{LogConfig, ManagedLog, Trash, TrashConfig};
use folio_testkit::Cluster;

/// A reader catching up continues where its last read ended (its read stream): no search
/// after the first read, every batch once and in order across ledger boundaries, and no
/// read over its byte limit (beyond a single batch).
#[tokio::test]
async fn a_reader_catching_up_continues_its_stream_across_ledgers() {
    let c = Cluster::start(1).await;
    let config = LogConfig { tail_cache_bytes: 0, ..small(1, 10) };
    let log = ManagedLog::open_or_create(env(&c, "a"), "catch-up", config.clone()).await.unwrap();
    for i in 0..95u64 {
        assert_eq!(log.append(&batch(i), 2, 0).await.unwrap(), 2 * i);
    }
    log.close().await.unwrap();
    // A new owner: its offset index knows nothing of the ten ledgers.
    let log = ManagedLog::open_or_create(env(&c, "b"), "catch-up", config).await.unwrap();
    assert!(log.info().ledgers.len() >= 10);
    let (mut next, mut reads, mut got) = (0u64, 0u64, Vec::new());
    while next < log.end_offset() {
        let entries = log.read(next, 100, 1000).await.unwrap();
        let bytes: usize = entries.iter().map(|e| e.payload.len()).sum();
        assert!(bytes <= 100 || entries.len() == 1, "read at {next}: {bytes} bytes");
        assert_eq!(entries[0].base_offset, next, "each read starts where the last ended");
        next = entries.last().unwrap().next_offset();
        reads += 1;
        got.extend(entries.into_iter().map(|e| e.payload));
    }
    let want: Vec<Vec<u8>> = (0..95).map(batch).collect();
    assert_eq!(got, want, "every batch once, in order");
    let stats = log.stats();
    assert_eq!(stats.reads_continued.load(Relaxed), reads - 1, "every read after the first");
    assert!(stats.locate_searches.load(Relaxed) <= 1, "only the first read may search");
    assert_eq!(log.read_streams(), 1, "one reader, one stream");
    // Another reader elsewhere gets its own stream; the first one's is kept.
    assert_eq!(log.read(101, 1, 1).await.unwrap()[0].base_offset, 100);
    assert_eq!(log.read_streams(), 2);
}

/// A tailing reader gets the newest entries from memory: they are served with the bookie
/// down; older ones, past what the tail cache holds, need the bookie.
#[tokio::test]
async fn a_tailing_reader_gets_the_newest_entries_from_memory() {
    let mut c = Cluster::start(1).await;
    let sizes: usize = (10..20).map(|i| batch(i).len()).sum();
    // The tail cache holds batches 10..20 exactly.
    let config = LogConfig { tail_cache_bytes: sizes, ..small(1, 1000) };
    let log = ManagedLog::open_or_create(env(&c, "a"), "tail", config).await.unwrap();
    for i in 0..20u64 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    c.nodes[0].kill().await;
    let got = log.read(12, usize::MAX, 100).await.unwrap();
    let payloads: Vec<Vec<u8>> = got.iter().map(|e| e.payload.to_vec()).collect();
    assert_eq!(payloads, (12..20).map(batch).collect::<Vec<_>>());
    assert_eq!(log.stats().reads_from_tail.load(Relaxed), 1);
    assert!(log.read(9, usize::MAX, 100).await.is_err(), "batch 9 is only on the bookie");
    let meta = c.meta.clone();
    c.nodes[0].restart(&meta).await;
    let got = log.read(9, usize::MAX, 100).await.unwrap();
    assert_eq!(got.len(), 11, "from the bookie again, up to the end");
}

/// A new owner (a restarted or replacement broker) reading inside closed ledgers finds
/// each read's first entry from the ledgers' persisted offset indexes: no entry read to
/// search, every read starting with the batch that holds its offset. The indexes go with
/// their ledgers: after a trim and the deleter, none is left (L1).
#[tokio::test]
async fn l1_a_new_owner_locates_offsets_in_closed_ledgers_from_their_persisted_index() {
    let c = Cluster::start(1).await;
    let config = LogConfig { tail_cache_bytes: 0, ..small(1, 10) };
    let log = ManagedLog::open_or_create(env(&c, "a"), "indexed", config.clone()).await.unwrap();
    for i in 0..95u64 {
        assert_eq!(log.append(&batch(i), 3, 0).await.unwrap(), 3 * i);
    }
    log.close().await.unwrap();
    let closed: Vec<u64> =
        log.info().ledgers.iter().filter(|l| l.close_ms > 0).map(|l| l.ledger_id).collect();
    assert!(closed.len() >= 9, "{closed:?}");
    assert_eq!(
        offset_indexed(&*c.meta).await.into_iter().collect::<Vec<_>>(),
        closed,
        "every closed ledger the owner wrote has its index"
    );
    let log = ManagedLog::open_or_create(env(&c, "b"), "indexed", config).await.unwrap();
    // Offsets inside batches, at batch starts and at ledger boundaries, out of order, each
    // a new reader position (no read stream to continue).
    let mut offsets: Vec<u64> = (0..285).step_by(7).collect();
    offsets.extend([0, 29, 30, 31, 59, 60, 284]);
    offsets.reverse();
    for offset in &offsets {
        let got = log.read(*offset, 1, 1).await.unwrap();
        assert_eq!(got.len(), 1, "at {offset}");
        assert_eq!(got[0].base_offset, offset - offset % 3, "the batch holding {offset}");
        assert_eq!(got[0].payload, batch(offset / 3), "at {offset}");
    }
    let stats = log.stats();
    assert_eq!(stats.locate_searches.load(Relaxed), 0, "no read searched entry headers");
    assert_eq!(stats.offset_indexes_loaded.load(Relaxed), closed.len() as u64);
    // Trim it all away: the deleter takes ledgers and indexes.
    let end = log.end_offset();
    log.delete_records(end).await.unwrap();
    let trash = Trash::new(env(&c, "deleter"), TrashConfig::default());
    let pass = trash.run_once().await.unwrap();
    assert!(pass.deleted >= closed.len() as u64, "{pass:?}");
    assert!(offset_indexed(&*c.meta).await.is_empty(), "indexes deleted with their ledgers");
    assert_no_leak(&*c.meta, "after the deleter").await;
}
