//! Hostile input over the Kafka listener (issue #21, first cases): a request whose names
//! are far above every limit gets a clear error, and the broker and its metadata store go
//! on serving everyone else.

// Kafka's wire format is big-endian (the shared test helpers build batches).
#![allow(clippy::big_endian_bytes)]

mod common;

use common::*;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// librdkafka sends an OffsetCommit whose group id is 30 000 '/' without complaint. It once
/// panicked the embedded metadata store (fjall refuses 64 KiB keys) while its state lock
/// was held, and every later metadata write failed until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_commit_with_a_huge_group_id_is_refused_and_the_store_keeps_working() {
    let s = start(1, |_| {}).await;
    let mut c = Conn::open(s.broker.addr()).await;
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            7,
            &folio_broker::client::create_topics_request(&["t".into()], 1),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0);
    let commit = |group: String| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(1),
                    ]),
            ])
    };
    let r: OffsetCommitResponse =
        c.call(ApiKey::OffsetCommit, 7, &commit("/".repeat(30_000))).await;
    assert_eq!(r.topics[0].partitions[0].error_code, folio_broker::errors::INVALID_GROUP_ID);
    // The store takes writes: a new topic, an ordinary commit, a group id at the limit.
    let r: CreateTopicsResponse = c
        .call(
            ApiKey::CreateTopics,
            7,
            &folio_broker::client::create_topics_request(&["u".into()], 1),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0, "metadata writes still work");
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit("g".into())).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    let limit = folio_broker::group::GROUP_ID_BYTES_MAX;
    let r: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 7, &commit("/".repeat(limit))).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0, "a group id of {limit} '/' is fine");
}
