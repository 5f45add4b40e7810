//! Topic administration: CreateTopics, CreatePartitions, DeleteTopics, DescribeCluster
//! (configs are in `configs`).
//!
//! A topic's replication factor is the ledger ensemble and write quorum of its partitions'
//! logs (bookies are chosen per ledger: explicit replica assignments are checked the way
//! Kafka checks them and give the partition count and replication factor; the broker ids
//! they name are not used, since ledgers place the data). Config
//! changes are validated, written to the topic record by compare-and-set, and applied to
//! the open partition logs at once (retention trims immediately).

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest,
    DescribeClusterResponse, TopicName,
};

use kafka_protocol::messages::create_topics_request::CreatableTopic;

use crate::api::{Handler, Refused, str_bytes};
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::topics::{PARTITIONS_MAX, TOPIC_CONFIG_KEYS, Topic, validate_configs};
use crate::errors::{self, BrokerError};
use crate::state::Inner;

use super::configs::source;
use crate::domain::topics::IfExists;

pub(crate) struct CreateTopics;

impl Handler for CreateTopics {
    type Request = CreateTopicsRequest;
    type Response = CreateTopicsResponse;
    const KEY: ApiKey = ApiKey::CreateTopics;

    fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
        // CREATE on the cluster allows every topic; without it each topic needs its own.
        if super::cluster_denied(inner, Operation::Create).is_none() {
            return Vec::new();
        }
        let denied = |t: &CreatableTopic| {
            !super::allowed(inner, Operation::Create, ResourceType::Topic, t.name.as_str())
        };
        let build = |topics| CreateTopicsRequest::default().with_topics(topics);
        super::refuse(&mut req.topics, denied, errors::TOPIC_AUTHORIZATION_FAILED, build)
            .into_iter()
            .collect()
    }

    fn merge(resp: &mut Self::Response, refused: Self::Response) {
        resp.topics.extend(refused.topics);
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: CreateTopicsRequest,
    ) -> CreateTopicsResponse {
        let mut resp = CreateTopicsResponse::default();
        let mut seen = std::collections::HashSet::new();
        let duplicated: std::collections::HashSet<String> = req
            .topics
            .iter()
            .filter(|t| !seen.insert(t.name.as_str().to_string()))
            .map(|t| t.name.as_str().to_string())
            .collect();
        for t in req.topics {
            let name = t.name.as_str().to_string();
            let mut r = CreatableTopicResult::default().with_name(t.name.clone());
            let outcome: Result<Option<Arc<Topic>>, BrokerError> = async {
                if duplicated.contains(&name) {
                    return Err(BrokerError::InvalidRequest(format!(
                        "topic {name} is named more than once"
                    )));
                }
                let assigned = replica_assignment(
                    &t.assignments
                        .iter()
                        .map(|a| (a.partition_index, a.broker_ids.iter().map(|b| b.0).collect()))
                        .collect::<Vec<_>>(),
                    t.num_partitions,
                    t.replication_factor,
                )?;
                let (num_partitions, replication_factor) = match assigned {
                    Some((p, r)) => (p, r),
                    None => (t.num_partitions, t.replication_factor),
                };
                let t = t
                    .with_num_partitions(num_partitions)
                    .with_replication_factor(replication_factor);
                let partitions = if t.num_partitions == -1 {
                    inner.config.default_partitions as i32
                } else {
                    t.num_partitions
                };
                let replication = if t.replication_factor == -1 {
                    inner.config.default_replication as i16
                } else {
                    t.replication_factor
                };
                let configs = validate_configs(
                    t.configs
                        .iter()
                        .filter_map(|c| c.value.as_ref().map(|v| (c.name.as_str(), v.as_str()))),
                )
                .map_err(|e| BrokerError::InvalidConfig(e.into()))?;
                let new = inner.new_topic(partitions, replication, configs);
                inner
                    .topics
                    .create_topic(&name, new, IfExists::Fail, req.validate_only)
                    .await
                    .map(Some)
            }
            .await;
            match outcome {
                Ok(Some(topic)) => {
                    if version >= 5 {
                        r.num_partitions = topic.record.partitions as i32;
                        r.replication_factor = topic.record.replication as i16;
                        let c = inner.topic_config(&topic);
                        r.configs = Some(
                            TOPIC_CONFIG_KEYS
                                .iter()
                                .map(|(k, _)| {
                                    CreatableTopicConfigs::default()
                                        .with_name(str_bytes(*k))
                                        .with_value(c.get(k).map(str_bytes))
                                        .with_config_source(source(&topic, k))
                                })
                                .collect(),
                        );
                    }
                    if version >= 7 && !req.validate_only {
                        r.topic_id = topic.record.id;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    r.error_code = e.code();
                    r.error_message = Some(str_bytes(e.to_string()));
                }
            }
            resp.topics.push(r);
        }
        resp
    }

    fn error(_version: i16, req: &CreateTopicsRequest, code: i16) -> CreateTopicsResponse {
        CreateTopicsResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    CreatableTopicResult::default().with_name(t.name.clone()).with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([topics]);
}

pub(crate) struct CreatePartitions;

impl Handler for CreatePartitions {
    type Request = CreatePartitionsRequest;
    type Response = CreatePartitionsResponse;
    const KEY: ApiKey = ApiKey::CreatePartitions;

    refuse_each!(
        topics => results,
        Alter on Topic,
        TOPIC_AUTHORIZATION_FAILED,
        |t| t.name.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: CreatePartitionsRequest,
    ) -> CreatePartitionsResponse {
        let mut resp = CreatePartitionsResponse::default();
        for t in req.topics {
            let name = t.name.as_str().to_string();
            let outcome: Result<(), BrokerError> = async {
                if t.assignments.as_ref().is_some_and(|a| !a.is_empty()) {
                    return Err(BrokerError::InvalidReplicaAssignment(
                        "manual replica assignment is not supported: bookies are chosen per ledger".into(),
                    ));
                }
                if t.count > PARTITIONS_MAX {
                    return Err(BrokerError::InvalidPartitions(format!("partitions must be at most {PARTITIONS_MAX}")));
                }
                // Compare-and-set, re-reading on a conflict.
                for _ in 0..10 {
                    let Some(topic) = inner.topics.load(&name).await? else {
                        return Err(BrokerError::UnknownTopic(name.clone()));
                    };
                    let current = topic.record.partitions as i32;
                    if t.count <= current {
                        return Err(BrokerError::InvalidPartitions(
                            format!("topic {name} has {current} partitions; the count can only grow, not become {}", t.count),
                        ));
                    }
                    if req.validate_only {
                        return Ok(());
                    }
                    let mut record = topic.record.clone();
                    record.partitions = t.count as u32;
                    match inner.topics.update(&topic, record).await {
                        Ok(_) => {
                            tracing::info!(topic = %name, from = current, to = t.count, "partitions added");
                            return Ok(());
                        }
                        Err(folio_meta::MetaError::Conflict { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(BrokerError::Contended(name.clone()))
            }
            .await;
            let mut r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            if let Err(e) = outcome {
                r.error_code = e.code();
                r.error_message = Some(str_bytes(e.to_string()));
            }
            resp.results.push(r);
        }
        resp
    }

    fn error(_version: i16, req: &CreatePartitionsRequest, code: i16) -> CreatePartitionsResponse {
        CreatePartitionsResponse::default().with_results(
            req.topics
                .iter()
                .map(|t| {
                    CreatePartitionsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([results]);
}

pub(crate) struct DeleteTopics;

impl Handler for DeleteTopics {
    type Request = DeleteTopicsRequest;
    type Response = DeleteTopicsResponse;
    const KEY: ApiKey = ApiKey::DeleteTopics;

    /// Topics named; a topic given by id is checked in `handle` once its name is known.
    fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
        let denied = |n: &str| !super::allowed(inner, Operation::Delete, ResourceType::Topic, n);
        let code = errors::TOPIC_AUTHORIZATION_FAILED;
        let by_name = super::refuse(
            &mut req.topic_names,
            |n| denied(n.as_str()),
            code,
            |names| DeleteTopicsRequest::default().with_topic_names(names),
        );
        let named = super::refuse(
            &mut req.topics,
            |t| t.name.as_ref().is_some_and(|n| denied(n.as_str())),
            code,
            |topics| DeleteTopicsRequest::default().with_topics(topics),
        );
        by_name.into_iter().chain(named).collect()
    }

    fn merge(resp: &mut Self::Response, refused: Self::Response) {
        resp.responses.extend(refused.responses);
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: DeleteTopicsRequest,
    ) -> DeleteTopicsResponse {
        use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
        // (name, id) per entry: names up to v5, names or ids from v6.
        let entries: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
            req.topics
                .iter()
                .map(|t| (t.name.as_ref().map(|n| n.as_str().to_string()), t.topic_id))
                .collect()
        } else {
            req.topic_names
                .iter()
                .map(|n| (Some(n.as_str().to_string()), uuid::Uuid::nil()))
                .collect()
        };
        let mut outcome: Vec<Result<Arc<Topic>, BrokerError>> = Vec::with_capacity(entries.len());
        let mut seen = std::collections::HashSet::new();
        let mut listing = None;
        for (name, id) in &entries {
            let r = if !inner.config.delete_topic_enable {
                Err(BrokerError::TopicDeletionDisabled)
            } else {
                match (name, id.is_nil()) {
                    (Some(_), false) => Err(BrokerError::InvalidRequest(
                        "give a topic's name or its id, not both".into(),
                    )),
                    (None, true) => {
                        Err(BrokerError::InvalidRequest("give a topic's name or its id".into()))
                    }
                    (Some(n), true) => match inner.topics.load(n).await {
                        Ok(Some(t)) => Ok(t),
                        Ok(None) => Err(BrokerError::UnknownTopic(n.clone())),
                        Err(e) => Err(e.into()),
                    },
                    // A fresh listing (once per request): the cache may still hold a
                    // topic deleted elsewhere.
                    (None, false) => {
                        if listing.is_none() {
                            listing = Some(inner.topics.list().await);
                        }
                        match listing.as_ref().expect("just listed") {
                            Ok(all) => all
                                .iter()
                                .find(|t| t.record.id == *id)
                                .cloned()
                                .ok_or_else(|| BrokerError::UnknownTopicId(id.to_string())),
                            Err(e) => Err(BrokerError::background("listing topics", e.clone())),
                        }
                    }
                }
            };
            let r = match r {
                Ok(t) if !seen.insert(t.record.id) => Err(BrokerError::InvalidRequest(format!(
                    "topic {} is named more than once",
                    t.name
                ))),
                other => other.and_then(|t| delete_allowed(&inner, t, name.is_none())),
            };
            outcome.push(r);
        }
        let targets: Vec<Arc<Topic>> =
            outcome.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
        if !targets.is_empty()
            && let Err(e) = crate::deletion::unbind(&inner, &targets).await
        {
            tracing::warn!(error = %e, "deleting topics failed");
            for r in outcome.iter_mut() {
                if r.is_ok() {
                    *r = Err(BrokerError::background("deleting failed (retry)", e.clone()));
                }
            }
        }
        let responses = entries
            .iter()
            .zip(outcome)
            .map(|((name, id), r)| {
                let mut d = DeletableTopicResult::default()
                    .with_name(name.clone().map(|n| TopicName(str_bytes(n))));
                if version >= 6 {
                    d.topic_id = r.as_ref().map(|t| t.record.id).unwrap_or(*id);
                }
                match r {
                    Ok(t) => {
                        if d.name.is_none() {
                            d.name = Some(TopicName(str_bytes(t.name.clone())));
                        }
                    }
                    Err(e) => {
                        d.error_code = match e.code() {
                            // Versions before 3 do not know the code.
                            errors::TOPIC_DELETION_DISABLED if version < 3 => {
                                errors::INVALID_REQUEST
                            }
                            code => code,
                        };
                        if version >= 5 {
                            d.error_message = Some(str_bytes(e.to_string()));
                        }
                    }
                }
                d
            })
            .collect();
        DeleteTopicsResponse::default().with_responses(responses)
    }

    fn error(version: i16, req: &DeleteTopicsRequest, code: i16) -> DeleteTopicsResponse {
        use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
        let names: Vec<Option<TopicName>> = if version >= 6 {
            req.topics.iter().map(|t| t.name.clone()).collect()
        } else {
            req.topic_names.iter().map(|n| Some(n.clone())).collect()
        };
        DeleteTopicsResponse::default().with_responses(
            names
                .into_iter()
                .map(|n| DeletableTopicResult::default().with_name(n).with_error_code(code))
                .collect(),
        )
    }

    error_code_of!([responses]);
}

/// The topic, if the principal may delete it (named topics were checked before `handle`;
/// this checks one given by id by its name). A topic given by id that the principal may not
/// describe is answered UNKNOWN_TOPIC_ID, as Kafka does: its name is never told, nor that it
/// exists.
fn delete_allowed(inner: &Inner, t: Arc<Topic>, by_id: bool) -> Result<Arc<Topic>, BrokerError> {
    if super::allowed(inner, Operation::Delete, ResourceType::Topic, &t.name) {
        return Ok(t);
    }
    if by_id && !super::allowed(inner, Operation::Describe, ResourceType::Topic, &t.name) {
        return Err(BrokerError::UnknownTopicId(t.record.id.to_string()));
    }
    Err(BrokerError::TopicAuthorization { op: "Delete", topic: t.name.clone() })
}

pub(crate) struct DescribeCluster;

impl Handler for DescribeCluster {
    type Request = DescribeClusterRequest;
    type Response = DescribeClusterResponse;
    const KEY: ApiKey = ApiKey::DescribeCluster;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Describe)
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DescribeClusterRequest,
    ) -> DescribeClusterResponse {
        let mut resp = DescribeClusterResponse::default()
            .with_cluster_id(str_bytes(inner.cluster_id.clone()))
            .with_controller_id(BrokerId(inner.membership.controller()))
            .with_brokers(
                inner
                    .membership
                    .live()
                    .into_iter()
                    .filter_map(|b| {
                        let e = super::endpoint_of(&inner, &b)?;
                        Some(
                            DescribeClusterBroker::default()
                                .with_broker_id(BrokerId(b.node_id))
                                .with_host(str_bytes(e.host))
                                .with_port(e.port),
                        )
                    })
                    .collect(),
            );
        if req.endpoint_type != 1 {
            resp.error_code = errors::INVALID_REQUEST;
            resp.error_message = Some(str_bytes("only broker endpoints (type 1) are served"));
            resp.brokers.clear();
        }
        resp
    }

    error_answer_of!(top);

    error_code_of!(top);
}

/// Explicit replica assignments of CreateTopics, checked as Kafka checks them: with them,
/// `num_partitions` and `replication_factor` must be -1; partitions are 0..n once each;
/// every partition names the same number of distinct brokers. Gives (partitions,
/// replication factor), or `None` without assignments. The broker ids are advisory on
/// Folio: a partition's data lives in ledgers whose bookies are chosen per ledger.
pub(crate) fn replica_assignment(
    assignments: &[(i32, Vec<i32>)],
    num_partitions: i32,
    replication_factor: i16,
) -> Result<Option<(i32, i16)>, BrokerError> {
    if assignments.is_empty() {
        return Ok(None);
    }
    if num_partitions != -1 || replication_factor != -1 {
        return Err(BrokerError::InvalidRequest(
            "both numPartitions or replicationFactor and replicasAssignments were set: use one"
                .into(),
        ));
    }
    let bad = |why: String| Err(BrokerError::InvalidReplicaAssignment(why));
    let mut indexes: Vec<i32> = assignments.iter().map(|(p, _)| *p).collect();
    indexes.sort_unstable();
    if indexes.iter().enumerate().any(|(i, p)| *p != i as i32) {
        return bad(format!("partitions must be 0..{} each once, got {indexes:?}", indexes.len()));
    }
    let replicas = assignments[0].1.len();
    for (p, brokers) in assignments {
        if brokers.is_empty() || brokers.len() != replicas {
            return bad(format!(
                "partition {p} names {} brokers; every partition must name the same number (at least one)",
                brokers.len()
            ));
        }
        let distinct: std::collections::BTreeSet<_> = brokers.iter().collect();
        if distinct.len() != brokers.len() {
            return bad(format!("partition {p} names a broker twice: {brokers:?}"));
        }
    }
    let replication = i16::try_from(replicas)
        .map_err(|_| BrokerError::InvalidReplicaAssignment(format!("{replicas} replicas")))?;
    Ok(Some((assignments.len() as i32, replication)))
}

#[cfg(test)]
mod assignment_tests {
    use super::*;

    #[test]
    fn explicit_assignments_give_partitions_and_replication_or_kafkas_error() {
        let ok = [(1, vec![2, 3]), (0, vec![1, 2]), (2, vec![3, 1])];
        assert!(matches!(replica_assignment(&ok, -1, -1), Ok(Some((3, 2)))));
        assert!(matches!(replica_assignment(&[], 4, 3), Ok(None)));
        let code = |r: Result<Option<(i32, i16)>, BrokerError>| r.unwrap_err().code();
        assert_eq!(code(replica_assignment(&ok, 3, -1)), errors::INVALID_REQUEST);
        let gap = [(0, vec![1]), (2, vec![2])];
        assert_eq!(code(replica_assignment(&gap, -1, -1)), errors::INVALID_REPLICA_ASSIGNMENT);
        let uneven = [(0, vec![1, 2]), (1, vec![2])];
        assert_eq!(code(replica_assignment(&uneven, -1, -1)), errors::INVALID_REPLICA_ASSIGNMENT);
        let twice = [(0, vec![1, 1])];
        assert_eq!(code(replica_assignment(&twice, -1, -1)), errors::INVALID_REPLICA_ASSIGNMENT);
    }
}
