//! #25: admin APIs on the raw protocol. OffsetDelete (KIP-496): a group's committed offsets
//! go by partition; a topic a member subscribes to keeps them (GROUP_SUBSCRIBED_TO_TOPIC);
//! an unknown group, an unknown topic and an unknown partition answer as Kafka does.
//! ElectLeaders and the reassignment APIs: nothing to elect or move. DescribeLogDirs: the
//! bookies' ledger directories.

#![allow(clippy::big_endian_bytes)] // Kafka's wire format is big-endian

use crate::common;

use bytes::Bytes;
use common::{Conn, metadata_req, offset_commit_req};
use folio_broker::errors;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn delete(group: &str, topic: &str, partitions: &[i32]) -> OffsetDeleteRequest {
    let parts =
        partitions.iter().map(|p| OffsetDeleteRequestPartition::default().with_partition_index(*p));
    OffsetDeleteRequest::default().with_group_id(GroupId(s(group))).with_topics(vec![
        OffsetDeleteRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(parts.collect()),
    ])
}

async fn committed(c: &mut Conn, group: &str, topic: &str) -> i64 {
    let req =
        OffsetFetchRequest::default().with_group_id(GroupId(s(group))).with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![0]),
        ]));
    let r: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, 7, &req).await;
    r.topics[0].partitions[0].committed_offset
}

fn codes(r: &OffsetDeleteResponse) -> Vec<i16> {
    r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_delete_removes_offsets_but_not_those_of_a_subscribed_topic() {
    let setup =
        common::start(1, |c| c.groups.initial_rebalance_delay = std::time::Duration::ZERO).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["t1", "t2"])).await;
    for (g, t) in [("idle", "t1"), ("idle", "t2"), ("busy", "t1"), ("busy", "t2")] {
        let r: OffsetCommitResponse =
            c.call(ApiKey::OffsetCommit, 7, &offset_commit_req(g.into(), t, 5)).await;
        assert_eq!(r.topics[0].partitions[0].error_code, 0);
    }

    // A group without members: t1's offset goes, t2's stays; a partition the topic does
    // not have and an unknown topic answer per partition.
    let r: OffsetDeleteResponse =
        c.call(ApiKey::OffsetDelete, 0, &delete("idle", "t1", &[0])).await;
    assert_eq!((r.error_code, codes(&r)), (0, vec![0]));
    assert_eq!(committed(&mut c, "idle", "t1").await, -1);
    assert_eq!(committed(&mut c, "idle", "t2").await, 5);
    let r: OffsetDeleteResponse =
        c.call(ApiKey::OffsetDelete, 0, &delete("idle", "nope", &[0])).await;
    assert_eq!(codes(&r), [errors::UNKNOWN_TOPIC_OR_PARTITION]);
    let r: OffsetDeleteResponse =
        c.call(ApiKey::OffsetDelete, 0, &delete("nobody", "t1", &[0])).await;
    assert_eq!(r.error_code, errors::GROUP_ID_NOT_FOUND);

    // A member subscribed to t1 (consumer protocol metadata: version, [topics], user data).
    let mut meta = vec![0, 1, 0, 0, 0, 1, 0, 2];
    meta.extend_from_slice(b"t1");
    meta.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("busy")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(Bytes::from(meta)),
        ]);
    let r: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join).await;
    assert_eq!(r.error_code, 0);
    let r: OffsetDeleteResponse =
        c.call(ApiKey::OffsetDelete, 0, &delete("busy", "t1", &[0])).await;
    assert_eq!(codes(&r), [errors::GROUP_SUBSCRIBED_TO_TOPIC]);
    assert_eq!(committed(&mut c, "busy", "t1").await, 5, "a subscribed topic keeps its offset");
    let r: OffsetDeleteResponse =
        c.call(ApiKey::OffsetDelete, 0, &delete("busy", "t2", &[0])).await;
    assert_eq!(codes(&r), [0]);
    assert_eq!(committed(&mut c, "busy", "t2").await, -1);
}

/// #25: ElectLeaders and ListPartitionReassignments answered honestly: the owner is the only
/// leader (ELECTION_NOT_NEEDED with the reason; UNKNOWN_TOPIC_OR_PARTITION for what does not
/// exist) and nothing is being reassigned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_are_never_needed_and_nothing_is_reassigned() {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["t1"])).await;
    let req =
        ElectLeadersRequest::default().with_election_type(0).with_topic_partitions(Some(vec![
            TopicPartitions::default().with_topic(TopicName(s("t1"))).with_partitions(vec![0, 7]),
            TopicPartitions::default().with_topic(TopicName(s("nope"))).with_partitions(vec![0]),
        ]));
    let r: ElectLeadersResponse = c.call(ApiKey::ElectLeaders, 2, &req).await;
    let got: Vec<(String, i32, i16)> = r
        .replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result.iter().map(|p| (t.topic.to_string(), p.partition_id, p.error_code))
        })
        .collect();
    let unknown = errors::UNKNOWN_TOPIC_OR_PARTITION;
    assert_eq!(
        got,
        [
            ("t1".to_string(), 0, errors::ELECTION_NOT_NEEDED),
            ("t1".to_string(), 7, unknown),
            ("nope".to_string(), 0, unknown)
        ]
    );
    assert!(r.replica_election_results[0].partition_result[0].error_message.is_some(), "why");
    let all: ElectLeadersResponse = c
        .call(ApiKey::ElectLeaders, 2, &ElectLeadersRequest::default().with_topic_partitions(None))
        .await;
    assert_eq!((all.error_code, all.replica_election_results.len()), (0, 0));
    let r: ListPartitionReassignmentsResponse = c
        .call(ApiKey::ListPartitionReassignments, 0, &ListPartitionReassignmentsRequest::default())
        .await;
    assert_eq!((r.error_code, r.topics.len()), (0, 0));
}

/// #25: acks=1 is served like acks=all (the answer comes once the ledger's ack quorum has
/// the batch) and the metrics say which acks clients asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_requests_are_counted_by_acks() {
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["t"])).await;
    for (acks, offset) in [(1, 0), (-1, 1), (1, 2)] {
        let req =
            folio_testkit::kafka::produce_request("t", 0, Bytes::from(common::batch(1, 1)), acks);
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
        let p = &r.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, offset));
    }
    let text = setup.broker.render_metrics();
    for line in [
        "folio_kafka_produce_requests_total{acks=\"0\"} 0",
        "folio_kafka_produce_requests_total{acks=\"1\"} 2",
        "folio_kafka_produce_requests_total{acks=\"all\"} 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// The README's API table is the advertised list: every API and version range in
/// `SUPPORTED` has its row, and no row names an API the broker does not serve.
#[test]
fn the_readme_api_table_lists_every_supported_api_and_version() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = readme.split("### Kafka APIs and versions").nth(1).expect("the API section");
    let rows: Vec<(String, String)> = section
        .lines()
        .take_while(|l| !l.starts_with("###"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() > 3
                && !cells[1].is_empty()
                && cells[1] != "API"
                && !cells[1].starts_with("---"))
            .then(|| (cells[1].to_string(), cells[2].to_string()))
        })
        .collect();
    let want: Vec<(String, String)> = folio_broker::api::SUPPORTED
        .iter()
        .map(|(k, lo, hi)| {
            let versions = if lo == hi { lo.to_string() } else { format!("{lo}–{hi}") };
            (format!("{k:?}"), versions)
        })
        .collect();
    assert_eq!(rows, want);
}

/// #25: DescribeProducers lists the idempotent producers a partition tracks (id, epoch, last
/// sequence, last timestamp); unknown topics and partitions answer as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_producers_lists_a_partitions_idempotent_producers() {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["t1"])).await;
    let mut last_ts = 0;
    for (pid, epoch, seq, count) in [(7, 0, 0, 3), (7, 0, 3, 2), (9, 2, 0, 1)] {
        let b = common::idempotent(common::batch(count, 1000 + seq as i64), pid, epoch, seq);
        if pid == 7 {
            last_ts = i64::from_be_bytes(b[35..43].try_into().unwrap());
        }
        let req = folio_testkit::kafka::produce_request("t1", 0, b.into(), -1);
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let req = DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default().with_name(TopicName(s("t1"))).with_partition_indexes(vec![0, 3]),
        TopicRequest::default().with_name(TopicName(s("nope"))).with_partition_indexes(vec![0]),
    ]);
    let r: DescribeProducersResponse = c.call(ApiKey::DescribeProducers, 0, &req).await;
    let p0 = &r.topics[0].partitions[0];
    assert_eq!(p0.error_code, 0);
    let got: Vec<(i64, i32, i32, i64, i32, i64)> = p0
        .active_producers
        .iter()
        .map(|p| {
            let txn = p.current_txn_start_offset;
            (
                p.producer_id.0,
                p.producer_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.coordinator_epoch,
                txn,
            )
        })
        .collect();
    assert_eq!(got[0], (7, 0, 4, last_ts, -1, -1));
    assert_eq!((got[1].0, got[1].1, got[1].2), (9, 2, 0));
    assert_eq!(got.len(), 2);
    assert_eq!(r.topics[0].partitions[1].error_code, errors::UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(r.topics[1].partitions[0].error_code, errors::UNKNOWN_TOPIC_OR_PARTITION);
}

/// The leader epochs of every partition in one request: (error, epoch, end offset) each.
async fn epoch_ends(
    c: &mut Conn,
    topic: &str,
    asks: &[(i32, i32, i32)], // (partition, current leader epoch, leader epoch)
) -> Vec<(i16, i32, i64)> {
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let parts = asks.iter().map(|(p, current, epoch)| {
        OffsetForLeaderPartition::default()
            .with_partition(*p)
            .with_current_leader_epoch(*current)
            .with_leader_epoch(*epoch)
    });
    let req =
        OffsetForLeaderEpochRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
            OffsetForLeaderTopic::default()
                .with_topic(TopicName(s(topic)))
                .with_partitions(parts.collect()),
        ]);
    let r: OffsetForLeaderEpochResponse = c.call(ApiKey::OffsetForLeaderEpoch, 4, &req).await;
    r.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| (p.error_code, p.leader_epoch, p.end_offset))
        .collect()
}

/// Metadata's leader epoch of partition 0 of `topic`, and the topic's id.
async fn metadata_epoch(c: &mut Conn, topic: &str) -> (i32, uuid::Uuid) {
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[topic])).await;
    (r.topics[0].partitions[0].leader_epoch, r.topics[0].topic_id)
}

/// A Fetch of partition 0 from `offset` with `current_leader_epoch`: the error and each
/// batch's (base offset, partition leader epoch).
async fn fetch_epochs(
    c: &mut Conn,
    topic: &str,
    id: uuid::Uuid,
    offset: i64,
    current: i32,
) -> (i16, Vec<(i64, i32)>) {
    let mut req = common::fetch_req(topic, id, offset);
    req.topics[0].partitions[0].current_leader_epoch = current;
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await;
    let p = &r.responses[0].partitions[0];
    let mut batches = Vec::new();
    let mut rest = p.records.as_deref().unwrap_or_default();
    while rest.len() >= 61 {
        let base = i64::from_be_bytes(rest[0..8].try_into().unwrap());
        let len = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        batches.push((base, i32::from_be_bytes(rest[12..16].try_into().unwrap())));
        rest = &rest[12 + len..];
    }
    (p.error_code, batches)
}

/// ListOffsets v5 of partition 0 at `timestamp` with `current_leader_epoch`: (error,
/// offset, leader epoch).
async fn list_epoch(c: &mut Conn, topic: &str, timestamp: i64, current: i32) -> (i16, i64, i32) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        ListOffsetsTopic::default().with_name(TopicName(s(topic))).with_partitions(vec![
            ListOffsetsPartition::default()
                .with_timestamp(timestamp)
                .with_current_leader_epoch(current),
        ]),
    ]);
    let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 5, &req).await;
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset, p.leader_epoch)
}

/// #25 item 5: leader epochs derived from ownership changes. Each broker that takes a
/// partition over begins the next epoch where its first append goes; Metadata tells the
/// epoch (also from a broker that has not opened the partition yet), each fetched batch
/// the epoch it was appended in, ListOffsets the epoch of the offset it finds; Fetch,
/// ListOffsets and OffsetForLeaderEpoch check a client's current epoch (older:
/// FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH), taking the epoch announced before the
/// owner opened the partition as current (librdkafka 0054); and OffsetForLeaderEpoch ends each
/// epoch where the next began (Kafka's rules), so no consumer is told of a truncation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_epochs_follow_ownership_changes() {
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["t1"])).await;
    let req = folio_testkit::kafka::produce_request("t1", 0, common::batch(3, 1).into(), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let (epoch, id) = metadata_epoch(&mut c, "t1").await;
    assert_eq!(epoch, 1, "the first owner's epoch");
    assert_eq!(fetch_epochs(&mut c, "t1", id, 0, 1).await, (0, vec![(0, 1)]));
    // Another broker takes the partition over.
    setup.broker.shutdown().await;
    let b2 = common::broker_on(&setup.cluster, |_| {}).await;
    let mut c = Conn::open(b2.addr()).await;
    assert_eq!(metadata_epoch(&mut c, "t1").await.0, 1, "known before it is opened here");
    // A client on the epoch announced before the open is served (opening begins epoch 2,
    // the leader did not change since it was told); ListOffsets alike.
    assert_eq!(list_epoch(&mut c, "t1", -1, 1).await, (0, 3, 2));
    assert_eq!(fetch_epochs(&mut c, "t1", id, 0, 1).await, (0, vec![(0, 1)]));
    assert_eq!(metadata_epoch(&mut c, "t1").await.0, 2);
    let req = folio_testkit::kafka::produce_request("t1", 0, common::batch(2, 1).into(), -1);
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 3);
    assert_eq!(fetch_epochs(&mut c, "t1", id, 0, 2).await, (0, vec![(0, 1), (3, 2)]));
    assert_eq!(fetch_epochs(&mut c, "t1", id, 0, -1).await.0, 0, "-1: not checked");
    assert_eq!(fetch_epochs(&mut c, "t1", id, 0, 3).await.0, errors::UNKNOWN_LEADER_EPOCH);
    assert_eq!(list_epoch(&mut c, "t1", -1, 2).await, (0, 5, 2));
    assert_eq!(list_epoch(&mut c, "t1", -2, -1).await, (0, 0, 1));
    assert_eq!(list_epoch(&mut c, "t1", -1, 0).await.0, errors::FENCED_LEADER_EPOCH);
    assert_eq!(fetch_epochs(&mut c, "t1", id, 0, 0).await.0, errors::FENCED_LEADER_EPOCH);
    let asks = [
        (0, -1, 1),
        (0, 2, 2),
        (0, -1, 0),
        (0, -1, 3),
        (0, -1, -1),
        (0, 0, 1),
        (0, 3, 1),
        (9, -1, 1),
    ];
    assert_eq!(
        epoch_ends(&mut c, "t1", &asks).await,
        [
            (0, 1, 3),
            (0, 2, 5),
            (0, 0, 0),
            (0, -1, -1),
            (0, -1, -1),
            (errors::FENCED_LEADER_EPOCH, -1, -1),
            (errors::UNKNOWN_LEADER_EPOCH, -1, -1),
            (errors::UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
        ]
    );
    assert_eq!(
        epoch_ends(&mut c, "nope", &[(0, -1, 0)]).await[0].0,
        errors::UNKNOWN_TOPIC_OR_PARTITION
    );
}

/// #25 item 5: AlterPartitionReassignments checks a replica list as Kafka does and, valid,
/// completes at once (nothing moves: ListPartitionReassignments still lists none); a
/// cancellation finds none in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassignments_are_checked_and_complete_at_once() {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["moved"])).await;
    let part = |p: i32, replicas: Option<Vec<i32>>| {
        ReassignablePartition::default()
            .with_partition_index(p)
            .with_replicas(replicas.map(|r| r.into_iter().map(BrokerId).collect()))
    };
    let req = AlterPartitionReassignmentsRequest::default().with_topics(vec![
        ReassignableTopic::default().with_name(TopicName(s("moved"))).with_partitions(vec![
            part(0, Some(vec![1])),
            part(0, None),
            part(0, Some(vec![7])),
            part(0, Some(vec![1, 1])),
            part(0, Some(vec![])),
            part(3, Some(vec![1])),
        ]),
        ReassignableTopic::default()
            .with_name(TopicName(s("nope")))
            .with_partitions(vec![part(0, Some(vec![1]))]),
    ]);
    let r: AlterPartitionReassignmentsResponse =
        c.call(ApiKey::AlterPartitionReassignments, 0, &req).await;
    assert_eq!(r.error_code, 0);
    let codes: Vec<i16> =
        r.responses.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect();
    let (bad, unknown) = (errors::INVALID_REPLICA_ASSIGNMENT, errors::UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(codes, [0, errors::NO_REASSIGNMENT_IN_PROGRESS, bad, bad, bad, unknown, unknown]);
    let why = r.responses[0].partitions[2].error_message.as_deref().unwrap_or_default();
    assert!(why.contains("not alive"), "{why}");
    let r: ListPartitionReassignmentsResponse = c
        .call(ApiKey::ListPartitionReassignments, 0, &ListPartitionReassignmentsRequest::default())
        .await;
    assert_eq!(r.topics.len(), 0, "a completed reassignment is not listed");
}

/// #25 item 5: DescribeLogDirs answers one log dir per bookie, with every partition that
/// has a copy there and its bytes (E=Qw=3 on three bookies: each holds all of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_dirs_are_the_bookies_with_the_partitions_they_hold() {
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    let setup = common::start(3, |c| c.log.rollover_entries = 3).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let _: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata_req(&["dirs"])).await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    for _ in 0..7 {
        let b = common::batch(5, now.as_millis() as i64);
        let req = folio_testkit::kafka::produce_request("dirs", 0, b.into(), -1);
        let r: ProduceResponse = c.call(ApiKey::Produce, 9, &req).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let info = setup.broker.partition_info("dirs", 0).await.unwrap();
    assert!(info.ledgers.len() >= 3, "{:?}", info.ledgers);
    for (version, topics) in [
        (4, None),
        (
            1,
            Some(vec![
                DescribableLogDirTopic::default()
                    .with_topic(TopicName(s("dirs")))
                    .with_partitions(vec![0, 9]),
                DescribableLogDirTopic::default()
                    .with_topic(TopicName(s("nope")))
                    .with_partitions(vec![0]),
            ]),
        ),
    ] {
        let req = DescribeLogDirsRequest::default().with_topics(topics);
        let r: DescribeLogDirsResponse = c.call(ApiKey::DescribeLogDirs, version, &req).await;
        assert_eq!(r.error_code, 0);
        assert_eq!(r.results.len(), 3, "one per bookie: {:?}", r.results);
        for d in &r.results {
            assert!(d.log_dir.ends_with(":ledgers"), "{}", d.log_dir);
            assert_eq!(d.topics.len(), 1, "{}: {:?}", d.log_dir, d.topics);
            let p = &d.topics[0].partitions;
            assert_eq!(p.len(), 1);
            assert_eq!((p[0].partition_index, p[0].offset_lag), (0, 0));
            assert_eq!(p[0].partition_size as u64, info.bytes, "{}", d.log_dir);
        }
    }
}
