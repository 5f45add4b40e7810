//! Fetch: read batches from each partition's managed log, patch their base offsets, and
//! long-poll (up to `max_wait_ms`) until `min_bytes` are there. As in Kafka, each round
//! reads every wanted partition once, up to its `partition_max_bytes` and what is left of
//! `max_bytes` (no batch past either, beyond a first one: KIP-74), and answers as soon as
//! the round holds `min_bytes`; a round that does not waits for any partition to grow.
//! The records are the only copy of a batch the broker makes (`batch::put_for_fetch`):
//! the answer's frame keeps them by reference (`framing::Frame`). Topics are named up to
//! v12 and addressed by topic id from v13. A fetch from inside a batch returns the whole
//! batch (clients skip the records before their offset). Each batch says the leader epoch
//! its offsets were appended in, and a partition asked with a `current_leader_epoch` other
//! than its log's gets FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer), as in
//! Kafka (`leader_epochs`). Fetch sessions (KIP-227): see
//! `fetch_sessions`; an incremental answer leaves out what did not change. Without transactions,
//! read_committed reads what read_uncommitted does and the last stable offset is the high
//! watermark.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

use bytes::BytesMut;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinSet;

use crate::api::Handler;
use crate::budget::Held;
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::batch;
use crate::domain::fetch_sessions::{Asked, Context, SessionRequest, TopicKey};
use crate::domain::topics::Topic;
use crate::errors::{self, BrokerError};
use crate::limits::ANSWER_RESERVE_MIN;
use crate::limits::BATCHES_PER_PARTITION_MAX;
use crate::limits::FETCH_WAIT_MAX;
use crate::limits::Limit;
use crate::state::Inner;

pub(crate) struct Fetch;

/// A partition the fetch reads, resolved once.
struct Want {
    topic: usize,
    partition: i32,
    offset: i64,
    max_bytes: usize,
    /// The leader epoch the client knows (-1: not checked).
    current_leader_epoch: i32,
    /// The partition (its log and transactions), or the error code it gets.
    log: Result<Arc<crate::state::Partition>, i16>,
    topic_name: Option<String>,
}

impl Handler for Fetch {
    type Request = FetchRequest;
    type Response = FetchResponse;
    const KEY: ApiKey = ApiKey::Fetch;

    async fn handle(inner: Arc<Inner>, version: i16, req: FetchRequest) -> FetchResponse {
        let started = Instant::now();
        let max_wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MAX);
        let deadline = started + max_wait;
        let min_bytes = req.min_bytes.max(0) as usize;
        let cap = inner.config.limits.fetch_bytes_max;
        if req.max_bytes <= 0 || req.max_bytes as usize > cap {
            inner.metrics.limit_hit(Limit::FetchBytes);
        }
        let max_bytes = if req.max_bytes <= 0 { cap } else { (req.max_bytes as usize).min(cap) };
        let read_committed = req.isolation_level == 1;
        let (context, asked) =
            match inner.fetch_sessions.begin(session_request(version, &req), started) {
                Ok(begun) => begun,
                Err((code, no_room)) => {
                    if no_room.is_some() {
                        inner.metrics.limit_hit(Limit::FetchSessions);
                    }
                    return FetchResponse::default().with_error_code(code);
                }
            };
        let (heads, wants) = resolve(&inner, &asked, cap).await;
        // The broker is stopping: answer with what there is (waiting again would find the
        // stop signal at once, and spin until the deadline; found by the simulator).
        let mut stopping = false;
        loop {
            let (parts, bytes, settled, held, starved) =
                read_all(&inner, &wants, max_bytes, read_committed).await;
            let now = Instant::now();
            if settled || bytes >= min_bytes || now >= deadline || stopping {
                // The answer's bytes stay reserved until the connection has written it.
                let _ = crate::api::REQUEST.try_with(|r| {
                    r.held.lock().expect("held lock").merge(held);
                });
                inner.metrics.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
                inner.metrics.fetch_latency.observe(started.elapsed());
                return answer(&inner, version, context, &asked, heads, parts, bytes);
            }
            if starved {
                // Data is there but no answer budget: retry shortly (the logs would wake
                // this at once), giving the budget back meanwhile.
                drop(held);
                let retry = (now + ANSWER_BUDGET_RETRY).min(deadline);
                tokio::time::sleep_until(retry).await;
                continue;
            }
            // Long poll: wait until any partition has more, or the deadline.
            let mut waits = JoinSet::new();
            for w in &wants {
                if let Ok(part) = &w.log {
                    // read_committed waits for the log past its end when the LSO holds
                    // it back (a marker is such an append), not for data it may not read.
                    let end = part.log.status().end_offset;
                    let offset = w.offset.max(0) as u64;
                    let offset = if read_committed { offset.max(end) } else { offset };
                    let log = part.log.clone();
                    let left = deadline - now;
                    waits.spawn(async move { log.wait_for(offset, left).await });
                }
            }
            let grown = async {
                // With nothing to wait on (no partition, or only failed ones) only the
                // deadline ends the poll: an empty set's `join_next` is ready at once.
                if waits.is_empty() {
                    std::future::pending::<()>().await;
                }
                waits.join_next().await;
            };
            let mut shutdown = inner.shutdown.subscribe();
            tokio::select! {
                _ = grown => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = shutdown.wait_for(|s| *s) => stopping = true,
            }
        }
    }

    fn error(_version: i16, req: &FetchRequest, code: i16) -> FetchResponse {
        let topics = req.topics.iter().map(|t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        });
        FetchResponse::default().with_responses(topics.collect())
    }

    error_code_of!(top, [responses => partitions]);
}

/// Resolves each asked partition's topic (once per run of the same topic) and log: the
/// answer's topic heads and the partitions to read, one per asked partition, in order.
async fn resolve(
    inner: &Arc<Inner>,
    asked: &[Asked],
    cap: usize,
) -> (Vec<FetchableTopicResponse>, Vec<Want>) {
    let mut heads = Vec::new();
    // Each asked partition's topic (or error code) and the index of its head.
    let mut topics: Vec<(Result<Arc<Topic>, i16>, usize)> = Vec::with_capacity(asked.len());
    let mut current: Option<(&TopicKey, Result<Arc<Topic>, i16>)> = None;
    for a in asked {
        if current.as_ref().is_none_or(|(k, _)| **k != a.topic) {
            let (topic, head) = match &a.topic {
                TopicKey::Id(id) => {
                    let t = inner.topics.by_id(*id).await;
                    let t = t.map_err(|_| errors::KAFKA_STORAGE_ERROR);
                    let head = FetchableTopicResponse::default().with_topic_id(*id);
                    (t.and_then(|t| t.ok_or(errors::UNKNOWN_TOPIC_ID)), head)
                }
                TopicKey::Name(name) => {
                    let t = inner.topics.get(name).await;
                    let t = t.map_err(|_| errors::KAFKA_STORAGE_ERROR);
                    let topic_name = TopicName(StrBytes::from_string(name.clone()));
                    let head = FetchableTopicResponse::default().with_topic(topic_name);
                    (t.and_then(|t| t.ok_or(errors::UNKNOWN_TOPIC_OR_PARTITION)), head)
                }
            };
            let topic = topic.and_then(|t| {
                let ok = super::allowed(inner, Operation::Read, ResourceType::Topic, &t.name);
                if ok { Ok(t) } else { Err(errors::TOPIC_AUTHORIZATION_FAILED) }
            });
            heads.push(head);
            current = Some((&a.topic, topic));
        }
        let Some((_, topic)) = &current else { continue };
        topics.push((topic.clone(), heads.len() - 1));
    }
    // Closed partitions open together, not one after another.
    let closed = asked.iter().zip(&topics);
    let closed = closed.filter_map(|(a, (t, _))| Some((t.as_ref().ok()?, a.partition)));
    let failed = inner.open_all(closed).await;
    let mut wants: Vec<Want> = Vec::with_capacity(asked.len());
    for (a, (topic, head)) in asked.iter().zip(topics) {
        let log = match &topic {
            Err(code) => Err(*code),
            Ok(topic) => match failed.get(&(topic.record.id, a.partition)) {
                Some(e) => Err(open_failed(topic, a.partition, e.clone())),
                None => open(inner, topic, a.partition).await,
            },
        };
        wants.push(Want {
            topic: head,
            partition: a.partition,
            offset: a.fetch_offset,
            max_bytes: (a.max_bytes.max(0) as usize).min(cap),
            current_leader_epoch: a.current_leader_epoch,
            log,
            topic_name: topic.as_ref().ok().map(|t| t.name.clone()),
        });
    }
    (heads, wants)
}

/// The answer to a fetch: every partition, or (incremental) those with records, an error,
/// or a high watermark or log start offset its session's last answer did not tell; a full
/// fetch asking for a session opens it here.
fn answer(
    inner: &Inner,
    version: i16,
    context: Context,
    asked: &[Asked],
    mut heads: Vec<FetchableTopicResponse>,
    parts: Vec<(usize, PartitionData)>,
    bytes: usize,
) -> FetchResponse {
    // What the answer tells of each partition, kept by a session (none without one).
    let told = || -> Vec<(TopicKey, i32, i64, i64)> {
        let each = asked.iter().zip(&parts);
        each.map(|(a, (_, p))| (a.topic.clone(), a.partition, p.high_watermark, p.log_start_offset))
            .collect()
    };
    let incremental = matches!(context, Context::Incremental { .. });
    let session_id = match context {
        Context::Sessionless => 0,
        Context::Open => inner
            .fetch_sessions
            .open(version, asked, &told(), Instant::now())
            .unwrap_or_else(|_| {
                inner.metrics.limit_hit(Limit::FetchSessions);
                0
            }),
        Context::Incremental { id } => {
            inner.fetch_sessions.told(id, &told());
            id
        }
    };
    for (a, (head, p)) in asked.iter().zip(parts) {
        let news = p.error_code != 0
            || p.records.as_ref().is_some_and(|r| !r.is_empty())
            || a.told != Some((p.high_watermark, p.log_start_offset));
        if !incremental || news {
            heads[head].partitions.push(p);
        }
    }
    if incremental {
        heads.retain(|h| !h.partitions.is_empty());
    }
    let throttle = super::quotas::throttle(inner, crate::domain::quotas::Kind::Fetch, bytes);
    FetchResponse::default()
        .with_session_id(session_id)
        .with_responses(heads)
        .with_throttle_time_ms(throttle)
}

async fn open(
    inner: &Inner,
    topic: &Topic,
    partition: i32,
) -> Result<Arc<crate::state::Partition>, i16> {
    if partition < 0 || partition >= topic.record.partitions as i32 {
        return Err(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    inner.partition(topic, partition).await.map_err(|e| open_failed(topic, partition, e))
}

/// The error code of a partition that failed to open for a fetch (logged).
fn open_failed(topic: &Topic, partition: i32, e: folio_log::LogError) -> i16 {
    tracing::warn!(topic = %topic.name, partition, error = %e, "opening a partition for fetch failed");
    BrokerError::from(e).code()
}

/// How long a long-polling Fetch that found data but no answer budget waits to try again.
const ANSWER_BUDGET_RETRY: Duration = Duration::from_millis(20);

/// Reserves answer bytes for a read of up to `want` from the connection's budget and the
/// answer budget (see `crate::limits`): all of it if free now, else the largest power-of-two
/// share down to [`ANSWER_RESERVE_MIN`]; never waits. Returns the bytes reserved with them.
/// Outside a connection (no request scope) nothing is counted.
fn reserve(want: usize) -> Option<(Held, usize)> {
    let Ok(budgets) = crate::api::REQUEST.try_with(|r| r.budgets.clone()) else {
        return Some((Held::default(), want));
    };
    let mut ask = want;
    loop {
        if let Some(h) = budgets.try_reserve_answer(ask) {
            return Some((h, ask));
        }
        if ask <= ANSWER_RESERVE_MIN {
            return None;
        }
        ask = (ask / 2).max(ANSWER_RESERVE_MIN);
    }
}

/// The error a fetch at `offset` gets from a log that will not grow here again (closed as
/// the partition moved, fenced by its next owner, deleted) with nothing left to read below
/// `readable_end` (its end, or read_committed's last stable offset, which no marker moves
/// on a log that takes no appends): the client must look elsewhere, not wait on it
/// (waiting would return at once and spin until the deadline; found by the simulator, at
/// the end first, then, with transactions, below an open transaction's first offset).
fn will_not_grow(status: &folio_log::LogStatus, offset: i64, readable_end: i64) -> Option<i16> {
    if !status.state.is_final() || offset < readable_end {
        return None;
    }
    Some(if status.state == folio_log::LogState::Deleted {
        errors::UNKNOWN_TOPIC_OR_PARTITION
    } else {
        errors::NOT_LEADER_OR_FOLLOWER
    })
}

/// Reads every wanted partition once. Returns the partitions' answers (with the index of
/// their topic), the record bytes read, whether an error makes waiting pointless, and the
/// answer bytes reserved, and whether a partition with data went unread for want of answer
/// budget (it is then answered without records; the client fetches again).
async fn read_all(
    inner: &Inner,
    wants: &[Want],
    max_bytes: usize,
    read_committed: bool,
) -> (Vec<(usize, PartitionData)>, usize, bool, Held, bool) {
    let mut out = Vec::with_capacity(wants.len());
    let mut total = 0usize;
    let mut settled = false;
    let mut held = Held::default();
    let mut starved = false;
    for w in wants {
        let mut p = PartitionData::default().with_partition_index(w.partition);
        p.aborted_transactions = read_committed.then(Vec::new);
        let (log, txns) = match &w.log {
            Err(code) => {
                settled = true;
                out.push((w.topic, p.with_error_code(*code)));
                continue;
            }
            Ok(part) => (&part.log, &part.txns),
        };
        let status = log.status();
        if let Some(code) = super::leader_epoch_error(w.current_leader_epoch, status.epoch) {
            settled = true;
            out.push((w.topic, p.with_error_code(code)));
            continue;
        }
        p.high_watermark = status.end_offset as i64;
        let (lso, aborted) = {
            let t = txns.lock().expect("txns lock");
            let lso = t.last_stable_offset(status.end_offset as i64);
            // Compaction dropped the aborted transactions below the clean end whole, markers
            // included: telling of one would leave its producer's later batches skipped.
            let from = w.offset.max(log.clean_end_offset() as i64);
            (lso, read_committed.then(|| t.aborted_between(from, lso)))
        };
        // read_committed reads below the last stable offset only.
        let readable = if read_committed { lso } else { status.end_offset as i64 };
        if let Some(code) = will_not_grow(&status, w.offset, readable) {
            settled = true;
            out.push((w.topic, p.with_error_code(code)));
            continue;
        }
        p.last_stable_offset = lso;
        p.log_start_offset = status.start_offset as i64;
        let readable_end = readable as u64;
        if w.offset < status.start_offset as i64 || w.offset > status.end_offset as i64 {
            settled = true;
            out.push((w.topic, p.with_error_code(errors::OFFSET_OUT_OF_RANGE)));
            continue;
        }
        // KIP-74: the first batch of the answer goes out even when it is above the limits.
        let room = w.max_bytes.min(max_bytes.saturating_sub(total));
        let reserved = if (w.offset as u64) < readable_end && (room > 0 || total == 0) {
            let r = reserve(room.max(1));
            starved |= r.is_none();
            r
        } else {
            None
        };
        if let Some((reserved, room)) = reserved {
            held.merge(reserved);
            let read_started = Instant::now();
            match log.read(w.offset as u64, room.max(1), BATCHES_PER_PARTITION_MAX).await {
                Ok(entries) => {
                    let records = answer_records(log, entries, room, total > 0, readable_end);
                    total += records.len();
                    // Keep what the records take (the first batch may exceed the room:
                    // KIP-74; it is then over the budget by at most that batch).
                    held.release_answer(room.max(1).saturating_sub(records.len()));
                    if let Some(name) = &w.topic_name {
                        let m = inner.metrics.topic(name);
                        m.bytes_out.fetch_add(records.len() as u64, Ordering::Relaxed);
                        m.fetch_latency.observe(read_started.elapsed());
                    }
                    p.records = Some(records.freeze());
                    if let Some(aborted) = &aborted {
                        let answer = |a: &crate::domain::txn::partition::AbortedTxn| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(a.producer_id))
                                .with_first_offset(a.first_offset)
                        };
                        p.aborted_transactions = Some(aborted.iter().map(answer).collect());
                    }
                }
                Err(e) => {
                    settled = true;
                    held.release_answer(room.max(1));
                    tracing::warn!(log = log.name(), offset = w.offset, error = %e, "fetch read failed");
                    p.error_code = BrokerError::from(e).code();
                }
            }
        }
        out.push((w.topic, p));
    }
    (out, total, settled, held, starved)
}

/// The batches of `entries` a partition's answer carries: within `room` (the first may
/// exceed it when nothing else is in the answer, `others` false: KIP-74), below
/// `readable_end` (read_committed's last stable offset), each with its offset and leader
/// epoch patched in.
fn answer_records(
    log: &folio_log::ManagedLog,
    entries: Vec<folio_log::LogEntry>,
    room: usize,
    others: bool,
    readable_end: u64,
) -> BytesMut {
    let epochs = log.epochs();
    let mut records = BytesMut::new();
    for e in entries {
        if e.base_offset >= readable_end {
            break;
        }
        if !records.is_empty() && records.len() + e.payload.len() > room {
            break;
        }
        if records.is_empty() && others && e.payload.len() > room {
            break;
        }
        if e.payload.len() < batch::HEADER_BYTES {
            tracing::warn!(
                log = log.name(),
                offset = e.base_offset,
                "skipping a stored batch shorter than a batch header"
            );
            continue;
        }
        batch::put_for_fetch(&mut records, &e.payload, e.base_offset, &epochs);
    }
    records
}

/// The session part of a Fetch, in the domain's terms: the partitions it lists (in its
/// order) and forgets.
fn session_request(version: i16, req: &FetchRequest) -> SessionRequest {
    let mut asked = Vec::new();
    for t in &req.topics {
        let key = TopicKey::of(version, t.topic.as_str(), t.topic_id);
        for p in &t.partitions {
            asked.push(Asked {
                topic: key.clone(),
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                told: None,
            });
        }
    }
    let mut forgotten = Vec::new();
    for t in &req.forgotten_topics_data {
        let key = TopicKey::of(version, t.topic.as_str(), t.topic_id);
        forgotten.extend(t.partitions.iter().map(|p| (key.clone(), *p)));
    }
    SessionRequest {
        id: req.session_id,
        epoch: req.session_epoch,
        by_id: version >= 13,
        asked,
        forgotten,
    }
}
