//! Every partition's leader epoch, on every broker: what Metadata answers for partitions
//! this broker does not have open (librdkafka ignores a Metadata answer whose epoch is
//! below one it has seen, so every broker must tell the epoch the owner enforces).
//!
//! A partition's leader epoch is its log's owner epoch (`folio_log::Epochs`): each
//! take-over of the log, in its own CAS on the log record, begins the next one. This cache
//! holds the current epoch of every log record under `logs/`, listed once before serving
//! and then kept current change by change from the watch on that prefix
//! (`watched::keep_current`; a put decodes the one record, a delete drops it). Between a
//! take-over and its watch event a broker may still answer the epoch before; the owner
//! itself answers from its open log, so it is never behind ([`LeaderEpochs::of`]).
//!
//! Size: one entry per log record in the store (at most the cluster's partitions plus the
//! logs created by `folio log`), a name and a `u32` each.

use std::collections::HashMap;
use std::sync::RwLock;

use folio_log::records::LogRecord;
use folio_meta::keys::Keys;
use folio_meta::records::Record;
use folio_meta::{EventKind, MetaError, MetadataStore, WatchEvent, list_all};

/// The current epoch of each log, by log name.
#[derive(Debug, Default)]
pub(crate) struct LeaderEpochs {
    by_log: RwLock<HashMap<String, u32>>,
}

impl LeaderEpochs {
    /// The current epoch of `log` as last seen here, at least `open` (the epoch of the
    /// log if this broker has it open). 0 for a log not seen (never taken over).
    pub fn of(&self, log: &str, open: Option<u32>) -> u32 {
        let seen = self.by_log.read().expect("epochs lock").get(log).copied().unwrap_or(0);
        seen.max(open.unwrap_or(0))
    }

    /// Whether `log`'s record shows an epoch past `epoch` (the epoch this broker opened it
    /// in): another broker took the log over since, and the open log's view is stale (its
    /// ledger fenced underneath; a log that only reads would never learn).
    pub fn taken_over(&self, log: &str, epoch: u32) -> bool {
        self.by_log.read().expect("epochs lock").get(log).is_some_and(|&seen| seen > epoch)
    }

    /// Logs cached (for tests and metrics).
    pub fn len(&self) -> usize {
        self.by_log.read().expect("epochs lock").len()
    }

    /// The epoch in a log record's value; `None` (with a warning) if it does not decode.
    fn decode(key: &str, value: &[u8]) -> Option<u32> {
        match LogRecord::decode(key, value) {
            Ok(r) => Some(r.epochs.current()),
            Err(e) => {
                tracing::warn!(key, error = %e, "leader epochs: skipping a log record that does not decode");
                None
            }
        }
    }
}

impl crate::domain::watched::Watched for LeaderEpochs {
    const WHAT: &'static str = "leader epoch";

    fn prefix(keys: &Keys) -> String {
        keys.logs()
    }

    async fn reload(&self, meta: &dyn MetadataStore, keys: &Keys) -> Result<(), MetaError> {
        let all = list_all(meta, &keys.logs()).await?;
        let mut by_log = HashMap::with_capacity(all.len());
        for v in all {
            let (Some(name), Some(epoch)) =
                (keys.parse_log(&v.key), Self::decode(&v.key, &v.value))
            else {
                continue;
            };
            by_log.insert(name.to_string(), epoch);
        }
        *self.by_log.write().expect("epochs lock") = by_log;
        Ok(())
    }

    fn apply(&self, keys: &Keys, event: &WatchEvent) -> bool {
        let Some(name) = keys.parse_log(&event.key) else { return true };
        let mut by_log = self.by_log.write().expect("epochs lock");
        match event.kind {
            EventKind::Delete => {
                by_log.remove(name);
            }
            EventKind::Put => {
                if let Some(epoch) = Self::decode(&event.key, &event.value) {
                    // Epochs of a record only grow; a replayed older put never lowers one.
                    let e = by_log.entry(name.to_string()).or_insert(epoch);
                    *e = (*e).max(epoch);
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::watched::Watched;
    use bytes::Bytes;

    fn put(keys: &Keys, name: &str, epochs: &[u64]) -> WatchEvent {
        let mut r = LogRecord::new("b");
        for &start in epochs {
            r.epochs.begin(start, 0);
        }
        WatchEvent { kind: EventKind::Put, key: keys.log(name), value: r.encode(), revision: 1 }
    }

    #[test]
    fn changes_apply_one_by_one_and_an_epoch_never_goes_back_while_the_log_lives() {
        let keys = Keys::new("/t");
        let c = LeaderEpochs::default();
        assert!(c.apply(&keys, &put(&keys, "a", &[0, 5])));
        assert_eq!(c.of("a", None), 2);
        c.apply(&keys, &put(&keys, "a", &[0])); // replayed from before
        assert_eq!(c.of("a", None), 2);
        // The owner's open log is ahead of the cache until the watch delivers.
        assert_eq!(c.of("a", Some(3)), 3);
        assert_eq!(c.of("unseen", None), 0);
        let damaged = WatchEvent { value: Bytes::from_static(b"FLG\x02"), ..put(&keys, "b", &[0]) };
        c.apply(&keys, &damaged);
        assert_eq!((c.of("b", None), c.len()), (0, 1));
        let gone =
            WatchEvent { kind: EventKind::Delete, value: Bytes::new(), ..put(&keys, "a", &[]) };
        c.apply(&keys, &gone);
        assert_eq!((c.of("a", None), c.len()), (0, 0));
    }
}
