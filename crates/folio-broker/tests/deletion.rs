//! Topic deletion end to end (issue #11): an owner that died is fenced, not waited for
//! (L3); a bookie down during deletion is retried and still gives its disk back (L1);
//! deleting 1 000 topics does not queue topic creation (L4); deleting every topic gives
//! the bookies' data dirs back (L1); a deleted topic is gone at once for produce and
//! fetch, and a new controller finishes a deletion the dead one started (L3).

// Kafka's wire format is big-endian (the shared test helpers build batches).
#![allow(clippy::big_endian_bytes)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use folio_broker::BrokerConfig;
use folio_broker::errors;
use folio_log::records::TrashRecord;
use folio_log::{LogEnv, WallClock};
use folio_meta::keys::Keys;
use folio_meta::records::{LedgerState, Record};
use folio_meta::{MetadataStore, list_all};
use folio_testkit::disk::{JournalFiles, dir_bytes};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn produce_req(topic: &str, partition: i32, records: Vec<u8>) -> ProduceRequest {
    folio_testkit::kafka::produce_request(topic, partition, records.into(), -1)
}

fn produced(r: &ProduceResponse) -> (i16, i64) {
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

use folio_testkit::kafka::{
    create_topics_request as create_req, delete_topics_request as delete_req,
};

/// Broker `id`'s config: lease `lease_ttl`, brokers listed every 50 ms, no auto-creation.
fn node(id: i32, lease_ttl: Duration) -> impl Fn(&mut BrokerConfig) {
    move |c: &mut BrokerConfig| {
        c.node_id = id;
        c.lease_ttl = lease_ttl;
        c.membership_poll = Duration::from_millis(50);
        c.auto_create_topics = false;
    }
}

/// Waits until each broker sees all of them live.
async fn all_live(brokers: &[&folio_broker::Broker]) {
    eventually(Duration::from_secs(30), "every broker sees all of them live", || {
        brokers.iter().all(|b| b.live_brokers().len() == brokers.len())
    })
    .await;
}

/// Creates topic `t` with `partitions` through `conn` and writes a batch to each partition
/// `owner` serves (opening them there); returns the topic id and those partitions.
async fn written_through(
    conn: &mut Conn,
    owner: &folio_broker::Broker,
    partitions: i32,
) -> (uuid::Uuid, Vec<i32>) {
    let r: CreateTopicsResponse =
        conn.call(ApiKey::CreateTopics, 7, &create_req(&["t".into()], partitions)).await;
    assert_eq!(r.topics[0].error_code, 0);
    let id = r.topics[0].topic_id;
    let owned: Vec<i32> = (0..partitions).filter(|p| owner.owns_partition(id, *p)).collect();
    assert!(!owned.is_empty(), "the broker owns some of {partitions} partitions");
    let mut c = Conn::open(owner.addr()).await;
    for p in &owned {
        let r: ProduceResponse =
            c.call(ApiKey::Produce, 9, &produce_req("t", *p, batch(3, 1))).await;
        assert_eq!(produced(&r), (0, 0), "partition {p}");
    }
    (id, owned)
}

fn env_of(meta: &Arc<dyn MetadataStore>) -> LogEnv {
    LogEnv {
        meta: meta.clone(),
        client: folio_client::LedgerClient::new(meta.clone(), Keys::default())
            .with_request_timeout(Duration::from_secs(2)),
        keys: Keys::default(),
        clock: Arc::new(WallClock),
        owner: "test".into(),
    }
}

/// Waits (polling the metadata store) until no deletion marker is left.
async fn markers_gone(meta: &Arc<dyn MetadataStore>, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = list_all(meta.as_ref(), &Keys::default().topic_deletions()).await.unwrap();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{} deletion markers still there", left.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Trash records of the logs of topic `id`.
async fn trashed_ledgers(meta: &Arc<dyn MetadataStore>, id: uuid::Uuid) -> Vec<TrashRecord> {
    let keys = Keys::default();
    let prefix = format!("kafka-{}-", id.simple());
    list_all(meta.as_ref(), &keys.trash())
        .await
        .unwrap()
        .iter()
        .map(|v| TrashRecord::decode(&v.key, &v.value).unwrap())
        .filter(|t| t.log.starts_with(&prefix))
        .collect()
}

/// The broker owning some partitions of a topic crashes (its lease far from expiring);
/// the topic is deleted through the controller, which fences the dead owner's ledgers
/// itself: the deletion finishes while the dead broker is still counted live, every
/// ledger it wrote is closed (fenced) before it went to the trash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_a_dead_owner_is_fenced_by_the_controller_not_waited_for() {
    let tune = |id| node(id, Duration::from_secs(300));
    let s = start(3, tune(1)).await;
    let b2 = broker_on(&s.cluster, tune(2)).await;
    all_live(&[&s.broker, &b2]).await;
    let mut c1 = Conn::open(s.broker.addr()).await;
    let (id, on_b2) = written_through(&mut c1, &b2, 16).await;
    // Broker 2 crashes with its partitions open; the controller (broker 1) deletes.
    b2.abort();
    let r: DeleteTopicsResponse =
        c1.call(ApiKey::DeleteTopics, 6, &delete_req(&["t".into()])).await;
    assert_eq!(r.responses[0].error_code, 0);
    markers_gone(&s.cluster.meta, Duration::from_secs(60)).await;
    assert_eq!(
        s.broker.live_brokers(),
        vec![1, 2],
        "finished while broker 2's lease still holds: nothing waited for the dead owner"
    );
    let env = env_of(&s.cluster.meta);
    let trashed = trashed_ledgers(&s.cluster.meta, id).await;
    let written: Vec<&TrashRecord> = trashed
        .iter()
        .filter(|t| on_b2.iter().any(|p| t.log.ends_with(&format!("-{p}"))))
        .collect();
    assert!(written.len() >= on_b2.len(), "broker 2's ledgers are in the trash: {trashed:?}");
    for t in written {
        let m = env.client.metadata(t.ledger_id).await.unwrap();
        assert_eq!(m.state, LedgerState::Closed, "ledger {} of {} was fenced", t.ledger_id, t.log);
    }
    let d = s.broker.deletions().await.unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].marker, d[0].partitions_left()), (false, 0), "{d:?}");
}

/// The only bookie is down when the controller starts deleting a topic whose owner
/// crashed with its ledgers open: fencing cannot reach the bookie, so the pass fails and
/// is retried (the marker stays, the partitions `pending`) until the bookie is back. Later
/// the trash deleter removes the ledgers while the bookie is down again (it needs only the
/// metadata store), and the bookie's GC gives the space back when it returns (L1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_down_during_deletion_is_retried_and_its_disk_comes_back() {
    let tune = |id| node(id, Duration::from_secs(300));
    let mut s = start(1, tune(1)).await;
    let b2 = broker_on(&s.cluster, tune(2)).await;
    all_live(&[&s.broker, &b2]).await;
    let meta = s.cluster.meta.clone();
    let mut c = Conn::open(s.broker.addr()).await;
    let (id, _) = written_through(&mut c, &b2, 16).await;
    b2.abort();
    s.cluster.nodes[0].kill().await;
    let r: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 6, &delete_req(&["t".into()])).await;
    assert_eq!(r.responses[0].error_code, 0, "unbinding needs only the metadata store");
    let failures = || s.broker.metrics().topic_deletion_failures.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while failures() < 2 {
        assert!(Instant::now() < deadline, "the controller never tried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = s.broker.deletions().await.unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].marker && d[0].partitions_left() >= 1, "still being deleted: {d:?}");
    assert!(
        d[0].partitions
            .iter()
            .any(|(_, st)| *st == folio_broker::deletion::PartitionDeletion::Pending),
        "{d:?}"
    );
    s.cluster.nodes[0].restart(&meta).await;
    markers_gone(&meta, Duration::from_secs(60)).await;
    let trashed = trashed_ledgers(&meta, id).await;
    assert!(trashed.len() >= 2, "both partitions' ledgers in the trash: {trashed:?}");
    // The trash deleter runs with the bookie down again: it deletes ledger metadata only.
    s.cluster.nodes[0].kill().await;
    let env = env_of(&meta);
    let trash = folio_log::Trash::new(env.clone(), folio_log::TrashConfig::default());
    let pass = trash.run_once().await.unwrap();
    assert_eq!(pass.deleted, trashed.len() as u64, "{pass:?}");
    assert!(trashed_ledgers(&meta, id).await.is_empty());
    assert!(s.broker.deletions().await.unwrap().is_empty(), "no deletion left in progress");
    // Back up, the bookie finds the ledgers gone and drops them.
    s.cluster.nodes[0].restart(&meta).await;
    let r = s.cluster.nodes[0].bookie().gc_now().await.unwrap();
    for t in &trashed {
        assert!(r.ledgers_dropped.contains(&t.ledger_id), "ledger {} dropped: {r:?}", t.ledger_id);
    }
}

/// L4: one DeleteTopics request for 1 000 topics (each with a partition log on the
/// bookies) while another client keeps creating topics one by one. Creations keep
/// completing while the controller is still deleting (they are not queued behind it),
/// and every topic of the request is deleted. The latency ratio against idle creation is
/// printed here and measured by `folio bench delete`, not asserted (timings never gate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l4_deleting_1000_topics_does_not_queue_topic_creation() {
    const TOPICS: usize = 1000;
    let s = start(1, |c| c.auto_create_topics = false).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let old: Vec<String> = (0..TOPICS).map(|i| format!("old-{i}")).collect();
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &create_req(&old, 1)).await;
    assert!(r.topics.iter().all(|t| t.error_code == 0));
    // One batch each (pipelined): every topic has a log and a ledger to delete.
    for name in &old {
        c.send(ApiKey::Produce, 9, &produce_req(name, 0, batch(2, 1))).await;
    }
    for name in &old {
        let (_, r): (i32, ProduceResponse) = c.recv(ApiKey::Produce, 9).await;
        assert_eq!(produced(&r), (0, 0), "{name}");
    }
    let addr = s.broker.addr();
    let create_one = move |name: String| async move {
        let mut c = Conn::open(addr).await;
        let started = Instant::now();
        let r: CreateTopicsResponse =
            c.call(ApiKey::CreateTopics, 7, &create_req(&[name], 1)).await;
        assert_eq!(r.topics[0].error_code, 0);
        started.elapsed()
    };
    let mut idle = Vec::new();
    for i in 0..50 {
        idle.push(create_one(format!("idle-{i}")).await);
    }
    let deleted = || s.broker.metrics().topics_deleted.load(Ordering::Relaxed);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = {
        let (stop, broker) = (stop.clone(), s.broker.clone());
        tokio::spawn(async move {
            let mut during = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let took = create_one(format!("new-{i}")).await;
                let done = broker.metrics().topics_deleted.load(Ordering::Relaxed);
                during.push((took, done));
                i += 1;
            }
            during
        })
    };
    let mut d = Conn::open(s.broker.addr()).await;
    let r: DeleteTopicsResponse = d.call(ApiKey::DeleteTopics, 6, &delete_req(&old)).await;
    assert_eq!(r.responses.len(), TOPICS);
    assert!(r.responses.iter().all(|t| t.error_code == 0));
    let deadline = Instant::now() + Duration::from_secs(300);
    while deleted() < TOPICS as u64 {
        assert!(Instant::now() < deadline, "only {} of {TOPICS} topics deleted", deleted());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let during = creator.await.unwrap();
    markers_gone(&s.cluster.meta, Duration::from_secs(10)).await;
    let while_deleting: Vec<Duration> =
        during.iter().filter(|(_, done)| *done < TOPICS as u64).map(|(t, _)| *t).collect();
    assert!(
        while_deleting.len() >= 5,
        "only {} creations completed while 1 000 topics were being deleted",
        while_deleting.len()
    );
    let p99 = |mut v: Vec<Duration>| {
        v.sort();
        v[(v.len() * 99 / 100).min(v.len() - 1)]
    };
    eprintln!(
        "creations while deleting: {}, p99 {:?} (idle p99 {:?}), ratio {:.2}",
        while_deleting.len(),
        p99(while_deleting.clone()),
        p99(idle.clone()),
        p99(while_deleting).as_secs_f64() / p99(idle).as_secs_f64()
    );
    // Every new topic exists; no old one does.
    let topics = list_all(s.cluster.meta.as_ref(), &Keys::default().topics()).await.unwrap();
    assert_eq!(topics.len(), 50 + during.len());
    assert!(topics.iter().all(|v| !v.key.contains("/old-")));
}

/// L1 end to end: 3 bookies; topics written (~24 MiB per bookie), then every topic
/// deleted: after the controller, the trash deleter and the bookies' GC, the bookies'
/// ledger data dirs are back within 10 % of their size before the topics were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_deleting_every_topic_gives_the_bookies_data_dirs_back() {
    let cluster = folio_testkit::Cluster::start_with(3, |c| {
        c.storage.entry_log_bytes_max = 4 * 1024 * 1024;
        c.storage.journal.file_bytes_max = 4 * 1024 * 1024;
        c.storage.flush_interval = Duration::from_millis(100);
        c.storage.entry_log_idle_rotation = Duration::from_millis(200);
        c.gc.interval = Duration::from_secs(3600);
    })
    .await;
    let broker = broker_on(&cluster, |c| c.auto_create_topics = false).await;
    let dirs: Vec<std::path::PathBuf> =
        cluster.nodes.iter().map(|n| n.config.storage.ledger_dir.clone()).collect();
    let size = || dirs.iter().map(|d| dir_bytes(d)).sum::<u64>();
    let before = size();
    let mut c = Conn::open(broker.addr()).await;
    let names: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &create_req(&names, 2)).await;
    assert!(r.topics.iter().all(|t| t.error_code == 0));
    let big = batch_sized(8, 8 * 1024); // 64 KiB
    for round in 0..48 {
        for n in &names {
            for p in 0..2 {
                let r: ProduceResponse =
                    c.call(ApiKey::Produce, 9, &produce_req(n, p, big.clone())).await;
                assert_eq!(produced(&r), (0, round * 8));
            }
        }
    }
    // The data dirs hold a fixed part (the index's preallocated 64 MiB journal) that
    // dwarfs 10 %: the data files are checked on their own too (entry logs, and in
    // single-write mode the journal's files).
    // Of the journal's files, the recycle pool and the file being written are bounded on
    // their own (`folio_testkit::disk`): data kept is what sits before the current file.
    let journals: Vec<std::path::PathBuf> = cluster
        .nodes
        .iter()
        .filter(|n| n.config.storage.mode.name() == "single-write")
        .map(|n| n.config.storage.journal_dir.clone())
        .collect();
    let journal_files = |which: JournalFiles| journals.iter().map(|d| which.bytes(d)).sum::<u64>();
    let data_files = |which: JournalFiles| {
        let logs = dirs.iter().map(|d| dir_bytes(&d.join("entrylogs"))).sum::<u64>();
        logs + journal_files(which)
    };
    let entry_logs = || data_files(JournalFiles::All);
    // Written and flushed to the data files (the flush runs every 100 ms).
    let deadline = Instant::now() + Duration::from_secs(30);
    while entry_logs() < 3 * 20 * 1024 * 1024 {
        let at = entry_logs();
        assert!(Instant::now() < deadline, "data never reached the data files: {at} bytes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let written = size();
    let logs_written = entry_logs();
    let r: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 6, &delete_req(&names)).await;
    assert!(r.responses.iter().all(|t| t.error_code == 0));
    markers_gone(&cluster.meta, Duration::from_secs(60)).await;
    let trash = folio_log::Trash::new(env_of(&cluster.meta), folio_log::TrashConfig::default());
    let pass = trash.run_once().await.unwrap();
    assert!(pass.deleted >= 8 && pass.failed == 0, "{pass:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for n in &cluster.nodes {
            n.bookie().gc_now().await.unwrap();
        }
        let (now, logs_now) = (size(), data_files(JournalFiles::Sealed));
        if now as f64 <= before as f64 * 1.1 && logs_now as f64 <= logs_written as f64 * 0.1 {
            eprintln!(
                "data dirs: {before} bytes before, {written} written, {now} after deletion; data files {logs_written} -> {logs_now}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "data dirs not back: {before} bytes before, {written} written, {now} now; data files {logs_written} -> {logs_now}"
        );
        // The active entry logs seal once idle (200 ms); GC then deletes them.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A file ends at the first group past journal.file_bytes_max (groups: 512 KiB at most).
    let file_max = 4 * 1024 * 1024 + 512 * 1024;
    let (recycled, current) =
        (journal_files(JournalFiles::Recycled), journal_files(JournalFiles::Current));
    assert!(recycled <= 3 * 2 * file_max, "the recycle pools hold {recycled} bytes");
    assert!(current <= 3 * file_max, "the current journal files hold {current} bytes");
    assert!(broker.deletions().await.unwrap().is_empty());
}

/// The controller dies in the middle of a deletion pass (some partitions already in the
/// trash, others not): the next controller resumes from the marker and finishes; nothing
/// is done twice or left behind. Fencing the dead owner's ledgers goes through a slowed
/// bookie link, so the pass is caught in the middle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l3_a_controller_killed_mid_pass_is_finished_by_the_next() {
    use folio_broker::deletion::PartitionDeletion;
    let tune = |id| node(id, Duration::from_secs(1));
    let s = start(1, tune(1)).await;
    let b2 = broker_on(&s.cluster, tune(2)).await;
    let b3 = broker_on(&s.cluster, tune(3)).await;
    all_live(&[&s.broker, &b2, &b3]).await;
    let mut c2 = Conn::open(b2.addr()).await;
    let (id, on_b3) = written_through(&mut c2, &b3, 48).await;
    assert!(on_b3.len() >= 4, "broker 3 owns several of 48 partitions: {on_b3:?}");
    // Broker 3 dies with its ledgers open; fencing each now takes several slowed trips.
    b3.abort();
    s.cluster.nodes[0].link.set_fault(folio_testkit::Fault::Delay(Duration::from_millis(100)));
    let r: DeleteTopicsResponse =
        c2.call(ApiKey::DeleteTopics, 6, &delete_req(&["t".into()])).await;
    assert_eq!(r.responses[0].error_code, 0);
    // Kill the controller (broker 1) once some, not all, of broker 3's partitions are in
    // the trash.
    let deadline = Instant::now() + Duration::from_secs(60);
    let at_kill = loop {
        let d = b2.deletions().await.unwrap();
        let states: Vec<PartitionDeletion> = d
            .iter()
            .flat_map(|d| d.partitions.iter())
            .filter(|(p, _)| on_b3.contains(p))
            .map(|(_, st)| *st)
            .collect();
        let done = states.iter().filter(|st| **st != PartitionDeletion::Pending).count();
        if done >= 1 {
            s.broker.abort();
            break (done, states.len());
        }
        assert!(Instant::now() < deadline, "the controller made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    s.cluster.nodes[0].link.set_fault(folio_testkit::Fault::Pass);
    assert!(at_kill.0 < at_kill.1, "killed mid-pass: {} of {} done", at_kill.0, at_kill.1);
    markers_gone(&s.cluster.meta, Duration::from_secs(60)).await;
    let keys = Keys::default();
    for p in 0..48 {
        let log = keys.log(&format!("kafka-{}-{p}", id.simple()));
        assert!(s.cluster.meta.get(&log).await.unwrap().is_none(), "partition {p}'s log is gone");
    }
    assert_eq!(b2.live_brokers(), vec![2], "broker 2 took over as controller");
    // (The count goes up just after the marker is removed.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while b2.metrics().topics_deleted.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "broker 2 did not finish it");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b2.metrics().topics_deleted.load(Ordering::Relaxed), 1);
    assert_eq!(s.broker.metrics().topics_deleted.load(Ordering::Relaxed), 0);
    let trashed = trashed_ledgers(&s.cluster.meta, id).await;
    let mut ids: Vec<u64> = trashed.iter().map(|t| t.ledger_id).collect();
    ids.dedup();
    assert_eq!(ids.len(), trashed.len(), "each ledger trashed once");
    assert!(trashed.len() >= on_b3.len(), "every written partition's ledgers: {trashed:?}");
}

/// L1 in a cluster: exactly one broker runs the trash deleter, the controller; when the
/// controller dies, the next one takes the deleter over and empties the trash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_the_trash_deleter_runs_on_the_controller_and_moves_with_it() {
    let with_deleter = |id| {
        move |c: &mut BrokerConfig| {
            node(id, Duration::from_secs(1))(c);
            c.trash = Some(folio_log::TrashConfig {
                interval: Duration::from_millis(100),
                ..folio_log::TrashConfig::default()
            });
        }
    };
    let s = start(1, with_deleter(1)).await;
    let b2 = broker_on(&s.cluster, with_deleter(2)).await;
    all_live(&[&s.broker, &b2]).await;
    eventually(Duration::from_secs(30), "broker 1 (the controller) runs the deleter", || {
        s.broker.trash_deleter_active()
    })
    .await;
    assert_eq!((s.broker.controller(), b2.controller()), (1, 1));
    assert!(!b2.trash_deleter_active(), "only the controller deletes");
    // The controller dies; a log is deleted meanwhile, so its ledgers wait in the trash.
    s.broker.abort();
    assert!(!s.broker.trash_deleter_active(), "a stopped broker deletes nothing");
    let env = env_of(&s.cluster.meta);
    let log = folio_log::ManagedLog::open_or_create(
        env.clone(),
        "x",
        folio_log::LogConfig::for_bookies(1),
    )
    .await
    .unwrap();
    log.append(b"one", 1, 0).await.unwrap();
    log.close().await.unwrap();
    folio_log::trash::delete_log(&env, "x", "test").await.unwrap();
    assert!(!list_all(s.cluster.meta.as_ref(), &Keys::default().trash()).await.unwrap().is_empty());
    eventually(Duration::from_secs(30), "broker 2 took the deleter over", || {
        b2.trash_deleter_active()
    })
    .await;
    assert_eq!(b2.controller(), 2);
    // The deleter counts a pass's deletions when the pass ends, after the records are gone:
    // wait for the count (the later event), then look at the trash.
    eventually(Duration::from_secs(30), "broker 2's deleter deleted the trashed ledgers", || {
        b2.trash().stats().deleted.load(Ordering::Relaxed) >= 1
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !list_all(s.cluster.meta.as_ref(), &Keys::default().trash()).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "broker 2's deleter emptied the trash");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        list_all(s.cluster.meta.as_ref(), &Keys::default().ledgers()).await.unwrap().len(),
        0,
        "every ledger of the deleted log is gone"
    );
}

/// L1: a broker whose topic cache still shows a deleted topic never writes committed
/// offsets for it again (the commit compares the topic's record in its transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_offsets_are_never_committed_for_a_topic_deleted_behind_the_cache() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::protocol::StrBytes;
    let s = start(1, |c| {
        c.auto_create_topics = false;
        c.topic_refresh = Duration::from_secs(3600);
    })
    .await;
    let mut c = Conn::open(s.broker.addr()).await;
    let r: CreateTopicsResponse =
        c.call(ApiKey::CreateTopics, 7, &create_req(&["gone".into()], 1)).await;
    assert_eq!(r.topics[0].error_code, 0);
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("gone")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(5),
                ]),
        ]);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "committed while the topic exists");
    let groups = Keys::default().groups();
    assert_eq!(list_all(s.cluster.meta.as_ref(), &groups).await.unwrap().len(), 1);
    // Deleted behind this broker's back (another broker's DeleteTopics, then the
    // controller dropping the topic's offsets); the cache here still shows the topic.
    s.cluster.meta.delete(&Keys::default().topic("gone"), folio_meta::Expect::Any).await.unwrap();
    for v in list_all(s.cluster.meta.as_ref(), &groups).await.unwrap() {
        s.cluster.meta.delete(&v.key, folio_meta::Expect::Any).await.unwrap();
    }
    assert!(s.broker.topic_id("gone").await.is_some(), "the cache still has it");
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit).await;
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        folio_broker::errors::UNKNOWN_TOPIC_OR_PARTITION
    );
    assert!(
        list_all(s.cluster.meta.as_ref(), &groups).await.unwrap().is_empty(),
        "no offsets re-created under the deleted topic's id"
    );
}

/// Topic deletion (L3): DeleteTopics frees the name at once; produce and fetch by name get
/// UNKNOWN_TOPIC_OR_PARTITION and by the old id UNKNOWN_TOPIC_ID; a topic recreated under
/// the name has a new id and is empty; the controller moves the old partitions' ledgers to
/// the trash and drops the marker and the topic's committed offsets.
#[tokio::test]
async fn a_deleted_topic_is_gone_at_once_and_a_recreated_one_is_empty() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let s = start(1, |c| c.auto_create_topics = false).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let create = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("doomed")))
            .with_num_partitions(2)
            .with_replication_factor(-1),
    ]);
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &create).await;
    assert_eq!(r.topics[0].error_code, 0);
    let old_id = r.topics[0].topic_id;
    for p in 0..2 {
        let r: ProduceResponse =
            c.call(ApiKey::Produce, 9, &produce_req("doomed", p, batch(5, 1))).await;
        assert_eq!(produced(&r), (0, 0));
    }
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("doomed")))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(3),
                ]),
        ]);
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    // Unknown names and ids, and both at once, are refused; the real one is deleted.
    let del = DeleteTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
        DeleteTopicState::default().with_name(Some(TopicName(StrBytes::from_static_str("doomed")))),
        DeleteTopicState::default().with_name(Some(TopicName(StrBytes::from_static_str("never")))),
        DeleteTopicState::default().with_name(None).with_topic_id(uuid::Uuid::from_u128(7)),
        DeleteTopicState::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("x"))))
            .with_topic_id(uuid::Uuid::from_u128(7)),
    ]);
    let r: DeleteTopicsResponse = c.call(ApiKey::DeleteTopics, 6, &del).await;
    let codes: Vec<i16> = r.responses.iter().map(|r| r.error_code).collect();
    assert_eq!(
        codes,
        vec![
            0,
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            errors::UNKNOWN_TOPIC_ID,
            errors::INVALID_REQUEST
        ]
    );
    assert_eq!(r.responses[0].topic_id, old_id);
    // Gone at once, by name and by id.
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("doomed", 0, batch(1, 1))).await;
    assert_eq!(produced(&r).0, errors::UNKNOWN_TOPIC_OR_PARTITION);
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 12, &fetch_req("doomed", uuid::Uuid::nil(), 0)).await;
    assert_eq!(r.responses[0].partitions[0].error_code, errors::UNKNOWN_TOPIC_OR_PARTITION);
    let r: FetchResponse = c.call(ApiKey::Fetch, 16, &fetch_req("", old_id, 0)).await;
    assert_eq!(r.responses[0].partitions[0].error_code, errors::UNKNOWN_TOPIC_ID);
    let r: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["doomed"])).await;
    assert_eq!(
        r.topics[0].error_code,
        errors::UNKNOWN_TOPIC_OR_PARTITION,
        "no auto-create brought it back"
    );
    // Recreated under the same name: a new id, empty.
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &create).await;
    assert_eq!(r.topics[0].error_code, 0);
    assert_ne!(r.topics[0].topic_id, old_id);
    let r: FetchResponse =
        c.call(ApiKey::Fetch, 12, &fetch_req("doomed", uuid::Uuid::nil(), 0)).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 0), "the recreated topic is empty");
    // The controller finishes: markers gone, old logs gone (their ledgers in the trash),
    // committed offsets of the old topic gone.
    let meta = s.cluster.meta.clone();
    let keys = folio_meta::keys::Keys::default();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let markers = folio_meta::list_all(meta.as_ref(), "folio/topic-deletions/").await.unwrap();
        let logs_left = old_logs_left(&meta, &keys, old_id).await;
        let counted = s.broker.render_metrics().contains("folio_kafka_topics_deleted_total 1");
        if markers.is_empty() && logs_left == 0 && counted {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "deletion did not finish: {} markers, {logs_left} logs",
            markers.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let trash = folio_meta::list_all(meta.as_ref(), &keys.trash()).await.unwrap();
    assert!(trash.len() >= 2, "each deleted partition's ledgers are in the trash: {}", trash.len());
    let offsets = folio_meta::list_all(meta.as_ref(), "folio/groups/").await.unwrap();
    assert!(offsets.is_empty(), "the deleted topic's committed offsets are gone: {offsets:?}");
}

/// Logs of topic `id` still in the metadata store.
async fn old_logs_left(
    meta: &std::sync::Arc<dyn folio_meta::MetadataStore>,
    keys: &folio_meta::keys::Keys,
    id: uuid::Uuid,
) -> usize {
    let mut n = 0;
    for p in 0..2 {
        if meta.get(&keys.log(&format!("kafka-{}-{p}", id.simple()))).await.unwrap().is_some() {
            n += 1;
        }
    }
    n
}

/// A deletion committed while the controller is dead (its lease not yet expired) is
/// finished by the next controller from the marker (every partition's log gone, marker
/// gone); with deletion disabled, DeleteTopics is refused with TOPIC_DELETION_DISABLED.
#[tokio::test]
async fn a_new_controller_finishes_a_deletion_the_dead_one_started() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    let tune = |id: i32, enable: bool| {
        move |c: &mut folio_broker::BrokerConfig| {
            c.node_id = id;
            c.lease_ttl = std::time::Duration::from_secs(1);
            c.membership_poll = std::time::Duration::from_millis(50);
            c.delete_topic_enable = enable;
        }
    };
    let s = start(1, tune(1, true)).await;
    let b2 = broker_on(&s.cluster, tune(2, true)).await;
    let b3 = broker_on(&s.cluster, tune(3, false)).await;
    all_live(&[&s.broker, &b2, &b3]).await;
    let mut c1 = Conn::open(s.broker.addr()).await;
    let create = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("big")))
            .with_num_partitions(12)
            .with_replication_factor(-1),
    ]);
    let r: CreateTopicsResponse = c1.call(ApiKey::CreateTopics, 7, &create).await;
    let id = r.topics[0].topic_id;
    // Write to the partitions broker 1 owns (the others answer NOT_LEADER_OR_FOLLOWER).
    // (Broker 1 opens them, so deleting them later must fence its ledgers.)
    for p in 0..12 {
        let _: ProduceResponse =
            c1.call(ApiKey::Produce, 9, &produce_req("big", p, batch(2, 1))).await;
    }
    let del = |v: i16| {
        let mut r = DeleteTopicsRequest::default().with_timeout_ms(5000);
        if v >= 6 {
            r.topics = vec![
                kafka_protocol::messages::delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("big")))),
            ];
        } else {
            r.topic_names = vec![TopicName(StrBytes::from_static_str("big"))];
        }
        r
    };
    let mut c3 = Conn::open(b3.addr()).await;
    let r: DeleteTopicsResponse = c3.call(ApiKey::DeleteTopics, 4, &del(4)).await;
    assert_eq!(
        r.responses[0].error_code,
        errors::TOPIC_DELETION_DISABLED,
        "broker 3 has deletion off"
    );
    let r: DeleteTopicsResponse = c3.call(ApiKey::DeleteTopics, 2, &del(2)).await;
    assert_eq!(r.responses[0].error_code, errors::INVALID_REQUEST, "before v3: INVALID_REQUEST");
    // Broker 1, the controller (lowest id), dies; the delete commits through broker 2
    // before broker 1's lease expires, so only the next controller can do the work.
    s.broker.abort();
    let mut c2 = Conn::open(b2.addr()).await;
    let r: DeleteTopicsResponse = c2.call(ApiKey::DeleteTopics, 6, &del(6)).await;
    assert_eq!(r.responses[0].error_code, 0);
    let meta = s.cluster.meta.clone();
    let keys = folio_meta::keys::Keys::default();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let markers = folio_meta::list_all(meta.as_ref(), "folio/topic-deletions/").await.unwrap();
        let mut logs = 0;
        for p in 0..12 {
            if meta.get(&keys.log(&format!("kafka-{}-{p}", id.simple()))).await.unwrap().is_some() {
                logs += 1;
            }
        }
        // (The count goes up just after the marker is removed.)
        let counted = b2.render_metrics().contains("folio_kafka_topics_deleted_total 1");
        if markers.is_empty() && logs == 0 && counted {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new controller did not finish: {} markers, {logs} logs, counted by broker 2: {counted}",
            markers.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(b2.live_brokers(), vec![2, 3]);
}
