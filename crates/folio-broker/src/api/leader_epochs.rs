//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends, so a consumer can
//! check after a leader change that the log it was reading was not truncated under it.
//!
//! A partition's leader epoch is its log's owner epoch (`folio_log::Epochs`): every
//! take-over (a new owner, or the same after a restart) begins the next one where its
//! first append goes. Metadata tells it (`crate::domain::epochs`), each fetched batch carries the
//! epoch its offsets were appended in, and this API answers from the log's epoch history
//! by Kafka's rules: the current epoch ends at the log end; an older one where the next
//! begins, answered as the largest recorded epoch at or below it; one above the current is
//! unknown (-1, -1). A Folio log is never truncated (each ledger has one writer, a new
//! owner fences and recovers the last ledger before appending, and acknowledged entries are
//! never dropped), so a consumer is never told an end below what it read. A
//! `current_leader_epoch` other than -1 and the partition's gets FENCED_LEADER_EPOCH
//! (older) or UNKNOWN_LEADER_EPOCH (newer), as do Fetch and ListOffsets (`check`). The
//! partition is answered by its owner (NOT_LEADER_OR_FOLLOWER elsewhere); DESCRIBE on each
//! topic, refused topic by topic.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::api::{Handler, Refused};
use crate::state::Inner;

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
                match log {
                    Err(code) => r.error_code = code,
                    Ok(log) => {
                        let status = log.status();
                        if let Some(code) =
                            super::leader_epoch_error(p.current_leader_epoch, status.epoch)
                        {
                            r.error_code = code;
                        } else if let Ok(asked) = u32::try_from(p.leader_epoch)
                            && let Some((epoch, end)) =
                                log.epochs().end_of(asked, status.end_offset)
                        {
                            r.leader_epoch = epoch as i32;
                            r.end_offset = end as i64;
                        } // else: an epoch this log never had, or -1: unknown
                    }
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
