//! How groups come and go: the limit on groups a coordinator keeps (`groups_max`), on
//! groups a client may create by committing (`new_groups_per_client_per_minute_max`), and
//! the expiry of committed offsets (`offsets.retention.minutes`, Kafka's rules for classic
//! groups): a group with members keeps its offsets; one without expires each offset at its
//! own expiry time if the commit named one (OffsetCommit v2-4's retention), else a
//! retention after its commit or after the group became empty, whichever is later. A group
//! left with neither members nor offsets is gone, its claim with it; a claim of a group
//! that never committed goes once it is `offsets.retention.minutes` old and the group has
//! no members.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use folio_meta::records::Record;
use folio_meta::{Compare, MetaError, Txn, list_all};

use super::claim::ClaimRecord;
use super::record::unescape;
use super::{Coordinator, Group, GroupState, OffsetRecord};
use crate::limits::Limit;

/// One minute, the window of `new_groups_per_client_per_minute_max`.
const NEW_GROUPS_WINDOW_MS: u64 = 60_000;

impl Coordinator {
    /// Whether one more group fits under `groups_max` (counted: the groups with members
    /// here and those whose offsets this coordinator claimed). Counts the refusal.
    pub(super) fn room_for_group(&self, groups: &BTreeMap<String, Group>, group: &str) -> bool {
        let consumers = self.consumers.lock().expect("consumers lock");
        let shares = self.shares.lock().expect("shares lock").len();
        let claims = self.claims.lock().expect("claims lock");
        let held = groups.len()
            + consumers.len()
            + shares
            + claims
                .keys()
                .filter(|g| !groups.contains_key(*g) && !consumers.contains_key(*g))
                .count();
        if held < self.config.groups_max {
            return true;
        }
        tracing::warn!(
            group,
            groups = held,
            groups_max = self.config.groups_max,
            "a new group refused: this coordinator holds groups_max groups (POLICY_VIOLATION)"
        );
        false
    }

    /// Whether an offset commit of `group` from `client_id` may go on: a group this
    /// coordinator holds always; a new one within `groups_max` and its client's
    /// `new_groups_per_client_per_minute_max`. `Err`: the limit it hit (answered
    /// POLICY_VIOLATION).
    pub fn admit_commit(&self, group: &str, client_id: &str) -> Result<(), Limit> {
        let groups = self.groups.lock().expect("groups lock");
        if groups.contains_key(group)
            || self.consumers.lock().expect("consumers lock").contains_key(group)
            || self.claims.lock().expect("claims lock").contains_key(group)
        {
            return Ok(());
        }
        if !self.room_for_group(&groups, group) {
            return Err(Limit::Groups);
        }
        drop(groups);
        let now = self.clock.now_ms();
        let mut window = self.new_groups.lock().expect("new groups lock");
        if now.saturating_sub(window.0) >= NEW_GROUPS_WINDOW_MS {
            *window = (now, HashMap::new());
        }
        let max = self.config.new_groups_per_client_per_minute_max;
        // The map holds one entry per client this minute, at most `groups_max` (each
        // entry is at least one group admitted, and those count against `groups_max`).
        let n = window.1.get(client_id).copied().unwrap_or(0);
        if n >= max {
            tracing::warn!(
                group,
                client_id,
                new_groups_per_client_per_minute_max = max,
                "a commit creating a group refused: its client created too many this minute (POLICY_VIOLATION)"
            );
            return Err(Limit::NewGroupsPerClient);
        }
        window.1.insert(client_id.to_string(), n + 1);
        Ok(())
    }

    /// Removes the expired committed offsets of the groups `owns` says this broker
    /// coordinates (see the module doc), and the claims of groups left without offsets;
    /// returns how many offsets it removed. Each removal compares the record it read, so
    /// an offset committed again meanwhile stays.
    pub async fn expire_offsets(&self, owns: impl Fn(&str) -> bool) -> Result<usize, MetaError> {
        let now = self.clock.now_ms();
        let retention = self.config.offsets_retention.as_millis() as u64;
        let prefix = self.prefix();
        let mut by_group: BTreeMap<String, Vec<folio_meta::Versioned>> = BTreeMap::new();
        for v in list_all(self.meta.as_ref(), &prefix).await? {
            if let Some((g, _)) = v.key[prefix.len()..].split_once('/') {
                by_group.entry(unescape(g)).or_default().push(v);
            }
        }
        let with_offsets: BTreeSet<String> = by_group.keys().cloned().collect();
        let mut removed = 0;
        for (group, offsets) in by_group {
            if !owns(&group) {
                continue;
            }
            let empty_since = {
                let groups = self.groups.lock().expect("groups lock");
                let consumers = self.consumers.lock().expect("consumers lock");
                match (groups.get(&group), consumers.get(&group)) {
                    (Some(g), _) if !g.members.is_empty() => continue,
                    (_, Some(c)) if !c.is_empty() => continue,
                    (Some(g), _) if g.state != GroupState::Dead => g.empty_since,
                    (_, Some(c)) => c.empty_since,
                    _ => 0,
                }
            };
            let expired: Vec<&folio_meta::Versioned> = offsets
                .iter()
                .filter(|v| match OffsetRecord::decode(&v.key, &v.value) {
                    Ok(r) => {
                        let at = r.expire_ms.unwrap_or_else(|| {
                            r.commit_ms.max(empty_since).saturating_add(retention)
                        });
                        now >= at
                    }
                    Err(_) => false,
                })
                .collect();
            for chunk in expired.chunks((self.meta.txn_ops_max() / 2).max(1)) {
                let txn = chunk.iter().fold(Txn::new(), |t, v| {
                    t.compare(Compare::Version(v.key.clone(), v.version)).delete(v.key.clone())
                });
                if self.meta.txn(txn).await?.succeeded {
                    removed += chunk.len();
                }
            }
            if !expired.is_empty() {
                tracing::info!(group = %group, offsets = expired.len(), "committed offsets expired (offsets.retention.minutes)");
            }
            if expired.len() == offsets.len() {
                self.forget_expired(&group).await?;
            }
        }
        self.expire_claims(&with_offsets, &owns).await?;
        Ok(removed)
    }

    /// Deletes the claims of groups this broker coordinates that have no offsets and no
    /// members here, written longer than `offsets_retention` ago (a group that rebalanced
    /// and never committed). Each removal compares the record it read.
    async fn expire_claims(
        &self,
        with_offsets: &BTreeSet<String>,
        owns: impl Fn(&str) -> bool,
    ) -> Result<(), MetaError> {
        let now = self.clock.now_ms();
        let retention = self.config.offsets_retention.as_millis() as u64;
        let prefix = self.keys.group_claims();
        for v in list_all(self.meta.as_ref(), &prefix).await? {
            let group = unescape(&v.key[prefix.len()..]);
            if with_offsets.contains(&group) || !owns(&group) {
                continue;
            }
            let written = ClaimRecord::parse(&v.value).map_or(0, |r| r.written_ms);
            if now < written.saturating_add(retention) {
                continue;
            }
            {
                let groups = self.groups.lock().expect("groups lock");
                if groups.get(&group).is_some_and(|g| !g.members.is_empty() || g.claiming.is_some())
                    || self.consumers.lock().expect("consumers lock").contains_key(&group)
                {
                    continue;
                }
            }
            let txn = Txn::new().compare(Compare::Version(v.key.clone(), v.version)).delete(v.key);
            if self.meta.txn(txn).await?.succeeded {
                self.forget_expired_claim(&group);
                tracing::info!(group = %group, "group expired: a claim with no members and no committed offsets");
            }
        }
        Ok(())
    }

    /// A group whose claim expired: its held claim and its empty state go.
    fn forget_expired_claim(&self, group: &str) {
        self.drop_claim(group, None);
        let mut groups = self.groups.lock().expect("groups lock");
        if groups.get(group).is_some_and(|g| g.members.is_empty()) {
            groups.remove(group);
        }
    }

    /// A group whose every offset expired and that has no members: its claim, its lag
    /// figures and its empty state go.
    async fn forget_expired(&self, group: &str) -> Result<(), MetaError> {
        let key = self.claim_key(group);
        if let Some(v) = self.meta.get(&key).await? {
            self.meta
                .txn(Txn::new().compare(Compare::Version(key.clone(), v.version)).delete(key))
                .await?;
        }
        self.drop_claim(group, None);
        self.last_commits.lock().expect("commits lock").retain(|(g, _, _, _), _| g != group);
        let mut groups = self.groups.lock().expect("groups lock");
        if groups.get(group).is_some_and(|g| g.members.is_empty()) {
            groups.remove(group);
        }
        let mut consumers = self.consumers.lock().expect("consumers lock");
        if consumers.get(group).is_some_and(|c| c.is_empty()) {
            consumers.remove(group);
        }
        tracing::info!(group, "group expired: no members and no committed offsets");
        Ok(())
    }
}
