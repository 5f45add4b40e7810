//! OffsetDelete: a group's committed offsets removed by partition, never those of a topic a
//! member is subscribed to (Kafka's rule, KIP-496).

use std::collections::BTreeSet;

use folio_meta::{Txn, list_all};
use uuid::Uuid;

use super::{Coordinator, GroupState};
use crate::errors;

/// A partition whose committed offset is to be deleted: topic name, its id if the topic
/// exists, partition index.
pub type OffsetToDelete = (String, Option<Uuid>, i32);

impl Coordinator {
    /// Deletes the committed offsets of `parts` in `group_id`: one code per part
    /// (GROUP_SUBSCRIBED_TO_TOPIC while a member of a non-empty group subscribes to the
    /// topic, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, else NONE, also
    /// when nothing was committed). `Err`: the group's code (GROUP_ID_NOT_FOUND when it has
    /// neither members nor offsets).
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        parts: &[OffsetToDelete],
    ) -> Result<Vec<i16>, i16> {
        let (known, subscribed) = {
            let groups = self.groups.lock().expect("groups lock");
            match groups.get(group_id).filter(|g| g.state != GroupState::Dead) {
                Some(g) if g.state != GroupState::Empty => {
                    let protocol = g.protocol.clone().unwrap_or_default();
                    let topics: BTreeSet<String> = g
                        .members
                        .values()
                        .flat_map(|m| m.protocols.iter().filter(|(p, _)| *p == protocol))
                        .flat_map(|(_, meta)| subscription_topics(meta))
                        .collect();
                    (true, topics)
                }
                Some(_) => (true, BTreeSet::new()),
                None => match self.consumers.lock().expect("consumers lock").get(group_id) {
                    Some(c) => (true, c.subscribed_names()),
                    None => (false, BTreeSet::new()),
                },
            }
        };
        let prefix = self.group_prefix(group_id);
        let stored = list_all(self.meta.as_ref(), &prefix)
            .await
            .map_err(|_| errors::COORDINATOR_NOT_AVAILABLE)?;
        if !known && stored.is_empty() {
            return Err(errors::GROUP_ID_NOT_FOUND);
        }
        let mut keys = Vec::new();
        let codes = parts
            .iter()
            .map(|(name, id, p)| match id {
                _ if subscribed.contains(name) => errors::GROUP_SUBSCRIBED_TO_TOPIC,
                None => errors::UNKNOWN_TOPIC_OR_PARTITION,
                Some(id) => {
                    let key = self.offset_key(group_id, *id, *p);
                    if stored.iter().any(|v| v.key == key) {
                        keys.push(key);
                    }
                    errors::NONE
                }
            })
            .collect();
        for chunk in keys.chunks(self.meta.txn_ops_max()) {
            let txn = chunk.iter().fold(Txn::new(), |t, k| t.delete(k.clone()));
            self.meta.txn(txn).await.map_err(|_| errors::COORDINATOR_NOT_AVAILABLE)?;
        }
        let mut last = self.last_commits.lock().expect("commits lock");
        last.retain(|(g, _, id, p), _| {
            g != group_id || !parts.iter().any(|(_, d, q)| *d == Some(*id) && q == p)
        });
        Ok(codes)
    }
}

/// The topics of a consumer's subscription (the "consumer" protocol's member metadata:
/// version i16, topics as an i32 count of i16-length strings, then fields this does not
/// need). Read with bounds: malformed metadata yields the topics read before the fault.
pub fn subscription_topics(meta: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut b = meta;
    let take = |b: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head.to_vec())
    };
    let Some(_version) = take(&mut b, 2) else { return out };
    let Some(count) = take(&mut b, 4) else { return out };
    let count = i32::from_be_bytes(count.try_into().expect("4 bytes")).max(0) as usize;
    for _ in 0..count.min(meta.len() / 2) {
        let Some(len) = take(&mut b, 2) else { break };
        let len = i16::from_be_bytes(len.try_into().expect("2 bytes"));
        let Some(name) = usize::try_from(len).ok().and_then(|n| take(&mut b, n)) else { break };
        out.push(String::from_utf8_lossy(&name).into_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_parse_and_malformed_metadata_never_panics() {
        let mut meta = vec![0, 1, 0, 0, 0, 2];
        for t in ["orders", "clicks"] {
            meta.extend_from_slice(&(t.len() as i16).to_be_bytes());
            meta.extend_from_slice(t.as_bytes());
        }
        meta.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // null user data
        assert_eq!(subscription_topics(&meta), ["orders", "clicks"]);
        for cut in 0..meta.len() {
            let got = subscription_topics(&meta[..cut]);
            assert!(got.len() <= 2, "a prefix yields at most the topics it holds");
        }
        let huge = [0, 0, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff];
        assert!(subscription_topics(&huge).is_empty(), "a huge count or length is not trusted");
        assert!(subscription_topics(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]).is_empty(), "negative length");
    }
}
