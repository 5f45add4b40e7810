//! Consumer groups of the consumer protocol (KIP-848): members heartbeat with
//! ConsumerGroupHeartbeat, the coordinator assigns partitions (`assign.rs`) and moves each
//! member to its target one step at a time, revoking before assigning (`reconcile.rs`).
//! A rebalance never stops the group: members that keep their partitions keep consuming.
//!
//! ## Epochs
//! - The **group epoch** goes up when a member joins, leaves or is fenced, when a
//!   subscription (names, regex, assignor) changes, and when a subscribed topic's partition
//!   count changes or a topic appears or goes.
//! - The **target** (every member's partitions) is computed again when the group epoch
//!   passed the target's epoch (at the next heartbeat).
//! - A **member epoch** reaches the target epoch once the member gave up what it must
//!   revoke. Heartbeats and offset commits carry it: a heartbeat at another epoch gets
//!   FENCED_MEMBER_EPOCH (the member rejoins at 0), a commit STALE_MEMBER_EPOCH.
//!
//! ## Members leave
//! By a heartbeat at epoch -1; static members (`group.instance.id`) by epoch -2, which keeps
//! their partitions for them until their session ends, and a member joining under the
//! same instance id takes them over. A member is fenced (removed) when its session
//! timeout passes without a heartbeat, or when it holds partitions it was told to revoke
//! for longer than its rebalance timeout (`max.poll.interval.ms`).
//!
//! ## State
//! In memory, like classic groups: when the coordinator moves, members heartbeat the new
//! one, are told UNKNOWN_MEMBER_ID and join again. A group's claim (`claim.rs`) is taken
//! when the group is created here, so commits of members of an old coordinator can never
//! be written after the move. A classic group with no members becomes a consumer group at
//! the first consumer-protocol join, and an empty consumer group a classic one at the first
//! JoinGroup (Kafka's offline conversion). A classic group with members is upgraded
//! online, and a consumer group left with classic members only downgraded (`classic.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use uuid::Uuid;

pub use assign::{Assignor, Partitions};
use assign::{Subscriber, assign};
pub use classic::ClassicMeta;
pub use reconcile::MemberState;

use super::Coordinator;
pub use super::TopicLookup;
use crate::errors;
use crate::limits::{
    CONSUMER_MEMBER_ID_BYTES_MAX, CONSUMER_RACK_ID_BYTES_MAX, CONSUMER_REGEX_BYTES_MAX,
    CONSUMER_REGEX_PROGRAM_BYTES_MAX, CONSUMER_REGEX_REFRESH, CONSUMER_SUBSCRIBED_TOPICS_MAX,
    GROUP_INSTANCE_ID_BYTES_MAX,
};

mod assign;
mod classic;
pub mod embedded;
mod reconcile;
#[cfg(test)]
mod tests;

/// A ConsumerGroupHeartbeat, decoded (`None`: unchanged since the last one).
#[derive(Debug, Clone, Default)]
pub struct HeartbeatArgs {
    pub group: String,
    pub member_id: String,
    pub epoch: i32,
    pub instance_id: Option<String>,
    pub rack: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub names: Option<Vec<String>>,
    pub regex: Option<String>,
    pub assignor: Option<String>,
    /// The partitions the member owns now.
    pub owned: Option<Partitions>,
    pub client_id: String,
    pub client_host: String,
    /// The request's version: v0 lets the coordinator choose a member id.
    pub version: i16,
    /// The group's `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
    /// (group configs), if set: they replace the broker's for this group.
    pub session_timeout: Option<Duration>,
    pub heartbeat_interval: Option<Duration>,
}

/// A ConsumerGroupHeartbeat's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: String,
    pub epoch: i32,
    pub interval_ms: i32,
    /// The member's partitions, when they changed or the request was a full one.
    pub assignment: Option<Partitions>,
}

impl HeartbeatAnswer {
    pub(in crate::domain::group) fn refused(
        error: i16,
        message: impl Into<String>,
    ) -> HeartbeatAnswer {
        HeartbeatAnswer { error, message: Some(message.into()), ..HeartbeatAnswer::default() }
    }
}

/// A member of a consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Its epoch (-2: a static member that left, its partitions kept for it).
    pub epoch: i32,
    previous_epoch: i32,
    pub state: MemberState,
    pub names: Vec<String>,
    pub regex: Option<String>,
    pub assignor: Option<Assignor>,
    pub rebalance_timeout: Duration,
    pub assigned: Partitions,
    pub revoking: Partitions,
    /// What the last answer told it.
    sent: Option<Partitions>,
    last_seen: u64,
    /// While it must revoke (a classic member: rejoin): fenced if it still has not at this
    /// time (clock ms).
    revoke_deadline: Option<u64>,
    /// A member speaking the classic protocol (JoinGroup, SyncGroup, Heartbeat): its
    /// protocols and session timeout.
    pub classic: Option<ClassicMeta>,
}

impl ConsumerMember {
    /// A member at `epoch` owning nothing yet, subscribed to nothing, heard from `now`.
    fn new(id: &str, instance_id: Option<String>, epoch: i32, now: u64) -> ConsumerMember {
        ConsumerMember {
            id: id.to_string(),
            instance_id,
            rack: None,
            client_id: String::new(),
            client_host: String::new(),
            epoch,
            previous_epoch: epoch,
            state: MemberState::Stable,
            names: Vec::new(),
            regex: None,
            assignor: None,
            rebalance_timeout: Duration::ZERO,
            assigned: Partitions::new(),
            revoking: Partitions::new(),
            sent: None,
            last_seen: now,
            revoke_deadline: None,
            classic: None,
        }
    }
}

/// A subscription regex of a group: compiled, and the topic names it matched.
#[derive(Debug, Clone)]
struct Resolved {
    regex: regex::Regex,
    names: BTreeSet<String>,
    /// When (clock ms) it was last matched against the topics; `None`: not yet.
    at: Option<u64>,
    /// Added by the heartbeat being answered: matched at the next one (as Kafka resolves
    /// regexes in the background, a member's named topics are assigned first).
    fresh: bool,
}

/// A consumer-protocol group.
#[derive(Debug)]
pub(crate) struct ConsumerGroup {
    epoch: i32,
    target_epoch: i32,
    target: BTreeMap<String, Partitions>,
    members: BTreeMap<String, ConsumerMember>,
    /// Static members: instance id → member id.
    statics: BTreeMap<String, String>,
    /// Who holds each partition (assigned or revoking).
    owners: HashMap<(Uuid, i32), String>,
    /// The subscribed topics as last seen: name → (id, partitions).
    topics: BTreeMap<String, (Uuid, u32)>,
    regexes: BTreeMap<String, Resolved>,
    /// The assignor of the current target.
    assignor: Assignor,
    /// The generation of the group's claim: commits are written under it.
    pub(super) claimed: i32,
    /// When (clock ms) it last became empty.
    pub(super) empty_since: u64,
    /// The group's own session timeout (`consumer.session.timeout.ms`), as its last
    /// heartbeat read it.
    session_timeout: Option<Duration>,
}

/// What the coordinator's consumer-protocol settings are (`GroupConfig`'s).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub heartbeat_interval: Duration,
    pub default_assignor: Assignor,
    pub max_members: usize,
}

/// A snapshot of a member, for ConsumerGroupDescribe.
#[derive(Debug, Clone)]
pub struct ConsumerMemberInfo {
    pub member: ConsumerMember,
    pub target: Partitions,
}

/// A snapshot of a consumer group, for ConsumerGroupDescribe, ListGroups and metrics.
#[derive(Debug, Clone)]
pub struct ConsumerGroupInfo {
    pub state: &'static str,
    pub epoch: i32,
    pub target_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ConsumerMemberInfo>,
}

impl ConsumerGroup {
    pub(super) fn new(claimed: i32, now: u64, assignor: Assignor) -> ConsumerGroup {
        ConsumerGroup {
            epoch: claimed,
            target_epoch: claimed,
            target: BTreeMap::new(),
            members: BTreeMap::new(),
            statics: BTreeMap::new(),
            owners: HashMap::new(),
            topics: BTreeMap::new(),
            regexes: BTreeMap::new(),
            assignor,
            claimed,
            empty_since: now,
            session_timeout: None,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The topic names its members subscribe to (by name or regex).
    pub(super) fn subscribed_names(&self) -> BTreeSet<String> {
        self.topics.keys().cloned().collect()
    }

    /// Kafka's state name: Empty, Assigning, Reconciling or Stable.
    pub(super) fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.target_epoch < self.epoch {
            "Assigning"
        } else if self.members.values().any(|m| {
            m.epoch != -2 && (m.epoch != self.target_epoch || m.state != MemberState::Stable)
        }) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub(super) fn info(&self) -> ConsumerGroupInfo {
        ConsumerGroupInfo {
            state: self.state_name(),
            epoch: self.epoch,
            target_epoch: self.target_epoch,
            assignor: self.assignor.name(),
            members: self
                .members
                .values()
                .map(|m| ConsumerMemberInfo {
                    member: m.clone(),
                    target: self.target.get(&m.id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    fn bump(&mut self, why: &str, group: &str) {
        self.epoch = self.epoch.checked_add(1).expect("a group epoch below i32::MAX");
        tracing::debug!(group, epoch = self.epoch, why, "consumer group epoch bumped");
    }

    /// Sets a member's partitions (and who holds what), asserting that no partition is
    /// held by two members.
    fn place(&mut self, id: &str, assigned: Partitions, revoking: Partitions) {
        let m = self.members.get_mut(id).expect("a member being placed exists");
        for (t, ps) in m.assigned.iter().chain(m.revoking.iter()) {
            for p in ps {
                if self.owners.get(&(*t, *p)).is_some_and(|o| o == id) {
                    self.owners.remove(&(*t, *p));
                }
            }
        }
        for (t, ps) in assigned.iter().chain(revoking.iter()) {
            for p in ps {
                let was = self.owners.insert((*t, *p), id.to_string());
                assert!(
                    was.is_none_or(|o| o == id),
                    "partition {t}/{p} given to member {id} while another holds it"
                );
            }
        }
        m.assigned = assigned;
        m.revoking = revoking;
    }

    /// Removes a member (left or fenced): its partitions are free, the epoch goes up.
    pub(super) fn remove(&mut self, id: &str, now: u64, why: &str, group: &str) {
        if !self.members.contains_key(id) {
            return;
        }
        self.place(id, Partitions::new(), Partitions::new());
        let m = self.members.remove(id).expect("checked above");
        if let Some(i) = &m.instance_id
            && self.statics.get(i).is_some_and(|held| *held == m.id)
        {
            self.statics.remove(i);
        }
        self.target.remove(id);
        tracing::info!(group, member = id, why, "consumer group member removed");
        self.bump(why, group);
        if self.members.is_empty() {
            self.empty_since = now;
            self.regexes.clear();
            self.topics.clear();
        }
    }

    /// Member `id` takes the place of static member `held` of `instance`: its partitions,
    /// target and epoch (the one before it left, if it left).
    fn take_static_place(&mut self, group: &str, instance: &str, held: &str, id: &str) {
        let mut m = self.members.remove(held).expect("a static member exists");
        let target = self.target.remove(held);
        for (t, ps) in m.assigned.iter().chain(m.revoking.iter()) {
            for p in ps {
                self.owners.insert((*t, *p), id.to_string());
            }
        }
        m.id = id.to_string();
        if m.epoch == -2 {
            m.epoch = m.previous_epoch;
        }
        m.sent = None;
        self.statics.insert(instance.to_string(), id.to_string());
        if let Some(t) = target {
            self.target.insert(id.to_string(), t);
        }
        self.members.insert(id.to_string(), m);
        tracing::info!(group, member = id, instance, old = held, "static member came back");
    }

    /// Members whose session ended, or that held revoked partitions past their rebalance
    /// timeout: (member id, why).
    pub(super) fn expired(&self, now: u64, session: Duration) -> Vec<(String, &'static str)> {
        let session = self.session_timeout.unwrap_or(session).as_millis() as u64;
        self.members
            .values()
            .filter_map(|m| {
                let session =
                    m.classic.as_ref().map_or(session, |c| c.session_timeout.as_millis() as u64);
                if m.last_seen.saturating_add(session) < now {
                    Some((m.id.clone(), "session timeout"))
                } else if m.revoke_deadline.is_some_and(|d| d < now) {
                    Some((m.id.clone(), "no revocation (or rejoin) within its rebalance timeout"))
                } else {
                    None
                }
            })
            .collect()
    }
}

/// The checks that need no group: ids, lengths, the epoch's rules, the assignor and the
/// regex (compiled here, so a bad one is refused before anything changes).
fn validate(a: &HeartbeatArgs) -> Result<Option<regex::Regex>, HeartbeatAnswer> {
    let invalid = |m: &str| Err(HeartbeatAnswer::refused(errors::INVALID_REQUEST, m));
    if a.group.is_empty() {
        return Err(HeartbeatAnswer::refused(errors::INVALID_GROUP_ID, "the group id is empty"));
    }
    if a.member_id.is_empty() && (a.version >= 1 || a.epoch != 0) {
        return invalid("the member id is empty");
    }
    if a.member_id.len() > CONSUMER_MEMBER_ID_BYTES_MAX
        || a.instance_id.as_ref().is_some_and(|i| i.len() > GROUP_INSTANCE_ID_BYTES_MAX)
        || a.rack.as_ref().is_some_and(|r| r.len() > CONSUMER_RACK_ID_BYTES_MAX)
        || a.names.as_ref().is_some_and(|n| n.len() > CONSUMER_SUBSCRIBED_TOPICS_MAX)
    {
        return invalid("a member id, instance id, rack id or subscription above its limit");
    }
    if a.instance_id.as_ref().is_some_and(String::is_empty)
        || a.rack.as_ref().is_some_and(String::is_empty)
    {
        return invalid("an empty instance id or rack id");
    }
    match a.epoch {
        0 if a.rebalance_timeout_ms == -1 => return invalid("a join without a rebalance timeout"),
        0 if a.names.is_none() && a.regex.is_none() => {
            return invalid("a join subscribes to neither topic names nor a regex");
        }
        -2 if a.instance_id.is_none() => return invalid("a static leave without an instance id"),
        e if e < -2 => return invalid("a member epoch below -2"),
        _ => {}
    }
    if let Some(name) = &a.assignor
        && Assignor::parse(name).is_none()
    {
        let m = format!("assignor {name:?} is not one of uniform, range");
        return Err(HeartbeatAnswer::refused(errors::UNSUPPORTED_ASSIGNOR, m));
    }
    match a.regex.as_deref().filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(r) => compile(r)
            .map(Some)
            .map_err(|m| HeartbeatAnswer::refused(errors::INVALID_REGULAR_EXPRESSION, m)),
    }
}

/// A subscription regex, matched against whole topic names (as Kafka's RE2/J).
fn compile(r: &str) -> Result<regex::Regex, String> {
    if r.len() > CONSUMER_REGEX_BYTES_MAX {
        return Err(format!("the regex is above {CONSUMER_REGEX_BYTES_MAX} bytes"));
    }
    regex::RegexBuilder::new(&format!("^(?:{r})$"))
        .size_limit(CONSUMER_REGEX_PROGRAM_BYTES_MAX)
        .build()
        .map_err(|e| format!("regex {r:?}: {e}"))
}

impl ConsumerGroup {
    /// One heartbeat of a member of this group (`validate` passed; `regex`: its compiled
    /// regex, if it sent one).
    pub(super) fn heartbeat(
        &mut self,
        a: &HeartbeatArgs,
        regex: Option<regex::Regex>,
        topics: &dyn TopicLookup,
        now: u64,
        s: &Settings,
    ) -> HeartbeatAnswer {
        let id = match a.epoch {
            -1 => return self.leave(a, now),
            -2 => return self.leave_static(a),
            0 => match self.join(a, now, s) {
                Ok(id) => id,
                Err(answer) => return answer,
            },
            _ => {
                if let Err(answer) = self.check_epoch(a) {
                    return answer;
                }
                a.member_id.clone()
            }
        };
        self.session_timeout = a.session_timeout;
        self.update_member(&id, a, regex, now);
        if self.refresh_topics(topics, now) {
            self.bump("subscribed topics changed", &a.group);
        }
        if self.epoch > self.target_epoch {
            self.compute_target(s);
        }
        self.reconcile(&id, a.owned.as_ref(), now);
        let m = self.members.get_mut(&id).expect("the member heartbeating exists");
        let full = a.epoch == 0
            || (a.rebalance_timeout_ms != -1 && a.names.is_some() && a.owned.is_some());
        let behind = a.epoch != m.epoch;
        let assignment =
            (full || behind || m.sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.sent = Some(m.assigned.clone());
        }
        HeartbeatAnswer {
            error: errors::NONE,
            message: None,
            member_id: id,
            epoch: m.epoch,
            interval_ms: a.heartbeat_interval.unwrap_or(s.heartbeat_interval).as_millis() as i32,
            assignment,
        }
    }

    /// A join (epoch 0): the member as it is if it is known (a lost answer, or a rejoin
    /// after FENCED_MEMBER_EPOCH), a static member's place if it left it, else a new member.
    fn join(
        &mut self,
        a: &HeartbeatArgs,
        now: u64,
        s: &Settings,
    ) -> Result<String, HeartbeatAnswer> {
        let id = if a.member_id.is_empty() {
            Uuid::from_bytes(folio_rt::random()).simple().to_string()
        } else {
            a.member_id.clone()
        };
        if let Some(instance) = &a.instance_id
            && let Some(held) = self.statics.get(instance).cloned()
            && held != id
        {
            let left = self.members.get(&held).is_some_and(|m| m.epoch == -2);
            if !left {
                let m = format!("instance {instance:?} is held by live member {held}");
                return Err(HeartbeatAnswer::refused(errors::UNRELEASED_INSTANCE_ID, m));
            }
            // The new member takes the static member's place and partitions.
            self.take_static_place(&a.group, instance, &held, &id);
            return Ok(id);
        }
        if let Some(m) = self.members.get(&id) {
            if m.classic.is_some() {
                let msg = format!("member {id} speaks the classic protocol");
                return Err(HeartbeatAnswer::refused(errors::UNKNOWN_MEMBER_ID, msg));
            }
            return Ok(id);
        }
        if self.members.len() >= s.max_members {
            let m = format!("the group has {} members (group.max.size)", self.members.len());
            return Err(HeartbeatAnswer::refused(errors::GROUP_MAX_SIZE_REACHED, m));
        }
        let mut m = ConsumerMember::new(&id, a.instance_id.clone(), 0, now);
        m.client_id = a.client_id.clone();
        m.client_host = a.client_host.clone();
        if let Some(instance) = &a.instance_id {
            self.statics.insert(instance.clone(), id.clone());
        }
        self.members.insert(id.clone(), m);
        tracing::info!(group = %a.group, member = %id, "consumer group member joined");
        self.bump("a member joined", &a.group);
        Ok(id)
    }

    /// A heartbeat at epoch > 0 must come from a known member at its epoch (or the one
    /// before, if it owns no more than it is assigned: the answer that moved it was lost).
    fn check_epoch(&self, a: &HeartbeatArgs) -> Result<(), HeartbeatAnswer> {
        let Some(m) = self.members.get(&a.member_id).filter(|m| m.classic.is_none()) else {
            let msg = format!("member {} is not in the group (here)", a.member_id);
            return Err(HeartbeatAnswer::refused(errors::UNKNOWN_MEMBER_ID, msg));
        };
        if let Some(i) = &a.instance_id
            && self.statics.get(i) != Some(&a.member_id)
        {
            let msg = format!("instance {i:?} belongs to another member now");
            return Err(HeartbeatAnswer::refused(errors::FENCED_INSTANCE_ID, msg));
        }
        let owns_no_more = || {
            a.owned.as_ref().is_some_and(|o| {
                o.iter().all(|(t, ps)| m.assigned.get(t).is_some_and(|a| ps.is_subset(a)))
            })
        };
        if m.epoch == -2 || (a.epoch != m.epoch && !(a.epoch == m.previous_epoch && owns_no_more()))
        {
            let msg = format!("epoch {} is not the member's ({})", a.epoch, m.epoch);
            return Err(HeartbeatAnswer::refused(errors::FENCED_MEMBER_EPOCH, msg));
        }
        Ok(())
    }

    /// What the heartbeat changes of its member: subscription, regex, assignor, timeouts.
    fn update_member(
        &mut self,
        id: &str,
        a: &HeartbeatArgs,
        regex: Option<regex::Regex>,
        now: u64,
    ) {
        let m = self.members.get_mut(id).expect("the member heartbeating exists");
        m.last_seen = now;
        if a.rebalance_timeout_ms >= 0 {
            m.rebalance_timeout = Duration::from_millis(a.rebalance_timeout_ms as u64);
        }
        if let Some(r) = &a.rack {
            m.rack = Some(r.clone());
        }
        let mut changed = false;
        if let Some(names) = &a.names {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            changed |= m.names != names;
            m.names = names;
        }
        if let Some(r) = &a.regex {
            let r = (!r.is_empty()).then(|| r.clone());
            changed |= m.regex != r;
            m.regex = r;
        }
        if let Some(name) = &a.assignor {
            let chosen = Assignor::parse(name);
            changed |= m.assignor != chosen;
            m.assignor = chosen;
        }
        if let (Some(src), Some(compiled)) = (m.regex.clone(), regex)
            && !self.regexes.contains_key(&src)
        {
            let r = Resolved { regex: compiled, names: BTreeSet::new(), at: None, fresh: true };
            self.regexes.insert(src, r);
        }
        if changed {
            self.bump("a subscription changed", &a.group);
        }
    }

    /// Matches regexes due (new, or older than `CONSUMER_REGEX_REFRESH`) and reads every
    /// subscribed topic again; true if what the group subscribes to changed.
    fn refresh_topics(&mut self, topics: &dyn TopicLookup, now: u64) -> bool {
        let used: BTreeSet<String> =
            self.members.values().filter_map(|m| m.regex.clone()).collect();
        self.regexes.retain(|r, _| used.contains(r));
        let refresh = CONSUMER_REGEX_REFRESH.as_millis() as u64;
        let due = |r: &Resolved| !r.fresh && r.at.is_none_or(|at| at + refresh <= now);
        if self.regexes.values().any(due) {
            let all = topics.names();
            for r in self.regexes.values_mut().filter(|r| due(r)) {
                r.names = all.iter().filter(|n| r.regex.is_match(n)).cloned().collect();
                r.at = Some(now);
            }
        }
        self.regexes.values_mut().for_each(|r| r.fresh = false);
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for m in self.members.values() {
            names.extend(m.names.iter().map(String::as_str));
            if let Some(r) = m.regex.as_ref().and_then(|r| self.regexes.get(r)) {
                names.extend(r.names.iter().map(String::as_str));
            }
        }
        let now_topics: BTreeMap<String, (Uuid, u32)> =
            names.into_iter().filter_map(|n| topics.topic(n).map(|t| (n.to_string(), t))).collect();
        let changed = now_topics != self.topics;
        self.topics = now_topics;
        changed
    }

    /// A member's subscribed topic ids.
    fn topic_ids(&self, m: &ConsumerMember) -> BTreeSet<Uuid> {
        let by_regex = m.regex.as_ref().and_then(|r| self.regexes.get(r)).map(|r| &r.names);
        m.names
            .iter()
            .chain(by_regex.into_iter().flatten())
            .filter_map(|n| self.topics.get(n).map(|(id, _)| *id))
            .collect()
    }

    /// The target for the group epoch: the assignor most members ask for (the default if
    /// none does) over every member's subscription.
    fn compute_target(&mut self, s: &Settings) {
        let mut votes: BTreeMap<&'static str, (usize, Assignor)> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.assignor) {
            votes.entry(a.name()).or_insert((0, a)).0 += 1;
        }
        self.assignor =
            votes.values().max_by_key(|(n, _)| *n).map_or(s.default_assignor, |(_, a)| *a);
        let subscribers: Vec<Subscriber<'_>> = self
            .members
            .values()
            .map(|m| Subscriber {
                id: &m.id,
                order: m.instance_id.as_deref().unwrap_or(&m.id),
                topics: self.topic_ids(m),
                current: self.target.get(&m.id).unwrap_or(&m.assigned),
            })
            .collect();
        let partitions: BTreeMap<Uuid, u32> = self.topics.values().copied().collect();
        self.target = assign(self.assignor, &subscribers, &partitions);
        self.target_epoch = self.epoch;
    }

    /// Moves a member one step towards its target (`reconcile::step`).
    fn reconcile(&mut self, id: &str, owned: Option<&Partitions>, now: u64) {
        let m = &self.members[id];
        if m.epoch == -2 {
            return;
        }
        let mut current = m.assigned.clone();
        for (t, ps) in &m.revoking {
            current.entry(*t).or_default().extend(ps);
        }
        let empty = Partitions::new();
        let target = self.target.get(id).unwrap_or(&empty);
        let owners = &self.owners;
        let held = |t: Uuid, p: i32| owners.get(&(t, p)).is_some_and(|o| o != id);
        let r = reconcile::step(m.epoch, &current, target, self.target_epoch, owned, held);
        let was = m.state;
        self.place(id, r.assigned, r.revoking);
        let m = self.members.get_mut(id).expect("placed above");
        if r.epoch != m.epoch {
            m.previous_epoch = m.epoch;
            m.epoch = r.epoch;
        }
        m.state = r.state;
        m.revoke_deadline = match (was, r.state) {
            (_, s) if s != MemberState::UnrevokedPartitions => None,
            (MemberState::UnrevokedPartitions, _) => m.revoke_deadline,
            _ => Some(now.saturating_add(m.rebalance_timeout.as_millis() as u64)),
        };
    }

    fn leave(&mut self, a: &HeartbeatArgs, now: u64) -> HeartbeatAnswer {
        if !self.members.contains_key(&a.member_id) {
            let msg = format!("member {} is not in the group", a.member_id);
            return HeartbeatAnswer::refused(errors::UNKNOWN_MEMBER_ID, msg);
        }
        self.remove(&a.member_id, now, "it left", &a.group);
        HeartbeatAnswer { member_id: a.member_id.clone(), epoch: -1, ..HeartbeatAnswer::default() }
    }

    /// A static member leaves for now: its partitions wait for it (or for its instance's
    /// next member) until its session ends.
    fn leave_static(&mut self, a: &HeartbeatArgs) -> HeartbeatAnswer {
        let instance =
            a.instance_id.as_ref().expect("validated: a static leave names its instance");
        let Some(m) = self.members.get_mut(&a.member_id) else {
            let msg = format!("member {} is not in the group", a.member_id);
            return HeartbeatAnswer::refused(errors::UNKNOWN_MEMBER_ID, msg);
        };
        if self.statics.get(instance) != Some(&a.member_id) {
            let msg = format!("instance {instance:?} belongs to another member");
            return HeartbeatAnswer::refused(errors::FENCED_INSTANCE_ID, msg);
        }
        if m.epoch != -2 {
            m.previous_epoch = m.epoch;
            m.epoch = -2;
        }
        tracing::info!(group = %a.group, member = %a.member_id, instance = %instance, "static member left for now");
        HeartbeatAnswer { member_id: a.member_id.clone(), epoch: -2, ..HeartbeatAnswer::default() }
    }

    /// Whether an offset commit at `epoch` from `member` may write (Kafka's checks for a
    /// consumer group): NONE, UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH.
    pub(super) fn check_commit(&self, epoch: i32, member: &str) -> i16 {
        if epoch < 0 && member.is_empty() {
            return if self.members.is_empty() { errors::NONE } else { errors::UNKNOWN_MEMBER_ID };
        }
        match self.members.get(member) {
            None => errors::UNKNOWN_MEMBER_ID,
            Some(m) if m.epoch != epoch && m.classic.is_some() => errors::ILLEGAL_GENERATION,
            Some(m) if m.epoch != epoch => errors::STALE_MEMBER_EPOCH,
            Some(_) => errors::NONE,
        }
    }
}

impl Coordinator {
    fn consumer_settings(&self) -> Settings {
        Settings {
            heartbeat_interval: self.config.consumer_heartbeat_interval,
            default_assignor: self.config.consumer_assignors[0],
            max_members: self.config.max_members,
        }
    }

    /// A ConsumerGroupHeartbeat: creates the group at a member's first join (claiming it:
    /// `claim_generation`), then joins, heartbeats or leaves.
    pub async fn consumer_heartbeat(
        &self,
        a: &HeartbeatArgs,
        topics: &dyn TopicLookup,
    ) -> HeartbeatAnswer {
        let regex = match validate(a) {
            Ok(r) => r,
            Err(answer) => return answer,
        };
        let known = self.consumers.lock().expect("consumers lock").contains_key(&a.group);
        if !known {
            if a.epoch != 0 {
                // Membership is in memory: a member of this group's last coordinator, or
                // of a group that emptied and went, joins again.
                let msg = format!("group {} has no member {} here", a.group, a.member_id);
                return HeartbeatAnswer::refused(errors::UNKNOWN_MEMBER_ID, msg);
            }
            if let Err(answer) = self.create_consumer_group(&a.group, topics).await {
                return answer;
            }
        }
        let s = self.consumer_settings();
        let now = self.clock.now_ms();
        let (answer, only_classic) = {
            let mut consumers = self.consumers.lock().expect("consumers lock");
            let Some(g) = consumers.get_mut(&a.group) else {
                // Forgotten meanwhile (it moved, or was deleted): the client looks it up again.
                return HeartbeatAnswer::refused(errors::NOT_COORDINATOR, "the group moved");
            };
            let answer = g.heartbeat(a, regex, topics, now, &s);
            (answer, g.only_classic_members())
        };
        if only_classic {
            self.downgrade_if_classic(&a.group);
        }
        answer
    }

    /// Creates a consumer group here: from nothing, or from a classic group (with its
    /// members: an online upgrade, `classic.rs`), after claiming its next generation in
    /// the store.
    async fn create_consumer_group(
        &self,
        name: &str,
        topics: &dyn TopicLookup,
    ) -> Result<(), HeartbeatAnswer> {
        let _one = self.creating.lock().await;
        if self.consumers.lock().expect("consumers lock").contains_key(name) {
            return Ok(());
        }
        let refused = |m: String| HeartbeatAnswer::refused(errors::GROUP_ID_NOT_FOUND, m);
        let known = {
            let groups = self.groups.lock().expect("groups lock");
            match groups.get(name) {
                Some(g) if !g.members.is_empty() => {
                    if let Some(why) = self.upgrade_refused(name, g) {
                        tracing::info!(group = name, why, "classic group not upgraded");
                        return Err(refused(why));
                    }
                    g.generation
                }
                Some(g) => g.generation,
                None if !self.room_for_group(&groups, name) => {
                    let m = "this coordinator holds groups_max groups";
                    return Err(HeartbeatAnswer::refused(errors::POLICY_VIOLATION, m));
                }
                None => -1,
            }
        };
        let claim = self.claim_generation(name, known, self.tenure()).await.map_err(|e| {
            tracing::warn!(group = name, error = %e, "a consumer group could not be claimed");
            HeartbeatAnswer::refused(errors::COORDINATOR_NOT_AVAILABLE, e.to_string())
        })?;
        let mut groups = self.groups.lock().expect("groups lock");
        let now = self.clock.now_ms();
        let g = match groups.get(name).filter(|g| !g.members.is_empty()) {
            None => ConsumerGroup::new(claim.generation, now, self.config.consumer_assignors[0]),
            Some(classic) => {
                if let Some(why) = self.upgrade_refused(name, classic) {
                    return Err(refused(why));
                }
                let s = self.consumer_settings();
                let g = ConsumerGroup::upgrade(classic, claim.generation, now, &s, topics)
                    .map_err(|e| refused(e.to_string()))?;
                tracing::info!(
                    group = name,
                    members = classic.members.len(),
                    generation = classic.generation,
                    "classic group upgraded to a consumer group"
                );
                g
            }
        };
        if let Some(mut classic) = groups.remove(name) {
            classic.end_waits(errors::REBALANCE_IN_PROGRESS);
        }
        self.consumers.lock().expect("consumers lock").insert(name.to_string(), g);
        self.claims.lock().expect("claims lock").insert(name.to_string(), claim);
        tracing::info!(group = name, generation = claim.generation, "consumer group created");
        Ok(())
    }

    /// Fences consumer-protocol members whose time is up (`ConsumerGroup::expired`).
    pub(super) fn expire_consumer_members(&self) {
        let now = self.clock.now_ms();
        let session = self.config.consumer_session_timeout;
        let mut downgrade = Vec::new();
        {
            let mut consumers = self.consumers.lock().expect("consumers lock");
            for (name, g) in consumers.iter_mut() {
                let expired = g.expired(now, session);
                for (id, why) in &expired {
                    g.remove(id, now, why, name);
                }
                if !expired.is_empty() && g.only_classic_members() {
                    downgrade.push(name.clone());
                }
            }
        }
        for name in downgrade {
            self.downgrade_if_classic(&name);
        }
    }

    /// A snapshot of the consumer group, if this coordinator has it.
    pub fn describe_consumer(&self, group: &str) -> Option<ConsumerGroupInfo> {
        self.consumers.lock().expect("consumers lock").get(group).map(ConsumerGroup::info)
    }

    /// Whether `group` is a consumer-protocol group here.
    pub fn is_consumer_group(&self, group: &str) -> bool {
        self.consumers.lock().expect("consumers lock").contains_key(group)
    }
}
