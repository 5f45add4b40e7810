//! Metadata: brokers, the controller, and topics with their partitions (this broker leads
//! every partition: the data lives on bookies, not here). Unknown topics are created when
//! `auto.create.topics.enable` is on and the request allows it.

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use crate::api::{Handler, str_bytes};
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::topics::IfExists;
use crate::domain::topics::{Topic, validate_name};
use crate::errors::{self, BrokerError};
use crate::limits::Limit;
use crate::state::Inner;

pub(crate) struct Metadata;

impl Handler for Metadata {
    type Request = MetadataRequest;
    type Response = MetadataResponse;
    const KEY: ApiKey = ApiKey::Metadata;

    async fn handle(inner: Arc<Inner>, version: i16, req: MetadataRequest) -> MetadataResponse {
        let mut resp = MetadataResponse::default()
            .with_brokers(brokers(&inner))
            .with_controller_id(BrokerId(inner.membership.controller()));
        if version >= 2 {
            resp.cluster_id = Some(str_bytes(inner.cluster_id.clone()));
        }
        // v0: an empty list means every topic; v1+: null does.
        let all = match &req.topics {
            None => true,
            Some(t) => t.is_empty() && version == 0,
        };
        if all {
            match inner.topics.list().await {
                Ok(topics) => {
                    // Topics the principal may not describe are left out (Kafka's rule).
                    resp.topics = topics
                        .iter()
                        .filter(|t| {
                            super::allowed(
                                &inner,
                                Operation::Describe,
                                ResourceType::Topic,
                                &t.name,
                            )
                        })
                        .map(|t| topic(&inner, version, t))
                        .collect()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listing topics failed");
                    if version >= 13 {
                        resp.error_code = errors::KAFKA_STORAGE_ERROR;
                    }
                }
            }
            return resp;
        }
        let auto_create =
            inner.config.auto_create_topics && (version < 4 || req.allow_auto_topic_creation);
        let mut creations = AutoCreations { allowed: auto_create, in_request: 0 };
        for wanted in req.topics.unwrap_or_default() {
            let entry = match (&wanted.name, wanted.topic_id) {
                (Some(name), _) => by_name(&inner, version, name.as_str(), &mut creations).await,
                (None, id) => by_id(&inner, version, id).await,
            };
            resp.topics.push(entry);
        }
        resp
    }

    fn error(_version: i16, req: &MetadataRequest, code: i16) -> MetadataResponse {
        let topics = req.topics.iter().flatten().map(|t| {
            MetadataResponseTopic::default()
                .with_error_code(code)
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
        });
        MetadataResponse::default().with_topics(topics.collect())
    }

    error_code_of!(top, [topics]);
}

/// The registered brokers (`Membership::registered`).
fn brokers(inner: &Inner) -> Vec<MetadataResponseBroker> {
    inner
        .membership
        .registered()
        .into_iter()
        .filter_map(|b| {
            let e = super::endpoint_of(inner, &b)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.node_id))
                    .with_host(str_bytes(e.host))
                    .with_port(e.port),
            )
        })
        .collect()
}

/// Auto-creation within one Metadata request.
struct AutoCreations {
    /// The broker and the request allow it.
    allowed: bool,
    in_request: usize,
}

impl AutoCreations {
    /// Takes one creation if the per-request and per-minute limits leave room; counts the
    /// limit that refused it otherwise.
    fn take(&mut self, inner: &Inner) -> bool {
        let limits = &inner.config.limits;
        if self.in_request >= limits.auto_create_per_request_max {
            inner.metrics.limit_hit(Limit::AutoCreatePerRequest);
            return false;
        }
        let mut window = inner.auto_created.lock().expect("auto-create window lock");
        if window.0.elapsed() >= std::time::Duration::from_secs(60) {
            *window = (tokio::time::Instant::now(), 0);
        }
        if window.1 >= limits.auto_create_per_minute_max {
            inner.metrics.limit_hit(Limit::AutoCreatePerMinute);
            return false;
        }
        window.1 += 1;
        self.in_request += 1;
        true
    }
}

/// A topic by name; auto-created (within the limits) if unknown and allowed. Over a limit
/// the name is answered UNKNOWN_TOPIC_OR_PARTITION, which clients retry.
async fn by_name(
    inner: &Arc<Inner>,
    version: i16,
    name: &str,
    creations: &mut AutoCreations,
) -> MetadataResponseTopic {
    let failed = |code| {
        MetadataResponseTopic::default()
            .with_error_code(code)
            .with_name(Some(TopicName(str_bytes(name))))
    };
    if validate_name(name).is_err() {
        return failed(errors::INVALID_TOPIC_EXCEPTION);
    }
    if !super::allowed(inner, Operation::Describe, ResourceType::Topic, name) {
        return failed(errors::TOPIC_AUTHORIZATION_FAILED);
    }
    let may_create = || {
        super::cluster_denied(inner, Operation::Create).is_none()
            || super::allowed(inner, Operation::Create, ResourceType::Topic, name)
    };
    match inner.topics.get(name).await {
        Ok(Some(t)) => topic(inner, version, &t),
        Ok(None) if creations.allowed && !may_create() => {
            failed(errors::TOPIC_AUTHORIZATION_FAILED)
        }
        Ok(None) if creations.allowed && creations.take(inner) => {
            let (partitions, replication) =
                (inner.config.default_partitions, inner.config.default_replication);
            let new = inner.new_topic(partitions as i32, replication as i16, Default::default());
            match inner.topics.create_topic(name, new, IfExists::Use, false).await {
                Ok(t) => {
                    tracing::info!(topic = name, partitions, "auto-created topic");
                    topic(inner, version, &t)
                }
                Err(e) => {
                    tracing::warn!(topic = name, error = %e, "auto-creating a topic failed");
                    failed(e.code())
                }
            }
        }
        Ok(None) => failed(errors::UNKNOWN_TOPIC_OR_PARTITION),
        Err(e) => {
            tracing::warn!(topic = name, error = %e, "reading a topic failed");
            failed(BrokerError::Meta(e).code())
        }
    }
}

async fn by_id(inner: &Arc<Inner>, version: i16, id: Uuid) -> MetadataResponseTopic {
    match inner.topics.by_id(id).await {
        Ok(Some(t))
            if !super::allowed(inner, Operation::Describe, ResourceType::Topic, &t.name) =>
        {
            MetadataResponseTopic::default()
                .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
                .with_name(None)
                .with_topic_id(id)
        }
        Ok(Some(t)) => topic(inner, version, &t),
        Ok(None) => MetadataResponseTopic::default()
            .with_error_code(errors::UNKNOWN_TOPIC_ID)
            .with_name(None)
            .with_topic_id(id),
        Err(e) => {
            tracing::warn!(%id, error = %e, "reading topics failed");
            MetadataResponseTopic::default()
                .with_error_code(BrokerError::Meta(e).code())
                .with_name(None)
                .with_topic_id(id)
        }
    }
}

fn topic(inner: &Inner, _version: i16, t: &Topic) -> MetadataResponseTopic {
    let partitions = (0..t.record.partitions as i32)
        .map(|p| {
            // The partition's owner among the live brokers leads it; the data is on the
            // bookies, so it is also the only replica Kafka clients need to know. Its
            // epoch is its log's owner epoch (`crate::domain::epochs`).
            let me = BrokerId(
                inner
                    .membership
                    .owner(&crate::domain::cluster::partition_key(t.record.id, p))
                    .node_id,
            );
            let epoch = inner.leader_epoch(t.record.id, p) as i32;
            // No owner: this broker is fenced and sees no other live broker.
            let code = if me.0 == crate::domain::cluster::NO_OWNER {
                crate::errors::LEADER_NOT_AVAILABLE
            } else {
                crate::errors::NONE
            };
            MetadataResponsePartition::default()
                .with_error_code(code)
                .with_partition_index(p)
                .with_leader_id(me)
                .with_leader_epoch(epoch)
                .with_replica_nodes(vec![me])
                .with_isr_nodes(vec![me])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(t.name.clone()))))
        .with_topic_id(t.record.id)
        .with_partitions(partitions)
}
