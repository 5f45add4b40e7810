//! A member of KIP-848's consumer protocol in the same group as the classic members
//! (`members.rs`): the group holds members of both protocols, so the coordinator upgrades
//! it online, assigns for the classic members too, and downgrades it when this member is
//! fenced or cut off for long. The member heartbeats (ConsumerGroupHeartbeat, listing what
//! it owns), takes and gives up partitions as told, reads from the group's committed
//! offsets and commits under its member epoch. What it checks: what it reads matches what
//! others read (`History::read`), a partition's position only rises while it holds it, and
//! acknowledged commits of partition 0 feed the group's floor, as a classic member's do.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::clients::{Node, Shared, coordinator, name, rand_ms};
use super::members::{Joined, commit, committed, group_id, read_once};

/// Kafka's codes the member acts on.
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
/// How long the member gives the coordinator to move partitions (`max.poll.interval.ms`).
const REBALANCE_TIMEOUT_MS: i32 = 2_000;

/// The member's view: its id and epoch, the topic's id (learnt from an assignment), and
/// its partitions with their positions.
struct Member {
    id: String,
    epoch: i32,
    topic_id: Option<Uuid>,
    positions: BTreeMap<i32, i64>,
}

/// One consumer-protocol member of `group` until the workloads stop.
pub async fn member(s: Shared, ip: IpAddr, group: String, me: String) {
    let mut node = Node::new(ip, s.brokers.clone());
    let id: [u8; 16] = folio_rt::random();
    let id = id.iter().map(|b| format!("{b:02x}")).collect();
    let mut m = Member { id, epoch: 0, topic_id: None, positions: BTreeMap::new() };
    while !s.stopped() {
        if let Err(e) = round(&s, &mut node, &group, &me, &mut m).await {
            s.trace.event(format!("{me}: {group} at epoch {}: {e}", m.epoch));
            tokio::time::sleep(rand_ms(100, 400)).await;
        }
        tokio::time::sleep(rand_ms(50, 400)).await;
    }
}

/// One heartbeat, one read of every partition held, one commit.
async fn round(
    s: &Shared,
    node: &mut Node,
    group: &str,
    me: &str,
    m: &mut Member,
) -> Result<(), String> {
    let coordinator @ (coord, addr) = coordinator(node, group).await?;
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(group_id(group))
        .with_member_id(StrBytes::from_string(m.id.clone()))
        .with_member_epoch(m.epoch)
        .with_rebalance_timeout_ms(-1);
    if m.epoch == 0 {
        req = req
            .with_rebalance_timeout_ms(REBALANCE_TIMEOUT_MS)
            .with_subscribed_topic_names(Some(vec![name(&s.topic)]));
    }
    if let Some(t) = m.topic_id {
        let owned = m.positions.keys().copied().collect();
        req = req.with_topic_partitions(Some(vec![
            TopicPartitions::default().with_topic_id(t).with_partitions(owned),
        ]));
    } else if m.epoch == 0 {
        req = req.with_topic_partitions(Some(Vec::new()));
    }
    let r: ConsumerGroupHeartbeatResponse =
        node.call(addr, ApiKey::ConsumerGroupHeartbeat, 1, &req).await?;
    match r.error_code {
        0 => {}
        UNKNOWN_MEMBER_ID | FENCED_MEMBER_EPOCH => {
            // Out of the group: everything held is given up, the member joins again.
            s.trace.event(format!("{me}: fenced ({}) by {coord}, rejoining", r.error_code));
            m.epoch = 0;
            m.positions.clear();
            return Ok(());
        }
        code => return Err(format!("ConsumerGroupHeartbeat answered {code} by {coord}")),
    }
    m.epoch = r.member_epoch;
    if let Some(a) = r.assignment {
        let mut now: Vec<i32> = Vec::new();
        for tp in a.topic_partitions {
            m.topic_id = Some(tp.topic_id);
            now.extend(tp.partitions);
        }
        m.positions.retain(|p, _| now.contains(p));
        let new: Vec<i32> = now.into_iter().filter(|p| !m.positions.contains_key(p)).collect();
        if !new.is_empty() {
            let from = committed(s, node, addr, group, &new).await?;
            m.positions.extend(from);
        }
        s.trace.event(format!(
            "{me}: epoch {} of {group} from broker {coord}: partitions {:?}",
            m.epoch,
            m.positions.keys().collect::<Vec<_>>()
        ));
    }
    let when = format!("at epoch {}", m.epoch);
    read_once(s, node, me, &when, &mut m.positions).await;
    let j = Joined {
        classic: false,
        generation: m.epoch,
        member: m.id.clone(),
        coordinator,
        partitions: m.positions.keys().copied().collect(),
    };
    commit(s, node, coordinator, group, &j, &m.positions).await
}
