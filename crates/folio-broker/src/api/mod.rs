//! The Kafka APIs this broker serves, with the versions it advertises, and the one path
//! every request but ApiVersions (answered before any other, at any version) takes:
//! decode, authorize, start in the connection's order, answer as its own task, count,
//! encode.
//!
//! A request at a version the protocol crate decodes but this broker does not advertise
//! gets the API's error answer with UNSUPPORTED_VERSION (never a dropped connection).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::api::framing::{Pending, encode_response};
use crate::budget::RequestScope;
use crate::domain::acl::{Operation, ResourceType};
use crate::errors;
use crate::state::Inner;

/// `Handler::error_code` generated from the answer's shape: the first non-zero code among
/// its top-level `error_code` (`top`) and those of its list (`[results]`) or of the lists in
/// its list (`[topics => partitions]`).
macro_rules! error_code_of {
    (top) => {
        fn error_code(resp: &Self::Response) -> i16 {
            resp.error_code
        }
    };
    ([$list:ident]) => {
        fn error_code(resp: &Self::Response) -> i16 {
            $crate::api::first_error(resp.$list.iter().map(|x| x.error_code))
        }
    };
    (top, [$list:ident]) => {
        fn error_code(resp: &Self::Response) -> i16 {
            $crate::api::first_error(
                std::iter::once(resp.error_code).chain(resp.$list.iter().map(|x| x.error_code)),
            )
        }
    };
    ([$list:ident => $inner:ident]) => {
        fn error_code(resp: &Self::Response) -> i16 {
            $crate::api::first_error(
                resp.$list.iter().flat_map(|x| x.$inner.iter().map(|y| y.error_code)),
            )
        }
    };
    (top, [$list:ident => $inner:ident]) => {
        fn error_code(resp: &Self::Response) -> i16 {
            $crate::api::first_error(
                std::iter::once(resp.error_code)
                    .chain(resp.$list.iter().flat_map(|x| x.$inner.iter().map(|y| y.error_code))),
            )
        }
    };
}

/// `Handler::error` generated for an answer with one top-level error code (`top`).
macro_rules! error_answer_of {
    (top) => {
        fn error(_version: i16, _req: &Self::Request, code: i16) -> Self::Response {
            <Self::Response as Default>::default().with_error_code(code)
        }
    };
}

/// `Handler::refuse_parts` and `merge` of an API whose request lists resources (`$list`)
/// and whose answer lists them again (`$answer`): the ones the principal may not `$op`
/// (named by `$name` of each `$x`) are refused one by one with `$code`, e.g. topics the
/// principal may not read: `topics => topics, Read on Topic, TOPIC_AUTHORIZATION_FAILED,
/// |t| t.name.as_str()`.
macro_rules! refuse_each {
    ($list:ident => $answer:ident, $op:ident on $rtype:ident, $code:ident, |$x:ident| $name:expr) => {
        fn refuse_parts(inner: &Inner, _version: i16, req: &mut Self::Request) -> Refused<Self> {
            use $crate::domain::acl::{Operation, ResourceType};
            super::refuse(
                &mut req.$list,
                |$x| !super::allowed(inner, Operation::$op, ResourceType::$rtype, $name),
                $crate::errors::$code,
                |parts| {
                    let mut refused = <Self::Request as Default>::default();
                    refused.$list = parts;
                    refused
                },
            )
            .into_iter()
            .collect()
        }

        fn merge(resp: &mut Self::Response, refused: Self::Response) {
            resp.$answer.extend(refused.$answer);
        }
    };
}

pub mod acls;
pub mod admin;
pub mod api_versions;
pub mod configs;
pub mod consumer_groups;
pub mod describe_producers;
pub mod fetch;
pub(crate) mod framing;
pub mod group_offsets;
pub mod groups;
pub mod leader_epochs;
pub mod leaders;
pub mod log_dirs;
pub mod metadata;
pub mod offsets;
pub mod produce;
pub mod quotas;
pub(crate) mod sasl;
pub mod share;
pub mod transactions;
pub mod users;

/// What is advertised: API, lowest and highest version. Minimums are Kafka 4.1's (the
/// protocol crate's), so Debian's kcat (librdkafka 2.0.2) and aiokafka (non-flexible
/// versions only) find their versions; maximums are what is implemented here (Fetch
/// v13+ and Metadata v10+ carry real topic ids).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 1),
    (ApiKey::ShareAcknowledge, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// Whether this broker serves `key` at `version`.
pub fn supported(key: ApiKey, version: i16) -> bool {
    SUPPORTED.iter().any(|(k, lo, hi)| *k == key && (*lo..=*hi).contains(&version))
}

/// One API: its request and answer types and how it answers.
pub(crate) trait Handler: 'static {
    type Request: Decodable + Send + 'static;
    type Response: Encodable + Send + 'static;
    const KEY: ApiKey;
    fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: Self::Request,
    ) -> impl Future<Output = Self::Response> + Send;
    /// The answer that fails every part of `req` with `code`.
    fn error(version: i16, req: &Self::Request, code: i16) -> Self::Response;
    /// The first non-zero error code of an answer (for metrics).
    fn error_code(resp: &Self::Response) -> i16;
    /// The code that fails the whole request (through `error`) if its principal may not
    /// send it, checked before `handle`; `None`: go on.
    fn authorize(_inner: &Inner, _req: &Self::Request) -> Option<i16> {
        None
    }
    /// The parts of `req` (topics, groups, config resources) its principal may not touch,
    /// taken out of it after `authorize` and before `handle`, each answered with its code as
    /// Kafka answers them (per resource; the rest is served): each is a request of refused
    /// parts for `error`, with the code. Produce, Fetch and Metadata, which answer per topic
    /// with more than a code, check inside their handlers instead.
    fn refuse_parts(_inner: &Inner, _version: i16, _req: &mut Self::Request) -> Refused<Self> {
        Vec::new()
    }
    /// Adds `error`'s answer to refused parts to `handle`'s answer.
    fn merge(_resp: &mut Self::Response, _refused: Self::Response) {}
    /// What the request does in its connection's order, before the next request is read;
    /// what it returns (the rest of the answer) runs as the request's own task. By default
    /// nothing runs in order. Produce enqueues its appends here, so a producer's batches
    /// reach each log in the order it sent them.
    fn start(
        inner: Arc<Inner>,
        version: i16,
        req: Self::Request,
    ) -> impl Future<Output = impl Future<Output = Self::Response> + Send + 'static> + Send {
        std::future::ready(Self::handle(inner, version, req))
    }
    /// Whether the request gets an answer (Produce with acks=0 does not: an error closes
    /// the connection instead, as in Kafka).
    fn answered(_req: &Self::Request) -> bool {
        true
    }
    /// What the request takes as it is decoded, in its connection's order, before its
    /// task is spawned: an OffsetCommit its place among its group's commits (held until
    /// it answers), an OffsetFetch the commits it must see (`group::Coordinator`'s
    /// arrivals).
    fn arrive(_inner: &Inner, _req: &Self::Request) -> Arrival {
        Arrival::default()
    }
}

/// What a request took as it arrived (`Handler::arrive`).
#[derive(Debug, Default)]
pub(crate) struct Arrival {
    /// An OffsetCommit's place, held until the request is answered.
    pub commit: Option<crate::domain::group::CommitTicket>,
    /// An OffsetFetch's place: `RequestScope::arrival` (an OffsetCommit's is its ticket's
    /// number).
    pub fetch: Option<u64>,
}

/// Requests of refused parts and the code of each (`Handler::refuse_parts`).
pub(crate) type Refused<H> = Vec<(<H as Handler>::Request, i16)>;

/// Moves the items of `items` that `denied` picks into a request of their own (`build`),
/// answered with `code`; nothing when none is denied.
pub(crate) fn refuse<T, R>(
    items: &mut Vec<T>,
    denied: impl Fn(&T) -> bool,
    code: i16,
    build: impl FnOnce(Vec<T>) -> R,
) -> Option<(R, i16)> {
    let (out, keep): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(denied);
    *items = keep;
    (!out.is_empty()).then(|| (build(out), code))
}

/// The APIs served through `Handler` (ApiVersions has a path of its own, before any other
/// request): one list makes both the router and the decoder fuzz target.
macro_rules! handlers {
    ($($key:ident => $handler:ty),* $(,)?) => {
        pub(crate) async fn route(
            inner: &Arc<Inner>,
            key: ApiKey,
            header: RequestHeader,
            body: Bytes,
            scope: RequestScope,
        ) -> Result<Pending, String> {
            // Each API's future is boxed: one type per API nested in the connection's
            // future would pass the compiler's query depth limit (the layout of
            // `wire::server::accept`'s future, with the simulator's features unified in).
            match key {
                $(ApiKey::$key => Box::pin(run::<$handler>(inner, header, body, scope)).await,)*
                other => Err(format!("{other:?} is not supported by this broker (not advertised)")),
            }
        }

        /// Decodes the body of a request of `key` at `version`.
        fn decode_body(key: ApiKey, version: i16, mut b: Bytes) -> Result<(), String> {
            let decoded = match key {
                $(ApiKey::$key => <$handler as Handler>::Request::decode(&mut b, version).map(drop),)*
                other => return Err(format!("{other:?} is not supported")),
            };
            decoded.map_err(|e| format!("{key:?} v{version}: {e}"))
        }
    };
}

handlers! {
    Produce => produce::Produce,
    Fetch => fetch::Fetch,
    ListOffsets => offsets::ListOffsets,
    Metadata => metadata::Metadata,
    CreateTopics => admin::CreateTopics,
    DeleteRecords => offsets::DeleteRecords,
    DescribeConfigs => configs::DescribeConfigs,
    AlterConfigs => configs::AlterConfigs,
    CreatePartitions => admin::CreatePartitions,
    IncrementalAlterConfigs => configs::IncrementalAlterConfigs,
    DescribeCluster => admin::DescribeCluster,
    FindCoordinator => groups::FindCoordinator,
    JoinGroup => groups::JoinGroup,
    SyncGroup => groups::SyncGroup,
    Heartbeat => groups::Heartbeat,
    LeaveGroup => groups::LeaveGroup,
    OffsetCommit => group_offsets::OffsetCommit,
    OffsetFetch => group_offsets::OffsetFetch,
    ListGroups => groups::ListGroups,
    DescribeGroups => groups::DescribeGroups,
    ConsumerGroupHeartbeat => consumer_groups::ConsumerGroupHeartbeat,
    ConsumerGroupDescribe => consumer_groups::ConsumerGroupDescribe,
    ShareGroupHeartbeat => share::ShareGroupHeartbeat,
    ShareGroupDescribe => share::ShareGroupDescribe,
    ShareFetch => share::ShareFetch,
    ShareAcknowledge => share::ShareAcknowledge,
    DescribeShareGroupOffsets => share::DescribeShareGroupOffsets,
    AlterShareGroupOffsets => share::AlterShareGroupOffsets,
    DeleteShareGroupOffsets => share::DeleteShareGroupOffsets,
    DeleteGroups => groups::DeleteGroups,
    OffsetDelete => offsets::OffsetDelete,
    ElectLeaders => leaders::ElectLeaders,
    ListPartitionReassignments => leaders::ListPartitionReassignments,
    AlterPartitionReassignments => leaders::AlterPartitionReassignments,
    DescribeLogDirs => log_dirs::DescribeLogDirs,
    InitProducerId => produce::InitProducerId,
    AddPartitionsToTxn => transactions::AddPartitionsToTxn,
    AddOffsetsToTxn => transactions::AddOffsetsToTxn,
    EndTxn => transactions::EndTxn,
    TxnOffsetCommit => transactions::TxnOffsetCommit,
    DescribeTransactions => transactions::DescribeTransactions,
    ListTransactions => transactions::ListTransactions,
    OffsetForLeaderEpoch => leader_epochs::OffsetForLeaderEpoch,
    DescribeProducers => describe_producers::DescribeProducers,
    DeleteTopics => admin::DeleteTopics,
    DescribeUserScramCredentials => users::DescribeUserScramCredentials,
    AlterUserScramCredentials => users::AlterUserScramCredentials,
    DescribeAcls => acls::DescribeAcls,
    CreateAcls => acls::CreateAcls,
    DeleteAcls => acls::DeleteAcls,
    DescribeClientQuotas => quotas::DescribeClientQuotas,
    AlterClientQuotas => quotas::AlterClientQuotas,
}

tokio::task_local! {
    /// The connection's budgets and what the request holds, while its handler runs (a
    /// Fetch reserves its answer's bytes here).
    pub(crate) static REQUEST: RequestScope;
}

async fn run<H: Handler>(
    inner: &Arc<Inner>,
    header: RequestHeader,
    mut body: Bytes,
    mut scope: RequestScope,
) -> Result<Pending, String> {
    let version = header.request_api_version;
    scope.request_bytes = body.len();
    let mut req = H::Request::decode(&mut body, version)
        .map_err(|e| format!("{:?} v{version}: malformed request: {e}", H::KEY))?;
    let inner = inner.clone();
    let arrival = H::arrive(&inner, &req);
    scope.arrival = arrival.fetch.or(arrival.commit.as_ref().map(|t| t.number()));
    let answered = H::answered(&req);
    if !supported(H::KEY, version) {
        let resp = H::error(version, &req, errors::UNSUPPORTED_VERSION);
        return Ok(finish::<H>(inner, header, answered, resp));
    }
    // In the connection's order: authorization and the handler's in-order part.
    let started = REQUEST.scope(scope.clone(), async {
        if let Some(code) = H::authorize(&inner, &req) {
            return Err(H::error(version, &req, code));
        }
        let refused = H::refuse_parts(&inner, version, &mut req);
        Ok((H::start(inner.clone(), version, req).await, refused))
    });
    let (answer, refused) = match started.await {
        Ok(started) => started,
        Err(denied) => return Ok(finish::<H>(inner, header, answered, denied)),
    };
    Ok(crate::api::framing::spawn_answer(REQUEST.scope(scope, async move {
        // An OffsetCommit's place among its group's commits, held until it is answered.
        let _commit = arrival.commit;
        let mut resp = answer.await;
        for (parts, code) in refused {
            H::merge(&mut resp, H::error(version, &parts, code));
        }
        answer_frame::<H>(&inner, &header, answered, &resp)
    })))
}

/// The answer `resp`, ready now (refused before anything ran).
fn finish<H: Handler>(
    inner: Arc<Inner>,
    header: RequestHeader,
    answered: bool,
    resp: H::Response,
) -> Pending {
    crate::api::framing::ready(answer_frame::<H>(&inner, &header, answered, &resp))
}

/// Counts `resp` and frames it; an unanswered request's error closes the connection.
fn answer_frame<H: Handler>(
    inner: &Inner,
    header: &RequestHeader,
    answered: bool,
    resp: &H::Response,
) -> Result<Option<crate::api::framing::Frame>, String> {
    let code = H::error_code(resp);
    inner.metrics.request(H::KEY as i16, code);
    if !answered {
        if code != 0 {
            return Err(format!(
                "{:?} without an answer failed with {}",
                H::KEY,
                errors::name(code)
            ));
        }
        return Ok(None);
    }
    encode_response(H::KEY, header.request_api_version, header.correlation_id, resp).map(Some)
}

/// Decodes a request frame (without its size prefix) as the broker does: the header, then
/// the body by API. The fuzz target of the request decoder: it must return, never panic or
/// allocate by an unchecked length, whatever the bytes.
pub fn decode_request(frame: Bytes) -> Result<(ApiKey, i16), crate::errors::BrokerError> {
    decode_frame(frame).map_err(crate::errors::BrokerError::InvalidRequest)
}

/// `decode_request`, why in words.
fn decode_frame(frame: Bytes) -> Result<(ApiKey, i16), String> {
    match crate::api::framing::parse_header(frame)? {
        crate::api::framing::Parsed::ApiVersions { version, frame, .. } => {
            if !supported(ApiKey::ApiVersions, version) {
                return Ok((ApiKey::ApiVersions, version));
            }
            let mut b = frame;
            RequestHeader::decode(&mut b, ApiKey::ApiVersions.request_header_version(version))
                .map_err(|e| e.to_string())?;
            ApiVersionsRequest::decode(&mut b, version).map_err(|e| e.to_string())?;
            Ok((ApiKey::ApiVersions, version))
        }
        crate::api::framing::Parsed::Request { key, header, body } => {
            let version = header.request_api_version;
            decode_body(key, version, body).map(|()| (key, version))
        }
    }
}

/// The session of the request being handled (an anonymous one on the broker's first
/// listener outside a request, e.g. in unit tests).
pub(crate) fn session(inner: &Inner) -> crate::domain::acl::Session {
    REQUEST.try_with(|s| s.session.clone()).unwrap_or_else(|_| {
        let first = inner.config.listeners.first().map_or("PLAINTEXT", |l| l.name.as_str());
        crate::domain::acl::Session::anonymous(first.into(), "127.0.0.1".into())
    })
}

/// Where a client on this request's listener reaches broker `b`: its endpoint of the same
/// listener name (Kafka's rule; a broker without one is left out of answers).
pub(crate) fn endpoint_of(
    inner: &Inner,
    b: &crate::domain::cluster::BrokerInfo,
) -> Option<crate::domain::cluster::Endpoint> {
    b.endpoint(&session(inner).listener).cloned()
}

/// Whether this request's principal may do `op` on the resource (always, without an
/// authorizer).
pub(crate) fn allowed(inner: &Inner, op: Operation, rtype: ResourceType, name: &str) -> bool {
    inner.acls.is_none() || allowed_as(inner, &session(inner), op, rtype, name)
}

/// Whether `session` may do `op` on the resource (always, without an authorizer).
pub(crate) fn allowed_as(
    inner: &Inner,
    session: &crate::domain::acl::Session,
    op: Operation,
    rtype: ResourceType,
    name: &str,
) -> bool {
    inner.acls.as_ref().is_none_or(|a| a.authorize(session, op, rtype, name))
}

/// CLUSTER_AUTHORIZATION_FAILED unless this request's principal may do `op` on the cluster.
pub(crate) fn cluster_denied(inner: &Inner, op: Operation) -> Option<i16> {
    let ok = allowed(inner, op, ResourceType::Cluster, crate::domain::acl::CLUSTER_NAME);
    (!ok).then_some(errors::CLUSTER_AUTHORIZATION_FAILED)
}

/// `code` unless this request's principal may do `op` on every one of `names` of `rtype`.
pub(crate) fn all_denied<'a>(
    inner: &Inner,
    op: Operation,
    rtype: ResourceType,
    names: impl IntoIterator<Item = &'a str>,
    code: i16,
) -> Option<i16> {
    let ok = names.into_iter().all(|n| allowed(inner, op, rtype, n));
    (!ok).then_some(code)
}

/// GROUP_AUTHORIZATION_FAILED unless this request's principal may do `op` on `group`.
pub(crate) fn group_denied(inner: &Inner, op: Operation, group: &str) -> Option<i16> {
    all_denied(inner, op, ResourceType::Group, [group], errors::GROUP_AUTHORIZATION_FAILED)
}

/// The configs authorization of DescribeConfigs and the AlterConfigs, per resource: a topic
/// (resource type 2) needs `op` on it (TOPIC_AUTHORIZATION_FAILED), a group (32) `op` on the
/// group (GROUP_AUTHORIZATION_FAILED), a broker (4) or logger
/// (8) `op` on the cluster (CLUSTER_AUTHORIZATION_FAILED). The resources refused, by code.
pub(crate) fn refuse_configs<T, R>(
    inner: &Inner,
    op: Operation,
    resources: &mut Vec<T>,
    of: impl Fn(&T) -> (i8, &str),
    build: impl Fn(Vec<T>) -> R,
) -> Vec<(R, i16)> {
    let cluster_ok = cluster_denied(inner, op).is_none();
    let topic = refuse(
        resources,
        |r| matches!(of(r), (2, name) if !allowed(inner, op, ResourceType::Topic, name)),
        errors::TOPIC_AUTHORIZATION_FAILED,
        &build,
    );
    let group = refuse(
        resources,
        |r| matches!(of(r), (32, name) if !allowed(inner, op, ResourceType::Group, name)),
        errors::GROUP_AUTHORIZATION_FAILED,
        &build,
    );
    let cluster = refuse(
        resources,
        |r| !matches!(of(r).0, 2 | 32) && !cluster_ok,
        errors::CLUSTER_AUTHORIZATION_FAILED,
        &build,
    );
    topic.into_iter().chain(group).chain(cluster).collect()
}

/// InitProducerId: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on
/// some topic; a transactional one WRITE on its transactional id.
pub(crate) fn init_producer_denied(inner: &Inner, transactional_id: Option<&str>) -> Option<i16> {
    let Some(acls) = &inner.acls else { return None };
    let s = session(inner);
    if let Some(t) = transactional_id {
        let ok = acls.authorize(&s, Operation::Write, ResourceType::TransactionalId, t);
        return (!ok).then_some(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    }
    let cluster = crate::domain::acl::CLUSTER_NAME;
    let ok = acls.authorize(&s, Operation::IdempotentWrite, ResourceType::Cluster, cluster)
        || acls.may_write_some_topic(&s);
    (!ok).then_some(errors::CLUSTER_AUTHORIZATION_FAILED)
}

/// The first non-zero code of `codes` (0 if none).
/// Kafka's check of a request's `current_leader_epoch` against the partition's `current`
/// epoch: -1 is not checked; older gets FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH.
/// One exception: the epoch just before `current` is the one Metadata announced for this
/// owner before it opened the partition (opening begins the next epoch, with no change of
/// leader, `crate::domain::epochs`), so a client that asks with it is current, not fenced
/// (librdkafka's offsetsForTimes gave up on FENCED_LEADER_EPOCH there: its test 0054).
pub(crate) fn leader_epoch_error(requested: i32, current: u32) -> Option<i16> {
    match i64::from(requested).cmp(&i64::from(current)) {
        _ if requested == -1 => None,
        std::cmp::Ordering::Less if i64::from(requested) + 1 == i64::from(current) => None,
        std::cmp::Ordering::Less => Some(errors::FENCED_LEADER_EPOCH),
        std::cmp::Ordering::Greater => Some(errors::UNKNOWN_LEADER_EPOCH),
        std::cmp::Ordering::Equal => None,
    }
}

pub(crate) fn first_error(codes: impl IntoIterator<Item = i16>) -> i16 {
    codes.into_iter().find(|c| *c != 0).unwrap_or(0)
}

pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// The broker's topic cache as the group coordinator sees it: subscription regexes match
/// only topics the member's principal may describe (Kafka filters them the same way).
pub(super) struct CachedTopics<'a> {
    pub(super) inner: &'a Inner,
}

impl crate::domain::group::TopicLookup for CachedTopics<'_> {
    fn topic(&self, name: &str) -> Option<(uuid::Uuid, u32)> {
        self.inner.topics.cached(name).map(|t| (t.record.id, t.record.partitions))
    }

    fn names(&self) -> Vec<String> {
        self.inner
            .topics
            .cached_all()
            .into_iter()
            .map(|t| t.name.clone())
            .filter(|n| allowed(self.inner, Operation::Describe, ResourceType::Topic, n))
            .collect()
    }
}
