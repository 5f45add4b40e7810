//! The APIs of replica leadership, answered honestly: a partition's only leader is the
//! broker that owns it (rendezvous hashing over the live brokers) and its replicas are the
//! bookies of its ledgers, so there is no election to run and nothing to reassign.
//! ElectLeaders says ELECTION_NOT_NEEDED for each partition that exists;
//! ListPartitionReassignments lists none; AlterPartitionReassignments checks a new replica
//! list as Kafka does (live brokers, each once, the topic's replication factor: its ledger
//! quorum) and completes it at once, since nothing moves (a cancellation finds no
//! reassignment in progress).

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
};

use crate::api::{Handler, str_bytes};
use crate::domain::acl::Operation;
use crate::errors;
use crate::state::Inner;

/// Why no election runs, sent with each ELECTION_NOT_NEEDED.
const NO_ELECTION: &str =
    "the broker that owns a partition is its only leader; its replicas are ledger copies";

pub(crate) struct ElectLeaders;

impl Handler for ElectLeaders {
    type Request = ElectLeadersRequest;
    type Response = ElectLeadersResponse;
    const KEY: ApiKey = ApiKey::ElectLeaders;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Alter)
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: ElectLeadersRequest,
    ) -> ElectLeadersResponse {
        // No partitions named: "every partition", none of which needs an election.
        let Some(topics) = &req.topic_partitions else {
            return ElectLeadersResponse::default();
        };
        let mut resp = Self::error(version, &req, 0);
        for (t, out) in topics.iter().zip(resp.replica_election_results.iter_mut()) {
            let topic = inner.topics.get(t.topic.as_str()).await.ok().flatten();
            let partitions = topic.map_or(0, |t| t.record.partitions as i32);
            for r in &mut out.partition_result {
                let known = (0..partitions).contains(&r.partition_id);
                r.error_code = if known {
                    errors::ELECTION_NOT_NEEDED
                } else {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                };
                r.error_message = known.then(|| str_bytes(NO_ELECTION));
            }
        }
        resp
    }

    fn error(_version: i16, req: &ElectLeadersRequest, code: i16) -> ElectLeadersResponse {
        let results = req.topic_partitions.iter().flatten().map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| PartitionResult::default().with_partition_id(*p).with_error_code(code));
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions.collect())
        });
        ElectLeadersResponse::default()
            .with_error_code(code)
            .with_replica_election_results(results.collect())
    }

    fn error_code(resp: &Self::Response) -> i16 {
        // ELECTION_NOT_NEEDED is the normal answer here, not an error to count.
        let codes = resp.replica_election_results.iter().flat_map(|t| &t.partition_result);
        let codes = codes.map(|p| p.error_code).filter(|c| *c != errors::ELECTION_NOT_NEEDED);
        super::first_error(std::iter::once(resp.error_code).chain(codes))
    }
}

pub(crate) struct ListPartitionReassignments;

impl Handler for ListPartitionReassignments {
    type Request = ListPartitionReassignmentsRequest;
    type Response = ListPartitionReassignmentsResponse;
    const KEY: ApiKey = ApiKey::ListPartitionReassignments;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Describe)
    }

    async fn handle(
        _inner: Arc<Inner>,
        _version: i16,
        _req: ListPartitionReassignmentsRequest,
    ) -> ListPartitionReassignmentsResponse {
        ListPartitionReassignmentsResponse::default()
    }

    error_answer_of!(top);

    error_code_of!(top);
}

pub(crate) struct AlterPartitionReassignments;

/// Why a valid reassignment completes at once.
const NOTHING_TO_MOVE: &str =
    "nothing to move: a partition's data is in ledgers whose bookies each ledger chooses";

impl Handler for AlterPartitionReassignments {
    type Request = AlterPartitionReassignmentsRequest;
    type Response = AlterPartitionReassignmentsResponse;
    const KEY: ApiKey = ApiKey::AlterPartitionReassignments;

    fn authorize(inner: &Inner, _req: &Self::Request) -> Option<i16> {
        super::cluster_denied(inner, Operation::Alter)
    }

    async fn handle(
        inner: Arc<Inner>,
        version: i16,
        req: AlterPartitionReassignmentsRequest,
    ) -> AlterPartitionReassignmentsResponse {
        let mut resp = Self::error(version, &req, 0);
        let live: std::collections::BTreeSet<i32> =
            inner.membership.live().iter().map(|b| b.node_id).collect();
        for (t, out) in req.topics.iter().zip(resp.responses.iter_mut()) {
            let topic = inner.topics.get(t.name.as_str()).await.ok().flatten();
            for (p, r) in t.partitions.iter().zip(out.partitions.iter_mut()) {
                let (code, message) = match &topic {
                    Some(topic)
                        if (0..topic.record.partitions as i32).contains(&p.partition_index) =>
                    {
                        let replicas: Option<Vec<i32>> =
                            p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
                        reassignment(replicas.as_deref(), topic.record.replication, &live)
                    }
                    _ => (errors::UNKNOWN_TOPIC_OR_PARTITION, "no such topic or partition".into()),
                };
                r.error_code = code;
                r.error_message = Some(str_bytes(&message));
            }
        }
        resp
    }

    fn error(
        _version: i16,
        req: &AlterPartitionReassignmentsRequest,
        code: i16,
    ) -> AlterPartitionReassignmentsResponse {
        let topics = req.topics.iter().map(|t| {
            let partitions = t.partitions.iter().map(|p| {
                ReassignablePartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
            });
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions.collect())
        });
        AlterPartitionReassignmentsResponse::default()
            .with_error_code(code)
            .with_responses(topics.collect())
    }

    error_code_of!(top, [responses => partitions]);
}

/// The answer to reassigning a partition of a topic with `replication` replicas to
/// `replicas` (`None`: cancel) when `live` brokers are up.
fn reassignment(
    replicas: Option<&[i32]>,
    replication: u16,
    live: &std::collections::BTreeSet<i32>,
) -> (i16, String) {
    let Some(replicas) = replicas else {
        return (errors::NO_REASSIGNMENT_IN_PROGRESS, "no reassignment is in progress".into());
    };
    let distinct: std::collections::BTreeSet<&i32> = replicas.iter().collect();
    if replicas.is_empty() || distinct.len() != replicas.len() {
        return (
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!("replicas {replicas:?}: each broker once, at least one"),
        );
    }
    if let Some(b) = replicas.iter().find(|b| !live.contains(b)) {
        return (errors::INVALID_REPLICA_ASSIGNMENT, format!("broker {b} is not alive"));
    }
    if replicas.len() != usize::from(replication) {
        return (
            errors::INVALID_REPLICA_ASSIGNMENT,
            format!(
                "{} replicas where the topic has {replication}: the replication factor is the \
                 ledgers' quorum and does not change by reassignment",
                replicas.len()
            ),
        );
    }
    (errors::NONE, NOTHING_TO_MOVE.into())
}
