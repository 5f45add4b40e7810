//! Transactional clients in the simulator (#49): transactors, each a transactional id that
//! runs one transaction after another under the nemesis, and a read_committed consumer.
//! A transaction reads the committed tail of one partition, writes a batch to each of one
//! to three partitions, commits offset `n` of its group for partition 0, then commits (or,
//! one time in four, aborts). Half the transactors speak transaction version 2 (Produce
//! v12 and TxnOffsetCommit v5 add implicitly, every EndTxn v5 bumps the epoch), half
//! version 1 (AddPartitionsToTxn, AddOffsetsToTxn, one epoch per session), as librdkafka
//! does. After any request left without a definite answer the transactor starts a new
//! session (InitProducerId, which fences the old epoch and aborts what it left open), as
//! Jepsen advises. What each did and saw goes to [`TxnFacts`]; [`check`] judges it.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use folio_broker::errors as codes;
use folio_testkit::kafka::produce_request;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rand::Rng;
use tokio::time::Instant;

use super::clients::{Node, Shared, name, rand_ms};
use super::txn_check::{self, Log, Outcome, TxnId, value_of};
use crate::LIVENESS_BOUND;

/// The transaction timeout the transactors ask for.
const TXN_TIMEOUT_MS: i32 = 6_000;

/// Attempts of one request before its outcome is left unknown.
const ATTEMPTS: u32 = 6;

/// The transactional id of transactor `k`.
pub fn txn_id(k: u32) -> String {
    format!("txn-{k}")
}

/// The group whose offsets transactor `k`'s transactions commit.
pub fn txn_group(k: u32) -> String {
    format!("txn-group-{k}")
}

/// Codes after which the request is known not to have taken effect, and retrying it is
/// pointless: the transaction must be aborted, or the session is over.
fn definite(code: i16) -> bool {
    matches!(
        code,
        codes::INVALID_PRODUCER_EPOCH
            | codes::PRODUCER_FENCED
            | codes::INVALID_TXN_STATE
            | codes::TRANSACTION_ABORTABLE
            | codes::OUT_OF_ORDER_SEQUENCE_NUMBER
            | codes::UNKNOWN_PRODUCER_ID
            | codes::INVALID_PRODUCER_ID_MAPPING
            | codes::INVALID_REQUEST
    )
}

/// Codes that send the client to find the coordinator again.
fn moved(code: i16) -> bool {
    matches!(code, codes::NOT_COORDINATOR | codes::COORDINATOR_NOT_AVAILABLE)
}

/// What one request came to.
enum Answer<T> {
    Done(T),
    /// Refused with a definite code.
    Refused(i16),
    /// No definite answer within [`ATTEMPTS`].
    Lost,
}

/// One transactor: see the module docs.
struct Transactor {
    s: Shared,
    node: Node,
    k: u32,
    id: String,
    group: String,
    tv2: bool,
    /// The transaction and group coordinators, while known.
    coord: Option<SocketAddr>,
    group_coord: Option<SocketAddr>,
    /// Producer id and epoch of the session.
    pid: i64,
    epoch: i16,
    /// Version 1: next sequence per partition (a session's epoch spans transactions).
    seqs: BTreeMap<i32, i32>,
}

/// The coordinator of `key` (`key_type` 0: a group, 1: a transactional id).
async fn find(node: &mut Node, key: &str, key_type: i8) -> Result<SocketAddr, String> {
    Ok(super::clients::coordinator_of(node, key, key_type).await?.1)
}

impl Transactor {
    fn tid(&self) -> TransactionalId {
        TransactionalId(StrBytes::from_string(self.id.clone()))
    }

    /// A request to the transaction coordinator (`group`: to the group's), retried on
    /// errors that are not definite, finding the coordinator again when it moved.
    /// `code` reads the answer's error code.
    async fn coordinated<Q: kafka_protocol::protocol::Encodable, R>(
        &mut self,
        group: bool,
        (key, version): (ApiKey, i16),
        req: &Q,
        code: impl Fn(&R) -> i16,
    ) -> Answer<R>
    where
        R: kafka_protocol::protocol::Decodable,
    {
        for _ in 0..ATTEMPTS {
            let (k, kt) = if group { (&self.group, 0) } else { (&self.id, 1) };
            let known = if group { self.group_coord } else { self.coord };
            let addr = match known {
                Some(a) => Ok(a),
                None => find(&mut self.node, &k.clone(), kt).await,
            };
            let answer = match addr {
                Ok(addr) => {
                    *(if group { &mut self.group_coord } else { &mut self.coord }) = Some(addr);
                    self.node.call::<_, R>(addr, key, version, req).await
                }
                Err(e) => Err(e),
            };
            match answer {
                Ok(r) if code(&r) == 0 => return Answer::Done(r),
                Ok(r) if definite(code(&r)) => return Answer::Refused(code(&r)),
                Ok(r) => {
                    if moved(code(&r)) {
                        *(if group { &mut self.group_coord } else { &mut self.coord }) = None;
                    }
                    self.s.trace.event(format!("t{}: {key:?} answered {}", self.k, code(&r)));
                }
                Err(e) => {
                    *(if group { &mut self.group_coord } else { &mut self.coord }) = None;
                    self.s.trace.event(format!("t{}: {key:?} failed: {e}", self.k));
                }
            }
            tokio::time::sleep(rand_ms(50, 400)).await;
        }
        Answer::Lost
    }

    /// A new session: InitProducerId until it is answered (`false` once stopped).
    async fn init(&mut self) -> bool {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(self.tid()))
            .with_transaction_timeout_ms(TXN_TIMEOUT_MS)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        while !self.s.stopped() {
            let key = (ApiKey::InitProducerId, 4);
            if let Answer::Done(r) =
                self.coordinated(false, key, &req, |r: &InitProducerIdResponse| r.error_code).await
            {
                (self.pid, self.epoch) = (r.producer_id.0, r.producer_epoch);
                self.seqs.clear();
                self.s.trace.event(format!(
                    "t{}: session: producer {} epoch {} (version {})",
                    self.k,
                    self.pid,
                    self.epoch,
                    if self.tv2 { 2 } else { 1 }
                ));
                return true;
            }
        }
        false
    }

    /// Writes one transactional batch of `values` to `partition`, retried (the same batch:
    /// its sequence makes a retry a duplicate) until acknowledged.
    async fn produce(&mut self, partition: i32, values: &[String]) -> Answer<i64> {
        let seq = if self.tv2 { 0 } else { self.seqs.get(&partition).copied().unwrap_or(0) };
        let ts = folio_proto::clock::Clock::now_ms(&*self.s.clock) as i64;
        let vs = values.to_vec();
        let count = vs.len() as i32;
        let mut b =
            folio_broker::batch::build(count, ts, 0, |i| vs[i as usize].clone().into_bytes());
        b[21..23].copy_from_slice(&(1i16 << 4).to_be_bytes());
        b[43..51].copy_from_slice(&self.pid.to_be_bytes());
        b[51..53].copy_from_slice(&self.epoch.to_be_bytes());
        b[53..57].copy_from_slice(&seq.to_be_bytes());
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        let batch = Bytes::from(b);
        let version = if self.tv2 { 12 } else { 9 };
        let mut refresh = false;
        for _ in 0..ATTEMPTS {
            let answer = match self.node.leader(&self.s.topic, partition, refresh).await {
                Ok((_, addr)) => {
                    let req = produce_request(&self.s.topic, partition, batch.clone(), -1)
                        .with_transactional_id(Some(self.tid()));
                    self.node.call::<_, ProduceResponse>(addr, ApiKey::Produce, version, &req).await
                }
                Err(e) => Err(e),
            };
            let part = answer.as_ref().ok().and_then(|r| {
                r.responses.first().and_then(|t| t.partition_responses.first()).cloned()
            });
            match (answer, part) {
                (Ok(_), Some(p))
                    if matches!(p.error_code, 0 | codes::DUPLICATE_SEQUENCE_NUMBER) =>
                {
                    self.seqs.insert(partition, seq + count);
                    return Answer::Done(p.base_offset);
                }
                (Ok(_), Some(p)) if definite(p.error_code) => return Answer::Refused(p.error_code),
                (Ok(_), p) => self.s.trace.event(format!(
                    "t{}: produce to {partition}: {:?}",
                    self.k,
                    p.map(|p| p.error_code)
                )),
                (Err(e), _) => self.s.trace.event(format!("t{}: produce: {e}", self.k)),
            }
            refresh = true;
            tokio::time::sleep(rand_ms(50, 400)).await;
        }
        Answer::Lost
    }

    /// Version 1: adds `partitions` to the transaction.
    async fn add_partitions(&mut self, partitions: &[i32]) -> Answer<()> {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(self.tid())
            .with_v3_and_below_producer_id(ProducerId(self.pid))
            .with_v3_and_below_producer_epoch(self.epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(name(&self.s.topic))
                    .with_partitions(partitions.to_vec()),
            ]);
        let code = |r: &AddPartitionsToTxnResponse| {
            let ps = r.results_by_topic_v3_and_below.iter().flat_map(|t| &t.results_by_partition);
            ps.map(|p| p.partition_error_code).find(|c| *c != 0).unwrap_or(0)
        };
        match self.coordinated(false, (ApiKey::AddPartitionsToTxn, 3), &req, code).await {
            Answer::Done(_) => Answer::Done(()),
            Answer::Refused(c) => Answer::Refused(c),
            Answer::Lost => Answer::Lost,
        }
    }

    /// Commits offset `n` of partition 0 for the group within the transaction (version 1:
    /// after AddOffsetsToTxn).
    async fn commit_offset(&mut self, n: u64) -> Answer<()> {
        let group = GroupId(StrBytes::from_string(self.group.clone()));
        if !self.tv2 {
            let req = AddOffsetsToTxnRequest::default()
                .with_transactional_id(self.tid())
                .with_producer_id(ProducerId(self.pid))
                .with_producer_epoch(self.epoch)
                .with_group_id(group.clone());
            let code = |r: &AddOffsetsToTxnResponse| r.error_code;
            match self.coordinated(false, (ApiKey::AddOffsetsToTxn, 3), &req, code).await {
                Answer::Done(_) => {}
                Answer::Refused(c) => return Answer::Refused(c),
                Answer::Lost => return Answer::Lost,
            }
        }
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(self.tid())
            .with_group_id(group)
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_generation_id(-1)
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(name(&self.s.topic))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(n as i64),
                    ]),
            ]);
        let code = |r: &TxnOffsetCommitResponse| {
            let ps = r.topics.iter().flat_map(|t| &t.partitions);
            ps.map(|p| p.error_code).find(|c| *c != 0).unwrap_or(0)
        };
        let version = if self.tv2 { 5 } else { 3 };
        match self.coordinated(true, (ApiKey::TxnOffsetCommit, version), &req, code).await {
            Answer::Done(_) => {
                let at = self.group_coord;
                self.s.trace.event(format!("t{}: offset {n} staged at {at:?}", self.k));
                Answer::Done(())
            }
            Answer::Refused(c) => Answer::Refused(c),
            Answer::Lost => Answer::Lost,
        }
    }

    /// EndTxn; version 2 takes the next epoch from the answer.
    async fn end(&mut self, commit: bool) -> Answer<()> {
        let req = EndTxnRequest::default()
            .with_transactional_id(self.tid())
            .with_producer_id(ProducerId(self.pid))
            .with_producer_epoch(self.epoch)
            .with_committed(commit);
        let version = if self.tv2 { 5 } else { 3 };
        match self
            .coordinated(false, (ApiKey::EndTxn, version), &req, |r: &EndTxnResponse| r.error_code)
            .await
        {
            Answer::Done(r) => {
                if self.tv2 {
                    (self.pid, self.epoch) = (r.producer_id.0, r.producer_epoch);
                }
                Answer::Done(())
            }
            Answer::Refused(c) => Answer::Refused(c),
            Answer::Lost => Answer::Lost,
        }
    }
}

impl Transactor {
    fn record(&self, t: TxnId, f: impl FnOnce(&mut txn_check::Txn)) {
        f(self.s.history.lock().txns.txns.entry(t).or_default());
    }

    /// Adds (version 1) and writes the transaction's batches, one per partition.
    async fn writes(&mut self, t: TxnId, partitions: &[i32]) -> Answer<()> {
        if !self.tv2 {
            match self.add_partitions(partitions).await {
                Answer::Done(()) => {}
                other => return other,
            }
        }
        for &p in partitions {
            let count = folio_rt::with_rng(|r| r.random_range(1..=2u32));
            let values: Vec<String> = (0..count).map(|i| value_of(t, p, i)).collect();
            self.record(t, |x| x.sent.extend(values.iter().map(|v| (p, v.clone()))));
            match self.produce(p, &values).await {
                Answer::Done(base) => {
                    self.s.trace.event(format!("t{}: {values:?} written at {base}", self.k));
                    self.record(t, |x| x.acked.extend(values));
                }
                Answer::Refused(c) => return Answer::Refused(c),
                Answer::Lost => return Answer::Lost,
            }
        }
        Answer::Done(())
    }

    /// Transaction `n`: `false` when it ended without a definite answer (the session is
    /// over).
    async fn transaction(&mut self, n: u64) -> bool {
        let t = (self.k, n);
        self.record(t, |_| {});
        let op = self.s.history.begin(format!("t{}: transaction {n}", self.k));
        let r = folio_rt::with_rng(|r| r.random_range(0..self.s.partitions));
        match read_committed_tail(&mut self.node, &self.s.topic, r).await {
            Ok(read) => {
                let mut h = self.s.history.lock();
                for (o, v) in read {
                    h.txns.read(Some(t), (r, o), &v);
                }
            }
            Err(e) => self.s.trace.event(format!("t{}: reading {r}: {e}", self.k)),
        }
        let mut partitions: Vec<i32> = (0..self.s.partitions).collect();
        let keep = folio_rt::with_rng(|r| r.random_range(1..=3usize)).min(partitions.len());
        for i in 0..keep {
            let j = folio_rt::with_rng(|r| r.random_range(i..partitions.len()));
            partitions.swap(i, j);
        }
        partitions.truncate(keep);
        let staged = match self.writes(t, &partitions).await {
            Answer::Done(()) => self.commit_offset(n).await,
            other => other,
        };
        let (outcome, goes_on) = match staged {
            Answer::Done(()) => {
                let commit = folio_rt::with_rng(|r| r.random_range(0..4)) != 0;
                if commit {
                    self.record(t, |x| x.commit_sent = true);
                }
                match (self.end(commit).await, commit) {
                    (Answer::Done(()), true) => (Outcome::Committed, true),
                    (Answer::Done(()), false) => (Outcome::Aborted, true),
                    (Answer::Refused(_), true) => (Outcome::Refused, false),
                    _ => (Outcome::Unknown, false),
                }
            }
            Answer::Refused(code) => {
                self.s.trace.event(format!("t{}: transaction {n} refused ({code}): abort", self.k));
                match self.end(false).await {
                    Answer::Done(()) => (Outcome::Aborted, true),
                    _ => (Outcome::Unknown, false),
                }
            }
            Answer::Lost => (Outcome::Unknown, false),
        };
        self.s.trace.event(format!("t{}: transaction {n} {outcome:?}", self.k));
        self.record(t, |x| x.outcome = outcome);
        self.s.history.end(op);
        goes_on
    }
}

/// Transactor `k` (version 2 when `tv2`): transactions until the stop, finishing the one
/// in flight.
pub async fn transactor(s: Shared, ip: IpAddr, k: u32, tv2: bool) {
    let node = Node::new(ip, s.brokers.clone());
    let mut t = Transactor {
        s,
        node,
        k,
        id: txn_id(k),
        group: txn_group(k),
        tv2,
        coord: None,
        group_coord: None,
        pid: -1,
        epoch: -1,
        seqs: BTreeMap::new(),
    };
    let mut n = 0;
    while !t.s.stopped() {
        if !t.init().await {
            return;
        }
        while !t.s.stopped() {
            n += 1;
            if !t.transaction(n).await {
                break;
            }
            tokio::time::sleep(rand_ms(0, 100)).await;
        }
    }
}

/// A record batch as a transactional reader needs it.
struct Batch {
    last: i64,
    producer: i64,
    transactional: bool,
    /// `Some(commit)` for a control batch (a marker).
    marker: Option<bool>,
    records: Vec<(i64, String)>,
}

/// The complete batches of a Fetch answer.
fn batches(records: &[u8]) -> Result<Vec<Batch>, String> {
    let mut out = Vec::new();
    let mut rest = records;
    while rest.len() >= folio_broker::batch::LOG_OVERHEAD {
        let len = i32::from_be_bytes(rest[8..12].try_into().expect("4 bytes")) as usize;
        if rest.len() < 12 + len || len < 49 {
            break; // a partial batch at the end of the answer
        }
        let (one, after) = rest.split_at(12 + len);
        rest = after;
        let base = i64::from_be_bytes(one[..8].try_into().expect("8 bytes"));
        let delta = i32::from_be_bytes(one[23..27].try_into().expect("4 bytes"));
        let attributes = i16::from_be_bytes(one[21..23].try_into().expect("2 bytes"));
        if attributes & 7 != 0 {
            return Err(format!("a compressed batch at {base} (the model never compresses)"));
        }
        let mut body = &one[61..];
        let mut records = Vec::new();
        let mut marker = None;
        while !body.is_empty() {
            let (offset_delta, key, value) = super::clients::walk_record(&mut body)
                .map_err(|e| format!("batch at {base}: {e}"))?;
            if attributes & 0x20 != 0 {
                // A control record's key: version (i16), then type (0 abort, 1 commit).
                marker = Some(key.get(2..4) == Some(&[0, 1][..]));
            } else {
                records.push((base + offset_delta, value));
            }
        }
        out.push(Batch {
            last: base + i64::from(delta),
            producer: i64::from_be_bytes(one[43..51].try_into().expect("8 bytes")),
            transactional: attributes & 0x10 != 0,
            marker,
            records,
        });
    }
    Ok(out)
}

/// What one Fetch answered: records, the offset after the last batch, high watermark and
/// last stable offset.
#[derive(Debug)]
pub struct Fetched {
    pub records: Vec<(i64, String)>,
    pub next: i64,
    pub high_watermark: i64,
    pub last_stable: i64,
}

/// One Fetch of `partition` from `offset` at `isolation` (1: read_committed, filtered as a
/// Kafka consumer filters: the batches of an aborted transaction, from its first offset to
/// its abort marker, are skipped; markers are never records).
pub async fn fetch(
    node: &mut Node,
    topic: &str,
    partition: i32,
    (offset, isolation): (i64, i8),
    refresh: bool,
) -> Result<Fetched, String> {
    let p = super::clients::fetch_partition(node, topic, partition, (offset, isolation), refresh)
        .await?;
    let mut aborted: Vec<(i64, i64)> = (p.aborted_transactions.iter().flatten())
        .map(|a| (a.first_offset, a.producer_id.0))
        .collect();
    aborted.sort_unstable();
    let mut aborted = aborted.into_iter().peekable();
    let mut skipping = std::collections::BTreeSet::new();
    let mut out = Fetched {
        records: Vec::new(),
        next: offset,
        high_watermark: p.high_watermark,
        last_stable: p.last_stable_offset,
    };
    for b in batches(p.records.as_deref().unwrap_or_default())? {
        out.next = out.next.max(b.last + 1);
        while let Some((_, pid)) = aborted.next_if(|(first, _)| *first <= b.last) {
            skipping.insert(pid);
        }
        match b.marker {
            Some(false) => {
                skipping.remove(&b.producer);
            }
            Some(true) => {}
            None if b.transactional && skipping.contains(&b.producer) => {}
            None => out.records.extend(b.records.into_iter().filter(|(o, _)| *o >= offset)),
        }
    }
    Ok(out)
}

/// The read_committed records of `partition` from a few below its last stable offset.
async fn read_committed_tail(
    node: &mut Node,
    topic: &str,
    partition: i32,
) -> Result<Vec<(i64, String)>, String> {
    let (_, addr) = node.leader(topic, partition, false).await?;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(1)
        .with_topics(vec![ListOffsetsTopic::default().with_name(name(topic)).with_partitions(
            vec![
                ListOffsetsPartition::default().with_partition_index(partition).with_timestamp(-1),
            ],
        )]);
    let r: ListOffsetsResponse = node.call(addr, ApiKey::ListOffsets, 5, &req).await?;
    let p = r.topics.first().and_then(|t| t.partitions.first()).ok_or("no partition")?;
    if p.error_code != 0 {
        return Err(format!("ListOffsets answered {}", p.error_code));
    }
    let f = fetch(node, topic, partition, ((p.offset - 4).max(0), 1), false).await?;
    Ok(f.records.into_iter().filter(|(o, _)| *o < f.last_stable).collect())
}

/// A read_committed consumer tailing every partition: its offsets only rise, and every
/// read is judged as it happens ([`txn_check::TxnFacts::read`]).
pub async fn consumer(s: Shared, ip: IpAddr) {
    let mut node = Node::new(ip, s.brokers.clone());
    let mut positions: BTreeMap<i32, i64> = (0..s.partitions).map(|p| (p, 0)).collect();
    let mut refresh = false;
    while !s.stopped() {
        for p in 0..s.partitions {
            let from = positions[&p];
            match fetch(&mut node, &s.topic, p, (from, 1), refresh).await {
                Ok(f) => {
                    refresh = false;
                    let mut h = s.history.lock();
                    let mut pos = from;
                    for (o, v) in f.records {
                        if o < pos {
                            h.txns.violations.push(format!(
                                "read_committed: partition {p} read {o} after {pos}"
                            ));
                        }
                        h.txns.read(None, (p, o), &v);
                        pos = o + 1;
                    }
                    positions.insert(p, pos.max(f.next));
                }
                Err(e) => {
                    refresh = true;
                    s.trace.event(format!("txn consumer: fetch of {p} at {from}: {e}"));
                    tokio::time::sleep(rand_ms(50, 300)).await;
                }
            }
        }
        tokio::time::sleep(rand_ms(0, 200)).await;
    }
}

/// How many transactors `plan` runs.
pub fn transactors(plan: &super::KafkaPlan) -> u32 {
    plan.producers as u32 + 1
}

/// Starts the transactors (even ones speak version 2) and the read_committed consumer;
/// returns them, the groups the queue's final check reads (none), and how many client
/// nodes they use.
pub fn workloads(
    s: &Shared,
    plan: &super::KafkaPlan,
) -> (tokio::task::JoinSet<()>, Vec<String>, usize) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut clients = 1;
    for k in 0..transactors(plan) {
        let ip = super::kafka_client_ip(clients);
        tasks.spawn(transactor(s.clone(), ip, k, k % 2 == 0));
        clients += 1;
    }
    tasks.spawn(consumer(s.clone(), super::kafka_client_ip(clients)));
    (tasks, Vec::new(), clients + 1)
}

/// Partition `p` read to its end at `isolation` (read_committed: once no transaction is
/// open on it).
async fn read_all(node: &mut Node, s: &Shared, p: i32, isolation: i8) -> Result<Log, String> {
    let deadline = Instant::now() + LIVENESS_BOUND;
    let (mut log, mut pos, mut refresh) = (Log::new(), 0, false);
    while Instant::now() < deadline {
        match fetch(node, &s.topic, p, (pos, isolation), refresh).await {
            Ok(f) => {
                refresh = false;
                let empty = f.records.is_empty();
                log.extend(f.records);
                pos = pos.max(f.next);
                if empty && pos >= f.high_watermark && f.last_stable >= f.high_watermark {
                    s.trace.event(format!("txn checker: partition {p} at {isolation}: {log:?}"));
                    return Ok(log);
                }
                if empty {
                    // An open transaction holds the last stable offset back.
                    tokio::time::sleep(rand_ms(100, 300)).await;
                }
            }
            Err(e) => {
                s.trace.event(format!("txn checker: partition {p} at {pos}: {e}"));
                refresh = true;
                tokio::time::sleep(rand_ms(100, 300)).await;
            }
        }
    }
    Err(format!("partition {p} could not be read to its end at isolation {isolation} (at {pos})"))
}

/// `group`'s committed offset of partition 0 once no transaction holds one back
/// (OffsetFetch `require_stable`).
async fn stable_offset(node: &mut Node, s: &Shared, group: &str) -> Result<Option<i64>, String> {
    let deadline = Instant::now() + LIVENESS_BOUND;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(name(&s.topic))
                .with_partition_indexes(vec![0]),
        ]));
    while Instant::now() < deadline {
        let (answer, at) = match find(node, group, 0).await {
            Ok(addr) => {
                let r = node.call::<_, OffsetFetchResponse>(addr, ApiKey::OffsetFetch, 7, &req);
                (r.await, Some(addr))
            }
            Err(e) => (Err(e), None),
        };
        let p = answer
            .as_ref()
            .ok()
            .filter(|r| r.error_code == 0)
            .and_then(|r| r.topics.first().and_then(|t| t.partitions.first()).cloned());
        match p {
            Some(p) if p.error_code == 0 => {
                let o = p.committed_offset;
                s.trace.event(format!("txn checker: {group}'s offset is {o} at {at:?}"));
                return Ok((o >= 0).then_some(o));
            }
            other => s.trace.event(format!(
                "txn checker: {group}'s offset: {:?}",
                other.map(|p| p.error_code).ok_or(answer.map(|r| r.error_code))
            )),
        }
        tokio::time::sleep(rand_ms(100, 300)).await;
    }
    Err(format!("{group}'s committed offset could not be read (require_stable)"))
}

/// The final reads and the checks of [`txn_check`]; returns what they counted.
pub async fn check(
    s: &Shared,
    ip: IpAddr,
    transactors: u32,
    violations: &mut Vec<String>,
) -> BTreeMap<String, u64> {
    let mut node = Node::new(ip, s.brokers.clone());
    let (mut committed, mut raw) = (BTreeMap::new(), BTreeMap::new());
    let mut offsets = BTreeMap::new();
    let mut failed = Vec::new();
    for p in 0..s.partitions {
        match read_all(&mut node, s, p, 1).await {
            Ok(log) => drop(committed.insert(p, log)),
            Err(e) => failed.push(e),
        }
        match read_all(&mut node, s, p, 0).await {
            Ok(log) => drop(raw.insert(p, log)),
            Err(e) => failed.push(e),
        }
    }
    for k in 0..transactors {
        match stable_offset(&mut node, s, &txn_group(k)).await {
            Ok(o) => drop(offsets.insert(k, o)),
            Err(e) => failed.push(e),
        }
    }
    if !failed.is_empty() {
        violations.append(&mut failed);
        return BTreeMap::new();
    }
    let f = s.history.lock();
    let (bad, counts) = txn_check::check(&f.txns, &committed, &raw, &offsets);
    violations.extend(bad);
    counts
}
