//! Classic members inside a consumer group: Kafka's online upgrade and downgrade.
//!
//! - **Upgrade.** A consumer-protocol join (epoch 0) of a classic group that has members,
//!   speaks the `consumer` protocol type and has at most `group.max.size` of them turns it
//!   into a consumer group (`Coordinator::create_consumer_group`). Every classic member
//!   becomes a member at the group's generation, subscribed to what its JoinGroup named
//!   and owning what its last SyncGroup gave it; waiting JoinGroup and SyncGroup calls end
//!   with REBALANCE_IN_PROGRESS. A group whose embedded protocol does not read is refused
//!   (GROUP_ID_NOT_FOUND) and stays classic.
//! - **Classic members** keep speaking JoinGroup, SyncGroup, Heartbeat and LeaveGroup. The
//!   coordinator assigns for them: a JoinGroup updates the member's subscription, and
//!   reconciles it with the partitions its subscription says it owns (an eager member owns
//!   none when it rejoins); it is answered at once with the member's epoch as the
//!   generation and no leader, so nobody runs a client-side assignor. SyncGroup returns
//!   the partitions the member may own now. A Heartbeat answers REBALANCE_IN_PROGRESS
//!   while the member must rejoin: the group's epoch passed its own, it has partitions to
//!   revoke, or partitions it waits for are free now.
//! - **Downgrade.** When the last consumer-protocol member leaves or is fenced and at least
//!   one member remains, all of them classic and at most `group.max.size`, the group
//!   becomes a classic group at its epoch, with each member's partitions as its
//!   assignment, and a rebalance begins (`Coordinator::downgrade_if_classic`).
//!   A classic static member that takes the place of the last consumer-protocol member
//!   is answered inside the consumer group, then the group downgrades the same way.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::embedded::{self, NamedPartitions, Subscription};
use super::{ConsumerGroup, ConsumerMember, MemberState, Partitions, Settings, TopicLookup};
use crate::domain::group::membership::{chosen_protocol, new_member_id, prepare_rebalance};
use crate::domain::group::statics::leaver;
use crate::domain::group::{
    Coordinator, Group, GroupState, JoinRequest, JoinResult, Member, SyncResult,
};
use crate::errors;

/// The protocol type of groups the coordinator can assign for.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// What a classic member of a consumer group keeps of its JoinGroup.
#[derive(Debug, Clone)]
pub struct ClassicMeta {
    pub session_timeout: Duration,
    /// (protocol name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
}

impl ClassicMeta {
    /// The embedded protocol's version the member speaks (its assignments are written in it).
    fn version(&self) -> i16 {
        self.protocols
            .first()
            .and_then(|(_, m)| m.get(..2))
            .map_or(0, |v| i16::from_be_bytes([v[0], v[1]]))
    }
}

/// A classic member's subscription: the first of its protocols' metadata (they carry the
/// same subscription).
fn subscription_of(protocols: &[(String, Bytes)]) -> Result<Subscription, embedded::Malformed> {
    let (_, meta) = protocols.first().ok_or(embedded::Malformed("no protocol"))?;
    embedded::subscription(meta)
}

/// Topic names → ids, for the topics that exist (the rest are dropped).
fn to_ids(named: &NamedPartitions, topics: &dyn TopicLookup) -> Partitions {
    named
        .iter()
        .filter_map(|(name, ps)| {
            let (id, count) = topics.topic(name)?;
            let ps = ps.iter().copied().filter(|p| *p >= 0 && (*p as u32) < count).collect();
            Some((id, ps))
        })
        .collect()
}

impl ConsumerGroup {
    /// A consumer group made of classic group `g`'s members (an online upgrade), claimed
    /// at `claimed`; `Err` if a member's embedded protocol does not read.
    pub(in crate::domain::group) fn upgrade(
        g: &Group,
        claimed: i32,
        now: u64,
        s: &Settings,
        topics: &dyn TopicLookup,
    ) -> Result<ConsumerGroup, embedded::Malformed> {
        let mut c = ConsumerGroup::new(claimed, now, s.default_assignor);
        for m in g.members.values() {
            let sub = subscription_of(&m.protocols)?;
            let mut assigned = to_ids(&embedded::assignment(&m.assignment)?, topics);
            // A partition two members were given (a client-side assignor's mistake) stays
            // with the first.
            for (t, ps) in assigned.iter_mut() {
                ps.retain(|p| !c.owners.contains_key(&(*t, *p)));
            }
            let mut names = sub.topics;
            names.sort();
            names.dedup();
            let mut member = ConsumerMember::new(&m.id, m.instance_id.clone(), g.generation, now);
            member.rack = sub.rack;
            member.names = names;
            member.rebalance_timeout = m.rebalance_timeout;
            member.classic = Some(ClassicMeta {
                session_timeout: m.session_timeout,
                protocols: m.protocols.clone(),
            });
            if let Some(i) = &m.instance_id {
                c.statics.insert(i.clone(), m.id.clone());
            }
            c.members.insert(m.id.clone(), member);
            c.target.insert(m.id.clone(), assigned.clone());
            c.place(&m.id, assigned, Partitions::new());
        }
        c.refresh_topics(topics, now);
        c.target_epoch = c.epoch;
        Ok(c)
    }

    /// Whether only classic members remain (and some do): the group goes back to classic.
    pub(in crate::domain::group) fn only_classic_members(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// The classic group this one becomes (an online downgrade): at the group's epoch,
    /// each member assigned its partitions, rebalancing.
    fn downgrade(&self, now: u64) -> Group {
        let mut g = Group::new(now);
        g.generation = self.epoch;
        g.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
        for m in self.members.values() {
            let classic = m.classic.as_ref().expect("a downgrade keeps classic members only");
            let assignment =
                embedded::encode_assignment(classic.version(), &self.named(&m.assigned));
            let member = Member {
                id: m.id.clone(),
                session_timeout: classic.session_timeout,
                rebalance_timeout: m.rebalance_timeout,
                protocols: classic.protocols.clone(),
                assignment: Bytes::from(assignment),
                instance_id: m.instance_id.clone(),
                last_seen: m.last_seen,
            };
            g.members.insert(m.id.clone(), member);
        }
        g.statics = self.statics.clone();
        let leader = g.members.keys().next().cloned().expect("a downgrade keeps a member");
        g.protocol = Some(chosen_protocol(&g, &leader));
        g.leader = Some(leader);
        // The group stands where the consumer group left it, then rebalances as classic.
        g.state = GroupState::Stable;
        prepare_rebalance(&mut g, now, Duration::ZERO);
        g
    }

    /// Partitions by topic name (the topics the group subscribes to; others are dropped).
    fn named(&self, parts: &Partitions) -> NamedPartitions {
        let names: BTreeMap<_, _> = self.topics.iter().map(|(n, (id, _))| (*id, n)).collect();
        parts
            .iter()
            .filter_map(|(t, ps)| names.get(t).map(|n| ((*n).clone(), ps.clone())))
            .collect()
    }

    /// A classic member's JoinGroup (answered at once: the coordinator assigns).
    fn classic_join(
        &mut self,
        j: &JoinRequest<'_>,
        topics: &dyn TopicLookup,
        now: u64,
        s: &Settings,
    ) -> JoinResult {
        let fail = |error| JoinResult {
            error,
            member_id: j.member_id.to_string(),
            ..JoinResult::default()
        };
        if j.protocol_type != CONSUMER_PROTOCOL_TYPE {
            return fail(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
        let Ok(sub) = subscription_of(&j.protocols) else {
            return fail(errors::INCONSISTENT_GROUP_PROTOCOL);
        };
        let id = match self.classic_member_id(j, s) {
            Ok(id) => id,
            Err(code) => return fail(code),
        };
        let classic =
            ClassicMeta { session_timeout: j.session_timeout, protocols: j.protocols.clone() };
        let m = self.members.entry(id.clone()).or_insert_with(|| {
            let mut m = ConsumerMember::new(&id, j.instance_id.map(str::to_string), 0, now);
            m.client_id = j.client_id.to_string();
            m
        });
        let joined = m.classic.is_none();
        m.classic = Some(classic);
        m.last_seen = now;
        m.rebalance_timeout = j.rebalance_timeout;
        m.rack = sub.rack.clone();
        let mut names = sub.topics.clone();
        names.sort();
        names.dedup();
        let changed = m.names != names;
        m.names = names;
        if let Some(i) = j.instance_id {
            self.statics.insert(i.to_string(), id.clone());
        }
        if joined {
            tracing::info!(group = j.group, member = %id, "classic member joined the consumer group");
            self.bump("a classic member joined", j.group);
        } else if changed {
            self.bump("a classic member's subscription changed", j.group);
        }
        if self.refresh_topics(topics, now) {
            self.bump("subscribed topics changed", j.group);
        }
        if self.epoch > self.target_epoch {
            self.compute_target(s);
        }
        let owned = to_ids(&sub.owned, topics);
        self.reconcile(&id, Some(&owned), now);
        let m = &self.members[&id];
        JoinResult {
            error: errors::NONE,
            generation: m.epoch,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
            protocol: j.protocols.first().map(|(p, _)| p.clone()),
            leader: String::new(),
            member_id: id,
            members: Vec::new(),
        }
    }

    /// The member id a classic JoinGroup joins as: a new one, the member's own, or (a
    /// static member back under a new id) its instance's place.
    fn classic_member_id(&mut self, j: &JoinRequest<'_>, s: &Settings) -> Result<String, i16> {
        if let Some(instance) = j.instance_id
            && let Some(held) = self.statics.get(instance).cloned()
        {
            if j.member_id.is_empty() {
                let id = new_member_id(j.client_id);
                self.take_static_place(j.group, instance, &held, &id);
                return Ok(id);
            }
            return if held == j.member_id { Ok(held) } else { Err(errors::FENCED_INSTANCE_ID) };
        }
        if !j.member_id.is_empty() {
            return match self.members.get(j.member_id) {
                Some(m) if m.classic.is_some() => Ok(j.member_id.to_string()),
                _ => Err(errors::UNKNOWN_MEMBER_ID),
            };
        }
        if self.members.len() >= s.max_members {
            return Err(errors::GROUP_MAX_SIZE_REACHED);
        }
        Ok(new_member_id(j.client_id))
    }

    /// The classic member `member_id` (named by `instance_id` too, if static), checked.
    fn classic_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<&ConsumerMember, i16> {
        if let Some(i) = instance_id {
            match self.statics.get(i) {
                None => return Err(errors::UNKNOWN_MEMBER_ID),
                Some(held) if held != member_id => return Err(errors::FENCED_INSTANCE_ID),
                Some(_) => {}
            }
        }
        let m = self.members.get(member_id).ok_or(errors::UNKNOWN_MEMBER_ID)?;
        if m.classic.is_none() {
            return Err(errors::UNKNOWN_MEMBER_ID);
        }
        if m.epoch != generation {
            return Err(errors::ILLEGAL_GENERATION);
        }
        Ok(m)
    }

    /// A classic member's SyncGroup: the partitions it may own now.
    pub(in crate::domain::group) fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: u64,
    ) -> SyncResult {
        let fail = |error| SyncResult { error, ..SyncResult::default() };
        let m = match self.classic_member(member_id, instance_id, generation) {
            Ok(m) => m,
            Err(code) => return fail(code),
        };
        if self.epoch > m.epoch && m.state != MemberState::UnrevokedPartitions {
            return fail(errors::REBALANCE_IN_PROGRESS);
        }
        let classic = m.classic.as_ref().expect("checked: a classic member");
        let assignment = embedded::encode_assignment(classic.version(), &self.named(&m.assigned));
        let protocol = classic.protocols.first().map(|(p, _)| p.clone());
        self.members.get_mut(member_id).expect("checked above").last_seen = now;
        SyncResult {
            error: errors::NONE,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
            protocol,
            assignment: Bytes::from(assignment),
        }
    }

    /// A classic member's Heartbeat: REBALANCE_IN_PROGRESS while it must rejoin.
    pub(in crate::domain::group) fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: u64,
    ) -> i16 {
        let m = match self.classic_member(member_id, instance_id, generation) {
            Ok(m) => m,
            Err(code) => return code,
        };
        let waits_for_nothing = || {
            let target = self.target.get(member_id);
            target.into_iter().flatten().all(|(t, ps)| {
                ps.iter().all(|p| {
                    m.assigned.get(t).is_some_and(|a| a.contains(p))
                        || self.owners.get(&(*t, *p)).is_none_or(|o| o == member_id)
                })
            })
        };
        let rejoin = m.epoch < self.epoch
            || m.state == MemberState::UnrevokedPartitions
            || (m.state == MemberState::UnreleasedPartitions && waits_for_nothing());
        let m = self.members.get_mut(member_id).expect("checked above");
        m.last_seen = now;
        if !rejoin {
            return errors::NONE;
        }
        // Kafka's join timeout: a member told to rejoin that does not within its rebalance
        // timeout is fenced (`expired`), so nobody waits on its partitions for ever.
        if m.revoke_deadline.is_none() {
            m.revoke_deadline = Some(now.saturating_add(m.rebalance_timeout.as_millis() as u64));
        }
        errors::REBALANCE_IN_PROGRESS
    }

    /// LeaveGroup of members named by member id or instance id: a code per member.
    pub(in crate::domain::group) fn classic_leave(
        &mut self,
        group: &str,
        members: &[(String, Option<String>)],
        now: u64,
    ) -> Vec<i16> {
        members
            .iter()
            .map(|(id, instance)| {
                let id = match leaver(&self.statics, id, instance.as_deref()) {
                    Ok(id) => id,
                    Err(code) => return code,
                };
                if !self.members.contains_key(&id) {
                    return errors::UNKNOWN_MEMBER_ID;
                }
                self.remove(&id, now, "it left (LeaveGroup)", group);
                errors::NONE
            })
            .collect()
    }
}

impl Coordinator {
    /// Whether classic group `g` may become a consumer group with its members (checked
    /// before its generation is claimed): GROUP_ID_NOT_FOUND if not, as Kafka.
    pub(super) fn upgrade_refused(&self, name: &str, g: &Group) -> Option<String> {
        if g.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return Some(format!("classic group {name} does not use the consumer protocol type"));
        }
        if g.members.len() > self.config.max_members {
            return Some(format!("classic group {name} has more members than group.max.size"));
        }
        let unreadable = g.members.values().find_map(|m| {
            let sub = subscription_of(&m.protocols).err();
            sub.or_else(|| embedded::assignment(&m.assignment).err()).map(|e| (m, e))
        });
        unreadable.map(|(m, e)| format!("classic group {name}: member {}: {e}", m.id))
    }

    /// A JoinGroup, SyncGroup or Heartbeat of a group that is a consumer group here with
    /// members (under the groups lock): answered by it.
    pub(in crate::domain::group) fn join_consumer_group(
        &self,
        j: &JoinRequest<'_>,
        topics: &dyn TopicLookup,
    ) -> Option<JoinResult> {
        let s = self.consumer_settings();
        self.in_consumer_group(j.group, |c, now| {
            (!c.is_empty()).then(|| c.classic_join(j, topics, now, &s))
        })
        .flatten()
    }

    /// `f` on consumer group `group` (with the clock's time), if `group` is one here: a
    /// classic member's SyncGroup, Heartbeat or LeaveGroup goes to it.
    pub(in crate::domain::group) fn in_consumer_group<T>(
        &self,
        group: &str,
        f: impl FnOnce(&mut ConsumerGroup, u64) -> T,
    ) -> Option<T> {
        let now = self.clock.now_ms();
        self.consumers.lock().expect("consumers lock").get_mut(group).map(|c| f(c, now))
    }

    /// Turns consumer group `name` into a classic group if only classic members remain
    /// (an online downgrade). Takes the groups lock, then the consumers lock.
    pub(in crate::domain::group) fn downgrade_if_classic(&self, name: &str) {
        let mut groups = self.groups.lock().expect("groups lock");
        let mut consumers = self.consumers.lock().expect("consumers lock");
        let Some(c) = consumers.get(name) else { return };
        if !c.only_classic_members() {
            return;
        }
        if c.members.len() > self.config.max_members {
            tracing::info!(group = name, "not downgraded: more members than group.max.size");
            return;
        }
        let g = c.downgrade(self.clock.now_ms());
        tracing::info!(
            group = name,
            generation = g.generation,
            members = g.members.len(),
            "consumer group downgraded to classic: only classic members remain"
        );
        consumers.remove(name);
        assert!(
            !groups.contains_key(name),
            "a group id is a classic or a consumer group, not both"
        );
        groups.insert(name.to_string(), g);
    }
}
