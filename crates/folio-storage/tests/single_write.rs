//! Single-write mode (`StorageMode::SingleWrite`, `storage::data_files`): the journal's files
//! are the data files. What only this mode has: entries never reach an entry log, files a
//! checkpoint passed are sealed with per-ledger byte counts, entries written after a flush's
//! mark stay readable (carried in the write cache) and are indexed by a later flush, a
//! bookie moves from two-write to single-write but not back, and damage in a sealed data
//! file is reported, never answered, and files GC is done with are written over (the
//! journal's recycle pool). The crash suites run this mode too (crash.rs,
//! `d1_d3_single_write_mode_survives_random_crashes`; the whole suite under
//! `FOLIO_STORAGE_MODE=single-write`).

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use folio_storage::fs::{CrashPlan, FaultFs, FileSystem};
use folio_storage::index::{MemKv, data_file_id};
use folio_storage::journal::is_recycled_name;
use folio_storage::{Background, Storage, StorageConfig, StorageError, StorageMode, Wake};

fn single_write() -> StorageConfig {
    StorageConfig { mode: StorageMode::SingleWrite, ..config() }
}

fn files_in(fs: &FaultFs, dir: &str) -> Vec<String> {
    fs.list_dir(Path::new(dir)).unwrap_or_default()
}

#[test]
fn entries_are_written_once_and_sealed_data_files_count_each_ledgers_bytes() {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let s = open(&fs, &kv, &single_write()).unwrap();
    let payload = vec![4u8; 16 * 1024];
    for e in 0..40 {
        add(&s, &entry(1 + (e as u64 % 2), e / 2, &payload)).unwrap();
        if e % 10 == 9 {
            s.flush().unwrap();
        }
    }
    s.flush().unwrap();
    assert!(files_in(&fs, "/data/ledgers/entrylogs").is_empty(), "no entry log is ever written");
    let states = s.entry_log_states().unwrap();
    let sealed: Vec<_> = states.iter().filter(|(_, st)| st.sealed).collect();
    assert!(sealed.len() >= 5, "640 KiB through 64 KiB files seals several: {states:?}");
    let mut counted = 0;
    for (id, st) in &sealed {
        assert!(data_file_id(*id).is_some(), "a sealed data file's id names a journal file");
        assert!(fs.exists(&log_file(*id)), "its file exists");
        assert!(
            st.size_bytes > 0 && st.ledgers.iter().map(|(_, b)| b).sum::<u64>() <= st.size_bytes
        );
        counted += st.ledgers.iter().map(|(_, b)| b).sum::<u64>();
    }
    let unsealed: u64 = states
        .iter()
        .filter(|(_, st)| !st.sealed)
        .flat_map(|(_, st)| &st.ledgers)
        .map(|(_, b)| b)
        .sum();
    let entry_bytes = entry(1, 0, &payload).encoded_len() as u64 + 12;
    assert_eq!(counted + unsealed, 40 * entry_bytes, "every indexed record is counted once");
    drop(s);
    let s = open(&fs, &kv, &single_write()).unwrap();
    for e in 0..40 {
        assert_eq!(s.read_entry(1 + (e as u64 % 2), e / 2).unwrap().payload(), &payload[..]);
    }
}

#[test]
fn d1_an_entry_written_after_the_flushs_mark_stays_readable_and_a_later_flush_indexes_it() {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let mut c = single_write();
    c.background = Background::Stepped(Wake(Arc::new(|| {})));
    let s = open(&fs, &kv, &c).unwrap();
    let step = s.stepper().unwrap();
    while step.write_journal() || step.sync_journal() {}
    let first = add_async(&s, &entry(1, 0, b"synced"), &KEY, false).unwrap();
    while step.write_journal() || step.sync_journal() {}
    first.try_recv().unwrap().unwrap();
    // Entry 1 is written but not synced when the flush reads its mark: not indexed, carried.
    let second = add_async(&s, &entry(1, 1, b"written"), &KEY, false).unwrap();
    assert!(step.write_journal());
    step.flush().unwrap();
    assert_eq!(s.read_entry(1, 1).unwrap().payload(), b"written", "carried in the write cache");
    assert_eq!(s.read_entry(1, 0).unwrap().payload(), b"synced", "indexed");
    assert!(step.sync_journal());
    second.try_recv().unwrap().unwrap();
    step.flush().unwrap();
    // Both are indexed now: a crash that loses every unsynced write keeps both.
    drop(s);
    fs.crash(CrashPlan::LoseAllUnsynced);
    let s = open(&fs, &kv, &c).unwrap();
    assert_eq!(s.recovery_report().journal.n_records, 0, "nothing after the checkpoint");
    assert_eq!(s.read_entry(1, 0).unwrap().payload(), b"synced");
    assert_eq!(s.read_entry(1, 1).unwrap().payload(), b"written");
}

#[test]
fn a_bookie_moves_from_two_write_to_single_write_but_not_back() {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let s = open(&fs, &kv, &two_write_config()).unwrap();
    for e in 0..10 {
        add(&s, &entry(1, e, b"two")).unwrap();
    }
    s.flush().unwrap();
    add(&s, &entry(1, 10, b"only in the journal")).unwrap();
    drop(s); // unflushed: entry 10 replays from the journal
    let s = open(&fs, &kv, &single_write()).unwrap();
    for e in 0..10 {
        assert_eq!(s.read_entry(1, e).unwrap().payload(), b"two");
    }
    assert_eq!(s.read_entry(1, 10).unwrap().payload(), b"only in the journal");
    add(&s, &entry(1, 11, b"single")).unwrap();
    s.close().unwrap();
    let err = open(&fs, &kv, &two_write_config()).unwrap_err();
    assert!(matches!(err, StorageError::BadRequest(_)), "{err}");
    assert!(err.to_string().contains("storage.mode = single-write"), "{err}");
    let s = open(&fs, &kv, &single_write()).unwrap();
    assert_eq!(s.read_entry(1, 11).unwrap().payload(), b"single");
}

#[test]
fn d1_a_damaged_byte_in_a_sealed_data_file_is_reported_never_returned() {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let s = open(&fs, &kv, &single_write()).unwrap();
    add(&s, &entry(1, 0, b"precious")).unwrap();
    for e in 1..20 {
        add(&s, &entry(2, e, &[1u8; 8 * 1024])).unwrap(); // fills files past the first
    }
    s.flush().unwrap();
    let states = s.entry_log_states().unwrap();
    let (id, _) = states
        .iter()
        .find(|(_, st)| st.sealed && st.ledgers.iter().any(|(l, _)| *l == 1))
        .expect("ledger 1's file is sealed");
    let file = log_file(*id);
    s.close().unwrap();
    let bytes = fs.contents(&file).unwrap();
    let at = bytes.windows(8).position(|w| w == b"precious").unwrap();
    fs.corrupt(&file, at, b"X");
    let s = open(&fs, &kv, &single_write()).expect("sealed files are not replayed at open");
    let err = s.read_entry(1, 0).unwrap_err();
    assert!(matches!(err, StorageError::Corruption { .. }), "{err}");
    assert!(err.to_string().contains("data file"), "the message names the file: {err}");
    assert_eq!(s.read_entry(2, 5).unwrap().payload(), &[1u8; 8 * 1024][..]);
}

/// A storage on `c`, reopened after entries `0..n` of ledger 1 (payload `one`) were added
/// alternately with ledger 2's (payload `two`), so they share the data files.
fn reopened_after_alternate_adds(
    c: &StorageConfig,
    n: i64,
    one: &[u8],
    two: &[u8],
) -> (FaultFs, folio_storage::Storage) {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let s = open(&fs, &kv, c).unwrap();
    for e in 0..n {
        add(&s, &entry(1, e, one)).unwrap();
        add(&s, &entry(2, e, two)).unwrap();
    }
    s.close().unwrap();
    let s = open(&fs, &kv, c).unwrap();
    (fs, s)
}

#[test]
fn catch_up_reads_of_one_ledger_between_others_read_ahead_over_the_gaps_at_most_half_again() {
    let mut c = single_write();
    c.journal.file_bytes_max = 1024 * 1024;
    c.read_cache_bytes = 1024 * 1024;
    c.read_ahead_bytes = 256 * 1024;
    // Ledger 1's entries alternate with ledger 2's smaller ones in the same data file.
    let (big, small) = (vec![1u8; 4000], vec![2u8; 1000]);
    let (_fs, s) = reopened_after_alternate_adds(&c, 100, &big, &small);
    let before = s.entry_log_bytes_read();
    assert_eq!(s.read_entry(1, 0).unwrap().payload(), &big[..]);
    let first_read = s.entry_log_bytes_read() - before;
    assert!(first_read > 10 * 4000, "the first read loaded the entries after it: {first_read}");
    let mut served = 0;
    for e in 0..100 {
        served += entry(1, e, &big).encoded_len() as u64;
        assert_eq!(s.read_entry(1, e).unwrap().payload(), &big[..], "entry {e}");
    }
    let read = s.entry_log_bytes_read() - before;
    assert!(read as f64 <= served as f64 * 1.5, "read {read} bytes for {served} served");
    // Ledger 2 reads back too.
    for e in 0..100 {
        assert_eq!(s.read_entry(2, e).unwrap().payload(), &small[..]);
    }
}

#[test]
fn a_ledger_between_bigger_entries_is_read_a_window_at_a_time_asking_ahead_only_for_its_own() {
    let mut c = single_write();
    c.journal.file_bytes_max = 4 * 1024 * 1024;
    c.read_cache_bytes = 1024 * 1024;
    c.read_ahead_bytes = 256 * 1024;
    c.read_ahead_entries = 50;
    // Each of ledger 1's entries sits alone between two of ledger 2's, four times its size:
    // no read can step over the gaps, so a window is one read per entry.
    let (small, big) = (vec![1u8; 1000], vec![2u8; 4000]);
    let (fs, s) = reopened_after_alternate_adds(&c, 200, &small, &big);
    let (read0, hinted0) = (s.entry_log_bytes_read(), fs.n_bytes_hinted());
    assert_eq!(s.read_entry(1, 0).unwrap().payload(), &small[..]);
    let window = s.entry_log_bytes_read() - read0;
    let one = entry(1, 0, &small).encoded_len() as u64;
    assert!(window >= 51 * one, "the first read loaded the 50 entries after it: {window}");
    for e in 1..=50 {
        assert_eq!(s.read_entry(1, e).unwrap().payload(), &small[..], "entry {e}");
    }
    assert_eq!(s.entry_log_bytes_read() - read0, window, "entries 1..=50 came from the cache");
    for e in 51..200 {
        assert_eq!(s.read_entry(1, e).unwrap().payload(), &small[..], "entry {e}");
    }
    let served = 200 * one;
    let read = s.entry_log_bytes_read() - read0;
    assert!(read as f64 <= served as f64 * 1.5, "read {read} bytes for {served} served");
    let hinted = fs.n_bytes_hinted() - hinted0;
    assert!(hinted >= served / 2, "the windows were asked for ahead: {hinted} of {served}");
    // Frame headers on top of the encoded entries; one of ledger 2's would be 4 000 more.
    let own = served + served / 10;
    assert!(hinted <= own, "only ledger 1's own entries were asked for: {hinted} of {served}");
}

/// Ledger 1 written over several data files and deleted, and every sealed file (it alone
/// held them) deleted by GC. Returns how many.
fn gc_a_deleted_ledger(s: &Storage) -> folio_storage::Result<usize> {
    let payload = vec![1u8; 16 * 1024];
    for e in 0..24 {
        add(s, &entry(1, e, &payload))?;
        if e % 4 == 3 {
            s.flush()?;
        }
    }
    s.flush()?;
    s.delete_ledger(1)?;
    s.flush()?;
    let states = s.entry_log_states()?;
    let sealed: Vec<u64> = states.iter().filter(|(_, st)| st.sealed).map(|(id, _)| *id).collect();
    for id in &sealed {
        s.delete_entry_log(*id)?;
    }
    Ok(sealed.len())
}

fn ledger_2_payload(e: i64) -> Vec<u8> {
    format!("two-{e}-").repeat(2000).into_bytes()
}

fn recycled_files(fs: &FaultFs) -> usize {
    files_in(fs, "/data/journal").iter().filter(|n| is_recycled_name(n)).count()
}

#[test]
fn l1_data_files_gc_is_done_with_are_written_over_as_new_files() {
    let (fs, kv) = (FaultFs::new(), MemKv::new());
    let s = open(&fs, &kv, &single_write()).unwrap();
    let pool_max = single_write().journal.n_files_recycled_max;
    let n = gc_a_deleted_ledger(&s).unwrap();
    assert!(n > pool_max, "384 KiB through 64 KiB files seals several: {n}");
    // The pool keeps `pool_max` of them, under their pool name; the rest are gone.
    assert_eq!(recycled_files(&fs), pool_max);
    assert_eq!(s.journal_recycled(), (pool_max, 0));
    let listed: Vec<u64> = s.entry_log_states().unwrap().iter().map(|(id, _)| *id).collect();
    for name in files_in(&fs, "/data/journal") {
        if let Some(f) = folio_storage::journal::format::parse_file_name(&name) {
            let id = folio_storage::index::data_file_log_id(f);
            assert!(listed.contains(&id) || !listed.iter().any(|l| *l > id), "{name} leaked");
        }
    }
    // The next files the journal opens are those, written over under new ids.
    for e in 0..16 {
        add(&s, &entry(2, e, &ledger_2_payload(e))).unwrap();
    }
    s.flush().unwrap();
    assert_eq!(s.journal_recycled(), (0, pool_max as u64));
    assert_eq!(recycled_files(&fs), 0);
    for e in 0..16 {
        assert_eq!(s.read_entry(2, e).unwrap().payload(), &ledger_2_payload(e)[..]);
    }
    drop(s);
    fs.crash(CrashPlan::LoseAllUnsynced);
    let s = open(&fs, &kv, &single_write()).unwrap();
    for e in 0..16 {
        assert_eq!(s.read_entry(2, e).unwrap().payload(), &ledger_2_payload(e)[..]);
    }
    assert!(s.read_entry(1, 0).is_err(), "the deleted ledger stays deleted");
}

#[test]
fn d1_l1_a_crash_at_every_step_of_recycling_and_writing_over_loses_nothing_and_leaks_nothing() {
    let write = |s: &Storage, acked: &mut Vec<i64>| {
        for e in 0..12 {
            if add(s, &entry(2, e, &ledger_2_payload(e))).is_err() {
                return;
            }
            acked.push(e);
        }
    };
    // Count the file-system steps of a GC pass and of the writes over its files.
    let steps = {
        let (fs, kv) = (FaultFs::new(), MemKv::new());
        let s = open(&fs, &kv, &single_write()).unwrap();
        let n0 = fs.n_mutations();
        gc_a_deleted_ledger(&s).unwrap();
        write(&s, &mut Vec::new());
        assert_eq!(s.journal_recycled().1, 2, "the writes reach the recycled files");
        fs.n_mutations() - n0
    };
    for step in 0..steps {
        let (fs, kv) = (FaultFs::new(), MemKv::new());
        let s = open(&fs, &kv, &single_write()).unwrap();
        fs.crash_after_ops(step, CrashPlan::Random { seed: step });
        let mut acked = Vec::new();
        let deleted = gc_a_deleted_ledger(&s).is_ok();
        if deleted {
            write(&s, &mut acked);
        }
        drop(s);
        if !fs.has_crashed_since(&fs) {
            fs.crash(CrashPlan::Random { seed: step });
        }
        let s = open(&fs, &kv, &single_write())
            .unwrap_or_else(|err| panic!("step {step}: reopen: {err}"));
        for e in &acked {
            let got = s.read_entry(2, *e).unwrap_or_else(|err| panic!("step {step}: 2/{e}: {err}"));
            assert_eq!(got.payload(), &ledger_2_payload(*e)[..], "step {step}");
        }
        // Nothing of a recycled file's earlier incarnation comes back.
        if deleted {
            assert!(s.read_entry(1, 0).is_err(), "step {step}: deleted ledger 1 came back");
            assert!(s.list_entries(1).map_or(true, |l| l.is_empty()), "step {step}: ledger 1");
        }
        // L1: every data file on disk is listed, or newer than every listed one (the
        // journal's newest, not sealed yet); the pool holds at most its limit.
        let listed: Vec<u64> = s.entry_log_states().unwrap().iter().map(|(id, _)| *id).collect();
        let newest = listed.iter().copied().max().unwrap_or(0);
        for name in files_in(&fs, "/data/journal") {
            if let Some(f) = folio_storage::journal::format::parse_file_name(&name) {
                let id = folio_storage::index::data_file_log_id(f);
                assert!(listed.contains(&id) || id > newest, "step {step}: {name} leaked");
            }
        }
        assert!(recycled_files(&fs) <= 2, "step {step}");
        // And the storage goes on: more writes over whatever the pool holds.
        for e in 0..8 {
            add(&s, &entry(3, e, &ledger_2_payload(e)))
                .unwrap_or_else(|err| panic!("step {step}: add after the crash: {err}"));
        }
        for e in 0..8 {
            assert_eq!(s.read_entry(3, e).unwrap().payload(), &ledger_2_payload(e)[..]);
        }
    }
}
