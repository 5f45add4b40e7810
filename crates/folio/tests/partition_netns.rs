//! #44 item 7: a network partition, not a kill. Broker 1 runs in a network namespace of
//! its own; etcd, three bookies and broker 2 run outside it. While a real client
//! (librdkafka) produces with idempotence to 4 partitions and a 2-member group (one member
//! of each protocol, classic and KIP-848's consumer protocol) commits synchronously,
//! broker 1 (which leads partitions and coordinates the group) is cut off from etcd and the
//! bookies (a blackhole route in its namespace) but not from the clients, for three lease
//! TTLs; then the cut heals.
//!
//! Asserted: every acknowledged record is stored exactly once and in order per partition
//! (0 lost, 0 duplicated, 0 reordered); the group's committed offsets, read from etcd every
//! 50 ms, never decrease; and broker 1 fences itself (its `/health` says so) before its
//! lease expires at etcd, so it stops acknowledging within one lease TTL, then serves again
//! after the heal.
//!
//! A second test runs transactions (#49) across the same cut. A third cuts a bookie off from
//! everything instead (#47: a single-write bookie under a partition, not a kill).
//!
//! Needs root (CI runs as root), `ip` (iproute2) and `etcd`. The namespace, its veth pair
//! and routes are made and removed by the test itself.
#![cfg(feature = "etcd")]

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use folio_meta::MetadataStore;
use folio_meta::records::Record;

use common::{Proc, broker_up, http_get};

/// Lease TTL of both brokers.
const LEASE_MS: u64 = 3000;
/// How long broker 1 stays cut off: three lease TTLs.
const CUT: Duration = Duration::from_millis(3 * LEASE_MS);
const PARTITIONS: usize = 4;

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("run a command");
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace with a veth pair to the test's own namespace: `inner` inside,
/// `outer` (and a second address for clients, `client`) outside. Removed when dropped.
struct Netns {
    name: String,
    outer: String,
    inner: String,
    client: String,
}

impl Netns {
    fn new() -> Netns {
        let tag = format!("{:04x}", rand::random::<u16>());
        let net = 1 + rand::random::<u8>() % 250;
        let (name, veth, peer) = (format!("folio-{tag}"), format!("fo{tag}"), format!("fi{tag}"));
        let probe = Command::new("ip").args(["netns", "add", &name]).output();
        assert!(
            probe.as_ref().is_ok_and(|o| o.status.success()),
            "this test makes a network namespace: run it as root with iproute2 ({probe:?})"
        );
        let ns = Netns {
            name: name.clone(),
            outer: format!("10.231.{net}.1"),
            inner: format!("10.231.{net}.2"),
            client: format!("10.231.{net}.3"),
        };
        let inside = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &name];
            all.extend_from_slice(args);
            sh(&all);
        };
        sh(&["ip", "link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        sh(&["ip", "link", "set", &peer, "netns", &name]);
        sh(&["ip", "addr", "add", &format!("{}/24", ns.outer), "dev", &veth]);
        sh(&["ip", "addr", "add", &format!("{}/24", ns.client), "dev", &veth]);
        sh(&["ip", "link", "set", &veth, "up"]);
        inside(&["ip", "addr", "add", &format!("{}/24", ns.inner), "dev", &peer]);
        inside(&["ip", "link", "set", &peer, "up"]);
        inside(&["ip", "link", "set", "lo", "up"]);
        // Clients reach broker 1 from `client`, everything else lives on `outer`: the cut
        // (a blackhole route to `outer` inside) leaves the clients' connections alone.
        sh(&[
            "ip",
            "route",
            "replace",
            &format!("{}/32", ns.inner),
            "dev",
            &veth,
            "src",
            &ns.client,
        ]);
        ns
    }

    /// Cuts the namespace off from `outer` (etcd, bookies, broker 2), or heals the cut.
    fn cut(&self, cut: bool) {
        let verb = if cut { "add" } else { "del" };
        let route = format!("{}/32", self.outer);
        sh(&["ip", "netns", "exec", &self.name, "ip", "route", verb, "blackhole", &route]);
    }

    /// Cuts the namespace off from everything (`outer` and the clients' `client`), or heals.
    fn isolate(&self, cut: bool) {
        self.cut(cut);
        let verb = if cut { "add" } else { "del" };
        let route = format!("{}/32", self.client);
        sh(&["ip", "netns", "exec", &self.name, "ip", "route", verb, "blackhole", &route]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace removes its end of the veth pair, and so both.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port()
}

/// An etcd of the test's own on `ip`.
fn start_etcd(ip: &str, dir: &std::path::Path) -> (Proc, String) {
    let (client, peer) = (free_port(ip), free_port(ip));
    let client_url = format!("http://{ip}:{client}");
    let peer_url = format!("http://{ip}:{peer}");
    let child = Command::new("etcd")
        .args(["--name", "partition-test", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("partition-test={peer_url}")])
        .args(["--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd (scripts/lib/deps.sh installs it)");
    (Proc(child), format!("{ip}:{client}"))
}

fn folio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_folio"))
}

/// `folio`, run inside network namespace `netns` if given.
fn folio_in(netns: Option<&str>) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_folio")]);
            c
        }
        None => folio(),
    }
}

fn start_bookie(dir: &std::path::Path, id: &str, ip: &str, etcd: &str, root: &str) -> Proc {
    start_bookie_in(None, dir, id, ip, etcd, root, &[])
}

/// A bookie on `ip` (inside namespace `netns` if given), with extra `--override`s.
fn start_bookie_in(
    netns: Option<&str>,
    dir: &std::path::Path,
    id: &str,
    ip: &str,
    etcd: &str,
    root: &str,
    overrides: &[&str],
) -> Proc {
    let mut cmd = folio_in(netns);
    cmd.args(["--log", "warn", "bookie", "--bookie-id", id, "--listen", &format!("{ip}:0")]);
    for o in overrides {
        cmd.args(["--override", o]);
    }
    let mut child = cmd
        .arg("--data-dir")
        .arg(dir.join(id))
        .args(["--metadata", &format!("etcd:{etcd}")])
        .args(["--override", &format!("metadata_root={root:?}")])
        // The namespaces' network is the test's own.
        .args(["--override", "allow_unauthenticated=true"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn folio bookie");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "bookie {id} did not start: {line}");
    Proc(child)
}

/// A broker on `ip` (inside namespace `netns` if given); its Kafka and HTTP addresses.
fn start_broker(
    netns: Option<&str>,
    ip: &str,
    etcd: &str,
    root: &str,
    id: u16,
) -> (Proc, String, String) {
    let mut cmd = folio_in(netns);
    let mut child = cmd
        .args(["broker", "--metadata", &format!("etcd://{etcd}"), "--root", root])
        .args(["--kafka-listen", &format!("{ip}:0"), "--http", &format!("{ip}:0")])
        .args(["--node-id", &id.to_string(), "--broker-lease-ms", &LEASE_MS.to_string()])
        .args(["--num-partitions", &PARTITIONS.to_string()])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio broker");
    let (listeners, http) = broker_up(&mut child);
    (Proc(child), listeners[0].1.clone(), http)
}

fn clients_py() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/clients.py")
}

/// The leader of each partition of `topic`, from `kcat -L`.
fn leaders(bootstrap: &str, topic: &str) -> BTreeMap<usize, i32> {
    let out = common::kcat(&["-L", "-b", bootstrap, "-t", topic], None);
    out.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("partition ")?;
            let (p, rest) = rest.split_once(',')?;
            let leader = rest.trim().strip_prefix("leader ")?.split(',').next()?;
            Some((p.trim().parse().ok()?, leader.trim().parse().ok()?))
        })
        .collect()
}

/// `produce_spread` (an idempotent confluent-kafka producer over [`PARTITIONS`] partitions)
/// until the returned process is dropped, and its acknowledgements (partition, value).
fn produce_spread(bootstrap: &str, topic: &str) -> (Proc, std::sync::mpsc::Receiver<(usize, u64)>) {
    let mut producer = Command::new("python3")
        .arg(clients_py())
        .args(["produce_spread", bootstrap, topic, &PARTITIONS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 with confluent-kafka");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = producer.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let mut w = line.split_whitespace();
            if w.next() == Some("acked")
                && let (Some(p), Some(v)) = (w.next(), w.next())
                && tx.send((p.parse::<usize>().unwrap(), v.parse::<u64>().unwrap())).is_err()
            {
                break;
            }
        }
    });
    (Proc(producer), rx)
}

/// Waits for `n` more acknowledgements.
fn take(rx: &std::sync::mpsc::Receiver<(usize, u64)>, n: usize, acked: &mut Vec<(usize, u64)>) {
    let goal = acked.len() + n;
    while acked.len() < goal {
        acked.push(rx.recv_timeout(Duration::from_secs(90)).expect("the producer stalled"));
    }
}

/// What a topic holds against what was acknowledged, read back through the brokers.
struct Tally {
    acked: usize,
    stored: usize,
    lost: Vec<(usize, u64)>,
    duplicated: usize,
    reordered: usize,
}

impl Tally {
    fn of(bootstrap: &str, topic: &str, acked: &[(usize, u64)]) -> Tally {
        let dump = Command::new("python3")
            .arg(clients_py())
            .args(["dump_all", bootstrap, topic, &PARTITIONS.to_string()])
            .output()
            .expect("python3");
        assert!(dump.status.success(), "dump_all: {}", String::from_utf8_lossy(&dump.stderr));
        let mut stored: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for line in String::from_utf8_lossy(&dump.stdout).lines() {
            let mut w = line.split_whitespace();
            if let (Some(p), Some(v)) = (w.next(), w.next())
                && let (Ok(p), Ok(v)) = (p.parse::<usize>(), v.parse::<u64>())
            {
                stored.entry(p).or_default().push(v);
            }
        }
        let mut counts: HashMap<(usize, u64), usize> = HashMap::new();
        for (p, vs) in &stored {
            for v in vs {
                *counts.entry((*p, *v)).or_default() += 1;
            }
        }
        Tally {
            acked: acked.len(),
            stored: counts.len(),
            lost: acked.iter().filter(|a| !counts.contains_key(a)).copied().collect(),
            duplicated: counts.values().filter(|n| **n > 1).count(),
            reordered: stored
                .values()
                .map(|vs| vs.windows(2).filter(|w| w[0] >= w[1]).count())
                .sum(),
        }
    }

    fn assert_exactly_once(&self) {
        let lost = &self.lost[..self.lost.len().min(10)];
        assert!(self.lost.is_empty(), "acknowledged and lost: {lost:?}");
        assert_eq!(self.duplicated, 0, "records stored twice");
        assert_eq!(self.reordered, 0, "records out of order within a partition");
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "acked={} stored={} lost={} duplicated={} reordered={}",
            self.acked,
            self.stored,
            self.lost.len(),
            self.duplicated,
            self.reordered
        )
    }
}

/// etcd and three bookies outside the namespace, broker 1 inside it and broker 2 outside.
struct Cluster {
    meta: Arc<folio_meta::etcd::EtcdStore>,
    keys: folio_meta::keys::Keys,
    a1: String,
    http1: String,
    a2: String,
    _procs: Vec<Proc>,
}

async fn start_cluster(ns: &Netns, dir: &std::path::Path) -> Cluster {
    let (etcd_proc, etcd) = start_etcd(&ns.outer, dir);
    let meta = connect(&etcd).await;
    let root = "partition-test";
    let mut procs: Vec<Proc> =
        (0..3).map(|i| start_bookie(dir, &format!("bookie-{i}"), &ns.outer, &etcd, root)).collect();
    let (b1, a1, http1) = start_broker(Some(&ns.name), &ns.inner, &etcd, root, 1);
    let (b2, a2, _) = start_broker(None, &ns.outer, &etcd, root, 2);
    procs.extend([etcd_proc, b1, b2]);
    Cluster { meta, keys: folio_meta::keys::Keys::new(root), a1, http1, a2, _procs: procs }
}

/// The test's etcd, once it answers.
async fn connect(etcd: &str) -> Arc<folio_meta::etcd::EtcdStore> {
    let connected = tokio::sync::Mutex::new(None);
    folio_testkit::poll::until(
        Duration::from_secs(60),
        "etcd in the namespace answers",
        || async {
            match folio_meta::etcd::EtcdStore::connect(&[etcd.to_string()]).await {
                Ok(m) if m.get("probe").await.is_ok() => {
                    connected.lock().await.replace(m).is_none()
                }
                _ => false,
            }
        },
    )
    .await;
    Arc::new(connected.into_inner().expect("connected"))
}

/// Cuts broker 1 off from etcd and the bookies (not from the clients) for [`CUT`], then
/// heals the cut: asserts it fences itself before its lease could expire at etcd and
/// serves again after the heal. Returns (fenced after, serving again after the heal).
async fn cut_broker_1(ns: &Netns, c: &Cluster) -> (Duration, Duration) {
    ns.cut(true);
    let cut_at = Instant::now();
    let fenced_at = loop {
        if http_get(&c.http1, "/health").starts_with("fenced") {
            break cut_at.elapsed();
        }
        assert!(cut_at.elapsed() < CUT, "broker 1 did not fence itself while cut off");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Fenced before its lease could expire at etcd: its registration is still there.
    let registration = c.meta.get(&c.keys.broker(1)).await.unwrap();
    assert!(
        registration.is_some(),
        "broker 1 fenced itself only after its lease expired ({fenced_at:?})"
    );
    tokio::time::sleep(CUT.saturating_sub(cut_at.elapsed())).await;
    ns.cut(false);
    let healed_at = Instant::now();
    let deadline = healed_at + Duration::from_secs(60);
    while !http_get(&c.http1, "/health").starts_with("ok") {
        assert!(Instant::now() < deadline, "broker 1 did not serve again after the heal");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (fenced_at, healed_at.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_an_isolated_broker_fences_itself_and_nothing_acknowledged_or_committed_goes_back() {
    let ns = Netns::new();
    let tmp = tempfile::tempdir().unwrap();
    let cluster = start_cluster(&ns, tmp.path()).await;
    let (meta, keys, a1, a2) = (&cluster.meta, &cluster.keys, &cluster.a1, &cluster.a2);
    let bootstrap = format!("{a1},{a2}");
    // A group broker 1 coordinates.
    let group = (0..)
        .map(|i| format!("partitioned-{i}"))
        .find(|g| {
            folio_broker::cluster::owner_among(&folio_broker::cluster::group_key(g), &[1, 2])
                == Some(1)
        })
        .unwrap();
    // Both brokers see each other; broker 1 leads some of the topic's partitions. Owners are
    // hashed from the topic's id, which is random, so one topic in 2^PARTITIONS has all its
    // partitions on broker 2: such a topic is left aside and the next one created.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (topic, led_by_1) = 'topics: {
        for t in 0..8 {
            let topic = format!("partitioned-{t}");
            let l = loop {
                let l = leaders(a1, &topic);
                let both = common::kcat(&["-L", "-b", a2], None).contains(" 2 brokers:");
                if l.len() == PARTITIONS && both && l == leaders(a2, &topic) {
                    break l;
                }
                assert!(
                    Instant::now() < deadline,
                    "the brokers did not agree on {topic}'s leaders: {l:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            let led: Vec<usize> = l.iter().filter(|(_, b)| **b == 1).map(|(p, _)| *p).collect();
            if !led.is_empty() {
                break 'topics (topic, led);
            }
        }
        panic!("broker 1 leads no partition of 8 topics of {PARTITIONS} partitions");
    };
    eprintln!("{topic}: broker 1 leads partitions {led_by_1:?}");
    let topic = topic.as_str();

    // Committed offsets, read from etcd every 50 ms: they must never decrease.
    let went_back = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop_watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (meta, went_back, stop_watching) =
            (meta.clone(), went_back.clone(), stop_watching.clone());
        let prefix = format!("{}{group}/", keys.groups());
        tokio::spawn(async move {
            let mut seen: HashMap<String, i64> = HashMap::new();
            while !stop_watching.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(all) = folio_meta::list_all(meta.as_ref(), &prefix).await {
                    for v in all {
                        let Ok(r) = folio_broker::group::OffsetRecord::decode(&v.key, &v.value)
                        else {
                            continue;
                        };
                        let last = seen.entry(v.key.clone()).or_insert(r.offset);
                        if r.offset < *last {
                            went_back
                                .lock()
                                .unwrap()
                                .push(format!("{}: {} after {}", v.key, r.offset, last));
                        }
                        *last = (*last).max(r.offset);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            seen.len()
        })
    };

    let (producer, rx) = produce_spread(&bootstrap, topic);
    let _group = Proc(
        Command::new("python3")
            .arg(clients_py())
            .args(["group_commit", &bootstrap, topic, &group, "2", "classic,consumer"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 with confluent-kafka"),
    );
    let mut acked = Vec::new();
    take(&rx, 3000, &mut acked);
    // The group has committed before the cut.
    let committed = async || {
        folio_meta::list_all(meta.as_ref(), &format!("{}{group}/", keys.groups()))
            .await
            .unwrap()
            .len()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed().await == 0 {
        assert!(Instant::now() < deadline, "the group committed nothing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The cut: broker 1 loses etcd and the bookies, the clients still reach it.
    let (fenced_at, back_after) = cut_broker_1(&ns, &cluster).await;
    take(&rx, 3000, &mut acked);
    drop(producer);
    // Give the last deliveries no chance to be counted: only what was printed is acked.
    while let Ok(a) = rx.try_recv() {
        acked.push(a);
    }
    stop_watching.store(true, std::sync::atomic::Ordering::SeqCst);
    let offsets_watched = watcher.await.unwrap();

    // Everything stored, read back through the brokers.
    let t = Tally::of(&bootstrap, topic, &acked);
    let went_back = went_back.lock().unwrap().clone();
    eprintln!(
        "partition test: {t} fenced_after_ms={} back_after_heal_ms={} committed_offsets_watched={offsets_watched} went_back={}",
        fenced_at.as_millis(),
        back_after.as_millis(),
        went_back.len()
    );
    t.assert_exactly_once();
    assert!(went_back.is_empty(), "committed offsets went backwards: {went_back:?}");
    assert!(offsets_watched > 0, "no committed offset was seen");
}

/// #49 under a partition: a consume-transform-produce (confluent-kafka, in
/// `tests/kafka/transactions.py` `ctp_partitioned`) whose transaction coordinator and
/// group coordinator are broker 1 goes on while broker 1 is cut off from etcd and the
/// bookies for three lease TTLs: each input record ends in the output exactly once for
/// read_committed, the group's committed offset at the input's end (no lost write, no
/// duplicate, no aborted record visible, offsets never torn from their transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_transactions_stay_exactly_once_while_their_coordinator_is_cut_off() {
    let ns = Netns::new();
    let tmp = tempfile::tempdir().unwrap();
    let cluster = start_cluster(&ns, tmp.path()).await;
    let bootstrap = format!("{},{}", cluster.a1, cluster.a2);
    let owned_by_1 = |key: Vec<u8>| folio_broker::cluster::owner_among(&key, &[1, 2]) == Some(1);
    let group = (0..)
        .map(|i| format!("cut-{i}"))
        .find(|g| {
            owned_by_1(folio_broker::cluster::group_key(g))
                && owned_by_1(folio_broker::cluster::txn_key(&format!("tx-{g}")))
        })
        .unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/transactions.py");
    let mut ctp = Command::new("python3")
        .arg(script)
        .args(["ctp_partitioned", &bootstrap, "cut-in", "cut-out", &group, "600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3 with confluent-kafka");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = ctp.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("progress ") {
                let _ = tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    // Twenty transactions committed through broker 1, then the cut.
    for _ in 0..20 {
        rx.recv_timeout(Duration::from_secs(120)).expect("the transformer stalled before the cut");
    }
    let (fenced_at, back_after) = cut_broker_1(&ns, &cluster).await;
    let status = tokio::task::spawn_blocking(move || ctp.wait()).await.unwrap().unwrap();
    let lines = reader.join().unwrap();
    let errors = lines.iter().filter(|l| l.starts_with("error ")).count();
    eprintln!(
        "transactions under a partition: fenced_after_ms={} back_after_heal_ms={} client_errors={errors} {}",
        fenced_at.as_millis(),
        back_after.as_millis(),
        lines.last().map_or("", String::as_str)
    );
    if !status.success() {
        // What the store holds of transactions: the records, those ending, staged offsets.
        let all = folio_meta::list_all(cluster.meta.as_ref(), cluster.keys.root()).await.unwrap();
        for v in all.iter().filter(|v| v.key.contains("transaction")) {
            eprintln!("{} (version {}): {:?}", v.key, v.version, String::from_utf8_lossy(&v.value));
        }
    }
    assert!(status.success(), "ctp_partitioned failed:\n{}", lines.join("\n"));
    assert!(lines.last().is_some_and(|l| l.starts_with("OK ")), "{}", lines.join("\n"));
}

/// Registration lease of the bookies in the bookie test: the cut outlasts it.
const BOOKIE_LEASE_MS: u64 = 3000;
/// How long the bookie stays cut off: past its lease and two ledger request timeouts (the
/// writers give up on it and replace it).
const BOOKIE_CUT: Duration = Duration::from_secs(12);

/// Ledgers whose ensemble had `bookie` and then no longer did (an ensemble change replaced
/// it), and ledgers in all.
async fn replaced(meta: &folio_meta::etcd::EtcdStore, root: &str, bookie: &str) -> (usize, usize) {
    let keys = folio_meta::keys::Keys::new(root);
    let all = folio_meta::list_all(meta, &keys.ledgers()).await.unwrap();
    let replaced = all
        .iter()
        .filter_map(|v| folio_meta::records::LedgerMetadata::decode(&v.key, &v.value).ok())
        .filter(|m| {
            let had = m.ensembles.values().any(|e| e.iter().any(|b| b == bookie));
            let last = m.ensembles.values().next_back();
            had && last.is_some_and(|e| !e.iter().any(|b| b == bookie))
        })
        .count();
    (replaced, all.len())
}

/// #47 under a network partition: bookie-0 (single-write, the default mode) runs in the
/// namespace and is cut off from everything (etcd, the other bookies, the broker) for longer
/// than its lease and the ledger client's request timeout, while a real client produces
/// with idempotence over 4 bookies. Asserted: writers sent it entries before the cut;
/// produce goes on during the cut (writers replace it, or go on at their ack quorum); every
/// record acknowledged so far is read back during the cut (reads go around it); its
/// registration expires during the cut and comes back after the heal; and at the end
/// nothing acknowledged is lost, duplicated or reordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_bookie_cut_off_from_everything_loses_nothing_and_registers_again_after_the_heal() {
    let ns = Netns::new();
    let tmp = tempfile::tempdir().unwrap();
    let (etcd_proc, etcd) = start_etcd(&ns.outer, tmp.path());
    let meta = connect(&etcd).await;
    let root = "bookie-partition";
    let keys = folio_meta::keys::Keys::new(root);
    let lease = format!("lease_ttl_ms={BOOKIE_LEASE_MS}");
    let bookie = |i: usize| {
        let (netns, ip) =
            if i == 0 { (Some(ns.name.as_str()), &ns.inner) } else { (None, &ns.outer) };
        start_bookie_in(netns, tmp.path(), &format!("bookie-{i}"), ip, &etcd, root, &[&lease])
    };
    let mut procs: Vec<Proc> = vec![etcd_proc];
    procs.extend((0..4).map(bookie));
    let registered = async |n: usize| {
        folio_meta::list_all(meta.as_ref(), &keys.bookies_writable()).await.unwrap().len() == n
    };
    folio_testkit::poll::until(Duration::from_secs(60), "4 bookies registered", || registered(4))
        .await;
    let (broker, a, _) = start_broker(None, &ns.outer, &etcd, root, 1);
    procs.push(broker);
    let journal_0 = tmp.path().join("bookie-0").join("journal");
    let held_before = folio_testkit::disk::dir_bytes(&journal_0);

    let topic = "bookie-cut";
    let (producer, rx) = produce_spread(&a, topic);
    let mut acked = Vec::new();
    take(&rx, 2000, &mut acked);
    let held = folio_testkit::disk::dir_bytes(&journal_0);
    assert!(held > held_before, "no writer sent bookie-0 anything ({held} bytes)");

    ns.isolate(true);
    let cut_at = Instant::now();
    let registration = keys.bookie("bookie-0", false);
    let gone = || async { meta.get(&registration).await.unwrap().is_none() };
    folio_testkit::poll::until(Duration::from_secs(30), "bookie-0's lease expired", gone).await;
    // Produce goes on for the whole cut.
    let before_cut = acked.len();
    while cut_at.elapsed() < BOOKIE_CUT {
        take(&rx, 200, &mut acked);
    }
    let acked_in_cut = acked.len() - before_cut;
    let during = Tally::of(&a, topic, &acked);
    let (replaced, ledgers) = replaced(&meta, root, "bookie-0").await;
    let back_at = Instant::now();
    ns.isolate(false);
    let back = || async { meta.get(&registration).await.unwrap().is_some() };
    folio_testkit::poll::until(Duration::from_secs(60), "bookie-0 registered again", back).await;
    let registered_after = back_at.elapsed();
    take(&rx, 2000, &mut acked);
    drop(producer);
    while let Ok(a) = rx.try_recv() {
        acked.push(a);
    }
    let after = Tally::of(&a, topic, &acked);
    eprintln!(
        "bookie partition test: during the cut {during}; at the end {after}; cut_ms={} \
         acked_in_cut={acked_in_cut} ledgers={ledgers} replaced_bookie_0_in={replaced} \
         registered_after_heal_ms={}",
        back_at.duration_since(cut_at).as_millis(),
        registered_after.as_millis()
    );
    assert!(during.lost.is_empty(), "acknowledged, unreadable during the cut: {during}");
    assert!(replaced > 0, "no writer replaced the cut-off bookie in {ledgers} ledgers");
    after.assert_exactly_once();
}
