//! The coordinator's claim on a group: the fence on its generations and offset writes.
//!
//! ```text
//! group-claims/<group, escaped>   "<node id> <coordinator epoch> <generation> <written ms>"
//! ```
//! (a record of an older Folio has no time: written at 0.) A coordinator writes the claim
//! (a compare-and-set of the record it read, with the next epoch and its node id) before
//! it answers a new generation of the group, and before it writes offsets without
//! holding the claim already. The record's generation only grows: a rebalance claims the
//! group's next generation as one past both the record's and its own, so a generation
//! is answered by one coordinator only, and generations go on from where the last
//! coordinator left them when the group moves (members of the old coordinator are told
//! ILLEGAL_GENERATION, never confused with a new generation of the same number). Every
//! offset write compares the claim's version in the same transaction. So a write of a
//! coordinator that lost the group (to another broker, or to a newer generation of its own)
//! can never land after the claim moved: an isolated broker's commits in flight, a stale
//! generation's commit, and a commit whose answer was an error (the claim is dropped then,
//! and the next commit claims anew, fencing it) never overwrite a newer offset; a commit
//! never claims for a generation older than the record's. Membership itself stays in memory
//! (members rejoin a new coordinator); the claim is what makes the move safe.
//!
//! A claim is dropped when the group moves away, when a write of it fails, and deleted
//! with the group (DeleteGroups), with its last offsets when they expire, or when it is
//! older than `offsets_retention` and the group has neither offsets nor members.

use folio_meta::{Compare, MetaError, Txn, Version};

use super::Coordinator;
use super::record::escape;

/// A claim this coordinator holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Claim {
    /// The claim record's version: every offset write compares it.
    pub version: Version,
    pub epoch: u64,
    /// The group's generation when it was taken (-1: commits from outside the protocol).
    pub generation: i32,
}

/// Why an offset write was not taken.
#[derive(Debug)]
pub enum CommitError {
    /// The store failed or did not answer: the write may still land, so the claim is
    /// dropped (the next commit fences it). COORDINATOR_NOT_AVAILABLE.
    Store(MetaError),
    /// The claim moved: to another broker (NOT_COORDINATOR) or to a newer generation here
    /// (ILLEGAL_GENERATION).
    Fenced { code: i16, holder: i32 },
}

impl CommitError {
    /// The Kafka code the commit's partitions are answered with.
    pub fn code(&self) -> i16 {
        match self {
            CommitError::Store(_) => crate::errors::COORDINATOR_NOT_AVAILABLE,
            CommitError::Fenced { code, .. } => *code,
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CommitError::Store(e) => Some(e),
            CommitError::Fenced { .. } => None,
        }
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Store(e) => write!(f, "{e}"),
            CommitError::Fenced { holder, .. } => {
                write!(f, "the group's claim moved (held by broker {holder})")
            }
        }
    }
}

/// A claim record's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClaimRecord {
    pub node: i32,
    pub epoch: u64,
    /// The group's newest generation claimed (-1: only commits from outside the protocol).
    pub generation: i32,
    /// When it was written (clock ms; 0 in a record of an older Folio).
    pub written_ms: u64,
}

impl ClaimRecord {
    fn encode(&self) -> String {
        format!("{} {} {} {}", self.node, self.epoch, self.generation, self.written_ms)
    }

    /// A record's value; `None` if damaged.
    pub(super) fn parse(v: &[u8]) -> Option<ClaimRecord> {
        let s = std::str::from_utf8(v).ok()?;
        let mut f = s.split(' ');
        let node = f.next()?.parse().ok()?;
        let epoch = f.next()?.parse().ok()?;
        let generation = f.next()?.parse().ok()?;
        let written_ms = match f.next() {
            Some(t) => t.parse().ok()?,
            None => 0,
        };
        f.next().is_none().then_some(ClaimRecord { node, epoch, generation, written_ms })
    }
}

impl Coordinator {
    pub(super) fn claim_key(&self, group: &str) -> String {
        self.keys.group_claim(&escape(group))
    }

    /// The claim to write `group`'s offsets under at `generation`: the one held, or a new
    /// one (the next epoch, compare-and-set), taken only in `tenure` (the commit's).
    /// `known`: the claim this coordinator held when the commit arrived. A commit that
    /// arrived under one claim is written under that one only: if it is gone (lost, and
    /// perhaps taken back since), another coordinator may have acknowledged newer offsets
    /// meanwhile, and the commit is refused with NOT_COORDINATOR (the client retries).
    /// This holds even when this coordinator never saw the move (cut off from the store
    /// the whole time, its tenure never changed).
    pub(super) async fn claim(
        &self,
        group: &str,
        generation: i32,
        tenure: u64,
        known: Option<Version>,
    ) -> Result<Claim, CommitError> {
        let lost = |holder: i32| {
            tracing::info!(
                group,
                holder,
                "an offset commit refused: the claim it arrived under is gone"
            );
            CommitError::Fenced { code: crate::errors::NOT_COORDINATOR, holder }
        };
        let held = |c: &Coordinator| -> Result<Option<Claim>, CommitError> {
            // A member's generation must still be the group's (checked before, but a
            // rebalance may have come since): an older one never claims.
            if generation >= 0 {
                let now = c.generation_of(group);
                if now != Some(generation) {
                    return Err(CommitError::Fenced {
                        code: crate::errors::ILLEGAL_GENERATION,
                        holder: c.node_id,
                    });
                }
            }
            let claims = c.claims.lock().expect("claims lock");
            Ok(claims.get(group).filter(|h| h.generation == generation).copied())
        };
        // A held claim serves only a commit that arrived under it.
        let keep = |c: Claim| match known.is_none_or(|k| k == c.version) {
            true => Ok(c),
            false => Err(lost(self.node_id)),
        };
        if let Some(c) = held(self)? {
            return keep(c);
        }
        // One claim taken at a time (and checked again once it is this one's turn).
        let _turn = self.claiming.lock().await;
        if let Some(c) = held(self)? {
            return keep(c);
        }
        let key = self.claim_key(group);
        let current = self.meta.get(&key).await.map_err(CommitError::Store)?;
        // The read may have waited out a move away and back: never claim for a commit
        // from an earlier tenure.
        self.same_tenure(tenure)?;
        let (was, guard) = self.claim_read(&key, current.as_ref());
        if known.is_some() && current.as_ref().map(|v| v.version) != known {
            // The claim it arrived under is no longer the record: someone claimed since.
            return Err(lost(was.map_or(-1, |r| r.node)));
        }
        if generation >= 0 && was.is_some_and(|r| r.generation > generation) {
            // A newer generation was claimed (here since, or by another coordinator).
            let holder = was.map_or(-1, |r| r.node);
            return Err(CommitError::Fenced { code: crate::errors::ILLEGAL_GENERATION, holder });
        }
        let claimed = was.map_or(generation, |r| r.generation.max(generation));
        let (version, epoch) = self.write_claim(group, key, guard, was, claimed).await?;
        let claim = Claim { version, epoch, generation };
        tracing::info!(group, epoch, generation, node_id = self.node_id, "group claimed");
        self.claims.lock().expect("claims lock").insert(group.to_string(), claim);
        Ok(claim)
    }

    /// Writes the claim at `key` for this node with the epoch after `was`'s and `generation`,
    /// if `guard` (the record as read) still holds; returns (the record's version, epoch).
    /// A record changed meanwhile (another coordinator claiming at the same moment) is a
    /// store error the client retries.
    async fn write_claim(
        &self,
        group: &str,
        key: String,
        guard: Compare,
        was: Option<ClaimRecord>,
        generation: i32,
    ) -> Result<(Version, u64), CommitError> {
        let epoch = was.map_or(0, |r| r.epoch) + 1;
        let record =
            ClaimRecord { node: self.node_id, epoch, generation, written_ms: self.clock.now_ms() };
        let out = self
            .meta
            .txn(Txn::new().compare(guard).put(key, record.encode()))
            .await
            .map_err(CommitError::Store)?;
        if !out.succeeded {
            return Err(CommitError::Store(MetaError::unavailable(format!(
                "group {group}: its claim changed while it was taken"
            ))));
        }
        Ok((out.revision, epoch))
    }

    /// The record read at `key` (`None`: absent or damaged, so taken over from nothing) and
    /// the compare that writes it back only if it did not change.
    fn claim_read(
        &self,
        key: &str,
        current: Option<&folio_meta::Versioned>,
    ) -> (Option<ClaimRecord>, Compare) {
        match current {
            Some(v) => {
                let r = ClaimRecord::parse(&v.value);
                if r.is_none() {
                    tracing::warn!(key, "a damaged group claim is taken over");
                }
                (r, Compare::Version(key.to_string(), v.version))
            }
            None => (None, Compare::Absent(key.to_string())),
        }
    }

    /// Claims `group`'s next generation for a rebalance ending here: one past both the
    /// record's and `known` (the group's generation here), written with the next epoch in
    /// a compare-and-set, only in `tenure` (the one the join phase ended in). The claim is
    /// not yet held: the caller holds it once the group took the generation.
    pub(super) async fn claim_generation(
        &self,
        group: &str,
        known: i32,
        tenure: u64,
    ) -> Result<Claim, CommitError> {
        let _turn = self.claiming.lock().await;
        let key = self.claim_key(group);
        let current = self.meta.get(&key).await.map_err(CommitError::Store)?;
        self.same_tenure(tenure)?;
        let (was, guard) = self.claim_read(&key, current.as_ref());
        let last = was.map_or(-1, |r| r.generation).max(known);
        let generation = last.checked_add(1).ok_or_else(|| {
            CommitError::Store(MetaError::unavailable(format!(
                "group {group}: generations exhausted"
            )))
        })?;
        let (version, epoch) = self.write_claim(group, key, guard, was, generation).await?;
        tracing::info!(
            group,
            epoch,
            generation,
            node_id = self.node_id,
            "group generation claimed"
        );
        Ok(Claim { version, epoch, generation })
    }

    /// Drops this coordinator's claim on `group` if it is still `claim` (a failed write:
    /// the next commit claims anew, fencing whatever of it is still in flight).
    pub(super) fn drop_claim(&self, group: &str, claim: Option<Claim>) {
        let mut claims = self.claims.lock().expect("claims lock");
        if claim.is_none() || claims.get(group) == claim.as_ref() {
            claims.remove(group);
        }
    }

    /// After a write refused by a compare: `Some` if the claim moved (who holds it now),
    /// `None` if it is still `claim` (a topic's compare refused it).
    pub(super) async fn claim_moved(
        &self,
        group: &str,
        claim: Claim,
    ) -> Result<Option<CommitError>, MetaError> {
        let current = self.meta.get(&self.claim_key(group)).await?;
        if current.as_ref().is_some_and(|v| v.version == claim.version) {
            return Ok(None);
        }
        self.drop_claim(group, Some(claim));
        let holder = current.and_then(|v| ClaimRecord::parse(&v.value)).map_or(-1, |r| r.node);
        let code = if holder == self.node_id {
            crate::errors::ILLEGAL_GENERATION
        } else {
            crate::errors::NOT_COORDINATOR
        };
        tracing::info!(group, holder, "an offset write refused: the group's claim moved");
        Ok(Some(CommitError::Fenced { code, holder }))
    }

    /// The version of the claim held on `group`, if any: an arriving commit's `known`.
    pub fn claim_version(&self, group: &str) -> Option<Version> {
        self.claims.lock().expect("claims lock").get(group).map(|c| c.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_records_parse_and_damage_is_refused() {
        let r = |node, epoch, generation, written_ms| {
            Some(ClaimRecord { node, epoch, generation, written_ms })
        };
        assert_eq!(ClaimRecord::parse(b"3 17 -1"), r(3, 17, -1, 0), "an older Folio's record");
        assert_eq!(ClaimRecord::parse(b"3 17 4 99"), r(3, 17, 4, 99));
        let w = ClaimRecord { node: 2, epoch: 5, generation: 7, written_ms: 1234 };
        assert_eq!(ClaimRecord::parse(w.encode().as_bytes()), Some(w));
        for bad in [&b""[..], b"3 17", b"3 17 1 9 9", b"x 1 1", b"3 17 1 -9", b"\xff"] {
            assert_eq!(ClaimRecord::parse(bad), None);
        }
    }

    use std::sync::Arc;

    use folio_meta::MetadataStore;
    use folio_meta::records::Record;

    use super::super::{Group, GroupConfig, JoinRequest, NoTopics, OffsetRecord};

    fn record(offset: i64) -> OffsetRecord {
        OffsetRecord {
            offset,
            leader_epoch: -1,
            commit_ms: 1,
            metadata: String::new(),
            expire_ms: None,
        }
    }

    /// #44 item 2: offsets are written only under the group's claim. A coordinator that
    /// lost the group (another broker claimed it), a stale generation, and a write whose
    /// answer was an error (fenced by the next claim) never land after a newer offset.
    #[tokio::test]
    async fn offsets_are_written_only_under_the_groups_claim() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetadataStore> =
            Arc::new(folio_meta::embedded::EmbeddedStore::open(dir.path()).unwrap());
        let faulty = Arc::new(folio_meta::faulty::FaultyStore::new(store.clone()));
        let keys = folio_meta::keys::Keys::default();
        let version =
            store.put(&keys.topic("t"), "topic".into(), folio_meta::Expect::Any).await.unwrap();
        let id = uuid::Uuid::from_u128(7);
        let clock: Arc<dyn folio_meta::Clock> = Arc::new(folio_meta::ManualClock::new());
        let (moves, tenure) = tokio::sync::watch::channel(0u64);
        let coordinator = |meta: Arc<dyn MetadataStore>, node| {
            let t = tenure.clone();
            Coordinator::new(GroupConfig::default(), meta, keys.clone(), clock.clone(), node, t)
        };
        let (one, two) = (coordinator(store.clone(), 1), coordinator(store.clone(), 2));
        let w = |o| vec![("t".to_string(), id, version, 0, record(o))];
        let committed = async |c: &Coordinator| c.committed("g").await.unwrap()[&(id, 0)].offset;
        one.commit("g", -1, (0, None), &w(10)).await.unwrap();
        // Broker 2 takes the group over; broker 1, isolated, still thinks it has it.
        two.commit("g", -1, (0, None), &w(20)).await.unwrap();
        match one.commit("g", -1, (0, None), &w(5)).await {
            Err(CommitError::Fenced { code, holder: 2 }) => {
                assert_eq!(code, crate::errors::NOT_COORDINATOR)
            }
            other => panic!("a stale coordinator's commit: {other:?}"),
        }
        assert_eq!(committed(&two).await, 20);

        // A stale generation: checked at 5, the group moved on to 6 before it wrote.
        let three = coordinator(faulty.clone(), 3);
        three.groups.lock().unwrap().insert("g".into(), Group { generation: 5, ..Group::new(0) });
        three.commit("g", 5, (0, None), &w(30)).await.unwrap();
        let at_five = three.claim_version("g").unwrap();
        three.groups.lock().unwrap().get_mut("g").unwrap().generation = 6;
        match three.commit("g", 5, (0, None), &w(25)).await {
            Err(CommitError::Fenced { code, .. }) => {
                assert_eq!(code, crate::errors::ILLEGAL_GENERATION)
            }
            other => panic!("{other:?}"),
        }
        three.commit("g", 6, (0, None), &w(40)).await.unwrap();
        // A gen-5 write that was still in flight then arrives: it compares the old claim.
        let late = Txn::new()
            .compare(Compare::Version(three.claim_key("g"), at_five))
            .put(three.offset_key("g", id, 0), record(31).encode());
        assert!(!store.txn(late).await.unwrap().succeeded, "a stale generation's write landed");

        // A write answered with an error may land later: the claim is dropped with the
        // answer, and the next commit claims anew, so the late write cannot land after it.
        let held = three.claim_version("g").unwrap();
        faulty.fail_txns(1);
        assert!(matches!(
            three.commit("g", 6, (0, None), &w(50)).await,
            Err(CommitError::Store(_))
        ));
        assert_eq!(three.claim_version("g"), None);
        three.commit("g", 6, (0, None), &w(60)).await.unwrap();
        assert_ne!(three.claim_version("g"), Some(held));
        let late = Txn::new()
            .compare(Compare::Version(three.claim_key("g"), held))
            .put(three.offset_key("g", id, 0), record(50).encode());
        assert!(!store.txn(late).await.unwrap().succeeded, "an errored write landed later");
        assert_eq!(committed(&three).await, 60);

        // A commit that arrived before ownership moved (and maybe back) is refused: its
        // client has long given up, and a newer offset may have been written elsewhere.
        let arrived = three.tenure();
        moves.send_modify(|n| *n += 1);
        match three.commit("g", 6, (arrived, None), &w(55)).await {
            Err(CommitError::Fenced { code, .. }) => {
                assert_eq!(code, crate::errors::NOT_COORDINATOR)
            }
            other => panic!("a commit from an earlier tenure: {other:?}"),
        }
        three.commit("g", 6, (three.tenure(), None), &w(70)).await.unwrap();
        assert_eq!(committed(&three).await, 70);

        // The same move unseen (seed 373 of the simulator's Kafka runs): broker 1, cut off
        // from the store, never saw its tenure end; two commits arrived under its claim
        // while broker 2 took the group and committed 80. The first is refused by the
        // claim's compare (dropping the claim); the second must not take a new claim and
        // land: it arrived under the old one. Nor may one arriving so after broker 1 took
        // the group back with a fresh commit.
        let (one, two) = (coordinator(store.clone(), 1), coordinator(store.clone(), 2));
        one.commit("g", -1, (one.tenure(), None), &w(75)).await.unwrap();
        let known = one.claim_version("g");
        two.commit("g", -1, (two.tenure(), None), &w(80)).await.unwrap();
        for late in [76, 77] {
            match one.commit("g", -1, (one.tenure(), known), &w(late)).await {
                Err(CommitError::Fenced { code, .. }) => {
                    assert_eq!(code, crate::errors::NOT_COORDINATOR)
                }
                other => panic!("commit {late}, arrived under a lost claim: {other:?}"),
            }
        }
        assert_eq!(committed(&one).await, 80, "offsets moved backwards");
        one.commit("g", -1, (one.tenure(), None), &w(81)).await.unwrap();
        assert!(one.commit("g", -1, (one.tenure(), known), &w(78)).await.is_err());
        assert_eq!(committed(&one).await, 81);
    }

    /// #46 item 4: a generation has one coordinator. Generations are claimed in the store
    /// before they are answered, so a group that moves goes on from the last generation
    /// (not from 1 again), a stale coordinator's next rebalance never reuses a number the
    /// new one answered, and neither coordinator commits for a generation older than the
    /// newest claimed (ILLEGAL_GENERATION or NOT_COORDINATOR).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn generations_go_on_across_coordinators_and_none_is_answered_twice() {
        let bound = std::time::Duration::from_secs(60);
        tokio::time::timeout(bound, generations_story()).await.expect("a join hung");
    }

    async fn generations_story() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MetadataStore> =
            Arc::new(folio_meta::embedded::EmbeddedStore::open(dir.path()).unwrap());
        let keys = folio_meta::keys::Keys::default();
        let version =
            store.put(&keys.topic("t"), "topic".into(), folio_meta::Expect::Any).await.unwrap();
        let id = uuid::Uuid::from_u128(7);
        let clock: Arc<dyn folio_meta::Clock> = Arc::new(folio_meta::ManualClock::new());
        let tenure = tokio::sync::watch::channel(0u64).1;
        let config = GroupConfig {
            initial_rebalance_delay: std::time::Duration::ZERO,
            ..GroupConfig::default()
        };
        let coordinator = |node| {
            let (meta, t) = (store.clone(), tenure.clone());
            Coordinator::new(config.clone(), meta, keys.clone(), clock.clone(), node, t)
        };
        let (one, two) = (coordinator(1), coordinator(2));
        let session = std::time::Duration::from_secs(10);
        let join = async |c: &Coordinator, member: &str| {
            let protocols = vec![("range".to_string(), bytes::Bytes::new())];
            let r = c.join(JoinRequest::of(member, None, protocols, session), &NoTopics).await;
            assert_eq!(r.error, 0, "join at broker {}", c.node_id);
            r
        };
        let w = |o| vec![("t".to_string(), id, version, 0, record(o))];
        let a = join(&one, "").await;
        let a = join(&one, &a.member_id).await;
        assert_eq!(a.generation, 2, "two rebalances at broker 1");
        one.commit("g", 2, (0, None), &w(10)).await.unwrap();

        // The group moves to broker 2: its first generation there follows broker 1's.
        let b = join(&two, "").await;
        assert_eq!(b.generation, 3, "broker 2 goes on from the claimed generation");
        // Broker 1 (isolated, still serving its member) cannot commit under its old claim,
        // nor claim generation 2 again, and its next rebalance is not 3.
        match one.commit("g", 2, (0, None), &w(5)).await {
            Err(CommitError::Fenced { code, holder: 2 }) => {
                assert_eq!(code, crate::errors::NOT_COORDINATOR)
            }
            other => panic!("a stale coordinator's commit: {other:?}"),
        }
        match one.commit("g", 2, (0, None), &w(6)).await {
            Err(CommitError::Fenced { code, holder: 2 }) => {
                assert_eq!(code, crate::errors::ILLEGAL_GENERATION)
            }
            other => panic!("a commit for a generation older than the claimed: {other:?}"),
        }
        let a = join(&one, &a.member_id).await;
        assert_eq!(a.generation, 4, "a stale coordinator's rebalance takes the next number");
        // Now broker 2's generation 3 is behind the claim: its commit is refused.
        assert!(matches!(
            two.commit("g", 3, (0, None), &w(7)).await,
            Err(CommitError::Fenced { .. })
        ));
        assert_eq!(one.committed("g").await.unwrap()[&(id, 0)].offset, 10);
        let claimed =
            ClaimRecord::parse(&store.get(&one.claim_key("g")).await.unwrap().unwrap().value);
        assert_eq!(claimed.map(|r| (r.node, r.generation)), Some((1, 4)));
        drop(b);
    }
}
