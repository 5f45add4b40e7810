//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends, so a consumer can
//! check after a leader change that the log it was reading was not truncated under it.
//!
//! A Folio log is never truncated: each ledger has one writer, a new owner fences and
//! recovers the last ledger before appending, and acknowledged entries are never dropped.
//! So every batch is in leader epoch 0, the only epoch there is (Metadata, ListOffsets and
//! fetched batches all say 0), and its end is the log end offset. The answers follow
//! Kafka's rules for a log with that one epoch: `current_leader_epoch` other than -1 and 0
//! gets FENCED_LEADER_EPOCH (below) or UNKNOWN_LEADER_EPOCH (above); epoch 0 ends at the
//! log end; any other epoch is unknown (-1, -1). The partition is answered by its owner
//! (NOT_LEADER_OR_FOLLOWER elsewhere); DESCRIBE on each topic, refused topic by topic.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::api::{Handler, Refused};
use crate::errors;
use crate::state::Inner;

/// The one leader epoch of every Folio partition.
pub const LEADER_EPOCH: i32 = 0;

pub(crate) struct OffsetForLeaderEpoch;

impl Handler for OffsetForLeaderEpoch {
    type Request = OffsetForLeaderEpochRequest;
    type Response = OffsetForLeaderEpochResponse;
    const KEY: ApiKey = ApiKey::OffsetForLeaderEpoch;

    refuse_each!(
        topics => topics,
        Describe on Topic,
        TOPIC_AUTHORIZATION_FAILED,
        |t| t.topic.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: OffsetForLeaderEpochRequest,
    ) -> OffsetForLeaderEpochResponse {
        let mut resp = OffsetForLeaderEpochResponse::default();
        for t in req.topics {
            let mut out = OffsetForLeaderTopicResult::default().with_topic(t.topic.clone());
            for p in t.partitions {
                let mut r = EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1);
                let log =
                    super::offsets::partition_log(&inner, t.topic.as_str(), p.partition).await;
                match (log, p.current_leader_epoch) {
                    (Err(code), _) => r.error_code = code,
                    (Ok(_), e) if e != -1 && e < LEADER_EPOCH => {
                        r.error_code = errors::FENCED_LEADER_EPOCH;
                    }
                    (Ok(_), e) if e > LEADER_EPOCH => r.error_code = errors::UNKNOWN_LEADER_EPOCH,
                    (Ok(log), _) if p.leader_epoch == LEADER_EPOCH => {
                        r.leader_epoch = LEADER_EPOCH;
                        r.end_offset = log.status().end_offset as i64;
                    }
                    (Ok(_), _) => {} // an epoch this log never had: unknown
                }
                out.partitions.push(r);
            }
            resp.topics.push(out);
        }
        resp
    }

    fn error(
        _version: i16,
        req: &OffsetForLeaderEpochRequest,
        code: i16,
    ) -> OffsetForLeaderEpochResponse {
        let topics = req.topics.iter().map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_error_code(code)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1)
            });
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic.clone())
                .with_partitions(partitions.collect())
        });
        OffsetForLeaderEpochResponse::default().with_topics(topics.collect())
    }

    error_code_of!([topics => partitions]);
}
