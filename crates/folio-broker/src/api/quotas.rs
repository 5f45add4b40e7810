//! DescribeClientQuotas and AlterClientQuotas (KIP-546): the client quotas in the metadata
//! store (`crate::domain::quotas`), by user and client id. Only `producer_byte_rate` and
//! `consumer_byte_rate` are enforced, so other keys (and `ip` entities) are refused with
//! INVALID_REQUEST rather than stored and ignored. DESCRIBE_CONFIGS / ALTER_CONFIGS on the
//! cluster, as Kafka checks them. An alteration is in the cache of the broker that made it
//! when it answers; the others follow their watch.

use std::sync::Arc;

use kafka_protocol::messages::alter_client_quotas_request::EntityData as AlterEntity;
use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlteredEntity, EntryData as AlteredEntry,
};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};

use crate::api::{Handler, str_bytes};
use crate::domain::acl::Operation;
use crate::domain::quotas::{self, Entity, Kind, Part};
use crate::errors;
use crate::state::Inner;
use tokio::time::Instant;

/// Throttles the request being handled (see [`throttle_request`]). Outside a request: 0.
pub(crate) fn throttle(inner: &crate::state::Inner, kind: Kind, bytes: usize) -> i32 {
    super::REQUEST.try_with(|r| throttle_request(inner, r, kind, bytes)).unwrap_or(0)
}

/// Throttles request `r` (its session's user, its client id) for `bytes` of `kind`: mutes
/// its connection and returns `throttle_time_ms`.
pub(crate) fn throttle_request(
    inner: &crate::state::Inner,
    r: &crate::budget::RequestScope,
    kind: Kind,
    bytes: usize,
) -> i32 {
    let principal = &r.session.principal;
    let user = principal.strip_prefix("User:").unwrap_or(principal);
    let (client, mute) = (&r.client_id, &r.mute);
    let now = Instant::now();
    let t = inner.quotas.record(kind, user, client, bytes, now);
    if t.is_zero() {
        return 0;
    }
    let until = now + t;
    let mut m = mute.lock().unwrap_or_else(|p| p.into_inner());
    *m = (*m).max(until);
    let ms = t.as_millis().min(i32::MAX as u128) as i32;
    inner.metrics.throttled(kind, ms as u64);
    tracing::debug!(user, client = %client, ?kind, ms, "throttled by a client quota");
    ms
}

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";

/// The part of `e` an entity type names.
fn part_of<'a>(e: &'a Entity, entity_type: &str) -> Result<&'a Option<Part>, String> {
    match entity_type {
        USER => Ok(&e.user),
        CLIENT_ID => Ok(&e.client_id),
        t => Err(format!("entity type {t:?} is not supported here (only user and client-id)")),
    }
}

/// Whether component `c` of a describe filter matches `e`.
fn matches(e: &Entity, c: &ComponentData) -> Result<bool, String> {
    let part = part_of(e, c.entity_type.as_str())?;
    Ok(match (c.match_type, part) {
        (_, None) => false,
        (0, Some(Part::Named(n))) => c._match.as_ref().is_some_and(|m| m.as_str() == n),
        (0, Some(Part::Default)) => c._match.is_none(),
        (1, p) => *p == Some(Part::Default),
        (2, p) => matches!(p, Some(Part::Named(_))),
        (m, _) => return Err(format!("match type {m} is not one of 0, 1, 2")),
    })
}

pub(crate) struct DescribeClientQuotas;

impl Handler for DescribeClientQuotas {
    type Request = DescribeClientQuotasRequest;
    type Response = DescribeClientQuotasResponse;
    const KEY: ApiKey = ApiKey::DescribeClientQuotas;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::DescribeConfigs)
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: DescribeClientQuotasRequest,
    ) -> DescribeClientQuotasResponse {
        let all = match quotas::list(inner.env.meta.as_ref(), &inner.env.keys).await {
            Ok(all) => all,
            Err(e) => {
                let resp = Self::error(0, &req, errors::KAFKA_STORAGE_ERROR);
                return resp.with_error_message(Some(str_bytes(e.to_string())));
            }
        };
        let mut entries = Vec::new();
        for (e, values) in &all {
            let mut ok = true;
            for c in &req.components {
                match matches(e, c) {
                    Ok(m) => ok &= m,
                    Err(why) => {
                        let resp = Self::error(0, &req, errors::INVALID_REQUEST);
                        return resp.with_error_message(Some(str_bytes(why)));
                    }
                }
            }
            let named = usize::from(e.user.is_some()) + usize::from(e.client_id.is_some());
            if !ok || (req.strict && named != req.components.len()) {
                continue;
            }
            let entity = [(USER, &e.user), (CLIENT_ID, &e.client_id)]
                .into_iter()
                .filter_map(|(t, p)| {
                    let name = match p.as_ref()? {
                        Part::Named(n) => Some(str_bytes(n.clone())),
                        Part::Default => None,
                    };
                    Some(
                        EntityData::default().with_entity_type(str_bytes(t)).with_entity_name(name),
                    )
                })
                .collect();
            let values = values
                .iter()
                .map(|(k, v)| ValueData::default().with_key(str_bytes(k.clone())).with_value(*v))
                .collect();
            entries.push(EntryData::default().with_entity(entity).with_values(values));
        }
        DescribeClientQuotasResponse::default().with_entries(Some(entries))
    }

    fn error(
        _version: i16,
        _req: &DescribeClientQuotasRequest,
        code: i16,
    ) -> DescribeClientQuotasResponse {
        DescribeClientQuotasResponse::default().with_error_code(code)
    }

    error_code_of!(top);
}

pub(crate) struct AlterClientQuotas;

/// The entity an alteration names, checked.
fn entity_of(parts: &[AlterEntity]) -> Result<Entity, String> {
    let mut e = Entity::default();
    for p in parts {
        let part = match &p.entity_name {
            Some(n) => Part::Named(n.as_str().to_string()),
            None => Part::Default,
        };
        let slot = match p.entity_type.as_str() {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            t => {
                return Err(format!(
                    "entity type {t:?} is not supported here (only user and client-id)"
                ));
            }
        };
        if slot.replace(part).is_some() {
            return Err(format!("entity type {} named twice", p.entity_type.as_str()));
        }
    }
    if e.user.is_none() && e.client_id.is_none() {
        return Err("an entity names a user, a client id or both".into());
    }
    quotas::check_part(&e.user)?;
    quotas::check_part(&e.client_id)?;
    Ok(e)
}

impl Handler for AlterClientQuotas {
    type Request = AlterClientQuotasRequest;
    type Response = AlterClientQuotasResponse;
    const KEY: ApiKey = ApiKey::AlterClientQuotas;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::AlterConfigs)
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: AlterClientQuotasRequest,
    ) -> AlterClientQuotasResponse {
        let mut resp = Self::error(version, &req, 0);
        let mut changes = Vec::new();
        let mut applied = Vec::new();
        for (i, (entry, out)) in req.entries.iter().zip(&mut resp.entries).enumerate() {
            let checked = entity_of(&entry.entity).and_then(|e| {
                let ops: Vec<(String, Option<f64>)> = entry
                    .ops
                    .iter()
                    .map(|o| (o.key.as_str().to_string(), (!o.remove).then_some(o.value)))
                    .collect();
                for (k, v) in &ops {
                    quotas::check_op(k, *v)?;
                }
                Ok((e, ops))
            });
            match checked {
                Ok(change) => {
                    changes.push(change);
                    applied.push(i);
                }
                Err(why) => {
                    out.error_code = errors::INVALID_REQUEST;
                    out.error_message = Some(str_bytes(why));
                }
            }
        }
        if req.validate_only || changes.is_empty() {
            return resp;
        }
        let (meta, keys) = (inner.env.meta.as_ref(), &inner.env.keys);
        let done = match quotas::alter(meta, keys, &changes).await {
            Ok(()) => quotas::list(meta, keys)
                .await
                .map(|all| inner.quotas.set(all))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(why) = done {
            tracing::warn!(error = %why, "altering client quotas failed");
            for i in applied {
                resp.entries[i].error_code = errors::KAFKA_STORAGE_ERROR;
                resp.entries[i].error_message = Some(str_bytes(why.clone()));
            }
        }
        resp
    }

    fn error(
        _version: i16,
        req: &AlterClientQuotasRequest,
        code: i16,
    ) -> AlterClientQuotasResponse {
        let entries = req.entries.iter().map(|e| {
            let entity = e.entity.iter().map(|p| {
                AlteredEntity::default()
                    .with_entity_type(p.entity_type.clone())
                    .with_entity_name(p.entity_name.clone())
            });
            AlteredEntry::default().with_error_code(code).with_entity(entity.collect())
        });
        AlterClientQuotasResponse::default().with_entries(entries.collect())
    }

    error_code_of!([entries]);
}
