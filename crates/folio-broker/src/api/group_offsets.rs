//! Committed offsets on the wire: OffsetCommit (the member's generation checked, the new
//! group admitted under its limits, written under the group's claim: `group::claim`) and
//! OffsetFetch (every commit that arrived before it written first; a store that cannot
//! answer is "loading", on the group and each partition asked).

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;

use super::groups::{elsewhere, s};
use crate::api::{Handler, Refused, str_bytes};
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::group::OffsetRecord;
use crate::errors;
use crate::limits::COMMIT_ATTEMPTS_MAX;
use crate::state::Inner;

pub(crate) struct OffsetCommit;

impl Handler for OffsetCommit {
    type Request = OffsetCommitRequest;
    type Response = OffsetCommitResponse;
    const KEY: ApiKey = ApiKey::OffsetCommit;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    fn arrive(inner: &Inner, req: &Self::Request) -> super::Arrival {
        let commit = Some(inner.groups.begin_commit(req.group_id.as_str()));
        super::Arrival { commit, fetch: None }
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
        req: OffsetCommitRequest,
    ) -> OffsetCommitResponse {
        // Read before anything awaits: the commit writes only in this tenure, and only
        // under the claim held now, if one is (`group::claim`).
        let tenure = inner.groups.tenure();
        let known = inner.groups.claim_version(s(&req.group_id));
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        let group = s(&req.group_id).to_string();
        let check = commit_check(&inner, &req);
        // The generation the commit was checked at (-1: from outside the group protocol):
        // the group's claim is taken at it (`group::claim`).
        let generation =
            inner.groups.commit_generation(s(&req.group_id), req.generation_id_or_member_epoch);
        // OffsetCommit v2-4's retention: these offsets expire then, not by the broker's.
        let expire_ms = (version <= 4 && req.retention_time_ms >= 0)
            .then(|| (inner.now_ms() as u64).saturating_add(req.retention_time_ms as u64));
        let now = inner.now_ms() as u64;
        let mut resp = OffsetCommitResponse::default();
        let mut writes = Vec::new();
        // (topic index, partition index) of each write, to fail them together.
        let mut written = Vec::new();
        for (ti, t) in req.topics.iter().enumerate() {
            let topic = inner.topics.get(t.name.as_str()).await.ok().flatten();
            let mut out = OffsetCommitResponseTopic::default().with_name(t.name.clone());
            for (pi, p) in t.partitions.iter().enumerate() {
                let code = if check != 0 {
                    check
                } else if let Some(topic) = topic.as_ref().filter(|tp| {
                    p.partition_index >= 0 && p.partition_index < tp.record.partitions as i32
                }) {
                    let metadata = p
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.as_str().to_string())
                        .unwrap_or_default();
                    if metadata.len() > inner.groups_config.offset_metadata_max_bytes {
                        errors::OFFSET_METADATA_TOO_LARGE
                    } else {
                        let r = OffsetRecord {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            commit_ms: now,
                            metadata,
                            expire_ms,
                        };
                        writes.push((
                            topic.name.clone(),
                            topic.record.id,
                            topic.version,
                            p.partition_index,
                            r,
                        ));
                        written.push((ti, pi));
                        errors::NONE
                    }
                } else {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                };
                out.partitions.push(
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            resp.topics.push(out);
        }
        let at = (generation, tenure, known);
        write_offsets(&inner, &group, at, writes, written, &mut resp).await;
        resp
    }

    fn error(_version: i16, req: &OffsetCommitRequest, code: i16) -> OffsetCommitResponse {
        OffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    OffsetCommitResponseTopic::default().with_name(t.name.clone()).with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
                })
                .collect(),
        )
    }

    error_code_of!([topics => partitions]);
}

/// One offset to write: (topic name, topic id, the topic record's version as read,
/// partition, record).
type OffsetWrite = (String, uuid::Uuid, folio_meta::Version, i32, OffsetRecord);

/// Writes an OffsetCommit's offsets under the group's claim and sets each partition's code
/// in `resp` (`written`: where each write's partition sits in it).
async fn write_offsets(
    inner: &Inner,
    group: &str,
    (generation, tenure, known): (i32, u64, Option<folio_meta::Version>),
    mut writes: Vec<OffsetWrite>,
    mut written: Vec<(usize, usize)>,
    resp: &mut OffsetCommitResponse,
) {
    // A topic record that changed since the cache read it (a config change, or a
    // deletion) fails the commit's compare: re-read those topics and try again; a topic
    // gone or re-created under a new id gets UNKNOWN_TOPIC_OR_PARTITION, never offsets.
    // Every commit of the group that arrived before this one is written (or failed) first.
    if let Ok(Some(arrival)) = super::REQUEST.try_with(|s| s.arrival) {
        inner.groups.commits_before(group, arrival).await;
    }
    let mut attempt = 0;
    while !writes.is_empty() {
        attempt += 1;
        let refused = match inner.groups.commit(group, generation, (tenure, known), &writes).await {
            Ok(refused) => refused,
            Err(e) => {
                tracing::warn!(group = %group, error = %e, "writing committed offsets failed");
                for (ti, pi) in &written {
                    resp.topics[*ti].partitions[*pi].error_code = e.code();
                }
                break;
            }
        };
        // Each refused topic is re-read once, however many of its partitions were refused:
        // its id and version now, `Ok(None)` if it is gone.
        let mut fresh = HashMap::new();
        let (mut again, mut again_at) = (Vec::new(), Vec::new());
        for i in refused {
            let (name, id, _, p, r) = writes[i].clone();
            let (ti, pi) = written[i];
            if !fresh.contains_key(&name) {
                let t = inner.topics.load(&name).await;
                fresh.insert(name.clone(), t.map(|t| t.map(|t| (t.record.id, t.version))));
            }
            resp.topics[ti].partitions[pi].error_code = match &fresh[&name] {
                Ok(Some((now, version))) if *now == id && attempt < COMMIT_ATTEMPTS_MAX => {
                    again.push((name, id, *version, p, r));
                    again_at.push((ti, pi));
                    errors::NONE
                }
                Ok(Some((now, _))) if *now == id => errors::COORDINATOR_NOT_AVAILABLE,
                Ok(_) => errors::UNKNOWN_TOPIC_OR_PARTITION,
                Err(_) => errors::COORDINATOR_NOT_AVAILABLE,
            };
        }
        (writes, written) = (again, again_at);
    }
}

/// Whether an OffsetCommit may write: its group id, member (static or not) and generation;
/// then, for a group new here, `groups_max` and its client's new groups per minute.
fn commit_check(inner: &Inner, req: &OffsetCommitRequest) -> i16 {
    if req.group_id.is_empty() {
        return errors::INVALID_GROUP_ID;
    }
    let instance = req.group_instance_id.as_ref().map(|i| i.as_str());
    let (generation, member) = (req.generation_id_or_member_epoch, s(&req.member_id));
    let code = inner.groups.check_commit(s(&req.group_id), generation, member, instance);
    if code != errors::NONE {
        return code;
    }
    let client = super::REQUEST.try_with(|r| r.client_id.clone()).unwrap_or_default();
    match inner.groups.admit_commit(s(&req.group_id), &client) {
        Ok(()) => errors::NONE,
        Err(limit) => {
            inner.metrics.limit_hit(limit);
            errors::POLICY_VIOLATION
        }
    }
}

pub(crate) struct OffsetFetch;

/// One group's committed offsets for the topics asked (all when `None`):
/// (topic name, [(partition, offset, leader epoch, metadata, error)]).
type Fetched = Vec<(String, Vec<Committed>)>;
/// (partition, offset, leader epoch, metadata, error code).
type Committed = (i32, i64, i32, String, i16);

async fn fetch_group(
    inner: &Inner,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Fetched, i16> {
    // Every commit of the group that arrived before this fetch is written first.
    if let Ok(Some(arrival)) = super::REQUEST.try_with(|s| s.arrival) {
        inner.groups.commits_before(group, arrival).await;
    }
    // A store that fails to answer: "loading", which clients retry on the same
    // coordinator (a request-level COORDINATOR_NOT_AVAILABLE without partitions left
    // librdkafka's group members waiting for minutes).
    let committed = inner.groups.committed(group).await.map_err(|e| {
        tracing::warn!(group, error = %e, "reading committed offsets failed");
        errors::COORDINATOR_LOAD_IN_PROGRESS
    })?;
    let mut out = Vec::new();
    match topics {
        Some(wanted) => {
            for (name, partitions) in wanted {
                if !super::allowed(inner, Operation::Describe, ResourceType::Topic, &name) {
                    let code = errors::TOPIC_AUTHORIZATION_FAILED;
                    let parts = partitions.into_iter().map(|p| (p, -1, -1, String::new(), code));
                    out.push((name, parts.collect()));
                    continue;
                }
                let id = inner.topics.get(&name).await.ok().flatten().map(|t| t.record.id);
                let parts = partitions
                    .into_iter()
                    .map(|p| match id.and_then(|id| committed.get(&(id, p))) {
                        Some(r) => (p, r.offset, r.leader_epoch, r.metadata.clone(), 0),
                        None => (p, -1, -1, String::new(), 0),
                    })
                    .collect();
                out.push((name, parts));
            }
        }
        None => {
            let mut by_topic: std::collections::BTreeMap<String, Vec<Committed>> =
                Default::default();
            for ((id, p), r) in committed {
                if let Ok(Some(t)) = inner.topics.by_id(id).await
                    && super::allowed(inner, Operation::Describe, ResourceType::Topic, &t.name)
                {
                    by_topic.entry(t.name.clone()).or_default().push((
                        p,
                        r.offset,
                        r.leader_epoch,
                        r.metadata.clone(),
                        0,
                    ));
                }
            }
            out.extend(by_topic);
        }
    }
    if require_stable {
        // KIP-447: an offset a transaction has staged is about to change; the client
        // retries until that transaction ends.
        let staged = crate::transactions::staged_partitions(inner, group).await.map_err(|e| {
            tracing::warn!(group, error = %e, "reading staged transactional offsets failed");
            errors::COORDINATOR_LOAD_IN_PROGRESS
        })?;
        for (name, parts) in &mut out {
            for part in parts.iter_mut() {
                if staged.contains(&(name.clone(), part.0)) {
                    part.4 = errors::UNSTABLE_OFFSET_COMMIT;
                }
            }
        }
    }
    Ok(out)
}

/// One group of an OffsetFetch v8+.
async fn fetch_group_v8(
    inner: &Inner,
    g: kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup,
    require_stable: bool,
) -> OffsetFetchResponseGroup {
    let topics = g.topics.map(|ts| {
        ts.into_iter().map(|t| (t.name.as_str().to_string(), t.partition_indexes)).collect()
    });
    let mut out = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
    let asked = topics.clone();
    // v9: a member of a consumer-protocol group names itself and its epoch (as it commits).
    let member = g.member_id.as_ref().map(|m| m.as_str());
    let checked = match inner.groups.check_fetch(s(&g.group_id), member, g.member_epoch) {
        errors::NONE => fetch_group(inner, s(&g.group_id), topics, require_stable).await,
        code => Err(code),
    };
    match checked {
        Ok(fetched) => {
            out.topics = fetched
                .into_iter()
                .map(|(name, parts)| {
                    OffsetFetchResponseTopics::default()
                        .with_name(TopicName(str_bytes(name)))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(p, o, e, m, c)| {
                                    OffsetFetchResponsePartitions::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o)
                                        .with_committed_leader_epoch(e)
                                        .with_metadata(Some(str_bytes(m)))
                                        .with_error_code(c)
                                })
                                .collect(),
                        )
                })
                .collect()
        }
        Err(code) => {
            // The group's error, and each partition asked with it (Kafka's shape).
            out.error_code = code;
            out.topics = failed_topics(asked, |name, parts| {
                OffsetFetchResponseTopics::default().with_name(name).with_partitions(
                    parts
                        .map(|p| {
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(p)
                                .with_committed_offset(-1)
                                .with_committed_leader_epoch(-1)
                                .with_error_code(code)
                        })
                        .collect(),
                )
            });
        }
    }
    out
}

/// The topics and partitions an OffsetFetch asked for, built by `topic` from the name
/// and the partition indexes (each answered with an error).
fn failed_topics<T>(
    asked: Option<Vec<(String, Vec<i32>)>>,
    topic: impl Fn(TopicName, std::vec::IntoIter<i32>) -> T,
) -> Vec<T> {
    asked
        .unwrap_or_default()
        .into_iter()
        .map(|(name, parts)| topic(TopicName(str_bytes(name)), parts.into_iter()))
        .collect()
}

impl Handler for OffsetFetch {
    type Request = OffsetFetchRequest;
    type Response = OffsetFetchResponse;
    const KEY: ApiKey = ApiKey::OffsetFetch;

    /// Up to v7 one group: the whole request; from v8 each group of the batch. Topics the
    /// principal may not describe are refused per topic, or left out of "all topics"
    /// (`fetch_group`).
    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        if req.group_id.is_empty() {
            return None;
        }
        super::group_denied(inner, Operation::Describe, req.group_id.as_str())
    }

    fn arrive(inner: &Inner, _req: &Self::Request) -> super::Arrival {
        super::Arrival { commit: None, fetch: Some(inner.groups.arrival()) }
    }

    refuse_each!(
        groups => groups,
        Describe on Group,
        GROUP_AUTHORIZATION_FAILED,
        |g| g.group_id.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: OffsetFetchRequest,
    ) -> OffsetFetchResponse {
        if version >= 8 {
            let mut resp = OffsetFetchResponse::default();
            for g in req.groups {
                resp.groups.push(fetch_group_v8(&inner, g, req.require_stable).await);
            }
            return resp;
        }
        let topics = req.topics.map(|ts| {
            ts.into_iter().map(|t| (t.name.as_str().to_string(), t.partition_indexes)).collect()
        });
        let mut resp = OffsetFetchResponse::default();
        let asked = topics.clone();
        match fetch_group(&inner, s(&req.group_id), topics, req.require_stable).await {
            Ok(fetched) => {
                resp.topics = fetched
                    .into_iter()
                    .map(|(name, parts)| {
                        OffsetFetchResponseTopic::default()
                            .with_name(TopicName(str_bytes(name)))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, o, e, m, c)| {
                                        let mut r = OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(o)
                                            .with_metadata(Some(str_bytes(m)))
                                            .with_error_code(c);
                                        if version >= 5 {
                                            r.committed_leader_epoch = e;
                                        }
                                        r
                                    })
                                    .collect(),
                            )
                    })
                    .collect()
            }
            Err(code) => {
                // Each partition asked carries the error (all versions), and from v2 the
                // response as well, as Kafka answers.
                if version >= 2 {
                    resp.error_code = code;
                }
                resp.topics = failed_topics(asked, |name, parts| {
                    OffsetFetchResponseTopic::default().with_name(name).with_partitions(
                        parts
                            .map(|p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
                });
            }
        }
        resp
    }

    fn error(version: i16, req: &OffsetFetchRequest, code: i16) -> OffsetFetchResponse {
        if version >= 8 {
            return OffsetFetchResponse::default().with_groups(
                req.groups
                    .iter()
                    .map(|g| {
                        OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            );
        }
        OffsetFetchResponse::default().with_error_code(if version >= 2 { code } else { 0 })
    }

    error_code_of!(top, [groups]);
}
