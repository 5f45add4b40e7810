//! Static members (KIP-345): a member known by its `group.instance.id` keeps its place
//! across restarts; its old member id is fenced.

use bytes::Bytes;

use super::{Group, GroupState, JoinResult, SyncResult, members_of};
use crate::errors;

/// FENCED_INSTANCE_ID when `instance_id` names a static member other than `member_id`.
pub(super) fn fenced(g: &Group, member_id: &str, instance_id: Option<&str>) -> Option<i16> {
    let owner = g.statics.get(instance_id?)?;
    (owner != member_id).then_some(errors::FENCED_INSTANCE_ID)
}

/// The member a LeaveGroup entry names: by its instance id if it has one (a static member;
/// a member id given too must be the instance's), else by its member id. `statics`:
/// instance id → member id.
pub(super) fn leaver(
    statics: &std::collections::BTreeMap<String, String>,
    id: &str,
    instance: Option<&str>,
) -> Result<String, i16> {
    match instance.map(|i| statics.get(i)) {
        Some(None) => Err(errors::UNKNOWN_MEMBER_ID),
        Some(Some(owner)) if !id.is_empty() && id != owner => Err(errors::FENCED_INSTANCE_ID),
        Some(Some(owner)) => Ok(owner.clone()),
        None => Ok(id.to_string()),
    }
}

/// Ends a replaced static member's waits with FENCED_INSTANCE_ID.
fn fence_member(g: &mut Group, id: &str) {
    if let Some(tx) = g.joins.remove(id) {
        let _ = tx.send(JoinResult { error: errors::FENCED_INSTANCE_ID, ..JoinResult::default() });
    }
    if let Some(tx) = g.syncs.remove(id) {
        let _ = tx.send(SyncResult { error: errors::FENCED_INSTANCE_ID, ..SyncResult::default() });
    }
}

impl Group {
    /// A static member back under the new member id `id` takes the place of its old member
    /// `old`: that one's waits end fenced, its assignment (returned, if it was a member) and
    /// its leadership move to `id`.
    pub(super) fn take_static_place(&mut self, group: &str, old: &str, id: &str) -> Option<Bytes> {
        fence_member(self, old);
        let was = self.members.remove(old);
        if self.leader.as_deref() == Some(old) {
            self.leader = Some(id.to_string());
        }
        tracing::info!(group, old, new = id, "static member replaced");
        was.map(|m| m.assignment)
    }

    /// KIP-345's answer to a static member that replaced itself (`take_static_place`) in a
    /// stable group whose protocol every member still speaks: the current generation, its
    /// old assignment through SyncGroup, and no rebalance for anyone. `None`: rebalance.
    pub(super) fn stable_rejoin(&self, id: &str) -> Option<JoinResult> {
        let protocol = self.protocol.clone()?;
        let keeps = self.members.values().all(|m| m.protocols.iter().any(|(q, _)| *q == protocol));
        if self.state != GroupState::Stable || !keeps {
            return None;
        }
        let leader = self.leader.clone().unwrap_or_default();
        Some(JoinResult {
            error: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            members: if leader == id { members_of(self, &protocol) } else { Vec::new() },
            protocol: Some(protocol),
            leader,
            member_id: id.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use folio_meta::MetadataStore;
    use folio_meta::embedded::EmbeddedStore;
    use folio_proto::clock::ManualClock;

    use super::super::{Coordinator, GroupConfig, GroupState, JoinRequest, NoTopics};
    use crate::errors;

    const SESSION: Duration = Duration::from_secs(10);

    fn protocols() -> Vec<(String, Bytes)> {
        vec![("range".to_string(), Bytes::from_static(b"meta"))]
    }

    async fn join(c: &Coordinator, member: &str, instance: &str) -> super::JoinResult {
        let i = Some(instance);
        c.join(JoinRequest::of(member, i, protocols(), SESSION), &NoTopics).await
    }

    /// Two static members reach a stable generation; one comes back under a new member id:
    /// the same generation at once (no rebalance for the other), its old assignment, its
    /// old member id fenced everywhere; a LeaveGroup by instance id removes it; a session
    /// timeout is the other way out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_static_member_comes_back_without_a_rebalance_and_its_old_id_is_fenced() {
        // Every wait here ends at once or never: a bound turns "never" into a failure.
        let bound = Duration::from_secs(60);
        tokio::time::timeout(bound, static_member_story()).await.expect("a join or sync hung");
    }

    async fn static_member_story() {
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
        // `a` alone makes generation 1; `b` joins (and waits) and `a` rejoins: generation 2.
        let first = join(&c, "", "a").await;
        let (b, a) = tokio::join!(join(&c, "", "b"), join(&c, &first.member_id, "a"));
        assert_eq!((a.error, b.error, a.generation), (0, 0, b.generation));
        let (leader, follower) = if a.leader == a.member_id { (&a, &b) } else { (&b, &a) };
        let assignments = vec![
            (a.member_id.clone(), Bytes::from_static(b"a's")),
            (b.member_id.clone(), Bytes::from_static(b"b's")),
        ];
        let g = a.generation;
        let (s1, s2) = tokio::join!(
            c.sync("g", g, &leader.member_id, None, assignments),
            c.sync("g", g, &follower.member_id, None, Vec::new())
        );
        assert_eq!((s1.error, s2.error), (0, 0));
        assert_eq!(c.describe("g").unwrap().state, GroupState::Stable);

        // `a` restarts: a new member id, the same generation, no rebalance for `b`.
        let back = join(&c, "", "a").await;
        assert_eq!(back.error, 0);
        assert_ne!(back.member_id, a.member_id);
        assert_eq!(back.generation, g, "no new generation");
        assert_eq!(c.describe("g").unwrap().state, GroupState::Stable);
        assert_eq!(c.heartbeat("g", g, &b.member_id, Some("b")), errors::NONE, "b goes on");
        let s = c.sync("g", g, &back.member_id, Some("a"), Vec::new()).await;
        assert_eq!((s.error, s.assignment), (0, Bytes::from_static(b"a's")));
        assert_eq!(c.describe("g").unwrap().members.len(), 2);

        // The old member id is fenced wherever it shows up with the instance id.
        let old = a.member_id.as_str();
        assert_eq!(c.heartbeat("g", g, old, Some("a")), errors::FENCED_INSTANCE_ID);
        assert_eq!(c.check_commit("g", g, old, Some("a")), errors::FENCED_INSTANCE_ID);
        assert_eq!(
            c.sync("g", g, old, Some("a"), Vec::new()).await.error,
            errors::FENCED_INSTANCE_ID
        );
        assert_eq!(join(&c, old, "a").await.error, errors::FENCED_INSTANCE_ID);
        assert_eq!(c.heartbeat("g", g, old, None), errors::UNKNOWN_MEMBER_ID);
        assert_eq!(c.check_commit("g", g, &back.member_id, Some("a")), errors::NONE);

        // LeaveGroup by instance id (member id unknown to the caller) removes `a`; a wrong
        // member id for an instance is fenced; an unknown instance is unknown.
        let codes = c
            .leave(
                "g",
                &[
                    (old.to_string(), Some("b".to_string())),
                    (String::new(), Some("a".to_string())),
                    (String::new(), Some("nobody".to_string())),
                ],
            )
            .await;
        assert_eq!(codes, [errors::FENCED_INSTANCE_ID, errors::NONE, errors::UNKNOWN_MEMBER_ID]);
        assert_eq!(c.describe("g").unwrap().members.len(), 1);

        // A static member that misses its session is removed like any other.
        clock.advance(SESSION * 2);
        c.step().await;
        assert!(c.describe("g").unwrap().members.is_empty(), "b's session ended");
        assert_eq!(c.heartbeat("g", g, &b.member_id, Some("b")), errors::UNKNOWN_MEMBER_ID);
    }
}
