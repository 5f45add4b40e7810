//! Topics: the name → topic-id binding, the partition count and the topic's config
//! overrides, one metadata record per topic; and the config keys a topic accepts.
//!
//! ```text
//! TopicRecord  "FTP" 1 | id [16] | partitions u32 | replication u16 | created_ms u64
//!              | n u32 | n × (key str, value str)          (strings: u16 length + UTF-8)
//! ```
//!
//! A topic's partitions are managed logs named `kafka-<topic id hex>-<partition>`: data is
//! keyed by the topic id, so a topic deleted and created again under the same name never
//! sees the old one's data (L3).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use folio_meta::keys::Keys;
use folio_meta::records::{Reader, Record, corrupt, put_string};
use folio_meta::{Expect, MetaError, MetadataStore, Version, list_all};
use folio_proto::InvalidConfig;
use uuid::Uuid;

use crate::errors::BrokerError;
use crate::limits::CONFIGS_MAX;
pub use crate::limits::{PARTITIONS_MAX, TOPIC_NAME_BYTES_MAX};

const TOPIC_MAGIC: &[u8; 3] = b"FTP";
const VERSION: u8 = 1;

/// A topic's record in the metadata store: id, partitions, replication, creation time, config
/// overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    pub id: Uuid,
    pub partitions: u32,
    /// Copies of each batch: the log's ensemble and write quorum.
    pub replication: u16,
    pub created_ms: u64,
    /// Config overrides (only keys `TopicConfig` knows, validated).
    pub configs: BTreeMap<String, String>,
}

impl TopicRecord {
    /// A new topic's record with a fresh id, after Kafka's checks (each failure a
    /// `BrokerError`): the name, 1..=`PARTITIONS_MAX` partitions, 1..=`replication_max`
    /// copies. `configs` are validated already (`validate_configs`).
    pub fn new(
        name: &str,
        partitions: i32,
        replication: i16,
        replication_max: u16,
        configs: BTreeMap<String, String>,
        now_ms: u64,
    ) -> Result<TopicRecord, BrokerError> {
        validate_name(name).map_err(|e| BrokerError::InvalidTopic(e.into()))?;
        if partitions <= 0 || partitions > PARTITIONS_MAX {
            return Err(BrokerError::InvalidPartitions(format!(
                "partitions must be 1..={PARTITIONS_MAX}, not {partitions}"
            )));
        }
        if replication <= 0 || replication as u16 > replication_max {
            return Err(BrokerError::InvalidReplicationFactor(format!(
                "replication factor must be 1..={replication_max} (the bookies there are), not {replication}"
            )));
        }
        Ok(TopicRecord {
            id: new_topic_id(),
            partitions: partitions as u32,
            replication: replication as u16,
            created_ms: now_ms,
            configs,
        })
    }
}

impl Record for TopicRecord {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(TOPIC_MAGIC);
        v.push(VERSION);
        v.extend_from_slice(self.id.as_bytes());
        v.extend_from_slice(&self.partitions.to_le_bytes());
        v.extend_from_slice(&self.replication.to_le_bytes());
        v.extend_from_slice(&self.created_ms.to_le_bytes());
        v.extend_from_slice(&(self.configs.len() as u32).to_le_bytes());
        for (k, val) in &self.configs {
            put_string(&mut v, k);
            put_string(&mut v, val);
        }
        v.into()
    }

    fn decode(key: &str, b: &[u8]) -> folio_meta::Result<Self> {
        let mut r = Reader::new(key, b);
        if r.take(3)? != TOPIC_MAGIC {
            return Err(corrupt(key, "not a topic record"));
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(corrupt(key, format!("unknown topic record version {version}")));
        }
        let id = Uuid::from_bytes(r.take(16)?.try_into().expect("16 bytes"));
        let partitions = r.u32()?;
        let replication = r.u16()?;
        let created_ms = r.u64()?;
        let n = r.u32()? as usize;
        if n > CONFIGS_MAX {
            return Err(corrupt(key, format!("{n} configs")));
        }
        let mut configs = BTreeMap::new();
        for _ in 0..n {
            let k = r.string()?;
            configs.insert(k, r.string()?);
        }
        r.done()?;
        Ok(TopicRecord { id, partitions, replication, created_ms, configs })
    }
}

/// The managed log holding one partition.
pub fn log_name(id: Uuid, partition: i32) -> String {
    format!("kafka-{}-{partition}", id.simple())
}

/// The topic id and partition of a partition's log name (`kafka-<id hex>-<partition>`).
pub fn parse_log_name(log: &str) -> Option<(Uuid, i32)> {
    let rest = log.strip_prefix("kafka-")?;
    let (id, p) = rest.rsplit_once('-')?;
    Some((Uuid::try_parse(id).ok()?, p.parse().ok()?))
}

/// Kafka's rule: 1..=249 bytes of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<(), InvalidConfig> {
    if name.is_empty() || name.len() > TOPIC_NAME_BYTES_MAX {
        return Err(InvalidConfig::new(format!(
            "topic name must be 1..={TOPIC_NAME_BYTES_MAX} bytes"
        )));
    }
    if name == "." || name == ".." {
        return Err(InvalidConfig::new(format!("topic name cannot be {name:?}")));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || "._-".contains(*c))) {
        return Err(InvalidConfig::new(format!(
            "topic name {name:?} has {c:?}; only ASCII letters, digits, '.', '_' and '-' are allowed"
        )));
    }
    Ok(())
}

mod config;
pub use config::{TOPIC_CONFIG_KEYS, TimestampType, TopicConfig, validate_configs};

/// One topic as the broker serves it.
#[derive(Debug, Clone)]
pub struct Topic {
    pub name: String,
    pub record: TopicRecord,
    pub version: Version,
}

/// The topics of the cluster, read through from the metadata store with a cache of what
/// this broker has seen.
#[derive(Debug)]
pub struct Topics {
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    cache: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// When a by-id miss last listed every topic (one listing at a time, at most one per
    /// [`BY_ID_MISS_LISTING_INTERVAL`]: a storm of unknown ids costs no more).
    by_id_listing: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

/// How often a topic id missing from the cache may cause a listing of every topic.
pub const BY_ID_MISS_LISTING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl Topics {
    /// The topics stored in `meta` under `keys`, with an empty cache.
    pub fn new(meta: Arc<dyn MetadataStore>, keys: Keys) -> Topics {
        Topics {
            meta,
            keys,
            cache: RwLock::new(BTreeMap::new()),
            by_id_listing: tokio::sync::Mutex::new(None),
        }
    }

    /// The topic `name`, from the cache or the store; `None` if there is none.
    pub async fn get(&self, name: &str) -> Result<Option<Arc<Topic>>, MetaError> {
        if let Some(t) = self.cache.read().expect("topic cache").get(name) {
            return Ok(Some(t.clone()));
        }
        self.load(name).await
    }

    /// Reads `name` from the store (refreshing the cache).
    pub async fn load(&self, name: &str) -> Result<Option<Arc<Topic>>, MetaError> {
        let key = self.keys.topic(name);
        let Some(v) = self.meta.get(&key).await? else {
            self.cache.write().expect("topic cache").remove(name);
            return Ok(None);
        };
        let record = TopicRecord::decode(&key, &v.value)?;
        Ok(Some(self.remember(name, record, v.version)))
    }

    fn remember(&self, name: &str, record: TopicRecord, version: Version) -> Arc<Topic> {
        let t = Arc::new(Topic { name: name.to_string(), record, version });
        self.cache.write().expect("topic cache").insert(name.to_string(), t.clone());
        t
    }

    /// Every topic, sorted by name (read from the store).
    pub async fn list(&self) -> Result<Vec<Arc<Topic>>, MetaError> {
        let prefix = self.keys.topics();
        let mut out = Vec::new();
        for v in list_all(self.meta.as_ref(), &prefix).await? {
            let name = &v.key[prefix.len()..];
            match TopicRecord::decode(&v.key, &v.value) {
                Ok(r) => out.push(self.remember(name, r, v.version)),
                Err(e) => {
                    tracing::warn!(key = %v.key, error = %e, "skipping a corrupt topic record")
                }
            }
        }
        Ok(out)
    }

    /// The topic `name` as the cache has it (no store read: callers under a lock).
    pub fn cached(&self, name: &str) -> Option<Arc<Topic>> {
        self.cache.read().expect("topic cache").get(name).cloned()
    }

    /// Every topic the cache has (re-read every `topic_refresh`), sorted by name.
    pub fn cached_all(&self) -> Vec<Arc<Topic>> {
        self.cache.read().expect("topic cache").values().cloned().collect()
    }

    /// Drops `name` from the cache (it was deleted here).
    pub fn forget(&self, name: &str) {
        self.cache.write().expect("topic cache").remove(name);
    }

    /// The ids of the topics in the cache.
    pub fn cached_ids(&self) -> std::collections::HashSet<Uuid> {
        self.cache.read().expect("topic cache").values().map(|t| t.record.id).collect()
    }

    /// Re-reads every topic, so changes made through other brokers reach this one; returns
    /// the topics that are new or changed since the cache last saw them.
    pub async fn refresh(&self) -> Result<Vec<Arc<Topic>>, MetaError> {
        let before: HashMap<String, Version> = self
            .cache
            .read()
            .expect("topic cache")
            .iter()
            .map(|(n, t)| (n.clone(), t.version))
            .collect();
        let now = self.list().await?;
        let names: std::collections::HashSet<&str> = now.iter().map(|t| t.name.as_str()).collect();
        self.cache.write().expect("topic cache").retain(|n, _| names.contains(n.as_str()));
        Ok(now.iter().filter(|t| before.get(&t.name) != Some(&t.version)).cloned().collect())
    }

    /// The topic with id `id` (cache first, then a listing).
    pub async fn by_id(&self, id: Uuid) -> Result<Option<Arc<Topic>>, MetaError> {
        let cached =
            self.cache.read().expect("topic cache").values().find(|t| t.record.id == id).cloned();
        if cached.is_some() {
            return Ok(cached);
        }
        let mut last = self.by_id_listing.lock().await;
        if last.is_some_and(|at| at.elapsed() < BY_ID_MISS_LISTING_INTERVAL) {
            // Listed a moment ago (maybe while this call waited): the cache is that fresh.
            let cache = self.cache.read().expect("topic cache");
            return Ok(cache.values().find(|t| t.record.id == id).cloned());
        }
        let found = self.list().await?.into_iter().find(|t| t.record.id == id);
        *last = Some(tokio::time::Instant::now());
        Ok(found)
    }

    /// Creates `name`; `Ok(None)` if it already exists.
    pub async fn create(
        &self,
        name: &str,
        record: TopicRecord,
    ) -> Result<Option<Arc<Topic>>, MetaError> {
        match self.meta.put(&self.keys.topic(name), record.encode(), Expect::Absent).await {
            Ok(version) => Ok(Some(self.remember(name, record, version))),
            Err(MetaError::Conflict { .. }) => {
                self.load(name).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Replaces `topic`'s record if nobody changed it since it was read.
    pub async fn update(
        &self,
        topic: &Topic,
        record: TopicRecord,
    ) -> Result<Arc<Topic>, MetaError> {
        let key = self.keys.topic(&topic.name);
        match self.meta.put(&key, record.encode(), Expect::Version(topic.version)).await {
            Ok(version) => Ok(self.remember(&topic.name, record, version)),
            Err(e) => {
                self.load(&topic.name).await?;
                Err(e)
            }
        }
    }
}

/// What a new topic asks for: CreateTopics, Metadata's auto-creation and `folio topics
/// create` all create topics through [`Topics::create_topic`].
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub partitions: i32,
    pub replication: i16,
    /// The largest replication factor allowed (the bookies there are).
    pub replication_max: u16,
    /// Validated already (`validate_configs`).
    pub configs: BTreeMap<String, String>,
    pub now_ms: u64,
}

/// What to do when a topic of the name exists (or is created meanwhile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfExists {
    /// Fail with TOPIC_ALREADY_EXISTS (CreateTopics, `folio topics create`).
    Fail,
    /// Use it (auto-creation: two clients asking for the same unknown topic).
    Use,
}

impl Topics {
    /// Creates a topic after Kafka's checks, with a fresh topic id; with `validate_only`
    /// answers what would be created and writes nothing. Every failure carries its Kafka
    /// error code.
    pub async fn create_topic(
        &self,
        name: &str,
        new: NewTopic,
        if_exists: IfExists,
        validate_only: bool,
    ) -> Result<Arc<Topic>, BrokerError> {
        let NewTopic { partitions, replication, replication_max, configs, now_ms } = new;
        let record =
            TopicRecord::new(name, partitions, replication, replication_max, configs, now_ms)?;
        let exists = || BrokerError::TopicExists(name.to_string());
        if if_exists == IfExists::Fail && self.get(name).await?.is_some() {
            return Err(exists());
        }
        if validate_only {
            return Ok(Arc::new(Topic { name: name.to_string(), record, version: 0 }));
        }
        match self.create(name, record).await? {
            Some(t) => {
                tracing::info!(topic = name, id = %t.record.id, partitions, replication, "topic created");
                Ok(t)
            }
            None if if_exists == IfExists::Use => self.get(name).await?.ok_or_else(exists),
            None => Err(exists()),
        }
    }
}

/// A fresh random topic id (never the nil id Kafka reserves for "none").
pub fn new_topic_id() -> Uuid {
    loop {
        let id = Uuid::from_bytes(folio_rt::random());
        if !id.is_nil() {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn log_names_parse_back_to_topic_id_and_partition() {
        let id = Uuid::from_u128(0xfeed);
        assert_eq!(parse_log_name(&log_name(id, 17)), Some((id, 17)));
        assert_eq!(parse_log_name("orders"), None);
        assert_eq!(parse_log_name("kafka-nothex-1"), None);
        assert_eq!(parse_log_name(&format!("kafka-{}-x", id.simple())), None);
    }

    #[test]
    fn topic_record_round_trips_and_rejects_damage() {
        let mut configs = BTreeMap::new();
        configs.insert("retention.ms".to_string(), "1000".to_string());
        let r = TopicRecord {
            id: new_topic_id(),
            partitions: 4,
            replication: 3,
            created_ms: 7,
            configs,
        };
        let b = r.encode();
        assert_eq!(TopicRecord::decode("k", &b).unwrap(), r);
        for n in 0..b.len() {
            assert!(TopicRecord::decode("k", &b[..n]).is_err(), "truncated to {n}");
        }
        let mut extra = b.to_vec();
        extra.push(0);
        assert!(TopicRecord::decode("k", &extra).is_err());
    }

    #[test]
    fn compaction_configs_are_read_and_printed_as_kafka_does() {
        let o = validate_configs([
            ("cleanup.policy", "delete, compact"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("delete.retention.ms", "100"),
        ])
        .unwrap();
        let c = TopicConfig::resolve(&TopicConfig::default(), &o);
        assert!(c.cleanup_compact && c.cleanup_delete);
        assert_eq!(c.get("cleanup.policy").unwrap(), "compact,delete");
        assert_eq!(c.min_cleanable_dirty_ppm, 250_000);
        assert_eq!(c.get("min.cleanable.dirty.ratio").unwrap(), "0.25");
        assert_eq!(c.delete_retention_ms, 100);
        let compact_only = validate_configs([("cleanup.policy", "compact")]).unwrap();
        let c = TopicConfig::resolve(&TopicConfig::default(), &compact_only);
        assert_eq!(c.retention(), (None, None), "compact alone never trims by retention");
        assert_eq!(c.get("cleanup.policy").unwrap(), "compact");
    }

    #[test]
    fn names_follow_kafka_rules() {
        assert!(validate_name("orders.v1_x-2").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", "ü", &"x".repeat(250)] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn configs_are_validated_and_resolved() {
        assert!(validate_configs([("retention.ms", "-1"), ("cleanup.policy", "delete")]).is_ok());
        for (k, v) in [
            ("retention.ms", "-2"),
            ("retention.ms", "soon"),
            ("retention.bytes", "-5"),
            ("max.message.bytes", "-1"),
            ("max.message.bytes", "999999999"),
            ("cleanup.policy", "compress"),
            ("cleanup.policy", "delete,"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("min.cleanable.dirty.ratio", "half"),
            ("max.compaction.lag.ms", "0"),
            ("delete.retention.ms", "-1"),
            ("message.timestamp.type", "Later"),
            ("segment.bytes", "1"),
        ] {
            assert!(validate_configs([(k, v)]).is_err(), "{k}={v} accepted");
        }
        let o = validate_configs([
            ("retention.bytes", " 100 "),
            ("message.timestamp.type", "LogAppendTime"),
        ])
        .unwrap();
        let c = TopicConfig::resolve(&TopicConfig::default(), &o);
        assert!(c.cleanup_delete && !c.cleanup_compact, "delete by default");
        assert_eq!(c.retention_bytes, 100);
        assert_eq!(c.timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.retention(), (Some(Duration::from_secs(7 * 24 * 3600)), Some(100)));
        assert_eq!(c.get("retention.bytes").as_deref(), Some("100"));
        let forever = TopicConfig { retention_ms: -1, ..c };
        assert_eq!(forever.retention().0, None);
    }
}
