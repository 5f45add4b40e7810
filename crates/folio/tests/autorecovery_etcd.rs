//! #23 item 5 where users rely on it: four `folio bookie` processes on etcd, each running
//! autorecovery (auditor candidate and replication worker), and a `folio broker` process
//! serving a topic. 150 ledgers (E=3 Qw=2 Qa=2; closed, and open with an idle writer) plus
//! the topic's managed logs; one bookie is SIGKILLed and its disk wiped while kcat
//! produces. Without anyone running a command, every ledger gets back to its write
//! quorum on live bookies (checked by reading each entry from each replica of its write
//! set), `folio autorecovery status` reports nothing left; then a second bookie is killed
//! and every acknowledged entry and record still reads (D1).
#![cfg(feature = "etcd")]

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;

use common::{Proc, kcat, start_bookie, start_broker_with};

const AUTORECOVERY: &[&str] = &[
    "lease_ttl_ms=2000",
    "autorecovery.lost_after_ms=3000",
    "autorecovery.poll_interval_ms=200",
    "autorecovery.open_ledger_grace_ms=3000",
    "autorecovery.lease_ttl_ms=2000",
    "autorecovery.bytes_per_s=0",
];

fn produce(addr: &str, from: u64, n: u64) {
    let lines: String = (from..from + n).map(|i| format!("record-{i}\n")).collect();
    kcat(&["-b", addr, "-P", "-t", "heal", "-X", "acks=all"], Some(&lines));
}

fn status(etcd: &str, root: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--log", "error", "autorecovery", "--metadata", &format!("etcd://{etcd}")])
        .args(["--root", root, "status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn naming(client: &LedgerClient, bookie: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for id in client.list().await.unwrap() {
        if let Ok(m) = client.metadata(id).await
            && m.ensembles.values().any(|e| e.iter().any(|b| b == bookie))
        {
            out.push(id);
        }
    }
    out
}

/// Four `folio bookie` processes on etcd under `root` with `overrides`, and a ledger client
/// of theirs.
async fn bookies_on_etcd(
    dir: &std::path::Path,
    etcd: &str,
    root: &str,
    overrides: &[&str],
) -> (Vec<Option<Proc>>, LedgerClient) {
    let procs = (0..4)
        .map(|i| Some(start_bookie(dir, &format!("bookie-{i}"), etcd, root, overrides)))
        .collect();
    let meta = Arc::new(folio_meta::etcd::EtcdStore::connect(&[etcd.to_string()]).await.unwrap());
    let client = LedgerClient::new(meta, Keys::new(root.to_string()))
        .with_request_timeout(Duration::from_secs(1))
        .with_speculative_read_timeout(Duration::from_millis(200));
    (procs, client)
}

/// Waits (at most `bound`) until no ledger names `lost` and `folio autorecovery status`
/// reports nothing under-replicated; returns that status.
async fn until_healed(
    client: &LedgerClient,
    etcd: &str,
    root: &str,
    lost: &str,
    bound: Duration,
) -> String {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let left = naming(client, lost).await;
        let s = status(etcd, root);
        if left.is_empty() && s.contains("under_replicated_ledgers=0\n") {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "not healed: {left:?}\n{s}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_process_lost_on_etcd_heals_by_itself_and_a_second_loss_loses_nothing() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("autorecovery-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let (mut procs, client) = bookies_on_etcd(tmp.path(), &etcd, &root, AUTORECOVERY).await;
    let (_broker, addr) = start_broker_with(&etcd, &root, 1, &["--broker-lease-ms", "2000"]);
    produce(&addr, 0, 200);
    let mut acked: BTreeMap<u64, u64> = BTreeMap::new();
    let mut idle = Vec::new();
    for i in 0..150u64 {
        let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
        for j in 0..(1 + i % 5) {
            w.add(format!("ledger {i} entry {j}").as_bytes()).await.unwrap();
        }
        acked.insert(w.id(), 1 + i % 5);
        if i % 4 == 0 {
            idle.push(w);
        } else {
            w.close().await.unwrap();
        }
    }
    let lost = "bookie-1";
    let before = naming(&client, lost).await.len();
    assert!(before > 50, "bookie-1 holds copies of many ledgers: {before}");
    procs[1].take(); // SIGKILL
    std::fs::remove_dir_all(tmp.path().join(lost)).unwrap();
    // The topic keeps taking records while the cluster heals (kcat retries a partition
    // whose ledger autorecovery fenced).
    produce(&addr, 200, 200);
    let s = until_healed(&client, &etcd, &root, lost, Duration::from_secs(120)).await;
    assert!(s.contains("auditor=bookie-"), "{s}");
    produce(&addr, 400, 100);
    for id in client.list().await.unwrap() {
        let r = client.open(id).await.unwrap();
        let check = r.check_replicas().await.unwrap();
        assert!(check.missing.is_empty(), "ledger {id}: {:?}", check.missing);
    }
    // A second loss: every acknowledged entry and record still reads (D1).
    procs[2].take();
    for (id, n) in &acked {
        let r = client.open(*id).await.unwrap();
        for j in 0..*n {
            let e = r.read(j as i64).await.unwrap_or_else(|e| panic!("ledger {id} entry {j}: {e}"));
            assert!(e.payload().ends_with(format!("entry {j}").as_bytes()));
        }
    }
    let got = kcat(&["-b", &addr, "-C", "-t", "heal", "-o", "beginning", "-e", "-q"], None);
    let mut records: Vec<&str> = got.lines().collect();
    records.sort();
    records.dedup();
    let want: Vec<String> = (0..500).map(|i| format!("record-{i}")).collect();
    let mut want_sorted: Vec<&str> = want.iter().map(String::as_str).collect();
    want_sorted.sort();
    assert_eq!(records, want_sorted, "every produced record reads after two losses");
    drop(idle);
    drop(procs);
}

/// #45 item 6: four `folio bookie` processes on etcd collect every second and copy slowly,
/// so each copy to a replacement spans several GC passes of its target (which sees a closed
/// ledger no ensemble names it in until the swap). One bookie is killed and its disk
/// wiped; after healing, `folio ledger check` finds every copy of every ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_gc_every_second_and_slow_copies_every_healed_ledger_has_every_copy() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("slow-copies-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let overrides: Vec<&str> = AUTORECOVERY
        .iter()
        .copied()
        .filter(|o| !o.starts_with("autorecovery.bytes_per_s"))
        .chain([
            "gc.interval_ms=1000",
            "gc.incoming_grace_ms=1000",
            "autorecovery.bytes_per_s=16384",
        ])
        .collect();
    let (mut procs, client) = bookies_on_etcd(tmp.path(), &etcd, &root, &overrides).await;
    let payload = vec![7u8; 1024];
    for _ in 0..24 {
        let w = client.create(CreateOptions::new(3, 2, 2)).await.unwrap();
        for _ in 0..24 {
            w.add(&payload).await.unwrap();
        }
        w.close().await.unwrap();
    }
    let lost = "bookie-1";
    let held = naming(&client, lost).await.len();
    assert!(held >= 10, "bookie-1 holds copies of many ledgers: {held}");
    let started = std::time::Instant::now();
    procs[1].take(); // SIGKILL
    std::fs::remove_dir_all(tmp.path().join(lost)).unwrap();
    until_healed(&client, &etcd, &root, lost, Duration::from_secs(240)).await;
    let healed_s = started.elapsed().as_secs_f64();
    let ids = client.list().await.unwrap();
    for id in &ids {
        let out = Command::new(env!("CARGO_BIN_EXE_folio"))
            .args(["--log", "error", "ledger", "--metadata", &format!("etcd://{etcd}")])
            .args(["--root", &root, "check", &id.to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "ledger {id}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "slow copies: {held} ledgers of 24 x 1 KiB entries re-replicated at 16 KiB/s per worker \
         with GC every second, healed in {healed_s:.1} s; `folio ledger check` clean on all {}",
        ids.len()
    );
    drop(procs);
}
