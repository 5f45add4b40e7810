//! Consumers in a group, through the classic group protocol: each member finds the
//! coordinator, joins (JoinGroup, MEMBER_ID_REQUIRED first, subscribing in the embedded
//! consumer protocol), the leader assigns the partitions round robin (SyncGroup; in a
//! group the coordinator upgraded to the consumer protocol the coordinator assigns, and
//! nobody leads), and each member reads its partitions from the
//! group's committed offsets, commits what it read under its generation and member id, and
//! heartbeats; a rebalance, a fenced generation or a moved coordinator sends it back to
//! join. What it checks: an offset reads the same value whoever reads it (`History::read`),
//! a member's offsets only rise within a generation, and an acknowledged commit of
//! partition 0 is a floor for the group's committed offset (the scenario's end check).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment as assignment;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::clients::{Node, Shared, coordinator, fetch_once, name, rand_ms};

/// How long a member may go without a heartbeat before the coordinator drops it.
const SESSION_TIMEOUT_MS: i32 = 4_000;
/// How long a rebalance waits for the members to join again.
const REBALANCE_TIMEOUT_MS: i32 = 2_000;
/// A JoinGroup waits out a rebalance: its answer may take the rebalance timeout and the
/// initial delay (`kafka::broker_config`), plus the network.
const JOIN_WAIT: Duration = Duration::from_secs(4);

/// Kafka's codes a member acts on.
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;
const UNKNOWN_MEMBER_ID: i16 = 25;

pub(super) fn group_id(g: &str) -> GroupId {
    GroupId(StrBytes::from_string(g.to_string()))
}

/// A joined member: its generation (or member epoch), id, coordinator and partitions.
pub(super) struct Joined {
    /// A classic group's generation (a leader assigned); false: a member epoch of a
    /// consumer group, the coordinator assigned.
    pub classic: bool,
    pub generation: i32,
    pub member: String,
    pub coordinator: (i32, SocketAddr),
    pub partitions: Vec<i32>,
}

/// The embedded consumer protocol's bytes (version 0): `version i16`, then the message.
fn embedded<M: Encodable>(m: &M) -> Bytes {
    let mut b = BytesMut::new();
    b.extend_from_slice(&0i16.to_be_bytes());
    m.encode(&mut b, 0).expect("an embedded message encodes");
    b.freeze()
}

/// The partitions of `topic` an embedded assignment gives (empty bytes: none).
fn assigned(topic: &str, b: &Bytes) -> Result<Vec<i32>, String> {
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let mut body = b.slice(2.min(b.len())..);
    let a =
        ConsumerProtocolAssignment::decode(&mut body, 0).map_err(|e| format!("assignment: {e}"))?;
    Ok(a.assigned_partitions
        .into_iter()
        .filter(|tp| tp.topic.as_str() == topic)
        .flat_map(|tp| tp.partitions)
        .collect())
}

/// One member of `group` until the workloads stop.
pub async fn member(s: Shared, ip: IpAddr, group: String, me: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    let mut member_id = String::new();
    while !s.stopped() {
        let joined = match join(&s, &mut node, &group, &me, &mut member_id).await {
            Ok(j) => j,
            Err(e) => {
                s.trace.event(format!("{me}: joining {group}: {e}"));
                tokio::time::sleep(rand_ms(100, 400)).await;
                continue;
            }
        };
        s.trace.event(format!(
            "{me}: generation {} of {group} from broker {}: partitions {:?}",
            joined.generation, joined.coordinator.0, joined.partitions
        ));
        if joined.classic {
            s.history.generation_synced(&group, joined.generation, joined.coordinator.0);
        } else {
            // A member epoch of a consumer group (upgraded): epochs move in memory and start
            // again past the claim at the next coordinator, so only classic generations are
            // claimed, one coordinator each.
            s.history.count("classic member assigned by the coordinator");
        }
        if let Err(e) = consume(&s, &mut node, &group, &me, &joined).await {
            s.trace.event(format!("{me}: generation {} of {group} ended: {e}", joined.generation));
        }
    }
}

/// Joins and syncs: the member's generation and partitions.
async fn join(
    s: &Shared,
    node: &mut Node,
    group: &str,
    me: &str,
    member_id: &mut String,
) -> Result<Joined, String> {
    let coordinator @ (coord, addr) = coordinator(node, group).await?;
    let r: JoinGroupResponse = loop {
        let req = JoinGroupRequest::default()
            .with_group_id(group_id(group))
            .with_session_timeout_ms(SESSION_TIMEOUT_MS)
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_member_id(StrBytes::from_string(member_id.clone()))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(embedded(
                        &ConsumerProtocolSubscription::default()
                            .with_topics(vec![StrBytes::from_string(s.topic.clone())]),
                    )),
            ]);
        let r: JoinGroupResponse =
            node.call_within(addr, ApiKey::JoinGroup, 5, &req, JOIN_WAIT).await?;
        match r.error_code {
            0 => break r,
            MEMBER_ID_REQUIRED => *member_id = r.member_id.to_string(),
            UNKNOWN_MEMBER_ID => member_id.clear(),
            code => return Err(format!("JoinGroup answered {code} by {coord}")),
        }
    };
    *member_id = r.member_id.to_string();
    let generation = r.generation_id;
    let led_by_nobody = r.leader.is_empty();
    let assignments = if r.leader == r.member_id {
        let mut members: Vec<String> = r.members.iter().map(|m| m.member_id.to_string()).collect();
        members.sort();
        let mut given: BTreeMap<&String, Vec<i32>> = BTreeMap::new();
        for p in 0..s.partitions {
            given.entry(&members[p as usize % members.len()]).or_default().push(p);
        }
        members
            .iter()
            .map(|m| {
                let ps = given.get(m).cloned().unwrap_or_default();
                let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
                    assignment::TopicPartition::default()
                        .with_topic(name(&s.topic))
                        .with_partitions(ps),
                ]);
                SyncGroupRequestAssignment::default()
                    .with_member_id(StrBytes::from_string(m.clone()))
                    .with_assignment(embedded(&a))
            })
            .collect()
    } else {
        Vec::new()
    };
    let req = SyncGroupRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id(generation)
        .with_member_id(StrBytes::from_string(member_id.clone()))
        .with_assignments(assignments);
    let r: SyncGroupResponse =
        node.call_within(addr, ApiKey::SyncGroup, 3, &req, JOIN_WAIT).await?;
    if r.error_code != 0 {
        if r.error_code == UNKNOWN_MEMBER_ID {
            member_id.clear();
        }
        return Err(format!("SyncGroup of generation {generation} answered {}", r.error_code));
    }
    let partitions = assigned(&s.topic, &r.assignment).map_err(|e| format!("{me}: {e}"))?;
    let classic = !led_by_nobody;
    Ok(Joined { classic, generation, member: member_id.clone(), coordinator, partitions })
}

/// Reads, commits and heartbeats in generation `j` until it ends (an error says why).
async fn consume(
    s: &Shared,
    node: &mut Node,
    group: &str,
    me: &str,
    j: &Joined,
) -> Result<(), String> {
    let (coord, addr) = j.coordinator;
    let mut positions = committed(s, node, addr, group, &j.partitions).await?;
    while !s.stopped() {
        let when = format!("in generation {}", j.generation);
        read_once(s, node, me, &when, &mut positions).await;
        commit(s, node, (coord, addr), group, j, &positions).await?;
        let req = HeartbeatRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id(j.generation)
            .with_member_id(StrBytes::from_string(j.member.clone()));
        let r: HeartbeatResponse = node.call(addr, ApiKey::Heartbeat, 4, &req).await?;
        match r.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS => return Err("a rebalance began".into()),
            code => return Err(format!("Heartbeat answered {code} by {coord}")),
        }
        tokio::time::sleep(rand_ms(50, 400)).await;
    }
    Ok(())
}

/// One fetch of each partition a member holds, from its position: what it reads is
/// recorded (`History::read`), and an offset below the position (`when`: the member's
/// generation or epoch) is a violation.
pub(super) async fn read_once(
    s: &Shared,
    node: &mut Node,
    me: &str,
    when: &str,
    positions: &mut BTreeMap<i32, i64>,
) {
    for (p, pos) in positions.iter_mut() {
        let Ok((records, next, _)) = fetch_once(node, &s.topic, *p, *pos, false).await else {
            continue;
        };
        for (o, v) in records {
            if o < *pos {
                s.history
                    .violation(format!("{me}: partition {p} read offset {o} after {pos} {when}"));
            }
            s.history.read(*p, o, &v);
            *pos = o + 1;
        }
        *pos = (*pos).max(next);
    }
}

/// The group's committed offsets of `partitions` (0 where none is).
pub(super) async fn committed(
    s: &Shared,
    node: &mut Node,
    addr: SocketAddr,
    group: &str,
    partitions: &[i32],
) -> Result<BTreeMap<i32, i64>, String> {
    let req = OffsetFetchRequest::default().with_group_id(group_id(group)).with_topics(Some(vec![
        OffsetFetchRequestTopic::default()
            .with_name(name(&s.topic))
            .with_partition_indexes(partitions.to_vec()),
    ]));
    let r: OffsetFetchResponse = node.call(addr, ApiKey::OffsetFetch, 7, &req).await?;
    if r.error_code != 0 {
        return Err(format!("OffsetFetch answered {}", r.error_code));
    }
    let mut out: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
    for p in r.topics.iter().flat_map(|t| t.partitions.iter()) {
        if p.error_code != 0 {
            return Err(format!("OffsetFetch of {} answered {}", p.partition_index, p.error_code));
        }
        out.insert(p.partition_index, p.committed_offset.max(0));
    }
    Ok(out)
}

/// Commits `positions` in generation `j`; partition 0's acknowledged offset is a floor.
pub(super) async fn commit(
    s: &Shared,
    node: &mut Node,
    (coord, addr): (i32, SocketAddr),
    group: &str,
    j: &Joined,
    positions: &BTreeMap<i32, i64>,
) -> Result<(), String> {
    if positions.is_empty() {
        return Ok(());
    }
    let partitions = positions
        .iter()
        .map(|(p, o)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
        })
        .collect();
    let req = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(j.generation)
        .with_member_id(StrBytes::from_string(j.member.clone()))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name(&s.topic))
                .with_partitions(partitions),
        ]);
    let op = s.history.begin(format!("commit of {group} in generation {}", j.generation));
    let r = node.call::<_, OffsetCommitResponse>(addr, ApiKey::OffsetCommit, 8, &req).await;
    s.history.end(op);
    let r = r?;
    let codes: Vec<i16> =
        r.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect();
    if let Some(code) = codes.iter().find(|c| **c != 0) {
        s.history.count("member commit refused");
        return Err(format!("OffsetCommit answered {code} by {coord}"));
    }
    s.history.count("member commit acknowledged");
    if let Some(o) = positions.get(&0) {
        let mut f = s.history.lock();
        let e = f.commits_acked.entry(group.to_string()).or_default();
        *e = (*e).max(*o);
    }
    Ok(())
}
