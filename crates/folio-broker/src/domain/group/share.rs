//! Share groups' membership (KIP-932): members heartbeat with ShareGroupHeartbeat and the
//! coordinator assigns them partitions with the `simple` assignor. A partition may be
//! assigned to several members (records, not partitions, are what members take, each
//! locked to one member at a time by the partition's owner: `domain::share`), so there is
//! no revocation phase: every heartbeat answers the member's current target. In memory,
//! like the other groups: members join a new coordinator again.
//!
//! The `simple` assignor, per topic over its subscribers ordered by member id: partition
//! `p` goes to subscriber `p mod k`; with more subscribers than partitions, subscriber `j`
//! also shares partition `j mod p`. Every subscriber gets at least one partition, every
//! partition at least one subscriber.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use uuid::Uuid;

use super::Coordinator;
use super::consumer::{HeartbeatAnswer, Partitions, TopicLookup};
use crate::errors;
use crate::limits::{CONSUMER_MEMBER_ID_BYTES_MAX, CONSUMER_SUBSCRIBED_TOPICS_MAX};

/// A member of a share group.
#[derive(Debug, Clone)]
pub struct ShareMember {
    pub id: String,
    pub rack: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub names: Vec<String>,
    pub assigned: Partitions,
    last_seen: u64,
}

/// A share group.
#[derive(Debug, Default)]
pub(crate) struct ShareGroup {
    epoch: i32,
    members: BTreeMap<String, ShareMember>,
    /// Subscribed topics as last seen: name → (id, partitions).
    topics: BTreeMap<String, (Uuid, u32)>,
    target_epoch: i32,
    /// The group's own session timeout, as its last heartbeat read it.
    session_timeout: Option<Duration>,
}

/// A snapshot of a share group (ShareGroupDescribe, ListGroups).
#[derive(Debug, Clone)]
pub struct ShareGroupInfo {
    pub state: &'static str,
    pub epoch: i32,
    pub members: Vec<ShareMember>,
}

/// A ShareGroupHeartbeat, decoded.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    pub group: String,
    pub member_id: String,
    pub epoch: i32,
    pub rack: Option<String>,
    pub names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// The group's `share.session.timeout.ms` and `share.heartbeat.interval.ms` (group
    /// configs), if set.
    pub session_timeout: Option<Duration>,
    pub heartbeat_interval: Option<Duration>,
}

fn simple(
    members: &BTreeMap<String, ShareMember>,
    topics: &BTreeMap<String, (Uuid, u32)>,
) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> =
        members.keys().map(|id| (id.clone(), Partitions::new())).collect();
    for (name, (id, count)) in topics {
        let subs: Vec<&String> =
            members.values().filter(|m| m.names.contains(name)).map(|m| &m.id).collect();
        let (k, n) = (subs.len(), *count as usize);
        if k == 0 || n == 0 {
            continue;
        }
        for p in 0..n {
            out.get_mut(subs[p % k]).expect("a member").entry(*id).or_default().insert(p as i32);
        }
        for (j, m) in subs.iter().enumerate().skip(n) {
            out.get_mut(*m).expect("a member").entry(*id).or_default().insert((j % n) as i32);
        }
    }
    out
}

impl ShareGroup {
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub(super) fn state_name(&self) -> &'static str {
        if self.members.is_empty() { "Empty" } else { "Stable" }
    }

    pub(super) fn info(&self) -> ShareGroupInfo {
        ShareGroupInfo {
            state: self.state_name(),
            epoch: self.epoch,
            members: self.members.values().cloned().collect(),
        }
    }

    fn bump(&mut self) {
        self.epoch = self.epoch.checked_add(1).expect("a share group epoch below i32::MAX");
    }

    /// The membership step of a heartbeat: join (epoch 0), leave (-1: answered at once),
    /// or check the member's epoch. `Err`: the answer, now.
    fn admit(&mut self, h: &ShareHeartbeat, now: u64, max: usize) -> Result<(), HeartbeatAnswer> {
        match h.epoch {
            -1 => {
                if self.members.remove(&h.member_id).is_none() {
                    return Err(HeartbeatAnswer::refused(
                        errors::UNKNOWN_MEMBER_ID,
                        format!("member {} is not in the group", h.member_id),
                    ));
                }
                tracing::info!(group = %h.group, member = %h.member_id, "share group member left");
                self.bump();
                return Err(HeartbeatAnswer {
                    member_id: h.member_id.clone(),
                    epoch: -1,
                    ..Default::default()
                });
            }
            0 => {
                if !self.members.contains_key(&h.member_id) {
                    if self.members.len() >= max {
                        return Err(HeartbeatAnswer::refused(
                            errors::GROUP_MAX_SIZE_REACHED,
                            format!("the group has {max} members"),
                        ));
                    }
                    let m = ShareMember {
                        id: h.member_id.clone(),
                        rack: h.rack.clone(),
                        client_id: h.client_id.clone(),
                        client_host: h.client_host.clone(),
                        epoch: 0,
                        names: Vec::new(),
                        assigned: Partitions::new(),
                        last_seen: now,
                    };
                    self.members.insert(h.member_id.clone(), m);
                    tracing::info!(group = %h.group, member = %h.member_id, "share group member joined");
                    self.bump();
                }
            }
            e => match self.members.get(&h.member_id) {
                None => {
                    return Err(HeartbeatAnswer::refused(
                        errors::UNKNOWN_MEMBER_ID,
                        format!("member {} is not in the group here", h.member_id),
                    ));
                }
                Some(m) if m.epoch != e => {
                    return Err(HeartbeatAnswer::refused(
                        errors::FENCED_MEMBER_EPOCH,
                        format!("epoch {e} is not the member's ({})", m.epoch),
                    ));
                }
                Some(_) => {}
            },
        }
        Ok(())
    }

    fn heartbeat(
        &mut self,
        h: &ShareHeartbeat,
        topics: &dyn TopicLookup,
        now: u64,
        max: usize,
        interval_ms: i32,
    ) -> HeartbeatAnswer {
        if let Err(answer) = self.admit(h, now, max) {
            return answer;
        }
        let m = self.members.get_mut(&h.member_id).expect("joined or checked");
        m.last_seen = now;
        if let Some(names) = &h.names {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            if m.names != names {
                m.names = names;
                self.epoch = self.epoch.checked_add(1).expect("an epoch below i32::MAX");
            }
        }
        let wanted: BTreeSet<&str> =
            self.members.values().flat_map(|m| m.names.iter().map(String::as_str)).collect();
        let now_topics: BTreeMap<String, (Uuid, u32)> = wanted
            .into_iter()
            .filter_map(|n| topics.topic(n).map(|t| (n.to_string(), t)))
            .collect();
        if now_topics != self.topics {
            self.topics = now_topics;
            self.bump();
        }
        if self.epoch > self.target_epoch {
            for (id, ps) in simple(&self.members, &self.topics) {
                if let Some(m) = self.members.get_mut(&id) {
                    m.assigned = ps;
                }
            }
            self.target_epoch = self.epoch;
        }
        let m = self.members.get_mut(&h.member_id).expect("joined or checked");
        let changed = m.epoch != self.epoch || h.epoch == 0;
        m.epoch = self.epoch;
        HeartbeatAnswer {
            error: errors::NONE,
            message: None,
            member_id: m.id.clone(),
            epoch: m.epoch,
            interval_ms,
            assignment: changed.then(|| m.assigned.clone()),
        }
    }
}

impl Coordinator {
    /// A ShareGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1).
    pub fn share_heartbeat(&self, h: &ShareHeartbeat, topics: &dyn TopicLookup) -> HeartbeatAnswer {
        if h.group.is_empty() {
            return HeartbeatAnswer::refused(errors::INVALID_GROUP_ID, "the group id is empty");
        }
        if h.member_id.is_empty() || h.member_id.len() > CONSUMER_MEMBER_ID_BYTES_MAX {
            return HeartbeatAnswer::refused(
                errors::INVALID_REQUEST,
                "a member id is empty or above its limit",
            );
        }
        if h.names.as_ref().is_some_and(|n| n.len() > CONSUMER_SUBSCRIBED_TOPICS_MAX) {
            return HeartbeatAnswer::refused(
                errors::INVALID_REQUEST,
                "a subscription above its limit",
            );
        }
        if h.epoch == 0 && h.names.as_ref().is_none_or(|n| n.is_empty()) {
            return HeartbeatAnswer::refused(
                errors::INVALID_REQUEST,
                "a join subscribes to no topic",
            );
        }
        if h.epoch < -1 {
            return HeartbeatAnswer::refused(
                errors::INVALID_REQUEST,
                "a share member epoch below -1",
            );
        }
        let now = self.clock.now_ms();
        let groups = self.groups.lock().expect("groups lock");
        let other = groups.contains_key(&h.group)
            || self.consumers.lock().expect("consumers lock").contains_key(&h.group);
        let known = self.shares.lock().expect("shares lock").contains_key(&h.group);
        if !known {
            if h.epoch != 0 {
                return HeartbeatAnswer::refused(
                    errors::UNKNOWN_MEMBER_ID,
                    "the share group has no such member here",
                );
            }
            if other {
                return HeartbeatAnswer::refused(
                    errors::INCONSISTENT_GROUP_PROTOCOL,
                    "the group id is a consumer group's",
                );
            }
            if !self.room_for_group(&groups, &h.group) {
                return HeartbeatAnswer::refused(
                    errors::POLICY_VIOLATION,
                    "this coordinator holds groups_max groups",
                );
            }
        }
        let mut shares = self.shares.lock().expect("shares lock");
        if !shares.contains_key(&h.group) {
            shares.insert(h.group.clone(), ShareGroup::default());
            tracing::info!(group = %h.group, "share group created");
        }
        let g = shares.get_mut(&h.group).expect("created above");
        g.session_timeout = h.session_timeout;
        let interval = h.heartbeat_interval.unwrap_or(self.config.shares.heartbeat_interval);
        let interval = interval.as_millis() as i32;
        g.heartbeat(h, topics, now, self.config.max_members, interval)
    }

    /// Removes share-group members whose session ended.
    pub(super) fn expire_share_members(&self) {
        let now = self.clock.now_ms();
        let default = self.config.shares.session_timeout;
        let mut shares = self.shares.lock().expect("shares lock");
        for (name, g) in shares.iter_mut() {
            let timeout = g.session_timeout.unwrap_or(default).as_millis() as u64;
            let gone: Vec<String> = g
                .members
                .values()
                .filter(|m| m.last_seen + timeout < now)
                .map(|m| m.id.clone())
                .collect();
            for id in gone {
                g.members.remove(&id);
                tracing::info!(group = %name, member = %id, "share group member's session expired");
                g.bump();
            }
        }
    }

    /// A snapshot of the share group, if this coordinator has it.
    pub fn describe_share(&self, group: &str) -> Option<ShareGroupInfo> {
        self.shares.lock().expect("shares lock").get(group).map(ShareGroup::info)
    }
}

/// Where a new share group starts reading a partition (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    Earliest,
    Latest,
}

/// Share groups' settings (Kafka's names).
#[derive(Debug, Clone)]
pub struct ShareConfig {
    /// `group.share.record.lock.duration.ms`: how long an acquired record stays locked
    /// to its member. 30 s.
    pub lock_duration: Duration,
    /// `group.share.delivery.count.limit`: deliveries before a record is archived. 5.
    pub delivery_count_limit: u16,
    /// `group.share.partition.max.record.locks`: offsets in flight per share-partition. 2000.
    pub record_locks_max: usize,
    /// `share.auto.offset.reset` of groups that set none. latest.
    pub auto_offset_reset: Reset,
    /// `group.share.max.share.sessions`: share sessions per broker. 2000.
    pub share_sessions_max: usize,
    /// A session idle this long may be dropped to make room for another. 2 minutes.
    pub share_session_idle: Duration,
    /// `group.share.session.timeout.ms`: a member not heard from is removed. 45 s.
    pub session_timeout: Duration,
    /// `group.share.heartbeat.interval.ms`. 5 s.
    pub heartbeat_interval: Duration,
}

impl Default for ShareConfig {
    fn default() -> Self {
        ShareConfig {
            lock_duration: Duration::from_secs(30),
            delivery_count_limit: 5,
            record_locks_max: 2000,
            auto_offset_reset: Reset::Latest,
            share_sessions_max: 2000,
            share_session_idle: Duration::from_secs(120),
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, names: &[&str]) -> ShareMember {
        ShareMember {
            id: id.into(),
            rack: None,
            client_id: String::new(),
            client_host: String::new(),
            epoch: 0,
            names: names.iter().map(|n| n.to_string()).collect(),
            assigned: Partitions::new(),
            last_seen: 0,
        }
    }

    #[test]
    fn simple_gives_every_partition_a_member_and_every_member_a_partition() {
        let t = Uuid::from_u128(1);
        let topics: BTreeMap<String, (Uuid, u32)> = [("t".to_string(), (t, 3))].into();
        let members: BTreeMap<String, ShareMember> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|id| (id.to_string(), member(id, &["t"])))
            .collect();
        let out = simple(&members, &topics);
        let mut covered = BTreeSet::new();
        for (id, ps) in &out {
            assert!(!ps.is_empty(), "{id} got nothing");
            covered.extend(ps[&t].iter().copied());
        }
        assert_eq!(covered, [0, 1, 2].into());
        // Two members, three partitions: each partition once.
        let two: BTreeMap<String, ShareMember> =
            ["a", "b"].iter().map(|id| (id.to_string(), member(id, &["t"]))).collect();
        let out = simple(&two, &topics);
        assert_eq!(out["a"][&t].len() + out["b"][&t].len(), 3);
    }
}
