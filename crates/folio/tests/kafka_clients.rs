//! Real Kafka clients against `folio standalone`: kcat (librdkafka 2.0.2 from Debian) and,
//! from pip, confluent-kafka (librdkafka 2.16), kafka-python and aiokafka. Each test
//! starts its own standalone process on free ports; the Python scenarios are in
//! `tests/kafka/clients.py` and assert what they read back.
//!
//! The clients are installed by `scripts/test.sh`; a missing client fails the test with
//! what to install (it is never skipped silently).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A `folio standalone` process, killed when dropped.
struct Standalone {
    child: Child,
    kafka: String,
}

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Standalone {
    fn start(dir: &Path, bookies: u16) -> Standalone {
        Standalone::start_with(dir, bookies, &[])
    }

    fn start_with(dir: &Path, bookies: u16, extra: &[&str]) -> Standalone {
        let mut child = Standalone::spawn(dir, bookies, extra);
        let kafka = common::kafka_addr(&mut child);
        Standalone { child, kafka }
    }

    /// `start_with` one bookie, also returning the HTTP (metrics) address.
    fn start_with_http(dir: &Path, extra: &[&str]) -> (Standalone, String) {
        let mut child = Standalone::spawn(dir, 1, extra);
        let (kafka, http) = common::standalone_addrs(&mut child);
        (Standalone { child, kafka }, http)
    }

    fn spawn(dir: &Path, bookies: u16, extra: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_folio"))
            .args(["standalone", "--data-dir"])
            .arg(dir)
            .args(["--bookies", &bookies.to_string()])
            .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(["--kafka-listen", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn folio standalone")
    }

    fn kill(mut self) {
        // SIGKILL: no clean shutdown, no flush.
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/clients.py")
}

fn python() -> Command {
    let ok = Command::new("python3")
        .args(["-c", "import confluent_kafka, kafka, aiokafka, lz4.frame, snappy, zstandard"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Kafka client tests need python3 with confluent-kafka, kafka-python, aiokafka and kafka-python's codecs (pip install confluent-kafka kafka-python aiokafka lz4 python-snappy zstandard; scripts/test.sh does this)"
    );
    Command::new("python3")
}

/// Runs one scenario of clients.py against `kafka`; panics with its output on failure.
fn scenario(kafka: &str, name: &str, args: &[&str]) -> String {
    scenario_of(&script(), kafka, name, args)
}

/// Runs one scenario of transactions.py against `kafka` (as `scenario`).
fn txn_scenario(kafka: &str, name: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/transactions.py");
    scenario_of(&script, kafka, name, args)
}

fn scenario_of(script: &Path, kafka: &str, name: &str, args: &[&str]) -> String {
    let out = python().arg(script).arg(name).arg(kafka).args(args).output().expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "scenario {name} failed:\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn run_scenario(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 1);
    let out = scenario(&s.kafka, name, &[]);
    print!("{out}");
}

/// #22: confluent-kafka assigned at every offset gets that record first — the start,
/// inside a batch, every ledger boundary (ledgers of 8 KiB: about 3 batches each), the open
/// ledger — before and after a SIGKILL and restart (a new owner whose offset index knows
/// nothing yet), and after DeleteRecords moved the start inside a batch.
#[test]
fn reads_from_every_position_get_their_record_across_ledgers_restart_and_trim() {
    let dir = tempfile::tempdir().unwrap();
    let small_ledgers = ["--ledger-rollover-bytes", "8192"];
    let s = Standalone::start_with(dir.path(), 1, &small_ledgers);
    scenario(&s.kafka, "read_positions", &["positions", "produce"]);
    scenario(&s.kafka, "read_positions", &["positions", "check"]);
    s.kill();
    let s = Standalone::start_with(dir.path(), 1, &small_ledgers);
    print!("{}", scenario(&s.kafka, "read_positions", &["positions", "check"]));
    print!("{}", scenario(&s.kafka, "read_positions", &["positions", "trim"]));
}

/// #25 item 3: a compacted topic read by confluent-kafka and kafka-python after several
/// compactions, after a SIGKILL while a compaction's output was written but not swapped
/// in (the next owner trashes that output), and after the compaction that follows. Each
/// read finds the newest value of every key (tombstones included) across the gaps.
#[test]
fn compacted_topic_read_by_both_clients_across_compactions_and_a_kill_mid_swap() {
    const PASSES: &str = "folio_kafka_compaction_passes_total";
    let dir = tempfile::tempdir().unwrap();
    let topic = format!("compacted-{}", std::process::id());
    let flags = ["--ledger-rollover-entries", "2", "--compaction-check-ms", "100"];
    let (s, http) = Standalone::start_with_http(dir.path(), &flags);
    scenario(&s.kafka, "compacted", &[&topic, "produce", "0", "4"]);
    let passes = common::wait_metric_above(&http, PASSES, 0);
    print!("{}", scenario(&s.kafka, "compacted", &[&topic, "check", "0", "4"]));
    scenario(&s.kafka, "compacted", &[&topic, "produce", "4", "8"]);
    common::wait_metric_above(&http, PASSES, passes);
    print!("{}", scenario(&s.kafka, "compacted", &[&topic, "check", "0", "8"]));
    s.kill();

    // A compaction whose output is written when the broker is killed, before its swap.
    let paused = [&flags[..], &["--compaction-pause-before-swap"]].concat();
    let (s, http) = Standalone::start_with_http(dir.path(), &paused);
    scenario(&s.kafka, "compacted", &[&topic, "produce", "8", "10"]);
    common::wait_metric_above(&http, "folio_kafka_compaction_paused_total", 0);
    s.kill();

    let (s, http) = Standalone::start_with_http(dir.path(), &flags);
    print!("{}", scenario(&s.kafka, "compacted", &[&topic, "check", "0", "10"]));
    common::wait_metric_above(&http, PASSES, 0);
    let out = scenario(&s.kafka, "compacted", &[&topic, "check", "0", "10"]);
    print!("{out}");
    let read: u64 = out.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap();
    assert!(read < 400, "compaction removed superseded records: {out}");
}

#[test]
fn confluent_kafka_acks_0_1_all_with_every_codec() {
    run_scenario("confluent_codecs");
}

#[test]
fn batches_near_and_above_max_message_bytes() {
    run_scenario("large_batches");
}

#[test]
fn list_offsets_by_time_earliest_and_latest() {
    run_scenario("offsets_by_time");
}

#[test]
fn delete_records_moves_the_log_start_offset() {
    run_scenario("delete_records");
}

#[test]
fn create_partitions_and_create_topics_errors() {
    run_scenario("create_partitions");
}

#[test]
fn configs_round_trip_with_validation() {
    run_scenario("configs");
}

/// A group of two confluent-kafka consumers, one joining and one leaving: every record is
/// read and no record whose commit succeeded is read again; committed offsets, describe and
/// delete of the group.
#[test]
fn consumer_group_rebalances_read_every_record_once_after_commits() {
    run_scenario("group_rebalance");
}

/// #25, KIP-227: kafka-python consuming 500 partitions in an incremental fetch session.
#[test]
fn a_consumer_of_500_partitions_fetches_in_an_incremental_session() {
    run_scenario("fetch_sessions");
}

/// #25: client quotas set through the Kafka API (AlterClientQuotas) throttle a librdkafka
/// producer and consumer above them; each sees it in its own throttle reports.
#[test]
fn client_quotas_throttle_a_producer_and_a_consumer() {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey};
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 1);
    let str = |v: &str| StrBytes::from_string(v.into());
    let ops = ["producer_byte_rate", "consumer_byte_rate"]
        .map(|k| OpData::default().with_key(str(k)).with_value(100_000.0));
    let entity = EntityData::default()
        .with_entity_type(str("client-id"))
        .with_entity_name(Some(str("slow")));
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default().with_entity(vec![entity]).with_ops(ops.to_vec())]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r: AlterClientQuotasResponse = rt.block_on(async {
        let addr = s.kafka.parse().unwrap();
        let mut c = folio_testkit::kafka::KafkaConn::connect(addr).await.unwrap();
        c.call(ApiKey::AlterClientQuotas, 1, &req).await.unwrap()
    });
    assert_eq!(r.entries[0].error_code, 0, "{:?}", r.entries[0].error_message);
    print!("{}", scenario(&s.kafka, "quota_throttle", &[]));
}

/// #25: committed() right after an asynchronous commit reads that commit, every time.
#[test]
fn committed_right_after_an_asynchronous_commit_reads_it() {
    run_scenario("commit_then_committed");
}

/// #25, KIP-345: a static member comes back to its partitions without a rebalance of the
/// others; a second process with its instance id fences it.
#[test]
fn static_members_come_back_without_a_rebalance_and_duplicates_are_fenced() {
    run_scenario("static_membership");
}

/// #25: the cooperative-sticky assignor rebalances incrementally: a member gives up only the
/// partitions the newcomer gets.
#[test]
fn cooperative_sticky_rebalances_move_only_the_partitions_that_change_hands() {
    run_scenario("cooperative_sticky");
}

/// Runs one scenario of groups.py against `kafka` (as `scenario`).
fn groups_scenario(kafka: &str, name: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/groups.py");
    scenario_of(&script, kafka, name, args)
}

/// #50, KIP-848: four confluent-kafka consumers with `group.protocol=consumer` share 8
/// partitions; one leaves, one is SIGKILLed and fenced after its session; their partitions
/// move to the other two without a partition of theirs ever revoked; every record is read
/// once (each batch committed before it is counted).
#[test]
fn consumer_protocol_members_leave_and_die_and_every_record_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let session = "6000";
    let extra = [
        "--group-consumer-session-timeout-ms",
        session,
        "--group-consumer-heartbeat-interval-ms",
        "1000",
    ];
    let s = Standalone::start_with(dir.path(), 1, &extra);
    print!("{}", groups_scenario(&s.kafka, "consumer_protocol", &[session]));
}

/// #50: a classic group's members read half a topic and leave; the same group id goes on
/// with `group.protocol=consumer` from the offsets they committed (an empty classic group
/// becomes a consumer group): every record read once.
#[test]
fn a_classic_group_goes_on_under_the_consumer_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let s =
        Standalone::start_with(dir.path(), 1, &["--group-consumer-heartbeat-interval-ms", "1000"]);
    print!("{}", groups_scenario(&s.kafka, "upgrade_from_classic", &[]));
}

/// #50, KIP-848's online upgrade and downgrade: consumer-protocol members join a running
/// classic group (upgraded; the classic members keep their protocol and give up half),
/// then leave (downgraded; the classic members take everything back): every record read
/// once.
#[test]
fn a_running_classic_group_is_upgraded_and_downgraded_online() {
    let dir = tempfile::tempdir().unwrap();
    let s =
        Standalone::start_with(dir.path(), 1, &["--group-consumer-heartbeat-interval-ms", "1000"]);
    print!("{}", groups_scenario(&s.kafka, "online_upgrade", &[]));
}

/// #50, KIP-932: three confluent-kafka share consumers acknowledging explicitly; one is
/// SIGKILLed holding a batch (the others paused, so that it gets one): its records come back
/// to the others, delivery count 2 or more, once their lock times out; every record
/// acknowledged once.
#[test]
fn share_group_members_ack_and_a_killed_members_records_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let lock = "5000";
    let extra = [
        "--group-share-record-lock-duration-ms",
        lock,
        "--group-share-session-timeout-ms",
        "6000",
        "--group-share-heartbeat-interval-ms",
        "1000",
        "--share-auto-offset-reset",
        "earliest",
    ];
    let s = Standalone::start_with(dir.path(), 1, &extra);
    print!("{}", groups_scenario(&s.kafka, "share_group", &[lock]));
}

/// Idempotent producers (kafka-python's default; librdkafka with enable.idempotence)
/// through a proxy that drops every 7th Produce answer after the broker carried it out:
/// the retries are recognised, every record is stored once, in order.
#[test]
fn idempotent_producers_retrying_dropped_answers_store_each_record_once() {
    let dir = tempfile::tempdir().unwrap();
    // The proxy's port: the broker advertises it, so every client goes through the proxy.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let advertise = format!("127.0.0.1:{port}");
    let s = Standalone::start_with(dir.path(), 1, &["--advertise", &advertise]);
    print!("{}", scenario(&s.kafka, "idempotent_retries", &[&port]));
}

/// L3 with real clients: a topic deleted while a librdkafka producer and consumer use it;
/// they see errors, neither hangs, and the topic recreated under the name is empty.
#[test]
fn l3_a_topic_deleted_under_produce_and_fetch_comes_back_empty() {
    run_scenario("delete_under_load");
}

#[test]
fn kafka_python_produces_and_consumes() {
    run_scenario("kafka_python");
}

#[test]
fn aiokafka_produces_and_consumes() {
    run_scenario("aiokafka");
}

fn kcat() -> Command {
    assert!(
        Command::new("kcat").arg("-V").output().is_ok_and(|o| o.status.success()),
        "the kcat test needs kcat (apt-get install kcat; scripts/test.sh does this)"
    );
    Command::new("kcat")
}

#[test]
fn kcat_produces_and_consumes_with_every_codec() {
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 1);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("kcat-{codec}");
        let lines: Vec<String> = (0..100).map(|i| format!("{codec}-line-{i}")).collect();
        let mut p = kcat()
            .args(["-P", "-b", &s.kafka, "-t", &topic, "-z", codec, "-X", "acks=all"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all((lines.join("\n") + "\n").as_bytes()).unwrap();
        assert!(p.wait().unwrap().success(), "kcat -P -z {codec} failed");
        let out = kcat()
            .args(["-C", "-b", &s.kafka, "-t", &topic, "-o", "beginning", "-e", "-f", "%o %s\n"])
            .output()
            .unwrap();
        assert!(out.status.success(), "kcat -C failed: {}", String::from_utf8_lossy(&out.stderr));
        let want: Vec<String> = lines.iter().enumerate().map(|(i, l)| format!("{i} {l}")).collect();
        let got: Vec<String> =
            String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        assert_eq!(got, want, "kcat read back codec {codec}");
    }
    // Metadata (-L) and offset queries (-Q: ListOffsets by time) work too.
    let out = kcat().args(["-L", "-b", &s.kafka, "-t", "kcat-zstd"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("topic \"kcat-zstd\" with 1 partitions"), "{text}");
    let out = kcat().args(["-Q", "-b", &s.kafka, "-t", "kcat-zstd:0:-1"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("offset 100"), "kcat -Q latest: {text}");
}

/// D1 through the Kafka API: every record a producer saw acknowledged (acks=all) is there
/// after `folio standalone` is SIGKILLed mid-stream and restarted.
#[test]
fn d1_every_acknowledged_record_survives_a_standalone_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 3);
    let topic = "restart";
    let mut producer = python()
        .arg(script())
        .args(["produce_stream", &s.kafka, topic])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = producer.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("acked ").and_then(|n| n.parse::<u64>().ok())
                && tx.send(n).is_err()
            {
                break;
            }
        }
    });
    let mut acked = Vec::new();
    while acked.len() < 2000 {
        acked.push(rx.recv_timeout(Duration::from_secs(60)).expect("the producer stalled"));
    }
    s.kill();
    // Acknowledgements already on their way count too.
    while let Ok(n) = rx.recv_timeout(Duration::from_millis(500)) {
        acked.push(n);
    }
    let _ = producer.kill();
    let _ = producer.wait();
    let s = Standalone::start(dir.path(), 3);
    let out = scenario(&s.kafka, "dump", &[topic]);
    let stored: std::collections::HashSet<u64> =
        out.lines().filter_map(|l| l.parse().ok()).collect();
    let lost: Vec<u64> = acked.iter().copied().filter(|n| !stored.contains(n)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    // And the log is appendable again after recovery.
    scenario(&s.kafka, "produce_count", &["after-restart", "10"]);
}

/// `folio topics list|describe|create|delete` on a stopped standalone's metadata: the
/// topics, their ids and partitions, what each partition's log holds; a topic deleted with
/// no broker running waits `pending` until a standalone (the controller) finishes it, as
/// `GET /admin/deletions` shows.
#[test]
fn folio_topics_lists_and_describes_topics() {
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 1);
    let mut p =
        kcat().args(["-P", "-b", &s.kafka, "-t", "listed"]).stdin(Stdio::piped()).spawn().unwrap();
    p.stdin.take().unwrap().write_all(b"one\ntwo\n").unwrap();
    assert!(p.wait().unwrap().success());
    s.kill();
    let metadata = format!("embedded:{}", dir.path().join("metadata").display());
    let folio = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_folio"))
            .args(["topics", "--metadata", &metadata])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "folio topics {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let list = folio(&["list"]);
    assert!(list.lines().any(|l| l.starts_with("listed ")), "{list}");
    assert!(list.contains("no deletions in progress"), "{list}");
    let describe = folio(&["describe", "listed"]);
    assert!(describe.contains("partitions 1"), "{describe}");
    assert!(describe.contains("partition 0: log kafka-"), "{describe}");
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["topics", "--metadata", &metadata, "describe", "nope"])
        .output()
        .unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no topic nope")
    );
    // Create and delete through the metadata store; both refuse bad input with a reason.
    let created = folio(&["create", "made", "--partitions", "2", "--config", "retention.ms=60000"]);
    assert!(
        created.contains("created topic made") && created.contains("partitions 2"),
        "{created}"
    );
    for (args, why) in [
        (&["create", "made"][..], "already exists"),
        (&["create", "bad/name"][..], "name"),
        (&["create", "x", "--replication", "2"][..], "--replication must be 1..=1"),
        (&["create", "x", "--config", "retention.ms=soon"][..], "retention.ms"),
        (&["delete", "listed", "nope"][..], "no topic nope"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_folio"))
            .args(["topics", "--metadata", &metadata])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{args:?}: {err}");
    }
    let deleted = folio(&["delete", "listed"]);
    assert!(deleted.contains("deleted topic listed"), "{deleted}");
    let list = folio(&["list"]);
    assert!(!list.lines().any(|l| l.starts_with("listed ")), "{list}");
    assert!(list.lines().any(|l| l.starts_with("made ")), "{list}");
    assert!(
        list.contains("deleting listed") && list.contains("0:pending"),
        "no broker ran yet, so the partition waits: {list}"
    );
    // `delete --wait` with no broker running (no controller deletes the data): it shows
    // the data left and fails with what to check.
    folio(&["create", "waited"]);
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["topics", "--metadata", &metadata, "delete", "waited", "--wait", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is a broker running"), "{err}");
    assert!(err.contains("deleting the topics' data: still deleting"), "{err}");
    // A standalone (the controller) finishes the deletion; its HTTP endpoint shows each
    // step until the topic's ledgers are deleted by the trash deleter.
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["standalone", "--data-dir"])
        .arg(dir.path())
        .args(["--bookies", "1", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--kafka-listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (kafka, http) = common::standalone_addrs(&mut child);
    let s = Standalone { child, kafka };
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let body = common::http_get(&http, "/admin/deletions");
        assert!(body.starts_with("{\"deletions\":["), "{body}");
        for state in ["pending", "moving-to-trash", "in-trash", "gone"] {
            if body.contains(&format!("\"state\":\"{state}\"")) {
                seen.insert(state);
            }
        }
        if !body.contains("\"topic_id\"") {
            break;
        }
        assert!(body.contains("\"partitions_left\":"), "{body}");
        assert!(std::time::Instant::now() < deadline, "deletion not finished: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let l = kcat().args(["-L", "-b", &s.kafka]).output().unwrap();
    let l = String::from_utf8_lossy(&l.stdout);
    assert!(l.contains("topic \"made\" with 2 partitions") && !l.contains("\"listed\""), "{l}");
    eprintln!("deletion states seen over HTTP: {seen:?}");
}

/// #49 item 5: confluent-kafka's transactional producer against one broker: commits are
/// read by read_committed consumers and aborts are not (read_uncommitted reads both, and
/// the markers take offsets); an open transaction holds read_committed back until it
/// commits; a second producer of the same transactional id fences the first, whose open
/// transaction is aborted and whose commit fails; a transaction whose producer went away
/// is aborted at its timeout, releasing what others committed after it.
#[test]
fn transactions_commit_abort_fence_and_time_out_with_confluent_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 1);
    for name in ["commit_and_abort", "open_transaction_holds_back", "zombie_fenced"] {
        print!("{}", txn_scenario(&s.kafka, name, &[]));
    }
    print!("{}", txn_scenario(&s.kafka, "hanging_timeout", &[]));
}

/// #49 items 3 and 5: consume-transform-produce with `send_offsets_to_transaction`, every
/// third transaction aborted, and across a SIGKILL of the broker with a transaction open
/// (its records durable, its offsets staged): after the restart the same transactional id
/// fences and aborts it, and the output holds every input record exactly once for
/// read_committed, with the group's committed offset at the input's end.
#[test]
fn consume_transform_produce_is_exactly_once_across_aborts_and_a_broker_kill() {
    let dir = tempfile::tempdir().unwrap();
    let s = Standalone::start(dir.path(), 1);
    print!("{}", txn_scenario(&s.kafka, "consume_transform_produce", &[]));
    let (src, dst, group) = ("kill-in", "kill-out", "kill-group");
    print!("{}", txn_scenario(&s.kafka, "ctp_begin", &[src, dst, group]));
    s.kill();
    let s = Standalone::start(dir.path(), 1);
    print!("{}", txn_scenario(&s.kafka, "ctp_finish", &[src, dst, group]));
}

/// #51 item 3: the schema registry on the HTTP port, driven by confluent-kafka's
/// SchemaRegistryClient with its Avro serializer (fastavro) producing and consuming; a
/// breaking schema refused under BACKWARD; JSON Schema and Protobuf checked; levels, modes,
/// lookup, deletion; and everything still there after a SIGKILL and a restart (the
/// registry lives in the metadata store).
#[test]
fn schema_registry_serves_confluent_avro_clients_and_refuses_a_breaking_schema() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/registry.py");
    let (s, http) = Standalone::start_with_http(dir.path(), &[]);
    let out = scenario_of(&script, &s.kafka, "avro", &[&format!("http://{http}")]);
    assert!(out.contains("OK avro"), "{out}");
    s.kill();
    let (s, http) = Standalone::start_with_http(dir.path(), &[]);
    let out = scenario_of(&script, &s.kafka, "after_restart", &[&format!("http://{http}")]);
    assert!(out.contains("OK after_restart"), "{out}");
}

/// The console's browser tests: `tests/kafka/console.py` in headless Chromium (Debian's
/// `chromium`, driven by Playwright; both installed by `scripts/test.sh`). Screenshots go
/// to `target/tmp/console-screenshots/`.
fn console_scenario(kafka: &str, http: &str, name: &str) -> String {
    let ok = Command::new("python3")
        .args(["-c", "import playwright.sync_api"])
        .status()
        .is_ok_and(|s| s.success());
    let chromium = std::env::var("FOLIO_CHROMIUM").unwrap_or("/usr/bin/chromium".into());
    assert!(
        ok && Path::new(&chromium).exists(),
        "the console tests need Chromium ({chromium}; apt install chromium) and Playwright \
         (pip install playwright); scripts/test.sh installs both"
    );
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots").join(name);
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/console.py");
    scenario_of(&script, kafka, name, &[http, shots.to_str().unwrap()])
}

/// #51 items 1 and 6: every console page loads in headless Chromium with no console error
/// and shows the names and numbers the cluster has (brokers, the bookie and its disk,
/// topics with their records, partitions with ledgers, a group's lag, a deletion on its way
/// out through the trash); a search finds a record by key; an offset reset (dry run, then
/// confirmed) moves the group to the start; the traffic chart updates while a producer
/// writes.
#[test]
fn console_pages_load_find_reset_and_chart_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    // The trash deleter passes rarely: the deleted topic stays visible on its way out.
    let (s, http) = Standalone::start_with_http(dir.path(), &["--trash-interval-ms", "600000"]);
    let out = console_scenario(&s.kafka, &http, "browse");
    assert!(out.contains("OK browse"), "{out}");
}

/// #51 item 2: with users and an authorizer, the console asks for a login, refuses a wrong
/// password, and shows a user only what its ACLs let a Kafka client see.
#[test]
fn the_console_asks_for_a_login_and_shows_what_the_users_acls_allow() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let meta = format!("embedded:{}", data.join("metadata").display());
    let folio = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_folio")).args(args).output().unwrap();
        assert!(out.status.success(), "folio {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    for user in ["admin", "alice"] {
        folio(&["users", "--metadata", &meta, "add", user, "--password", "pw"]);
    }
    let grant = ["--principal", "User:alice", "--resource-type", "Topic", "--name", "orders-"];
    let ops = ["--pattern", "Prefixed", "--operation", "Read"];
    folio(&[&["acls", "--metadata", &meta, "add"][..], &grant, &ops].concat());
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["standalone", "--data-dir"])
        .arg(&data)
        .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--listener", "SASL_PLAINTEXT://127.0.0.1:0"])
        .args(["--authorizer", "--super-user", "User:admin"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio standalone");
    let (kafka, http) = common::standalone_addrs(&mut child);
    let _child = common::Proc(child);
    let out = console_scenario(&kafka, &http, "login");
    assert!(out.contains("OK login"), "{out}");
}
