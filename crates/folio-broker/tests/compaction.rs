//! #25 items 2 and 3: compacted topics on the wire. A compacted partition keeps the newest
//! record of every key at its offset, consumers read across the gaps, tombstones go after
//! `delete.retention.ms`, the replaced ledgers go to the trash (L1), and keyless records
//! are refused with `record_errors`.

#![allow(clippy::big_endian_bytes)] // Kafka's wire format (the shared test helpers)

mod common;

use std::collections::BTreeMap;

use common::{Conn, fetch_req, metadata_req};
use folio_broker::{batch, errors, records};
use folio_log::records::TrashRecord;
use folio_meta::records::Record;
use kafka_protocol::messages::*;

/// A batch of `(key, value)` records (`None` value: a tombstone).
fn keyed(records: &[(&str, Option<&str>)]) -> Vec<u8> {
    batch::build_keyed(records.len() as i32, 1_000, 0, |i| {
        let (k, v) = records[i as usize];
        (Some(k.as_bytes().to_vec()), v.map(|v| v.as_bytes().to_vec()))
    })
}

async fn create(c: &mut Conn, name: &str, configs: &[(&str, &str)]) {
    let req = folio_testkit::kafka::create_topic_request(name, 1, configs);
    let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 5, &req).await;
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

async fn produce(c: &mut Conn, topic: &str, b: Vec<u8>, version: i16) -> ProduceResponse {
    let req = folio_testkit::kafka::produce_request(topic, 0, b.into(), -1);
    c.call(ApiKey::Produce, version, &req).await
}

/// Every record from offset 0 as `(offset, key, value)`, fetching as a consumer does: the
/// next fetch starts after each batch's last offset (delta), gaps included.
async fn read_all(c: &mut Conn, topic: &str, id: uuid::Uuid) -> Vec<(u64, String, Option<String>)> {
    let mut out = Vec::new();
    let mut offset = 0i64;
    loop {
        let r: FetchResponse = c.call(ApiKey::Fetch, 13, &fetch_req(topic, id, offset)).await;
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        let mut data: &[u8] = p.records.as_deref().unwrap_or_default();
        if data.is_empty() {
            return out;
        }
        while data.len() >= 12 {
            let base = i64::from_be_bytes(data[..8].try_into().unwrap());
            let size = 12 + i32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
            let (b, rest) = data.split_at(size);
            data = rest;
            let (h, plain) = records::records_bytes(b).unwrap();
            for r in records::decode_records(&h, &plain).unwrap() {
                let at = base as u64 + r.offset_delta as u64;
                if at >= offset as u64 {
                    let s = |x: &[u8]| String::from_utf8(x.to_vec()).unwrap();
                    out.push((at, s(r.key.unwrap()), r.value.map(s)));
                }
            }
            offset = base + i64::from(h.last_offset_delta) + 1;
        }
    }
}

async fn topic_id(c: &mut Conn, topic: &str) -> uuid::Uuid {
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[topic])).await;
    r.topics[0].topic_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l1_a_compacted_partition_keeps_the_newest_record_per_key_at_its_offset() {
    let s = common::start(1, |c| {
        c.log.rollover_entries = 2;
        c.compaction.check_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut c = Conn::open(s.broker.addr()).await;
    let configs = [
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0"),
        ("delete.retention.ms", "0"),
    ];
    create(&mut c, "kv", &configs).await;
    let id = topic_id(&mut c, "kv").await;
    // Offsets: a=1 b=1 | a=2 c=1 | b=2 a=3 | c=(tombstone) d=1 | e=1
    for b in [
        keyed(&[("a", Some("1")), ("b", Some("1"))]),
        keyed(&[("a", Some("2")), ("c", Some("1"))]),
        keyed(&[("b", Some("2")), ("a", Some("3"))]),
        keyed(&[("c", None), ("d", Some("1"))]),
        keyed(&[("e", Some("1"))]),
    ] {
        let r = produce(&mut c, "kv", b, 9).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let before = s.broker.partition_info("kv", 0).await.unwrap();
    assert_eq!(before.status.end_offset, 9);
    let r = s.broker.compact_now("kv", 0).await.unwrap().expect("a pass is due");
    assert!(r.bytes_out < r.bytes_in, "{r:?}");
    let after = s.broker.partition_info("kv", 0).await.unwrap();
    assert_eq!(after.status.end_offset, 9, "the end does not move");
    assert_eq!(after.status.start_offset, 0, "nor the start");
    let s_ = |x: &str| x.to_string();
    let latest = vec![
        (4, s_("b"), Some(s_("2"))),
        (5, s_("a"), Some(s_("3"))),
        (6, s_("c"), None), // a fresh tombstone stays for delete.retention.ms
        (7, s_("d"), Some(s_("1"))),
        (8, s_("e"), Some(s_("1"))),
    ];
    assert_eq!(read_all(&mut c, "kv", id).await, latest);
    // The replaced ledgers are in the trash; nothing is leaked.
    let keys = folio_meta::keys::Keys::default();
    let trash = folio_meta::list_all(s.cluster.meta.as_ref(), &keys.trash()).await.unwrap();
    let compacted: Vec<u64> = trash
        .iter()
        .map(|v| TrashRecord::decode(&v.key, &v.value).unwrap())
        .filter(|t| t.reason == "compacted")
        .map(|t| t.ledger_id)
        .collect();
    assert_eq!(compacted.len(), r.replaced.len());
    assert!(r.replaced.iter().all(|id| compacted.contains(id)));
    // ListOffsets by time still finds records inside compacted batches.
    let mut counts = BTreeMap::new();
    for (_, k, _) in read_all(&mut c, "kv", id).await {
        *counts.entry(k).or_insert(0) += 1;
    }
    assert!(counts.values().all(|n| *n == 1), "one record per key: {counts:?}");

    // More writes make the head dirty again: the second pass drops the tombstone, whose
    // ledger was compacted more than delete.retention.ms=0 ago.
    for b in [keyed(&[("a", Some("4"))]), keyed(&[("f", Some("1"))]), keyed(&[("g", Some("1"))])] {
        produce(&mut c, "kv", b, 9).await;
    }
    s.broker.compact_now("kv", 0).await.unwrap().expect("a second pass is due");
    let keys: Vec<(u64, String)> =
        read_all(&mut c, "kv", id).await.into_iter().map(|(o, k, _)| (o, k)).collect();
    assert!(!keys.iter().any(|(_, k)| k == "c"), "the tombstone is gone: {keys:?}");
    assert!(!keys.contains(&(5, s_("a"))), "a=3 was superseded by a=4: {keys:?}");
    assert!(keys.contains(&(9, s_("a"))), "{keys:?}");
    let metrics = s.broker.render_metrics();
    assert!(metrics.contains("folio_kafka_compaction_passes_total 2"), "{metrics}");
}

#[tokio::test]
async fn a_compacted_topic_refuses_keyless_records_with_record_errors() {
    let s = common::start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    create(&mut c, "keys", &[("cleanup.policy", "compact,delete")]).await;
    // Records 1 and 3 of the batch have no key.
    let b = batch::build_keyed(4, 1_000, 0, |i| {
        ((i % 2 == 0).then(|| b"k".to_vec()), Some(b"v".to_vec()))
    });
    let r = produce(&mut c, "keys", b.clone(), 9).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, errors::INVALID_RECORD);
    let indexes: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
    assert_eq!(indexes, [1, 3]);
    assert!(p.error_message.as_deref().unwrap_or_default().contains("without a key"));
    // Before v8 the field does not exist: the error alone.
    let r = produce(&mut c, "keys", b, 7).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, errors::INVALID_RECORD);
    // Keyed records go in; nothing of the refused batch was appended.
    let r = produce(&mut c, "keys", keyed(&[("k", Some("v"))]), 9).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 0);
    // A delete-only topic takes keyless records without decoding them.
    create(&mut c, "plain", &[]).await;
    let r = produce(&mut c, "plain", batch::build(2, 1_000, 0, |_| b"v".to_vec()), 9).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}
