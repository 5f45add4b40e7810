//! Committed offsets in the metadata store: written under the group's claim
//! (`commit`), read (`committed`), listed with the groups (`list`), dropped with a topic
//! (`forget_topic`); the last offsets committed here for lag metrics.

use std::collections::BTreeMap;

use folio_meta::records::Record;
use folio_meta::{Compare, MetaError, Txn, Version, list_all};
use uuid::Uuid;

use super::record::unescape;
use super::{CommitError, Coordinator, GroupState, OffsetRecord};

impl Coordinator {
    /// Refuses a commit that arrived in an earlier tenure (see `Coordinator::tenure`).
    pub(super) fn same_tenure(&self, arrived: u64) -> Result<(), CommitError> {
        if self.tenure() == arrived {
            return Ok(());
        }
        Err(CommitError::Fenced { code: crate::errors::NOT_COORDINATOR, holder: self.node_id })
    }

    /// Writes committed offsets of `group` at `generation` (-1: from outside the group
    /// protocol): (topic name, topic id, the topic record's version as read, partition,
    /// record), under the group's claim (`claim`: taken first if not held). Each
    /// transaction compares the claim and the record of every topic it writes for at that
    /// version, so offsets are never written by a coordinator that lost the group, nor for
    /// a topic deleted (or re-created under a new id) in the meantime. Returns the writes a
    /// topic's compare left out (none: all written); the caller re-reads those topics and
    /// tries again or answers UNKNOWN_TOPIC_OR_PARTITION. `tenure`: this coordinator's
    /// when the commit arrived (`tenure`); a commit from an earlier tenure is refused with
    /// NOT_COORDINATOR. `known`: the claim held here when the commit arrived
    /// (`claim_version` then); the commit is written under that claim only (see `claim`).
    pub async fn commit(
        &self,
        group_id: &str,
        generation: i32,
        (tenure, known): (u64, Option<Version>),
        offsets: &[(String, Uuid, Version, i32, OffsetRecord)],
    ) -> Result<Vec<usize>, CommitError> {
        let claim = self.claim(group_id, generation, tenure, known).await?;
        let claim_key = self.claim_key(group_id);
        let mut refused = Vec::new();
        // Each offset takes a put and at most one topic-version compare; one for the claim.
        let per_txn = (self.meta.txn_ops_max().saturating_sub(1) / 2).max(1);
        for (c, chunk) in offsets.chunks(per_txn).enumerate() {
            // The claim's version is compared in the write itself: a move after this check
            // re-claims (a new version) and so fails the write.
            self.same_tenure(tenure)?;
            let mut txn = Txn::new().compare(Compare::Version(claim_key.clone(), claim.version));
            let mut guarded = std::collections::HashSet::new();
            for (name, topic, version, p, r) in chunk {
                if guarded.insert(name.as_str()) {
                    txn = txn.compare(Compare::Version(self.keys.topic(name), *version));
                }
                txn = txn.put(self.offset_key(group_id, *topic, *p), r.encode());
            }
            let applied = match self.meta.txn(txn).await {
                Ok(out) => out.succeeded,
                Err(e) => {
                    // It may still land: the next commit claims anew and so fences it.
                    self.drop_claim(group_id, Some(claim));
                    return Err(CommitError::Store(e));
                }
            };
            if !applied {
                match self.claim_moved(group_id, claim).await {
                    Ok(Some(fenced)) => return Err(fenced),
                    Ok(None) => {}
                    Err(e) => {
                        self.drop_claim(group_id, Some(claim));
                        return Err(CommitError::Store(e));
                    }
                }
                let first = c * per_txn;
                refused.extend(first..first + chunk.len());
                continue;
            }
            let mut last = self.last_commits.lock().expect("commits lock");
            for (name, topic, _, p, r) in chunk {
                last.insert((group_id.to_string(), name.clone(), *topic, *p), r.offset);
            }
        }
        Ok(refused)
    }

    /// The last offsets committed here: (group, topic, topic id, partition, offset).
    pub fn last_commits(&self) -> Vec<(String, String, Uuid, i32, i64)> {
        let last = self.last_commits.lock().expect("commits lock");
        last.iter().map(|((g, t, id, p), o)| (g.clone(), t.clone(), *id, *p, *o)).collect()
    }

    /// Removes every group's committed offsets of a deleted topic.
    pub async fn forget_topic(&self, topic: Uuid) -> Result<(), MetaError> {
        let prefix = self.prefix();
        let segment = format!("/{}/", topic.simple());
        let keys: Vec<String> = list_all(self.meta.as_ref(), &prefix)
            .await?
            .into_iter()
            .map(|v| v.key)
            .filter(|k| k[prefix.len()..].contains(&segment))
            .collect();
        for chunk in keys.chunks(self.meta.txn_ops_max()) {
            self.meta.txn(chunk.iter().fold(Txn::new(), |t, k| t.delete(k.clone()))).await?;
        }
        self.last_commits.lock().expect("commits lock").retain(|(_, _, id, _), _| *id != topic);
        Ok(())
    }

    /// Every committed offset of a group: (topic id, partition) → record.
    pub async fn committed(
        &self,
        group_id: &str,
    ) -> Result<BTreeMap<(Uuid, i32), OffsetRecord>, MetaError> {
        let prefix = self.group_prefix(group_id);
        let mut out = BTreeMap::new();
        for v in list_all(self.meta.as_ref(), &prefix).await? {
            let rest = &v.key[prefix.len()..];
            let Some((topic, p)) = rest.split_once('/') else { continue };
            let (Ok(topic), Ok(p)) = (Uuid::try_parse(topic), p.parse::<i32>()) else { continue };
            match OffsetRecord::decode(&v.key, &v.value) {
                Ok(r) => {
                    out.insert((topic, p), r);
                }
                Err(e) => {
                    tracing::warn!(key = %v.key, error = %e, "skipping a corrupt committed offset")
                }
            }
        }
        Ok(out)
    }

    /// Groups known here (with members) or with committed offsets: (name, state name,
    /// protocol type, group type: "classic" or "consumer").
    pub async fn list(&self) -> Result<Vec<ListedGroup>, MetaError> {
        let mut out: BTreeMap<String, ListedGroup> = BTreeMap::new();
        let prefix = self.prefix();
        for v in list_all(self.meta.as_ref(), &prefix).await? {
            if let Some((g, _)) = v.key[prefix.len()..].split_once('/') {
                let name = unescape(g);
                let listed = ListedGroup {
                    name: name.clone(),
                    state: GroupState::Empty.name(),
                    protocol_type: "consumer".to_string(),
                    kind: "classic",
                };
                out.insert(name, listed);
            }
        }
        for (name, g) in self.groups.lock().expect("groups lock").iter() {
            if g.state == GroupState::Dead {
                continue;
            }
            let listed = ListedGroup {
                name: name.clone(),
                state: g.state.name(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                kind: "classic",
            };
            out.insert(name.clone(), listed);
        }
        for (name, g) in self.consumers.lock().expect("consumers lock").iter() {
            let listed = ListedGroup {
                name: name.clone(),
                state: g.state_name(),
                protocol_type: "consumer".to_string(),
                kind: "consumer",
            };
            out.insert(name.clone(), listed);
        }
        for (name, g) in self.shares.lock().expect("shares lock").iter() {
            let listed = ListedGroup {
                name: name.clone(),
                state: g.state_name(),
                protocol_type: "share".to_string(),
                kind: "share",
            };
            out.insert(name.clone(), listed);
        }
        Ok(out.into_values().collect())
    }
}

/// A group as ListGroups answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub name: String,
    /// Its state's name (classic: Empty, PreparingRebalance, ...; consumer: Empty,
    /// Assigning, Reconciling, Stable).
    pub state: &'static str,
    pub protocol_type: String,
    /// "classic" or "consumer".
    pub kind: &'static str,
}
