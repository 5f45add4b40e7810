//! The transaction coordinator on the wire: AddPartitionsToTxn (v0-3, the client's own),
//! AddOffsetsToTxn, EndTxn and, at the group coordinator, TxnOffsetCommit. InitProducerId
//! with a transactional id is in `produce.rs`. The state machine is `domain::txn`'s; the
//! markers `crate::transactions`'.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;

use folio_meta::Compare;

use crate::api::Handler;
use crate::domain::acl::{Operation, ResourceType};
use crate::domain::cluster::txn_key;
use crate::errors;
use crate::state::Inner;

/// The code every request naming transactional id `id` gets before anything else:
/// INVALID_REQUEST for an id above `TRANSACTIONAL_ID_BYTES_MAX` (or empty),
/// NOT_COORDINATOR when another broker coordinates it.
pub(crate) fn txn_elsewhere(inner: &Inner, id: &str) -> Option<i16> {
    if id.is_empty() || id.len() > crate::limits::TRANSACTIONAL_ID_BYTES_MAX {
        inner.metrics.limit_hit(crate::limits::Limit::Names);
        return Some(errors::INVALID_REQUEST);
    }
    (!inner.membership.owns(&txn_key(id))).then_some(errors::NOT_COORDINATOR)
}

/// A producer id unique in the cluster, from the metadata store's id sequence `producer`.
pub(super) async fn new_producer_id(inner: &Inner) -> Result<i64, crate::domain::txn::Refusal> {
    use crate::domain::txn::Refusal;
    let key = inner.env.keys.id_sequence("producer");
    match inner.env.meta.next_id(&key).await {
        Ok(id) if id <= i64::MAX as u64 => Ok(id as i64),
        Ok(_) => {
            Err(Refusal { code: errors::KAFKA_STORAGE_ERROR, why: "producer ids spent".into() })
        }
        Err(e) => {
            tracing::warn!(error = %e, "allocating a producer id failed");
            Err(Refusal { code: errors::COORDINATOR_NOT_AVAILABLE, why: e.to_string() })
        }
    }
}

/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless the principal may write `id`.
fn txn_denied(inner: &Inner, id: &str) -> Option<i16> {
    super::all_denied(
        inner,
        Operation::Write,
        ResourceType::TransactionalId,
        [id],
        errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    )
}

fn log_refusal(api: &str, id: &str, r: &crate::domain::txn::Refusal) {
    tracing::info!(transactional_id = %id, code = errors::name(r.code), why = %r.why, "{api} refused");
}

pub(crate) struct AddPartitionsToTxn;

impl Handler for AddPartitionsToTxn {
    type Request = AddPartitionsToTxnRequest;
    type Response = AddPartitionsToTxnResponse;
    const KEY: ApiKey = ApiKey::AddPartitionsToTxn;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        txn_denied(inner, req.v3_and_below_transactional_id.as_str())
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: Self::Request) -> Self::Response {
        let id = req.v3_and_below_transactional_id.as_str().to_string();
        let code = if let Some(code) = txn_elsewhere(&inner, &id) {
            code
        } else if req
            .v3_and_below_topics
            .iter()
            .any(|t| !super::allowed(&inner, Operation::Write, ResourceType::Topic, &t.name))
        {
            errors::TOPIC_AUTHORIZATION_FAILED
        } else {
            let mut partitions = Vec::new();
            let mut unknown = false;
            for t in &req.v3_and_below_topics {
                match inner.topics.get(t.name.as_str()).await {
                    Ok(Some(topic)) => {
                        for p in &t.partitions {
                            unknown |= *p < 0 || *p >= topic.record.partitions as i32;
                            partitions.push((topic.name.clone(), *p));
                        }
                    }
                    _ => unknown = true,
                }
            }
            if unknown {
                errors::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                let who = (req.v3_and_below_producer_id.0, req.v3_and_below_producer_epoch);
                let added = (&partitions[..], &[][..]);
                match inner.txns.add(&id, who, added, inner.env.now_ms(), false).await {
                    Ok(()) => errors::NONE,
                    Err(r) => {
                        log_refusal("AddPartitionsToTxn", &id, &r);
                        r.code
                    }
                }
            }
        };
        Self::error(version, &req, code)
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
            req.v3_and_below_topics
                .iter()
                .map(|t| {
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_partition_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    fn error_code(resp: &Self::Response) -> i16 {
        super::first_error(
            resp.results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code)),
        )
    }
}

pub(crate) struct AddOffsetsToTxn;

impl Handler for AddOffsetsToTxn {
    type Request = AddOffsetsToTxnRequest;
    type Response = AddOffsetsToTxnResponse;
    const KEY: ApiKey = ApiKey::AddOffsetsToTxn;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        txn_denied(inner, req.transactional_id.as_str())
            .or_else(|| super::group_denied(inner, Operation::Read, req.group_id.as_str()))
    }

    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        let id = req.transactional_id.as_str();
        if let Some(code) = txn_elsewhere(&inner, id) {
            return AddOffsetsToTxnResponse::default().with_error_code(code);
        }
        let group = req.group_id.as_str().to_string();
        if group.is_empty() || group.len() > crate::limits::GROUP_ID_BYTES_MAX {
            return AddOffsetsToTxnResponse::default().with_error_code(errors::INVALID_GROUP_ID);
        }
        let who = (req.producer_id.0, req.producer_epoch);
        let added = (&[][..], &[group][..]);
        let code = match inner.txns.add(id, who, added, inner.env.now_ms(), false).await {
            Ok(()) => errors::NONE,
            Err(r) => {
                log_refusal("AddOffsetsToTxn", id, &r);
                r.code
            }
        };
        AddOffsetsToTxnResponse::default().with_error_code(code)
    }

    error_answer_of!(top);

    error_code_of!(top);
}

pub(crate) struct EndTxn;

impl Handler for EndTxn {
    type Request = EndTxnRequest;
    type Response = EndTxnResponse;
    const KEY: ApiKey = ApiKey::EndTxn;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        txn_denied(inner, req.transactional_id.as_str())
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: Self::Request) -> Self::Response {
        let arrived_ms = inner.env.now_ms();
        let id = req.transactional_id.as_str();
        if let Some(code) = txn_elsewhere(&inner, id) {
            return EndTxnResponse::default().with_error_code(code);
        }
        let who = (req.producer_id.0, req.producer_epoch);
        let kind = (req.committed, version >= 5);
        let new_id = async || new_producer_id(&inner).await;
        let at = (arrived_ms, inner.env.now_ms());
        match inner.txns.end(id, who, kind, at, new_id).await {
            Ok((pid, epoch)) => {
                inner.txns_ending.notify_one();
                inner.txns.wait_complete(id, crate::limits::TXN_END_WAIT).await;
                let resp = EndTxnResponse::default();
                if version >= 5 {
                    return resp.with_producer_id(ProducerId(pid)).with_producer_epoch(epoch);
                }
                resp
            }
            Err(r) => {
                log_refusal("EndTxn", id, &r);
                // Kafka answers clients before EndTxn v2 (no PRODUCER_FENCED yet) with
                // INVALID_PRODUCER_EPOCH.
                let code = if r.code == errors::PRODUCER_FENCED && version < 2 {
                    errors::INVALID_PRODUCER_EPOCH
                } else {
                    r.code
                };
                EndTxnResponse::default().with_error_code(code)
            }
        }
    }

    error_answer_of!(top);

    error_code_of!(top);
}

pub(crate) struct TxnOffsetCommit;

impl Handler for TxnOffsetCommit {
    type Request = TxnOffsetCommitRequest;
    type Response = TxnOffsetCommitResponse;
    const KEY: ApiKey = ApiKey::TxnOffsetCommit;

    fn authorize(inner: &Inner, req: &Self::Request) -> Option<i16> {
        txn_denied(inner, req.transactional_id.as_str())
            .or_else(|| super::group_denied(inner, Operation::Read, req.group_id.as_str()))
    }

    async fn handle(inner: Arc<Inner>, version: i16, req: Self::Request) -> Self::Response {
        let group = req.group_id.as_str();
        if let Some(code) = super::groups::elsewhere(&inner, group) {
            return Self::error(version, &req, code);
        }
        if req
            .topics
            .iter()
            .any(|t| !super::allowed(&inner, Operation::Read, ResourceType::Topic, &t.name))
        {
            return Self::error(version, &req, errors::TOPIC_AUTHORIZATION_FAILED);
        }
        // KIP-447 (v3+): a consumer's offsets come from a current member of the group, so a
        // zombie whose partitions were reassigned cannot commit them; without a member id
        // and generation (a producer naming only the group) nothing is checked, as in Kafka.
        let generation = req.generation_id;
        let member = req.member_id.as_str();
        if generation >= 0 || !member.is_empty() {
            let instance = req.group_instance_id.as_ref().map(|i| i.as_str());
            let code = inner.groups.check_commit(group, generation, member, instance);
            if code != errors::NONE {
                return Self::error(version, &req, code);
            }
        }
        // The transaction must hold the group (AddOffsetsToTxn came first) at this epoch;
        // from v5 (transaction version 2) the commit adds it itself.
        let id = req.transactional_id.as_str();
        if version >= 5 {
            let (who, added) =
                ((req.producer_id.0, req.producer_epoch), (&[][..], &[group.to_string()][..]));
            if let Err(r) = inner.txns.add(id, who, added, inner.env.now_ms(), true).await {
                log_refusal("TxnOffsetCommit", id, &r);
                return Self::error(version, &req, r.code);
            }
        }
        let offsets: Vec<_> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    let metadata =
                        p.committed_metadata.as_ref().map(|m| m.to_string()).unwrap_or_default();
                    (
                        t.name.as_str().to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch,
                        metadata,
                    )
                })
            })
            .collect();
        let who = (req.producer_id.0, req.producer_epoch);
        let code = stage_in_transaction(&inner, (id, who), group, offsets).await;
        Self::error(version, &req, code)
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        TxnOffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    }

    error_code_of!([topics => partitions]);
}

pub(crate) struct DescribeTransactions;

impl Handler for DescribeTransactions {
    type Request = DescribeTransactionsRequest;
    type Response = DescribeTransactionsResponse;
    const KEY: ApiKey = ApiKey::DescribeTransactions;

    /// Each id the principal may not describe is answered with
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED; each other coordinator's with NOT_COORDINATOR.
    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        use kafka_protocol::messages::describe_transactions_response::{
            TopicData, TransactionState,
        };
        let mut out = Vec::with_capacity(req.transactional_ids.len());
        for id in req.transactional_ids {
            let state = TransactionState::default().with_transactional_id(id.clone());
            let name = id.as_str();
            if !super::allowed(&inner, Operation::Describe, ResourceType::TransactionalId, name) {
                out.push(state.with_error_code(errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
                continue;
            }
            if let Some(code) = txn_elsewhere(&inner, name) {
                out.push(state.with_error_code(code));
                continue;
            }
            let r = match inner.txns.load(name).await {
                Ok(Some((r, _))) => r,
                Ok(None) => {
                    out.push(state.with_error_code(errors::TRANSACTIONAL_ID_NOT_FOUND));
                    continue;
                }
                Err(_) => {
                    out.push(state.with_error_code(errors::COORDINATOR_LOAD_IN_PROGRESS));
                    continue;
                }
            };
            let mut topics: Vec<TopicData> = Vec::new();
            for (t, p) in &r.partitions {
                match topics.iter_mut().find(|x| x.topic.as_str() == t) {
                    Some(x) => x.partitions.push(*p),
                    None => topics.push(
                        TopicData::default()
                            .with_topic(TopicName(super::str_bytes(t.clone())))
                            .with_partitions(vec![*p]),
                    ),
                }
            }
            let started = if r.state == crate::domain::txn::TxnState::Ongoing {
                r.started_ms as i64
            } else {
                -1
            };
            out.push(
                state
                    .with_transaction_state(super::str_bytes(r.state.name()))
                    .with_transaction_timeout_ms(r.timeout_ms as i32)
                    .with_transaction_start_time_ms(started)
                    .with_producer_id(ProducerId(r.producer_id))
                    .with_producer_epoch(r.epoch)
                    .with_topics(topics),
            );
        }
        DescribeTransactionsResponse::default().with_transaction_states(out)
    }

    fn error(_version: i16, req: &Self::Request, code: i16) -> Self::Response {
        use kafka_protocol::messages::describe_transactions_response::TransactionState;
        DescribeTransactionsResponse::default().with_transaction_states(
            req.transactional_ids
                .iter()
                .map(|id| {
                    TransactionState::default()
                        .with_transactional_id(id.clone())
                        .with_error_code(code)
                })
                .collect(),
        )
    }

    error_code_of!([transaction_states]);
}

pub(crate) struct ListTransactions;

impl Handler for ListTransactions {
    type Request = ListTransactionsRequest;
    type Response = ListTransactionsResponse;
    const KEY: ApiKey = ApiKey::ListTransactions;

    /// The transactional ids this broker coordinates that the principal may describe,
    /// filtered by state, producer id and (v1) how long their transaction has been open.
    async fn handle(inner: Arc<Inner>, _version: i16, req: Self::Request) -> Self::Response {
        use kafka_protocol::messages::list_transactions_response::TransactionState;
        const STATES: [&str; 6] = [
            "Empty",
            "Ongoing",
            "PrepareCommit",
            "PrepareAbort",
            "CompleteCommit",
            "CompleteAbort",
        ];
        let mut resp = ListTransactionsResponse::default();
        let unknown: Vec<_> =
            req.state_filters.iter().filter(|s| !STATES.contains(&s.as_str())).cloned().collect();
        let all = match inner.txns.all().await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(error = %e, "listing transactions failed");
                return resp.with_error_code(errors::COORDINATOR_LOAD_IN_PROGRESS);
            }
        };
        let now = inner.env.now_ms();
        for (id, r) in all {
            let wanted_state = req.state_filters.is_empty()
                || req.state_filters.iter().any(|s| s.as_str() == r.state.name());
            let wanted_pid = req.producer_id_filters.is_empty()
                || req.producer_id_filters.iter().any(|p| p.0 == r.producer_id);
            let open_ms = if r.state == crate::domain::txn::TxnState::Ongoing {
                now.saturating_sub(r.started_ms) as i64
            } else {
                -1
            };
            let wanted_age = req.duration_filter < 0 || open_ms >= req.duration_filter;
            let shown = wanted_state
                && wanted_pid
                && wanted_age
                && inner.membership.owns(&txn_key(&id))
                && super::allowed(&inner, Operation::Describe, ResourceType::TransactionalId, &id);
            if !shown {
                continue;
            }
            resp.transaction_states.push(
                TransactionState::default()
                    .with_transactional_id(TransactionalId(super::str_bytes(id)))
                    .with_producer_id(ProducerId(r.producer_id))
                    .with_transaction_state(super::str_bytes(r.state.name())),
            );
        }
        resp.with_unknown_state_filters(unknown)
    }

    error_answer_of!(top);

    error_code_of!(top);
}

/// Stages `offsets` for `group` in producer `who`'s open transaction of `id`: only while
/// the transaction record is the one checked (Ongoing at this epoch, holding the group),
/// compared in the staging write. Checked apart, a TxnOffsetCommit delayed past its
/// transaction's end (a coordinator cut off from the store) staged its offsets into the
/// next transaction's, which then committed them: the group's offset went back (found by
/// the simulator).
async fn stage_in_transaction(
    inner: &Inner,
    (id, who): (&str, (i64, i16)),
    group: &str,
    offsets: Vec<(String, i32, i64, i32, String)>,
) -> i16 {
    for _ in 0..crate::limits::TXN_STAGE_ATTEMPTS_MAX {
        let version = match inner.txns.load(id).await {
            Ok(Some((r, _))) if r.producer_id != who.0 => {
                return errors::INVALID_PRODUCER_ID_MAPPING;
            }
            Ok(Some((r, _))) if r.epoch != who.1 => return errors::PRODUCER_FENCED,
            Ok(Some((r, _)))
                if r.state != crate::domain::txn::TxnState::Ongoing
                    || !r.groups.iter().any(|g| g == group) =>
            {
                return errors::INVALID_TXN_STATE;
            }
            Ok(Some((_, version))) => version,
            Ok(None) => return errors::INVALID_PRODUCER_ID_MAPPING,
            Err(_) => return errors::COORDINATOR_NOT_AVAILABLE,
        };
        let record = Compare::Version(inner.txns.key(id), version);
        match crate::transactions::stage_offsets(inner, group, who.0, &offsets, record).await {
            Ok(true) => return errors::NONE,
            Ok(false) => continue, // the record or the staged offsets moved: check again
            Err(e) => {
                tracing::warn!(group = %group, transactional_id = %id, error = %e, "staging transactional offsets failed");
                return errors::COORDINATOR_NOT_AVAILABLE;
            }
        }
    }
    errors::CONCURRENT_TRANSACTIONS
}
