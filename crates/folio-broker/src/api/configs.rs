//! Topic configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.
//!
//! Config changes are validated, written to the topic record by compare-and-set, and
//! applied to the open partition logs at once (retention trims immediately).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::{Handler, Refused, str_bytes};
use crate::domain::acl::Operation;
use crate::domain::topics::{TOPIC_CONFIG_KEYS, Topic, validate_configs};
use crate::errors::{self, BrokerError};
use crate::state::Inner;

/// Kafka's config resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// A group's dynamic configs (KIP-848, KIP-932).
const RESOURCE_GROUP: i8 = 32;
/// ConfigSource GROUP_CONFIG: set on the group.
const SOURCE_GROUP: i8 = 8;
/// Kafka's config sources.
const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
/// Kafka's config types.
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;
const TYPE_BOOLEAN: i8 = 1;

/// Where a topic config's value comes from (Kafka's config source).
pub(super) fn source(topic: &Topic, key: &str) -> i8 {
    if topic.record.configs.contains_key(key) { SOURCE_TOPIC } else { SOURCE_DEFAULT }
}

fn config_type(key: &str) -> i8 {
    match key {
        "retention.ms" | "retention.bytes" | "log.retention.ms" | "log.retention.bytes" => {
            TYPE_LONG
        }
        "max.message.bytes" | "message.max.bytes" | "num.partitions" => TYPE_INT,
        "default.replication.factor" => TYPE_INT,
        "cleanup.policy" => TYPE_LIST,
        "auto.create.topics.enable" => TYPE_BOOLEAN,
        _ => TYPE_STRING,
    }
}

pub(crate) struct DescribeConfigs;

impl Handler for DescribeConfigs {
    type Request = DescribeConfigsRequest;
    type Response = DescribeConfigsResponse;
    const KEY: ApiKey = ApiKey::DescribeConfigs;

    fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
        super::refuse_configs(
            inner,
            Operation::DescribeConfigs,
            &mut req.resources,
            |r| (r.resource_type, r.resource_name.as_str()),
            |resources| DescribeConfigsRequest::default().with_resources(resources),
        )
    }

    fn merge(resp: &mut Self::Response, refused: Self::Response) {
        resp.results.extend(refused.results);
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: DescribeConfigsRequest,
    ) -> DescribeConfigsResponse {
        let mut resp = DescribeConfigsResponse::default();
        for res in req.resources {
            let mut r = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            let wanted = |k: &str| {
                res.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|w| w.as_str() == k))
            };
            let entry = |k: &str, v: String, read_only: bool, src: i8, doc: &str| {
                let mut e = DescribeConfigsResourceResult::default()
                    .with_name(str_bytes(k))
                    .with_value(Some(str_bytes(v)))
                    .with_read_only(read_only)
                    .with_config_source(src);
                if version >= 3 {
                    e.config_type = config_type(k);
                    if req.include_documentation {
                        e.documentation = Some(str_bytes(doc));
                    }
                }
                e
            };
            // A topic's or group's configs, or why there are none.
            let take =
                |r: &mut DescribeConfigsResult, got: Result<Vec<Described>, BrokerError>| match got
                {
                    Ok(configs) => r.configs.extend(
                        configs
                            .into_iter()
                            .filter(|(k, ..)| wanted(k))
                            .map(|(k, v, src, doc)| entry(k, v, false, src, doc)),
                    ),
                    Err(e) => failed(r, e),
                };
            match res.resource_type {
                RESOURCE_TOPIC => {
                    let got = describe_topic(&inner, res.resource_name.as_str()).await;
                    take(&mut r, got);
                }
                RESOURCE_BROKER
                    if res.resource_name.is_empty()
                        || res.resource_name.as_str() == inner.config.node_id.to_string() =>
                {
                    let d = &inner.config.topic_defaults;
                    let cfg = &inner.config;
                    let broker: [(&str, String, &str); 6] = [
                        (
                            "num.partitions",
                            cfg.default_partitions.to_string(),
                            "Partitions of auto-created topics.",
                        ),
                        (
                            "default.replication.factor",
                            cfg.default_replication.to_string(),
                            "Copies of each batch for new topics.",
                        ),
                        (
                            "auto.create.topics.enable",
                            cfg.auto_create_topics.to_string(),
                            "Metadata requests create unknown topics.",
                        ),
                        (
                            "log.retention.ms",
                            d.retention_ms.to_string(),
                            "Default retention.ms of topics.",
                        ),
                        (
                            "log.retention.bytes",
                            d.retention_bytes.to_string(),
                            "Default retention.bytes of topics.",
                        ),
                        (
                            "message.max.bytes",
                            d.max_message_bytes.to_string(),
                            "Default max.message.bytes of topics.",
                        ),
                    ];
                    for (k, v, doc) in broker.into_iter().filter(|(k, _, _)| wanted(k)) {
                        r.configs.push(entry(k, v, true, SOURCE_STATIC_BROKER, doc));
                    }
                }
                RESOURCE_GROUP => {
                    let got = describe_group(&inner, res.resource_name.as_str()).await;
                    take(&mut r, got);
                }
                RESOURCE_BROKER => {
                    let me = format!("this is broker {}", inner.config.node_id);
                    failed(&mut r, BrokerError::InvalidRequest(me));
                }
                other => failed(
                    &mut r,
                    BrokerError::InvalidRequest(format!(
                        "config resource type {other} is not supported (topic: 2, broker: 4, group: 32)"
                    )),
                ),
            }
            resp.results.push(r);
        }
        resp
    }

    fn error(_version: i16, req: &DescribeConfigsRequest, code: i16) -> DescribeConfigsResponse {
        DescribeConfigsResponse::default().with_results(
            req.resources
                .iter()
                .map(|r| {
                    DescribeConfigsResult::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name.clone())
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([results]);
}

/// How one resource's configs change.
enum Change {
    /// AlterConfigs: these become the overrides; everything else returns to its default.
    Replace(Vec<(String, Option<String>)>),
    /// IncrementalAlterConfigs: (key, operation, value).
    Incremental(Vec<(String, i8, Option<String>)>),
}

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// A topic's overrides after `change`, validated.
fn apply_change(
    current: &BTreeMap<String, String>,
    change: &Change,
) -> Result<BTreeMap<String, String>, BrokerError> {
    let next = apply_ops(current, change)?;
    validate_configs(next.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| BrokerError::InvalidConfig(e.into()))
}

/// The overrides after `change`'s operations, not yet validated.
fn apply_ops(
    current: &BTreeMap<String, String>,
    change: &Change,
) -> Result<BTreeMap<String, String>, BrokerError> {
    let invalid = BrokerError::InvalidConfig;
    let mut next = BTreeMap::new();
    match change {
        Change::Replace(pairs) => {
            for (k, v) in pairs {
                if next.contains_key(k) {
                    return Err(BrokerError::InvalidRequest(format!(
                        "config {k} is named more than once"
                    )));
                }
                if let Some(v) = v {
                    next.insert(k.clone(), v.clone());
                }
            }
        }
        Change::Incremental(ops) => {
            next = current.clone();
            let mut seen = std::collections::HashSet::new();
            for (k, op, v) in ops {
                if !seen.insert(k) {
                    return Err(BrokerError::InvalidRequest(format!(
                        "config {k} is named more than once"
                    )));
                }
                match *op {
                    OP_SET => {
                        let v = v
                            .clone()
                            .ok_or_else(|| invalid(format!("SET of {k} needs a value")))?;
                        next.insert(k.clone(), v);
                    }
                    OP_DELETE => {
                        next.remove(k);
                    }
                    OP_APPEND | OP_SUBTRACT => {
                        if config_type(k) != TYPE_LIST {
                            return Err(invalid(format!(
                                "{k} is not a list: APPEND and SUBTRACT apply to lists only"
                            )));
                        }
                        let mut items: Vec<String> = next
                            .get(k)
                            .cloned()
                            .unwrap_or_else(|| "delete".to_string())
                            .split(',')
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .collect();
                        for item in v
                            .as_deref()
                            .unwrap_or("")
                            .split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                        {
                            if *op == OP_APPEND {
                                if !items.iter().any(|i| i == item) {
                                    items.push(item.to_string());
                                }
                            } else {
                                items.retain(|i| i != item);
                            }
                        }
                        next.insert(k.clone(), items.join(","));
                    }
                    other => {
                        return Err(BrokerError::InvalidRequest(format!(
                            "unknown config operation {other}"
                        )));
                    }
                }
            }
        }
    }
    Ok(next)
}

/// Applies `change` to group `name`'s dynamic configs (`domain::group::configs`).
async fn alter_group(
    inner: &Inner,
    name: &str,
    change: &Change,
    validate_only: bool,
) -> Result<(), BrokerError> {
    let apply = |now: &BTreeMap<String, String>| apply_ops(now, change).map_err(|e| e.to_string());
    match inner.group_configs.alter(name, apply, validate_only).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(BrokerError::InvalidConfig(e)),
        Err(e) => Err(BrokerError::Meta(e)),
    }
}

/// A config as DescribeConfigs answers it: (name, value, source, doc).
type Described = (&'static str, String, i8, &'static str);

/// Fails one resource of a DescribeConfigs with `e`.
fn failed(r: &mut DescribeConfigsResult, e: BrokerError) {
    r.error_code = e.code();
    r.error_message = Some(str_bytes(e.to_string()));
}

/// A topic's configs as DescribeConfigs answers them: (name, value, source, doc).
async fn describe_topic(inner: &Inner, name: &str) -> Result<Vec<Described>, BrokerError> {
    let topic = inner
        .topics
        .get(name)
        .await
        .map_err(BrokerError::Meta)?
        .ok_or_else(|| BrokerError::UnknownTopic(name.to_string()))?;
    let c = inner.topic_config(&topic);
    Ok(TOPIC_CONFIG_KEYS
        .iter()
        .map(|(k, doc)| (*k, c.get(k).unwrap_or_default(), source(&topic, k), *doc))
        .collect())
}

/// A group's configs as DescribeConfigs answers them: (name, value, source, doc).
async fn describe_group(inner: &Inner, name: &str) -> Result<Vec<Described>, BrokerError> {
    let set = inner.group_configs.get(name).await.map_err(BrokerError::Meta)?;
    let g = &inner.groups_config;
    let ms = |d: std::time::Duration| d.as_millis().to_string();
    let reset = match g.shares.auto_offset_reset {
        crate::domain::share::Reset::Earliest => "earliest",
        crate::domain::share::Reset::Latest => "latest",
    };
    let default = |k: &str| match k {
        "consumer.session.timeout.ms" => ms(g.consumer_session_timeout),
        "consumer.heartbeat.interval.ms" => ms(g.consumer_heartbeat_interval),
        "share.session.timeout.ms" => ms(g.shares.session_timeout),
        "share.heartbeat.interval.ms" => ms(g.shares.heartbeat_interval),
        "share.record.lock.duration.ms" => ms(g.shares.lock_duration),
        "share.auto.offset.reset" => reset.to_string(),
        "share.delivery.count.limit" => g.shares.delivery_count_limit.to_string(),
        _ => "read_uncommitted".to_string(),
    };
    Ok(crate::domain::group::configs::GROUP_CONFIG_KEYS
        .iter()
        .map(|(k, doc)| match set.get(*k) {
            Some(v) => (*k, v.clone(), SOURCE_GROUP, *doc),
            None => (*k, default(k), SOURCE_DEFAULT, *doc),
        })
        .collect())
}

/// Applies `change` to topic `name` (compare-and-set), or only checks it.
async fn alter_topic(
    inner: &Inner,
    name: &str,
    change: &Change,
    validate_only: bool,
) -> Result<(), BrokerError> {
    for _ in 0..10 {
        let Some(topic) = inner.topics.load(name).await? else {
            return Err(BrokerError::UnknownTopic(name.to_string()));
        };
        let configs = apply_change(&topic.record.configs, change)?;
        if validate_only {
            return Ok(());
        }
        let mut record = topic.record.clone();
        record.configs = configs;
        match inner.topics.update(&topic, record).await {
            Ok(t) => {
                tracing::info!(topic = name, configs = ?t.record.configs, "topic configs changed");
                inner.apply_retention(&t).await;
                return Ok(());
            }
            Err(folio_meta::MetaError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(BrokerError::Contended(name.to_string()))
}

async fn alter(
    inner: &Inner,
    resource_type: i8,
    name: &StrBytes,
    change: Change,
    validate_only: bool,
) -> Result<(), BrokerError> {
    match resource_type {
        RESOURCE_TOPIC => alter_topic(inner, name.as_str(), &change, validate_only).await,
        RESOURCE_BROKER => Err(BrokerError::InvalidRequest(
            "broker configs are static here: set them on the command line (see `folio broker --help`)".into(),
        )),
        RESOURCE_GROUP => alter_group(inner, name.as_str(), &change, validate_only).await,
        other => Err(BrokerError::InvalidRequest(format!("config resource type {other} is not supported (topic: 2, group: 32)"))),
    }
}

/// One resource's outcome: its type, its name, and the error code and message if it failed.
type Altered = (i8, StrBytes, Option<(i16, String)>);

/// Applies each resource's change in turn: (resource type, name, error code and message if
/// it failed).
async fn alter_each(
    inner: &Inner,
    changes: Vec<(i8, StrBytes, Change)>,
    validate_only: bool,
) -> Vec<Altered> {
    let mut out = Vec::with_capacity(changes.len());
    for (kind, name, change) in changes {
        let failure = alter(inner, kind, &name, change, validate_only)
            .await
            .err()
            .map(|e| (e.code(), e.to_string()));
        out.push((kind, name, failure));
    }
    out
}

/// Per-resource answers of AlterConfigs and IncrementalAlterConfigs (two types of one shape).
macro_rules! alter_answers {
    ($answer:ty, $results:expr) => {
        $results
            .into_iter()
            .map(|(kind, name, failure): Altered| {
                let mut r = <$answer>::default().with_resource_type(kind).with_resource_name(name);
                if let Some((code, msg)) = failure {
                    r.error_code = code;
                    r.error_message = Some(str_bytes(msg));
                }
                r
            })
            .collect()
    };
}

/// Every resource of a request failed with `code`.
fn all_failed<'a>(resources: impl Iterator<Item = (i8, &'a StrBytes)>, code: i16) -> Vec<Altered> {
    resources
        .map(|(kind, name)| (kind, name.clone(), Some((code, errors::name(code).to_string()))))
        .collect()
}

pub(crate) struct AlterConfigs;

impl Handler for AlterConfigs {
    type Request = AlterConfigsRequest;
    type Response = AlterConfigsResponse;
    const KEY: ApiKey = ApiKey::AlterConfigs;

    fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
        super::refuse_configs(
            inner,
            Operation::AlterConfigs,
            &mut req.resources,
            |r| (r.resource_type, r.resource_name.as_str()),
            |resources| AlterConfigsRequest::default().with_resources(resources),
        )
    }

    fn merge(resp: &mut Self::Response, refused: Self::Response) {
        resp.responses.extend(refused.responses);
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: AlterConfigsRequest,
    ) -> AlterConfigsResponse {
        use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as R;
        let changes = req
            .resources
            .into_iter()
            .map(|res| {
                let pairs = res
                    .configs
                    .iter()
                    .map(|c| {
                        (
                            c.name.as_str().to_string(),
                            c.value.as_ref().map(|v| v.as_str().to_string()),
                        )
                    })
                    .collect();
                (res.resource_type, res.resource_name, Change::Replace(pairs))
            })
            .collect();
        let results = alter_each(&inner, changes, req.validate_only).await;
        AlterConfigsResponse::default().with_responses(alter_answers!(R, results))
    }

    fn error(_version: i16, req: &AlterConfigsRequest, code: i16) -> AlterConfigsResponse {
        use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as R;
        let results =
            all_failed(req.resources.iter().map(|r| (r.resource_type, &r.resource_name)), code);
        AlterConfigsResponse::default().with_responses(alter_answers!(R, results))
    }

    error_code_of!([responses]);
}

pub(crate) struct IncrementalAlterConfigs;

impl Handler for IncrementalAlterConfigs {
    type Request = IncrementalAlterConfigsRequest;
    type Response = IncrementalAlterConfigsResponse;
    const KEY: ApiKey = ApiKey::IncrementalAlterConfigs;

    fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
        super::refuse_configs(
            inner,
            Operation::AlterConfigs,
            &mut req.resources,
            |r| (r.resource_type, r.resource_name.as_str()),
            |resources| IncrementalAlterConfigsRequest::default().with_resources(resources),
        )
    }

    fn merge(resp: &mut Self::Response, refused: Self::Response) {
        resp.responses.extend(refused.responses);
    }

    async fn handle(
        inner: Arc<Inner>,
        _version: i16,
        req: IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as R;
        let changes = req
            .resources
            .into_iter()
            .map(|res| {
                let ops = res
                    .configs
                    .iter()
                    .map(|c| {
                        (
                            c.name.as_str().to_string(),
                            c.config_operation,
                            c.value.as_ref().map(|v| v.as_str().to_string()),
                        )
                    })
                    .collect();
                (res.resource_type, res.resource_name, Change::Incremental(ops))
            })
            .collect();
        let results = alter_each(&inner, changes, req.validate_only).await;
        IncrementalAlterConfigsResponse::default().with_responses(alter_answers!(R, results))
    }

    fn error(
        _version: i16,
        req: &IncrementalAlterConfigsRequest,
        code: i16,
    ) -> IncrementalAlterConfigsResponse {
        use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as R;
        let results =
            all_failed(req.resources.iter().map(|r| (r.resource_type, &r.resource_name)), code);
        IncrementalAlterConfigsResponse::default().with_responses(alter_answers!(R, results))
    }

    error_code_of!([responses]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn replace_resets_unnamed_configs_and_incremental_keeps_them() {
        let current = map(&[("retention.ms", "1000"), ("retention.bytes", "50")]);
        let replaced = apply_change(
            &current,
            &Change::Replace(vec![("retention.ms".into(), Some("2000".into()))]),
        )
        .unwrap();
        assert_eq!(replaced, map(&[("retention.ms", "2000")]));
        let inc = apply_change(
            &current,
            &Change::Incremental(vec![
                ("retention.ms".into(), OP_SET, Some("3000".into())),
                ("retention.bytes".into(), OP_DELETE, None),
                ("cleanup.policy".into(), OP_APPEND, Some("delete".into())),
            ]),
        )
        .unwrap();
        assert_eq!(inc, map(&[("cleanup.policy", "delete"), ("retention.ms", "3000")]));
    }

    #[test]
    fn bad_changes_are_refused_with_the_right_code() {
        let none = BTreeMap::new();
        let code = |c: Change| apply_change(&none, &c).unwrap_err().code();
        assert_eq!(
            code(Change::Incremental(vec![("retention.ms".into(), OP_SET, Some("x".into()))])),
            errors::INVALID_CONFIG
        );
        assert_eq!(
            code(Change::Incremental(vec![("retention.ms".into(), OP_APPEND, Some("1".into()))])),
            errors::INVALID_CONFIG
        );
        assert_eq!(
            code(Change::Incremental(vec![(
                "cleanup.policy".into(),
                OP_APPEND,
                Some("shred".into())
            )])),
            errors::INVALID_CONFIG
        );
        assert_eq!(
            code(Change::Incremental(vec![(
                "cleanup.policy".into(),
                OP_SUBTRACT,
                Some("delete".into())
            )])),
            errors::INVALID_CONFIG
        );
        assert_eq!(
            code(Change::Incremental(vec![("retention.ms".into(), 9, None)])),
            errors::INVALID_REQUEST
        );
        assert_eq!(
            code(Change::Replace(vec![
                ("retention.ms".into(), Some("1".into())),
                ("retention.ms".into(), Some("2".into()))
            ])),
            errors::INVALID_REQUEST
        );
        assert_eq!(
            code(Change::Replace(vec![("segment.bytes".into(), Some("1".into()))])),
            errors::INVALID_CONFIG
        );
    }
}
