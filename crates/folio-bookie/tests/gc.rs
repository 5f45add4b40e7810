//! Garbage collection (L1 no-leak, L2 gc-never-pinned) against an embedded metadata store.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_bookie::StorageMode;
use folio_bookie::fs::{CrashPlan, FaultFs, FileSystem};
use folio_bookie::gc::{GcConfig, GcError, gc_once};
use folio_bookie::index::MemKv;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;
use folio_meta::records::{DigestType, LedgerMetadata, LedgerState, Record};
use folio_meta::*;

fn metadata(state: LedgerState, bookies: &[&str]) -> Bytes {
    LedgerMetadata {
        ensemble_size: bookies.len() as u16,
        write_quorum: bookies.len() as u16,
        ack_quorum: 1,
        state,
        last_entry_id: if state == LedgerState::Closed { 0 } else { -1 },
        length: 0,
        digest_type: DigestType::Crc32c,
        password: None,
        ensembles: [(0, bookies.iter().map(|b| b.to_string()).collect())].into(),
        custom: BTreeMap::new(),
        ctime_ms: 0,
        creator_token: 0,
    }
    .encode()
}

struct Env {
    _dir: tempfile::TempDir,
    meta: Arc<EmbeddedStore>,
    keys: Keys,
    fs: FaultFs,
    kv: MemKv,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let meta = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    Env { _dir: dir, meta, keys: Keys::default(), fs: FaultFs::new(), kv: MemKv::new() }
}

async fn create(e: &Env, ledger: u64, state: LedgerState, bookies: &[&str]) {
    e.meta.put(&e.keys.ledger(ledger), metadata(state, bookies), Expect::Any).await.unwrap();
}

/// Writes `n` 64 KiB entries to each ledger and flushes, so 1 MiB entry logs rotate.
fn fill(s: &folio_bookie::Storage, ledgers: &[u64], n: i64) {
    let payload = vec![9u8; 64 * 1024];
    for l in ledgers {
        let first = s.last_entry_id(*l).unwrap().map_or(0, |x| x + 1);
        for e in first..first + n {
            add(s, &entry(*l, e, &payload)).unwrap();
        }
        s.flush().unwrap();
    }
}

fn config() -> GcConfig {
    GcConfig {
        interval: Duration::from_secs(3600),
        list_page: 2,
        compaction_threshold: 0.0,
        ..GcConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_l2_deleted_ledgers_are_dropped_and_every_log_they_alone_held_is_deleted() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    for l in [1, 2, 3] {
        create(&e, l, LedgerState::Closed, &["b1"]).await;
    }
    fill(&s, &[1, 2], 40); // several sealed logs of ledgers 1 and 2 only
    fill(&s, &[3], 4); // ledger 3, in the log that is still being written
    e.meta.delete(&e.keys.ledger(1), Expect::Any).await.unwrap();
    e.meta.delete(&e.keys.ledger(2), Expect::Any).await.unwrap();
    let before: Vec<u64> = s
        .entry_log_states()
        .unwrap()
        .iter()
        .filter(|(_, st)| st.sealed)
        .map(|(id, _)| *id)
        .collect();
    assert!(before.len() >= 4, "the workload sealed several logs: {before:?}");
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![1, 2]);
    assert_eq!(s.ledger_ids(), vec![3]);
    let pinned: Vec<u64> = r.logs_kept.iter().map(|k| k.log_id).collect();
    for id in &before {
        let deleted = r.logs_deleted.contains(id);
        assert!(deleted || pinned.contains(id), "sealed log {id} neither deleted nor reported");
        assert_eq!(e.fs.exists(&log_file(*id)), !deleted, "log {id}");
    }
    for k in &r.logs_kept {
        assert_eq!(k.pinned_by, vec![3], "only ledger 3 pins what is kept");
        assert!(k.usage() > 0.0 && k.usage() <= 1.0);
    }
    assert!(r.bytes_reclaimed >= 4 * 1024 * 1024, "reclaimed {} bytes", r.bytes_reclaimed);
    // The active log was never touched, and everything of ledger 3 still reads.
    for i in 0..4 {
        assert_eq!(s.read_entry(3, i).unwrap().payload().len(), 64 * 1024);
    }
    drop(s);
    let s = open(&e.fs, &e.kv, &common::config()).unwrap();
    assert!(s.recovery_report().orphan_entry_logs_removed.is_empty());
    assert_eq!(s.ledger_ids(), vec![3]);
}

/// Wraps a store: its `list` fails on call `fail_on` (counting from 0), and right after
/// the last page it creates `create_after` (a ledger born after the listing).
#[derive(Debug)]
struct Flaky {
    inner: Arc<EmbeddedStore>,
    calls: AtomicUsize,
    fail_on: Option<usize>,
    create_after: Option<String>,
}

impl MetadataStore for Flaky {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>>> {
        self.inner.get(key)
    }
    fn put<'a>(
        &'a self,
        key: &'a str,
        value: Bytes,
        expect: Expect,
    ) -> BoxFuture<'a, Result<Version>> {
        self.inner.put(key, value, expect)
    }
    fn delete<'a>(&'a self, key: &'a str, expect: Expect) -> BoxFuture<'a, Result<bool>> {
        self.inner.delete(key, expect)
    }
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Page>> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if Some(n) == self.fail_on {
                return Err(MetaError::unavailable("injected failure on a later page"));
            }
            let page = self.inner.list(prefix, after, limit).await?;
            if !page.more
                && let Some(k) = &self.create_after
            {
                self.inner.put(k, metadata(LedgerState::Open, &["b1"]), Expect::Any).await?;
            }
            Ok(page)
        })
    }
    fn txn(&self, txn: Txn) -> BoxFuture<'_, Result<TxnOutcome>> {
        self.inner.txn(txn)
    }
    fn watch<'a>(&'a self, prefix: &'a str, from: Revision) -> BoxFuture<'a, Result<Watch>> {
        self.inner.watch(prefix, from)
    }
    fn grant_lease(&self, ttl: Duration) -> BoxFuture<'_, Result<LeaseId>> {
        self.inner.grant_lease(ttl)
    }
    fn keep_alive(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        self.inner.keep_alive(lease)
    }
    fn revoke_lease(&self, lease: LeaseId) -> BoxFuture<'_, Result<()>> {
        self.inner.revoke_lease(lease)
    }
    fn next_id<'a>(&'a self, sequence: &'a str) -> BoxFuture<'a, Result<u64>> {
        self.inner.next_id(sequence)
    }
    fn revision(&self) -> BoxFuture<'_, Result<Revision>> {
        self.inner.revision()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_that_fails_midway_deletes_nothing() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    for l in 1..=6 {
        create(&e, l, LedgerState::Closed, &["b1"]).await;
    }
    fill(&s, &[1, 2, 3, 4, 5, 6], 1);
    // Pages of 2: the first page (ledgers 1, 2) arrives, the second fails.
    let flaky = Flaky {
        inner: e.meta.clone(),
        calls: AtomicUsize::new(0),
        fail_on: Some(1),
        create_after: None,
    };
    let err = gc_once(&s, &flaky, &e.keys, "b1", &config()).await.unwrap_err();
    assert!(matches!(err, GcError::Listing(_)), "{err}");
    assert_eq!(s.ledger_ids(), vec![1, 2, 3, 4, 5, 6], "nothing deleted on a partial listing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_created_after_the_listing_is_kept() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    create(&e, 1, LedgerState::Closed, &["b1"]).await;
    fill(&s, &[1, 7], 1); // ledger 7's first entries arrive before its metadata is listed
    let flaky = Flaky {
        inner: e.meta.clone(),
        calls: AtomicUsize::new(0),
        fail_on: None,
        create_after: Some(e.keys.ledger(7)),
    };
    let r = gc_once(&s, &flaky, &e.keys, "b1", &config()).await.unwrap();
    assert!(r.ledgers_dropped.is_empty(), "{r:?}");
    assert_eq!(s.ledger_ids(), vec![1, 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_ledgers_that_moved_off_this_bookie_are_dropped_open_ones_are_not() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    create(&e, 1, LedgerState::Closed, &["b2", "b3"]).await; // moved away, closed
    create(&e, 2, LedgerState::Open, &["b2", "b3"]).await; // moved away, still open
    create(&e, 3, LedgerState::Closed, &["b1", "b2"]).await; // ours
    fill(&s, &[1, 2, 3], 1);
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.over_replicated_dropped, vec![1]);
    assert_eq!(s.ledger_ids(), vec![2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_a_crash_between_index_and_file_deletion_leaves_no_orphan() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    create(&e, 1, LedgerState::Closed, &["b1"]).await;
    fill(&s, &[1], 40);
    e.meta.delete(&e.keys.ledger(1), Expect::Any).await.unwrap();
    // The file removal is the first file-system mutation of the first log deletion.
    e.fs.crash_after_ops(0, CrashPlan::LoseAllUnsynced);
    let _ = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await;
    drop(s);
    let s = open(&e.fs, &e.kv, &common::config()).unwrap();
    let r = s.recovery_report();
    assert!(!r.orphan_entry_logs_removed.is_empty(), "the half-deleted log was cleaned up at open");
    let states = s.entry_log_states().unwrap();
    for id in &r.orphan_entry_logs_removed {
        assert!(!states.iter().any(|(x, _)| x == id));
    }
}

/// Ledgers 1 and 2 interleaved in every flush (so they share every log); 1 is deleted.
async fn shared_logs(e: &Env) -> Arc<folio_bookie::Storage> {
    shared_logs_in(e, &shared_config()).await
}

async fn shared_logs_in(e: &Env, c: &folio_bookie::StorageConfig) -> Arc<folio_bookie::Storage> {
    let s = Arc::new(open(&e.fs, &e.kv, c).unwrap());
    create(e, 1, LedgerState::Closed, &["b1"]).await;
    create(e, 2, LedgerState::Closed, &["b1"]).await;
    let payload = vec![5u8; 64 * 1024];
    for i in 0..40 {
        add(&s, &entry(1, i, &payload)).unwrap();
        add(&s, &entry(2, i, &format!("two-{i}").repeat(3000).into_bytes())).unwrap();
        if i % 4 == 3 {
            s.flush().unwrap();
        }
    }
    s.flush().unwrap();
    e.meta.delete(&e.keys.ledger(1), Expect::Any).await.unwrap();
    s
}

/// Storage for `shared_logs`: single-write data files as large as entry logs (1 MiB), so
/// both ledgers' entries share each of them too.
fn shared_config() -> folio_bookie::StorageConfig {
    let mut c = common::config();
    c.journal.file_bytes_max = c.entry_log_bytes_max;
    c
}

fn compacting() -> GcConfig {
    GcConfig { compaction_threshold: 0.6, ..config() }
}

fn disk_bytes(fs: &FaultFs) -> usize {
    log_bytes_on_disk(fs, mode_from_env())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_compaction_reclaims_logs_shared_with_a_live_ledger() {
    let e = env();
    let s = shared_logs(&e).await;
    let before = disk_bytes(&e.fs);
    // Without compaction nothing can go: ledger 2 pins every sealed log.
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert!(r.logs_deleted.is_empty() && !r.logs_kept.is_empty());
    assert!(r.logs_kept.iter().all(|k| k.pinned_by == vec![2] && k.usage() < 0.6));
    // A pass with no time for compaction compacts nothing; the next one does the work.
    let no_time = GcConfig { compaction_time_max_per_pass: Duration::ZERO, ..compacting() };
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &no_time).await.unwrap();
    assert!(r.logs_compacted.is_empty(), "{r:?}");
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &compacting()).await.unwrap();
    assert!(!r.logs_compacted.is_empty(), "{r:?}");
    let after = disk_bytes(&e.fs);
    assert!(after * 10 < before * 7, "compaction shrank {before} bytes only to {after}");
    for i in 0..40 {
        assert_eq!(
            s.read_entry(2, i).unwrap().payload(),
            format!("two-{i}").repeat(3000).as_bytes()
        );
    }
    drop(s);
    let s = open(&e.fs, &e.kv, &shared_config()).unwrap();
    assert!(s.recovery_report().orphan_entry_logs_removed.is_empty());
    for i in 0..40 {
        assert_eq!(
            s.read_entry(2, i).unwrap().payload(),
            format!("two-{i}").repeat(3000).as_bytes()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_l1_a_crash_at_every_step_of_gc_and_compaction_loses_nothing_and_leaks_nothing() {
    // Count the file-system mutations of one full pass, then crash inside each of them.
    let (steps, reclaimed_size) = {
        let e = env();
        let s = shared_logs(&e).await;
        let n0 = e.fs.n_mutations();
        gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &compacting()).await.unwrap();
        (e.fs.n_mutations() - n0, disk_bytes(&e.fs))
    };
    assert!(steps > 3, "a pass makes several file-system steps: {steps}");
    for step in 0..steps {
        let e = env();
        let s = shared_logs(&e).await;
        e.fs.crash_after_ops(step, CrashPlan::Random { seed: step });
        let _ = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &compacting()).await;
        drop(s);
        if !e.fs.has_crashed_since(&e.fs) {
            e.fs.crash(CrashPlan::Random { seed: step });
        }
        let s = open(&e.fs, &e.kv, &shared_config())
            .unwrap_or_else(|err| panic!("step {step}: reopen: {err}"));
        for i in 0..40 {
            let got =
                s.read_entry(2, i).unwrap_or_else(|err| panic!("step {step}: entry 2/{i}: {err}"));
            assert_eq!(got.payload(), format!("two-{i}").repeat(3000).as_bytes(), "step {step}");
        }
        // L1: every log file on disk is listed in the index, and every listed log exists;
        // in single-write mode the journal's newest files (not sealed yet) come on top.
        let listed: Vec<u64> = s.entry_log_states().unwrap().iter().map(|(id, _)| *id).collect();
        let mut on_disk = log_ids_on_disk(&e.fs, mode_from_env());
        let newest_listed = listed.iter().copied().max().unwrap_or(0);
        on_disk.retain(|id| {
            listed.contains(id)
                || folio_bookie::index::data_file_id(*id).is_none()
                || *id < newest_listed
        });
        assert_eq!(on_disk, listed, "step {step}: files and index disagree");
        // A later pass finishes the job: the disk converges to what an uninterrupted pass
        // leaves (within one log's worth of copies left by the crash).
        let s = Arc::new(s);
        gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &compacting())
            .await
            .unwrap_or_else(|err| panic!("step {step}: {err}"));
        let now = disk_bytes(&e.fs);
        assert!(
            now <= reclaimed_size + 2 * 1024 * 1024,
            "step {step}: {now} bytes on disk after the retry, {reclaimed_size} without a crash"
        );
    }
}

/// The seed's scenario (seed 002, BookKeeper #2728): one log per ledger; one long-lived
/// ledger keeps its log open and unsealed while many short ledgers are written, rotated and
/// deleted. BookKeeper's GC only looked below the "least unflushed" log id, so the one open
/// log pinned every newer log and disks filled. Here GC considers every sealed log: all of
/// the short ledgers' logs come back at the first pass after their deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_one_open_log_pins_nothing_in_per_ledger_mode() {
    let e = env();
    let mut c = common::two_write_config();
    c.entry_log_per_ledger = true;
    c.entry_log_idle_rotation = Duration::from_secs(3600);
    let s = Arc::new(open(&e.fs, &e.kv, &c).unwrap());
    create(&e, 1000, LedgerState::Open, &["b1"]).await; // the long-lived ledger
    let payload = vec![3u8; 64 * 1024];
    for round in 0..20u64 {
        let short = round + 1;
        create(&e, short, LedgerState::Closed, &["b1"]).await;
        add(&s, &entry(1000, round as i64, b"long-lived")).unwrap();
        for i in 0..4 {
            add(&s, &entry(short, i, &payload)).unwrap();
        }
        s.flush().unwrap();
    }
    let long_log = |s: &folio_bookie::Storage| -> Vec<u64> {
        s.entry_log_states()
            .unwrap()
            .iter()
            .filter(|(_, st)| !st.sealed)
            .map(|(id, _)| *id)
            .collect()
    };
    let open_before = long_log(&s);
    for short in 1..=20 {
        e.meta.delete(&e.keys.ledger(short), Expect::Any).await.unwrap();
    }
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, (1..=20).collect::<Vec<_>>());
    assert_eq!(r.logs_deleted.len(), 20, "every short ledger's log came back: {r:?}");
    let remaining: Vec<u64> = s.entry_log_states().unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(remaining, long_log(&s), "only the long-lived ledger's open log is left");
    assert_eq!(remaining.len(), 1, "one log left: {remaining:?}");
    assert!(open_before.contains(&remaining[0]), "it is the long-lived ledger's log, still open");
    for round in 0..20 {
        assert_eq!(s.read_entry(1000, round).unwrap().payload(), b"long-lived");
    }
    // Idle rotation seals a log nobody writes to any more.
    drop(s);
    c.entry_log_idle_rotation = Duration::ZERO;
    let s = open(&e.fs, &e.kv, &c).unwrap();
    add(&s, &entry(1000, 20, b"long-lived")).unwrap();
    s.flush().unwrap();
    assert!(s.entry_log_states().unwrap().iter().all(|(_, st)| st.sealed), "idle logs are sealed");
}

/// L1 on an idle single-write bookie: the journal's current file holds a deleted ledger's
/// entries. It stays active while written to; once no flush has indexed anything for
/// `entry_log_idle_rotation`, the flush has the journal move to a new file and seals the
/// idle one, so the next GC pass deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_an_idle_data_file_is_sealed_so_its_deleted_ledgers_come_back() {
    let e = env();
    let mut c = common::config();
    c.mode = StorageMode::SingleWrite;
    c.journal.file_bytes_max = 64 * 1024 * 1024; // never full here
    c.entry_log_idle_rotation = Duration::from_secs(3600);
    let clock = folio_meta::ManualClock::new();
    c.clock = Arc::new(clock.clone());
    let s = Arc::new(open(&e.fs, &e.kv, &c).unwrap());
    let data_files = |s: &folio_bookie::Storage, sealed: bool| {
        s.entry_log_states().unwrap().iter().filter(|(_, st)| st.sealed == sealed).count()
    };
    create(&e, 1, LedgerState::Closed, &["b1"]).await;
    fill(&s, &[1], 8);
    e.meta.delete(&e.keys.ledger(1), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![1]);
    assert!(r.logs_deleted.is_empty(), "the active data file is never deleted: {r:?}");
    create(&e, 2, LedgerState::Closed, &["b1"]).await;
    fill(&s, &[2], 4);
    clock.advance(Duration::from_secs(3599));
    s.flush().unwrap();
    assert_eq!((data_files(&s, false), data_files(&s, true)), (1, 0), "idle < 1 h: active");
    clock.advance(Duration::from_secs(1));
    s.flush().unwrap(); // an hour after the last flush that indexed anything
    assert_eq!((data_files(&s, false), data_files(&s, true)), (0, 1), "the idle file is sealed");
    e.meta.delete(&e.keys.ledger(2), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![2]);
    assert_eq!(r.logs_deleted.len(), 1, "{r:?}");
    assert!(s.entry_log_states().unwrap().is_empty(), "every data file came back: {r:?}");
    assert!(!e.fs.exists(&log_file(r.logs_deleted[0])), "and its file is gone");
    // A new entry goes to the new file and reads back, also after a reopen.
    create(&e, 3, LedgerState::Open, &["b1"]).await;
    add(&s, &entry(3, 0, b"after")).unwrap();
    s.flush().unwrap();
    assert_eq!(s.read_entry(3, 0).unwrap().payload(), b"after");
    drop(s);
    let s = open(&e.fs, &e.kv, &c).unwrap();
    assert_eq!(s.read_entry(3, 0).unwrap().payload(), b"after");
}

/// L1 on an idle bookie (shared mode): the one active entry log holds a deleted ledger's
/// entries; while something writes to it, it stays active (GC never touches an active
/// log), and once no flush has written to it for `entry_log_idle_rotation` it is sealed,
/// so the next GC pass deletes it and no entry log is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_an_idle_shared_log_is_sealed_so_its_deleted_ledgers_come_back() {
    let e = env();
    let mut c = common::two_write_config();
    c.entry_log_bytes_max = 64 * 1024 * 1024; // never full here
    c.entry_log_idle_rotation = Duration::from_secs(3600);
    let clock = folio_meta::ManualClock::new();
    c.clock = Arc::new(clock.clone());
    let s = Arc::new(open(&e.fs, &e.kv, &c).unwrap());
    create(&e, 1, LedgerState::Closed, &["b1"]).await;
    fill(&s, &[1], 8);
    s.flush().unwrap(); // nothing new: idle, but not for an hour
    e.meta.delete(&e.keys.ledger(1), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![1]);
    assert!(r.logs_deleted.is_empty(), "the active log is never deleted: {r:?}");
    assert_eq!(s.entry_log_states().unwrap().len(), 1);
    // A second ledger's entries go to the same active log; flushes that write nothing
    // leave it active until an hour (on the storage's clock) has passed since the last
    // flush that wrote to it.
    create(&e, 2, LedgerState::Closed, &["b1"]).await;
    fill(&s, &[2], 4);
    let active = |s: &folio_bookie::Storage| {
        s.entry_log_states().unwrap().iter().filter(|(_, st)| !st.sealed).count()
    };
    s.flush().unwrap();
    clock.advance(Duration::from_secs(3599));
    s.flush().unwrap();
    assert_eq!(active(&s), 1, "ledger 2's entries are in an active log, idle < 1 h");
    clock.advance(Duration::from_secs(1));
    s.flush().unwrap(); // a flush that writes nothing, an hour after the last that did
    assert_eq!(active(&s), 0, "the idle log is sealed");
    e.meta.delete(&e.keys.ledger(2), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![2]);
    assert!(s.entry_log_states().unwrap().is_empty(), "every entry log came back: {r:?}");
    // A new entry opens a new log and reads back.
    create(&e, 3, LedgerState::Open, &["b1"]).await;
    add(&s, &entry(3, 0, b"after")).unwrap();
    s.flush().unwrap();
    assert_eq!(s.read_entry(3, 0).unwrap().payload(), b"after");
}

/// L2 with compaction on, per-ledger mode: logs written in shared mode (ledgers 1 and 2
/// interleaved, 1 deleted) are compacted after the switch; the compaction output is sealed
/// at once (no flush ever writes to the shared log in this mode, so nothing else would
/// seal it), and once ledger 2 is deleted too, every log comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_compaction_output_is_sealed_and_collected_in_per_ledger_mode() {
    let e = env();
    drop(shared_logs_in(&e, &common::two_write_config()).await);
    let mut c = common::two_write_config();
    c.entry_log_per_ledger = true;
    c.entry_log_idle_rotation = Duration::from_secs(3600);
    let s = Arc::new(open(&e.fs, &e.kv, &c).unwrap());
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &compacting()).await.unwrap();
    assert!(!r.logs_compacted.is_empty(), "the shared logs were compacted: {r:?}");
    let active: Vec<u64> = s
        .entry_log_states()
        .unwrap()
        .iter()
        .filter(|(_, st)| !st.sealed)
        .map(|(id, _)| *id)
        .collect();
    assert!(active.is_empty(), "the compaction output is sealed: active logs {active:?}");
    for i in 0..40 {
        assert_eq!(
            s.read_entry(2, i).unwrap().payload(),
            format!("two-{i}").repeat(3000).as_bytes()
        );
    }
    e.meta.delete(&e.keys.ledger(2), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![2]);
    assert!(s.entry_log_states().unwrap().is_empty(), "every entry log came back: {r:?}");
    assert_eq!(log_bytes_on_disk(&e.fs, StorageMode::TwoWrite), 0, "no entry-log bytes left");
}

/// Waits for the acknowledgement of a recovery add (what autorecovery's copies are).
fn recovery_add(s: &folio_bookie::Storage, ledger: u64, entry_id: i64) -> folio_bookie::Result<()> {
    add_async(s, &entry(ledger, entry_id, b"copy"), &KEY, true)?.recv().expect("callback runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_copy_being_made_here_survives_gc_until_its_swap_or_its_abandonment() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    // Ledger 1 is closed on b2; autorecovery copies it to b1 (recovery adds) before the
    // compare-and-set that names b1. Ledger 2 is closed on b2 and b1 holds a stale copy.
    create(&e, 1, LedgerState::Closed, &["b2"]).await;
    create(&e, 2, LedgerState::Closed, &["b2"]).await;
    for i in 0..3 {
        recovery_add(&s, 1, i).unwrap();
    }
    add(&s, &entry(2, 0, b"stale")).unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.incoming_kept, vec![1], "the copy in progress is kept");
    assert_eq!(r.over_replicated_dropped, vec![2]);
    assert_eq!(s.list_entries(1).unwrap(), vec![0, 1, 2]);
    // Past its grace, it is kept while the ledger's mark (or a claim) says a worker has it.
    let past = GcConfig { incoming_grace: Duration::ZERO, ..config() };
    let mark = e.keys.under_replicated_ledger(1);
    e.meta.put(&mark, Bytes::from_static(b"m"), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &past).await.unwrap();
    assert_eq!(r.incoming_kept, vec![1]);
    // The swap names b1: an ordinary copy now, incoming no more.
    create(&e, 1, LedgerState::Closed, &["b1"]).await;
    e.meta.delete(&mark, Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &past).await.unwrap();
    assert!(r.incoming_kept.is_empty() && r.over_replicated_dropped.is_empty(), "{r:?}");
    assert_eq!(s.incoming_age(1), None);
    // A copy nobody holds any more (no mark, no claim, past its grace) is dropped, with no
    // tombstone: the ledger lives on elsewhere and may be copied here again.
    create(&e, 3, LedgerState::Closed, &["b2"]).await;
    recovery_add(&s, 3, 0).unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &past).await.unwrap();
    assert_eq!(r.over_replicated_dropped, vec![3]);
    recovery_add(&s, 3, 0).unwrap();
    assert!(!s.is_tombstoned(2) && !s.is_tombstoned(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_after_deletion_and_gc_a_zombie_add_is_refused_not_acknowledged_into_nothing() {
    let e = env();
    let s = Arc::new(open(&e.fs, &e.kv, &common::config()).unwrap());
    create(&e, 1, LedgerState::Open, &["b1"]).await;
    for i in 0..3 {
        add(&s, &entry(1, i, b"x")).unwrap();
    }
    e.meta.delete(&e.keys.ledger(1), Expect::Any).await.unwrap();
    let r = gc_once(&s, e.meta.as_ref(), &e.keys, "b1", &config()).await.unwrap();
    assert_eq!(r.ledgers_dropped, vec![1]);
    // The zombie writer's add in flight, and a stale recovery add, both fail.
    let err = add(&s, &entry(1, 3, b"zombie")).unwrap_err();
    assert_eq!(err.status(), folio_proto::Status::NoLedger, "{err}");
    let err = recovery_add(&s, 1, 3).unwrap_err();
    assert_eq!(err.status(), folio_proto::Status::NoLedger, "{err}");
    drop(s);
    let s = open(&e.fs, &e.kv, &common::config()).unwrap();
    assert_eq!(
        add(&s, &entry(1, 3, b"zombie")).unwrap_err().status(),
        folio_proto::Status::NoLedger
    );
    assert!(s.ledger_ids().is_empty());
}
