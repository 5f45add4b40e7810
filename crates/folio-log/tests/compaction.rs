//! Compaction's lifecycle in the managed log: an output ledger that keeps the replaced
//! ledgers' offsets is swapped in for them in one transaction and they go to the trash;
//! a chain that moved on refuses the swap; an output nobody finished is trashed by the
//! next owner (L1); what was acknowledged and kept stays readable by offset (D1).

use crate::common;

use std::time::Duration;

use common::*;
use folio_log::{LogConfig, LogError, ManagedLog, Trash, TrashConfig};
use folio_meta::keys::Keys;
use folio_meta::records::Record;
use folio_testkit::Cluster;

fn config() -> LogConfig {
    LogConfig { trim_interval: Duration::from_secs(1 << 30), ..small(1, 2) }
}

async fn filled(env: &folio_log::LogEnv, name: &str, n: u64) -> ManagedLog {
    let log = ManagedLog::open_or_create(env.clone(), name, config()).await.unwrap();
    for i in 0..n {
        assert_eq!(log.append(&batch(i), 1, i as i64).await.unwrap(), i);
    }
    log
}

#[tokio::test]
async fn d1_l1_a_compaction_keeps_offsets_and_trashes_what_it_replaced() {
    let c = Cluster::start(1).await;
    let env = env(&c, "t");
    let log = filled(&env, "compact", 9).await;
    let before = log.info().ledgers;
    assert_eq!(before.len(), 5, "ledgers of 2 entries, the last open");
    let r = compact_keep_odd(&log, 3).await.unwrap();
    assert_eq!(r.replaced, before[..3].iter().map(|l| l.ledger_id).collect::<Vec<_>>());
    let out = r.output.expect("records were kept");
    assert_eq!((out.first_offset, out.end_offset(), out.entries), (0, 6, 3));
    assert_eq!(log.clean_end_offset(), 6);
    let after = log.info().ledgers;
    assert_eq!(after[0].ledger_id, out.ledger_id);
    assert_eq!(after[1..], before[3..], "the rest of the chain is untouched");
    // Offsets are where they were: every offset still finds the entry covering it.
    let all = log.read(0, usize::MAX, 100).await.unwrap();
    let bases: Vec<u64> = all.iter().map(|e| e.base_offset).collect();
    assert_eq!(bases, [0, 2, 4, 6, 7, 8]);
    assert_eq!(all[0].payload, batch(1), "offset 1 survived, spanning 0..2");
    assert_eq!(all[2].payload, batch(5));
    for offset in 0..9 {
        let e = &log.read(offset, 1, 1).await.unwrap()[0];
        assert!(e.base_offset <= offset && offset < e.next_offset(), "offset {offset}: {e:?}");
    }
    assert_eq!(log.end_offset(), 9);
    assert_eq!(log.append(&batch(9), 1, 9).await.unwrap(), 9, "appends go on");
    assert_no_leak(c.meta.as_ref(), "after a compaction").await;
    let (_, _, trashed) = ledger_sets(c.meta.as_ref()).await;
    assert!(r.replaced.iter().all(|id| trashed.contains(id)), "{trashed:?}");
    // The deleter takes them, and the log reads the same afterwards and after a reopen.
    let pass = Trash::new(env.clone(), TrashConfig::default()).run_once().await.unwrap();
    assert_eq!(pass.failed, 0, "{pass:?}");
    log.close().await.unwrap();
    let log = ManagedLog::open(common::env(&c, "second"), "compact", config()).await.unwrap();
    let again = log.read(0, usize::MAX, 100).await.unwrap();
    assert_eq!(again.iter().map(|e| e.base_offset).collect::<Vec<_>>(), [0, 2, 4, 6, 7, 8, 9]);
    assert_eq!(log.clean_end_offset(), 6, "the clean end is in the log record");
    // A second compaction takes the compacted ledger with the next ones.
    let r2 = compact_keep_odd(&log, 2).await.unwrap();
    assert_eq!(r2.output.unwrap().end_offset(), 8);
    assert_eq!(log.clean_end_offset(), 8);
    assert_no_leak(c.meta.as_ref(), "after a second compaction").await;
}

#[tokio::test]
async fn a_compaction_that_keeps_nothing_moves_the_log_start() {
    let c = Cluster::start(1).await;
    let env = env(&c, "t");
    let log = filled(&env, "nothing", 5).await;
    let ids: Vec<u64> = log.info().ledgers.iter().take(2).map(|l| l.ledger_id).collect();
    let comp = log.compaction_begin(&ids).await.unwrap();
    let r = comp.finish().await.unwrap();
    assert_eq!(r.output, None);
    assert_eq!(log.start_offset(), 4);
    assert_eq!(log.read(4, usize::MAX, 10).await.unwrap().len(), 1);
    assert_no_leak(c.meta.as_ref(), "after an empty compaction").await;
    let (_, _, trashed) = ledger_sets(c.meta.as_ref()).await;
    assert_eq!(trashed.len(), 3, "both replaced ledgers and the empty output: {trashed:?}");
}

#[tokio::test]
async fn l1_a_chain_that_moved_on_refuses_the_swap_and_the_output_goes_to_the_trash() {
    let c = Cluster::start(1).await;
    let env = env(&c, "t");
    let log = filled(&env, "moved", 7).await;
    let ids: Vec<u64> = log.info().ledgers.iter().take(2).map(|l| l.ledger_id).collect();
    // Not the chain's head, open, or everything: refused before anything is written.
    assert!(matches!(log.compaction_begin(&ids[1..]).await, Err(LogError::Invalid(_))));
    let all: Vec<u64> = log.info().ledgers.iter().map(|l| l.ledger_id).collect();
    assert!(matches!(log.compaction_begin(&all).await, Err(LogError::Invalid(_))));
    let mut comp = log.compaction_begin(&ids).await.unwrap();
    assert!(
        matches!(log.compaction_begin(&ids).await, Err(LogError::Invalid(_))),
        "one compaction at a time"
    );
    let output = comp.output_ledger();
    // An entry that does not continue where the last ended is refused.
    assert!(matches!(comp.append(1, 1, 0, b"x").await, Err(LogError::Invalid(_))));
    comp.append(0, 4, 3, b"all").await.unwrap();
    // Meanwhile retention takes the first ledger.
    log.delete_records(2).await.unwrap();
    let r = comp.finish().await;
    assert!(matches!(r, Err(LogError::Invalid(_))), "{r:?}");
    let (_, chained, trashed) = ledger_sets(c.meta.as_ref()).await;
    assert!(trashed.contains(&output) && !chained.contains(&output));
    assert_no_leak(c.meta.as_ref(), "after a refused swap").await;
    assert_eq!(log.read(2, usize::MAX, 10).await.unwrap().len(), 5, "nothing else changed");
    // The next compaction may start.
    let ids: Vec<u64> = log.info().ledgers.iter().take(1).map(|l| l.ledger_id).collect();
    log.compaction_begin(&ids).await.unwrap().abandon().await;
    assert_no_leak(c.meta.as_ref(), "after an abandoned compaction").await;
}

#[tokio::test]
async fn l1_an_output_its_owner_never_swapped_in_is_trashed_by_the_next_owner() {
    let c = Cluster::start(1).await;
    let log = filled(&env(&c, "first"), "orphan", 5).await;
    let ids: Vec<u64> = log.info().ledgers.iter().take(1).map(|l| l.ledger_id).collect();
    let mut comp = log.compaction_begin(&ids).await.unwrap();
    let output = comp.output_ledger();
    comp.append(0, 1, 0, b"half").await.unwrap();
    // Another owner takes the log over while the output is being written.
    let next = ManagedLog::open(env(&c, "second"), "orphan", config()).await.unwrap();
    let key = Keys::default().log("orphan");
    let stored = folio_log::records::LogRecord::decode(
        &key,
        &c.meta.get(&key).await.unwrap().unwrap().value,
    )
    .unwrap();
    assert!(!stored.properties.contains_key(folio_log::COMPACTION_OUTPUT));
    let (_, _, trashed) = ledger_sets(c.meta.as_ref()).await;
    assert!(trashed.contains(&output), "{trashed:?}");
    assert!(comp.append(1, 1, 0, b"more").await.is_ok() || log.status().state.is_final());
    assert!(comp.finish().await.is_err(), "the fenced owner cannot swap");
    assert_eq!(next.read(0, usize::MAX, 10).await.unwrap().len(), 5);
    assert_no_leak(c.meta.as_ref(), "after a take-over mid-compaction").await;
}
