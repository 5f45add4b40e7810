//! Model Kafka clients speaking the real protocol (`folio_testkit::kafka`) over the
//! simulated network, each from its own client node so the nemesis can cut it off from a
//! broker: idempotent producers that retry a batch until it is acknowledged (one batch in
//! flight each, as `max.in.flight=1`), tailing consumers, committers and observers of a
//! group's committed offset, a hostile producer whose batches lie about their record
//! count, and an admin that creates and deletes topics. Every request has a timeout
//! ([`REQUEST_TIMEOUT`]); a failed connection is dropped and made again.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use folio_broker::errors as codes;
use folio_testkit::kafka::{KafkaConn, produce_request};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
    ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rand::Rng;
use tokio::sync::watch;

use super::history::{Acked, History};
use crate::trace::Trace;

/// How long a client waits for an answer before it drops the connection.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) fn rand_ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(folio_rt::with_rng(|r| r.random_range(lo..=hi)))
}

pub(super) fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// What every client of a run shares.
#[derive(Debug, Clone)]
pub struct Shared {
    pub history: History,
    pub trace: Trace,
    pub stop: watch::Receiver<bool>,
    /// Every broker's listener (the bootstrap list).
    pub brokers: Vec<SocketAddr>,
    pub topic: String,
    pub partitions: i32,
    /// Record timestamps (a topic's time retention judges them).
    pub clock: std::sync::Arc<crate::clock::SimClock>,
    /// The store as the simulator sees it (never cut off), and its keys: what the checkers
    /// compare the brokers' answers with.
    pub meta: std::sync::Arc<crate::meta::SimMeta>,
    pub keys: folio_meta::keys::Keys,
}

impl Shared {
    pub(super) fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

/// A client node's connections, one per broker, and its view of the cluster.
#[derive(Debug)]
pub struct Node {
    pub ip: IpAddr,
    conns: BTreeMap<SocketAddr, KafkaConn>,
    /// Broker id → its address, from the last Metadata answer.
    addrs: BTreeMap<i32, SocketAddr>,
    /// Partition → (leader id, leader epoch), from the last Metadata answer.
    pub leaders: BTreeMap<i32, (i32, i32)>,
    bootstrap: Vec<SocketAddr>,
}

impl Node {
    /// A node at `ip` that knows the brokers by `bootstrap` only.
    pub fn new(ip: IpAddr, bootstrap: Vec<SocketAddr>) -> Node {
        Node {
            ip,
            conns: BTreeMap::new(),
            addrs: BTreeMap::new(),
            leaders: BTreeMap::new(),
            bootstrap,
        }
    }

    /// One request to `addr`, answered within [`REQUEST_TIMEOUT`].
    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        addr: SocketAddr,
        key: ApiKey,
        version: i16,
        req: &Q,
    ) -> Result<R, String> {
        self.call_within(addr, key, version, req, REQUEST_TIMEOUT).await
    }

    /// `call` with its own timeout (a JoinGroup waits out a rebalance).
    pub async fn call_within<Q: Encodable, R: Decodable>(
        &mut self,
        addr: SocketAddr,
        key: ApiKey,
        version: i16,
        req: &Q,
        within: Duration,
    ) -> Result<R, String> {
        let ip = self.ip;
        let answer = tokio::time::timeout(within, async {
            let conn = match self.conns.entry(addr) {
                std::collections::btree_map::Entry::Occupied(c) => c.into_mut(),
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(KafkaConn::connect_from(Some(ip), addr).await.map_err(String::from)?)
                }
            };
            conn.call(key, version, req).await.map_err(String::from)
        })
        .await
        .unwrap_or_else(|_| Err(format!("{key:?} to {addr}: no answer within {within:?}")));
        if answer.is_err() {
            self.conns.remove(&addr);
        }
        answer
    }

    /// Any broker (the bootstrap list, drawn by seed).
    pub fn any_broker(&self) -> SocketAddr {
        self.bootstrap[folio_rt::with_rng(|r| r.random_range(0..self.bootstrap.len()))]
    }

    /// Broker `node`'s address, as the last Metadata answer gave it.
    pub fn addr_of(&self, node: i32) -> Option<SocketAddr> {
        self.addrs.get(&node).copied()
    }

    /// Asks any broker for `topics`' metadata; learns brokers and leaders of `topic`.
    /// Returns the topics it named (name → error code).
    pub async fn metadata(
        &mut self,
        topics: Option<&[&str]>,
        topic: &str,
    ) -> Result<BTreeMap<String, i16>, String> {
        let req = MetadataRequest::default().with_allow_auto_topic_creation(false).with_topics(
            topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                    .collect()
            }),
        );
        let addr = self.any_broker();
        let resp: MetadataResponse = self.call(addr, ApiKey::Metadata, 12, &req).await?;
        for b in &resp.brokers {
            if let Ok(ip) = b.host.parse::<IpAddr>() {
                self.addrs.insert(b.node_id.0, SocketAddr::new(ip, b.port as u16));
            }
        }
        let mut named = BTreeMap::new();
        for t in &resp.topics {
            let Some(n) = &t.name else { continue };
            named.insert(n.0.to_string(), t.error_code);
            if n.0.as_str() == topic && t.error_code == 0 {
                for p in &t.partitions {
                    self.leaders.insert(p.partition_index, (p.leader_id.0, p.leader_epoch));
                }
            }
        }
        Ok(named)
    }

    /// The leader of `partition` of `topic` and its address, asking Metadata when unknown.
    pub(super) async fn leader(
        &mut self,
        topic: &str,
        partition: i32,
        refresh: bool,
    ) -> Result<(i32, SocketAddr), String> {
        if refresh || !self.leaders.contains_key(&partition) {
            self.metadata(Some(&[topic]), topic).await?;
        }
        let (leader, _) = self.leaders.get(&partition).copied().ok_or("no leader known")?;
        let addr = self.addr_of(leader).ok_or_else(|| format!("leader {leader} has no address"))?;
        Ok((leader, addr))
    }
}

/// Produce answer codes a producer retries the same batch on (anything else but the fatal
/// ones below is also retried: the model errs on the side of retrying).
fn fatal_for_session(code: i16) -> bool {
    matches!(
        code,
        codes::OUT_OF_ORDER_SEQUENCE_NUMBER
            | codes::UNKNOWN_PRODUCER_ID
            | codes::INVALID_PRODUCER_EPOCH
    )
}

/// An idempotent producer: one session (producer id) after another, one batch in flight,
/// retried until acknowledged; a session ends on a fatal answer (its batch's fate unknown).
/// After the stop it finishes the batch in flight, then ends.
pub async fn producer(s: Shared, ip: IpAddr, me: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    let mut session = 0u32;
    while !s.stopped() {
        // A session: a producer id and epoch.
        let (pid, epoch) = loop {
            if s.stopped() {
                return;
            }
            let req = InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(-1);
            let addr = node.any_broker();
            match node
                .call::<_, InitProducerIdResponse>(addr, ApiKey::InitProducerId, 4, &req)
                .await
            {
                Ok(r) if r.error_code == 0 => break (r.producer_id.0, r.producer_epoch),
                Ok(r) => s.trace.event(format!("{me}: InitProducerId answered {}", r.error_code)),
                Err(e) => s.trace.event(format!("{me}: InitProducerId failed: {e}")),
            }
            tokio::time::sleep(rand_ms(100, 500)).await;
        };
        session += 1;
        s.trace.event(format!("{me}: session {session} is producer {pid} epoch {epoch}"));
        let mut seqs: BTreeMap<i32, i32> = BTreeMap::new();
        'session: while !s.stopped() {
            let partition = folio_rt::with_rng(|r| r.random_range(0..s.partitions));
            let count = folio_rt::with_rng(|r| r.random_range(1..=3i32));
            let seq = seqs.get(&partition).copied().unwrap_or(0);
            let values: Vec<String> =
                (0..count).map(|i| format!("{me}.{session}.{partition}.{}", seq + i)).collect();
            s.history.lock().sent.extend(values.iter().cloned());
            let vs = values.clone();
            let ts = folio_proto::clock::Clock::now_ms(&*s.clock) as i64;
            let batch =
                folio_broker::batch::build(count, ts, 0, |i| vs[i as usize].clone().into_bytes());
            let batch = Bytes::from(idempotent(batch, pid, epoch, seq));
            let op = s.history.begin(format!("{me}: {} at {partition}", values[0]));
            let mut refresh = false;
            loop {
                let answer = match node.leader(&s.topic, partition, refresh).await {
                    Ok((leader, addr)) => {
                        let req = produce_request(&s.topic, partition, batch.clone(), -1);
                        node.call::<_, ProduceResponse>(addr, ApiKey::Produce, 9, &req)
                            .await
                            .and_then(|r| produce_answer(&r))
                            .map(|a| (leader, a))
                    }
                    Err(e) => Err(e),
                };
                match answer {
                    Ok((leader, (0 | codes::DUPLICATE_SEQUENCE_NUMBER, base))) => {
                        s.trace
                            .event(format!("{me}: {values:?} acknowledged at {base} by {leader}"));
                        s.history.count("produce acknowledged");
                        let base = (base >= 0).then_some(base);
                        s.history.lock().acked.entry(partition).or_default().push(Acked {
                            base,
                            values,
                            broker: leader,
                        });
                        seqs.insert(partition, seq + count);
                        break;
                    }
                    Ok((leader, (code, _))) if fatal_for_session(code) => {
                        s.trace.event(format!(
                            "{me}: {} answered {code} by {leader}: a new session",
                            values[0]
                        ));
                        s.history.count("produce session ended");
                        s.history.end(op);
                        break 'session;
                    }
                    Ok((leader, (code, _))) => {
                        if matches!(code, codes::CORRUPT_MESSAGE | codes::INVALID_RECORD) {
                            s.history.violation(format!(
                                "{me}: broker {leader} refused a valid batch with {code}"
                            ));
                        }
                        s.trace.event(format!(
                            "{me}: {} answered {code} by {leader}; retrying",
                            values[0]
                        ));
                        s.history.count("produce retried");
                    }
                    Err(e) => {
                        s.trace.event(format!("{me}: {} failed: {e}; retrying", values[0]));
                        s.history.count("produce retried");
                    }
                }
                refresh = true;
                tokio::time::sleep(rand_ms(50, 400)).await;
            }
            s.history.end(op);
            tokio::time::sleep(rand_ms(0, 100)).await;
        }
    }
}

/// The (code, base offset) of a one-partition Produce answer.
fn produce_answer(r: &ProduceResponse) -> Result<(i16, i64), String> {
    r.responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .map(|p| (p.error_code, p.base_offset))
        .ok_or_else(|| "a Produce answer without the partition".into())
}

/// `b` as a batch of idempotent producer `pid` at `epoch`, first sequence `seq`.
fn idempotent(mut b: Vec<u8>, pid: i64, epoch: i16, seq: i32) -> Vec<u8> {
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    recrc(&mut b);
    b
}

fn recrc(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// A hostile producer: now and then a batch with one record whose header claims
/// `claimed` records (its CRC right), as the 75-byte batch of #44 did. An acknowledgement is
/// a broken promise (the log's end would move past records that do not exist).
pub async fn liar(s: Shared, ip: IpAddr, me: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    while !s.stopped() {
        tokio::time::sleep(rand_ms(500, 3000)).await;
        let partition = folio_rt::with_rng(|r| r.random_range(0..s.partitions));
        let claimed = folio_rt::with_rng(|r| r.random_range(2..=i32::MAX));
        let ts = folio_proto::clock::Clock::now_ms(&*s.clock) as i64;
        let mut b = folio_broker::batch::build(1, ts, 0, |_| format!("{me}.lie").into_bytes());
        b[23..27].copy_from_slice(&(claimed - 1).to_be_bytes()); // last offset delta
        b[57..61].copy_from_slice(&claimed.to_be_bytes()); // records count
        recrc(&mut b);
        let Ok((leader, addr)) = node.leader(&s.topic, partition, true).await else { continue };
        let req = produce_request(&s.topic, partition, Bytes::from(b), -1);
        match node
            .call::<_, ProduceResponse>(addr, ApiKey::Produce, 9, &req)
            .await
            .and_then(|r| produce_answer(&r))
        {
            Ok((0, base)) => s.history.violation(format!(
                "broker {leader} acknowledged at {base} a batch of one record claiming {claimed}"
            )),
            Ok((code, _)) => {
                s.history.count("lying batch refused");
                s.trace
                    .event(format!("{me}: a batch claiming {claimed} records refused with {code}"));
            }
            Err(e) => s.trace.event(format!("{me}: {e}")),
        }
    }
}

/// The records of complete batches in a fetched `records` at or past `from`, (offset,
/// value), and the offset after the last complete batch (its header's, which a lying batch
/// puts past its records), `from` if none. Walks the records' own bytes, never trusting the
/// header's count (the checker must not share what it checks, nor allocate by a lie).
pub fn records_of(records: &Bytes, from: i64) -> Result<(Vec<(i64, String)>, i64), String> {
    let mut out = Vec::new();
    let mut next = from;
    let mut rest: &[u8] = records;
    while rest.len() >= folio_broker::batch::LOG_OVERHEAD {
        let len = i32::from_be_bytes(rest[8..12].try_into().expect("4 bytes")) as usize;
        if rest.len() < 12 + len || len < 49 {
            break; // a partial batch at the end of the answer
        }
        let (one, after) = rest.split_at(12 + len);
        rest = after;
        let base = i64::from_be_bytes(one[..8].try_into().expect("8 bytes"));
        let delta = i32::from_be_bytes(one[23..27].try_into().expect("4 bytes"));
        next = next.max(base + i64::from(delta) + 1);
        if one[22] & 7 != 0 {
            return Err(format!("a compressed batch at {base} (the model never compresses)"));
        }
        let mut body = &one[61..];
        let mut last = -1;
        while !body.is_empty() {
            let (offset_delta, _, value) =
                walk_record(&mut body).map_err(|e| format!("batch at {base}: {e}"))?;
            let offset = base + offset_delta;
            if offset <= last {
                return Err(format!("offset {offset} after {last} within a batch"));
            }
            last = offset;
            if offset >= from {
                out.push((offset, value));
            }
        }
    }
    Ok((out, next))
}

/// One record of a v2 batch: (offset delta, key, value as text); moves `b` past it.
pub(super) fn walk_record(b: &mut &[u8]) -> Result<(i64, Vec<u8>, String), String> {
    let len = usize::try_from(varint(b)?).map_err(|_| "a negative record length")?;
    if len > b.len() {
        return Err(format!("a record of {len} bytes with {} left", b.len()));
    }
    let (mut r, after) = b.split_at(len);
    *b = after;
    r = r.get(1..).ok_or("an empty record")?; // attributes
    varint(&mut r)?; // timestamp delta
    let offset_delta = varint(&mut r)?;
    let k = usize::try_from(varint(&mut r)?.max(0)).unwrap_or(usize::MAX);
    let key = r.get(..k).ok_or("a key past the record")?.to_vec();
    r = &r[k..];
    let n = usize::try_from(varint(&mut r)?.max(0)).unwrap_or(usize::MAX);
    let value = r.get(..n).ok_or("a value past the record")?;
    Ok((offset_delta, key, String::from_utf8_lossy(value).into_owned()))
}

/// A zigzag varint (at most 10 bytes).
fn varint(b: &mut &[u8]) -> Result<i64, String> {
    let mut x: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = b.split_first().ok_or("a varint past the end")?;
        *b = rest;
        x |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((x >> 1) as i64 ^ -((x & 1) as i64));
        }
    }
    Err("a varint over 10 bytes".into())
}

/// One Fetch of `partition` from `offset` at its leader: (records, the offset after the
/// last batch answered, high watermark).
pub async fn fetch_once(
    node: &mut Node,
    topic: &str,
    partition: i32,
    offset: i64,
    refresh: bool,
) -> Result<(Vec<(i64, String)>, i64, i64), String> {
    let p = fetch_partition(node, topic, partition, (offset, 0), refresh).await?;
    let records = p.records.clone().unwrap_or_default();
    let (records, next) = records_of(&records, offset)?;
    Ok((records, next, p.high_watermark))
}

/// One Fetch of `partition` from `offset` at its leader, at `isolation` (0:
/// read_uncommitted, 1: read_committed): the partition's answer, its error code an `Err`.
pub(super) async fn fetch_partition(
    node: &mut Node,
    topic: &str,
    partition: i32,
    (offset, isolation): (i64, i8),
    refresh: bool,
) -> Result<kafka_protocol::messages::fetch_response::PartitionData, String> {
    let (leader, addr) = node.leader(topic, partition, refresh).await?;
    let req = FetchRequest::default()
        .with_max_wait_ms(200)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default().with_topic(name(topic)).with_partitions(vec![
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20),
        ])]);
    let r: FetchResponse = node.call(addr, ApiKey::Fetch, 12, &req).await?;
    let p = r
        .responses
        .into_iter()
        .next()
        .and_then(|t| t.partitions.into_iter().next())
        .ok_or("a Fetch answer without the partition")?;
    if p.error_code != 0 {
        return Err(format!("Fetch answered {} by {leader}", p.error_code));
    }
    Ok(p)
}

/// A tailing consumer of every partition: its offsets only rise, and what it reads at an
/// offset is recorded (it must be what the log finally holds there).
pub async fn consumer(s: Shared, ip: IpAddr, me: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    let mut positions: BTreeMap<i32, i64> = (0..s.partitions).map(|p| (p, 0)).collect();
    let mut refresh = false;
    while !s.stopped() {
        for p in 0..s.partitions {
            let from = positions[&p];
            match fetch_once(&mut node, &s.topic, p, from, refresh).await {
                Ok((records, next, _)) => {
                    refresh = false;
                    let mut pos = from;
                    for (o, v) in records {
                        if o < pos {
                            s.history.violation(format!(
                                "{me}: partition {p} read offset {o} after {pos} (offsets went back)"
                            ));
                        }
                        s.history.read(p, o, &v);
                        pos = o + 1;
                    }
                    if pos > from {
                        s.history.count("records read");
                    }
                    positions.insert(p, pos.max(next));
                }
                Err(e) => {
                    refresh = true;
                    s.trace.event(format!("{me}: fetch of {p} at {from}: {e}"));
                    tokio::time::sleep(rand_ms(50, 300)).await;
                }
            }
        }
        tokio::time::sleep(rand_ms(0, 200)).await;
    }
}

/// The coordinator of `group`, asked of any broker.
pub(super) async fn coordinator(node: &mut Node, group: &str) -> Result<(i32, SocketAddr), String> {
    coordinator_of(node, group, 0).await
}

/// The coordinator of `key` (`key_type` 0: a group, 1: a transactional id), asked of any
/// broker.
pub(super) async fn coordinator_of(
    node: &mut Node,
    key: &str,
    key_type: i8,
) -> Result<(i32, SocketAddr), String> {
    let req = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(key.into()))
        .with_key_type(key_type);
    let addr = node.any_broker();
    let r: FindCoordinatorResponse = node.call(addr, ApiKey::FindCoordinator, 3, &req).await?;
    if r.error_code != 0 {
        return Err(format!("FindCoordinator answered {}", r.error_code));
    }
    let ip: IpAddr = r.host.parse().map_err(|e| format!("coordinator host {}: {e}", r.host))?;
    Ok((r.node_id.0, SocketAddr::new(ip, r.port as u16)))
}

/// Commits rising offsets of partition 0 for `group` (from outside the group protocol, as
/// `assign()` consumers do), one at a time; an acknowledged commit is a floor the group's
/// committed offset may never go below again.
pub async fn committer(s: Shared, ip: IpAddr, group: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    let mut next = 1i64;
    let mut at: Option<(i32, SocketAddr)> = None;
    while !s.stopped() {
        let (coord, addr) = match at {
            Some(c) => c,
            None => match coordinator(&mut node, &group).await {
                Ok(c) => *at.insert(c),
                Err(e) => {
                    s.trace.event(format!("committer {group}: {e}"));
                    tokio::time::sleep(rand_ms(100, 400)).await;
                    continue;
                }
            },
        };
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.clone())))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default().with_name(name(&s.topic)).with_partitions(
                    vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(next),
                    ],
                ),
            ]);
        let op = s.history.begin(format!("commit {next} of {group}"));
        let code = node
            .call::<_, OffsetCommitResponse>(addr, ApiKey::OffsetCommit, 8, &req)
            .await
            .and_then(|r| {
                r.topics
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map(|p| p.error_code)
                    .ok_or_else(|| "an OffsetCommit answer without the partition".into())
            });
        s.history.end(op);
        match code {
            Ok(0) => {
                s.trace.event(format!("committer {group}: {next} acknowledged by {coord}"));
                s.history.count("commit acknowledged");
                let mut f = s.history.lock();
                let e = f.commits_acked.entry(group.clone()).or_default();
                *e = (*e).max(next);
            }
            Ok(code) => {
                s.trace.event(format!("committer {group}: {next} answered {code} by {coord}"));
                s.history.count("commit refused");
                at = None;
            }
            Err(e) => {
                s.trace.event(format!("committer {group}: {next}: {e}"));
                s.history.count("commit failed");
                at = None;
            }
        }
        next += 1;
        tokio::time::sleep(rand_ms(20, 300)).await;
    }
}

/// Asks `group`'s committed offset of partition 0 of the coordinator: `Ok(None)` when the
/// answer was an error code.
pub async fn committed(
    node: &mut Node,
    topic: &str,
    group: &str,
) -> Result<Option<(i64, i32)>, String> {
    let (coord, addr) = coordinator(node, group).await?;
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![0]),
        ]));
    let r: OffsetFetchResponse = node.call(addr, ApiKey::OffsetFetch, 7, &req).await?;
    if r.error_code != 0 {
        return Ok(None);
    }
    let p = r
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("an OffsetFetch answer without the partition")?;
    Ok((p.error_code == 0).then_some((p.committed_offset, coord)))
}

/// Reads `group`'s committed offset now and then: it never moves backwards.
pub async fn observer(s: Shared, ip: IpAddr, group: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    while !s.stopped() {
        match committed(&mut node, &s.topic, &group).await {
            Ok(Some((offset, coord))) => s.history.commit_seen(&group, offset, coord),
            Ok(None) => {}
            Err(e) => s.trace.event(format!("observer {group}: {e}")),
        }
        tokio::time::sleep(rand_ms(50, 400)).await;
    }
}

/// Asks every broker, every ~250 ms, whom it names leader of each partition: two brokers
/// that each name themselves for one partition longer than [`CLAIM_OVERLAP_MAX`] is a
/// split brain (a broker cut off from the store must stop claiming its partitions within
/// its lease, before another takes them; transient overlaps last a membership poll). And a
/// broker that names itself leader while it has no registration in the store (its lease
/// expired: absent when the request was sent and when the answer came, within less than a
/// lease, so it could not have registered in between) serves on a lease it lost: a paused
/// broker, resumed, must stop at once, not when its membership loop next runs.
pub async fn claims(s: Shared, ip: IpAddr) {
    use crate::limits::CLAIM_OVERLAP_MAX;
    let mut node = Node::new(ip, s.brokers.clone());
    let mut overlap: BTreeMap<i32, tokio::time::Instant> = BTreeMap::new();
    while !s.stopped() {
        let mut claimed: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (i, addr) in s.brokers.iter().enumerate() {
            let id = i as i32 + 1;
            let req = MetadataRequest::default().with_allow_auto_topic_creation(false).with_topics(
                Some(vec![MetadataRequestTopic::default().with_name(Some(name(&s.topic)))]),
            );
            let (sent, gone) = (tokio::time::Instant::now(), unregistered(&s, id).await);
            let Ok(r) = node.call::<_, MetadataResponse>(*addr, ApiKey::Metadata, 12, &req).await
            else {
                continue;
            };
            let lost = gone && sent.elapsed() < super::LEASE_TTL && unregistered(&s, id).await;
            for t in r.topics.iter().filter(|t| t.error_code == 0) {
                for p in t.partitions.iter().filter(|p| p.leader_id.0 == id) {
                    claimed.entry(p.partition_index).or_default().push(id);
                    if lost {
                        s.history.violation(format!(
                            "broker {id} named itself leader of partition {} with no registration in the store",
                            p.partition_index
                        ));
                    }
                }
            }
        }
        let now = tokio::time::Instant::now();
        for p in 0..s.partitions {
            let who = claimed.get(&p).cloned().unwrap_or_default();
            if who.len() < 2 {
                overlap.remove(&p);
                continue;
            }
            let since = *overlap.entry(p).or_insert_with(|| {
                s.trace.event(format!("claims: brokers {who:?} each lead partition {p}"));
                now
            });
            if now - since >= CLAIM_OVERLAP_MAX {
                s.history.violation(format!(
                    "brokers {who:?} each claimed to lead partition {p} for {:?}",
                    now - since
                ));
                overlap.remove(&p);
            }
        }
        tokio::time::sleep(rand_ms(200, 300)).await;
    }
}

/// Whether broker `id` has no registration in the store (`false` when the store fails).
async fn unregistered(s: &Shared, id: i32) -> bool {
    use folio_meta::MetadataStore as _;
    matches!(s.meta.get(&s.keys.broker(id)).await, Ok(None))
}

/// Creates and deletes topics, one after another (`tmp-<k>`). A topic whose deletion was
/// acknowledged must never be listed again; topics with a create that failed without an
/// answer are left out (that create may still land, as in Kafka).
pub async fn admin(s: Shared, ip: IpAddr, me: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    let mut k = 0;
    while !s.stopped() {
        k += 1;
        let topic = format!("tmp-{k}");
        let op = s.history.begin(format!("{me}: create and delete {topic}"));
        let mut uncertain = false;
        loop {
            let req = folio_testkit::kafka::create_topics_request(std::slice::from_ref(&topic), 1);
            let addr = node.any_broker();
            let r = node
                .call::<_, kafka_protocol::messages::CreateTopicsResponse>(
                    addr,
                    ApiKey::CreateTopics,
                    5,
                    &req,
                )
                .await
                .map(|r| r.topics.first().map(|t| t.error_code));
            match r {
                Ok(Some(0 | codes::TOPIC_ALREADY_EXISTS)) => break,
                Ok(code) => s.trace.event(format!("{me}: creating {topic}: {code:?}")),
                Err(e) => {
                    uncertain = true;
                    s.trace.event(format!("{me}: creating {topic}: {e}"));
                }
            }
            tokio::time::sleep(rand_ms(100, 400)).await;
        }
        s.history.count("topic created");
        tokio::time::sleep(rand_ms(0, 500)).await;
        loop {
            let req = folio_testkit::kafka::delete_topics_request(std::slice::from_ref(&topic));
            let addr = node.any_broker();
            let r = node
                .call::<_, kafka_protocol::messages::DeleteTopicsResponse>(
                    addr,
                    ApiKey::DeleteTopics,
                    6,
                    &req,
                )
                .await
                .map(|r| r.responses.first().map(|t| t.error_code));
            match r {
                // UNKNOWN_TOPIC_OR_PARTITION: an earlier attempt whose answer was lost.
                Ok(Some(0 | codes::UNKNOWN_TOPIC_OR_PARTITION)) => break,
                Ok(code) => s.trace.event(format!("{me}: deleting {topic}: {code:?}")),
                Err(e) => s.trace.event(format!("{me}: deleting {topic}: {e}")),
            }
            tokio::time::sleep(rand_ms(100, 400)).await;
        }
        s.history.end(op);
        s.history.count("topic deleted");
        if !uncertain {
            s.history.lock().deleted_topics.insert(topic);
        }
        tokio::time::sleep(rand_ms(200, 1500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch as a Fetch answer carries it: base offset `base`.
    fn fetched(mut b: Vec<u8>, base: i64) -> Vec<u8> {
        b[..8].copy_from_slice(&base.to_be_bytes());
        b
    }

    #[test]
    fn records_are_walked_by_their_bytes_not_by_the_count_a_header_claims() {
        let honest = folio_broker::batch::build(2, 0, 0, |i| format!("v{i}").into_bytes());
        let mut lying = folio_broker::batch::build(1, 0, 0, |_| b"lie".to_vec());
        lying[23..27].copy_from_slice(&999i32.to_be_bytes());
        lying[57..61].copy_from_slice(&1000i32.to_be_bytes());
        let mut answer = fetched(honest, 5);
        answer.extend(fetched(lying, 7));
        let (records, next) = records_of(&Bytes::from(answer), 6).unwrap();
        assert_eq!(records, vec![(6, "v1".to_string()), (7, "lie".to_string())]);
        assert_eq!(next, 1007, "the lying header's end");
    }
}
