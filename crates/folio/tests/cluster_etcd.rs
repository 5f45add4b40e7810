//! D1 in a real cluster: three `folio bookie` processes on etcd; a client writes a ledger
//! (E=3, Qw=2, Qa=2) while one bookie is killed with SIGKILL. With no spare bookie the
//! writer cannot replace it and stops. The killed bookie restarts on its dirs (its journal
//! must still hold everything it acknowledged), a fresh client recovers the ledger, and every
//! acknowledged entry reads back byte-identical. Also: `folio broker` on the same kind of
//! cluster, killed and replaced.
#![cfg(feature = "etcd")]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;

use common::{Proc, kcat, start_bookie, start_broker_with};

fn payload(i: u64) -> Vec<u8> {
    format!("cluster-entry-{i};").repeat(20).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_three_bookie_processes_on_etcd_one_sigkilled_during_writes() {
    three_bookies_one_sigkilled_during_writes(&[]).await;
}

/// The same with single-write bookies (#47): the journal's files are their only copy of
/// each entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_three_single_write_bookie_processes_on_etcd_one_sigkilled_during_writes() {
    three_bookies_one_sigkilled_during_writes(&["storage.mode=\"single-write\""]).await;
}

async fn three_bookies_one_sigkilled_during_writes(overrides: &[&str]) {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("cluster-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let mut procs: Vec<Option<Proc>> = (0..3)
        .map(|i| Some(start_bookie(tmp.path(), &format!("bookie-{i}"), &etcd, &root, overrides)))
        .collect();
    let meta =
        Arc::new(folio_meta::etcd::EtcdStore::connect(std::slice::from_ref(&etcd)).await.unwrap());
    let client = LedgerClient::new(meta.clone(), Keys::new(root.clone()))
        .with_request_timeout(Duration::from_secs(1));
    let w = Arc::new(client.create(CreateOptions::new(3, 2, 2)).await.unwrap());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = {
        let w = w.clone();
        tokio::spawn(async move {
            let mut inflight = tokio::task::JoinSet::new();
            for i in 0..2000u64 {
                let (w, tx) = (w.clone(), tx.clone());
                inflight.spawn(async move {
                    match w.add(&payload(i)).await {
                        Ok(id) => tx.send(Some((id, i))).is_ok(),
                        Err(_) => false,
                    }
                });
                if inflight.len() >= 32 && matches!(inflight.join_next().await, Some(Ok(false))) {
                    break;
                }
            }
            while inflight.join_next().await.is_some() {}
            let _ = tx.send(None);
        })
    };
    let mut acked = Vec::new();
    while acked.len() < 300 {
        match rx.recv().await.unwrap() {
            Some(a) => acked.push(a),
            None => panic!("the writer stopped before the kill"),
        }
    }
    procs[1].take(); // SIGKILL bookie-1 while adds are in flight
    writer.await.unwrap();
    while let Ok(Some(a)) = rx.try_recv() {
        acked.push(a);
    }
    // The killed bookie comes back on its dirs.
    procs[1] = Some(start_bookie(tmp.path(), "bookie-1", &etcd, &root, overrides));
    let reader = LedgerClient::new(meta, Keys::new(root.clone()))
        .with_request_timeout(Duration::from_secs(2));
    let r = reader.recover(w.id()).await.unwrap();
    let last = r.last_entry_id().unwrap();
    for (id, i) in &acked {
        assert!(*id <= last, "acknowledged entry {id} past the recovered end {last}");
        assert_eq!(r.read(*id).await.unwrap().payload(), &payload(*i)[..], "entry {id}");
    }
    // `folio ledger check` (#23): every copy of the recovered ledger is on its write set;
    // with bookie-0 killed, it names bookie-0's copies and fails.
    let check = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_folio"))
            .args(["--log", "error", "ledger", "--metadata", &format!("etcd://{etcd}")])
            .args(["--root", &root, "check", &w.id().to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success(), text)
    };
    let (ok, text) = check();
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("{} entries", last + 1)) && text.contains(" 0 missing"),
        "{text}"
    );
    procs[0].take();
    let (ok, text) = check();
    assert!(!ok, "{text}");
    assert!(text.contains("bookie bookie-0"), "{text}");
    assert!(!text.contains("bookie bookie-1") && !text.contains("bookie bookie-2"), "{text}");
    drop(procs);
}

/// A broker whose partitions move 2 s after it dies.
fn start_broker(etcd: &str, root: &str, node_id: u16) -> (Proc, String) {
    start_broker_with(etcd, root, node_id, &["--broker-lease-ms", "2000"])
}

/// `folio broker` on etcd with two `folio bookie` processes: kcat produces and consumes; the
/// broker is SIGKILLed and a new broker process serves every acknowledged record (it fences
/// and recovers the partition's last ledger) and takes new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_d3_a_broker_process_on_etcd_restarted_after_sigkill_keeps_every_record() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("broker-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let _bookies: Vec<Proc> = (0..2)
        .map(|i| start_bookie(tmp.path(), &format!("bookie-{i}"), &etcd, &root, &[]))
        .collect();
    let (broker, addr) = start_broker(&etcd, &root, 1);
    let lines: String = (0..200).map(|i| format!("record-{i}\n")).collect();
    kcat(&["-P", "-b", &addr, "-t", "orders", "-X", "acks=all"], Some(&lines));
    let read = |addr: &str| {
        kcat(&["-C", "-b", addr, "-t", "orders", "-o", "beginning", "-e", "-f", "%o %s\n"], None)
    };
    let want: String = (0..200).map(|i| format!("{i} record-{i}\n")).collect();
    assert_eq!(read(&addr), want);
    drop(broker); // SIGKILL
    let (_broker, addr) = start_broker(&etcd, &root, 2);
    assert_eq!(read(&addr), want, "a new broker serves every acknowledged record");
    kcat(&["-P", "-b", &addr, "-t", "orders", "-X", "acks=all"], Some("after\n"));
    assert!(read(&addr).ends_with("200 after\n"));
    let md = kcat(&["-L", "-b", &addr, "-t", "orders"], None);
    assert!(md.contains("broker 2 at"), "{md}");
    // `folio topics delete --wait`: returns once the controller (broker 2) has deleted the
    // topic's data, saying so on stderr (plain lines: no terminal here).
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--log", "error", "topics", "--metadata", &format!("etcd://{etcd}")])
        .args(["--root", &root, "delete", "orders", "--wait", "120"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("deleting the topics' data: done in"), "{err}");
    let topics = kcat(&["-L", "-b", &addr], None);
    assert!(!topics.contains("\"orders\""), "{topics}");
}

fn python_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/clients.py")
}

/// Runs `clients.py read_positions <addr> <topic> <phase>`; panics with its output.
fn read_positions(addr: &str, topic: &str, phase: &str) {
    let out = Command::new("python3")
        .arg(python_script())
        .args(["read_positions", addr, topic, phase])
        .output()
        .expect("python3 with confluent-kafka");
    assert!(
        out.status.success(),
        "read_positions {phase}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// #22 where users run it: a `folio broker` on etcd with two `folio bookie` processes,
/// ledgers of 8 KiB. confluent-kafka assigned at every offset gets that record first (start,
/// inside a batch, ledger boundaries, the open ledger); again from a new broker process
/// after the first is SIGKILLed (its offset index starts empty), and after DeleteRecords.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_every_position_on_etcd_after_a_broker_restart_and_a_trim() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("positions-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let _bookies: Vec<Proc> = (0..2)
        .map(|i| start_bookie(tmp.path(), &format!("bookie-{i}"), &etcd, &root, &[]))
        .collect();
    let args = ["--broker-lease-ms", "2000", "--ledger-rollover-bytes", "8192"];
    let (broker, addr) = start_broker_with(&etcd, &root, 1, &args);
    read_positions(&addr, "positions", "produce");
    read_positions(&addr, "positions", "check");
    drop(broker); // SIGKILL
    let (_broker, addr) = start_broker_with(&etcd, &root, 2, &args);
    // Clients go to the partition's leader: wait until broker 1's lease has expired and
    // broker 2 leads it.
    for _ in 0..200 {
        if kcat(&["-L", "-b", &addr, "-t", "positions"], None).contains("leader 2,") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    read_positions(&addr, "positions", "check");
    read_positions(&addr, "positions", "trim");
}

/// Two `folio broker` processes on etcd with three bookies; an idempotent acks=all
/// producer spreads records over 4 partitions; the broker leading partition 0 is SIGKILLed
/// mid-stream. After its lease expires its partitions move to the other broker (which
/// fences and recovers their ledgers), the producer carries on there, and every
/// acknowledged record is read back exactly once and in order per partition.
///
/// #25 leader epochs: a confluent-kafka consumer tails every partition throughout, with
/// `auto.offset.reset=error`. The move begins a new leader epoch for each moved partition;
/// the consumer sees partition 0's epoch rise, validates its positions after the leader
/// change (KIP-320) without being told of a truncation or reset, and reads every record
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_d3_partitions_move_when_a_broker_dies_and_nothing_acknowledged_is_lost() {
    use std::collections::{BTreeMap, HashSet};
    let TwoBrokers { b1, a1, b2: _b2, a2, _bookies, _dir, .. } = two_brokers("move-test");
    let bootstrap = format!("{a1},{a2}");
    // Both brokers see each other before the topic is used.
    let md = |addr: &str| kcat(&["-L", "-b", addr], None);
    for _ in 0..100 {
        if md(&a1).contains(" 2 brokers:") && md(&a2).contains(" 2 brokers:") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut producer, rx) = spread_producer(&bootstrap, "moving");
    let mut acked = Vec::new();
    while acked.len() < 1000 {
        acked.push(rx.recv_timeout(Duration::from_secs(60)).expect("the producer stalled"));
    }
    let mut tail = Command::new("python3")
        .arg(python_script())
        .args(["tail_spread", &bootstrap, "moving", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with confluent-kafka");
    let tail_out = tail.stdout.take().unwrap();
    let tailed = std::thread::spawn(move || {
        BufReader::new(tail_out).lines().map_while(Result::ok).collect::<Vec<String>>()
    });
    while acked.len() < 3000 {
        acked.push(rx.recv_timeout(Duration::from_secs(60)).expect("the producer stalled"));
    }
    // SIGKILL the broker leading partition 0 mid-stream; the other one survives.
    let leaders = md(&a1);
    let leads_0 = |id: i32| leaders.contains(&format!("partition 0, leader {id},"));
    let (victim, victim_id, survivor, a2) = match (leads_0(1), leads_0(2)) {
        (true, _) => (b1, 1, _b2, a2),
        (_, true) => (_b2, 2, b1, a1),
        _ => panic!("no leader for partition 0: {leaders}"),
    };
    drop(victim);
    let killed_at = acked.len();
    // The producer carries on once the partitions have moved.
    while acked.len() < killed_at + 3000 {
        acked.push(
            rx.recv_timeout(Duration::from_secs(60))
                .expect("the producer did not continue after the move"),
        );
    }
    let _ = producer.kill();
    let _ = producer.wait();
    while let Ok(a) = rx.try_recv() {
        acked.push(a);
    }
    // The tailing consumer stops at an `end` record in every partition.
    for p in 0..4 {
        kcat(&["-P", "-b", &a2, "-t", "moving", "-p", &p.to_string()], Some("end\n"));
    }
    let status = tail.wait().unwrap();
    let lines = tailed.join().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut tail.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "tail_spread: {err}\n{}", lines.join("\n"));
    let mut tailed: BTreeMap<i32, Vec<(i64, u64, i32)>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.starts_with("got ")) {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (p, o, v, e) = (
            w[1].parse().unwrap(),
            w[2].parse().unwrap(),
            w[3].parse().unwrap(),
            w[4].parse().unwrap(),
        );
        tailed.entry(p).or_default().push((o, v, e));
    }
    for (p, got) in &tailed {
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "partition {p}: offsets repeated or out of order"
        );
        assert!(got.windows(2).all(|w| w[0].2 <= w[1].2), "partition {p}: leader epoch went back");
    }
    let epochs: Vec<i32> = tailed[&0].iter().map(|g| g.2).collect();
    assert!(
        epochs[0] >= 1 && epochs.last() > epochs.first(),
        "partition 0 moved, its epoch did not rise: {epochs:?}"
    );
    let read: HashSet<u64> = tailed.values().flatten().map(|g| g.1).collect();
    assert_eq!(read.len(), tailed.values().map(Vec::len).sum::<usize>(), "a record was read twice");
    let unread: Vec<_> = acked.iter().filter(|(_, v)| !read.contains(v)).take(5).collect();
    assert!(unread.is_empty(), "acknowledged records the tailing consumer never got: {unread:?}");
    every_acked_stored_once(&a2, "moving", &acked);
    // The survivor now serves every partition.
    let md2 = md(&a2);
    let moved = md2.contains(&format!("leader {victim_id},"));
    assert!(md2.contains(" 1 brokers:") && !moved, "{md2}");
    drop(survivor);
}

/// Three bookie processes and brokers 1 and 2 on etcd under a fresh root named after
/// `test`: leases of 3 s, topics of 4 partitions. Dropped, every process is killed.
struct TwoBrokers {
    root: String,
    b1: Proc,
    a1: String,
    b2: Proc,
    a2: String,
    _bookies: Vec<Proc>,
    _dir: tempfile::TempDir,
}

fn two_brokers(test: &str) -> TwoBrokers {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("{test}-{:x}", rand::random::<u64>());
    let dir = tempfile::tempdir().unwrap();
    let bookies: Vec<Proc> = (0..3)
        .map(|i| start_bookie(dir.path(), &format!("bookie-{i}"), &etcd, &root, &[]))
        .collect();
    let lease = ["--broker-lease-ms", "3000", "--num-partitions", "4"];
    let (b1, a1) = start_broker_with(&etcd, &root, 1, &lease);
    let (b2, a2) = start_broker_with(&etcd, &root, 2, &lease);
    TwoBrokers { root, b1, a1, b2, a2, _bookies: bookies, _dir: dir }
}

/// `clients.py produce_spread` on `topic` (4 partitions): an idempotent acks=all producer
/// of numbered records until killed, and its acknowledgements `(partition, value)`.
fn spread_producer(
    bootstrap: &str,
    topic: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<(i32, u64)>) {
    let mut producer = Command::new("python3")
        .arg(python_script())
        .args(["produce_spread", bootstrap, topic, "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 with confluent-kafka");
    let stdout = producer.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut w = line.split_whitespace();
            if w.next() == Some("acked")
                && let (Some(p), Some(v)) = (w.next(), w.next())
                && tx.send((p.parse::<i32>().unwrap(), v.parse::<u64>().unwrap())).is_err()
            {
                break;
            }
        }
    });
    (producer, rx)
}

/// Reads every partition of `topic` (4, filled by [`spread_producer`]) through `addr`:
/// each partition in order, no value twice, every acknowledged value there.
fn every_acked_stored_once(addr: &str, topic: &str, acked: &[(i32, u64)]) {
    use std::collections::{BTreeMap, HashSet};
    let out =
        Command::new("python3").arg(python_script()).args(["dump_all", addr, topic, "4"]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "dump_all: {}", String::from_utf8_lossy(&out.stderr));
    let mut stored: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (p, v) = line.split_once(' ').unwrap();
        if v != "end" {
            stored.entry(p.parse().unwrap()).or_default().push(v.parse().unwrap());
        }
    }
    let mut all = HashSet::new();
    for (p, values) in &stored {
        assert!(values.windows(2).all(|w| w[0] < w[1]), "partition {p}: out of order or repeated");
        for v in values {
            assert!(all.insert(*v), "value {v} stored twice");
            assert_eq!(*v as i32 % 4, *p, "value {v} in partition {p}");
        }
    }
    let lost: Vec<_> = acked.iter().filter(|(_, v)| !all.contains(v)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
}

/// #46: a broker process stopped (SIGSTOP) past its lease while it leads partitions and a
/// producer writes to them; the other broker takes them over; then it is continued
/// (SIGCONT), its beliefs stale the moment it runs (the race a partition or a kill cannot
/// make). It stops serving what it no longer owns, rejoins, the producer carries on through
/// both brokers, and nothing acknowledged is lost or stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_broker_process_paused_past_its_lease_rejoins_and_nothing_acknowledged_is_lost() {
    let TwoBrokers { b1, a1, b2, a2, _bookies, _dir, .. } = two_brokers("pause-test");
    let md = |addr: &str| kcat(&["-L", "-b", addr], None);
    let both_live = || md(&a1).contains(" 2 brokers:") && md(&a2).contains(" 2 brokers:");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !both_live() {
        assert!(std::time::Instant::now() < deadline, "the brokers never saw each other");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut producer, rx) = spread_producer(&format!("{a1},{a2}"), "paused");
    let next = |why: &str| {
        rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{why}: {e}"))
    };
    let mut acked = Vec::new();
    while acked.len() < 2000 {
        acked.push(next("the producer stalled before the pause"));
    }
    let leaders = md(&a1);
    let (victim, other) = match leaders.contains("partition 0, leader 1,") {
        true => ((&b1, 1), &a2),
        false => ((&b2, 2), &a1),
    };
    let pid = victim.0.0.id().to_string();
    let signal = |sig: &str| {
        let st = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(st.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    // Its lease expires: the other broker sees it gone and leads every partition.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let m = md(other);
        if m.contains(" 1 brokers:") && !m.contains(&format!("leader {},", victim.1)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "broker {} never left: {m}", victim.1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paused_at = acked.len();
    while acked.len() < paused_at + 1000 {
        acked.push(next("the producer did not carry on while a broker was paused"));
    }
    signal("-CONT");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !both_live() {
        assert!(std::time::Instant::now() < deadline, "the paused broker never rejoined");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resumed_at = acked.len();
    while acked.len() < resumed_at + 2000
        || (0..4).any(|p| !acked[resumed_at..].iter().any(|(q, _)| *q == p))
    {
        acked.push(next("the producer did not carry on after the broker rejoined"));
    }
    let _ = producer.kill();
    let _ = producer.wait();
    while let Ok(a) = rx.try_recv() {
        acked.push(a);
    }
    every_acked_stored_once(other, "paused", &acked);
}

/// Runs `clients.py compacted <addr> <args>`; its output, or a panic with it.
fn compacted(addr: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(python_script())
        .args(["compacted", addr])
        .args(args)
        .output()
        .expect("python3 with confluent-kafka and kafka-python");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "compacted {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// #25 item 3 where users run it: a compacted topic on three `folio bookie` processes and
/// `folio broker` processes on etcd. Broker 1 is SIGKILLed while a compaction's output is
/// written but not swapped in; broker 2 takes the partition over (its output goes to the
/// trash), reads find the newest value of every key with both clients, broker 2 compacts,
/// the reads stay right, and `folio audit` finds no orphan metadata (L1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_d1_a_compacted_topic_on_etcd_survives_a_broker_killed_mid_compaction() {
    const PASSES: &str = "folio_kafka_compaction_passes_total";
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("compact-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let _bookies: Vec<Proc> = (0..3)
        .map(|i| start_bookie(tmp.path(), &format!("bookie-{i}"), &etcd, &root, &[]))
        .collect();
    let flags = [
        "--broker-lease-ms",
        "2000",
        "--ledger-rollover-entries",
        "2",
        "--compaction-check-ms",
        "100",
    ];
    let paused = [&flags[..], &["--compaction-pause-before-swap"]].concat();
    let (b1, addr, http) = common::start_broker_http(&etcd, &root, 1, &paused);
    compacted(&addr, &["kv", "produce", "0", "6"]);
    common::wait_metric_above(&http, "folio_kafka_compaction_paused_total", 0);
    drop(b1); // SIGKILL between the output and its swap
    let (_b2, addr, http) = common::start_broker_http(&etcd, &root, 2, &flags);
    for _ in 0..200 {
        if kcat(&["-L", "-b", &addr, "-t", "kv"], None).contains("leader 2,") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    print!("{}", compacted(&addr, &["kv", "check", "0", "6"]));
    common::wait_metric_above(&http, PASSES, 0);
    let out = compacted(&addr, &["kv", "check", "0", "6"]);
    print!("{out}");
    let read: u64 = out.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap();
    assert!(read < 240, "compaction removed superseded records: {out}");
    let audit = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["audit", "--metadata", &format!("etcd://{etcd}"), "--root", &root, "--json"])
        .output()
        .expect("folio audit");
    let json = String::from_utf8_lossy(&audit.stdout);
    assert!(json.contains("\"orphan-metadata\":{\"ledgers\":0"), "{json}");
    assert!(json.contains("\"stray-log\":{\"ledgers\":0"), "{json}");
}

/// #25 item 5 where users run it: a client quota set through one `folio broker` process on
/// etcd reaches another broker process through its watch of the metadata store: a producer
/// over the rate there gets `throttle_time_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_quota_set_on_one_broker_process_throttles_on_another() {
    use folio_testkit::kafka::KafkaConn;
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("quota-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let _bookie = start_bookie(tmp.path(), "bookie-0", &etcd, &root, &[]);
    let (_b1, a1) = start_broker_with(&etcd, &root, 1, &[]);
    let (_b2, a2) = start_broker_with(&etcd, &root, 2, &[]);
    // Broker 2 serves the raw client (client id "folio") unthrottled.
    let mut c2 = KafkaConn::connect(a2.parse().unwrap()).await.unwrap();
    let batch = bytes::Bytes::from(folio_broker::batch::build(64, 1, 0, |_| vec![b'q'; 1024]));
    let produce = folio_testkit::kafka::produce_request("quota", 0, batch, -1);
    let r: ProduceResponse = c2.call(ApiKey::Produce, 9, &produce).await.unwrap();
    assert_eq!(r.throttle_time_ms, 0);
    // A 1 KiB/s producer quota for it, set through broker 1.
    let s = |v: &str| StrBytes::from_string(v.into());
    let entry = EntryData::default()
        .with_entity(vec![
            EntityData::default()
                .with_entity_type(s("client-id"))
                .with_entity_name(Some(s("folio"))),
        ])
        .with_ops(vec![OpData::default().with_key(s("producer_byte_rate")).with_value(1024.0)]);
    let mut c1 = KafkaConn::connect(a1.parse().unwrap()).await.unwrap();
    let alter = AlterClientQuotasRequest::default().with_entries(vec![entry]);
    let r: AlterClientQuotasResponse = c1.call(ApiKey::AlterClientQuotas, 1, &alter).await.unwrap();
    assert_eq!(r.entries[0].error_code, 0);
    // Broker 2 learns it from its watch and throttles the next produce over the rate.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r: ProduceResponse = c2.call(ApiKey::Produce, 9, &produce).await.unwrap();
        if r.throttle_time_ms > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "broker 2 never applied the quota");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs one scenario of `tests/kafka/transactions.py` against `bootstrap`; panics with its
/// output on failure.
fn txn_py(bootstrap: &str, args: &[&str]) -> String {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/transactions.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(args[0])
        .arg(bootstrap)
        .args(&args[1..])
        .output()
        .expect("python3 (with confluent-kafka: scripts/test.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `folio transactions …` on the cluster under `root`: its output, or a panic with it.
fn folio_txns(root: &str, args: &[&str]) -> String {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS").expect("FOLIO_ETCD_ENDPOINTS");
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--log", "error", "transactions", "--metadata", &format!("etcd://{etcd}")])
        .args(["--root", root])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// #49 item 5: consume-transform-produce with a transaction open when its coordinator (and
/// the owner of its partitions) is SIGKILLed: the surviving broker takes the transactional
/// id over from the metadata store, fences and aborts the open transaction when the
/// producer comes back, and the output holds every input record exactly once for
/// read_committed, with the group's offset at the input's end. Then a transaction left
/// hanging (a 10-minute timeout) is listed by `folio transactions list --open-for-s` and
/// aborted by `folio transactions abort`, after which read_committed consumers read what
/// was committed behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_survive_their_coordinator_sigkilled_and_the_cli_aborts_a_hanging_one() {
    use folio_broker::cluster::{owner_among, txn_key};
    let TwoBrokers { root, b1, b2: _b2, a2, _bookies, _dir, .. } = two_brokers("txn-move");
    // A group whose transactional id broker 1 coordinates while both brokers live.
    let group = (0..)
        .map(|i| format!("move-{i}"))
        .find(|g| owner_among(&txn_key(&format!("tx-{g}")), &[1, 2]) == Some(1))
        .unwrap();
    print!("{}", txn_py(&a2, &["ctp_begin", "move-in", "move-out", &group]));
    let listed = folio_txns(&root, &["list", "--open-for-s", "0"]);
    assert!(listed.contains(&format!("tx-{group}")) && listed.contains("Ongoing"), "{listed}");
    drop(b1); // SIGKILL the coordinator
    print!("{}", txn_py(&a2, &["ctp_finish", "move-in", "move-out", &group]));

    print!("{}", txn_py(&a2, &["hang", "hang-topic"]));
    let listed = folio_txns(&root, &["list", "--open-for-s", "0"]);
    assert!(listed.contains("tx-hang-topic"), "{listed}");
    assert!(!listed.contains(&format!("tx-{group}")), "ended transactions are not open: {listed}");
    print!("{}", folio_txns(&root, &["abort", "tx-hang-topic"]));
    print!("{}", txn_py(&a2, &["committed_after", "hang-topic"]));
    let listed = folio_txns(&root, &["list"]);
    assert!(listed.contains("CompleteAbort"), "{listed}");
}

/// An HTTP request with a JSON body to `addr`: (status line, body).
fn http_json(addr: &str, method: &str, path: &str, body: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// #51 item 3 where users rely on it: two broker processes on etcd serve one schema
/// registry. A schema registered through one is read through the other, which also refuses
/// a breaking one, and everything stays after the first broker is SIGKILLed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_broker_processes_on_etcd_serve_one_schema_registry() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS").expect("FOLIO_ETCD_ENDPOINTS");
    let root = format!("registry-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let _bookie = start_bookie(tmp.path(), "bookie-0", &etcd, &root, &[]);
    let (b1, _, http1) = common::start_broker_http(&etcd, &root, 1, &[]);
    let (_b2, _, http2) = common::start_broker_http(&etcd, &root, 2, &[]);
    let (status, body) =
        http_json(&http1, "POST", "/subjects/s-value/versions", r#"{"schema":"\"string\""}"#);
    assert!(status.contains("200"), "{status} {body}");
    let id = body.trim_start_matches("{\"id\":").trim_end_matches('}').to_string();
    let (status, body) = http_json(&http2, "GET", &format!("/schemas/ids/{id}"), "");
    assert!(status.contains("200") && body.contains("string"), "{status} {body}");
    let (status, body) =
        http_json(&http2, "POST", "/subjects/s-value/versions", r#"{"schema":"\"int\""}"#);
    assert!(status.contains("409") && body.contains("\"error_code\":409"), "{status} {body}");
    drop(b1); // SIGKILL
    let (_, body) = http_json(&http2, "GET", "/subjects/s-value/versions", "");
    assert_eq!(body, "[1]");
}
