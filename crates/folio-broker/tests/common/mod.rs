#![allow(dead_code, unused_imports)]
#![allow(clippy::big_endian_bytes)] // Kafka's wire format is big-endian
//! A broker on in-process bookies, and a raw Kafka protocol client for tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use folio_broker::{Broker, BrokerConfig};
use folio_client::LedgerClient;
use folio_log::{LogEnv, WallClock};
use folio_meta::keys::Keys;
use folio_testkit::Cluster;
pub use folio_testkit::poll::eventually;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

pub struct Setup {
    pub cluster: Cluster,
    pub broker: Broker,
}

pub async fn start(bookies: usize, tune: impl FnOnce(&mut BrokerConfig)) -> Setup {
    folio_testkit::trace();
    let cluster = Cluster::start(bookies).await;
    let broker = broker_on(&cluster, tune).await;
    Setup { cluster, broker }
}

/// A broker on `cluster`'s metadata and bookies (several may run on one cluster).
pub async fn broker_on(cluster: &Cluster, tune: impl FnOnce(&mut BrokerConfig)) -> Broker {
    let bookies = cluster.nodes.len();
    let meta = cluster.meta.clone();
    let client = LedgerClient::new(meta.clone(), Keys::default())
        .with_request_timeout(Duration::from_secs(2));
    let env = LogEnv {
        meta,
        client,
        keys: Keys::default(),
        clock: Arc::new(WallClock),
        owner: "test".into(),
    };
    let mut config = BrokerConfig {
        listeners: vec![folio_broker::config::ListenerConfig::plaintext(
            "127.0.0.1:0".parse().unwrap(),
        )],
        default_replication: bookies as u16,
        replication_max: bookies as u16,
        // Tests look at what the controller puts in the trash; those about the deleter
        // turn it on.
        trash: None,
        ..BrokerConfig::default()
    };
    tune(&mut config);
    Broker::start(config, env).await.unwrap()
}

/// A raw client connection (`folio_testkit::kafka::KafkaConn`); a failure fails the test.
pub struct Conn(pub folio_testkit::kafka::KafkaConn);

impl Conn {
    pub async fn open(addr: SocketAddr) -> Conn {
        Conn(folio_testkit::kafka::KafkaConn::connect(addr).await.unwrap())
    }

    pub fn stream(&mut self) -> &mut dyn folio_testkit::kafka::Stream {
        self.0.stream()
    }

    /// Sends a request; returns its correlation id.
    pub async fn send<R: Encodable>(&mut self, key: ApiKey, version: i16, req: &R) -> i32 {
        self.0.send(key, version, req).await.unwrap()
    }

    pub async fn send_raw(&mut self, frame: &[u8]) {
        self.0.send_raw(frame).await.unwrap()
    }

    /// Reads one answer frame; `None` when the broker closed the connection.
    pub async fn recv_raw(&mut self) -> Option<Bytes> {
        self.0.recv_raw().await.unwrap()
    }

    /// Reads an answer of `key` at `version`: (correlation id, body).
    pub async fn recv<R: Decodable>(&mut self, key: ApiKey, version: i16) -> (i32, R) {
        self.0.recv(key, version).await.unwrap()
    }

    /// Sends a request and reads its answer (in request order).
    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Q,
    ) -> R {
        self.0.call(key, version, req).await.unwrap()
    }
}

/// A v2 record batch of `count` uncompressed records `value-<i>` with timestamp `ts`.
pub fn batch(count: i32, ts: i64) -> Vec<u8> {
    batch_with(count, ts, 0)
}

/// Like `batch`, with `attributes` (e.g. a codec in bits 0-2; the records stay plain).
pub fn batch_with(count: i32, ts: i64, attributes: i16) -> Vec<u8> {
    batch_of(count, ts, attributes, |i| format!("value-{i}").into_bytes())
}

/// A batch of `count` records of `value_bytes` bytes each.
pub fn batch_sized(count: i32, value_bytes: usize) -> Vec<u8> {
    batch_of(count, 1, 0, |i| vec![b'a' + (i % 26) as u8; value_bytes])
}

/// A v2 record batch of `count` uncompressed records whose values `value(i)` gives.
pub fn batch_of(count: i32, ts: i64, attributes: i16, value: impl Fn(i32) -> Vec<u8>) -> Vec<u8> {
    folio_broker::batch::build(count, ts, attributes, value)
}

/// `b` as a batch of idempotent producer `pid` at `epoch`, first sequence `seq`.
pub fn idempotent(mut b: Vec<u8>, pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Base offsets of the batches in fetched `records`.
pub fn base_offsets(mut records: &[u8]) -> Vec<i64> {
    let mut out = Vec::new();
    while records.len() >= 12 {
        let base = i64::from_be_bytes(records[..8].try_into().unwrap());
        let len = i32::from_be_bytes(records[8..12].try_into().unwrap()) as usize;
        out.push(base);
        records = &records[12 + len..];
    }
    out
}

/// Metadata for `topics`, allowing auto-creation.
pub fn metadata_req(topics: &[&str]) -> kafka_protocol::messages::MetadataRequest {
    kafka_protocol::messages::MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(
            topics
                .iter()
                .map(|t| {
                    kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(kafka_protocol::messages::TopicName(
                            kafka_protocol::protocol::StrBytes::from_string(t.to_string()),
                        )))
                })
                .collect(),
        ))
}

/// A Fetch of partition 0 of `topic` (by name and id) from `offset`, up to 1 MiB, no wait.
pub fn fetch_req(
    topic: &str,
    id: uuid::Uuid,
    offset: i64,
) -> kafka_protocol::messages::FetchRequest {
    kafka_protocol::messages::FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            kafka_protocol::messages::fetch_request::FetchTopic::default()
                .with_topic(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_string(topic.into()),
                ))
                .with_topic_id(id)
                .with_partitions(vec![
                    kafka_protocol::messages::fetch_request::FetchPartition::default()
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

/// An OffsetCommit of `offset` for partition 0 of `topic` by `group`, outside any
/// generation.
pub fn offset_commit_req(
    group: String,
    topic: &str,
    offset: i64,
) -> kafka_protocol::messages::OffsetCommitRequest {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ])
}

/// A Produce request of `records` to `topic`'s `partition` with `acks`.
pub fn produce_req(
    topic: &str,
    partition: i32,
    records: Vec<u8>,
    acks: i16,
) -> kafka_protocol::messages::ProduceRequest {
    folio_testkit::kafka::produce_request(topic, partition, records.into(), acks)
}

/// The first partition's (error code, base offset) of a Produce answer.
pub fn produced(r: &kafka_protocol::messages::ProduceResponse) -> (i16, i64) {
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// A ListOffsets request for partition 0 of `topic` at `timestamp` (-1: the end).
pub fn list_offsets_req(
    topic: &str,
    timestamp: i64,
) -> kafka_protocol::messages::ListOffsetsRequest {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(timestamp)]),
    ])
}

/// A JoinGroup request of a new member of `group` (consumer protocol, "range").
pub fn join_req(group: &str) -> kafka_protocol::messages::JoinGroupRequest {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{GroupId, JoinGroupRequest};
    use kafka_protocol::protocol::StrBytes;
    JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range")),
        ])
}
