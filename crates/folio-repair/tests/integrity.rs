//! Journal-less bookies made safe (seed 004): the two scenarios of BP-46 as regression
//! tests — each shown to go wrong with its protection turned off — plus repair after a
//! crash, a crash in the middle of the full check, and a wiped data dir.
//!
//! A journal-less bookie acknowledges from its write cache; killing it (`Node::kill`,
//! an abort) throws that away, like the machine losing power before a flush.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient, LedgerError};
use folio_meta::keys::Keys;
use folio_proto::wire::Request;
use folio_proto::{Entry, EntryHeader, Status};
use folio_repair::IntegrityCheck;
use folio_testkit::{Cluster, Fault};

/// `n` journal-less bookies; `limbo`/`fence` turn the pre-boot protections on or off.
async fn journal_less(n: usize, limbo: bool, fence: bool) -> Cluster {
    folio_testkit::trace();
    let mut c = Cluster::start(n).await;
    let meta = c.meta.clone();
    for node in &mut c.nodes {
        node.config.storage.make_journal_less();
        node.config.integrity.pre_boot_limbo = limbo;
        node.config.integrity.pre_boot_fence = fence;
        node.config.integrity.stamp_missing_cookies = true;
        node.restart(&meta).await;
    }
    c
}

fn client(c: &Cluster) -> LedgerClient {
    LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_millis(300))
        .with_speculative_read_timeout(Duration::from_millis(100))
}

fn index(c: &Cluster, id: &str) -> usize {
    c.nodes.iter().position(|n| n.id == id).unwrap()
}

fn check(c: &Cluster, i: usize) -> IntegrityCheck {
    IntegrityCheck {
        storage: c.nodes[i].bookie().storage().clone(),
        client: client(c),
        meta: c.meta.clone(),
        keys: Keys::default(),
        bookie_id: c.nodes[i].id.clone(),
    }
}

/// Awaits `f`, failing with the step's name instead of hanging.
async fn step<T>(name: &str, f: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(20), f).await {
        Ok(v) => v,
        Err(_) => panic!("step {name:?} did not finish within 20 s"),
    }
}

fn payload(i: i64) -> Vec<u8> {
    format!("entry-{i}").into_bytes()
}

/// Scenario 2 of seed 004. E=Qw=3, Qa=2. Entries 5..9 are acknowledged by b0 and b1 only
/// (b2 cut). b0 crashes journal-less and loses them; b1 is unreachable when recovery runs.
/// Without limbo b0 says "no such entry", b2 says the same, and recovery truncates
/// acknowledged entries. With limbo b0 says "unknown": recovery waits for b1 and keeps all.
async fn scenario_lost_entries(limbo: bool) -> Result<i64, LedgerError> {
    let mut c = journal_less(3, limbo, true).await;
    let w = client(&c).create(CreateOptions::new(3, 3, 2)).await.unwrap();
    let ens = w.metadata().ensembles[&0].clone();
    let (b0, b1, b2) = (index(&c, &ens[0]), index(&c, &ens[1]), index(&c, &ens[2]));
    for i in 0..5 {
        step("add", w.add(&payload(i))).await.unwrap();
    }
    c.nodes[b2].link.set_fault(Fault::Cut);
    for i in 5..10 {
        assert_eq!(
            step("add past the cut", w.add(&payload(i))).await.unwrap(),
            i,
            "acknowledged by b0 and b1"
        );
    }
    drop(w);
    let meta = c.meta.clone();
    step("kill", c.nodes[b0].kill()).await; // journal-less: entries only in its write cache are gone
    step("restart", c.nodes[b0].restart(&meta)).await;
    assert!(c.nodes[b0].bookie().unclean_shutdown());
    assert!(c.nodes[b0].bookie().needs_integrity_check());
    c.nodes[b2].link.set_fault(Fault::Pass);
    c.nodes[b1].link.set_fault(Fault::Cut);
    let id = {
        let ids = client(&c).list().await.unwrap();
        ids[0]
    };
    match step("first recovery", client(&c).recover(id)).await {
        Ok(r) => return Ok(r.last_entry_id().unwrap()),
        Err(e) if limbo => {
            // Blocked, not truncated: b0's unknown is never a negative.
            assert!(e.to_string().contains("UNKNOWN") || e.to_string().contains("unknown"), "{e}");
        }
        Err(e) => return Err(e),
    }
    c.nodes[b1].link.set_fault(Fault::Pass);
    let r = step("second recovery", client(&c).recover(id)).await?;
    for i in 0..10 {
        assert_eq!(r.read(i).await.unwrap().payload(), &payload(i)[..]);
    }
    // The full check repairs b0: everything in its write set is back on its disk.
    let report = step("repair", check(&c, b0).run(true, &|_, _| {})).await.unwrap();
    assert!(report.flag_cleared, "{report:?}");
    assert_eq!(report.limbo_cleared, 1);
    let local = c.nodes[b0].bookie().storage().list_entries(id).unwrap();
    assert_eq!(local, (0..10).collect::<Vec<i64>>());
    assert!(!c.nodes[b0].bookie().needs_integrity_check());
    Ok(r.last_entry_id().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_seed_004_limbo_keeps_recovery_from_truncating_acknowledged_entries() {
    assert_eq!(scenario_lost_entries(true).await.unwrap(), 9, "nothing acknowledged was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_seed_004_without_limbo_recovery_truncates_acknowledged_entries() {
    // The protection turned off: the same run loses acknowledged entries 5..9.
    let last = scenario_lost_entries(false).await.unwrap();
    assert!(last < 9, "without limbo recovery truncated at {last}");
}

/// Scenario 1 of seed 004. A ledger is recovered (its bookies fenced), then both of its
/// bookies lose their disks and come back (cookies re-stamped). Without the pre-boot fence
/// they have forgotten the fence, and the old writer — a zombie, here speaking the wire
/// protocol directly — gets entry 3 acknowledged by both after the ledger was closed at 2.
/// With it, both refuse. Returns how many bookies acknowledged the zombie's add.
async fn scenario_forgotten_fence(fence: bool) -> usize {
    let mut c = journal_less(3, true, fence).await;
    let w = client(&c).create(CreateOptions::new(2, 2, 2)).await.unwrap();
    for i in 0..3 {
        w.add(&payload(i)).await.unwrap();
    }
    let r = client(&c).recover(w.id()).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(2));
    let meta = c.meta.clone();
    let mut acks = 0;
    for b in w.metadata().ensembles[&0].clone() {
        let i = index(&c, &b);
        c.nodes[i].kill().await;
        for d in c.nodes[i].config.dirs() {
            std::fs::remove_dir_all(&d).unwrap();
        }
        c.nodes[i].restart(&meta).await;
        assert!(c.nodes[i].bookie().needs_integrity_check(), "a wiped dir triggers the check");
        let conn =
            folio_client::BookieConnection::connect(c.nodes[i].bookie().addr(), 16).await.unwrap();
        let header =
            EntryHeader { ledger_id: w.id(), entry_id: 3, last_add_confirmed: 2, length: 99 };
        let entry = Entry::encode(header, b"zombie").into_bytes();
        // The zombie is the ledger's own writer: it has the ledger's password.
        let key = folio_client::master_key(w.metadata().password.as_deref().unwrap_or_default());
        let answer =
            conn.request(Request::Add { master_key: key, recovery: false, entry }).await.unwrap();
        match answer.status {
            Status::Ok => acks += 1,
            Status::Fenced => {}
            other => panic!("unexpected answer {}", other.name()),
        }
    }
    acks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_seed_004_the_pre_boot_fence_stops_a_zombie_writer() {
    assert_eq!(scenario_forgotten_fence(true).await, 0, "both bookies answer FENCED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_seed_004_without_the_pre_boot_fence_a_zombie_is_acknowledged() {
    // The protection turned off: the zombie reaches its ack quorum (2) past the closed end.
    assert_eq!(scenario_forgotten_fence(false).await, 2);
}

/// A three-bookie journal-less cluster; one bookie killed during writes (its cached
/// entries lost), restarted, checked: recovery keeps every acknowledged entry (D1, D2),
/// the writer cannot add after recovery (D3), and after repair the restarted bookie holds
/// every entry of its write sets again (D1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_d2_d3_a_killed_journal_less_bookie_is_repaired_from_its_peers() {
    let mut c = journal_less(3, true, true).await;
    let w = Arc::new(client(&c).create(CreateOptions::new(3, 2, 2)).await.unwrap());
    let mut acked = Vec::new();
    for i in 0..60 {
        if i == 30 {
            c.nodes[0].kill().await;
        }
        if let Ok(e) = w.add(&payload(i)).await {
            acked.push((e, i));
        }
    }
    assert!(acked.len() >= 30);
    let meta = c.meta.clone();
    c.nodes[0].restart(&meta).await;
    let r = client(&c).recover(w.id()).await.unwrap();
    let last = r.last_entry_id().unwrap();
    for (e, i) in &acked {
        assert!(*e <= last, "acknowledged entry {e} is past the end {last}");
        assert_eq!(r.read(*e).await.unwrap().payload(), &payload(*i)[..]);
    }
    assert!(w.add(b"zombie").await.is_err(), "the writer is fenced");
    let report = check(&c, 0).run(true, &|_, _| {}).await.unwrap();
    assert!(report.flag_cleared, "{report:?}");
    // Every entry whose write set includes bookie-0 is on its disk again.
    let m = r.metadata().clone();
    let local: BTreeSet<i64> =
        c.nodes[0].bookie().storage().list_entries(w.id()).unwrap().into_iter().collect();
    for e in 0..=last {
        let ens = m.ensemble_for(e);
        let Some(pos) = ens.iter().position(|b| b == "bookie-0") else { continue };
        let n = ens.len() as i64;
        if (0..2).any(|k| (e + k) % n == pos as i64) {
            assert!(local.contains(&e), "entry {e} not repaired on bookie-0");
        }
    }
    let again = check(&c, 0).run(false, &|_, _| {}).await.unwrap();
    assert_eq!(again.entries_missing, 0);
}

/// The full check crashes midway (a peer unreachable, then the bookie killed): the
/// persistent flag survives, and the next run finishes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_middle_of_the_full_check_resumes_it() {
    let mut c = journal_less(2, true, true).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let w = client(&c).create(CreateOptions::new(2, 2, 2)).await.unwrap();
        for i in 0..20 {
            w.add(&payload(i)).await.unwrap();
        }
        w.close().await.unwrap();
        ids.push(w.id());
    }
    let meta = c.meta.clone();
    c.nodes[0].kill().await;
    c.nodes[0].restart(&meta).await;
    assert!(c.nodes[0].bookie().needs_integrity_check());
    // The only peer is unreachable: copies fail, the flag stays.
    c.nodes[1].link.set_fault(Fault::Cut);
    let first = check(&c, 0).run(true, &|_, _| {}).await.unwrap();
    assert!(!first.flag_cleared && first.entries_failed > 0, "{first:?}");
    c.nodes[0].kill().await;
    c.nodes[0].restart(&meta).await;
    assert!(c.nodes[0].bookie().needs_integrity_check(), "the flag is persistent");
    c.nodes[1].link.set_fault(Fault::Pass);
    let mut progress = Vec::new();
    let seen = std::sync::Mutex::new(&mut progress);
    let second = check(&c, 0)
        .run(true, &|done, total| seen.lock().unwrap().push((done, total)))
        .await
        .unwrap();
    assert!(second.flag_cleared, "{second:?}");
    assert_eq!(progress.last(), Some(&(3, 3)));
    for id in ids {
        assert_eq!(c.nodes[0].bookie().storage().list_entries(id).unwrap().len(), 20);
    }
}

/// A bookie in journal mode with `stamp_missing_cookies` loses its data dirs: it starts
/// (pre-boot check, cookies re-stamped from the metadata store) and the full check copies
/// its ledgers back. Without stamping it refuses to start, naming the dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_data_dir_with_a_surviving_cookie_is_repaired() {
    folio_testkit::trace();
    let mut c = Cluster::start(2).await;
    let w = client(&c).create(CreateOptions::new(2, 2, 2)).await.unwrap();
    for i in 0..25 {
        w.add(&payload(i)).await.unwrap();
    }
    w.close().await.unwrap();
    let meta = c.meta.clone();
    c.nodes[0].kill().await;
    for d in c.nodes[0].config.dirs() {
        std::fs::remove_dir_all(&d).unwrap();
    }
    let refused =
        folio_bookie::bookie::Bookie::start(c.nodes[0].config.clone(), meta.clone()).await;
    let err = match refused {
        Ok(_) => panic!("started on a wiped dir without stamping"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("no cookie") || err.contains("missing"), "{err}");
    c.nodes[0].config.integrity.enabled = Some(true);
    c.nodes[0].config.integrity.stamp_missing_cookies = true;
    c.nodes[0].restart(&meta).await;
    assert!(c.nodes[0].bookie().needs_integrity_check());
    let report = check(&c, 0).run(true, &|_, _| {}).await.unwrap();
    assert_eq!(report.entries_copied, 25, "{report:?}");
    assert!(report.flag_cleared);
    // Restarts cleanly on its re-stamped dirs.
    c.nodes[0].restart(&meta).await;
    assert_eq!(c.nodes[0].bookie().storage().list_entries(w.id()).unwrap().len(), 25);
}

/// The same on a fault-injecting file system: when bookie-0 is killed, every write it had
/// not synced is thrown away too (seeded: dropped, applied or torn), not only its write
/// cache. Recovery keeps every acknowledged entry, the writer is fenced, and the repair
/// puts back every entry of bookie-0's write sets. Seeds `FOLIO_CRASH_SEEDS=a..b` (0..4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_d2_d3_unsynced_writes_thrown_away_by_the_file_layer_are_repaired() {
    let seeds = folio_testkit::seeds("FOLIO_CRASH_SEEDS", 0..4);
    for seed in seeds {
        faulty_run(seed).await;
    }
}

async fn faulty_run(seed: u64) {
    use folio_bookie::bookie::{Bookie, StatvfsUsage};
    use folio_bookie::fs::{CrashPlan, FaultFs};
    use folio_bookie::index::MemKv;
    use folio_bookie::storage::Storage;

    let mut c = journal_less(3, true, true).await;
    let meta = c.meta.clone();
    let (fault, kv) = (FaultFs::new(), MemKv::new());
    let start = |fs: FaultFs, kv: MemKv, config| {
        let meta = meta.clone();
        async move {
            Bookie::start_on(config, meta, Arc::new(StatvfsUsage), move |cfg| {
                Storage::open(cfg, Arc::new(fs), Arc::new(kv))
            })
            .await
            .unwrap()
        }
    };
    // bookie-0 moves onto the fault-injecting file system (its real dirs wiped: the
    // cookies are re-stamped there, the data lives in the FaultFs).
    c.nodes[0].kill().await;
    for d in c.nodes[0].config.dirs() {
        std::fs::remove_dir_all(&d).unwrap();
    }
    let b = start(fault.mount(), kv.clone(), c.nodes[0].config.clone()).await;
    c.nodes[0].link.set_target(b.addr());
    c.nodes[0].bookie = Some(b);
    let w = client(&c).create(CreateOptions::new(3, 2, 2)).await.unwrap();
    let mut acked = Vec::new();
    for i in 0..60 {
        if i == 20 {
            c.nodes[0].bookie().storage().flush().unwrap(); // some of it synced
        }
        if i == 40 {
            c.nodes[0].kill().await;
            fault.crash(CrashPlan::Random { seed });
        }
        if let Ok(e) = w.add(&payload(i)).await {
            acked.push((e, i));
        }
    }
    let b = start(fault.mount(), kv.clone(), c.nodes[0].config.clone()).await;
    assert!(b.unclean_shutdown() && b.needs_integrity_check(), "seed {seed}");
    c.nodes[0].link.set_target(b.addr());
    c.nodes[0].bookie = Some(b);
    let r = client(&c).recover(w.id()).await.unwrap();
    let last = r.last_entry_id().unwrap();
    for (e, i) in &acked {
        assert!(*e <= last, "seed {seed}: acknowledged entry {e} is past the end {last}");
        assert_eq!(r.read(*e).await.unwrap().payload(), &payload(*i)[..], "seed {seed}");
    }
    assert!(w.add(b"zombie").await.is_err(), "seed {seed}: the writer is fenced");
    let report = check(&c, 0).run(true, &|_, _| {}).await.unwrap();
    assert!(report.flag_cleared && report.entries_copied > 0, "seed {seed}: {report:?}");
    let again = check(&c, 0).run(false, &|_, _| {}).await.unwrap();
    assert_eq!(again.entries_missing, 0, "seed {seed}: every entry of its write sets is back");
    c.nodes[0].kill().await;
}
