//! The classic group membership protocol on the coordinator: JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup and the member check of offset commits, with the rebalance state
//! machine they drive (`GroupState`; every transition through `Group::enter`).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{
    Coordinator, Group, GroupState, JoinRequest, JoinResult, Member, SyncResult, TopicLookup,
    fenced, leaver,
};
use crate::errors;

impl Coordinator {
    /// JoinGroup: adds or refreshes the member, starts a rebalance if needed and answers
    /// when the join phase ends. A consumer group with members answers a classic member
    /// at once (`consumer::classic`); `topics` maps its subscription to topic ids.
    pub async fn join(&self, j: JoinRequest<'_>, topics: &dyn TopicLookup) -> JoinResult {
        let JoinRequest { group: group_id, client_id, member_id, instance_id, .. } = j;
        let fail =
            |error| JoinResult { error, member_id: member_id.to_string(), ..JoinResult::default() };
        if let Some(code) =
            self.join_invalid(group_id, j.protocol_type, &j.protocols, j.session_timeout)
        {
            return fail(code);
        }
        let now = self.clock.now_ms();
        let rx = {
            let mut groups = self.groups.lock().expect("groups lock");
            if let Some(answer) = self.join_consumer_group(&j, topics) {
                drop(groups);
                // A classic static member may have replaced the last consumer-protocol one.
                self.downgrade_if_classic(group_id);
                return answer;
            }
            self.classic_takes_over(group_id);
            if !groups.contains_key(group_id) && !self.room_for_group(&groups, group_id) {
                return fail(errors::POLICY_VIOLATION);
            }
            let g = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(now));
            if g.state == GroupState::Dead {
                *g = Group::new(now);
            }
            if let Some(code) = protocols_refused(g, member_id, j.protocol_type, &j.protocols) {
                return fail(code);
            }
            // A static member is known by its instance id; a known member id must match it.
            let known = instance_id.and_then(|i| g.statics.get(i).cloned());
            if !member_id.is_empty()
                && let Some(code) = fenced(g, member_id, instance_id)
            {
                return fail(code);
            }
            let id = if member_id.is_empty() {
                if known.is_none() && g.members.len() >= self.config.max_members {
                    return fail(errors::GROUP_MAX_SIZE_REACHED);
                }
                new_member_id(client_id)
            } else if !g.members.contains_key(member_id) {
                return fail(errors::UNKNOWN_MEMBER_ID);
            } else {
                member_id.to_string()
            };
            g.protocol_type = Some(j.protocol_type.to_string());
            let replaced = known
                .filter(|_| member_id.is_empty())
                .and_then(|old| g.take_static_place(group_id, &old, &id));
            let assignment = replaced.clone().unwrap_or_else(|| {
                g.members.get(&id).map(|m| m.assignment.clone()).unwrap_or_default()
            });
            if let Some(i) = instance_id {
                g.statics.insert(i.to_string(), id.clone());
            }
            let instance_id = instance_id.map(str::to_string);
            let member = Member {
                id: id.clone(),
                session_timeout: j.session_timeout,
                rebalance_timeout: j.rebalance_timeout,
                protocols: j.protocols,
                assignment,
                instance_id,
                last_seen: now,
            };
            g.members.insert(id.clone(), member);
            if replaced.is_some()
                && let Some(answer) = g.stable_rejoin(&id)
            {
                return answer;
            }
            let (tx, rx) = oneshot::channel();
            if let Some(old) = g.joins.insert(id.clone(), tx) {
                // A repeated join replaces the earlier one.
                let _ = old.send(JoinResult {
                    error: errors::REBALANCE_IN_PROGRESS,
                    member_id: id.clone(),
                    ..JoinResult::default()
                });
            }
            if g.state != GroupState::PreparingRebalance {
                let delay = if g.state == GroupState::Empty {
                    self.config.initial_rebalance_delay
                } else {
                    Duration::ZERO
                };
                prepare_rebalance(g, now, delay);
            }
            (rx, join_phase_over(g, now))
        };
        let (rx, over) = rx;
        if over {
            self.complete_join(group_id).await;
        }
        rx.await.unwrap_or_else(|_| fail(errors::REBALANCE_IN_PROGRESS))
    }

    /// Why a JoinGroup is refused before its group is looked at, if it is.
    fn join_invalid(
        &self,
        group_id: &str,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
        session_timeout: Duration,
    ) -> Option<i16> {
        if group_id.is_empty() {
            return Some(errors::INVALID_GROUP_ID);
        }
        if session_timeout < self.config.min_session_timeout
            || session_timeout > self.config.max_session_timeout
        {
            return Some(errors::INVALID_SESSION_TIMEOUT);
        }
        if protocols.is_empty() || protocol_type.is_empty() {
            return Some(errors::INCONSISTENT_GROUP_PROTOCOL);
        }
        None
    }

    /// SyncGroup: the leader hands out assignments; every member gets its own when the leader's
    /// arrives.
    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        let fail = |error| SyncResult { error, ..SyncResult::default() };
        let rx = {
            let mut groups = self.groups.lock().expect("groups lock");
            if let Some(answer) = self.in_consumer_group(group_id, |c, now| {
                c.classic_sync(member_id, instance_id, generation, now)
            }) {
                return answer;
            }
            let Some(g) = groups.get_mut(group_id) else {
                return fail(errors::UNKNOWN_MEMBER_ID);
            };
            if let Some(code) = fenced(g, member_id, instance_id) {
                return fail(code);
            }
            let Some(m) = g.members.get_mut(member_id) else {
                return fail(errors::UNKNOWN_MEMBER_ID);
            };
            m.last_seen = self.clock.now_ms();
            if generation != g.generation {
                return fail(errors::ILLEGAL_GENERATION);
            }
            match g.state {
                GroupState::PreparingRebalance | GroupState::Empty | GroupState::Dead => {
                    return fail(errors::REBALANCE_IN_PROGRESS);
                }
                GroupState::Stable => {
                    let a = g.members[member_id].assignment.clone();
                    return SyncResult {
                        error: 0,
                        protocol_type: g.protocol_type.clone(),
                        protocol: g.protocol.clone(),
                        assignment: a,
                    };
                }
                GroupState::CompletingRebalance => {}
            }
            let (tx, rx) = oneshot::channel();
            g.syncs.insert(member_id.to_string(), tx);
            if g.leader.as_deref() == Some(member_id) {
                let given: HashMap<String, Bytes> = assignments.into_iter().collect();
                for m in g.members.values_mut() {
                    m.assignment = given.get(&m.id).cloned().unwrap_or_default();
                }
                g.enter(GroupState::Stable);
                tracing::info!(
                    group = group_id,
                    generation = g.generation,
                    members = g.members.len(),
                    "group stable"
                );
                for (id, tx) in std::mem::take(&mut g.syncs) {
                    let assignment =
                        g.members.get(&id).map(|m| m.assignment.clone()).unwrap_or_default();
                    let _ = tx.send(SyncResult {
                        error: 0,
                        protocol_type: g.protocol_type.clone(),
                        protocol: g.protocol.clone(),
                        assignment,
                    });
                }
            }
            rx
        };
        rx.await.unwrap_or_else(|_| fail(errors::REBALANCE_IN_PROGRESS))
    }

    /// Heartbeat: keeps the member's session, and says whether a rebalance needs it to rejoin.
    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> i16 {
        let mut groups = self.groups.lock().expect("groups lock");
        if let Some(code) = self.in_consumer_group(group_id, |c, now| {
            c.classic_heartbeat(member_id, instance_id, generation, now)
        }) {
            return code;
        }
        let Some(g) = groups.get_mut(group_id) else {
            return errors::UNKNOWN_MEMBER_ID;
        };
        if let Some(code) = fenced(g, member_id, instance_id) {
            return code;
        }
        let Some(m) = g.members.get_mut(member_id) else {
            return errors::UNKNOWN_MEMBER_ID;
        };
        m.last_seen = self.clock.now_ms();
        if g.state == GroupState::PreparingRebalance {
            return errors::REBALANCE_IN_PROGRESS;
        }
        if generation != g.generation {
            return errors::ILLEGAL_GENERATION;
        }
        errors::NONE
    }

    /// Removes members, each named by member id or by instance id (a static member; with
    /// both they must agree); returns an error code per member.
    pub async fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Vec<i16> {
        let consumer = {
            let _groups = self.groups.lock().expect("groups lock");
            self.in_consumer_group(group_id, |c, now| c.classic_leave(group_id, members, now))
        };
        if let Some(codes) = consumer {
            self.downgrade_if_classic(group_id);
            return codes;
        }
        let (codes, over) = self.leave_members(group_id, members);
        if over {
            self.complete_join(group_id).await;
        }
        codes
    }

    /// `leave` under the groups lock: the codes, and whether the join phase is over now.
    fn leave_members(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> (Vec<i16>, bool) {
        let mut groups = self.groups.lock().expect("groups lock");
        let now = self.clock.now_ms();
        let Some(g) = groups.get_mut(group_id) else {
            return (vec![errors::UNKNOWN_MEMBER_ID; members.len()], false);
        };
        let codes = members
            .iter()
            .map(|(id, instance)| {
                let id = match leaver(&g.statics, id, instance.as_deref()) {
                    Ok(id) => id,
                    Err(code) => return code,
                };
                let id = &id;
                if g.members.contains_key(id) {
                    tracing::info!(group = group_id, member = %id, "member left");
                    remove_member(g, id, now);
                    errors::NONE
                } else {
                    errors::UNKNOWN_MEMBER_ID
                }
            })
            .collect();
        (codes, join_phase_over(g, now))
    }

    /// Ends `name`'s join phase if it is over: the next generation is claimed in the
    /// metadata store first (`claim_generation`), then the group completes with it. A
    /// claim that fails leaves the phase open (the members' joins wait); the next tick
    /// tries again. A group forgotten, deleted or begun again meanwhile is left alone.
    pub(super) async fn complete_join(&self, name: &str) {
        let (token, known) = {
            let mut groups = self.groups.lock().expect("groups lock");
            let Some(g) = groups.get_mut(name) else { return };
            if !join_phase_over(g, self.clock.now_ms()) {
                return;
            }
            let token = self.completions.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            g.claiming = Some(token);
            (token, g.generation)
        };
        let tenure = self.tenure();
        let claimed = self.claim_generation(name, known, tenure).await;
        let mut groups = self.groups.lock().expect("groups lock");
        let Some(g) = groups.get_mut(name).filter(|g| g.claiming == Some(token)) else {
            return;
        };
        g.claiming = None;
        match claimed {
            Ok(claim) if g.state == GroupState::PreparingRebalance => {
                assert!(claim.generation > g.generation, "a claimed generation goes forward");
                finish_join(name, g, self.clock.now_ms(), claim.generation);
                self.claims.lock().expect("claims lock").insert(name.to_string(), claim);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(
                group = name,
                error = %e,
                "a rebalance could not claim its next generation; trying again"
            ),
        }
    }

    /// A JoinGroup of an empty consumer-protocol group (under the groups lock): it becomes
    /// classic (Kafka's offline conversion).
    fn classic_takes_over(&self, group_id: &str) {
        let mut consumers = self.consumers.lock().expect("consumers lock");
        if consumers.get(group_id).is_some_and(|c| c.is_empty()) {
            consumers.remove(group_id);
            tracing::info!(group = group_id, "empty consumer group becomes classic");
        }
    }

    /// OffsetFetch v9's check of the member asking (Kafka's `validateOffsetFetch`): none
    /// named (no member id, epoch < 0) passes; in a consumer group the member must be there
    /// at that epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for a
    /// classic member); a classic group, or none, checks nothing.
    pub fn check_fetch(&self, group_id: &str, member_id: Option<&str>, epoch: i32) -> i16 {
        let Some(member) = member_id.filter(|_| epoch >= 0) else {
            return errors::NONE;
        };
        let consumers = self.consumers.lock().expect("consumers lock");
        consumers.get(group_id).map_or(errors::NONE, |c| c.check_commit(epoch, member))
    }

    /// Checks that an offset commit comes from a current member (or from outside the group
    /// protocol: generation -1 and no member id, on a group with no members). As in Kafka,
    /// members may commit while a rebalance is being prepared (before they rejoin), not
    /// while it completes.
    pub fn check_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> i16 {
        let mut groups = self.groups.lock().expect("groups lock");
        if let Some(c) = self.consumers.lock().expect("consumers lock").get(group_id) {
            return c.check_commit(generation, member_id);
        }
        let Some(g) = groups.get_mut(group_id) else {
            return if generation < 0 { errors::NONE } else { errors::ILLEGAL_GENERATION };
        };
        if let Some(code) = fenced(g, member_id, instance_id) {
            return code;
        }
        if generation < 0 && member_id.is_empty() {
            return if g.members.is_empty() { errors::NONE } else { errors::UNKNOWN_MEMBER_ID };
        }
        let Some(m) = g.members.get_mut(member_id) else {
            return errors::UNKNOWN_MEMBER_ID;
        };
        m.last_seen = self.clock.now_ms();
        if g.state == GroupState::CompletingRebalance {
            return errors::REBALANCE_IN_PROGRESS;
        }
        if generation != g.generation {
            return errors::ILLEGAL_GENERATION;
        }
        errors::NONE
    }
}

/// A new member's id in Kafka's form, `<client.id>-<uuid>`: client-side assignors order
/// members by id, so members order by their client ids (librdkafka 0132).
pub(super) fn new_member_id(client_id: &str) -> String {
    let prefix = if client_id.is_empty() { "member" } else { client_id };
    format!("{prefix}-{}", Uuid::from_bytes(folio_rt::random()).hyphenated())
}

pub(super) fn prepare_rebalance(g: &mut Group, now: u64, delay: Duration) {
    g.enter(GroupState::PreparingRebalance);
    g.rebalances += 1;
    let timeout = g.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
    g.not_before = now + delay.as_millis() as u64;
    g.deadline = now + timeout.max(delay).as_millis() as u64;
    // Members waiting in SyncGroup must rejoin.
    for (_, tx) in std::mem::take(&mut g.syncs) {
        let _ =
            tx.send(SyncResult { error: errors::REBALANCE_IN_PROGRESS, ..SyncResult::default() });
    }
}

/// INCONSISTENT_GROUP_PROTOCOL unless the joining member speaks the group's protocol type
/// and one of its protocols is supported by every other member.
pub(super) fn protocols_refused(
    g: &Group,
    member_id: &str,
    protocol_type: &str,
    protocols: &[(String, Bytes)],
) -> Option<i16> {
    if g.members.is_empty() {
        return None;
    }
    let shared = protocols.iter().any(|(p, _)| {
        g.members
            .values()
            .filter(|m| m.id != member_id)
            .all(|m| m.protocols.iter().any(|(q, _)| q == p))
    });
    let same_type = g.protocol_type.as_deref() == Some(protocol_type);
    (!same_type || !shared).then_some(errors::INCONSISTENT_GROUP_PROTOCOL)
}

/// Each member's id and metadata for `protocol` (what the leader's JoinGroup answer lists).
pub(super) fn members_of(g: &Group, protocol: &str) -> Vec<(String, Bytes)> {
    g.members
        .values()
        .map(|m| {
            let meta = m
                .protocols
                .iter()
                .find(|(p, _)| p == protocol)
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            (m.id.clone(), meta)
        })
        .collect()
}

pub(super) fn remove_member(g: &mut Group, id: &str, now: u64) {
    g.members.remove(id);
    g.statics.retain(|_, m| m != id);
    if let Some(tx) = g.joins.remove(id) {
        let _ = tx.send(JoinResult { error: errors::UNKNOWN_MEMBER_ID, ..JoinResult::default() });
    }
    if let Some(tx) = g.syncs.remove(id) {
        let _ = tx.send(SyncResult { error: errors::UNKNOWN_MEMBER_ID, ..SyncResult::default() });
    }
    if g.leader.as_deref() == Some(id) {
        g.leader = None;
    }
    if g.state != GroupState::PreparingRebalance {
        prepare_rebalance(g, now, Duration::ZERO);
    }
}

/// Whether the join phase is over (and its generation not being claimed already): every
/// member rejoined (after the initial delay) or the rebalance timeout has passed.
pub(super) fn join_phase_over(g: &Group, now: u64) -> bool {
    if g.state != GroupState::PreparingRebalance || g.claiming.is_some() {
        return false;
    }
    let all_joined = g.members.keys().all(|id| g.joins.contains_key(id));
    (all_joined && now >= g.not_before) || now >= g.deadline
}

/// Ends the join phase with `generation` (claimed): a leader and a protocol, or an empty
/// group.
fn finish_join(name: &str, g: &mut Group, now: u64, generation: i32) {
    // Who did not rejoin is out.
    let gone: Vec<String> =
        g.members.keys().filter(|id| !g.joins.contains_key(*id)).cloned().collect();
    for id in gone {
        g.members.remove(&id);
        g.statics.retain(|_, m| *m != id);
    }
    g.generation = generation;
    if g.members.is_empty() {
        g.empty_since = now;
        g.leader = None;
        g.protocol = None;
        g.enter(GroupState::Empty);
        tracing::info!(group = name, generation = g.generation, "group empty");
        return;
    }
    if g.leader.as_ref().is_none_or(|l| !g.members.contains_key(l)) {
        g.leader = g.members.keys().next().cloned();
    }
    let leader = g.leader.clone().expect("a member leads");
    let protocol = chosen_protocol(g, &leader);
    g.protocol = Some(protocol.clone());
    g.enter(GroupState::CompletingRebalance);
    tracing::info!(group = name, generation = g.generation, members = g.members.len(), %leader, %protocol, "rebalance: new generation");
    let members = members_of(g, &protocol);
    for (id, tx) in std::mem::take(&mut g.joins) {
        let _ = tx.send(JoinResult {
            error: 0,
            generation: g.generation,
            protocol_type: g.protocol_type.clone(),
            protocol: Some(protocol.clone()),
            leader: leader.clone(),
            members: if id == leader { members.clone() } else { Vec::new() },
            member_id: id,
        });
    }
}

/// The group's protocol: the leader's most preferred one that every member supports (else
/// the leader's first).
pub(super) fn chosen_protocol(g: &Group, leader: &str) -> String {
    let ours = &g.members[leader].protocols;
    ours.iter()
        .map(|(p, _)| p.clone())
        .find(|p| g.members.values().all(|m| m.protocols.iter().any(|(q, _)| q == p)))
        .unwrap_or_else(|| ours[0].0.clone())
}
