//! The APIs of replica leadership, answered honestly: a partition's only leader is the
//! broker that owns it (rendezvous hashing over the live brokers) and its replicas are the
//! bookies of its ledgers, so there is no election to run and nothing to reassign.
//! ElectLeaders says ELECTION_NOT_NEEDED for each partition that exists;
//! ListPartitionReassignments lists none.

use std::sync::Arc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{
    ApiKey, ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
};

use crate::api::{Handler, str_bytes};
use crate::errors;
use crate::security::acl::Operation;
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
