//! #50 item 2, KIP-932 on the wire: a share group's state survives its partition's owner
//! (a second broker takes over and goes on from the last acknowledgement), group configs
//! set the reset and the lock, and the admin APIs describe, alter and delete the start
//! offsets of an empty group only.

use crate::common;

use common::{Conn, batch, metadata_req, produce_req, produced};
use folio_broker::errors;
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.into())
}

async fn topic_id(c: &mut Conn, topic: &str) -> Uuid {
    let r: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_req(&[topic])).await;
    r.topics[0].topic_id
}

async fn set_group_config(c: &mut Conn, group: &str, key: &str, value: &str) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::*;
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(s(group))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s(key))
                    .with_config_operation(0)
                    .with_value(Some(s(value))),
            ]),
    ]);
    let r: IncrementalAlterConfigsResponse = c.call(ApiKey::IncrementalAlterConfigs, 1, &req).await;
    r.responses[0].error_code
}

async fn heartbeat(
    c: &mut Conn,
    group: &str,
    member: &str,
    epoch: i32,
) -> ShareGroupHeartbeatResponse {
    let req = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s("t"))]));
    c.call(ApiKey::ShareGroupHeartbeat, 1, &req).await
}

/// A ShareFetch at session `epoch` opening the session on (`id`, 0): the acquired ranges
/// (first, last, delivery count) and the top-level code.
async fn fetch(
    c: &mut Conn,
    group: &str,
    member: &str,
    epoch: i32,
    id: Uuid,
) -> (i16, Vec<(i64, i64, i16)>) {
    let topics = if epoch == 0 {
        let part = vec![FetchPartition::default()];
        vec![FetchTopic::default().with_topic_id(id).with_partitions(part)]
    } else {
        Vec::new()
    };
    let req = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(500)
        .with_max_bytes(1 << 20)
        .with_max_records(100)
        .with_topics(topics);
    let r: ShareFetchResponse = c.call(ApiKey::ShareFetch, 1, &req).await;
    let ranges = r
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .flat_map(|p| &p.acquired_records)
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    (r.error_code, ranges)
}

async fn ack(
    c: &mut Conn,
    group: &str,
    member: &str,
    epoch: i32,
    id: Uuid,
    batches: &[(i64, i64, i8)],
) -> i16 {
    let req = ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default().with_topic_id(id).with_partitions(vec![
            AcknowledgePartition::default().with_acknowledgement_batches(
                batches
                    .iter()
                    .map(|(f, l, t)| {
                        AckBatch::default()
                            .with_first_offset(*f)
                            .with_last_offset(*l)
                            .with_acknowledge_types(vec![*t])
                    })
                    .collect(),
            ),
        ])]);
    let r: ShareAcknowledgeResponse = c.call(ApiKey::ShareAcknowledge, 1, &req).await;
    if r.error_code != 0 {
        return r.error_code;
    }
    r.responses[0].partitions[0].error_code
}

async fn start_offset(c: &mut Conn, group: &str) -> Vec<i64> {
    use kafka_protocol::messages::describe_share_group_offsets_request::*;
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default().with_group_id(GroupId(s(group))),
    ]);
    let r: DescribeShareGroupOffsetsResponse =
        c.call(ApiKey::DescribeShareGroupOffsets, 0, &req).await;
    assert_eq!(r.groups[0].error_code, 0);
    r.groups[0].topics.iter().flat_map(|t| &t.partitions).map(|p| p.start_offset).collect()
}

async fn alter_start(c: &mut Conn, group: &str, offset: i64) -> i16 {
    use kafka_protocol::messages::alter_share_group_offsets_request::*;
    let req = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(vec![
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(TopicName(s("t")))
                .with_partitions(vec![
                    AlterShareGroupOffsetsRequestPartition::default().with_start_offset(offset),
                ]),
        ]);
    let r: AlterShareGroupOffsetsResponse = c.call(ApiKey::AlterShareGroupOffsets, 0, &req).await;
    if r.error_code != 0 {
        return r.error_code;
    }
    r.responses[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_goes_on_from_its_last_acknowledgement_on_a_new_owner() {
    let setup = common::start(1, |_| {}).await;
    let mut c = Conn::open(setup.broker.addr()).await;
    let id = topic_id(&mut c, "t").await;
    let r: ProduceResponse =
        c.call(ApiKey::Produce, 9, &produce_req("t", 0, batch(10, 1), -1)).await;
    assert_eq!(produced(&r), (0, 0));
    // Without a reset the group would start at the end and see nothing.
    assert_eq!(set_group_config(&mut c, "g", "share.auto.offset.reset", "earliest").await, 0);
    assert_eq!(
        set_group_config(&mut c, "g", "share.auto.offset.reset", "soonest").await,
        errors::INVALID_CONFIG
    );
    let h = heartbeat(&mut c, "g", "m1", 0).await;
    assert_eq!((h.error_code, h.assignment.map(|a| a.topic_partitions.len())), (0, Some(1)));
    let (code, got) = fetch(&mut c, "g", "m1", 0, id).await;
    assert_eq!((code, got), (0, vec![(0, 9, 1)]));
    // Another member finds nothing to take while m1 holds every record.
    let (_, other) = fetch(&mut c, "g", "m2", 0, id).await;
    assert!(other.is_empty(), "{other:?}");
    // m1 accepts 0..=3 and releases 4..=9; acknowledging what it does not hold fails.
    assert_eq!(ack(&mut c, "g", "m1", 1, id, &[(0, 3, 1), (4, 9, 2)]).await, 0);
    assert_eq!(ack(&mut c, "g", "m1", 2, id, &[(0, 0, 1)]).await, errors::INVALID_RECORD_STATE);
    assert_eq!(start_offset(&mut c, "g").await, vec![4]);
    // The admin APIs refuse to move a group with members.
    assert_eq!(alter_start(&mut c, "g", 0).await, errors::NON_EMPTY_GROUP);
    // The partition's next owner: a second broker on the same store, the first gone.
    setup.broker.shutdown().await;
    let two = common::broker_on(&setup.cluster, |c| c.node_id = 2).await;
    let mut c2 = Conn::open(two.addr()).await;
    let (code, got) = fetch(&mut c2, "g", "m1", 0, id).await;
    assert_eq!((code, got), (0, vec![(4, 9, 2)]), "released records come back, counted");
    assert_eq!(ack(&mut c2, "g", "m1", 1, id, &[(4, 9, 1)]).await, 0);
    assert_eq!(start_offset(&mut c2, "g").await, vec![10]);
    // Empty now (m1 leaves): the start can be moved back and the records come again.
    let h = heartbeat(&mut c2, "g", "m1", 0).await;
    assert_eq!(heartbeat(&mut c2, "g", "m1", h.member_epoch).await.error_code, 0);
    assert_eq!(heartbeat(&mut c2, "g", "m1", -1).await.error_code, 0);
    let close = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s("g"))))
        .with_member_id(Some(s("m1")))
        .with_share_session_epoch(-1);
    let _: ShareFetchResponse = c2.call(ApiKey::ShareFetch, 1, &close).await;
    assert_eq!(alter_start(&mut c2, "g", 8).await, 0);
    let (_, got) = fetch(&mut c2, "g", "m3", 0, id).await;
    assert_eq!(got, vec![(8, 9, 1)]);
    // A session epoch out of turn is refused.
    let (code, _) = fetch(&mut c2, "g", "m3", 5, id).await;
    assert_eq!(code, errors::INVALID_SHARE_SESSION_EPOCH);
    two.shutdown().await;
}
