//! Consumer groups on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, ListGroups, DescribeGroups, DeleteGroups (OffsetCommit and OffsetFetch:
//! `group_offsets.rs`). The
//! state machine is in `group.rs`; this broker coordinates every group.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as CoordinatorEntry;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::api::{Handler, Refused, str_bytes};
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::cluster::{group_key, txn_key};
use crate::domain::group::JoinRequest;
use crate::errors;
use crate::state::Inner;

/// The error a request for `group` gets before anything else: INVALID_GROUP_ID for an id
/// above `GROUP_ID_BYTES_MAX`, NOT_COORDINATOR when another broker coordinates it.
pub(super) fn elsewhere(inner: &Inner, group: &str) -> Option<i16> {
    if group.len() > crate::domain::group::GROUP_ID_BYTES_MAX {
        inner.metrics.limit_hit(crate::limits::Limit::Names);
        return Some(errors::INVALID_GROUP_ID);
    }
    (!inner.membership.owns(&group_key(group))).then_some(errors::NOT_COORDINATOR)
}

pub(super) fn s(v: &StrBytes) -> &str {
    v.as_str()
}

pub(crate) struct FindCoordinator;

impl Handler for FindCoordinator {
    type Request = FindCoordinatorRequest;
    type Response = FindCoordinatorResponse;
    const KEY: ApiKey = ApiKey::FindCoordinator;

    /// Up to v3 one key: the whole request; from v4 each key of the batch.
    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        if req.key.is_empty() {
            return None;
        }
        match req.key_type {
            0 => super::group_denied(inner, Operation::Describe, req.key.as_str()),
            1 => super::all_denied(
                inner,
                Operation::Describe,
                ResourceType::TransactionalId,
                [req.key.as_str()],
                errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            ),
            _ => None,
        }
    }

    fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
        let (rtype, code) = match req.key_type {
            0 => (ResourceType::Group, errors::GROUP_AUTHORIZATION_FAILED),
            1 => (ResourceType::TransactionalId, errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            _ => return Vec::new(),
        };
        let denied = |k: &StrBytes| !super::allowed(inner, Operation::Describe, rtype, k.as_str());
        let build = |keys| FindCoordinatorRequest::default().with_coordinator_keys(keys);
        super::refuse(&mut req.coordinator_keys, denied, code, build).into_iter().collect()
    }

    fn merge(resp: &mut Self::Response, refused: Self::Response) {
        resp.coordinators.extend(refused.coordinators);
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: FindCoordinatorRequest,
    ) -> FindCoordinatorResponse {
        // Key type 0: a group, 1: a transactional id. Share groups (2) are not coordinated.
        let key_type = req.key_type;
        let code = if matches!(key_type, 0 | 1) { errors::NONE } else { errors::INVALID_REQUEST };
        let owner = |key: &str| {
            let k = if key_type == 1 { txn_key(key) } else { group_key(key) };
            inner.membership.owner(&k)
        };
        if version >= 4 {
            let coordinators = req
                .coordinator_keys
                .iter()
                .map(|k| {
                    let e = CoordinatorEntry::default().with_key(k.clone()).with_error_code(code);
                    if code != 0 {
                        return e.with_node_id(BrokerId(-1)).with_port(-1);
                    }
                    let b = owner(k.as_str());
                    match super::endpoint_of(&inner, &b) {
                        Some(ep) => e
                            .with_node_id(BrokerId(b.node_id))
                            .with_host(str_bytes(ep.host))
                            .with_port(ep.port),
                        None => e
                            .with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
                            .with_node_id(BrokerId(-1))
                            .with_port(-1),
                    }
                })
                .collect();
            return FindCoordinatorResponse::default().with_coordinators(coordinators);
        }
        if code != 0 {
            return FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
        }
        let b = owner(req.key.as_str());
        let Some(ep) = super::endpoint_of(&inner, &b) else {
            return FindCoordinatorResponse::default()
                .with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
        };
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(b.node_id))
            .with_host(str_bytes(ep.host))
            .with_port(ep.port)
    }

    fn error(version: i16, req: &FindCoordinatorRequest, code: i16) -> FindCoordinatorResponse {
        if version >= 4 {
            return FindCoordinatorResponse::default().with_coordinators(
                req.coordinator_keys
                    .iter()
                    .map(|k| CoordinatorEntry::default().with_key(k.clone()).with_error_code(code))
                    .collect(),
            );
        }
        FindCoordinatorResponse::default().with_error_code(code)
    }

    error_code_of!(top, [coordinators]);
}

pub(crate) struct JoinGroup;

impl Handler for JoinGroup {
    type Request = JoinGroupRequest;
    type Response = JoinGroupResponse;
    const KEY: ApiKey = ApiKey::JoinGroup;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: JoinGroupRequest) -> JoinGroupResponse {
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        let instance_max = crate::limits::GROUP_INSTANCE_ID_BYTES_MAX;
        if req.group_instance_id.as_ref().is_some_and(|i| i.len() > instance_max) {
            inner.metrics.limit_hit(crate::limits::Limit::Names);
            return Self::error(version, &req, errors::INVALID_REQUEST);
        }
        let session = std::time::Duration::from_millis(req.session_timeout_ms.max(0) as u64);
        // v0 has no rebalance timeout: it is the session timeout.
        let rebalance = if version >= 1 && req.rebalance_timeout_ms > 0 {
            std::time::Duration::from_millis(req.rebalance_timeout_ms as u64)
        } else {
            session
        };
        let protocols = req
            .protocols
            .iter()
            .map(|p| (p.name.as_str().to_string(), p.metadata.clone()))
            .collect();
        let client = super::REQUEST.try_with(|r| r.client_id.clone()).unwrap_or_default();
        let j = JoinRequest {
            group: s(&req.group_id),
            client_id: &client,
            member_id: s(&req.member_id),
            instance_id: req.group_instance_id.as_ref().map(|i| i.as_str()),
            protocol_type: s(&req.protocol_type),
            protocols,
            session_timeout: session,
            rebalance_timeout: rebalance,
        };
        let topics = super::CachedTopics { inner: &inner };
        let r = inner.groups.join(j, &topics).await;
        if r.error == errors::POLICY_VIOLATION {
            inner.metrics.limit_hit(crate::limits::Limit::Groups);
        }
        let mut resp = JoinGroupResponse::default()
            .with_error_code(r.error)
            .with_generation_id(r.generation)
            .with_leader(str_bytes(r.leader))
            .with_member_id(str_bytes(r.member_id))
            .with_members(
                r.members
                    .into_iter()
                    .map(|(id, meta)| {
                        JoinGroupResponseMember::default()
                            .with_member_id(str_bytes(id))
                            .with_metadata(meta)
                    })
                    .collect(),
            );
        resp.protocol_name = r.protocol.map(str_bytes);
        if version >= 7 {
            resp.protocol_type = r.protocol_type.map(str_bytes);
        }
        resp
    }

    fn error(_version: i16, req: &JoinGroupRequest, code: i16) -> JoinGroupResponse {
        JoinGroupResponse::default().with_error_code(code).with_member_id(req.member_id.clone())
    }

    error_code_of!(top);
}

pub(crate) struct SyncGroup;

impl Handler for SyncGroup {
    type Request = SyncGroupRequest;
    type Response = SyncGroupResponse;
    const KEY: ApiKey = ApiKey::SyncGroup;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: SyncGroupRequest) -> SyncGroupResponse {
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        let assignments = req
            .assignments
            .iter()
            .map(|a| (a.member_id.as_str().to_string(), a.assignment.clone()))
            .collect();
        let r = inner
            .groups
            .sync(
                s(&req.group_id),
                req.generation_id,
                s(&req.member_id),
                req.group_instance_id.as_ref().map(|i| i.as_str()),
                assignments,
            )
            .await;
        let mut resp =
            SyncGroupResponse::default().with_error_code(r.error).with_assignment(r.assignment);
        if version >= 5 {
            resp.protocol_type = r.protocol_type.map(str_bytes);
            resp.protocol_name = r.protocol.map(str_bytes);
        }
        resp
    }

    error_answer_of!(top);

    error_code_of!(top);
}

pub(crate) struct Heartbeat;

impl Handler for Heartbeat {
    type Request = HeartbeatRequest;
    type Response = HeartbeatResponse;
    const KEY: ApiKey = ApiKey::Heartbeat;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: HeartbeatRequest) -> HeartbeatResponse {
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        HeartbeatResponse::default().with_error_code(inner.groups.heartbeat(
            s(&req.group_id),
            req.generation_id,
            s(&req.member_id),
            req.group_instance_id.as_ref().map(|i| i.as_str()),
        ))
    }

    error_answer_of!(top);

    error_code_of!(top);
}

pub(crate) struct LeaveGroup;

impl Handler for LeaveGroup {
    type Request = LeaveGroupRequest;
    type Response = LeaveGroupResponse;
    const KEY: ApiKey = ApiKey::LeaveGroup;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        super::group_denied(inner, Operation::Read, &req.group_id)
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: LeaveGroupRequest) -> LeaveGroupResponse {
        if let Some(code) = elsewhere(&inner, s(&req.group_id)) {
            return Self::error(version, &req, code);
        }
        if version < 3 {
            let code = inner
                .groups
                .leave(s(&req.group_id), &[(req.member_id.as_str().to_string(), None)])
                .await[0];
            return LeaveGroupResponse::default().with_error_code(code);
        }
        let ids: Vec<(String, Option<String>)> = req
            .members
            .iter()
            .map(|m| {
                let instance = m.group_instance_id.as_ref().map(|i| i.as_str().to_string());
                (m.member_id.as_str().to_string(), instance)
            })
            .collect();
        let codes = inner.groups.leave(s(&req.group_id), &ids).await;
        LeaveGroupResponse::default().with_members(
            req.members
                .iter()
                .zip(codes)
                .map(|(m, code)| {
                    MemberResponse::default()
                        .with_member_id(m.member_id.clone())
                        .with_group_instance_id(m.group_instance_id.clone())
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_answer_of!(top);

    error_code_of!(top, [members]);
}

pub(crate) struct ListGroups;

impl Handler for ListGroups {
    type Request = ListGroupsRequest;
    type Response = ListGroupsResponse;
    const KEY: ApiKey = ApiKey::ListGroups;

    /// DESCRIBE on the cluster lists every group; without it, the groups the principal may
    /// describe (Kafka's rule: the list is filtered, never refused).
    async fn handle(inner: Arc<Inner>, version: i16, req: ListGroupsRequest) -> ListGroupsResponse {
        let every = super::cluster_denied(&inner, Operation::Describe).is_none();
        let visible = |name: &str| {
            every || super::allowed(&inner, Operation::Describe, ResourceType::Group, name)
        };
        match inner.groups.list().await {
            Ok(groups) => ListGroupsResponse::default().with_groups(
                groups
                    .into_iter()
                    .filter(|g| visible(&g.name))
                    .filter(|g| {
                        req.states_filter.is_empty()
                            || req
                                .states_filter
                                .iter()
                                .any(|f| f.as_str().eq_ignore_ascii_case(g.state))
                    })
                    .filter(|g| {
                        req.types_filter.is_empty()
                            || req
                                .types_filter
                                .iter()
                                .any(|f| f.as_str().eq_ignore_ascii_case(g.kind))
                    })
                    .map(|g| {
                        let mut out = ListedGroup::default()
                            .with_group_id(GroupId(str_bytes(g.name)))
                            .with_protocol_type(str_bytes(g.protocol_type));
                        if version >= 4 {
                            out.group_state = str_bytes(g.state);
                        }
                        if version >= 5 {
                            out.group_type = str_bytes(g.kind);
                        }
                        out
                    })
                    .collect(),
            ),
            Err(_) => {
                ListGroupsResponse::default().with_error_code(errors::COORDINATOR_NOT_AVAILABLE)
            }
        }
    }

    error_answer_of!(top);

    error_code_of!(top);
}

pub(crate) struct DescribeGroups;

impl Handler for DescribeGroups {
    type Request = DescribeGroupsRequest;
    type Response = DescribeGroupsResponse;
    const KEY: ApiKey = ApiKey::DescribeGroups;

    refuse_each!(
        groups => groups,
        Describe on Group,
        GROUP_AUTHORIZATION_FAILED,
        |g| g.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DescribeGroupsRequest,
    ) -> DescribeGroupsResponse {
        let mut resp = DescribeGroupsResponse::default();
        for g in req.groups {
            let mut out = DescribedGroup::default().with_group_id(g.clone());
            if let Some(code) = elsewhere(&inner, g.as_str()) {
                resp.groups.push(out.with_error_code(code));
                continue;
            }
            if inner.groups.is_consumer_group(g.as_str()) {
                // Kafka's answer: a consumer-protocol group is described by
                // ConsumerGroupDescribe.
                resp.groups.push(out.with_error_code(errors::GROUP_ID_NOT_FOUND));
                continue;
            }
            match inner.groups.describe(g.as_str()) {
                Some(info) => {
                    out.group_state = str_bytes(info.state.name());
                    out.protocol_type = str_bytes(info.protocol_type);
                    out.protocol_data = str_bytes(info.protocol.clone());
                    out.members = info
                        .members
                        .into_iter()
                        .map(|m| {
                            let meta = m
                                .protocols
                                .iter()
                                .find(|(p, _)| *p == info.protocol)
                                .map(|(_, b)| b.clone())
                                .unwrap_or_default();
                            DescribedGroupMember::default()
                                .with_member_id(str_bytes(m.id))
                                .with_member_metadata(meta)
                                .with_member_assignment(m.assignment)
                        })
                        .collect();
                }
                // Unknown here: Kafka describes it as Dead with no members.
                None => out.group_state = str_bytes("Dead"),
            }
            resp.groups.push(out);
        }
        resp
    }

    fn error(_version: i16, req: &DescribeGroupsRequest, code: i16) -> DescribeGroupsResponse {
        DescribeGroupsResponse::default().with_groups(
            req.groups
                .iter()
                .map(|g| DescribedGroup::default().with_group_id(g.clone()).with_error_code(code))
                .collect(),
        )
    }

    error_code_of!([groups]);
}

pub(crate) struct DeleteGroups;

impl Handler for DeleteGroups {
    type Request = DeleteGroupsRequest;
    type Response = DeleteGroupsResponse;
    const KEY: ApiKey = ApiKey::DeleteGroups;

    refuse_each!(
        groups_names => results,
        Delete on Group,
        GROUP_AUTHORIZATION_FAILED,
        |g| g.as_str()
    );

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DeleteGroupsRequest,
    ) -> DeleteGroupsResponse {
        let mut resp = DeleteGroupsResponse::default();
        for g in req.groups_names {
            let mut code = match elsewhere(&inner, g.as_str()) {
                Some(code) => code,
                None => inner.groups.delete(g.as_str()).await,
            };
            if matches!(code, errors::NONE | errors::GROUP_ID_NOT_FOUND) {
                // A share group's stored share-partitions go with it.
                match inner.shares.delete_group(g.as_str()).await {
                    Ok(n) if n > 0 => code = errors::NONE,
                    Ok(_) => {}
                    Err(_) => code = errors::COORDINATOR_NOT_AVAILABLE,
                }
            }
            resp.results
                .push(DeletableGroupResult::default().with_group_id(g).with_error_code(code));
        }
        resp
    }

    fn error(_version: i16, req: &DeleteGroupsRequest, code: i16) -> DeleteGroupsResponse {
        DeleteGroupsResponse::default().with_results(
            req.groups_names
                .iter()
                .map(|g| {
                    DeletableGroupResult::default().with_group_id(g.clone()).with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([results]);
}
