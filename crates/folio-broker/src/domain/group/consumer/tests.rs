//! The consumer protocol on one coordinator with a manual clock: joins, revoke-before-assign,
//! epochs fencing heartbeats and commits, sessions, static members, regexes, conversions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use folio_proto::clock::ManualClock;
use uuid::Uuid;

use super::{HeartbeatAnswer, HeartbeatArgs, MemberState, Partitions, TopicLookup};
use crate::domain::group::{Coordinator, GroupConfig, JoinRequest};
use crate::errors;

#[derive(Default)]
struct Topics(Mutex<BTreeMap<String, (Uuid, u32)>>);

impl TopicLookup for Topics {
    fn topic(&self, name: &str) -> Option<(Uuid, u32)> {
        self.0.lock().unwrap().get(name).copied()
    }
    fn names(&self) -> Vec<String> {
        self.0.lock().unwrap().keys().cloned().collect()
    }
}

const SESSION: Duration = Duration::from_secs(45);

fn t() -> Uuid {
    Uuid::from_u128(1)
}

fn parts(p: &[i32]) -> Partitions {
    [(t(), p.iter().copied().collect())].into()
}

fn count(p: &Option<Partitions>) -> usize {
    p.as_ref().map_or(0, |p| p.values().map(|s| s.len()).sum())
}

struct World {
    c: Arc<Coordinator>,
    clock: ManualClock,
    topics: Topics,
    _dir: tempfile::TempDir,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = ManualClock::new();
    let config = GroupConfig { initial_rebalance_delay: Duration::ZERO, ..Default::default() };
    let c = Coordinator::new(
        config,
        meta,
        Default::default(),
        Arc::new(clock.clone()),
        1,
        tokio::sync::watch::channel(0).1,
    );
    let topics = Topics::default();
    topics.0.lock().unwrap().insert("t".into(), (t(), 4));
    World { c, clock, topics, _dir: dir }
}

fn join_args(member: &str) -> HeartbeatArgs {
    HeartbeatArgs {
        group: "g".into(),
        member_id: member.into(),
        epoch: 0,
        rebalance_timeout_ms: 30_000,
        names: Some(vec!["t".into()]),
        owned: Some(Partitions::new()),
        version: 1,
        ..Default::default()
    }
}

/// A plain heartbeat: the member's epoch and what it says it owns.
fn beat(member: &str, epoch: i32, owned: Option<Partitions>) -> HeartbeatArgs {
    HeartbeatArgs {
        group: "g".into(),
        member_id: member.into(),
        epoch,
        rebalance_timeout_ms: -1,
        owned,
        version: 1,
        ..Default::default()
    }
}

async fn hb(w: &World, a: HeartbeatArgs) -> HeartbeatAnswer {
    w.c.consumer_heartbeat(&a, &w.topics).await
}

/// Two members share a topic's 4 partitions: the second gets the first's partitions only
/// after the first's heartbeat no longer lists them, and each epoch fences what is stale.
#[tokio::test]
async fn partitions_move_only_after_their_owner_gave_them_up() {
    let w = world();
    let a = hb(&w, join_args("a")).await;
    assert_eq!((a.error, count(&a.assignment)), (0, 4), "{a:?}");
    let e1 = a.epoch;
    let b = hb(&w, join_args("b")).await;
    assert_eq!(b.error, 0);
    assert_eq!(count(&b.assignment), 0, "b waits: a still holds every partition");
    let e2 = b.epoch;
    assert!(e2 > e1, "b's join moved the group epoch");
    let info = w.c.describe_consumer("g").unwrap();
    assert_eq!(info.state, "Reconciling");
    // a is told to keep 2 (it stays at its epoch until it let the other 2 go).
    let a2 = hb(&w, beat("a", e1, None)).await;
    assert_eq!((a2.error, a2.epoch, count(&a2.assignment)), (0, e1, 2));
    let kept = a2.assignment.clone().unwrap();
    let member = |id: &str| {
        w.c.describe_consumer("g").unwrap().members.into_iter().find(|m| m.member.id == id)
    };
    assert_eq!(member("a").unwrap().member.state, MemberState::UnrevokedPartitions);
    // b still gets nothing while a's heartbeats list every partition.
    let b2 = hb(&w, beat("b", e2, Some(Partitions::new()))).await;
    assert_eq!(count(&b2.assignment), 0);
    let a3 = hb(&w, beat("a", e1, Some(parts(&[0, 1, 2, 3])))).await;
    assert_eq!(
        (a3.epoch, member("a").unwrap().member.state),
        (e1, MemberState::UnrevokedPartitions)
    );
    // Commits at a's epoch still go through; at the group's newer epoch they are stale.
    assert_eq!(w.c.check_commit("g", e1, "a", None), errors::NONE);
    assert_eq!(w.c.check_commit("g", e2, "a", None), errors::STALE_MEMBER_EPOCH);
    assert_eq!(w.c.check_commit("g", e2, "x", None), errors::UNKNOWN_MEMBER_ID);
    // OffsetFetch v9 checks the member the same way; one not naming itself passes.
    assert_eq!(w.c.check_fetch("g", Some("a"), e1), errors::NONE);
    assert_eq!(w.c.check_fetch("g", Some("a"), e2), errors::STALE_MEMBER_EPOCH);
    assert_eq!(w.c.check_fetch("g", Some("x"), e2), errors::UNKNOWN_MEMBER_ID);
    assert_eq!(w.c.check_fetch("g", None, -1), errors::NONE);
    assert_eq!(w.c.check_fetch("other", Some("a"), e1), errors::NONE, "no such group here");
    // a lets them go: it reaches e2, and b gets the other two.
    let a4 = hb(&w, beat("a", e1, Some(kept.clone()))).await;
    assert_eq!(a4.epoch, e2);
    let b3 = hb(&w, beat("b", e2, Some(Partitions::new()))).await;
    assert_eq!((b3.epoch, count(&b3.assignment)), (e2, 2));
    let b_parts = b3.assignment.unwrap();
    for (tp, ps) in &b_parts {
        assert!(kept.get(tp).is_none_or(|k| k.is_disjoint(ps)), "no partition twice");
    }
    let b4 = hb(&w, beat("b", e2, Some(b_parts))).await;
    assert_eq!((b4.error, b4.assignment), (0, None), "an unchanged assignment is not sent");
    assert_eq!(w.c.describe_consumer("g").unwrap().state, "Stable");
    // A heartbeat at an epoch the member is not at is fenced.
    let stale = hb(&w, beat("a", e1 - 1, None)).await;
    assert_eq!(stale.error, errors::FENCED_MEMBER_EPOCH);
    let unknown = hb(&w, beat("zz", e2, None)).await;
    assert_eq!(unknown.error, errors::UNKNOWN_MEMBER_ID);
}

/// A member not heard from for the session timeout is fenced and its partitions go to
/// the others; one that leaves (epoch -1) frees them at once.
#[tokio::test]
async fn a_silent_member_is_fenced_and_a_leaving_one_frees_its_partitions() {
    let w = world();
    let a = hb(&w, join_args("a")).await;
    let b = hb(&w, join_args("b")).await;
    let a = hb(&w, beat("a", a.epoch, None)).await;
    let _a = hb(&w, beat("a", a.epoch, a.assignment.clone())).await;
    let b = hb(&w, beat("b", b.epoch, Some(Partitions::new()))).await;
    assert_eq!(count(&b.assignment), 2);
    // b heartbeats halfway through, twice; a stays silent.
    for _ in 0..2 {
        w.clock.advance(SESSION / 2 + Duration::from_millis(10));
        let _ = hb(&w, beat("b", b.epoch, b.assignment.clone())).await;
        w.c.expire_sessions();
    }
    let info = w.c.describe_consumer("g").unwrap();
    assert_eq!(info.members.len(), 1, "a was fenced");
    let b2 = hb(&w, beat("b", b.epoch, b.assignment.clone())).await;
    assert_eq!((b2.error, count(&b2.assignment)), (0, 4), "{b2:?}");
    // b leaves: the group is empty and a commit from outside the protocol is taken.
    let left = hb(&w, beat("b", b2.epoch, None).with_epoch(-1)).await;
    assert_eq!((left.error, left.epoch), (0, -1));
    assert_eq!(w.c.describe_consumer("g").unwrap().state, "Empty");
    assert_eq!(w.c.check_commit("g", -1, "", None), errors::NONE);
}

impl HeartbeatArgs {
    fn with_epoch(mut self, epoch: i32) -> Self {
        self.epoch = epoch;
        self
    }
}

/// A static member that leaves with epoch -2 keeps its partitions; a new member id under
/// the same instance takes them (at the old epoch, no rebalance); a second live claimant
/// of the instance is refused.
#[tokio::test]
async fn a_static_member_comes_back_to_its_partitions() {
    let w = world();
    let mut args = join_args("s1");
    args.instance_id = Some("i".into());
    let s1 = hb(&w, args.clone()).await;
    assert_eq!(count(&s1.assignment), 4);
    let mut leave = beat("s1", s1.epoch, None).with_epoch(-2);
    leave.instance_id = Some("i".into());
    assert_eq!(hb(&w, leave).await.epoch, -2);
    let epoch = w.c.describe_consumer("g").unwrap().epoch;
    args.member_id = "s2".into();
    let s2 = hb(&w, args.clone()).await;
    assert_eq!((s2.error, s2.epoch, count(&s2.assignment)), (0, s1.epoch, 4), "{s2:?}");
    assert_eq!(w.c.describe_consumer("g").unwrap().epoch, epoch, "no rebalance");
    args.member_id = "s3".into();
    assert_eq!(hb(&w, args).await.error, errors::UNRELEASED_INSTANCE_ID);
    let mut old = beat("s1", s1.epoch, None);
    old.instance_id = Some("i".into());
    assert_eq!(hb(&w, old).await.error, errors::UNKNOWN_MEMBER_ID);
}

/// A regex subscription follows the topics: it is matched at the heartbeat after the one
/// that brought it (named topics first, as Kafka), a new matching topic moves the group
/// epoch and is assigned; a bad regex and an unknown assignor are refused before anything
/// changes.
#[tokio::test]
async fn regex_subscriptions_follow_new_topics_and_bad_input_is_refused() {
    let w = world();
    let mut args = join_args("a");
    args.names = None;
    args.regex = Some("t.*".into());
    let a = hb(&w, args.clone()).await;
    assert_eq!((a.error, count(&a.assignment)), (0, 0), "a new regex is matched next time");
    let a = hb(&w, beat("a", a.epoch, Some(Partitions::new()))).await;
    assert_eq!((a.error, count(&a.assignment)), (0, 4), "{a:?}");
    w.topics.0.lock().unwrap().insert("t2".into(), (Uuid::from_u128(2), 3));
    w.topics.0.lock().unwrap().insert("other".into(), (Uuid::from_u128(3), 3));
    w.clock.advance(crate::limits::CONSUMER_REGEX_REFRESH);
    let a2 = hb(&w, beat("a", a.epoch, a.assignment.clone())).await;
    assert!(a2.epoch > a.epoch, "a new matching topic moves the epoch");
    assert_eq!(count(&a2.assignment), 7, "t's 4 and t2's 3, not other's");
    let mut bad = join_args("b");
    bad.regex = Some("(".into());
    assert_eq!(hb(&w, bad).await.error, errors::INVALID_REGULAR_EXPRESSION);
    let mut bad = join_args("b");
    bad.assignor = Some("sticky".into());
    assert_eq!(hb(&w, bad).await.error, errors::UNSUPPORTED_ASSIGNOR);
    assert_eq!(w.c.describe_consumer("g").unwrap().members.len(), 1);
    // A partition count that grows is assigned too.
    w.topics.0.lock().unwrap().insert("t".into(), (t(), 6));
    let a3 = hb(&w, beat("a", a2.epoch, a2.assignment.clone())).await;
    assert_eq!(count(&a3.assignment), 9);
}

/// A group's protocol follows its members: an empty classic group becomes a consumer
/// group and an empty consumer group a classic one; members whose embedded protocol does
/// not read are refused across protocols (no upgrade, no classic join).
#[tokio::test]
async fn groups_convert_between_protocols_only_when_empty() {
    let w = world();
    let session = Duration::from_secs(10);
    let protocols = vec![("range".to_string(), bytes::Bytes::from_static(b"m"))];
    let j = w.c.join(JoinRequest::of("", None, protocols.clone(), session), &w.topics).await;
    assert_eq!(j.error, 0);
    assert_eq!(hb(&w, join_args("a")).await.error, errors::GROUP_ID_NOT_FOUND);
    assert_eq!(w.c.leave("g", &[(j.member_id.clone(), None)]).await, vec![0]);
    let a = hb(&w, join_args("a")).await;
    assert_eq!((a.error, count(&a.assignment)), (0, 4));
    let refused = w.c.join(JoinRequest::of("", None, protocols.clone(), session), &w.topics).await;
    assert_eq!(refused.error, errors::INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(w.c.delete("g").await, errors::NON_EMPTY_GROUP);
    hb(&w, beat("a", a.epoch, None).with_epoch(-1)).await;
    let back = w.c.join(JoinRequest::of("", None, protocols, session), &w.topics).await;
    assert_eq!(back.error, 0);
    assert!(w.c.describe_consumer("g").is_none());
    // A heartbeat for a group this coordinator does not know: the member joins again.
    let mut lost = beat("a", 7, None);
    lost.group = "elsewhere".into();
    assert_eq!(hb(&w, lost).await.error, errors::UNKNOWN_MEMBER_ID);
}

/// A group's own `consumer.session.timeout.ms` replaces the broker's for its members, and
/// its heartbeat interval is what members are told.
#[tokio::test]
async fn a_groups_own_session_timeout_and_interval_apply() {
    let w = world();
    let mut args = join_args("a");
    args.session_timeout = Some(Duration::from_secs(2));
    args.heartbeat_interval = Some(Duration::from_millis(700));
    let a = hb(&w, args).await;
    assert_eq!((a.error, a.interval_ms), (0, 700));
    w.clock.advance(Duration::from_millis(2100));
    w.c.expire_sessions();
    assert_eq!(w.c.describe_consumer("g").unwrap().members.len(), 0, "fenced after 2 s, not 45");
}

/// A classic member's subscription to topic t (embedded protocol v1), listing what it owns.
fn subscription(owned: &[i32]) -> bytes::Bytes {
    let mut b = vec![0, 1, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
    if owned.is_empty() {
        b.extend_from_slice(&[0, 0, 0, 0]);
    } else {
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']);
        b.extend_from_slice(&(owned.len() as i32).to_be_bytes());
        owned.iter().for_each(|p| b.extend_from_slice(&p.to_be_bytes()));
    }
    b.into()
}

fn classic_protocols(owned: &[i32]) -> Vec<(String, bytes::Bytes)> {
    vec![("cooperative-sticky".to_string(), subscription(owned))]
}

/// The partitions of topic t a SyncGroup answer assigns.
fn synced(assignment: &[u8]) -> Vec<i32> {
    let named = super::embedded::assignment(assignment).expect("an assignment that reads");
    named.get("t").map(|ps| ps.iter().copied().collect()).unwrap_or_default()
}

/// Kafka's online upgrade and downgrade: a consumer-protocol member joins a classic group
/// with a member; the classic member keeps JoinGroup/SyncGroup/Heartbeat, is told to rejoin,
/// revokes before its partitions move (cooperative), and commits at its generation; when
/// the consumer-protocol member leaves, the group is classic again and rebalances.
#[tokio::test]
async fn a_classic_group_upgrades_online_and_downgrades_when_the_last_new_member_leaves() {
    let w = world();
    let session = Duration::from_secs(30);
    let a = w.c.join(JoinRequest::of("", None, classic_protocols(&[]), session), &w.topics).await;
    assert_eq!((a.error, a.leader == a.member_id), (0, true), "{a:?}");
    let all = super::embedded::encode_assignment(1, &[("t".to_string(), (0..4).collect())].into());
    let given = vec![(a.member_id.clone(), bytes::Bytes::from(all))];
    let s = w.c.sync("g", a.generation, &a.member_id, None, given).await;
    assert_eq!(synced(&s.assignment), [0, 1, 2, 3]);

    // A consumer-protocol member joins: the group is upgraded, A keeps its 4 partitions
    // until it gives two up, so x gets none yet.
    let x = hb(&w, join_args("x")).await;
    assert_eq!((x.error, count(&x.assignment)), (0, 0), "{x:?}");
    let info = w.c.describe_consumer("g").expect("a consumer group now");
    assert_eq!(info.members.len(), 2);
    assert!(w.c.describe("g").is_none(), "a group id is one kind of group");
    assert_eq!(w.c.check_commit("g", a.generation, &a.member_id, None), errors::NONE);
    let told = w.c.heartbeat("g", a.generation, &a.member_id, None);
    assert_eq!(told, errors::REBALANCE_IN_PROGRESS, "the group's epoch passed A's");

    // A rejoins owning all 4: it must revoke 2 first, at its old generation.
    let mut rejoin = JoinRequest::of(&a.member_id, None, classic_protocols(&[0, 1, 2, 3]), session);
    let r = w.c.join(rejoin.clone(), &w.topics).await;
    assert_eq!((r.error, r.generation, r.leader.as_str()), (0, a.generation, ""), "{r:?}");
    let s = w.c.sync("g", r.generation, &a.member_id, None, Vec::new()).await;
    let kept = synced(&s.assignment);
    assert_eq!((s.error, kept.len()), (0, 2), "{s:?}");
    let still = w.c.heartbeat("g", r.generation, &a.member_id, None);
    assert_eq!(still, errors::REBALANCE_IN_PROGRESS, "it has partitions to revoke");
    // Revoked: A rejoins owning its 2 and moves to the group's epoch; x gets the others.
    rejoin.protocols = classic_protocols(&kept);
    let r2 = w.c.join(rejoin, &w.topics).await;
    assert!(r2.error == 0 && r2.generation > a.generation, "{r2:?}");
    assert_eq!(w.c.heartbeat("g", r2.generation, &a.member_id, None), errors::NONE);
    let s2 = w.c.sync("g", r2.generation, &a.member_id, None, Vec::new()).await;
    assert_eq!(synced(&s2.assignment), kept);
    let x2 = hb(&w, beat("x", x.epoch, Some(Partitions::new()))).await;
    assert_eq!(count(&x2.assignment), 2, "{x2:?}");
    let stale = w.c.check_commit("g", a.generation, &a.member_id, None);
    assert_eq!(stale, errors::ILLEGAL_GENERATION, "a classic member's stale generation");
    assert_eq!(w.c.check_commit("g", r2.generation, &a.member_id, None), errors::NONE);
    let g = w.c.describe_consumer("g").unwrap();
    assert!(g.members.iter().any(|m| m.member.classic.is_some()), "A is a classic member");

    // x leaves: only classic members remain, so the group is classic again, rebalancing.
    assert_eq!(hb(&w, beat("x", x2.epoch, None).with_epoch(-1)).await.error, 0);
    assert!(w.c.describe_consumer("g").is_none());
    let classic = w.c.describe("g").expect("a classic group again");
    assert_eq!(
        (classic.state, classic.members.len()),
        (super::super::GroupState::PreparingRebalance, 1)
    );
    assert_eq!(synced(&classic.members[0].assignment), kept, "A's partitions as its assignment");
    let r3 =
        w.c.join(JoinRequest::of(&a.member_id, None, classic_protocols(&[]), session), &w.topics)
            .await;
    assert!(r3.error == 0 && r3.leader == a.member_id && r3.generation > r2.generation, "{r3:?}");
}

/// An upgrade needs the consumer protocol type; a classic static member that replaces the
/// last consumer-protocol member downgrades the group; LeaveGroup removes members of
/// either protocol.
#[tokio::test]
async fn upgrades_need_the_consumer_protocol_type_and_static_replacement_downgrades() {
    let w = world();
    let session = Duration::from_secs(30);
    let mut connect = JoinRequest::of("", None, classic_protocols(&[]), session);
    connect.protocol_type = "connect";
    let c1 = w.c.join(connect, &w.topics).await;
    assert_eq!(c1.error, 0);
    assert_eq!(hb(&w, join_args("x")).await.error, errors::GROUP_ID_NOT_FOUND);
    assert_eq!(w.c.leave("g", &[(c1.member_id.clone(), None)]).await, vec![0]);

    // A consumer group of a static consumer-protocol member s (instance i) and a classic one.
    let mut s_args = join_args("s");
    s_args.instance_id = Some("i".into());
    assert_eq!(hb(&w, s_args).await.error, 0);
    let b = w.c.join(JoinRequest::of("", None, classic_protocols(&[]), session), &w.topics).await;
    assert_eq!((b.error, b.leader.as_str()), (0, ""), "answered inside the consumer group");
    // A classic member joins under instance i: it replaces s, and the group goes classic.
    let i =
        w.c.join(JoinRequest::of("", Some("i"), classic_protocols(&[]), session), &w.topics).await;
    assert_eq!(i.error, 0, "{i:?}");
    assert!(w.c.describe_consumer("g").is_none());
    let g = w.c.describe("g").expect("classic again");
    assert_eq!(g.members.len(), 2);
    // A LeaveGroup of a member in a consumer group works too.
    let c = w.c.leave("g", &[(b.member_id.clone(), None), ("nobody".into(), None)]).await;
    assert_eq!(c, vec![0, errors::UNKNOWN_MEMBER_ID]);
}

/// A classic member told to rejoin that keeps heartbeating but never rejoins is fenced
/// after its rebalance timeout (Kafka's join timeout), so its partitions move on.
#[tokio::test]
async fn a_classic_member_that_never_rejoins_is_fenced_after_its_rebalance_timeout() {
    let w = world();
    let mut j = JoinRequest::of("", None, classic_protocols(&[]), Duration::from_secs(30));
    j.rebalance_timeout = Duration::from_secs(10);
    let a = w.c.join(j, &w.topics).await;
    let all = super::embedded::encode_assignment(1, &[("t".to_string(), (0..4).collect())].into());
    let given = vec![(a.member_id.clone(), bytes::Bytes::from(all))];
    assert_eq!(w.c.sync("g", a.generation, &a.member_id, None, given).await.error, 0);
    let x = hb(&w, join_args("x")).await;
    assert_eq!(x.error, 0);
    for _ in 0..2 {
        let told = w.c.heartbeat("g", a.generation, &a.member_id, None);
        assert_eq!(told, errors::REBALANCE_IN_PROGRESS);
        w.clock.advance(Duration::from_secs(6));
        w.c.expire_sessions();
    }
    let g = w.c.describe_consumer("g").expect("still a consumer group");
    let ids: Vec<&str> = g.members.iter().map(|m| m.member.id.as_str()).collect();
    assert_eq!(ids, ["x"], "A was fenced though its session was kept");
    let x2 = hb(&w, beat("x", x.epoch, Some(Partitions::new()))).await;
    assert_eq!(count(&x2.assignment), 4, "A's partitions moved to x: {x2:?}");
}
