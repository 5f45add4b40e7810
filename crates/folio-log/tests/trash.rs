//! The trash and its deleter: owner tags, failures that back off and retry, bookies down
//! during deletion, a failed chain transaction, and whole-log deletion.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_client::{CreateOptions, LedgerError};
use folio_log::records::{LogRecord, TrashRecord};
use folio_log::{LogConfig, LogError, ManagedLog, OWNER_TAG, Trash, TrashConfig};
use folio_meta::faulty::FaultyStore;
use folio_meta::keys::Keys;
use folio_meta::records::Record;
use folio_meta::{Expect, ManualClock};
use folio_testkit::Cluster;

fn manual_env(c: &Cluster) -> (folio_log::LogEnv, ManualClock) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    (env_with(c.meta.clone(), Arc::new(clock.clone()), "t"), clock)
}

/// The ids of the ledgers in the trash.
async fn trashed_ids(env: &folio_log::LogEnv) -> Vec<u64> {
    let records = Trash::new(env.clone(), TrashConfig::default()).list().await.unwrap();
    records.iter().map(|t| t.ledger_id).collect()
}

#[tokio::test]
async fn l1_a_ledger_whose_owner_tag_names_another_log_is_never_deleted() {
    let c = Cluster::start(1).await;
    let (env, clock) = manual_env(&c);
    let mut opts = CreateOptions::new(1, 1, 1);
    opts.custom.insert(OWNER_TAG.into(), Bytes::from_static(b"someone-else"));
    let w = env.client.create(opts).await.unwrap();
    w.add(b"precious").await.unwrap();
    let untagged = env.client.create(CreateOptions::new(1, 1, 1)).await.unwrap();
    for id in [w.id(), untagged.id()] {
        let t = TrashRecord::new(id, "mine", "retention-time", 1);
        env.meta.put(&env.keys.trash_ledger(id), t.encode(), Expect::Absent).await.unwrap();
    }
    let trash = Trash::new(env.clone(), TrashConfig::default());
    for _ in 0..3 {
        let pass = trash.run_once().await.unwrap();
        assert_eq!(pass.deleted, 0);
        clock.advance(Duration::from_secs(3600));
    }
    assert!(env.client.metadata(w.id()).await.is_ok(), "the ledger is still there");
    assert!(env.client.metadata(untagged.id()).await.is_ok(), "an untagged ledger too");
    let records = trash.list().await.unwrap();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert!(r.last_error.contains("owner tag mismatch"), "{r:?}");
        assert_eq!(r.attempts, 3);
    }
    let status = trash.status().await.unwrap();
    assert_eq!((status.ledgers, status.failing), (2, 2));
}

#[tokio::test]
async fn l1_a_failing_deletion_backs_off_and_is_retried_until_done() {
    let c = Cluster::start(1).await;
    let (env, clock) = manual_env(&c);
    let faulty = Arc::new(FaultyStore::new(c.meta.clone()));
    let fenv = env_with(faulty.clone(), Arc::new(clock.clone()), "t");
    let log = ManagedLog::open_or_create(env.clone(), "b", small(1, 1)).await.unwrap();
    for i in 0..4 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    log.delete_records(3).await.unwrap();
    let trash = Trash::new(fenv, TrashConfig { concurrency: 1, ..TrashConfig::default() });
    let before = trash.list().await.unwrap().len() as u64;
    assert!(before >= 3);
    // Every deletion transaction fails: nothing is lost, every record backs off.
    faulty.fail_txns(u64::MAX);
    let pass = trash.run_once().await.unwrap();
    assert_eq!((pass.deleted, pass.failed), (0, before));
    faulty.fail_txns(0);
    let pass = trash.run_once().await.unwrap();
    assert_eq!(pass.waiting, before, "not due before the backoff ends");
    clock.advance(Duration::from_secs(600));
    let pass = trash.run_once().await.unwrap();
    assert_eq!(pass.deleted, before);
    assert!(trash.list().await.unwrap().is_empty());
    assert_no_leak(c.meta.as_ref(), "after retries").await;
    assert_eq!(trash.stats().failed.load(std::sync::atomic::Ordering::Relaxed), before);
}

#[tokio::test]
async fn l1_a_bookie_down_during_deletion_delays_only_the_reclaim() {
    let mut c = Cluster::start(1).await;
    let (env, _) = manual_env(&c);
    let log = ManagedLog::open_or_create(env.clone(), "down", small(1, 1)).await.unwrap();
    for i in 0..4 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    log.delete_records(3).await.unwrap();
    let trashed = trashed_ids(&env).await;
    c.nodes[0].kill().await;
    let pass = Trash::new(env.clone(), TrashConfig::default()).run_once().await.unwrap();
    assert_eq!(pass.deleted, trashed.len() as u64, "deletion needs only the metadata store");
    let meta = c.meta.clone();
    c.nodes[0].restart(&meta).await;
    let bookie = c.nodes[0].bookie();
    let on_disk = bookie.storage().ledger_ids();
    assert!(trashed.iter().all(|id| on_disk.contains(id)), "still on disk before GC");
    bookie.gc_now().await.unwrap();
    let on_disk = bookie.storage().ledger_ids();
    assert!(trashed.iter().all(|id| !on_disk.contains(id)), "reclaimed by GC: {on_disk:?}");
}

#[tokio::test]
async fn a_failed_trim_transaction_leaves_chain_and_memory_as_they_were() {
    let c = Cluster::start(1).await;
    let faulty = Arc::new(FaultyStore::new(c.meta.clone()));
    let env = env_with(faulty.clone(), Arc::new(folio_log::WallClock), "t");
    let config = LogConfig {
        retention_bytes: Some(1),
        trim_interval: Duration::from_secs(1 << 30),
        ..small(1, 2)
    };
    let log = ManagedLog::open_or_create(
        env.clone(),
        "cas",
        LogConfig { retention_bytes: None, ..config.clone() },
    )
    .await
    .unwrap();
    for i in 0..8 {
        log.append(&batch(i), 1, 0).await.unwrap();
    }
    log.close().await.unwrap();
    let log = ManagedLog::open_or_create(env.clone(), "cas", config).await.unwrap();
    let before = log.info().ledgers;
    faulty.fail_txns(1);
    let r = log.trim().await;
    assert!(matches!(r, Err(LogError::Meta(_))), "{r:?}");
    assert_eq!(log.info().ledgers, before, "memory unchanged");
    let key = Keys::default().log("cas");
    let stored = LogRecord::decode(&key, &c.meta.get(&key).await.unwrap().unwrap().value).unwrap();
    assert_eq!(
        stored.ledgers.iter().map(|l| l.ledger_id).collect::<Vec<_>>(),
        before.iter().map(|l| l.ledger_id).collect::<Vec<_>>(),
        "metadata unchanged"
    );
    assert_eq!(log.read(0, usize::MAX, 100).await.unwrap().len(), 8, "everything still readable");
    // The next pass does it, and later writes keep working.
    assert!(!log.trim().await.unwrap().trashed.is_empty());
    assert_eq!(log.append(b"after", 1, 0).await.unwrap(), 8);
    assert_no_leak(c.meta.as_ref(), "after a failed trim").await;
}

#[tokio::test]
async fn deleting_a_log_trashes_every_ledger_and_cursor_and_fences_the_owner() {
    let c = Cluster::start(1).await;
    let (env, clock) = manual_env(&c);
    let config = LogConfig { trash_batch_max: 3, ..small(1, 1) };
    let owner = ManagedLog::open_or_create(env.clone(), "gone", config.clone()).await.unwrap();
    for i in 0..250 {
        owner.append(&batch(i), 1, 0).await.unwrap();
    }
    owner.cursor_open("c1", 0).await.unwrap();
    let n = owner.info().ledgers.len();
    let per_txn = env.meta.txn_ops_max();
    assert!(n > per_txn, "more ledgers ({n}) than one transaction takes ({per_txn})");
    // Deleted by someone else (an admin), while the owner is alive.
    folio_log::trash::delete_log(&env, "gone", "admin").await.unwrap();
    // If the deletion caught the owner between committing its next ledger and creating
    // it, the owner's create failed and it waits to retry: its clock is manual, so time
    // moves on until it answers.
    let append = owner.append(b"late", 1, 0);
    tokio::pin!(append);
    let r = loop {
        tokio::select! {
            r = &mut append => break r,
            () = tokio::task::yield_now() => clock.advance(Duration::from_millis(100)),
        }
    };
    assert!(r.is_err(), "the owner cannot append after the deletion: {r:?}");
    assert!(
        matches!(
            ManagedLog::open(env.clone(), "gone", config.clone()).await,
            Err(LogError::NoSuchLog(_))
        ),
        "opening a deleted log never re-creates it"
    );
    assert!(
        ManagedLog::open_or_create(env.clone(), "gone", config.clone()).await.is_ok(),
        "the name is free again for an explicit creation"
    );
    let trash = Trash::new(env.clone(), TrashConfig::default());
    assert!(trash.list().await.unwrap().len() >= n - 1);
    trash.run_once().await.unwrap();
    assert_no_leak(c.meta.as_ref(), "after deleting a log").await;
    let r = env.client.metadata(owner.info().ledgers[0].ledger_id).await;
    assert!(matches!(r, Err(LedgerError::NoSuchLedger(_))));
}

/// L3: an owner commits its chain with the next ledger's id before it creates that ledger.
/// A deletion that finds such an uncreated last ledger creates it closed (owner tag = the
/// log), so the owner's create fails and nothing can ever be written there; the ledger goes
/// to the trash with the others.
#[tokio::test]
async fn deleting_a_log_fences_a_last_ledger_not_created_yet() {
    let c = Cluster::start(1).await;
    let (env, _) = manual_env(&c);
    let log = ManagedLog::open_or_create(env.clone(), "half", small(1, 1)).await.unwrap();
    log.append(b"one", 1, 0).await.unwrap();
    log.close().await.unwrap();
    // What an owner leaves between its chain commit and its create: an id in the chain
    // with no ledger behind it.
    let key = Keys::default().log("half");
    let v = c.meta.get(&key).await.unwrap().unwrap();
    let mut record = LogRecord::decode(&key, &v.value).unwrap();
    let next = env.client.allocate_id().await.unwrap();
    // (The owner seals its previous ledger in the same commit: one entry, one record.)
    let prev = record.ledgers.last_mut().unwrap();
    if !prev.is_closed() {
        (prev.entries, prev.records, prev.close_ms) = (1, 1, 1);
    }
    let end = prev.end_offset();
    record.ledgers.push(folio_log::records::LedgerInfo::open(next, end));
    c.meta.put(&key, record.encode(), Expect::Version(v.version)).await.unwrap();
    folio_log::trash::delete_log(&env, "half", "admin").await.unwrap();
    let mut o = CreateOptions::new(1, 1, 1);
    o.ledger_id = Some(next);
    o.custom.insert(OWNER_TAG.into(), Bytes::from_static(b"half"));
    match env.client.create(o).await {
        Err(LedgerError::Meta(folio_meta::MetaError::Conflict { .. })) => {}
        other => panic!("the owner's late create must fail: {other:?}"),
    }
    let m = env.client.metadata(next).await.unwrap();
    assert_eq!(m.state, folio_meta::records::LedgerState::Closed);
    assert_eq!(m.custom.get(OWNER_TAG).map(|b| b.as_ref()), Some(&b"half"[..]));
    let trashed = trashed_ids(&env).await;
    assert!(trashed.contains(&next), "{trashed:?}");
}

/// L1 and D1, the race of a slow owner: the owner commits its next ledger's id to the chain
/// and stalls before creating it; meanwhile the log is deleted (the fence creates that
/// ledger closed), and the trash deleter deletes it. When the owner wakes up it must not
/// create the id again: that ledger would be in no chain and no trash record (a leak), and
/// appends acknowledged into it would be lost.
#[tokio::test]
async fn l1_d1_a_slow_owner_never_recreates_a_ledger_the_deleter_removed() {
    let c = Cluster::start(1).await;
    let slow = Arc::new(FaultyStore::new(c.meta.clone()));
    let owner_env = env_with(slow.clone(), Arc::new(folio_log::WallClock), "owner");
    let config = LogConfig { append_timeout: Duration::from_secs(2), ..small(1, 1000) };
    let log = ManagedLog::open_or_create(owner_env, "slow", config).await.unwrap();
    log.append(b"before", 1, 0).await.unwrap();
    // The owner's next ledger: its id goes into the chain, then its creation is held.
    slow.hold_creations_under(&Keys::default().ledgers());
    let roll = tokio::spawn({
        let log = log.clone();
        async move { log.roll().await }
    });
    slow.wait_held(1).await;
    let admin = env(&c, "admin");
    folio_log::trash::delete_log(&admin, "slow", "admin").await.unwrap();
    let pass = Trash::new(admin.clone(), TrashConfig::default()).run_once().await.unwrap();
    assert_eq!(pass.failed, 0, "{pass:?}");
    assert_eq!(trashed_ids(&admin).await, Vec::<u64>::new(), "the trash is empty");
    // The owner goes on.
    slow.release();
    let _ = roll.await.unwrap();
    let late = log.append(b"late", 1, 0).await;
    assert!(late.is_err(), "nothing is acknowledged after the log was deleted: {late:?}");
    assert_no_leak(c.meta.as_ref(), "after the slow owner woke up").await;
    let ledgers = folio_meta::list_all(c.meta.as_ref(), &Keys::default().ledgers()).await.unwrap();
    assert!(
        ledgers.is_empty(),
        "no ledger metadata is left: {:?}",
        ledgers.iter().map(|v| &v.key).collect::<Vec<_>>()
    );
}

/// D1 and L1, a writer idle across a whole deletion: the log is deleted (its last ledger
/// fenced), the deleter deletes the ledgers, and the bookies' GC drops them, fence and all.
/// An append that then arrives must fail: a bookie that no longer knows the ledger would
/// take the add as the start of a new one and acknowledge it into nothing. With
/// revalidation off (`idle_revalidation` longer than the test), it does exactly that.
async fn append_after_a_deletion_the_writer_slept_through(
    idle_revalidation: Duration,
) -> Result<u64, LogError> {
    let c = Cluster::start(1).await;
    let owner_env = env(&c, "owner");
    let config = LogConfig { idle_revalidation, ..small(1, 1000) };
    let log = ManagedLog::open_or_create(owner_env, "sleeper", config).await.unwrap();
    log.append(b"before", 1, 0).await.unwrap();
    let admin = env(&c, "admin");
    folio_log::trash::delete_log(&admin, "sleeper", "admin").await.unwrap();
    let pass = Trash::new(admin.clone(), TrashConfig::default()).run_once().await.unwrap();
    assert_eq!(pass.failed, 0, "{pass:?}");
    for n in &c.nodes {
        n.bookie().gc_now().await.unwrap();
        assert!(
            n.bookie().storage().ledger_ids().is_empty(),
            "GC dropped the ledger, fence and all"
        );
    }
    log.append(b"late", 1, 0).await
}

#[tokio::test]
async fn d1_l1_an_append_after_a_deletion_the_writer_slept_through_fails() {
    let late = append_after_a_deletion_the_writer_slept_through(Duration::ZERO).await;
    assert!(late.is_err(), "nothing acknowledged after the log was deleted: {late:?}");
}

/// The hole the revalidation closes, with it off: the bookies' tombstones (#45) close it
/// too. (Before them, the bookie re-created the dropped ledger for the zombie and
/// acknowledged its append into nothing: this test asserted exactly that.)
#[tokio::test]
async fn l1_without_idle_revalidation_the_bookies_tombstones_refuse_a_zombie_append() {
    let late = append_after_a_deletion_the_writer_slept_through(Duration::from_secs(3600)).await;
    assert!(late.is_err(), "a bookie re-created the dropped ledger for the zombie: {late:?}");
}
