//! Managed log behaviour on real in-process bookies: appends and reads across rollovers,
//! tailing, ownership (D3 at the log level), ledger failure and re-send, cursors,
//! retention, delete_records, and reads by timestamp.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use folio_log::{LogConfig, LogError, LogState, ManagedLog};
use folio_meta::ManualClock;
use folio_testkit::{Cluster, Fault};

#[tokio::test]
async fn appends_get_dense_offsets_and_read_back_across_rollovers() {
    let c = Cluster::start(1).await;
    let log = ManagedLog::open_or_create(env(&c, "t"), "orders/0", small(1, 4)).await.unwrap();
    let mut expect = Vec::new();
    for i in 0..30u64 {
        let n = 1 + (i % 3) as u32;
        let base = log.append(&batch(i), n, i as i64).await.unwrap();
        expect.push((base, n, batch(i)));
    }
    let mut next = 0;
    for (base, n, _) in &expect {
        assert_eq!(*base, next, "offsets are dense");
        next += u64::from(*n);
    }
    assert_eq!(log.end_offset(), next);
    assert!(
        log.info().ledgers.len() >= 7,
        "30 batches at 4 per ledger roll over: {:?}",
        log.info().ledgers
    );
    // Every offset finds the batch that holds it, and reading on crosses ledgers.
    for off in 0..next {
        let got = log.read(off, 1, 1).await.unwrap();
        let (base, n, data) =
            expect.iter().find(|(b, n, _)| *b <= off && off < b + u64::from(*n)).unwrap();
        assert_eq!((got[0].base_offset, got[0].record_count), (*base, *n), "offset {off}");
        assert_eq!(&got[0].payload[..], &data[..]);
    }
    let all = log.read(0, usize::MAX, 1000).await.unwrap();
    assert_eq!(all.len(), 30);
    assert!(log.read(next, 1, 1).await.unwrap().is_empty(), "the end reads nothing");
    assert!(matches!(log.read(next + 1, 1, 1).await, Err(LogError::OffsetOutOfRange { .. })));
}

/// #22: the offset index finds a read's first entry without reading entries: always for
/// the ledgers this process appended; for a log opened by a new owner, from the closed
/// ledgers' persisted indexes, or (without them) once a reader went through a ledger from
/// its start. Only reads past what the index knows search.
#[tokio::test]
async fn reads_locate_their_entry_from_the_offset_index_without_searching() {
    use std::sync::atomic::Ordering::Relaxed;
    let c = Cluster::start(1).await;
    // No tail cache: every read goes to the ledgers.
    let config = LogConfig { tail_cache_bytes: 0, ..small(1, 50) };
    let log = ManagedLog::open_or_create(env(&c, "a"), "idx", config.clone()).await.unwrap();
    for i in 0..120u64 {
        log.append(&batch(i), 3, 0).await.unwrap();
    }
    for off in (0..360).step_by(7) {
        let got = log.read(off, 1, 1).await.unwrap();
        assert_eq!(got[0].base_offset, off / 3 * 3, "offset {off}");
    }
    let stats = log.stats();
    assert_eq!(stats.locate_searches.load(Relaxed), 0, "the appender's index knows every entry");
    assert!(stats.locate_exact.load(Relaxed) >= 52);
    log.close().await.unwrap();

    // A new owner loads the closed ledgers' persisted indexes: no search either.
    let log = ManagedLog::open_or_create(env(&c, "b"), "idx", config.clone()).await.unwrap();
    for off in (0..360).step_by(11) {
        assert_eq!(log.read(off, 1, 1).await.unwrap()[0].base_offset, off / 3 * 3);
    }
    assert_eq!(log.stats().locate_searches.load(Relaxed), 0, "persisted indexes");
    assert_eq!(log.stats().offset_indexes_loaded.load(Relaxed), 3, "one per closed ledger");
    log.close().await.unwrap();

    // Without persisted indexes (a ledger recovered after its writer died has none) a new
    // owner knows nothing: its first read in the middle searches; a reader going through
    // the log from its start teaches the index every ledger it passes.
    let keys = folio_meta::keys::Keys::default();
    for v in folio_meta::list_all(&*c.meta, &keys.offset_indexes()).await.unwrap() {
        c.meta.delete(&v.key, folio_meta::Expect::Any).await.unwrap();
    }
    let log = ManagedLog::open_or_create(env(&c, "c"), "idx", config.clone()).await.unwrap();
    assert_eq!(log.read(200, 1, 1).await.unwrap()[0].base_offset, 198);
    let searched = log.stats().locate_searches.load(Relaxed);
    assert!(searched >= 1, "nothing known: the first read searches");
    let mut next = 0;
    while next < 360 {
        let got = log.read(next, 1 << 20, 7).await.unwrap();
        next = got.last().unwrap().base_offset + 3;
    }
    let searched = log.stats().locate_searches.load(Relaxed);
    for off in (0..360).rev().step_by(5) {
        assert_eq!(log.read(off, 1, 1).await.unwrap()[0].base_offset, off / 3 * 3);
    }
    assert_eq!(log.stats().locate_searches.load(Relaxed), searched, "every ledger is known now");
    // What the reads taught was persisted (once per closed ledger), so the next owner
    // searches nothing.
    let closed = log.info().ledgers.iter().filter(|l| l.close_ms > 0).count();
    assert_eq!(log.stats().offset_indexes_rebuilt.load(Relaxed), closed as u64);
    assert_eq!(offset_indexed(&*c.meta).await.len(), closed);
    log.close().await.unwrap();
    let log = ManagedLog::open_or_create(env(&c, "d"), "idx", config).await.unwrap();
    for off in (0..360).step_by(13) {
        assert_eq!(log.read(off, 1, 1).await.unwrap()[0].base_offset, off / 3 * 3);
    }
    assert_eq!(log.stats().locate_searches.load(Relaxed), 0, "rebuilt indexes");
    assert_no_leak(&*c.meta, "rebuilt indexes").await;
}

#[tokio::test]
async fn reopening_continues_the_offsets_and_keeps_every_batch() {
    let c = Cluster::start(1).await;
    let log = ManagedLog::open_or_create(env(&c, "a"), "l", small(1, 3)).await.unwrap();
    for i in 0..10 {
        log.append(&batch(i), 2, 0).await.unwrap();
    }
    log.close().await.unwrap();
    assert!(matches!(log.append(b"x", 1, 0).await, Err(LogError::Closed(_))));
    let log = ManagedLog::open_or_create(env(&c, "b"), "l", small(1, 3)).await.unwrap();
    assert_eq!(log.end_offset(), 20);
    assert_eq!(log.append(b"more", 1, 0).await.unwrap(), 20);
    let all = log.read(0, usize::MAX, 100).await.unwrap();
    assert_eq!(all.len(), 11);
    assert_no_leak(c.meta.as_ref(), "after reopen").await;
}

#[tokio::test]
async fn tailing_read_wakes_on_append() {
    let c = Cluster::start(1).await;
    let log = ManagedLog::open_or_create(env(&c, "t"), "tail", small(1, 100)).await.unwrap();
    let reader = log.clone();
    let waiter = tokio::spawn(async move { reader.wait_for(0, Duration::from_secs(30)).await });
    log.append(b"first", 1, 0).await.unwrap();
    let status = waiter.await.unwrap();
    assert_eq!(status.end_offset, 1);
    assert_eq!(&log.read(0, 100, 10).await.unwrap()[0].payload[..], b"first");
}

/// D3 at the log level: once a second owner opens the log, the first never appends again,
/// and everything the first had acknowledged is in the log.
#[tokio::test]
async fn d3_a_new_owner_fences_the_old_one() {
    let c = Cluster::start(2).await;
    let a = ManagedLog::open_or_create(env(&c, "a"), "p", small(2, 1000)).await.unwrap();
    let mut acked = Vec::new();
    for i in 0..5 {
        acked.push(a.append(&batch(i), 1, 0).await.unwrap());
    }
    let b = ManagedLog::open_or_create(env(&c, "b"), "p", small(2, 1000)).await.unwrap();
    assert_eq!(b.end_offset(), 5);
    let late = a.append(b"zombie", 1, 0).await;
    assert!(matches!(late, Err(LogError::Fenced(_))), "{late:?}");
    assert_eq!(a.status().state, LogState::Fenced);
    assert_eq!(b.append(b"new owner", 1, 0).await.unwrap(), 5);
    let all = b.read(0, usize::MAX, 100).await.unwrap();
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|e| &e.payload[..] != b"zombie"));
    assert_no_leak(c.meta.as_ref(), "after fencing").await;
}

/// Owner epochs (Kafka's leader epochs): each take-over begins the next epoch at the
/// offset its first append gets, in the take-over's own commit; every offset keeps the
/// epoch it was appended in; a take-over with nothing appended before the next leaves no
/// epoch behind; and the fenced owner's epoch ends where the new one begins.
#[tokio::test]
async fn each_take_over_begins_an_owner_epoch_at_its_first_offset() {
    let c = Cluster::start(2).await;
    let a = ManagedLog::open_or_create(env(&c, "a"), "e", small(2, 1000)).await.unwrap();
    assert_eq!(a.status().epoch, 1);
    for i in 0..3 {
        a.append(&batch(i), 2, 0).await.unwrap();
    }
    let b = ManagedLog::open(env(&c, "b"), "e", small(2, 1000)).await.unwrap();
    assert_eq!(b.status().epoch, 2);
    b.append(&batch(9), 1, 0).await.unwrap();
    // Taken over twice more without an append in between: epoch 3 names no offset.
    let c3 = ManagedLog::open(env(&c, "c"), "e", small(2, 1000)).await.unwrap();
    assert_eq!(c3.status().epoch, 3);
    let d = ManagedLog::open(env(&c, "d"), "e", small(2, 1000)).await.unwrap();
    assert_eq!(d.status().epoch, 4);
    assert_eq!(d.append(&batch(10), 1, 0).await.unwrap(), 7);
    let e = d.epochs();
    let starts: Vec<(u32, u64)> = e.entries().iter().map(|e| (e.epoch, e.start_offset)).collect();
    assert_eq!(starts, vec![(1, 0), (2, 6), (4, 7)]);
    assert_eq!((0..8).map(|o| e.epoch_of(o)).collect::<Vec<_>>(), [1, 1, 1, 1, 1, 1, 2, 4]);
    assert_eq!(e.end_of(1, 8), Some((1, 6)));
    assert_eq!(e.end_of(3, 8), Some((2, 7)));
    assert_eq!(e.end_of(4, 8), Some((4, 8)));
    // The history is in the log record: a new owner reads it and goes on from there.
    d.close().await.unwrap();
    let again = ManagedLog::open(env(&c, "a"), "e", small(2, 1000)).await.unwrap();
    assert_eq!(again.status().epoch, 5);
    assert_eq!(again.epochs().epoch_of(6), 2);
    assert_no_leak(c.meta.as_ref(), "after take-overs").await;
}

/// A ledger that fails (its bookie cut, no replacement) is closed at its LAC; the appends
/// not in it wait while no ledger can be created and are re-sent, in order, once one can.
#[tokio::test]
async fn a_failed_ledger_is_replaced_and_pending_appends_are_resent_in_order() {
    let c = Cluster::start(2).await;
    let config = LogConfig { append_timeout: Duration::from_secs(60), ..small(2, 1000) };
    let log = ManagedLog::open_or_create(env(&c, "t"), "f", config).await.unwrap();
    for i in 0..3 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    let first_ledger = log.info().ledgers.last().unwrap().ledger_id;
    c.nodes[1].link.set_fault(Fault::Cut);
    let mut status = log.subscribe();
    let appends: Vec<_> = (3..10)
        .map(|i| {
            let log = log.clone();
            tokio::spawn(async move { log.append(&batch(i), 1, 0).await })
        })
        .collect();
    // Wait until the log noticed the failure (it cannot get a new ledger while cut).
    status.wait_for(|s| s.state == LogState::Failed).await.unwrap();
    c.nodes[1].link.set_fault(Fault::Pass);
    let mut offsets = Vec::new();
    for a in appends {
        offsets.push(a.await.unwrap().unwrap());
    }
    offsets.sort();
    assert_eq!(offsets, (3..10).collect::<Vec<u64>>(), "no offset lost or repeated");
    let all = log.read(0, usize::MAX, 100).await.unwrap();
    let payloads: Vec<Vec<u8>> = all.iter().map(|e| e.payload.to_vec()).collect();
    let by_offset: Vec<u64> = all.iter().map(|e| e.base_offset).collect();
    assert_eq!(by_offset, (0..10).collect::<Vec<u64>>());
    assert_eq!(payloads[..3], [batch(0), batch(1), batch(2)]);
    assert!(log.info().ledgers.iter().all(|l| l.ledger_id != first_ledger || l.entries >= 3));
    assert!(log.stats().ledger_failures.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    assert_no_leak(c.meta.as_ref(), "after a ledger failure").await;
}

#[tokio::test]
async fn retention_by_size_trims_a_prefix_into_the_trash() {
    let c = Cluster::start(1).await;
    let config = LogConfig { retention_bytes: Some(200), ..small(1, 2) };
    let log = ManagedLog::open_or_create(env(&c, "t"), "r", config).await.unwrap();
    for i in 0..20 {
        log.append(&[i as u8; 50], 1, 0).await.unwrap();
    }
    // Trimming also runs after every rollover: this pass may find nothing left to do.
    log.trim().await.unwrap();
    let info = log.info();
    let kept: u64 = info.ledgers.iter().map(|l| l.bytes).sum();
    assert!(kept >= 200, "what is left still holds the retention size: {kept}");
    assert!(kept - info.ledgers[0].bytes < 200, "the oldest ledger left is needed: {info:?}");
    assert_eq!(log.start_offset(), info.ledgers[0].first_offset);
    assert!(matches!(log.read(0, 1, 1).await, Err(LogError::OffsetOutOfRange { .. })));
    assert_eq!(
        log.read(log.start_offset(), 1, 1).await.unwrap()[0].base_offset,
        log.start_offset()
    );
    let (all, chained, trashed) = ledger_sets(c.meta.as_ref()).await;
    assert!(!trashed.is_empty());
    assert_eq!(all, chained.union(&trashed).copied().collect());
    assert_no_leak(c.meta.as_ref(), "after trimming").await;
}

#[tokio::test]
async fn retention_by_time_follows_the_clock_and_cursors_hold_when_required() {
    let c = Cluster::start(1).await;
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    let env = env_with(c.meta.clone(), Arc::new(clock.clone()), "t");
    let config = LogConfig {
        retention_time: Some(Duration::from_secs(60)),
        require_consumed: true,
        // Only the explicit calls below trim and flush.
        trim_interval: Duration::from_secs(1 << 30),
        cursor_flush_interval: Duration::from_secs(1 << 30),
        ..small(1, 2)
    };
    let log = ManagedLog::open_or_create(env, "rt", config).await.unwrap();
    log.cursor_open("group", 0).await.unwrap();
    let now = 1_000_000_000i64;
    for i in 0..10 {
        log.append(&batch(i), 1, now).await.unwrap();
    }
    clock.advance(Duration::from_secs(120));
    assert!(log.trim().await.unwrap().trashed.is_empty(), "the cursor at 0 holds everything");
    log.cursor_commit("group", 5).unwrap();
    assert!(
        log.trim().await.unwrap().trashed.is_empty(),
        "unflushed cursor positions do not count"
    );
    log.flush_cursors().await.unwrap();
    let report = log.trim().await.unwrap();
    assert_eq!(report.trashed.len(), 2, "ledgers [0,2) and [2,4) are consumed, [4,6) is not");
    assert_eq!(log.start_offset(), 4);
    log.cursor_delete("group").await.unwrap();
    let report = log.trim().await.unwrap();
    assert!(report.start_offset >= 8, "with no durable cursor retention alone decides");
}

#[tokio::test]
async fn delete_records_moves_the_start_and_trims_whole_ledgers_below() {
    let c = Cluster::start(1).await;
    let log = ManagedLog::open_or_create(env(&c, "t"), "dr", small(1, 3)).await.unwrap();
    for i in 0..9 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    assert_eq!(log.delete_records(4).await.unwrap(), 4);
    assert_eq!(log.info().ledgers[0].first_offset, 3, "the ledger holding 4 stays");
    assert!(matches!(log.read(3, 1, 1).await, Err(LogError::OffsetOutOfRange { .. })));
    assert_eq!(log.read(4, 1, 1).await.unwrap()[0].base_offset, 4);
    assert!(matches!(log.delete_records(100).await, Err(LogError::OffsetOutOfRange { .. })));
    // Survives a reopen.
    log.close().await.unwrap();
    let log = ManagedLog::open_or_create(env(&c, "u"), "dr", small(1, 3)).await.unwrap();
    assert_eq!(log.start_offset(), 4);
}

#[tokio::test]
async fn offset_for_timestamp_finds_the_first_batch_at_or_after() {
    let c = Cluster::start(1).await;
    let log = ManagedLog::open_or_create(env(&c, "t"), "ts", small(1, 4)).await.unwrap();
    // Timestamps 100, 200, ... with one producer clock going backwards at batch 5.
    let ts = [100, 200, 300, 400, 500, 250, 700, 800, 900, 1000];
    for (i, t) in ts.iter().enumerate() {
        log.append(&batch(i as u64), 1, *t).await.unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0).await.unwrap(), Some(0));
    assert_eq!(log.offset_for_timestamp(300).await.unwrap(), Some(2));
    assert_eq!(log.offset_for_timestamp(600).await.unwrap(), Some(6));
    assert_eq!(log.offset_for_timestamp(1000).await.unwrap(), Some(9));
    assert_eq!(log.offset_for_timestamp(1001).await.unwrap(), None);
}

#[tokio::test]
async fn bad_appends_are_refused_without_touching_the_log() {
    let c = Cluster::start(1).await;
    let log = ManagedLog::open_or_create(env(&c, "t"), "bad", small(1, 4)).await.unwrap();
    assert!(matches!(log.append(b"x", 0, 0).await, Err(LogError::Invalid(_))));
    let huge = vec![0u8; folio_log::BATCH_BYTES_MAX + 1];
    assert!(matches!(log.append(&huge, 1, 0).await, Err(LogError::Invalid(_))));
    assert_eq!(log.end_offset(), 0);
    assert_eq!(log.append(b"ok", 1, 0).await.unwrap(), 0);
    assert!(ManagedLog::open_or_create(env(&c, "t"), "", small(1, 4)).await.is_err());
}

#[tokio::test]
async fn rollover_by_age_and_the_minimum_age_gates_every_trigger() {
    let c = Cluster::start(1).await;
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    let env = env_with(c.meta.clone(), Arc::new(clock.clone()), "t");
    let config = LogConfig {
        rollover_entries: 2,
        rollover_min_age: Duration::from_secs(60),
        rollover_max_age: Duration::from_secs(600),
        ..small(1, 2)
    };
    let log = ManagedLog::open_or_create(env, "age", config).await.unwrap();
    let first = log.status().current_ledger;
    for i in 0..5 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    assert_eq!(log.status().current_ledger, first, "full, but younger than the minimum age");
    let mut status = log.subscribe();
    clock.advance(Duration::from_secs(61));
    let s = status.wait_for(|s| s.current_ledger != first).await.unwrap().to_owned();
    assert_eq!(s.end_offset, 5);
    assert_eq!(log.info().ledgers[0].entries, 5, "the full ledger rolled once old enough");
    // An idle ledger with one entry rolls at the maximum age (plus up to 5 % jitter).
    log.append(b"one", 1, 0).await.unwrap();
    let second = log.status().current_ledger;
    clock.advance(Duration::from_secs(500));
    assert_eq!(log.status().current_ledger, second);
    clock.advance(Duration::from_secs(131));
    status.wait_for(|s| s.current_ledger != second).await.unwrap();
    // An empty ledger never rolls by age.
    let third = log.status().current_ledger;
    clock.advance(Duration::from_secs(10_000));
    log.append(b"two", 1, 0).await.unwrap();
    assert_eq!(log.status().current_ledger, third);
}

/// D1 for offsets: once retention trimmed every closed ledger, closing the log drops its
/// empty last ledger and leaves the chain empty; the log start keeps the end, so a reopened
/// log goes on from there and never hands an offset out twice. (The start used to fall back
/// to 0: the reopened log reused offsets 0.., and the closing owner's status went backwards.)
#[tokio::test]
async fn d1_offsets_are_never_reused_after_everything_was_trimmed_and_the_log_closed() {
    let c = Cluster::start(1).await;
    let env = env(&c, "t");
    let config = LogConfig { retention_bytes: Some(0), ..small(1, 2) };
    let log = ManagedLog::open_or_create(env.clone(), "emptied", config.clone()).await.unwrap();
    for i in 0..4 {
        assert_eq!(log.append(&batch(i), 1, 0).await.unwrap(), i);
    }
    log.roll().await.unwrap();
    log.trim().await.unwrap();
    assert_eq!((log.start_offset(), log.end_offset()), (4, 4), "{:?}", log.info().ledgers);
    log.close().await.unwrap();
    let log = ManagedLog::open(env.clone(), "emptied", config).await.unwrap();
    assert_eq!((log.start_offset(), log.end_offset()), (4, 4));
    assert_eq!(log.append(&batch(4), 1, 0).await.unwrap(), 4, "offsets go on");
    assert_no_leak(c.meta.as_ref(), "after the emptied log reopened").await;
}
