//! The group coordinator (Kafka's classic consumer-group protocol): membership, rebalances
//! with generations, and committed offsets.
//!
//! ## States
//! ```text
//!            join                    every member rejoined (or the rebalance timeout)
//!   Empty ─────────► PreparingRebalance ─────────────────────► CompletingRebalance
//!     ▲                  ▲   ▲                                        │ leader's SyncGroup
//!     │ last member      │   └───────── join / leave / expiry ─────── ▼
//!     └──── leaves ──────┴────────────── join / leave / expiry ◄──── Stable
//!   Dead: deleted (DeleteGroups on an empty group)
//! ```
//! Members that miss their session timeout are removed (a rebalance follows); members that
//! do not rejoin within the rebalance timeout are dropped from the new generation.
//!
//! Static members (KIP-345, `group.instance.id`) keep their place across restarts: one that
//! joins again under a new member id takes its old member's place and assignment, and in a
//! stable group that keeps its protocol nobody rebalances; the old member id is fenced
//! (FENCED_INSTANCE_ID on its next request, also when another process claims the instance
//! id). They leave only by their session timeout or a LeaveGroup naming the instance. The first
//! join of an empty group waits `initial_rebalance_delay` so that members starting together
//! land in one generation.
//!
//! Membership lives in memory only: when the coordinator moves, members rejoin (as with
//! Kafka after a coordinator failover). Committed offsets are durable, one metadata record
//! per group and partition, keyed by topic id:
//! ```text
//! groups/<group, '/' and '%' escaped>/<topic id hex>/<partition>
//! OffsetRecord  "FGO" 1 | offset i64 | leader_epoch i32 | commit_ms u64 | metadata str
//!               "FGO" 2 | the same | expire_ms u64   (a commit that named its retention)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_meta::Clock;

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::{MetadataStore, Txn, list_all};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::errors;
pub use crate::limits::GROUP_ID_BYTES_MAX;
use claim::Claim;
pub use claim::CommitError;
use commit_order::Arrivals;
pub use commit_order::CommitTicket;
pub use record::OffsetRecord;
use record::escape;
use statics::fenced;

pub use offsets::{OffsetToDelete, subscription_topics};

mod claim;
mod commit_order;
mod lifecycle;
mod offsets;
mod record;
mod statics;
mod store;

/// Settings of the coordinator (Kafka's names).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay: Duration,
    /// `group.min.session.timeout.ms` / `group.max.session.timeout.ms`.
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
    /// `group.max.size`.
    pub max_members: usize,
    /// `offsets.retention.minutes`: the committed offsets of a group with no members
    /// expire this long after they were committed (or after the group became empty, if
    /// later); a group left with neither members nor offsets is gone. 7 days.
    pub offsets_retention: Duration,
    /// `offsets.retention.check.interval.ms`: how often expired offsets are removed. 10
    /// minutes.
    pub offsets_retention_check_interval: Duration,
    /// Groups one coordinator keeps (with members, or with offsets committed through it):
    /// a join or commit that would add one more is refused with POLICY_VIOLATION. 10 000.
    pub groups_max: usize,
    /// Groups one client (its `client.id`) may create by committing offsets per minute;
    /// more are refused with POLICY_VIOLATION (a client committing under fresh group ids
    /// cannot fill the store). 100.
    pub new_groups_per_client_per_minute_max: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay: Duration::from_secs(3),
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(1800),
            offset_metadata_max_bytes: 4096,
            max_members: 1000,
            offsets_retention: Duration::from_secs(7 * 24 * 3600),
            offsets_retention_check_interval: Duration::from_secs(600),
            groups_max: 10_000,
            new_groups_per_client_per_minute_max: 100,
        }
    }
}

/// Where a group is in its rebalance cycle (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The state's name as DescribeGroups answers it.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A member of a group: its id, timeouts, protocols and assignment.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// (protocol name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// A static member's `group.instance.id`.
    pub instance_id: Option<String>,
    /// When (clock ms) the member was last heard from.
    last_seen: u64,
}

/// What a JoinGroup gets.
#[derive(Debug, Clone, Default)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Bytes)>,
}

/// What a SyncGroup gets.
#[derive(Debug, Clone, Default)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

#[derive(Debug)]
struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    joins: HashMap<String, oneshot::Sender<JoinResult>>,
    syncs: HashMap<String, oneshot::Sender<SyncResult>>,
    /// Static members: instance id → current member id (one per member at most).
    statics: HashMap<String, String>,
    /// While preparing: no completion before this (clock ms; the initial delay) ...
    not_before: u64,
    /// ... and completion (dropping who did not rejoin) at this.
    deadline: u64,
    rebalances: u64,
    /// When (clock ms) it last became empty: offsets expire from then at the earliest.
    empty_since: u64,
}

impl Group {
    /// Moves the group to `to`. Asserts Kafka's transitions (a rebalance starts from Empty,
    /// Stable or CompletingRebalance; completing follows preparing; stable follows
    /// completing; a group empties only when a rebalance ends with no member; only a group
    /// without members dies) and what each state promises about members and leader.
    fn enter(&mut self, to: GroupState) {
        use GroupState::*;
        let legal = match to {
            PreparingRebalance => matches!(self.state, Empty | Stable | CompletingRebalance),
            CompletingRebalance | Empty => self.state == PreparingRebalance,
            Stable => self.state == CompletingRebalance,
            Dead => self.members.is_empty(),
        };
        assert!(legal, "group state {:?} -> {to:?} is not a transition", self.state);
        self.state = to;
        match to {
            Empty | Dead => {
                assert!(self.members.is_empty(), "{to:?} with {} members", self.members.len());
            }
            CompletingRebalance | Stable => {
                let leads = self.leader.as_ref().is_some_and(|l| self.members.contains_key(l));
                assert!(leads, "{to:?} without a leader among its members");
                assert!(self.protocol.is_some(), "{to:?} without a protocol");
            }
            PreparingRebalance => {}
        }
        assert!(
            self.statics.values().all(|id| self.members.contains_key(id)),
            "a static instance names a member the group does not have"
        );
    }

    fn new(now: u64) -> Group {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            joins: HashMap::new(),
            syncs: HashMap::new(),
            statics: HashMap::new(),
            not_before: now,
            deadline: now,
            rebalances: 0,
            empty_since: now,
        }
    }
}

/// A snapshot of a group, for DescribeGroups and metrics.
#[derive(Debug, Clone)]
pub struct GroupInfo {
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<Member>,
    pub rebalances: u64,
}

/// The group coordinator: the groups this broker coordinates, their members and rebalances, and
/// their committed offsets in the metadata store.
#[derive(Debug)]
pub struct Coordinator {
    config: GroupConfig,
    /// Session expiry and rebalance deadlines read this clock.
    clock: Arc<dyn Clock>,
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    groups: Mutex<HashMap<String, Group>>,
    /// The last offset committed through this coordinator: (group, topic, topic id,
    /// partition) → offset, for lag metrics.
    last_commits: Mutex<BTreeMap<(String, String, Uuid, i32), i64>>,
    /// Commits in flight, in the order they arrived (`begin_commit`, `commits_before`).
    arrivals: Mutex<Arrivals>,
    /// Notified whenever a commit in flight ends.
    commit_ended: tokio::sync::Notify,
    /// This broker's node id (in its claims).
    node_id: i32,
    /// The groups whose offsets this coordinator may write: its claims (`claim`).
    claims: Mutex<HashMap<String, Claim>>,
    /// Held while a claim is taken (one at a time).
    claiming: tokio::sync::Mutex<()>,
    /// Groups created by commits in the current minute, per client id (the window's start
    /// in clock ms, then client id → count; `new_groups_per_client_per_minute_max`).
    new_groups: Mutex<(u64, HashMap<String, usize>)>,
}

impl Coordinator {
    /// A coordinator with no groups yet, committing offsets to `meta` under `keys`, timing sessions
    /// on `clock`.
    pub fn new(
        config: GroupConfig,
        meta: Arc<dyn MetadataStore>,
        keys: Keys,
        clock: Arc<dyn Clock>,
        node_id: i32,
    ) -> Arc<Coordinator> {
        Arc::new(Coordinator {
            config,
            clock,
            meta,
            keys,
            groups: Mutex::new(HashMap::new()),
            last_commits: Mutex::new(BTreeMap::new()),
            arrivals: Mutex::new(Arrivals::default()),
            commit_ended: tokio::sync::Notify::new(),
            node_id,
            claims: Mutex::new(HashMap::new()),
            claiming: tokio::sync::Mutex::new(()),
            new_groups: Mutex::new((0, HashMap::new())),
        })
    }

    fn prefix(&self) -> String {
        self.keys.groups()
    }

    fn group_prefix(&self, group: &str) -> String {
        format!("{}{}/", self.prefix(), escape(group))
    }

    fn offset_key(&self, group: &str, topic: Uuid, partition: i32) -> String {
        format!("{}{}/{partition}", self.group_prefix(group), topic.simple())
    }

    /// Expires sessions and completes rebalances whose time has come; runs until dropped.
    pub async fn tick(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            self.expire_sessions();
        }
    }

    /// Removes members whose session ended and completes the rebalances whose time came
    /// (one step of `tick`).
    pub(crate) fn expire_sessions(&self) {
        let now = self.clock.now_ms();
        let mut groups = self.groups.lock().expect("groups lock");
        for (name, g) in groups.iter_mut() {
            let expired: Vec<String> = g
                .members
                .values()
                .filter(|m| {
                    !g.joins.contains_key(&m.id)
                        && m.last_seen + (m.session_timeout.as_millis() as u64) < now
                })
                .map(|m| m.id.clone())
                .collect();
            for id in expired {
                tracing::info!(group = %name, member = %id, "member session expired");
                remove_member(g, &id, now);
            }
            maybe_complete_join(name, g, now);
        }
    }

    /// JoinGroup: adds or refreshes the member, starts a rebalance if needed and answers when the
    /// join phase ends.
    #[allow(clippy::too_many_arguments)] // JoinGroup's fields
    pub async fn join(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        protocol_type: &str,
        protocols: Vec<(String, Bytes)>,
        session_timeout: Duration,
        rebalance_timeout: Duration,
    ) -> JoinResult {
        let fail =
            |error| JoinResult { error, member_id: member_id.to_string(), ..JoinResult::default() };
        if let Some(code) = self.join_invalid(group_id, protocol_type, &protocols, session_timeout)
        {
            return fail(code);
        }
        let now = self.clock.now_ms();
        let rx = {
            let mut groups = self.groups.lock().expect("groups lock");
            if !groups.contains_key(group_id) && !self.room_for_group(&groups, group_id) {
                return fail(errors::POLICY_VIOLATION);
            }
            let g = groups.entry(group_id.to_string()).or_insert_with(|| Group::new(now));
            if g.state == GroupState::Dead {
                *g = Group::new(now);
            }
            if let Some(code) = protocols_refused(g, member_id, protocol_type, &protocols) {
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
                format!("member-{}", Uuid::from_bytes(folio_rt::random()).simple())
            } else if !g.members.contains_key(member_id) {
                return fail(errors::UNKNOWN_MEMBER_ID);
            } else {
                member_id.to_string()
            };
            g.protocol_type = Some(protocol_type.to_string());
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
                session_timeout,
                rebalance_timeout,
                protocols,
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
            maybe_complete_join(group_id, g, now);
            rx
        };
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
                for (id, tx) in g.syncs.drain() {
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
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Vec<i16> {
        let mut groups = self.groups.lock().expect("groups lock");
        let now = self.clock.now_ms();
        let Some(g) = groups.get_mut(group_id) else {
            return vec![errors::UNKNOWN_MEMBER_ID; members.len()];
        };
        members
            .iter()
            .map(|(id, instance)| {
                let id = match instance.as_ref().map(|i| g.statics.get(i)) {
                    Some(None) => return errors::UNKNOWN_MEMBER_ID,
                    Some(Some(owner)) if !id.is_empty() && id != owner => {
                        return errors::FENCED_INSTANCE_ID;
                    }
                    Some(Some(owner)) => owner.clone(),
                    None => id.clone(),
                };
                let id = &id;
                if g.members.contains_key(id) {
                    tracing::info!(group = group_id, member = %id, "member left");
                    remove_member(g, id, now);
                    maybe_complete_join(group_id, g, now);
                    errors::NONE
                } else {
                    errors::UNKNOWN_MEMBER_ID
                }
            })
            .collect()
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

    /// A snapshot of the group, if it exists on this coordinator.
    pub fn describe(&self, group_id: &str) -> Option<GroupInfo> {
        let groups = self.groups.lock().expect("groups lock");
        groups.get(group_id).map(|g| GroupInfo {
            state: g.state,
            generation: g.generation,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: if g.state == GroupState::Stable {
                g.protocol.clone().unwrap_or_default()
            } else {
                String::new()
            },
            members: g.members.values().cloned().collect(),
            rebalances: g.rebalances,
        })
    }

    /// Forgets the groups `keep` says no (they moved to another coordinator): their
    /// members' waits end with NOT_COORDINATOR and they rejoin there.
    pub fn forget_unless(&self, keep: impl Fn(&str) -> bool) {
        let mut groups = self.groups.lock().expect("groups lock");
        let gone: Vec<String> = groups.keys().filter(|g| !keep(g)).cloned().collect();
        self.claims.lock().expect("claims lock").retain(|g, _| keep(g));
        for name in gone {
            if let Some(mut g) = groups.remove(&name) {
                tracing::info!(group = %name, "group moved to another coordinator");
                for (_, tx) in g.joins.drain() {
                    let _ = tx.send(JoinResult {
                        error: errors::NOT_COORDINATOR,
                        ..JoinResult::default()
                    });
                }
                for (_, tx) in g.syncs.drain() {
                    let _ = tx.send(SyncResult {
                        error: errors::NOT_COORDINATOR,
                        ..SyncResult::default()
                    });
                }
            }
        }
    }

    /// Every group in memory (for metrics).
    pub fn snapshot(&self) -> Vec<(String, GroupInfo)> {
        let names: Vec<String> = self.groups.lock().expect("groups lock").keys().cloned().collect();
        names.into_iter().filter_map(|n| self.describe(&n).map(|i| (n, i))).collect()
    }

    /// Deletes an empty group and its committed offsets.
    pub async fn delete(&self, group_id: &str) -> i16 {
        {
            let mut groups = self.groups.lock().expect("groups lock");
            if let Some(g) = groups.get_mut(group_id) {
                if !g.members.is_empty() {
                    return errors::NON_EMPTY_GROUP;
                }
                g.enter(GroupState::Dead);
            }
        }
        let prefix = self.group_prefix(group_id);
        let keys = match list_all(self.meta.as_ref(), &prefix).await {
            Ok(v) => v,
            Err(_) => return errors::COORDINATOR_NOT_AVAILABLE,
        };
        let known = self.groups.lock().expect("groups lock").remove(group_id).is_some();
        if keys.is_empty() && !known {
            return errors::GROUP_ID_NOT_FOUND;
        }
        for chunk in keys.chunks(self.meta.txn_ops_max()) {
            let txn = chunk.iter().fold(Txn::new(), |t, v| t.delete(v.key.clone()));
            if self.meta.txn(txn).await.is_err() {
                return errors::COORDINATOR_NOT_AVAILABLE;
            }
        }
        // The claim last: a commit racing the deletion fails its compare.
        self.drop_claim(group_id, None);
        let claim = Txn::new().delete(self.claim_key(group_id));
        if self.meta.txn(claim).await.is_err() {
            return errors::COORDINATOR_NOT_AVAILABLE;
        }
        tracing::info!(group = group_id, offsets = keys.len(), "group deleted");
        errors::NONE
    }
}

fn prepare_rebalance(g: &mut Group, now: u64, delay: Duration) {
    g.enter(GroupState::PreparingRebalance);
    g.rebalances += 1;
    let timeout = g.members.values().map(|m| m.rebalance_timeout).max().unwrap_or_default();
    g.not_before = now + delay.as_millis() as u64;
    g.deadline = now + timeout.max(delay).as_millis() as u64;
    // Members waiting in SyncGroup must rejoin.
    for (_, tx) in g.syncs.drain() {
        let _ =
            tx.send(SyncResult { error: errors::REBALANCE_IN_PROGRESS, ..SyncResult::default() });
    }
}

/// INCONSISTENT_GROUP_PROTOCOL unless the joining member speaks the group's protocol type
/// and one of its protocols is supported by every other member.
fn protocols_refused(
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
fn members_of(g: &Group, protocol: &str) -> Vec<(String, Bytes)> {
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

fn remove_member(g: &mut Group, id: &str, now: u64) {
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

/// Ends the join phase when every member has rejoined (after the initial delay) or the
/// rebalance timeout has passed: a new generation, a leader, a protocol.
fn maybe_complete_join(name: &str, g: &mut Group, now: u64) {
    if g.state != GroupState::PreparingRebalance {
        return;
    }
    let all_joined = g.members.keys().all(|id| g.joins.contains_key(id));
    if !((all_joined && now >= g.not_before) || now >= g.deadline) {
        return;
    }
    // Who did not rejoin is out.
    let gone: Vec<String> =
        g.members.keys().filter(|id| !g.joins.contains_key(*id)).cloned().collect();
    for id in gone {
        g.members.remove(&id);
        g.statics.retain(|_, m| *m != id);
    }
    g.generation += 1;
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
    // The leader's most preferred protocol that every member supports.
    let protocol = g.members[&leader]
        .protocols
        .iter()
        .map(|(p, _)| p.clone())
        .find(|p| g.members.values().all(|m| m.protocols.iter().any(|(q, _)| q == p)))
        .unwrap_or_else(|| g.members[&leader].protocols[0].0.clone());
    g.protocol = Some(protocol.clone());
    g.enter(GroupState::CompletingRebalance);
    tracing::info!(group = name, generation = g.generation, members = g.members.len(), %leader, %protocol, "rebalance: new generation");
    let members = members_of(g, &protocol);
    for (id, tx) in g.joins.drain() {
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
