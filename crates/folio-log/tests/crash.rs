//! L1 (no leak) through crashes: the process doing a trim, a compaction, a log deletion or
//! a trash pass dies at every metadata operation in turn (a fault-injecting store: the operation
//! fails and so does every later one, with the crashing transaction applied or not). A
//! fresh process then opens the same store. Checked each time: every ledger is in a chain
//! or in the trash; after the deleter runs the trash is empty and the ledgers are gone
//! from the metadata store; after bookie GC, from the bookie's disk too.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use folio_log::{LogConfig, ManagedLog, Trash, TrashConfig, WallClock};
use folio_meta::faulty::FaultyStore;
use folio_meta::keys::Keys;
use folio_meta::{ManualClock, MetadataStore};
use folio_testkit::Cluster;

fn config() -> LogConfig {
    LogConfig {
        trim_interval: Duration::from_secs(1 << 30),
        cursor_flush_interval: Duration::from_secs(1 << 30),
        ..small(1, 2)
    }
}

/// A clock far ahead, so trash records backing off after failures are due again.
fn later_clock() -> Arc<ManualClock> {
    let c = ManualClock::new();
    c.advance(Duration::from_millis(WallClock::now()) + Duration::from_secs(3600));
    Arc::new(c)
}

trait Now {
    fn now() -> u64;
}

impl Now for WallClock {
    fn now() -> u64 {
        use folio_meta::Clock;
        WallClock.now_ms()
    }
}

#[derive(Debug, Clone, Copy)]
enum Scenario {
    /// delete_records (a CAS, then the trim transaction), then a trash pass.
    Trim,
    /// Deleting the whole log, then a trash pass.
    DeleteLog,
    /// Compacting the first three ledgers (begin, write, swap), then a trash pass.
    Compact,
}

/// Runs the scenario with a crash after `crash_at` operations; returns whether the crash
/// happened (false once `crash_at` is past the scenario's last operation).
async fn run(c: &Cluster, name: &str, s: Scenario, crash_at: u64, applied: bool) -> bool {
    let base = c.meta.clone();
    let faulty = Arc::new(FaultyStore::new(base.clone()));
    let env = env_with(faulty.clone(), Arc::new(WallClock), "doomed");
    let log = ManagedLog::open_or_create(env.clone(), name, config()).await.unwrap();
    for i in 0..9 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    log.cursor_open("reader", 0).await.unwrap();
    faulty.crash_after(crash_at, applied);
    let trash = Trash::new(env.clone(), TrashConfig::default());
    match s {
        Scenario::Trim => {
            let _ = log.delete_records(7).await;
        }
        Scenario::DeleteLog => {
            let _ = log.delete("test").await;
        }
        Scenario::Compact => {
            let _ = compact_keep_odd(&log, 3).await;
        }
    }
    let _ = trash.run_once().await;
    let crashed = faulty.has_crashed();
    drop(log);

    // A new process on the same store.
    let context = format!("{s:?} crash at op {crash_at} (applied: {applied})");
    assert_no_leak(base.as_ref(), &context).await;
    let env2 = env_with(base.clone(), later_clock(), "survivor");
    match s {
        Scenario::Trim => {
            let log = ManagedLog::open_or_create(env2.clone(), name, config()).await.unwrap();
            assert_eq!(log.end_offset(), 9, "{context}: nothing acknowledged was lost");
            log.delete_records(7).await.unwrap();
            assert_eq!(log.read(7, usize::MAX, 10).await.unwrap().len(), 2, "{context}");
            log.close().await.unwrap();
        }
        Scenario::Compact => {
            let log = ManagedLog::open_or_create(env2.clone(), name, config()).await.unwrap();
            assert_eq!(log.end_offset(), 9, "{context}: nothing acknowledged was lost");
            // The old chain or the new one, never a mix: every offset is covered once,
            // by its own record or (compacted) by the odd one that superseded it.
            let all = log.read(0, usize::MAX, 100).await.unwrap();
            let compacted = all.len() == 6;
            assert!(compacted || all.len() == 9, "{context}: {} entries", all.len());
            for e in &all {
                let kept =
                    if compacted && e.base_offset < 6 { e.base_offset + 1 } else { e.base_offset };
                assert_eq!(e.payload, batch(kept), "{context}: entry at {}", e.base_offset);
            }
            log.close().await.unwrap();
        }
        Scenario::DeleteLog => {
            folio_log::trash::delete_log(&env2, name, "test").await.unwrap();
            assert!(base.get(&Keys::default().log(name)).await.unwrap().is_none(), "{context}");
            assert!(
                folio_meta::list_all(base.as_ref(), &Keys::default().cursors(name))
                    .await
                    .unwrap()
                    .is_empty(),
                "{context}: cursors go with the log"
            );
        }
    }
    let pass = Trash::new(env2, TrashConfig::default()).run_once().await.unwrap();
    assert_eq!(pass.failed, 0, "{context}: {pass:?}");
    let (all, chained, trashed) = ledger_sets(base.as_ref()).await;
    assert!(trashed.is_empty(), "{context}: the trash is empty after a pass: {trashed:?}");
    assert_eq!(all, chained, "{context}: only chained ledgers remain");
    crashed
}

async fn sweep(s: Scenario) {
    let c = Cluster::start(1).await;
    let mut runs = 0;
    for applied in [false, true] {
        for crash_at in 0.. {
            let name = format!("{s:?}-{applied}-{crash_at}");
            if !run(&c, &name, s, crash_at, applied).await {
                assert!(crash_at > 3, "the scenario has several steps");
                break;
            }
            runs += 1;
        }
    }
    // L1 on disk: after GC the bookie keeps only ledgers that still exist.
    let bookie = c.nodes[0].bookie();
    bookie.gc_now().await.unwrap();
    let meta: &dyn MetadataStore = c.meta.as_ref();
    let (all, _, _) = ledger_sets(meta).await;
    let on_disk = bookie.storage().ledger_ids();
    let leaked: Vec<_> = on_disk.iter().filter(|id| !all.contains(id)).collect();
    assert!(leaked.is_empty(), "ledgers {leaked:?} are on disk after GC but deleted");
    assert!(runs > 8, "{runs} crash points");
}

#[tokio::test]
async fn l1_crash_at_every_step_of_trimming_leaks_nothing() {
    sweep(Scenario::Trim).await;
}

#[tokio::test]
async fn l1_d1_crash_at_every_step_of_compaction_leaves_the_old_chain_or_the_new() {
    sweep(Scenario::Compact).await;
}

#[tokio::test]
async fn l1_crash_at_every_step_of_log_deletion_leaks_nothing() {
    sweep(Scenario::DeleteLog).await;
}
