//! The stepped engine (`Background::Stepped`, the simulator's): no thread of its own; an
//! add is acknowledged only once its journal group was written and synced by the opener's
//! steps (D1 holds the same way), the wake tells of every step to take, and a flush by
//! `Stepper::flush` makes the entries survive a crash that loses everything unsynced.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use folio_storage::fs::{CrashPlan, FaultFs};
use folio_storage::index::MemKv;
use folio_storage::{Background, StorageConfig, Wake};

fn stepped(wakes: &Arc<AtomicUsize>, journal: bool) -> StorageConfig {
    let mut c = if journal { config() } else { two_write_config() };
    c.journal.write_data = journal;
    let w = wakes.clone();
    c.background = Background::Stepped(Wake(Arc::new(move || {
        w.fetch_add(1, Ordering::SeqCst);
    })));
    c
}

#[test]
fn d1_an_add_is_acknowledged_only_after_the_steps_wrote_and_synced_it() {
    let (fs, kv, wakes) = (FaultFs::new(), MemKv::new(), Arc::new(AtomicUsize::new(0)));
    let s = open(&fs, &kv, &stepped(&wakes, true)).unwrap();
    let step = s.stepper().expect("a stepped storage has steps");
    while step.write_journal() || step.sync_journal() {} // the open's own records
    let before = wakes.load(Ordering::SeqCst);
    let ack = add_async(&s, &entry(1, 0, b"stepped"), &KEY, false).unwrap();
    assert!(wakes.load(Ordering::SeqCst) > before, "queuing the record woke the opener");
    assert!(ack.try_recv().is_err(), "nothing acknowledged before any step");
    assert!(step.journal_has_work());
    assert!(step.write_journal(), "the group is written");
    assert!(ack.try_recv().is_err(), "written is not durable: still no acknowledgement");
    assert!(step.sync_journal(), "the group is synced");
    ack.try_recv().expect("acknowledged after the sync").unwrap();
    assert!(!step.journal_has_work() && !step.write_journal() && !step.sync_journal());
    // The journal holds it: a crash that loses every unsynced write keeps it.
    drop(s);
    fs.crash(CrashPlan::LoseAllUnsynced);
    let s = open(&fs, &kv, &stepped(&wakes, true)).unwrap();
    assert_eq!(s.read_entry(1, 0).unwrap(), entry(1, 0, b"stepped"));
}

#[test]
fn d1_journal_less_adds_are_durable_after_a_stepped_flush() {
    let (fs, kv, wakes) = (FaultFs::new(), MemKv::new(), Arc::new(AtomicUsize::new(0)));
    let s = open(&fs, &kv, &stepped(&wakes, false)).unwrap();
    let step = s.stepper().unwrap();
    while step.write_journal() || step.sync_journal() {}
    // A new master key is journaled: the first add waits for that record's sync.
    let first = add_async(&s, &entry(1, 0, b"a"), &KEY, false).unwrap();
    assert!(first.try_recv().is_err(), "the new key is not durable yet");
    while step.write_journal() || step.sync_journal() {}
    first.try_recv().expect("acknowledged once the key is durable").unwrap();
    // A known key: acknowledged once cached (journal-less).
    add_async(&s, &entry(1, 1, b"b"), &KEY, false).unwrap().try_recv().unwrap().unwrap();
    step.flush().unwrap();
    drop(s);
    fs.crash(CrashPlan::LoseAllUnsynced);
    let s = open(&fs, &kv, &stepped(&wakes, false)).unwrap();
    assert_eq!(s.read_entry(1, 1).unwrap(), entry(1, 1, b"b"), "the flush made it durable");
}

/// D3 (found by `crash.rs` seed 7 in about 1 run of 30): journal-less, a second add of a
/// ledger whose new key the first add brought was acknowledged at once, before the key's
/// record was synced; a crash then lost the key and the ledger took adds with any key. Now
/// every add waits until the key is durable; after a crash that loses everything unsynced,
/// nothing was acknowledged, and once synced the key survives.
#[test]
fn d3_journal_less_adds_wait_for_their_ledgers_new_key_to_be_durable() {
    let (fs, kv, wakes) = (FaultFs::new(), MemKv::new(), Arc::new(AtomicUsize::new(0)));
    let s = open(&fs, &kv, &stepped(&wakes, false)).unwrap();
    let step = s.stepper().unwrap();
    while step.write_journal() || step.sync_journal() {}
    let first = add_async(&s, &entry(1, 0, b"a"), &KEY, false).unwrap();
    let second = add_async(&s, &entry(1, 1, b"b"), &KEY, false).unwrap();
    assert!(first.try_recv().is_err(), "the new key is not durable yet");
    assert!(second.try_recv().is_err(), "acknowledged before the key it relies on is durable");
    assert!(step.write_journal(), "the key's record is written");
    assert!(second.try_recv().is_err(), "written is not durable");
    assert!(step.sync_journal());
    first.try_recv().expect("acknowledged once the key is durable").unwrap();
    second.try_recv().expect("acknowledged once the key is durable").unwrap();
    // Known durable now: the next add is acknowledged from the cache at once.
    add_async(&s, &entry(1, 2, b"c"), &KEY, false).unwrap().try_recv().unwrap().unwrap();
    drop(s);
    fs.crash(CrashPlan::LoseAllUnsynced);
    let s = open(&fs, &kv, &stepped(&wakes, false)).unwrap();
    let other = add_async(&s, &entry(1, 3, b"x"), &[0xee; 20], false).map(|_| ());
    assert!(
        matches!(other, Err(e) if e.status() == folio_proto::Status::Unauthorized),
        "the key was lost"
    );
}

#[test]
fn a_stepped_storage_refuses_rather_than_waits_when_its_cache_is_full() {
    let (fs, kv, wakes) = (FaultFs::new(), MemKv::new(), Arc::new(AtomicUsize::new(0)));
    let s = open(&fs, &kv, &stepped(&wakes, true)).unwrap();
    let step = s.stepper().unwrap();
    let big = vec![1u8; 1024 * 1024];
    let mut refused = None;
    for e in 0..64 {
        if let Err(err) = add_async(&s, &entry(1, e, &big), &KEY, false) {
            refused = Some((e, err));
            break;
        }
    }
    let (at, err) = refused.expect("a full cache refuses");
    assert!(matches!(err, folio_storage::StorageError::Overloaded { .. }), "{err}");
    assert!(step.flush_requested(), "and asks for a flush");
    while step.write_journal() || step.sync_journal() {}
    step.flush().unwrap();
    add_async(&s, &entry(1, at, &big), &KEY, false).expect("room again after the flush");
    assert!(!step.is_closed());
    drop(s);
    assert!(step.is_closed(), "the steps end with the storage");
}
