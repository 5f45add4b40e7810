//! Hostile clients against a `folio broker` process on etcd with a `folio bookie` process
//! (issue #21, where users rely on it): a group id of 30 000 bytes, a huge declared frame,
//! garbage, an auto-create storm, a client that pipelines fetches and never reads, and a
//! client that touches more partitions than the broker keeps open. The broker process stays
//! up, each offender gets an error or a close, the metadata store (etcd) keeps taking
//! writes, and every acknowledged record reads back (D1) with a real client (kcat).
#![cfg(feature = "etcd")]
// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use folio_testkit::kafka::{KafkaConn, create_topics_request, encode_request, produce_request};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{Proc, kcat, start_bookie, start_broker_with};

/// Reads until the broker closes `s` (end of stream or reset); fails after 30 s.
async fn closed_by_broker(s: &mut TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    let wait = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait).await.expect("the broker closes it");
}

/// A v2 batch of `n` records `value-<i>`.
fn batch(n: i32) -> bytes::Bytes {
    folio_broker::batch::build(n, 1, 0, |i| format!("value-{i}").into_bytes()).into()
}

async fn produce(c: &mut KafkaConn, topic: &str, partition: i32, n: i32) -> i64 {
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_request(topic, partition, batch(n), -1)).await.unwrap();
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce to {topic}/{partition}");
    p.base_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_hostile_clients_against_broker_and_bookie_processes_on_etcd() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("hostile-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let _bookie = start_bookie(tmp.path(), "bookie-0", &etcd, &root, &[]);
    let limits = [
        "--limit",
        "auto_create_per_request_max=3",
        "--limit",
        "partitions_open_max=2",
        "--limit",
        "reply_write_timeout_ms=500",
        "--limit",
        "fetch_bytes_max=65536",
    ];
    let (mut broker, addr) = start_broker_with(&etcd, &root, 1, &limits);
    let sock: SocketAddr = addr.parse().unwrap();
    let mut c = KafkaConn::connect(sock).await.unwrap();
    let r: CreateTopicsResponse =
        c.call(ApiKey::CreateTopics, 7, &create_topics_request(&["t".into()], 3)).await.unwrap();
    assert_eq!(r.topics[0].error_code, 0);

    // A group id of 30 000 '/' (librdkafka sends it): refused, and etcd keeps taking writes.
    let group = |g: String| {
        OffsetCommitRequest::default().with_group_id(GroupId(StrBytes::from_string(g))).with_topics(
            vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_committed_offset(1),
                    ]),
            ],
        )
    };
    let r: OffsetCommitResponse =
        c.call(ApiKey::OffsetCommit, 7, &group("/".repeat(30_000))).await.unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, folio_broker::errors::INVALID_GROUP_ID);
    let r: OffsetCommitResponse =
        c.call(ApiKey::OffsetCommit, 7, &group("g".into())).await.unwrap();
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "the store still takes writes");

    // A 200 MiB frame declared (above request_bytes_max), and a frame of garbage: closed.
    let mut huge = TcpStream::connect(sock).await.unwrap();
    huge.write_all(&(200i32 << 20).to_be_bytes()).await.unwrap();
    closed_by_broker(&mut huge).await;
    let mut garbage = TcpStream::connect(sock).await.unwrap();
    garbage
        .write_all(&[0, 0, 0, 12, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8])
        .await
        .unwrap();
    closed_by_broker(&mut garbage).await;

    // An auto-create storm: at most 3 topics per request.
    let names: Vec<_> = (0..10)
        .map(|i| {
            metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(format!("storm-{i}")))))
        })
        .collect();
    let req =
        MetadataRequest::default().with_allow_auto_topic_creation(true).with_topics(Some(names));
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &req).await.unwrap();
    assert_eq!(r.topics.iter().filter(|t| t.error_code == 0).count(), 3);

    // More partitions than the broker keeps open: the least recently used closes and
    // reopens on use, nothing lost.
    for round in 0..2 {
        for p in 0..3 {
            assert_eq!(produce(&mut c, "t", p, 2).await, round * 2, "partition {p}");
        }
    }

    // Fetches pipelined on a 4 KiB receive buffer and never read: closed once an answer
    // waits `reply_write_timeout`, while the well-behaved client is served.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let attacker = socket.connect(sock).await.unwrap();
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_max_bytes(0).with_topics(vec![
        fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![
                fetch_request::FetchPartition::default().with_partition_max_bytes(i32::MAX),
            ]),
    ]);
    let frame = encode_request(ApiKey::Fetch, 12, 1, &fetch).unwrap().repeat(64);
    let (mut rd, mut wr) = attacker.into_split();
    let flood = tokio::spawn(async move { while wr.write_all(&frame).await.is_ok() {} });
    for _ in 0..20 {
        produce(&mut c, "t", 0, 50).await;
    }
    // Closed by the broker (it resets a connection with unread requests): the flood's
    // writes fail.
    tokio::time::timeout(Duration::from_secs(30), flood)
        .await
        .expect("the pipelining client is closed")
        .unwrap();
    let mut sink = vec![0u8; 1 << 16];
    while let Ok(n) = rd.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }

    assert!(broker.0.try_wait().unwrap().is_none(), "the broker process is still up");
    // A real client reads back every acknowledged record of partition 0.
    let out = kcat(
        &["-C", "-b", &addr, "-t", "t", "-p", "0", "-o", "beginning", "-e", "-f", "%o\n"],
        None,
    );
    assert_eq!(out.lines().count(), 2 + 2 + 20 * 50, "{out}");
    kcat(&["-P", "-b", &addr, "-t", "t", "-p", "1", "-X", "acks=all"], Some("after\n"));
    let out = kcat(&["-C", "-b", &addr, "-t", "t", "-p", "1", "-o", "beginning", "-e"], None);
    assert!(out.ends_with("after\n"), "{out}");
    let _: &Proc = &broker;
}
