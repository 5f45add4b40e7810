//! Dynamic group configs (KIP-848, KIP-932: `ConfigResource` type GROUP), set with
//! IncrementalAlterConfigs or AlterConfigs and read by every broker:
//! ```text
//! group-configs/<group, escaped>   "name=value\n" per override, sorted by name
//! ```
//! A broker caches what it read for `GROUP_CONFIGS_CACHE` (another broker's change reaches it
//! that late; its own at once).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_meta::keys::Keys;
use folio_meta::{Compare, MetaError, MetadataStore, Txn};

use folio_proto::InvalidConfig;

use super::record::escape;
pub use crate::limits::GROUP_CONFIGS_CACHED_MAX;

/// How long a group's configs are used as read before they are read again.
pub const GROUP_CONFIGS_CACHE: Duration = Duration::from_secs(1);

/// The group configs Kafka 4 accepts, with what each means here.
pub const GROUP_CONFIG_KEYS: [(&str, &str); 8] = [
    (
        "consumer.session.timeout.ms",
        "A consumer-protocol member not heard from for this long is fenced.",
    ),
    ("consumer.heartbeat.interval.ms", "How often consumer-protocol members heartbeat."),
    ("share.session.timeout.ms", "A share-group member not heard from for this long is removed."),
    ("share.heartbeat.interval.ms", "How often share-group members heartbeat."),
    (
        "share.record.lock.duration.ms",
        "How long a share-group member holds a record it fetched (15000 to 60000, as Kafka; 1000 up here)",
    ),
    (
        "share.auto.offset.reset",
        "Where the share group starts a partition it has not read: earliest or latest",
    ),
    ("share.isolation.level", "read_uncommitted (the only level served)"),
    ("share.delivery.count.limit", "Deliveries of a record before it is archived (2 to 10)"),
];

/// Checks one group config.
pub fn validate(name: &str, value: &str) -> Result<(), InvalidConfig> {
    let int = |lo: i64, hi: i64| match value.parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(()),
        _ => Err(InvalidConfig::new(format!("{name}={value:?}: an integer from {lo} to {hi}"))),
    };
    match name {
        "consumer.session.timeout.ms" | "share.session.timeout.ms" => int(1000, 3_600_000),
        "consumer.heartbeat.interval.ms" | "share.heartbeat.interval.ms" => int(100, 3_600_000),
        "share.record.lock.duration.ms" => int(1000, 3_600_000),
        "share.delivery.count.limit" => int(2, 10),
        "share.auto.offset.reset" if matches!(value, "earliest" | "latest") => Ok(()),
        "share.isolation.level" if value == "read_uncommitted" => Ok(()),
        n if GROUP_CONFIG_KEYS.iter().any(|(k, _)| *k == n) => {
            Err(InvalidConfig::new(format!("{name}={value:?} is not a value this broker serves")))
        }
        _ => Err(InvalidConfig::new(format!("{name} is not a group config"))),
    }
}

/// A group's overrides as read, and when.
type Cached = (BTreeMap<String, String>, tokio::time::Instant);

/// The groups' dynamic configs, read through a short cache.
#[derive(Debug)]
pub struct GroupConfigs {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    cache: Mutex<HashMap<String, Cached>>,
}

fn encode(configs: &BTreeMap<String, String>) -> String {
    configs.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

fn decode(b: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(b)
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, v)| validate(k, v).is_ok())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl GroupConfigs {
    /// The configs stored in `meta` under `keys`, nothing cached yet.
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys) -> GroupConfigs {
        GroupConfigs { meta, keys, cache: Mutex::new(HashMap::new()) }
    }

    fn key(&self, group: &str) -> String {
        format!("{}/group-configs/{}", self.keys.root(), escape(group))
    }

    /// `group`'s overrides (cached up to `GROUP_CONFIGS_CACHE`).
    pub async fn get(&self, group: &str) -> Result<BTreeMap<String, String>, MetaError> {
        if let Some((c, at)) = self.cache.lock().expect("group configs lock").get(group)
            && at.elapsed() < GROUP_CONFIGS_CACHE
        {
            return Ok(c.clone());
        }
        let c =
            self.meta.get(&self.key(group)).await?.map(|v| decode(&v.value)).unwrap_or_default();
        self.remember(group, c.clone());
        Ok(c)
    }

    fn remember(&self, group: &str, c: BTreeMap<String, String>) {
        let mut cache = self.cache.lock().expect("group configs lock");
        if cache.len() >= GROUP_CONFIGS_CACHED_MAX {
            cache.clear();
        }
        cache.insert(group.to_string(), (c, tokio::time::Instant::now()));
    }

    /// Replaces `group`'s overrides by what `change` makes of them (compare-and-set,
    /// retried on a concurrent change); `validate_only` checks without writing.
    pub async fn alter(
        &self,
        group: &str,
        change: impl Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String>,
        validate_only: bool,
    ) -> Result<Result<(), String>, MetaError> {
        let key = self.key(group);
        for _ in 0..8 {
            let current = self.meta.get(&key).await?;
            let now = current.as_ref().map(|v| decode(&v.value)).unwrap_or_default();
            let next = match change(&now) {
                Ok(n) => n,
                Err(e) => return Ok(Err(e)),
            };
            if let Some(e) = next.iter().find_map(|(k, v)| validate(k, v).err()) {
                return Ok(Err(e.to_string()));
            }
            if validate_only {
                return Ok(Ok(()));
            }
            let guard = match &current {
                Some(v) => Compare::Version(key.clone(), v.version),
                None => Compare::Absent(key.clone()),
            };
            let txn = if next.is_empty() {
                Txn::new().compare(guard).delete(key.clone())
            } else {
                Txn::new().compare(guard).put(key.clone(), encode(&next))
            };
            if self.meta.txn(txn).await?.succeeded {
                tracing::info!(group, configs = %encode(&next).replace('\n', " "), "group configs altered");
                self.remember(group, next);
                return Ok(Ok(()));
            }
        }
        Err(MetaError::unavailable(format!("{key}: kept changing under the alteration")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_configs_are_checked_and_round_trip() {
        assert!(validate("share.auto.offset.reset", "earliest").is_ok());
        assert!(validate("share.auto.offset.reset", "by_duration:PT1H").is_err());
        assert!(validate("share.record.lock.duration.ms", "500").is_err());
        assert!(validate("share.delivery.count.limit", "11").is_err());
        assert!(validate("retention.ms", "1").is_err(), "a topic config is not a group's");
        let c: BTreeMap<String, String> =
            [("share.auto.offset.reset".to_string(), "earliest".to_string())].into();
        assert_eq!(decode(encode(&c).as_bytes()), c);
        assert!(
            decode(b"share.delivery.count.limit=99\ngarbage\n").is_empty(),
            "bad lines are dropped"
        );
    }
}
