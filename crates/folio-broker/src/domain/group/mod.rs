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
pub(crate) use record::escape;
pub(crate) use record::unescape;
use statics::{fenced, leaver};

pub use offsets::{OffsetToDelete, subscription_topics};
pub use store::ListedGroup;

mod claim;
mod commit_order;
pub mod configs;
pub mod consumer;
use consumer::ConsumerGroup;
pub mod share;
use share::ShareGroup;
mod lifecycle;
mod membership;
use membership::{join_phase_over, members_of, remove_member};
mod offsets;
mod record;
mod statics;
mod store;

/// How the coordinator sees the cluster's topics (the broker's topic cache; a map in
/// tests). Called under the coordinator's lock: it must not call back into it.
pub trait TopicLookup: Sync {
    /// The topic's id and partition count, if it exists.
    fn topic(&self, name: &str) -> Option<(Uuid, u32)>;
    /// Every topic name a subscription regex may match (the caller may see).
    fn names(&self) -> Vec<String>;
}

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
    /// `group.consumer.session.timeout.ms`: a consumer-protocol member not heard from for
    /// this long is fenced. 45 s.
    pub consumer_session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`: how often consumer-protocol members
    /// heartbeat. 5 s.
    pub consumer_heartbeat_interval: Duration,
    /// `group.consumer.assignors`: the assignors members may name, the first the default.
    /// uniform, range.
    pub consumer_assignors: Vec<consumer::Assignor>,
    /// Share groups' settings (`group.share.*`).
    pub shares: share::ShareConfig,
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
            consumer_session_timeout: Duration::from_secs(45),
            consumer_heartbeat_interval: Duration::from_secs(5),
            consumer_assignors: vec![consumer::Assignor::Uniform, consumer::Assignor::Range],
            shares: share::ShareConfig::default(),
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

/// A JoinGroup, decoded.
#[derive(Debug, Clone)]
pub struct JoinRequest<'a> {
    pub group: &'a str,
    /// The client's `client.id`: a new member's id begins with it.
    pub client_id: &'a str,
    /// Empty: a new member.
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    pub protocol_type: &'a str,
    /// (protocol name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
}

#[cfg(test)]
impl<'a> JoinRequest<'a> {
    /// A JoinGroup of group "g" from client "c", protocol type `consumer` (tests).
    pub(crate) fn of(
        member_id: &'a str,
        instance_id: Option<&'a str>,
        protocols: Vec<(String, Bytes)>,
        session: Duration,
    ) -> JoinRequest<'a> {
        JoinRequest {
            group: "g",
            client_id: "c",
            member_id,
            instance_id,
            protocol_type: "consumer",
            protocols,
            session_timeout: session,
            rebalance_timeout: session,
        }
    }
}

/// A cluster with no topics (tests of classic groups).
#[cfg(test)]
pub(crate) struct NoTopics;

#[cfg(test)]
impl TopicLookup for NoTopics {
    fn topic(&self, _: &str) -> Option<(Uuid, u32)> {
        None
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
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
    joins: BTreeMap<String, oneshot::Sender<JoinResult>>,
    syncs: BTreeMap<String, oneshot::Sender<SyncResult>>,
    /// Static members: instance id → current member id (one per member at most).
    statics: BTreeMap<String, String>,
    /// While preparing: no completion before this (clock ms; the initial delay) ...
    not_before: u64,
    /// ... and completion (dropping who did not rejoin) at this.
    deadline: u64,
    rebalances: u64,
    /// When (clock ms) it last became empty: offsets expire from then at the earliest.
    empty_since: u64,
    /// While its next generation is being claimed (`Coordinator::complete_join`): the
    /// completion's token, so a completion finishes only the group it began.
    claiming: Option<u64>,
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

    /// Ends every waiting JoinGroup and SyncGroup with `code` (the group moved or changed
    /// protocol).
    fn end_waits(&mut self, code: i16) {
        for (_, tx) in std::mem::take(&mut self.joins) {
            let _ = tx.send(JoinResult { error: code, ..JoinResult::default() });
        }
        for (_, tx) in std::mem::take(&mut self.syncs) {
            let _ = tx.send(SyncResult { error: code, ..SyncResult::default() });
        }
    }

    fn new(now: u64) -> Group {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            joins: BTreeMap::new(),
            syncs: BTreeMap::new(),
            statics: BTreeMap::new(),
            not_before: now,
            deadline: now,
            rebalances: 0,
            empty_since: now,
            claiming: None,
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
    groups: Mutex<BTreeMap<String, Group>>,
    /// The consumer-protocol groups (KIP-848). A group id is in `groups` or here, never
    /// both. Lock order: `groups`, then `consumers`, then `claims`.
    consumers: Mutex<BTreeMap<String, ConsumerGroup>>,
    /// Share groups (KIP-932): their members. Lock order: after `consumers`.
    shares: Mutex<BTreeMap<String, ShareGroup>>,
    /// Held while a consumer group is created (claimed), one at a time.
    creating: tokio::sync::Mutex<()>,
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
    claims: Mutex<BTreeMap<String, Claim>>,
    /// Held while a claim is taken (one at a time).
    claiming: tokio::sync::Mutex<()>,
    /// Join phases ended so far (`Group::claiming`'s tokens).
    completions: std::sync::atomic::AtomicU64,
    /// This coordinator's tenure: the broker's membership change count (live brokers,
    /// fence, controller), which moves the moment ownership may have. A commit writes only
    /// in the tenure it arrived in: one that waited through a move away and back (an
    /// isolated broker's, its client long gone) is refused, never written under a claim
    /// taken after it (found by the simulator: a stale commit moved a group's offset back
    /// from 16 to 9).
    tenure: tokio::sync::watch::Receiver<u64>,
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
        tenure: tokio::sync::watch::Receiver<u64>,
    ) -> Arc<Coordinator> {
        Arc::new(Coordinator {
            config,
            clock,
            meta,
            keys,
            groups: Mutex::new(BTreeMap::new()),
            consumers: Mutex::new(BTreeMap::new()),
            shares: Mutex::new(BTreeMap::new()),
            creating: tokio::sync::Mutex::new(()),
            last_commits: Mutex::new(BTreeMap::new()),
            arrivals: Mutex::new(Arrivals::default()),
            commit_ended: tokio::sync::Notify::new(),
            node_id,
            claims: Mutex::new(BTreeMap::new()),
            tenure,
            claiming: tokio::sync::Mutex::new(()),
            completions: std::sync::atomic::AtomicU64::new(0),
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
            for name in self.expire_sessions() {
                let c = self.clone();
                // One group's claim waiting on the store holds up no other group's.
                tokio::spawn(async move { c.complete_join(&name).await });
            }
        }
    }

    /// Removes members whose session ended; returns the groups whose join phase is over
    /// (`complete_join` ends them). One step of `tick`.
    pub(crate) fn expire_sessions(&self) -> Vec<String> {
        self.expire_consumer_members();
        self.expire_share_members();
        let now = self.clock.now_ms();
        let mut over = Vec::new();
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
            if join_phase_over(g, now) {
                over.push(name.clone());
            }
        }
        over
    }

    /// `tick`'s step, awaited: expires sessions and ends every join phase that is over.
    #[cfg(test)]
    pub(crate) async fn step(&self) {
        for name in self.expire_sessions() {
            self.complete_join(&name).await;
        }
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

    /// The generation `group`'s offsets are written at here: a classic group's generation,
    /// or the generation a consumer group was claimed at.
    pub(super) fn generation_of(&self, group: &str) -> Option<i32> {
        let classic = self.groups.lock().expect("groups lock").get(group).map(|g| g.generation);
        classic.or_else(|| {
            self.consumers.lock().expect("consumers lock").get(group).map(|c| c.claimed)
        })
    }

    /// The generation a commit of `group` at `asked` (its generation or member epoch) is
    /// written under (`commit`): a consumer group member's commit, checked against its
    /// member epoch, is written under the group's claim.
    pub fn commit_generation(&self, group: &str, asked: i32) -> i32 {
        let consumers = self.consumers.lock().expect("consumers lock");
        match consumers.get(group) {
            Some(c) if asked >= 0 => c.claimed,
            _ => asked.max(-1),
        }
    }

    /// This coordinator's tenure now: read when a commit arrives, passed to `commit`.
    pub fn tenure(&self) -> u64 {
        *self.tenure.borrow()
    }

    /// Forgets the groups `keep` says no (they moved to another coordinator): their
    /// members' waits end with NOT_COORDINATOR and they rejoin there.
    pub fn forget_unless(&self, keep: impl Fn(&str) -> bool) {
        let mut groups = self.groups.lock().expect("groups lock");
        let gone: Vec<String> = groups.keys().filter(|g| !keep(g)).cloned().collect();
        self.shares.lock().expect("shares lock").retain(|g, _| keep(g));
        self.consumers.lock().expect("consumers lock").retain(|g, _| {
            let kept = keep(g);
            if !kept {
                tracing::info!(group = %g, "consumer group moved to another coordinator");
            }
            kept
        });
        self.claims.lock().expect("claims lock").retain(|g, _| keep(g));
        for name in gone {
            if let Some(mut g) = groups.remove(&name) {
                tracing::info!(group = %name, "group moved to another coordinator");
                g.end_waits(errors::NOT_COORDINATOR);
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
        let share = {
            let mut shares = self.shares.lock().expect("shares lock");
            match shares.get(group_id) {
                Some(g) if !g.is_empty() => return errors::NON_EMPTY_GROUP,
                Some(_) => shares.remove(group_id).is_some(),
                None => false,
            }
        };
        let consumer = share || {
            let mut consumers = self.consumers.lock().expect("consumers lock");
            match consumers.get(group_id) {
                Some(g) if !g.is_empty() => return errors::NON_EMPTY_GROUP,
                Some(_) => consumers.remove(group_id).is_some(),
                None => false,
            }
        };
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
        let known = self.groups.lock().expect("groups lock").remove(group_id).is_some() || consumer;
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
