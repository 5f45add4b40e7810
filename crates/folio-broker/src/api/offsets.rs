//! ListOffsets (earliest, latest, max timestamp, by time) and DeleteRecords (move the log
//! start offset).
//!
//! Lookups by time are per batch: the answer is the first batch whose (running maximum)
//! timestamp is at or after the one asked for, and its timestamp. A consumer that seeks
//! there reads that whole batch, so it may see records just before the time asked for.

use std::sync::Arc;

use folio_log::ManagedLog;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
};

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::api::{Handler, Refused};
use crate::domain::acl::Operation;
use crate::errors::{self, BrokerError};
use crate::state::Inner;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;

/// The log of a partition named in a request, or the error code it gets.
pub(super) async fn partition_log(
    inner: &Inner,
    topic: &str,
    partition: i32,
) -> Result<ManagedLog, i16> {
    Ok(owned_partition(inner, topic, partition).await?.log.clone())
}

/// A partition named in a request, opened here (its owner), or the error code it gets:
/// UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER when another broker owns it, …
pub(super) async fn owned_partition(
    inner: &Inner,
    topic: &str,
    partition: i32,
) -> Result<Arc<crate::state::Partition>, i16> {
    let t = match inner.topics.get(topic).await {
        Ok(Some(t)) => t,
        Ok(None) => return Err(errors::UNKNOWN_TOPIC_OR_PARTITION),
        Err(e) => return Err(BrokerError::from(e).code()),
    };
    if partition < 0 || partition >= t.record.partitions as i32 {
        return Err(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    inner.partition(&t, partition).await.map_err(|e| BrokerError::from(e).code())
}

pub(crate) struct ListOffsets;

impl Handler for ListOffsets {
    type Request = ListOffsetsRequest;
    type Response = ListOffsetsResponse;
    const KEY: ApiKey = ApiKey::ListOffsets;

    refuse_each!(
        topics => topics,
        Describe on Topic,
        TOPIC_AUTHORIZATION_FAILED,
        |t| t.name.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: ListOffsetsRequest,
    ) -> ListOffsetsResponse {
        let mut resp = ListOffsetsResponse::default();
        for t in req.topics {
            let mut out = ListOffsetsTopicResponse::default().with_name(t.name.clone());
            for p in t.partitions {
                let mut r =
                    ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
                let part = owned_partition(&inner, t.name.as_str(), p.partition_index).await;
                let checked = part.and_then(|part| {
                    let epoch = part.log.status().epoch;
                    let current = if version >= 4 { p.current_leader_epoch } else { -1 };
                    super::leader_epoch_error(current, epoch).map_or(Ok(part), Err)
                });
                match checked {
                    Err(code) => r.error_code = code,
                    // read_committed's latest offset is the last stable offset (v2+).
                    Ok(part) if p.timestamp == LATEST && req.isolation_level == 1 => {
                        let end = part.log.status().end_offset as i64;
                        r.offset = part.txns.lock().expect("txns lock").last_stable_offset(end);
                        r.timestamp = -1;
                        if version >= 4 {
                            r.leader_epoch = epoch_at(&part.log, r.offset);
                        }
                    }
                    Ok(part) => match lookup(&part.log, p.timestamp).await {
                        Ok((offset, ts)) => {
                            r.offset = offset;
                            r.timestamp = ts;
                            if version >= 4 {
                                r.leader_epoch = epoch_at(&part.log, offset);
                            }
                        }
                        Err(code) => r.error_code = code,
                    },
                }
                out.partitions.push(r);
            }
            resp.topics.push(out);
        }
        resp
    }

    fn error(_version: i16, req: &ListOffsetsRequest, code: i16) -> ListOffsetsResponse {
        let topics = req.topics.iter().map(|t| {
            ListOffsetsTopicResponse::default().with_name(t.name.clone()).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        });
        ListOffsetsResponse::default().with_topics(topics.collect())
    }

    error_code_of!([topics => partitions]);
}

/// The leader epoch ListOffsets tells with `offset` (Kafka's): the current epoch at the
/// log end, else the epoch the offset was appended in; -1 with no offset.
fn epoch_at(log: &ManagedLog, offset: i64) -> i32 {
    let status = log.status();
    match u64::try_from(offset) {
        Err(_) => -1,
        Ok(o) if o >= status.end_offset => status.epoch as i32,
        Ok(o) => log.epochs().epoch_of(o) as i32,
    }
}

/// (offset, timestamp) for a ListOffsets timestamp; (-1, -1) when no record qualifies. A
/// time resolves to its first record at or after it (the batch's records decoded:
/// `records::first_at_or_after`), never to an earlier record of the same batch.
async fn lookup(log: &ManagedLog, timestamp: i64) -> Result<(i64, i64), i16> {
    let status = log.status();
    let start = status.start_offset;
    // The first record at or after `ts` in the batch holding `offset`.
    let at = |offset: u64, ts: i64| async move {
        let entries = log.read(offset, 1, 1).await.map_err(|e| BrokerError::from(e).code())?;
        let Some(e) = entries.first() else { return Ok((offset as i64, -1)) };
        let from = i32::try_from(start.saturating_sub(e.base_offset)).unwrap_or(i32::MAX);
        match crate::domain::records::first_at_or_after(&e.payload, from, ts) {
            Ok(Some((delta, record_ts))) => {
                Ok(((e.base_offset + delta.max(0) as u64) as i64, record_ts))
            }
            Ok(None) => Ok((offset as i64, e.max_timestamp)),
            Err(err) => {
                tracing::warn!(log = log.name(), offset = e.base_offset, error = %err, "a stored batch's records do not decode: answering its first offset");
                Ok((offset as i64, e.max_timestamp))
            }
        }
    };
    match timestamp {
        LATEST => Ok((status.end_offset as i64, -1)),
        EARLIEST => Ok((start as i64, -1)),
        MAX_TIMESTAMP => {
            let max = log.info().ledgers.iter().map(|l| l.max_publish_ms).max().unwrap_or(-1);
            if max < 0 || status.end_offset == start {
                return Ok((-1, -1));
            }
            match log.offset_for_timestamp(max).await {
                Ok(Some(o)) => at(o.max(start), max).await,
                Ok(None) => Ok((-1, -1)),
                Err(e) => Err(BrokerError::from(e).code()),
            }
        }
        ts if ts < 0 => Err(errors::INVALID_REQUEST),
        ts => match log.offset_for_timestamp(ts).await {
            Ok(Some(o)) if o < status.end_offset => at(o.max(start), ts).await,
            Ok(_) => Ok((-1, -1)),
            Err(e) => Err(BrokerError::from(e).code()),
        },
    }
}

pub(crate) struct DeleteRecords;

impl Handler for DeleteRecords {
    type Request = DeleteRecordsRequest;
    type Response = DeleteRecordsResponse;
    const KEY: ApiKey = ApiKey::DeleteRecords;

    refuse_each!(
        topics => topics,
        Delete on Topic,
        TOPIC_AUTHORIZATION_FAILED,
        |t| t.name.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DeleteRecordsRequest,
    ) -> DeleteRecordsResponse {
        let mut resp = DeleteRecordsResponse::default();
        for t in req.topics {
            let mut out = DeleteRecordsTopicResult::default().with_name(t.name.clone());
            for p in t.partitions {
                let mut r = DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(-1);
                match partition_log(&inner, t.name.as_str(), p.partition_index).await {
                    Err(code) => r.error_code = code,
                    Ok(log) => {
                        let end = log.end_offset() as i64;
                        // -1: up to the high watermark.
                        let offset = if p.offset == -1 { end } else { p.offset };
                        if offset < 0 || offset > end {
                            r.error_code = errors::OFFSET_OUT_OF_RANGE;
                        } else {
                            match log.delete_records(offset as u64).await {
                                Ok(start) => {
                                    tracing::info!(
                                        log = log.name(),
                                        offset,
                                        start,
                                        "records deleted"
                                    );
                                    r.low_watermark = start as i64;
                                }
                                Err(e) => r.error_code = BrokerError::from(e).code(),
                            }
                        }
                    }
                }
                out.partitions.push(r);
            }
            resp.topics.push(out);
        }
        resp
    }

    fn error(_version: i16, req: &DeleteRecordsRequest, code: i16) -> DeleteRecordsResponse {
        let topics = req.topics.iter().map(|t| {
            DeleteRecordsTopicResult::default().with_name(t.name.clone()).with_partitions(
                t.partitions
                    .iter()
                    .map(|p| {
                        DeleteRecordsPartitionResult::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        });
        DeleteRecordsResponse::default().with_topics(topics.collect())
    }

    error_code_of!([topics => partitions]);
}

pub(crate) struct OffsetDelete;

impl Handler for OffsetDelete {
    type Request = OffsetDeleteRequest;
    type Response = OffsetDeleteResponse;
    const KEY: ApiKey = ApiKey::OffsetDelete;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Delete, &req.group_id)
    }

    refuse_each!(
        topics => topics,
        Read on Topic,
        TOPIC_AUTHORIZATION_FAILED,
        |t| t.name.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: OffsetDeleteRequest,
    ) -> OffsetDeleteResponse {
        let group = req.group_id.as_str();
        if let Some(code) = super::groups::elsewhere(&inner, group) {
            return Self::error(version, &req, code);
        }
        let mut parts = Vec::new();
        for t in &req.topics {
            let id = inner.topics.get(t.name.as_str()).await.ok().flatten().map(|t| t.record.id);
            for p in &t.partitions {
                parts.push((t.name.as_str().to_string(), id, p.partition_index));
            }
        }
        match inner.groups.delete_offsets(group, &parts).await {
            Ok(codes) => {
                let mut resp = Self::error(version, &req, 0);
                let cells = resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut());
                for (cell, code) in cells.zip(codes) {
                    cell.error_code = code;
                }
                resp
            }
            Err(code) => OffsetDeleteResponse::default().with_error_code(code),
        }
    }

    /// `code` for the group and for every partition (the refused parts' answer keeps only
    /// the partitions' codes: `merge`).
    fn error(_version: i16, req: &OffsetDeleteRequest, code: i16) -> OffsetDeleteResponse {
        let topics = req.topics.iter().map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
            });
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions.collect())
        });
        OffsetDeleteResponse::default().with_error_code(code).with_topics(topics.collect())
    }

    error_code_of!(top, [topics => partitions]);
}
