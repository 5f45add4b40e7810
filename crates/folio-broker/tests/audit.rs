//! `folio audit` (L1): every ledger and stored byte is put in one class, orphans of each
//! kind are found, and `repair` sends them through the trash until none is left.

// Kafka's wire format is big-endian (the shared test helpers build batches).
#![allow(clippy::big_endian_bytes)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use folio_broker::audit::{self, Class};
use folio_client::{CreateOptions, LedgerClient};
use folio_log::{LogEnv, ManagedLog, OWNER_TAG, WallClock};
use folio_meta::keys::Keys;
use folio_meta::{Expect, MetadataStore};
use kafka_protocol::messages::*;

fn env_of(meta: &Arc<dyn MetadataStore>) -> LogEnv {
    LogEnv {
        meta: meta.clone(),
        client: LedgerClient::new(meta.clone(), Keys::default())
            .with_request_timeout(Duration::from_secs(2)),
        keys: Keys::default(),
        clock: Arc::new(WallClock),
        owner: "audit-test".into(),
    }
}

fn classes(a: &audit::Audit) -> Vec<(Class, u64)> {
    let mut v: Vec<(Class, u64)> = a.findings.iter().map(|f| (f.class, f.ledger_id)).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_audit_finds_every_kind_of_orphan_and_repair_sends_them_through_the_trash() {
    let s = start(1, |_| {}).await;
    let env = env_of(&s.cluster.meta);
    // A live topic with data.
    let mut c = Conn::open(s.broker.addr()).await;
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            5,
            &folio_testkit::kafka::create_topics_request(&["t".to_string()], 1),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0);
    let r: ProduceResponse = c
        .call(
            ApiKey::Produce,
            8,
            &folio_testkit::kafka::produce_request("t", 0, batch(10, 1).into(), -1),
        )
        .await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    // Orphan metadata: a ledger tagged with the topic's log that its chain does not list.
    let id = s.broker.topic_id("t").await.unwrap();
    let log = folio_broker::topics::log_name(id, 0);
    let mut o = CreateOptions::new(1, 1, 1);
    o.custom.insert(OWNER_TAG.into(), Bytes::from(log.clone()));
    let orphan = env.client.create(o).await.unwrap();
    orphan.add(b"nobody's").await.unwrap();
    orphan.close().await.unwrap();
    // A stray log: a partition log of a topic id that exists nowhere.
    let stray_name = folio_broker::topics::log_name(uuid::Uuid::from_u128(7), 0);
    let stray =
        ManagedLog::open_or_create(env.clone(), &stray_name, folio_log::LogConfig::for_bookies(1))
            .await
            .unwrap();
    stray.append(b"stray", 1, 0).await.unwrap();
    stray.close().await.unwrap();
    let stray_ledgers: Vec<u64> = stray.info().ledgers.iter().map(|l| l.ledger_id).collect();
    // Orphan data: a ledger whose metadata was removed by hand (no GC pass since).
    let gone = env.client.create(CreateOptions::new(1, 1, 1)).await.unwrap();
    gone.add(b"left behind").await.unwrap();
    gone.close().await.unwrap();
    s.cluster.meta.delete(&Keys::default().ledger(gone.id()), Expect::Any).await.unwrap();
    for n in &s.cluster.nodes {
        n.bookie().storage().flush().unwrap();
    }
    // An orphan offset index: of a ledger no chain or trash record names.
    let index_key = Keys::default().offset_index(orphan.id());
    s.cluster.meta.put(&index_key, Bytes::from_static(b"FOI"), Expect::Any).await.unwrap();

    let a = audit::run(&env).await.unwrap();
    assert_eq!(a.orphan_offset_indexes, vec![orphan.id()], "{}", a.table());
    assert!(a.gauges().contains("folio_audit_orphan_offset_indexes 1"), "{}", a.gauges());
    assert!(a.json().contains(&format!("\"orphan_offset_indexes\":[{}]", orphan.id())));
    assert!(a.leaks_older_than(Duration::ZERO) > a.orphans_older_than(Duration::ZERO).len());
    let found = classes(&a);
    assert!(found.contains(&(Class::OrphanMetadata, orphan.id())), "{}", a.table());
    // Deleted from the metadata since the bookie's GC last listed it: awaiting GC, aged
    // from that listing (here the bookie's start), not a leak within the grace period.
    assert!(found.contains(&(Class::AwaitingGc, gone.id())), "{}", a.table());
    let waiting = a.findings.iter().find(|f| f.ledger_id == gone.id()).unwrap();
    assert!(waiting.age_ms.is_some_and(|ms| ms < 3_600_000), "{waiting:?}");
    assert!(
        !a.orphans_older_than(Duration::from_secs(3600)).iter().any(|f| f.ledger_id == gone.id()),
        "{}",
        a.table()
    );
    for l in &stray_ledgers {
        assert!(found.contains(&(Class::StrayLog, *l)), "{}", a.table());
    }
    assert_eq!(a.stray_logs, vec![stray_name.clone()]);
    assert!(a.totals[&Class::Live].0 >= 1, "the topic's ledger is live: {}", a.table());
    assert!(a.totals[&Class::Live].1 > 0, "and its bytes are counted: {}", a.table());
    assert_eq!(a.bookies_listed.len(), 1);
    assert!(a.json().contains("\"orphan-metadata\":{\"ledgers\":1"), "{}", a.json());
    assert!(
        a.gauges().contains("folio_audit_ledgers{class=\"orphan-metadata\"} 1"),
        "{}",
        a.gauges()
    );
    // A grace period covers what is young; zero grace counts everything.
    assert!(a.orphans_older_than(Duration::from_secs(3600)).iter().all(|f| f.age_ms.is_none()));
    assert!(a.orphans_older_than(Duration::ZERO).len() >= 3);

    let done = audit::repair(&env, &a, Duration::ZERO).await;
    assert!(done.iter().any(|l| l.contains("moved to the trash")), "{done:?}");
    assert!(done.iter().any(|l| l.contains("offset index of ledger")), "{done:?}");
    assert_eq!(s.cluster.meta.get(&index_key).await.unwrap(), None, "repair deleted it");
    let a = audit::run(&env).await.unwrap();
    assert!(classes(&a).contains(&(Class::Trashed, orphan.id())), "{}", a.table());
    // The deleter and the bookie's GC finish the job.
    let pass = folio_log::Trash::new(env.clone(), folio_log::TrashConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.failed, 0, "{pass:?}");
    for n in &s.cluster.nodes {
        n.bookie().gc_now().await.unwrap();
    }
    let a = audit::run(&env).await.unwrap();
    assert!(a.orphans_older_than(Duration::ZERO).is_empty(), "{}", a.table());
    assert!(a.findings.is_empty(), "{}", a.table());
    assert!(a.totals[&Class::Live].0 >= 1);
}

/// L1: a compaction's output, named by its log record until the swap, is live, not orphan
/// metadata that `repair` would send to the trash under the compactor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_a_compaction_output_being_written_is_live() {
    let s = start(1, |_| {}).await;
    let env = env_of(&s.cluster.meta);
    let config = folio_log::LogConfig {
        rollover_entries: 1,
        retention_time: None,
        ..folio_log::LogConfig::for_bookies(1)
    };
    let log = ManagedLog::open_or_create(env.clone(), "compacting", config).await.unwrap();
    for i in 0..3 {
        log.append(format!("b{i}").as_bytes(), 1, 0).await.unwrap();
    }
    let first: Vec<u64> = log.info().ledgers.iter().take(1).map(|l| l.ledger_id).collect();
    let mut comp = log.compaction_begin(&first).await.unwrap();
    comp.append(0, 1, 0, b"kept").await.unwrap();
    let a = audit::run(&env).await.unwrap();
    let output = comp.output_ledger();
    assert!(!classes(&a).contains(&(Class::OrphanMetadata, output)), "{}", a.table());
    assert!(a.findings.iter().all(|f| f.class != Class::OrphanMetadata), "{}", a.table());
    comp.finish().await.unwrap();
    let a = audit::run(&env).await.unwrap();
    assert!(a.findings.iter().all(|f| f.class != Class::OrphanMetadata), "{}", a.table());
}

/// #45 item 4: right after a normal topic deletion (the deleter emptied the trash, the
/// bookie's GC has not run since), the topic's ledger is data awaiting GC, aged from the
/// bookie's last listing: no leak within the grace period, one past it; the next GC pass
/// drops it and the audit is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_right_after_a_normal_deletion_the_audit_finds_data_awaiting_gc_not_orphans() {
    let s = start(1, |_| {}).await;
    let env = env_of(&s.cluster.meta);
    let mut c = Conn::open(s.broker.addr()).await;
    let topic = vec!["doomed".to_string()];
    let r: CreateTopicsResponse = c
        .call(ApiKey::CreateTopics, 5, &folio_testkit::kafka::create_topics_request(&topic, 1))
        .await;
    assert_eq!(r.topics[0].error_code, 0);
    let req = folio_testkit::kafka::produce_request("doomed", 0, batch(10, 1).into(), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 8, &req).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let r: DeleteTopicsResponse =
        c.call(ApiKey::DeleteTopics, 6, &folio_testkit::kafka::delete_topics_request(&topic)).await;
    assert_eq!(r.responses[0].error_code, 0);
    let trash = folio_log::Trash::new(env.clone(), folio_log::TrashConfig::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        trash.run_once().await.unwrap();
        // Logs first: the controller moves a log into the trash in one transaction, so once
        // the log is gone its ledgers are in the trash. Listed the other way round, that
        // transaction could land between the two listings (the trash looked empty before it,
        // the log was gone after it) and the loop ended with the ledger still in the trash.
        let logs = folio_meta::list_all(s.cluster.meta.as_ref(), &Keys::default().logs()).await;
        let left = folio_meta::list_all(s.cluster.meta.as_ref(), &Keys::default().trash()).await;
        if logs.unwrap().is_empty() && left.unwrap().is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the deletion did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let a = audit::run(&env).await.unwrap();
    let waiting: Vec<_> = a.findings.iter().filter(|f| f.class == Class::AwaitingGc).collect();
    assert!(!waiting.is_empty(), "the topic's ledger is still on the bookie: {}", a.table());
    assert!(waiting.iter().all(|f| f.age_ms.is_some() && f.bytes > 0), "{}", a.table());
    assert_eq!(a.leaks_older_than(Duration::from_secs(600)), 0, "{}", a.table());
    assert!(a.leaks_older_than(Duration::ZERO) >= 1, "overdue GC would count: {}", a.table());
    for n in &s.cluster.nodes {
        n.bookie().gc_now().await.unwrap();
    }
    let a = audit::run(&env).await.unwrap();
    assert!(a.findings.is_empty(), "{}", a.table());
}
