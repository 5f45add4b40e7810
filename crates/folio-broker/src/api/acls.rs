//! CreateAcls, DescribeAcls and DeleteAcls (`domain::acl`): ALTER (create, delete) or
//! DESCRIBE on the cluster; SECURITY_DISABLED when the broker has no authorizer. A binding
//! that does not validate gets INVALID_REQUEST with the reason; the others of the request
//! are created.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};

use super::{Handler, str_bytes};
use crate::domain::acl::{
    self, AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType,
};
use crate::errors;
use crate::state::Inner;

fn disabled() -> (i16, String) {
    (errors::SECURITY_DISABLED, "no authorizer is configured on this broker (--authorizer)".into())
}

pub(crate) struct CreateAcls;

impl Handler for CreateAcls {
    type Request = CreateAclsRequest;
    type Response = CreateAclsResponse;
    const KEY: ApiKey = ApiKey::CreateAcls;

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: CreateAclsRequest,
    ) -> CreateAclsResponse {
        let mut resp = CreateAclsResponse::default();
        for c in req.creations {
            let (code, msg) = if inner.acls.is_none() {
                disabled()
            } else {
                let b = binding(
                    c.resource_type,
                    c.resource_name.as_str(),
                    c.resource_pattern_type,
                    c.principal.as_str(),
                    c.host.as_str(),
                    c.operation,
                    c.permission_type,
                );
                match b {
                    Err(e) => (errors::INVALID_REQUEST, e),
                    Ok(b) => {
                        match acl::create(inner.env.meta.as_ref(), &inner.env.keys, &b).await {
                            Ok(()) => {
                                tracing::info!(binding = ?b, "ACL created");
                                (errors::NONE, String::new())
                            }
                            Err(e) => (e.code(), e.to_string()),
                        }
                    }
                }
            };
            resp.results.push(
                AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message((code != 0).then(|| str_bytes(msg))),
            );
        }
        reload(&inner).await;
        resp
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        CreateAclsResponse::default().with_results(
            req.creations
                .iter()
                .map(|_| AclCreationResult::default().with_error_code(code))
                .collect(),
        )
    }

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Alter)
    }

    error_code_of!([results]);
}

/// A binding from a request's fields, validated.
fn binding(
    rtype: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    op: i8,
    perm: i8,
) -> Result<AclBinding, String> {
    let b = AclBinding {
        resource_type: ResourceType::from_code(rtype)
            .ok_or(format!("resource type {rtype}: TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID"))?,
        pattern: PatternType::from_code(pattern)
            .ok_or(format!("pattern type {pattern}: LITERAL or PREFIXED"))?,
        name: name.to_string(),
        principal: principal.to_string(),
        host: host.to_string(),
        operation: Operation::from_code(op).ok_or(format!("operation {op} is unknown"))?,
        permission: Permission::from_code(perm)
            .ok_or(format!("permission {perm}: ALLOW or DENY"))?,
    };
    b.validate()?;
    Ok(b)
}

/// Reads the bindings again at once, so this broker's next request sees the change (the
/// others see it through their watch).
async fn reload(inner: &Inner) {
    if let Some(a) = &inner.acls
        && let Err(e) = a.reload(inner.env.meta.as_ref(), &inner.env.keys).await
    {
        tracing::warn!(error = %e, "reloading the ACLs failed; the watch retries");
    }
}

/// The `AclFilter` of a DescribeAcls request or a DeleteAcls filter (the same fields in
/// two generated types).
macro_rules! filter_of {
    ($r:expr) => {
        AclFilter {
            resource_type: $r.resource_type_filter,
            name: $r.resource_name_filter.map(|n| n.to_string()),
            pattern: $r.pattern_type_filter,
            principal: $r.principal_filter.map(|n| n.to_string()),
            host: $r.host_filter.map(|n| n.to_string()),
            operation: $r.operation,
            permission: $r.permission_type,
        }
    };
}

pub(crate) struct DescribeAcls;

impl Handler for DescribeAcls {
    type Request = DescribeAclsRequest;
    type Response = DescribeAclsResponse;
    const KEY: ApiKey = ApiKey::DescribeAcls;

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DescribeAclsRequest,
    ) -> DescribeAclsResponse {
        if inner.acls.is_none() {
            let (code, msg) = disabled();
            return DescribeAclsResponse::default()
                .with_error_code(code)
                .with_error_message(Some(str_bytes(msg)));
        }
        let f = filter_of!(req);
        if let Err(e) = f.validate() {
            return DescribeAclsResponse::default()
                .with_error_code(errors::INVALID_REQUEST)
                .with_error_message(Some(str_bytes(e)));
        }
        let all = match acl::list(inner.env.meta.as_ref(), &inner.env.keys).await {
            Ok(all) => all,
            Err(e) => {
                return DescribeAclsResponse::default()
                    .with_error_code(errors::KAFKA_STORAGE_ERROR)
                    .with_error_message(Some(str_bytes(e.to_string())));
            }
        };
        let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
        for b in all.iter().filter(|b| f.matches(b)) {
            by_resource
                .entry((b.resource_type.code(), b.name.clone(), b.pattern.code()))
                .or_default()
                .push(
                    AclDescription::default()
                        .with_principal(str_bytes(b.principal.clone()))
                        .with_host(str_bytes(b.host.clone()))
                        .with_operation(b.operation.code())
                        .with_permission_type(b.permission.code()),
                );
        }
        DescribeAclsResponse::default().with_resources(
            by_resource
                .into_iter()
                .map(|((t, n, p), acls)| {
                    DescribeAclsResource::default()
                        .with_resource_type(t)
                        .with_resource_name(str_bytes(n))
                        .with_pattern_type(p)
                        .with_acls(acls)
                })
                .collect(),
        )
    }

    error_answer_of!(top);

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Describe)
    }

    error_code_of!(top);
}

pub(crate) struct DeleteAcls;

impl Handler for DeleteAcls {
    type Request = DeleteAclsRequest;
    type Response = DeleteAclsResponse;
    const KEY: ApiKey = ApiKey::DeleteAcls;

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DeleteAclsRequest,
    ) -> DeleteAclsResponse {
        let mut resp = DeleteAclsResponse::default();
        for f in req.filters {
            let f = filter_of!(f);
            let result = if inner.acls.is_none() {
                Err(disabled())
            } else if let Err(e) = f.validate() {
                Err((errors::INVALID_REQUEST, e.to_string()))
            } else {
                acl::delete(inner.env.meta.as_ref(), &inner.env.keys, |b| f.matches(b))
                    .await
                    .map_err(|e| (e.code(), e.to_string()))
            };
            resp.filter_results.push(match result {
                Err((code, msg)) => DeleteAclsFilterResult::default()
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(msg))),
                Ok(deleted) => {
                    for b in &deleted {
                        tracing::info!(binding = ?b, "ACL deleted");
                    }
                    DeleteAclsFilterResult::default().with_matching_acls(
                        deleted
                            .into_iter()
                            .map(|b| {
                                DeleteAclsMatchingAcl::default()
                                    .with_resource_type(b.resource_type.code())
                                    .with_resource_name(str_bytes(b.name))
                                    .with_pattern_type(b.pattern.code())
                                    .with_principal(str_bytes(b.principal))
                                    .with_host(str_bytes(b.host))
                                    .with_operation(b.operation.code())
                                    .with_permission_type(b.permission.code())
                            })
                            .collect(),
                    )
                }
            });
        }
        reload(&inner).await;
        resp
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        DeleteAclsResponse::default().with_filter_results(
            req.filters
                .iter()
                .map(|_| DeleteAclsFilterResult::default().with_error_code(code))
                .collect(),
        )
    }

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Alter)
    }

    error_code_of!([filter_results]);
}
