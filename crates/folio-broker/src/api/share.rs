//! Share groups on the wire (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe (the
//! coordinator: `domain::group::share`), ShareFetch and ShareAcknowledge (the partitions'
//! owner: `domain::share`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::share_acknowledge_response as ack_resp;
use kafka_protocol::messages::share_fetch_response as fetch_resp;
use kafka_protocol::messages::share_group_describe_response as describe;
use kafka_protocol::messages::share_group_heartbeat_response as beat;
use kafka_protocol::messages::*;
use uuid::Uuid;

use super::consumer_groups::group_ms;
use super::groups::{elsewhere, s};
use crate::api::{Handler, Refused, str_bytes};
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::batch;
use crate::domain::group::share::ShareHeartbeat;
use crate::domain::share::{Ack, Limits, Reset, SessionStep};
use crate::errors;
use crate::limits::{BATCHES_PER_PARTITION_MAX, SHARE_FETCH_WAIT_MAX};
use crate::state::Inner;

pub(crate) struct ShareGroupHeartbeat;

impl Handler for ShareGroupHeartbeat {
    type Request = ShareGroupHeartbeatRequest;
    type Response = ShareGroupHeartbeatResponse;
    const KEY: ApiKey = ApiKey::ShareGroupHeartbeat;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: Self::Request) -> Self::Response {
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        let scope =
            super::REQUEST.try_with(|r| (r.client_id.to_string(), r.session.host.to_string()));
        let (client_id, client_host) = scope.unwrap_or_default();
        let h = ShareHeartbeat {
            group: s(&req.group_id).to_string(),
            member_id: req.member_id.as_str().to_string(),
            epoch: req.member_epoch,
            rack: req.rack_id.as_ref().map(|r| r.as_str().to_string()),
            names: req
                .subscribed_topic_names
                .as_ref()
                .map(|ns| ns.iter().map(|n| n.as_str().to_string()).collect()),
            client_id,
            client_host,
            session_timeout: group_ms(&inner, s(&req.group_id), "share.session.timeout.ms").await,
            heartbeat_interval: group_ms(&inner, s(&req.group_id), "share.heartbeat.interval.ms")
                .await,
        };
        let lookup = super::CachedTopics { inner: &inner };
        let a = inner.groups.share_heartbeat(&h, &lookup);
        let mut resp = ShareGroupHeartbeatResponse::default()
            .with_error_code(a.error)
            .with_error_message(a.message.map(str_bytes))
            .with_member_epoch(a.epoch)
            .with_heartbeat_interval_ms(a.interval_ms);
        if a.error == errors::NONE {
            resp.member_id = Some(str_bytes(a.member_id));
        }
        resp.assignment = a.assignment.map(|ps| {
            beat::Assignment::default().with_topic_partitions(
                ps.into_iter()
                    .map(|(t, set)| {
                        beat::TopicPartitions::default()
                            .with_topic_id(t)
                            .with_partitions(set.into_iter().collect())
                    })
                    .collect(),
            )
        });
        resp
    }

    fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
        ShareGroupHeartbeatResponse::default().with_error_code(code)
    }

    error_code_of!(top);
}

pub(crate) struct ShareGroupDescribe;

impl Handler for ShareGroupDescribe {
    type Request = ShareGroupDescribeRequest;
    type Response = ShareGroupDescribeResponse;
    const KEY: ApiKey = ApiKey::ShareGroupDescribe;

    refuse_each!(
        group_ids => groups,
        Describe on Group,
        GROUP_AUTHORIZATION_FAILED,
        |g| g.as_str()
    );

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        let names: HashMap<Uuid, String> =
            inner.topics.cached_all().iter().map(|t| (t.record.id, t.name.clone())).collect();
        let mut resp = ShareGroupDescribeResponse::default();
        for g in req.group_ids {
            let out = describe::DescribedGroup::default().with_group_id(g.clone());
            if let Some(code) = elsewhere(&inner, g.as_str()) {
                resp.groups.push(out.with_error_code(code));
                continue;
            }
            let Some(info) = inner.groups.describe_share(g.as_str()) else {
                resp.groups.push(out.with_error_code(errors::GROUP_ID_NOT_FOUND));
                continue;
            };
            let members = info
                .members
                .into_iter()
                .map(|m| {
                    let parts = m
                        .assigned
                        .iter()
                        .map(|(t, set)| {
                            describe::TopicPartitions::default()
                                .with_topic_id(*t)
                                .with_topic_name(TopicName(str_bytes(
                                    names.get(t).cloned().unwrap_or_default(),
                                )))
                                .with_partitions(set.iter().copied().collect())
                        })
                        .collect();
                    describe::Member::default()
                        .with_member_id(str_bytes(m.id))
                        .with_rack_id(m.rack.map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(m.client_id))
                        .with_client_host(str_bytes(m.client_host))
                        .with_subscribed_topic_names(
                            m.names.into_iter().map(|n| TopicName(str_bytes(n))).collect(),
                        )
                        .with_assignment(
                            describe::Assignment::default().with_topic_partitions(parts),
                        )
                })
                .collect();
            resp.groups.push(
                out.with_group_state(str_bytes(info.state))
                    .with_group_epoch(info.epoch)
                    .with_assignment_epoch(info.epoch)
                    .with_assignor_name(str_bytes("simple"))
                    .with_members(members),
            );
        }
        resp
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        ShareGroupDescribeResponse::default().with_groups(
            req.group_ids
                .iter()
                .map(|g| {
                    describe::DescribedGroup::default()
                        .with_group_id(g.clone())
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([groups]);
}

/// A share group's limits and reset: the broker's, with the group's overrides
/// (`share.record.lock.duration.ms`, `share.delivery.count.limit`, `share.auto.offset.reset`).
async fn settings(inner: &Inner, group: &str) -> (Limits, Reset) {
    let mut limits = inner.shares.limits();
    let mut reset = inner.shares.config.auto_offset_reset;
    // A store that fails to answer leaves the broker's settings (logged by the store).
    let set = inner.group_configs.get(group).await.unwrap_or_default();
    if let Some(ms) = set.get("share.record.lock.duration.ms").and_then(|v| v.parse().ok()) {
        limits.lock_ms = ms;
    }
    if let Some(n) = set.get("share.delivery.count.limit").and_then(|v| v.parse().ok()) {
        limits.delivery_count_limit = n;
    }
    match set.get("share.auto.offset.reset").map(String::as_str) {
        Some("earliest") => reset = Reset::Earliest,
        Some("latest") => reset = Reset::Latest,
        _ => {}
    }
    (limits, reset)
}

/// One share-partition as a request reaches it: its partition open here, its state loaded.
struct Reached {
    part: Arc<crate::state::Partition>,
    slot: Arc<tokio::sync::Mutex<Option<crate::domain::share::Loaded>>>,
}

/// Opens (`id`, `partition`) here and loads `group`'s share-partition of it; `Err`: the
/// partition's code.
async fn reach(
    inner: &Inner,
    group: &str,
    (id, partition): (Uuid, i32),
    reset: Reset,
) -> Result<Reached, i16> {
    let topic = match inner.topics.by_id(id).await {
        Ok(Some(t)) => t,
        Ok(None) => return Err(errors::UNKNOWN_TOPIC_ID),
        Err(_) => return Err(errors::KAFKA_STORAGE_ERROR),
    };
    if !super::allowed(inner, Operation::Read, ResourceType::Topic, &topic.name) {
        return Err(errors::TOPIC_AUTHORIZATION_FAILED);
    }
    if partition < 0 || partition >= topic.record.partitions as i32 {
        return Err(errors::UNKNOWN_TOPIC_OR_PARTITION);
    }
    let part = inner
        .partition(&topic, partition)
        .await
        .map_err(|e| crate::errors::BrokerError::from(e).code())?;
    let status = part.log.status();
    let ends = (status.start_offset as i64, status.end_offset as i64);
    let slot = inner.shares.load(group, (id, partition), status.epoch, ends, reset).await.map_err(
        |e| {
            tracing::warn!(group, %id, partition, error = %e, "loading a share-partition failed");
            errors::KAFKA_STORAGE_ERROR
        },
    )?;
    Ok(Reached { part, slot })
}

/// Applies `member`'s acknowledgement batches to one share-partition and stores the result.
async fn acknowledge(
    inner: &Inner,
    (group, member): (&str, &str),
    (id, partition): (Uuid, i32),
    batches: &[(i64, i64, Vec<i8>)],
    (limits, reset): (Limits, Reset),
) -> i16 {
    let r = match reach(inner, group, (id, partition), reset).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut held = r.slot.lock().await;
    let Some(loaded) = held.as_mut() else { return errors::KAFKA_STORAGE_ERROR };
    let mut next = loaded.state.clone();
    next.expire_locks(inner.env.clock.now_ms(), &limits);
    for (first, last, types) in batches {
        let Some(acks) = types.iter().map(|t| Ack::from_wire(*t)).collect::<Option<Vec<Ack>>>()
        else {
            return errors::INVALID_REQUEST;
        };
        if next.acknowledge(member, (*first, *last), &acks, &limits).is_err() {
            return errors::INVALID_RECORD_STATE;
        }
    }
    match inner.shares.store(group, (id, partition), loaded, next).await {
        Ok(()) => errors::NONE,
        Err(e) => {
            tracing::warn!(group, %id, partition, error = %e, "storing a share acknowledgement failed");
            errors::KAFKA_STORAGE_ERROR
        }
    }
}

/// Releases what `member` holds of its closed session's partitions.
async fn release_session(inner: &Inner, group: &str, member: &str, parts: &[(Uuid, i32)]) {
    let (limits, reset) = settings(inner, group).await;
    for (id, p) in parts {
        if let Ok(r) = reach(inner, group, (*id, *p), reset).await
            && let Some(loaded) = r.slot.lock().await.as_mut()
        {
            loaded.state.release_member(member, &limits);
        }
    }
}

/// What one partition's acquisition got: batches and acquired ranges.
#[derive(Default)]
struct Acquired {
    records: BytesMut,
    ranges: Vec<(i64, i64, u16)>,
    count: usize,
}

/// Acquires up to `max` records of one share-partition for `member` (no store write: an
/// acquisition lives in memory until its lock ends or the member acknowledges).
async fn acquire(
    inner: &Inner,
    r: &Reached,
    (member, limits): (&str, &Limits),
    max: usize,
    room: usize,
) -> Result<Acquired, i16> {
    let limits = *limits;
    let mut held = r.slot.lock().await;
    let Some(loaded) = held.as_mut() else { return Err(errors::KAFKA_STORAGE_ERROR) };
    let sp = &mut loaded.state;
    let now = inner.env.clock.now_ms();
    sp.expire_locks(now, &limits);
    let status = r.part.log.status();
    sp.trim_to(status.start_offset as i64);
    let mut out = Acquired::default();
    let Some(from) = sp.fetch_from(&limits) else { return Ok(out) };
    if from >= status.end_offset as i64 {
        return Ok(out);
    }
    let entries = r
        .part
        .log
        .read(from as u64, room.max(1), BATCHES_PER_PARTITION_MAX)
        .await
        .map_err(|e| crate::errors::BrokerError::from(e).code())?;
    let epochs = r.part.log.epochs();
    for e in entries {
        let Ok(info) = batch::read_header(&e.payload) else { continue };
        let (first, last) =
            (e.base_offset as i64, e.base_offset as i64 + info.last_offset_delta as i64);
        if info.is_control() {
            sp.archive(first, last);
            continue;
        }
        let got = sp.acquire(member, (first, last), max - out.count, now, &limits);
        if got.is_empty() {
            continue;
        }
        out.count += got.iter().map(|(f, l, _)| (l - f + 1) as usize).sum::<usize>();
        out.ranges.extend(got);
        batch::put_for_fetch(&mut out.records, &e.payload, e.base_offset, &epochs);
        if out.count >= max || out.records.len() >= room {
            break;
        }
    }
    Ok(out)
}

/// The acknowledgement batches of a request's partitions: (topic, partition) → batches.
type AckBatches = BTreeMap<(Uuid, i32), Vec<(i64, i64, Vec<i8>)>>;

pub(crate) struct ShareFetch;

impl Handler for ShareFetch {
    type Request = ShareFetchRequest;
    type Response = ShareFetchResponse;
    const KEY: ApiKey = ApiKey::ShareFetch;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        let group = req.group_id.as_ref().map(|g| g.as_str()).unwrap_or_default();
        super::group_denied(inner, Operation::Read, group)
    }

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        let group = req.group_id.as_ref().map(|g| g.as_str().to_string()).unwrap_or_default();
        let member = req.member_id.as_ref().map(|m| m.as_str().to_string()).unwrap_or_default();
        if group.is_empty() || member.is_empty() {
            return ShareFetchResponse::default().with_error_code(errors::INVALID_REQUEST);
        }
        let mut add = Vec::new();
        let mut acks: AckBatches = BTreeMap::new();
        for t in &req.topics {
            for p in &t.partitions {
                add.push((t.topic_id, p.partition_index));
                let b = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                acks.entry((t.topic_id, p.partition_index)).or_default().extend(b);
            }
        }
        let forget: Vec<(Uuid, i32)> = req
            .forgotten_topics_data
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic_id, *p)))
            .collect();
        acks.retain(|_, b| !b.is_empty());
        let step =
            match inner.shares.session(&group, &member, req.share_session_epoch, &add, &forget) {
                Ok(step) => step,
                Err(code) => return ShareFetchResponse::default().with_error_code(code),
            };
        let mut parts: BTreeMap<(Uuid, i32), fetch_resp::PartitionData> = BTreeMap::new();
        let set = settings(&inner, &group).await;
        for ((id, p), batches) in &acks {
            let code = acknowledge(&inner, (&group, &member), (*id, *p), batches, set).await;
            parts
                .entry((*id, *p))
                .or_insert_with(|| partition_data(&inner, *p))
                .acknowledge_error_code = code;
        }
        let session = match step {
            SessionStep::Closed(ps) => {
                release_session(&inner, &group, &member, &ps.into_iter().collect::<Vec<_>>()).await;
                return fetch_answer(parts, set.0.lock_ms);
            }
            SessionStep::Go(ps) => ps,
        };
        if req.max_records > 0 {
            fetch_records(&inner, &req, (&group, &member), &session, set, &mut parts).await;
        }
        fetch_answer(parts, set.0.lock_ms)
    }

    fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
        ShareFetchResponse::default().with_error_code(code)
    }

    error_code_of!(top);
}

fn partition_data(inner: &Inner, partition: i32) -> fetch_resp::PartitionData {
    fetch_resp::PartitionData::default().with_partition_index(partition).with_current_leader(
        fetch_resp::LeaderIdAndEpoch::default()
            .with_leader_id(inner.config.node_id)
            .with_leader_epoch(-1),
    )
}

fn fetch_answer(
    parts: BTreeMap<(Uuid, i32), fetch_resp::PartitionData>,
    lock_ms: u64,
) -> ShareFetchResponse {
    let mut by_topic: BTreeMap<Uuid, Vec<fetch_resp::PartitionData>> = BTreeMap::new();
    for ((id, _), p) in parts {
        by_topic.entry(id).or_default().push(p);
    }
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms.min(i32::MAX as u64) as i32)
        .with_responses(
            by_topic
                .into_iter()
                .map(|(id, ps)| {
                    fetch_resp::ShareFetchableTopicResponse::default()
                        .with_topic_id(id)
                        .with_partitions(ps)
                })
                .collect(),
        )
}

/// Acquires records from every partition of the session, waiting up to the request's
/// `max_wait_ms` while none has any (the logs growing, or a lock ending, wake it).
async fn fetch_records(
    inner: &Arc<Inner>,
    req: &ShareFetchRequest,
    (group, member): (&str, &str),
    session: &std::collections::BTreeSet<(Uuid, i32)>,
    (limits, reset): (Limits, Reset),
    parts: &mut BTreeMap<(Uuid, i32), fetch_resp::PartitionData>,
) {
    let started = tokio::time::Instant::now();
    let deadline =
        started + Duration::from_millis(req.max_wait_ms.max(0) as u64).min(SHARE_FETCH_WAIT_MAX);
    let cap = inner.config.limits.fetch_bytes_max;
    // A ShareFetch of 0 bytes takes no records (it may still acknowledge).
    let max_bytes = (req.max_bytes.max(0) as usize).min(cap);
    if max_bytes == 0 {
        return;
    }
    let mut reached = Vec::new();
    for (id, p) in session {
        match reach(inner, group, (*id, *p), reset).await {
            Ok(r) => reached.push((*id, *p, r)),
            Err(code) => {
                parts.entry((*id, *p)).or_insert_with(|| partition_data(inner, *p)).error_code =
                    code;
            }
        }
    }
    loop {
        let (mut left, mut bytes) = (req.max_records.max(1) as usize, 0usize);
        for (id, p, r) in &reached {
            if left == 0 || bytes >= max_bytes {
                break;
            }
            match acquire(inner, r, (member, &limits), left, max_bytes - bytes).await {
                Ok(got) if got.count > 0 => {
                    left -= got.count.min(left);
                    bytes += got.records.len();
                    let d = parts.entry((*id, *p)).or_insert_with(|| partition_data(inner, *p));
                    d.records = Some(got.records.freeze());
                    d.acquired_records = got
                        .ranges
                        .into_iter()
                        .map(|(f, l, c)| {
                            fetch_resp::AcquiredRecords::default()
                                .with_first_offset(f)
                                .with_last_offset(l)
                                .with_delivery_count(c as i16)
                        })
                        .collect();
                }
                Ok(_) => {}
                Err(code) => {
                    parts
                        .entry((*id, *p))
                        .or_insert_with(|| partition_data(inner, *p))
                        .error_code = code;
                }
            }
        }
        let now = tokio::time::Instant::now();
        if bytes > 0 || now >= deadline || reached.is_empty() {
            return;
        }
        // Wake when a log grows or the earliest lock ends (its record may be delivered again).
        let mut wake = deadline;
        let mut waits = tokio::task::JoinSet::new();
        for (_, _, r) in &reached {
            if let Some(at) = r.slot.lock().await.as_ref().and_then(|l| l.state.next_expiry()) {
                let in_ms = at.saturating_sub(inner.env.clock.now_ms());
                wake = wake.min(now + Duration::from_millis(in_ms));
            }
            let log = r.part.log.clone();
            let end = log.status().end_offset;
            let left = deadline - now;
            waits.spawn(async move { log.wait_for(end, left).await });
        }
        tokio::select! {
            _ = waits.join_next() => {}
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

pub(crate) struct ShareAcknowledge;

impl Handler for ShareAcknowledge {
    type Request = ShareAcknowledgeRequest;
    type Response = ShareAcknowledgeResponse;
    const KEY: ApiKey = ApiKey::ShareAcknowledge;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        let group = req.group_id.as_ref().map(|g| g.as_str()).unwrap_or_default();
        super::group_denied(inner, Operation::Read, group)
    }

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        let group = req.group_id.as_ref().map(|g| g.as_str().to_string()).unwrap_or_default();
        let member = req.member_id.as_ref().map(|m| m.as_str().to_string()).unwrap_or_default();
        if group.is_empty() || member.is_empty() {
            return ShareAcknowledgeResponse::default().with_error_code(errors::INVALID_REQUEST);
        }
        let step = match inner.shares.session(&group, &member, req.share_session_epoch, &[], &[]) {
            Ok(step) => step,
            Err(code) => return ShareAcknowledgeResponse::default().with_error_code(code),
        };
        let mut by_topic: BTreeMap<Uuid, Vec<ack_resp::PartitionData>> = BTreeMap::new();
        let set = settings(&inner, &group).await;
        for t in &req.topics {
            for p in &t.partitions {
                let batches: Vec<(i64, i64, Vec<i8>)> = p
                    .acknowledgement_batches
                    .iter()
                    .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                    .collect();
                let code = acknowledge(
                    &inner,
                    (&group, &member),
                    (t.topic_id, p.partition_index),
                    &batches,
                    set,
                )
                .await;
                by_topic.entry(t.topic_id).or_default().push(
                    ack_resp::PartitionData::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_current_leader(
                            ack_resp::LeaderIdAndEpoch::default()
                                .with_leader_id(inner.config.node_id)
                                .with_leader_epoch(-1),
                        ),
                );
            }
        }
        if let SessionStep::Closed(ps) = step {
            release_session(&inner, &group, &member, &ps.into_iter().collect::<Vec<_>>()).await;
        }
        ShareAcknowledgeResponse::default().with_responses(
            by_topic
                .into_iter()
                .map(|(id, ps)| {
                    ack_resp::ShareAcknowledgeTopicResponse::default()
                        .with_topic_id(id)
                        .with_partitions(ps)
                })
                .collect(),
        )
    }

    fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
        ShareAcknowledgeResponse::default().with_error_code(code)
    }

    error_code_of!(top);
}

/// The start offsets of a share group's share-partitions (DescribeShareGroupOffsets), the
/// stored state read from the metadata store (any broker may answer for the coordinator).
pub(crate) struct DescribeShareGroupOffsets;

impl Handler for DescribeShareGroupOffsets {
    type Request = DescribeShareGroupOffsetsRequest;
    type Response = DescribeShareGroupOffsetsResponse;
    const KEY: ApiKey = ApiKey::DescribeShareGroupOffsets;

    refuse_each!(
        groups => groups,
        Describe on Group,
        GROUP_AUTHORIZATION_FAILED,
        |g| g.group_id.as_str()
    );

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        use kafka_protocol::messages::describe_share_group_offsets_response::*;
        let names: HashMap<Uuid, String> =
            inner.topics.cached_all().iter().map(|t| (t.record.id, t.name.clone())).collect();
        let mut resp = DescribeShareGroupOffsetsResponse::default();
        for g in req.groups {
            let mut out =
                DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
            if let Some(code) = elsewhere(&inner, g.group_id.as_str()) {
                resp.groups.push(out.with_error_code(code));
                continue;
            }
            let stored = match inner.shares.stored_of(g.group_id.as_str()).await {
                Ok(s) => s,
                Err(e) => {
                    resp.groups.push(
                        out.with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
                            .with_error_message(Some(str_bytes(e.to_string()))),
                    );
                    continue;
                }
            };
            let mut by_topic: BTreeMap<
                String,
                (Uuid, Vec<DescribeShareGroupOffsetsResponsePartition>),
            > = BTreeMap::new();
            for (id, p, state, _, _) in stored {
                let Some(name) = names.get(&id) else { continue };
                // No topics (null, or none listed): every topic.
                let asked = g.topics.as_ref().filter(|ts| !ts.is_empty()).is_none_or(|ts| {
                    ts.iter().any(|t| t.topic_name.as_str() == name && t.partitions.contains(&p))
                });
                if !asked || !super::allowed(&inner, Operation::Describe, ResourceType::Topic, name)
                {
                    continue;
                }
                let part = DescribeShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p)
                    .with_start_offset(state.start)
                    .with_leader_epoch(-1);
                by_topic.entry(name.clone()).or_insert((id, Vec::new())).1.push(part);
            }
            out.topics = by_topic
                .into_iter()
                .map(|(name, (id, parts))| {
                    DescribeShareGroupOffsetsResponseTopic::default()
                        .with_topic_name(TopicName(str_bytes(name)))
                        .with_topic_id(id)
                        .with_partitions(parts)
                })
                .collect();
            resp.groups.push(out);
        }
        resp
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        use kafka_protocol::messages::describe_share_group_offsets_response::*;
        DescribeShareGroupOffsetsResponse::default().with_groups(
            req.groups
                .iter()
                .map(|g| {
                    DescribeShareGroupOffsetsResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([groups]);
}

/// The group's code for the offset-changing admin APIs: its coordinator must be here and
/// it must have no members (NON_EMPTY_GROUP).
fn offsets_changeable(inner: &Inner, group: &str) -> Option<i16> {
    if let Some(code) = elsewhere(inner, group) {
        return Some(code);
    }
    let live = inner.groups.describe_share(group).is_some_and(|g| !g.members.is_empty());
    live.then_some(errors::NON_EMPTY_GROUP)
}

/// Sets share-partitions' start offsets of an empty share group (AlterShareGroupOffsets).
pub(crate) struct AlterShareGroupOffsets;

impl Handler for AlterShareGroupOffsets {
    type Request = AlterShareGroupOffsetsRequest;
    type Response = AlterShareGroupOffsetsResponse;
    const KEY: ApiKey = ApiKey::AlterShareGroupOffsets;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        use kafka_protocol::messages::alter_share_group_offsets_response::*;
        let group = req.group_id.as_str();
        if let Some(code) = offsets_changeable(&inner, group) {
            return Self::error(0, &req, code);
        }
        let mut resp = AlterShareGroupOffsetsResponse::default();
        for t in &req.topics {
            let topic = inner.topics.get(t.topic_name.as_str()).await.ok().flatten();
            let mut out = AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone());
            for p in &t.partitions {
                let code = match &topic {
                    None => errors::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(_)
                        if !super::allowed(
                            &inner,
                            Operation::Read,
                            ResourceType::Topic,
                            t.topic_name.as_str(),
                        ) =>
                    {
                        errors::TOPIC_AUTHORIZATION_FAILED
                    }
                    Some(tp)
                        if p.partition_index < 0
                            || p.partition_index >= tp.record.partitions as i32 =>
                    {
                        errors::UNKNOWN_TOPIC_OR_PARTITION
                    }
                    Some(tp) => {
                        out.topic_id = tp.record.id;
                        let at = (tp.record.id, p.partition_index);
                        match inner.shares.set_start(group, at, p.start_offset.max(0)).await {
                            Ok(()) => errors::NONE,
                            Err(_) => errors::COORDINATOR_NOT_AVAILABLE,
                        }
                    }
                };
                out.partitions.push(
                    AlterShareGroupOffsetsResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            resp.responses.push(out);
        }
        resp
    }

    fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
        AlterShareGroupOffsetsResponse::default().with_error_code(code)
    }

    error_code_of!(top, [responses => partitions]);
}

/// Deletes an empty share group's share-partitions of the topics named
/// (DeleteShareGroupOffsets): the group starts those partitions again per its reset.
pub(crate) struct DeleteShareGroupOffsets;

impl Handler for DeleteShareGroupOffsets {
    type Request = DeleteShareGroupOffsetsRequest;
    type Response = DeleteShareGroupOffsetsResponse;
    const KEY: ApiKey = ApiKey::DeleteShareGroupOffsets;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Delete, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        use kafka_protocol::messages::delete_share_group_offsets_response::*;
        let group = req.group_id.as_str();
        if let Some(code) = offsets_changeable(&inner, group) {
            return Self::error(0, &req, code);
        }
        let mut resp = DeleteShareGroupOffsetsResponse::default();
        for t in &req.topics {
            let mut out = DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name.clone());
            match inner.topics.get(t.topic_name.as_str()).await.ok().flatten() {
                None => out.error_code = errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(tp) => {
                    out.topic_id = tp.record.id;
                    if inner.shares.delete_of_topic(group, tp.record.id).await.is_err() {
                        out.error_code = errors::COORDINATOR_NOT_AVAILABLE;
                    }
                }
            }
            resp.responses.push(out);
        }
        resp
    }

    fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
        DeleteShareGroupOffsetsResponse::default().with_error_code(code)
    }

    error_code_of!(top, [responses]);
}
