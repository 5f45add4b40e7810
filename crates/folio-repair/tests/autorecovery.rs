//! Autorecovery on real bookies in one process (#23 items 1, 2, 5): a lost bookie's copies
//! restored on live ones while writers keep writing, then a second loss loses nothing
//! acknowledged (D1); the auditor and a worker killed mid-way; two workers racing for one
//! ledger; a bookie drained; racks kept; a wiped bookie refilled through the periodic check.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient, LedgerWriter};
use folio_meta::keys::Keys;
use folio_meta::records::LedgerMetadata;
use folio_repair::autorecovery::mark::{MarkedFragment, Reason};
use folio_repair::autorecovery::worker::Outcome;
use folio_repair::autorecovery::{Autorecovery, AutorecoveryConfig, status};
use folio_testkit::Cluster;
use folio_testkit::poll::until;
use tokio::sync::watch;

/// Bookies whose registrations expire one second after they die.
async fn cluster(n: usize, rack: impl Fn(&str) -> Option<String>) -> Cluster {
    folio_testkit::trace();
    Cluster::start_with(n, |b| {
        b.lease_ttl = Duration::from_secs(1);
        b.rack = rack(b.bookie_id.as_deref().unwrap());
    })
    .await
}

fn client(c: &Cluster) -> LedgerClient {
    LedgerClient::new(c.meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_millis(500))
        .with_speculative_read_timeout(Duration::from_millis(100))
}

fn config() -> AutorecoveryConfig {
    AutorecoveryConfig {
        lost_after: Duration::from_secs(1),
        poll_interval: Duration::from_millis(100),
        check_interval: None,
        open_ledger_grace: Duration::from_secs(2),
        bytes_per_s: 0,
        lease_ttl: Duration::from_secs(1),
        ..AutorecoveryConfig::default()
    }
}

fn autorecovery(c: &Cluster, host: &str, config: AutorecoveryConfig) -> Autorecovery {
    Autorecovery::new(c.meta.clone(), Keys::default(), client(c), config, host)
}

/// Runs `a` until the returned sender says stop (or the task is aborted: a crash).
fn spawn(a: &Autorecovery) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    (tx, tokio::spawn(a.clone().run(rx)))
}

/// Whether any ledger's metadata still names `bookie`, and how many marks are left.
async fn references(client: &LedgerClient, bookie: &str) -> usize {
    let mut n = 0;
    for id in client.list().await.unwrap() {
        if let Ok(m) = client.metadata(id).await
            && m.ensembles.values().any(|e| e.iter().any(|b| b == bookie))
        {
            n += 1;
        }
    }
    n
}

async fn marks(c: &Cluster) -> u64 {
    status(c.meta.as_ref(), &Keys::default()).await.unwrap().marked_ledgers
}

/// Every entry of every ledger read from every bookie of its write set: nothing missing.
async fn assert_whole(client: &LedgerClient, ids: &[u64]) {
    for &id in ids {
        let r = client.open(id).await.unwrap();
        let check = r.check_replicas().await.unwrap();
        assert!(check.missing.is_empty(), "ledger {id}: {:?}", check.missing);
    }
}

fn kill_and_wipe(c: &mut Cluster, id: &str) -> impl std::future::Future<Output = ()> {
    let node = c.node(id);
    let dirs = node.config.dirs();
    let bookie = node.bookie.take();
    async move {
        if let Some(b) = bookie {
            b.abort().await;
        }
        for d in dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// #23 item 5, in process: 4 bookies, E=3 Qw=2 Qa=2, 200 ledgers (closed, open and idle,
/// open and written all along). One bookie killed and its disk wiped, the auditor's host
/// killed too: another host takes the auditor role, and every ledger gets back to Qw copies
/// on live bookies; the live writers never fail. Then a second bookie dies: every
/// acknowledged entry still reads (D1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_bookie_heals_while_writers_write_and_a_second_loss_loses_nothing() {
    let mut c = cluster(4, |_| None).await;
    let client = client(&c);
    let mut acked: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    let mut idle = Vec::new();
    for i in 0..195u64 {
        let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
        let n = 1 + i % 7;
        for j in 0..n {
            let p = format!("ledger {i} entry {j}").into_bytes();
            w.add(&p).await.unwrap();
            acked.entry(w.id()).or_default().push(p);
        }
        if i % 3 == 0 {
            idle.push(w); // open, its writer alive and idle
        } else {
            w.close().await.unwrap();
        }
    }
    // Five writers that keep writing through the loss and the healing (with the default
    // request timeout: a flush stall of a loaded bookie is not a failure).
    let writers_client = LedgerClient::new(c.meta.clone(), Keys::default());
    let (stop_writers, writers_stop) = watch::channel(false);
    let mut writers = Vec::new();
    for _ in 0..5 {
        let w: Arc<LedgerWriter> =
            Arc::new(writers_client.create(CreateOptions::new(3, 2, 2)).await.unwrap());
        let mut stop = writers_stop.clone();
        writers.push((
            w.clone(),
            tokio::spawn(async move {
                let mut written = Vec::new();
                while !*stop.borrow_and_update() {
                    let p = format!("live {} entry {}", w.id(), written.len()).into_bytes();
                    w.add(&p).await.expect("a live writer keeps writing through recovery");
                    written.push(p);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                written
            }),
        ));
    }
    let a = autorecovery(&c, "host-a", config());
    let b = autorecovery(&c, "host-b", config());
    let (_stop_a, task_a) = spawn(&a);
    until(Duration::from_secs(10), "host-a is the auditor", || async {
        a.stats().auditor.load(Relaxed) == 1
    })
    .await;
    let (stop_b, task_b) = spawn(&b);
    let lost = "bookie-1";
    kill_and_wipe(&mut c, lost).await;
    // The faulty links refuse a surviving bookie's next connections: copies fail and are
    // retried in a later round.
    c.node("bookie-2").link.drop_next_connections(3);
    task_a.abort(); // the auditor's host dies too (its lease expires: no clean stop)
    until(Duration::from_secs(90), "every ledger back on live bookies", || async {
        references(&client, lost).await == 0 && marks(&c).await == 0
    })
    .await;
    assert_eq!(b.stats().auditor.load(Relaxed), 1, "host-b took the auditor role over");
    assert!(b.stats().ledgers_healed.load(Relaxed) > 0);
    let _ = stop_writers.send(true);
    for (w, t) in writers {
        let written = t.await.unwrap();
        assert!(!written.is_empty());
        w.close().await.unwrap();
        acked.insert(w.id(), written);
    }
    let ids: Vec<u64> = acked.keys().copied().collect();
    assert_eq!(ids.len(), 200);
    // The idle open ledgers were fenced and recovered after their grace: closed now, with
    // every acknowledged entry.
    // The others are closed by their writers.
    for w in &idle {
        if w.metadata().ensembles[&0].iter().any(|b| b == lost) {
            assert!(w.add(b"late").await.is_err(), "ledger {} was fenced", w.id());
        } else {
            w.close().await.unwrap();
        }
    }
    // The live writers' ensembles: the writers' own changes and the workers' swaps kept.
    until(Duration::from_secs(30), "the live writers' ledgers healed", || async {
        references(&client, lost).await == 0 && marks(&c).await == 0
    })
    .await;
    assert_whole(&client, &ids).await;
    let _ = stop_b.send(true);
    task_b.await.unwrap();
    // A second loss: every acknowledged entry still reads (D1).
    c.node("bookie-2").kill().await;
    for (id, entries) in &acked {
        let r = client.open(*id).await.unwrap();
        for (j, p) in entries.iter().enumerate() {
            let e = r.read(j as i64).await.unwrap_or_else(|e| panic!("ledger {id} entry {j}: {e}"));
            assert_eq!(e.payload(), &p[..], "ledger {id} entry {j}");
        }
    }
}

/// One closed ledger on bookies 0..3, `entries` of 100 bytes, and its ensemble.
async fn one_ledger(client: &LedgerClient, entries: u64) -> (u64, Vec<String>) {
    let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
    for i in 0..entries {
        w.add(&[i as u8; 100]).await.unwrap();
    }
    w.close().await.unwrap();
    (w.id(), w.metadata().ensembles[&0].clone())
}

/// Waits until a killed bookie's registration expired (a registered bookie is refilled
/// in place, an unregistered one replaced).
async fn gone(c: &Cluster, bookie: &str) {
    let key = Keys::default().bookie(bookie, false);
    until(Duration::from_secs(10), "the registration expired", || async {
        c.meta.get(&key).await.unwrap().is_none()
    })
    .await;
}

fn lost_in(ensemble: &[String]) -> Vec<MarkedFragment> {
    vec![MarkedFragment { first_entry: 0, bookie: ensemble[1].clone(), reason: Reason::Lost }]
}

/// #23 item 5: two workers race for one ledger. Both copy (paced, so their copies
/// overlap); one compare-and-set wins, the other sees the position taken and discards its
/// copy. The ledger ends whole with exactly one replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_racing_for_one_ledger_one_swap_wins() {
    let mut c = cluster(5, |_| None).await;
    let client = client(&c);
    let (id, ensemble) = one_ledger(&client, 30).await;
    c.node(&ensemble[1]).kill().await;
    gone(&c, &ensemble[1]).await;
    let slow = AutorecoveryConfig { bytes_per_s: 1500, ..config() };
    let (a, b) = (autorecovery(&c, "a", slow.clone()), autorecovery(&c, "b", slow));
    a.mark(id, lost_in(&ensemble)).await.unwrap();
    let (ra, rb) = tokio::join!(a.replicate_ledger(id), b.replicate_ledger(id));
    let outcomes = [ra.unwrap(), rb.unwrap()];
    let healed: Vec<_> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Healed(h) => Some(h.clone()),
            _ => None,
        })
        .collect();
    let replaced: u64 = healed.iter().map(|h| h.replaced).sum();
    let lost_races: u64 = healed.iter().map(|h| h.lost_races).sum();
    assert_eq!(replaced, 1, "exactly one swap: {outcomes:?}");
    assert_eq!(lost_races, 1, "the other worker's copy was discarded: {outcomes:?}");
    let m: LedgerMetadata = client.metadata(id).await.unwrap();
    assert!(!m.ensembles[&0].contains(&ensemble[1]));
    assert_eq!(m.ensembles[&0][0], ensemble[0]);
    assert_eq!(m.ensembles[&0][2], ensemble[2]);
    assert_whole(&client, &[id]).await;
    assert_eq!(marks(&c).await, 0);
}

/// A closed ledger of 60 entries whose second bookie is killed and gone, and a slow worker
/// (1500 bytes/s) running on its mark until it copied `copied` entries: of 40 (the entries
/// with position 1 in their write set, E=3, Qw=2).
async fn slow_copy_under_way(
    c: &mut Cluster,
    client: &LedgerClient,
    copied: u64,
) -> (u64, Vec<String>, Autorecovery, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (id, ensemble) = one_ledger(client, 60).await;
    c.node(&ensemble[1]).kill().await;
    gone(c, &ensemble[1]).await;
    let slow = autorecovery(
        c,
        "slow",
        AutorecoveryConfig { bytes_per_s: 1500, auditor: false, ..config() },
    );
    slow.mark(id, lost_in(&ensemble)).await.unwrap();
    let (stop, task) = spawn(&slow);
    until(Duration::from_secs(20), "the slow worker copied some entries", || async {
        slow.stats().entries_copied.load(Relaxed) >= copied
    })
    .await;
    (id, ensemble, slow, stop, task)
}

/// #23 item 5: a worker dies mid-copy (its task aborted, its lease left to expire). The
/// metadata still names the lost bookie (nothing half-done is visible); the next worker
/// waits out the dead one's claim, resumes (the copies already on the replacement are not
/// copied again) and heals the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_copy_leaves_nothing_visible_and_the_next_resumes() {
    let mut c = cluster(4, |_| None).await;
    let client = client(&c);
    let (id, ensemble, slow, _stop, task) = slow_copy_under_way(&mut c, &client, 5).await;
    task.abort();
    let copied_before = slow.stats().entries_copied.load(Relaxed);
    assert!(copied_before < 40, "killed mid-copy: {copied_before}");
    let m = client.metadata(id).await.unwrap();
    assert_eq!(m.ensembles[&0], ensemble, "no half-done copy is visible");
    let next = autorecovery(&c, "next", AutorecoveryConfig { auditor: false, ..config() });
    let (_stop, task) = spawn(&next);
    until(Duration::from_secs(20), "the next worker healed the ledger", || async {
        marks(&c).await == 0
    })
    .await;
    task.abort();
    let m = client.metadata(id).await.unwrap();
    assert!(!m.ensembles[&0].contains(&ensemble[1]));
    let copied_after = next.stats().entries_copied.load(Relaxed);
    // The dead worker wrote more copies than it counted (it counts after pacing).
    assert!(copied_after < 40, "resumed, not started over: {copied_after} after {copied_before}");
    assert_whole(&client, &[id]).await;
}

/// #23 items 1, 3, 4: a decommission request drains a live bookie: its copies move to
/// others, new ledgers never land on it, and the drain finishes with nothing naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_drains_a_live_bookie() {
    let c = cluster(4, |_| None).await;
    let client = client(&c);
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(one_ledger(&client, 9).await.0);
    }
    let a = autorecovery(&c, "a", config());
    let (_stop, task) = spawn(&a);
    folio_repair::autorecovery::decommission::request(
        c.meta.as_ref(),
        &Keys::default(),
        "bookie-0",
    )
    .await
    .unwrap();
    for _ in 0..10 {
        let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
        assert!(
            !w.metadata().ensembles[&0].contains(&"bookie-0".to_string()),
            "placed on a draining bookie"
        );
        w.close().await.unwrap();
        ids.push(w.id());
    }
    until(Duration::from_secs(30), "bookie-0 drained", || async {
        references(&client, "bookie-0").await == 0 && marks(&c).await == 0
    })
    .await;
    task.abort();
    assert_whole(&client, &ids).await;
    let s = status(c.meta.as_ref(), &Keys::default()).await.unwrap();
    assert_eq!(s.draining, ["bookie-0"]);
}

fn rack_of(bookie: &str) -> Option<String> {
    let n: usize = bookie.rsplit('-').next().unwrap().parse().unwrap();
    Some(if n.is_multiple_of(2) { "rack-a" } else { "rack-b" }.to_string())
}

/// #23 item 3: a lost bookie is replaced within its rack when the rest of its write set
/// is in the other rack, so no write set ends up in one rack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_replication_keeps_write_sets_over_two_racks() {
    let mut c = cluster(4, rack_of).await;
    let client = client(&c);
    let mut ids = Vec::new();
    for _ in 0..12 {
        let w = client.create(CreateOptions::new(2, 2, 2)).await.unwrap();
        w.add(b"x").await.unwrap();
        w.close().await.unwrap();
        ids.push(w.id());
    }
    let a = autorecovery(&c, "a", config());
    let (_stop, task) = spawn(&a);
    c.node("bookie-0").kill().await;
    until(Duration::from_secs(30), "bookie-0's ledgers healed", || async {
        references(&client, "bookie-0").await == 0 && marks(&c).await == 0
    })
    .await;
    task.abort();
    for id in &ids {
        let m = client.metadata(*id).await.unwrap();
        let racks: Vec<_> = m.ensembles[&0].iter().map(|b| rack_of(b)).collect();
        assert_ne!(racks[0], racks[1], "ledger {id}: {:?}", m.ensembles);
    }
    assert_whole(&client, &ids).await;
}

/// #23 item 1: a bookie restarted with formatted disks under its id (a new cookie
/// instance) is noticed: the auditor marks its fragments and the worker copies its
/// entries back to it (it is alive: no ensemble changes). Without the auditor having seen
/// the old instance, the periodic check finds the missing copies instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_bookie_is_refilled_by_instance_change_or_by_the_periodic_check() {
    for via_check in [false, true] {
        let mut c = cluster(4, |_| None).await;
        let client = client(&c);
        let mut ids = Vec::new();
        for _ in 0..10 {
            ids.push(one_ledger(&client, 12).await.0);
        }
        let config = AutorecoveryConfig {
            check_interval: via_check.then_some(Duration::from_millis(200)),
            lost_after: Duration::from_secs(3600),
            ..config()
        };
        let a = autorecovery(&c, "a", config);
        let mut st = Default::default();
        if !via_check {
            a.audit_once(&mut st).await.unwrap(); // the auditor sees the first instance
        }
        let before: Vec<LedgerMetadata> = futures_metadata(&client, &ids).await;
        kill_and_wipe(&mut c, "bookie-3").await;
        let meta = c.meta.clone();
        let config = c.node("bookie-3").config.clone();
        folio_bookie::bookie::format(&config, meta.as_ref(), "bookie-3", true, true).await.unwrap();
        c.node("bookie-3").restart(&meta).await;
        let report = a.audit_once(&mut st).await.unwrap();
        if via_check {
            assert!(report.checked && report.missing_fragments > 0, "{report:?}");
        } else {
            assert_eq!(report.wiped, ["bookie-3"], "{report:?}");
        }
        let (_stop, task) = spawn(&a);
        until(Duration::from_secs(30), "bookie-3 refilled", || async { marks(&c).await == 0 })
            .await;
        task.abort();
        assert_eq!(futures_metadata(&client, &ids).await, before, "refilled in place");
        assert_whole(&client, &ids).await;
    }
}

async fn futures_metadata(client: &LedgerClient, ids: &[u64]) -> Vec<LedgerMetadata> {
    let mut out = Vec::new();
    for id in ids {
        out.push(client.metadata(*id).await.unwrap());
    }
    out
}

/// #45 item 3: a worker whose lease is lost (the store expired it, as in a partition)
/// stops copying at once, swaps nothing in, and its release leaves alone the claim the next
/// worker took meanwhile (it compares the claim's version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_loses_its_lease_stops_copying_and_leaves_the_next_claim_alone() {
    let mut c = cluster(4, |_| None).await;
    let client = client(&c);
    let (id, ensemble, slow, _stop, task) = slow_copy_under_way(&mut c, &client, 3).await;
    let claim_key = Keys::default().replication_claim(id);
    let claim = c.meta.get(&claim_key).await.unwrap().expect("the slow worker's claim");
    c.meta.revoke_lease(claim.lease.expect("lease-bound")).await.unwrap();
    c.meta
        .put(&claim_key, bytes::Bytes::from_static(b"next"), folio_meta::Expect::Absent)
        .await
        .unwrap();
    until(Duration::from_secs(10), "the slow worker stopped copying", || async {
        slow.stats().copies_stopped.load(Relaxed) >= 1
    })
    .await;
    // Its round is over (and the next ones find the ledger claimed): the claim is intact.
    until(Duration::from_secs(10), "the slow worker's next round", || async {
        slow.stats().marks.load(Relaxed) >= 1
    })
    .await;
    task.abort();
    let held = c.meta.get(&claim_key).await.unwrap().expect("the next worker's claim stays");
    assert_eq!(&held.value[..], b"next");
    assert!(slow.stats().entries_copied.load(Relaxed) < 40, "it stopped half-way");
    let m = client.metadata(id).await.unwrap();
    assert_eq!(m.ensembles[&0], ensemble, "nothing swapped in by a worker without its claim");
}

/// #45 item 3: how long a bookie was gone is stored, so auditors that take over from each
/// other (a fresh state every round here) and a bookie that keeps coming back for a moment
/// (a crash loop) still add up to a loss after `lost_after` of absence in total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_bookie_under_moving_auditors_is_still_declared_lost() {
    let mut c = cluster(4, |_| None).await;
    let victim = "bookie-0".to_string();
    c.node(&victim).kill().await;
    gone(&c, &victim).await;
    let clock = folio_proto::clock::ManualClock::new();
    clock.advance(Duration::from_secs(1_000_000));
    let config = AutorecoveryConfig {
        lost_after: Duration::from_secs(10),
        poll_interval: Duration::from_secs(1),
        absence_window: Duration::from_secs(100),
        clock: Arc::new(clock.clone()),
        ..config()
    };
    let registration = Keys::default().bookie(&victim, false);
    let mut lost_at = None;
    for round in 0..20 {
        // Every third round the bookie is back for a moment.
        let back = round % 3 == 2;
        if back {
            c.meta
                .put(&registration, bytes::Bytes::from_static(b"x"), folio_meta::Expect::Any)
                .await
                .unwrap();
        }
        let auditor = autorecovery(&c, &format!("auditor-{round}"), config.clone());
        let report = auditor.audit_once(&mut Default::default()).await.unwrap();
        if back {
            c.meta.delete(&registration, folio_meta::Expect::Any).await.unwrap();
        }
        if report.lost.contains(&victim) {
            lost_at = Some(round);
            break;
        }
        clock.advance(Duration::from_secs(2));
    }
    // Gone 2 s per round, except the rounds it was back: 10 s of absence by round 7 or so.
    let round = lost_at.expect("the flapping bookie was never declared lost");
    assert!((5..=9).contains(&round), "declared lost at round {round}");
}
