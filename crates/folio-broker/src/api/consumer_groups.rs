//! The consumer group protocol on the wire (KIP-848): ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe. The coordinator's side is `domain::group::consumer`.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response as describe;
use kafka_protocol::messages::consumer_group_heartbeat_response as beat;
use kafka_protocol::messages::*;

use super::groups::{elsewhere, s};
use crate::api::{Handler, Refused, str_bytes};
use crate::domain::acl::Operation;
use crate::domain::group::consumer::{HeartbeatArgs, Partitions};
use crate::errors;
use crate::state::Inner;

/// The broker's topic cache as the coordinator sees it: subscription regexes match only
/// topics the member's principal may describe (Kafka filters them the same way).
fn partitions_of(
    tps: &[kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions],
) -> Partitions {
    let mut out = Partitions::new();
    for tp in tps {
        out.entry(tp.topic_id).or_default().extend(tp.partitions.iter().copied());
    }
    out
}

/// A group config in ms (`domain::group::configs`), if the group sets it (a store that
/// fails to answer leaves the broker's setting).
pub(super) async fn group_ms(inner: &Inner, group: &str, key: &str) -> Option<std::time::Duration> {
    let set = inner.group_configs.get(group).await.ok()?;
    set.get(key).and_then(|v| v.parse().ok()).map(std::time::Duration::from_millis)
}

pub(crate) struct ConsumerGroupHeartbeat;

impl Handler for ConsumerGroupHeartbeat {
    type Request = ConsumerGroupHeartbeatRequest;
    type Response = ConsumerGroupHeartbeatResponse;
    const KEY: ApiKey = ApiKey::ConsumerGroupHeartbeat;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: ConsumerGroupHeartbeatRequest,
    ) -> ConsumerGroupHeartbeatResponse {
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        let scope =
            super::REQUEST.try_with(|r| (r.client_id.to_string(), r.session.host.to_string()));
        let (client_id, client_host) = scope.unwrap_or_default();
        let args = HeartbeatArgs {
            group: s(&req.group_id).to_string(),
            member_id: req.member_id.as_str().to_string(),
            epoch: req.member_epoch,
            instance_id: req.instance_id.as_ref().map(|i| i.as_str().to_string()),
            rack: req.rack_id.as_ref().map(|r| r.as_str().to_string()),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            names: req
                .subscribed_topic_names
                .as_ref()
                .map(|ns| ns.iter().map(|n| n.as_str().to_string()).collect()),
            regex: req.subscribed_topic_regex.as_ref().map(|r| r.as_str().to_string()),
            assignor: req.server_assignor.as_ref().map(|a| a.as_str().to_string()),
            owned: req.topic_partitions.as_deref().map(partitions_of),
            client_id,
            client_host,
            version,
            session_timeout: group_ms(&inner, s(&req.group_id), "consumer.session.timeout.ms")
                .await,
            heartbeat_interval: group_ms(
                &inner,
                s(&req.group_id),
                "consumer.heartbeat.interval.ms",
            )
            .await,
        };
        let a =
            inner.groups.consumer_heartbeat(&args, &super::CachedTopics { inner: &inner }).await;
        if a.error == errors::POLICY_VIOLATION {
            inner.metrics.limit_hit(crate::limits::Limit::Groups);
        }
        if a.error != errors::NONE {
            // Clients treat some of these as fatal: the log says which and why.
            tracing::debug!(group = %args.group, member = %args.member_id, epoch = args.epoch, error = a.error, message = ?a.message, "consumer group heartbeat refused");
        }
        let mut resp = ConsumerGroupHeartbeatResponse::default()
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
        ConsumerGroupHeartbeatResponse::default().with_error_code(code)
    }

    error_code_of!(top);
}

pub(crate) struct ConsumerGroupDescribe;

/// A ConsumerGroupDescribe assignment: partitions with their topic's id and name.
fn described(names: &HashMap<uuid::Uuid, String>, ps: &Partitions) -> describe::Assignment {
    describe::Assignment::default().with_topic_partitions(
        ps.iter()
            .map(|(t, set)| {
                let name = names.get(t).cloned().unwrap_or_default();
                describe::TopicPartitions::default()
                    .with_topic_id(*t)
                    .with_topic_name(TopicName(str_bytes(name)))
                    .with_partitions(set.iter().copied().collect())
            })
            .collect(),
    )
}

impl Handler for ConsumerGroupDescribe {
    type Request = ConsumerGroupDescribeRequest;
    type Response = ConsumerGroupDescribeResponse;
    const KEY: ApiKey = ApiKey::ConsumerGroupDescribe;

    refuse_each!(
        group_ids => groups,
        Describe on Group,
        GROUP_AUTHORIZATION_FAILED,
        |g| g.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        let mut resp = ConsumerGroupDescribeResponse::default();
        let names: HashMap<uuid::Uuid, String> =
            inner.topics.cached_all().iter().map(|t| (t.record.id, t.name.clone())).collect();
        for g in req.group_ids {
            let out = describe::DescribedGroup::default().with_group_id(g.clone());
            if let Some(code) = elsewhere(&inner, g.as_str()) {
                resp.groups.push(out.with_error_code(code));
                continue;
            }
            let Some(info) = inner.groups.describe_consumer(g.as_str()) else {
                let msg = format!("group {} is not a consumer group here", g.as_str());
                resp.groups.push(
                    out.with_error_code(errors::GROUP_ID_NOT_FOUND)
                        .with_error_message(Some(str_bytes(msg))),
                );
                continue;
            };
            let members = info
                .members
                .iter()
                .map(|m| {
                    let mm = &m.member;
                    describe::Member::default()
                        .with_member_id(str_bytes(mm.id.clone()))
                        .with_instance_id(mm.instance_id.clone().map(str_bytes))
                        .with_rack_id(mm.rack.clone().map(str_bytes))
                        .with_member_epoch(mm.epoch)
                        .with_client_id(str_bytes(mm.client_id.clone()))
                        .with_client_host(str_bytes(mm.client_host.clone()))
                        .with_subscribed_topic_names(
                            mm.names.iter().map(|n| TopicName(str_bytes(n.clone()))).collect(),
                        )
                        .with_subscribed_topic_regex(mm.regex.clone().map(str_bytes))
                        .with_assignment(described(&names, &mm.assigned))
                        .with_target_assignment(described(&names, &m.target))
                        .with_member_type(if mm.classic.is_some() { 0 } else { 1 })
                })
                .collect();
            resp.groups.push(
                out.with_group_state(str_bytes(info.state))
                    .with_group_epoch(info.epoch)
                    .with_assignment_epoch(info.target_epoch)
                    .with_assignor_name(str_bytes(info.assignor))
                    .with_members(members),
            );
        }
        resp
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        ConsumerGroupDescribeResponse::default().with_groups(
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
