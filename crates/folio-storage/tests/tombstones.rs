//! Tombstones (#45): a ledger deleted on this bookie is never created again, by any request,
//! across restarts and crashes (L1: a zombie add after deletion is refused, not acknowledged
//! into nothing).

use crate::common;

use common::*;
use folio_proto::Status;
use folio_storage::StorageError;
use folio_storage::fs::{CrashPlan, FaultFs};
use folio_storage::index::MemKv;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Every way a request could bring a deleted ledger back is refused with NO_LEDGER.
fn assert_refused(s: &folio_storage::Storage, l: u64, next: i64) {
    let e = add(s, &entry(l, next, b"zombie")).unwrap_err();
    assert!(matches!(e, StorageError::Deleted(x) if x == l), "{e}");
    assert_eq!(e.status(), Status::NoLedger);
    let e = add_async(s, &entry(l, next, b"zombie"), &KEY, true).map(|_| ()).unwrap_err();
    assert_eq!(e.status(), Status::NoLedger, "a recovery add too");
    assert_eq!(fence(s, l, &KEY).unwrap_err().status(), Status::NoLedger);
    assert_eq!(set_lac(s, l, 3).unwrap_err().status(), Status::NoLedger);
    assert_eq!(s.set_limbo(l, true).unwrap_err().status(), Status::NoLedger);
    assert_eq!(s.prepare_ledger(l, KEY, true, true).unwrap_err().status(), Status::NoLedger);
    assert!(!s.ledger_exists(l), "ledger {l} was created again");
    assert!(s.is_tombstoned(l));
}

#[test]
fn l1_a_deleted_ledger_refuses_every_later_request_and_stays_deleted_after_restart() {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let s = open(&fs, &kv, &config()).unwrap();
    for e in 0..5 {
        add(&s, &entry(1, e, b"x")).unwrap();
        add(&s, &entry(2, e, b"y")).unwrap();
    }
    s.delete_ledger(1).unwrap();
    assert_refused(&s, 1, 5);
    assert_eq!(s.ledger_ids(), vec![2]);
    add(&s, &entry(2, 5, b"y")).unwrap();
    s.close().unwrap();
    let s = open(&fs, &kv, &config()).unwrap();
    assert_refused(&s, 1, 5);
    assert_eq!(s.tombstone_counts(), (1, 0));
}

#[test]
fn l1_a_crash_after_deletion_does_not_replay_the_deleted_ledger_from_the_journal() {
    for journal_less in [false, true] {
        let (fs, kv) = (FaultFs::new(), MemKv::new());
        let mut config = if journal_less { two_write_config() } else { config() };
        config.journal.write_data = !journal_less;
        let s = open(&fs, &kv, &config).unwrap();
        // In the journal only (no flush): replay would create ledger 1 again.
        for e in 0..5 {
            add(&s, &entry(1, e, b"x")).unwrap();
        }
        fence(&s, 1, &KEY).unwrap();
        s.delete_ledger(1).unwrap();
        drop(s);
        fs.crash(CrashPlan::LoseAllUnsynced);
        let s = open(&fs, &kv, &config).unwrap();
        assert!(s.ledger_ids().is_empty(), "journal-less {journal_less}: replay created it");
        assert_refused(&s, 1, 0);
    }
}

#[test]
fn l1_random_crashes_never_bring_a_deleted_ledger_back() {
    for seed in 0..40u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (fs, kv) = (FaultFs::new(), MemKv::new());
        let mut deleted = std::collections::BTreeSet::new();
        let mut next = [0i64; 8];
        for round in 0..3 {
            let s = open(&fs, &kv, &config())
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: reopen: {e}"));
            for l in &deleted {
                assert!(!s.ledger_exists(*l), "seed {seed}: deleted ledger {l} is back");
                assert!(s.is_tombstoned(*l), "seed {seed}: ledger {l} lost its tombstone");
            }
            let mount = fs.mount();
            fs.crash_after_ops(rng.random_range(5..80), CrashPlan::Random { seed });
            for _ in 0..40 {
                if fs.has_crashed_since(&mount) {
                    break;
                }
                let l = rng.random_range(1..8u64);
                match rng.random_range(0..10) {
                    0..6 => {
                        if add(&s, &entry(l, next[l as usize], b"e")).is_ok() {
                            next[l as usize] += 1;
                        }
                    }
                    6..8 => {
                        if s.delete_ledger(l).is_ok() {
                            deleted.insert(l);
                        }
                    }
                    _ => {
                        let _ = s.flush();
                    }
                }
            }
            if !fs.has_crashed_since(&mount) {
                fs.crash(CrashPlan::Random { seed: seed + round });
            }
            drop(s);
        }
        let s = open(&fs, &kv, &config()).unwrap();
        for l in &deleted {
            assert_refused(&s, *l, next[*l as usize]);
        }
    }
}
