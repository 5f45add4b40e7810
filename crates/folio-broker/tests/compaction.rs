//! #25 items 2 and 3: compacted topics on the wire. A compacted partition keeps the newest
//! record of every key at its offset, consumers read across the gaps, tombstones go after
//! `delete.retention.ms`, the replaced ledgers go to the trash (L1), and keyless records
//! are refused with `record_errors`. Also the storage configs beside `cleanup.policy`:
//! `compression.type` and `segment.bytes`.

#![allow(clippy::big_endian_bytes)] // Kafka's wire format is big-endian

use crate::common;

use std::collections::BTreeMap;

use common::{Conn, fetch_req, metadata_req};
use folio_broker::{batch, errors, records};
use folio_log::records::TrashRecord;
use folio_meta::records::Record;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
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

/// #50 (librdkafka 0081, 0129): CreateTopics takes Kafka's `compression.type` and
/// `segment.bytes`, DescribeConfigs answers them, and a topic's codec is honoured: a batch
/// sent uncompressed is stored and fetched gzip'd, its records unchanged. A value Kafka
/// refuses is refused with INVALID_CONFIG; zstd storage needs Produce v7, as in Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_type_and_segment_bytes_are_taken_and_honoured() {
    let s = common::start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    create(&mut c, "squeezed", &[("compression.type", "gzip"), ("segment.bytes", "1048576")]).await;
    for (key, bad, says) in
        [("compression.type", "brotli", "use producer"), ("segment.bytes", "1000", "outside")]
    {
        let req = folio_testkit::kafka::create_topic_request("refused", 1, &[(key, bad)]);
        let r: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 5, &req).await;
        assert_eq!(r.topics[0].error_code, errors::INVALID_CONFIG, "{key}={bad}");
        let message = r.topics[0].error_message.as_deref().unwrap_or_default();
        assert!(message.contains(says), "{key}={bad}: {message}");
    }
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(kafka_protocol::protocol::StrBytes::from_static_str("squeezed"))
            .with_configuration_keys(None),
    ]);
    let dc: DescribeConfigsResponse = c.call(ApiKey::DescribeConfigs, 2, &describe).await;
    let configs: BTreeMap<String, String> = dc.results[0]
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string()).unwrap_or_default()))
        .collect();
    assert_eq!(configs.get("compression.type").map(String::as_str), Some("gzip"));
    assert_eq!(configs.get("segment.bytes").map(String::as_str), Some("1048576"));

    let sent = keyed(&[("a", Some("one")), ("b", Some("two")), ("c", None)]);
    assert_eq!(sent[22] & 7, 0, "sent uncompressed");
    let r = produce(&mut c, "squeezed", sent, 9).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let id = topic_id(&mut c, "squeezed").await;
    let f: FetchResponse = c.call(ApiKey::Fetch, 13, &fetch_req("squeezed", id, 0)).await;
    let stored = f.responses[0].partitions[0].records.clone().unwrap_or_default();
    let (h, _) = records::records_bytes(&stored).unwrap();
    assert_eq!(h.codec(), Ok(batch::Codec::Gzip), "stored as the topic says");
    assert_eq!(
        read_all(&mut c, "squeezed", id).await,
        vec![
            (0, "a".to_string(), Some("one".to_string())),
            (1, "b".to_string(), Some("two".to_string())),
            (2, "c".to_string(), None),
        ]
    );
    // segment.bytes closes the partition's ledger at 1 MiB: 3 MiB (incompressible, so
    // gzip keeps them 3 MiB) make at least 3 ledgers.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..6 {
        let noise: Vec<u8> = (0..512 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        // Timestamped now: retention (7 days) would trim ledgers of 1970 as they close.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let big = batch::build(1, now.as_millis() as i64, 0, |_| noise.clone());
        let r = produce(&mut c, "squeezed", big, 9).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let keys = folio_meta::keys::Keys::default();
    let name = folio_broker::domain::topics::log_name(id, 0);
    let log = folio_meta::MetadataStore::get(s.cluster.meta.as_ref(), &keys.log(&name))
        .await
        .unwrap()
        .expect("the log's record");
    let ledgers =
        folio_log::records::LogRecord::decode(&keys.log(&name), &log.value).unwrap().ledgers;
    assert!(ledgers.len() >= 3, "segment.bytes=1 MiB, 3 MiB written: {} ledgers", ledgers.len());
    create(&mut c, "zstd", &[("compression.type", "zstd")]).await;
    let r = produce(&mut c, "zstd", keyed(&[("a", Some("v"))]), 6).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, errors::UNSUPPORTED_COMPRESSION_TYPE);
    let r = produce(&mut c, "zstd", keyed(&[("a", Some("v"))]), 9).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let zstd = topic_id(&mut c, "zstd").await;
    let f: FetchResponse = c.call(ApiKey::Fetch, 13, &fetch_req("zstd", zstd, 0)).await;
    let stored = f.responses[0].partitions[0].records.clone().unwrap_or_default();
    assert_eq!(records::records_bytes(&stored).unwrap().0.codec(), Ok(batch::Codec::Zstd));
}
