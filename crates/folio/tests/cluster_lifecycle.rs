//! L1 and D1 as a service (issue #19): three `folio bookie` processes and two `folio
//! broker` processes on etcd. 50 topics are created and written by a real client
//! (confluent-kafka, acks=all), then deleted through broker 1, the controller, which is
//! SIGKILLed right after answering. Broker 2 takes the controller over (and with it the
//! trash deleter); broker 1 restarts. Broker 2 never re-reads topics: its cache still shows
//! every deleted topic, and it is asked to produce to all of them after the deletion:
//! nothing may be acknowledged and no storage may come back. After the faults: every
//! deletion finished, the trash is empty, the bookies' ledger dirs are back within 10 % of
//! their size before the writes, and `folio audit` finds no orphan.
#![cfg(feature = "etcd")]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use folio_meta::keys::Keys;
use folio_meta::{MetadataStore, list_all};
use folio_testkit::disk::{JournalFiles, dir_bytes};
use folio_testkit::poll::until;

const TOPICS: usize = 50;
const RECORDS_PER_TOPIC: usize = 400; // 1 KiB each: ~20 MiB per copy
const GC_INTERVAL: Duration = Duration::from_secs(2);

use common::{Proc, start_bookie, start_broker_with};

fn folio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_folio"))
}

/// Fast GC, flushes and idle rotation, small entry logs: the test sees the disk come back.
const BOOKIE_TUNING: [&str; 5] = [
    "gc.interval_ms=2000",
    "flush_interval_ms=200",
    "entry_log.idle_rotation_ms=500",
    "entry_log_bytes_max=4194304",
    "journal.file_bytes_max=4194304",
];
const _: () = assert!(GC_INTERVAL.as_millis() == 2000);

/// A broker with no auto-creation, a 2 s lease and a fast trash deleter.
fn start_broker(etcd: &str, root: &str, node_id: u16, extra: &[&str]) -> (Proc, String) {
    let mut args =
        vec!["--no-auto-create-topics", "--broker-lease-ms", "2000", "--trash-interval-ms", "500"];
    args.extend_from_slice(extra);
    start_broker_with(etcd, root, node_id, &args)
}

/// Runs a clients.py scenario to its end; its stdout.
fn clients(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/clients.py");
    let out = Command::new("python3").arg(script).args(args).output().expect("python3");
    assert!(
        out.status.success(),
        "clients.py {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Whether nothing is stored under `prefix`.
async fn none_under(meta: Arc<dyn MetadataStore>, prefix: String) -> bool {
    list_all(meta.as_ref(), &prefix).await.unwrap().is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_d1_topics_deleted_in_a_cluster_under_faults_leave_nothing_and_lose_nothing() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("lifecycle-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> =
        Arc::new(folio_meta::etcd::EtcdStore::connect(std::slice::from_ref(&etcd)).await.unwrap());
    let keys = Keys::new(root.clone());
    let _bookies: Vec<Proc> = (0..3)
        .map(|i| start_bookie(tmp.path(), &format!("bookie-{i}"), &etcd, &root, &BOOKIE_TUNING))
        .collect();
    // The ledger dirs: entry logs and index. The data lives in the entry logs and, in
    // single-write mode (the default), in the journal's files; in two-write mode the journal
    // is a ring of recycled files, bounded by journal.file_bytes_max and the recycle pool,
    // not by the data kept (reported, not compared).
    let single_write =
        folio_bookie::StorageMode::default() == folio_bookie::StorageMode::SingleWrite;
    let dirs: Vec<_> =
        (0..3).map(|i| tmp.path().join(format!("bookie-{i}")).join("ledgers")).collect();
    let journal_dirs: Vec<_> =
        (0..3).map(|i| tmp.path().join(format!("bookie-{i}")).join("journal")).collect();
    let journal_files =
        |which: JournalFiles| journal_dirs.iter().map(|d| which.bytes(d)).sum::<u64>();
    let journals = || journal_files(JournalFiles::All);
    let size = || dirs.iter().map(|d| dir_bytes(d)).sum::<u64>();
    let data_files = |journal: JournalFiles| {
        let logs = dirs.iter().map(|d| dir_bytes(&d.join("entrylogs"))).sum::<u64>();
        logs + if single_write { journal_files(journal) } else { 0 }
    };
    let entry_logs = || data_files(JournalFiles::All);
    let before = size();
    let (b1, a1) = start_broker(&etcd, &root, 1, &[]);
    // Broker 2 re-reads topics once an hour: its cache outlives every deletion below.
    let (_b2, a2) = start_broker(&etcd, &root, 2, &["--topic-refresh-ms", "3600000"]);
    let brokers = |n: usize| {
        let (meta, keys) = (meta.clone(), keys.clone());
        async move { list_all(meta.as_ref(), &keys.brokers()).await.unwrap().len() == n }
    };
    until(Duration::from_secs(60), "both brokers registered", || brokers(2)).await;

    // 50 topics written by a real client, through both brokers.
    let out = clients(&[
        "lifecycle_create_produce",
        &format!("{a1},{a2}"),
        "doomed",
        &TOPICS.to_string(),
        &RECORDS_PER_TOPIC.to_string(),
    ]);
    assert_eq!(out.trim(), format!("acked {}", TOPICS * RECORDS_PER_TOPIC));
    let written_logs = {
        let start = Instant::now();
        while entry_logs() < (3 * TOPICS * RECORDS_PER_TOPIC * 1024) as u64 * 8 / 10 {
            assert!(start.elapsed() < Duration::from_secs(60), "data never reached the data files");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        entry_logs()
    };
    let written = size();
    // One more record per topic through broker 2 alone: its cache now holds every topic.
    let warm = clients(&["lifecycle_produce_one", &a2, "doomed", &TOPICS.to_string()]);
    assert_eq!(warm.trim(), format!("acked {TOPICS} failed 0"));

    // Delete through broker 1 (the controller), which is SIGKILLed right after answering;
    // broker 2 takes the controller over (and the trash deleter); broker 1 comes back.
    let deleted_at = Instant::now();
    assert_eq!(
        clients(&["lifecycle_delete", &a1, "doomed", &TOPICS.to_string()]).trim(),
        "deleted"
    );
    drop(b1);
    let (_b1, _a1) = start_broker(&etcd, &root, 1, &[]);
    until(Duration::from_secs(120), "every topic deletion finished", || {
        none_under(meta.clone(), keys.topic_deletions())
    })
    .await;
    let logs_trashed = deleted_at.elapsed();
    until(Duration::from_secs(120), "the trash was emptied", || {
        none_under(meta.clone(), keys.trash())
    })
    .await;
    let ledgers_gone = deleted_at.elapsed();
    // Broker 2 still believes in every topic (it never re-reads them): producing to them
    // through it acknowledges nothing, and creates no storage.
    let late = clients(&["lifecycle_produce_one", &a2, "doomed", &TOPICS.to_string()]);
    assert_eq!(
        late.trim(),
        format!("acked 0 failed {TOPICS}"),
        "nothing acknowledged into deleted topics"
    );
    // No log of any deleted topic exists (nothing resurrected one).
    let logs = list_all(meta.as_ref(), &keys.logs()).await.unwrap();
    assert!(logs.is_empty(), "logs left: {:?}", logs.iter().map(|v| &v.key).collect::<Vec<_>>());
    // The bookies give the disk back: idle logs seal, the next GC passes delete them.
    // The journal's current file is left out: a recycled one keeps its full length whatever
    // it holds (that an idle one is sealed and collected: gc.rs `l1_an_idle_data_file…`).
    let back = || {
        let (logs_now, now) = (data_files(JournalFiles::Sealed), size());
        async move { now as f64 <= before as f64 * 1.1 && logs_now as f64 <= written_logs as f64 * 0.1 }
    };
    until(Duration::from_secs(120), "the bookies' ledger dirs came back", back).await;
    let disk_back = deleted_at.elapsed();
    // A file ends at the first group past journal.file_bytes_max (groups: 512 KiB at most).
    let file_max = 4_194_304 + 524_288;
    let recycled = journal_files(JournalFiles::Recycled);
    assert!(recycled <= 3 * 2 * file_max, "the recycle pools hold {recycled} bytes");
    let current = journal_files(JournalFiles::Current);
    assert!(current <= 3 * file_max, "the current journal files hold {current} bytes");
    eprintln!(
        "cluster lifecycle: ledger dirs {before} bytes before, {written} written ({written_logs} in data files), {} now \
         (journals {} bytes, recycled {recycled}); after DeleteTopics answered: logs trashed {:.1} s, ledgers gone {:.1} s, disk back {:.1} s \
         ({:.1} GC intervals after the ledgers were gone)",
        size(),
        journals(),
        logs_trashed.as_secs_f64(),
        ledgers_gone.as_secs_f64(),
        disk_back.as_secs_f64(),
        (disk_back - ledgers_gone).as_secs_f64() / GC_INTERVAL.as_secs_f64()
    );
    // And the audit accounts for everything: no orphan of any age.
    let audit = folio()
        .args(["audit", "--metadata", &format!("etcd://{etcd}"), "--root", &root, "--grace-s", "0"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&audit.stdout);
    assert!(audit.status.success(), "{table}{}", String::from_utf8_lossy(&audit.stderr));
    assert!(table.contains("orphan-metadata         0"), "{table}");
    assert!(table.contains("bookies: 3 listed"), "{table}");
}
