//! A topic's effective settings (`TopicConfig`): Kafka's topic configs, their defaults,
//! their validation and how Kafka prints them.

use std::collections::BTreeMap;
use std::time::Duration;

use folio_proto::InvalidConfig;

use crate::limits::{CONFIGS_MAX, SEGMENT_BYTES_MIN};

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A topic's effective settings: broker defaults with the topic's overrides applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// `retention.ms`: -1 keeps forever.
    pub retention_ms: i64,
    /// `retention.bytes`: per partition; -1 is no limit.
    pub retention_bytes: i64,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: i32,
    pub timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`: under CreateTime, the furthest a record's
    /// timestamp may lie before the broker's time (else INVALID_TIMESTAMP).
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: the furthest it may lie after (Kafka 4: one hour).
    pub timestamp_after_max_ms: i64,
    /// `cleanup.policy` holds `delete`: retention trims old ledgers.
    pub cleanup_delete: bool,
    /// `cleanup.policy` holds `compact`: the compactor keeps the newest record per key.
    pub cleanup_compact: bool,
    /// `min.cleanable.dirty.ratio`, in millionths (Kafka's 0.5 is 500 000): compact once
    /// the uncompacted share of the compactable bytes reaches it.
    pub min_cleanable_dirty_ppm: u32,
    /// `min.compaction.lag.ms`: records younger than this stay uncompacted.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: uncompacted records older than this are compacted
    /// whatever the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: a tombstone stays this long after its ledger was compacted.
    pub delete_retention_ms: i64,
    /// `segment.ms`: a ledger is closed (so compaction and retention may take it) at
    /// this age.
    pub segment_ms: i64,
    /// `segment.bytes`: ... or at this size.
    pub segment_bytes: i64,
    /// `compression.type`: the codec batches are stored with (the broker recompresses a
    /// batch sent with another); `None`: `producer`, as sent.
    pub compression: Option<crate::domain::batch::Codec>,
    /// `min.insync.replicas`: when set, the ack quorum of the partition's next ledgers
    /// (at most their write quorum): acks=all answers once this many bookies have a batch.
    pub min_insync_replicas: Option<i32>,
    /// `confluent.key.schema.validation`: every record's key carries the id of a schema
    /// in the registry (magic byte 0, then the id), else the batch is refused.
    pub key_schema_validation: bool,
    /// `confluent.value.schema.validation`: the same for every record's value.
    pub value_schema_validation: bool,
    /// Kafka's configs that mean nothing here (`INERT_TOPIC_CONFIGS`): stored, described.
    pub inert: BTreeMap<&'static str, String>,
}

/// What an inert config's value must be.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Long(i64, i64),
    Bool,
    List,
}

/// Kafka 4 topic configs accepted, stored and described, with no effect in Folio (with
/// Kafka's default and why): (name, default, kind, doc).
const INERT_TOPIC_CONFIGS: [(&str, &str, Kind, &str); 17] = [
    (
        "compression.gzip.level",
        "-1",
        Kind::Long(-1, 9),
        "No effect: recompression uses the codec's default level.",
    ),
    (
        "compression.lz4.level",
        "9",
        Kind::Long(1, 17),
        "No effect: recompression uses the codec's default level.",
    ),
    (
        "compression.zstd.level",
        "3",
        Kind::Long(-131_072, 22),
        "No effect: recompression uses the codec's default level.",
    ),
    (
        "file.delete.delay.ms",
        "60000",
        Kind::Long(0, i64::MAX),
        "No effect: deleted ledgers go through the trash (its own delay).",
    ),
    (
        "flush.messages",
        "9223372036854775807",
        Kind::Long(1, i64::MAX),
        "No effect: every acknowledged batch is already on disk (bookie journal).",
    ),
    (
        "flush.ms",
        "9223372036854775807",
        Kind::Long(0, i64::MAX),
        "No effect: every acknowledged batch is already on disk (bookie journal).",
    ),
    (
        "follower.replication.throttled.replicas",
        "",
        Kind::List,
        "No effect: bookies replicate, not followers.",
    ),
    (
        "index.interval.bytes",
        "4096",
        Kind::Long(0, i32::MAX as i64),
        "No effect: the offset index is per ledger.",
    ),
    (
        "leader.replication.throttled.replicas",
        "",
        Kind::List,
        "No effect: bookies replicate, not followers.",
    ),
    (
        "local.retention.bytes",
        "-2",
        Kind::Long(-2, i64::MAX),
        "No effect: no tiered storage (retention.bytes applies).",
    ),
    (
        "local.retention.ms",
        "-2",
        Kind::Long(-2, i64::MAX),
        "No effect: no tiered storage (retention.ms applies).",
    ),
    ("preallocate", "false", Kind::Bool, "No effect: bookies manage their files."),
    ("remote.log.copy.disable", "false", Kind::Bool, "No effect: no tiered storage."),
    ("remote.log.delete.on.disable", "false", Kind::Bool, "No effect: no tiered storage."),
    (
        "segment.index.bytes",
        "10485760",
        Kind::Long(4, i32::MAX as i64),
        "No effect: the offset index is per ledger.",
    ),
    (
        "segment.jitter.ms",
        "0",
        Kind::Long(0, i64::MAX),
        "No effect: ledgers close at segment.ms exactly.",
    ),
    (
        "unclean.leader.election.enable",
        "false",
        Kind::Bool,
        "No effect: a partition's log is fenced, never elected unclean.",
    ),
];

/// The config keys topics accept, with their documentation.
pub const TOPIC_CONFIG_KEYS: &[(&str, &str)] = &[
    (
        "cleanup.policy",
        "delete (retention trims old ledgers), compact (keep the newest record per key), or both.",
    ),
    (
        "compression.type",
        "producer (store batches as sent), or uncompressed, gzip, snappy, lz4, zstd: the broker recompresses batches sent otherwise.",
    ),
    ("delete.retention.ms", "A tombstone stays this long after its ledger was compacted."),
    ("max.compaction.lag.ms", "Uncompacted records older than this are compacted regardless."),
    ("max.message.bytes", "The largest record batch (bytes) a produce may send."),
    (
        "message.timestamp.after.max.ms",
        "CreateTime: a record's timestamp may be at most this far after the broker's time.",
    ),
    (
        "message.timestamp.before.max.ms",
        "CreateTime: a record's timestamp may be at most this far before the broker's time.",
    ),
    (
        "message.timestamp.type",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
    ),
    ("min.cleanable.dirty.ratio", "Compact once this share of closed bytes is uncompacted."),
    ("min.compaction.lag.ms", "Records younger than this are never compacted."),
    ("retention.bytes", "Per partition: trim the oldest ledgers beyond this size (-1: no limit)."),
    ("retention.ms", "Trim ledgers whose newest record is older than this (-1: keep forever)."),
    ("segment.bytes", "Close a partition's ledger at this size (at least 1 MiB, as in Kafka 4)."),
    ("segment.ms", "Close a partition's ledger at this age (its data becomes compactable)."),
    (
        "min.insync.replicas",
        "When set: the ack quorum of the partition's next ledgers (at most their write quorum); acks=all answers once this many bookies have a batch.",
    ),
    (
        "confluent.key.schema.validation",
        "true: every record's key starts with magic byte 0 and the id of a schema in the registry.",
    ),
    (
        "confluent.value.schema.validation",
        "true: every record's value starts with magic byte 0 and the id of a schema in the registry.",
    ),
    ("compression.gzip.level", INERT_TOPIC_CONFIGS[0].3),
    ("compression.lz4.level", INERT_TOPIC_CONFIGS[1].3),
    ("compression.zstd.level", INERT_TOPIC_CONFIGS[2].3),
    ("file.delete.delay.ms", INERT_TOPIC_CONFIGS[3].3),
    ("flush.messages", INERT_TOPIC_CONFIGS[4].3),
    ("flush.ms", INERT_TOPIC_CONFIGS[5].3),
    ("follower.replication.throttled.replicas", INERT_TOPIC_CONFIGS[6].3),
    ("index.interval.bytes", INERT_TOPIC_CONFIGS[7].3),
    ("leader.replication.throttled.replicas", INERT_TOPIC_CONFIGS[8].3),
    ("local.retention.bytes", INERT_TOPIC_CONFIGS[9].3),
    ("local.retention.ms", INERT_TOPIC_CONFIGS[10].3),
    ("preallocate", INERT_TOPIC_CONFIGS[11].3),
    ("remote.log.copy.disable", INERT_TOPIC_CONFIGS[12].3),
    ("remote.log.delete.on.disable", INERT_TOPIC_CONFIGS[13].3),
    ("segment.index.bytes", INERT_TOPIC_CONFIGS[14].3),
    ("segment.jitter.ms", INERT_TOPIC_CONFIGS[15].3),
    ("unclean.leader.election.enable", INERT_TOPIC_CONFIGS[16].3),
    (
        "remote.storage.enable",
        "Only false: Folio has no tiered storage (its bookies keep every ledger).",
    ),
];

impl TopicConfig {
    /// `defaults` with `overrides` applied (overrides were validated when written; a bad one
    /// read back from the store is ignored with a warning rather than failing the topic).
    pub fn resolve(defaults: &TopicConfig, overrides: &BTreeMap<String, String>) -> TopicConfig {
        let mut c = defaults.clone();
        for (k, v) in overrides {
            if let Err(e) = c.set(k, v) {
                tracing::warn!(key = %k, value = %v, error = %e, "ignoring a stored topic config");
            }
        }
        c
    }

    /// Applies one setting, checking it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), InvalidConfig> {
        let int = |min: i64, max: i64| -> Result<i64, InvalidConfig> {
            let v: i64 =
                value.trim().parse().map_err(|_| format!("{key}={value:?} is not an integer"))?;
            if v < min || v > max {
                return Err(InvalidConfig::new(format!("{key}={v} is outside [{min}, {max}]")));
            }
            Ok(v)
        };
        match key {
            "retention.ms" => self.retention_ms = int(-1, i64::MAX)?,
            "retention.bytes" => self.retention_bytes = int(-1, i64::MAX)?,
            "max.message.bytes" => {
                let max = folio_log::BATCH_BYTES_MAX as i64;
                self.max_message_bytes = int(0, max)? as i32;
            }
            "cleanup.policy" => {
                let (mut delete, mut compact) = (false, false);
                for p in value.split(',').map(str::trim) {
                    match p {
                        "delete" => delete = true,
                        "compact" => compact = true,
                        _ => {
                            return Err(InvalidConfig::new(format!(
                                "cleanup.policy={value:?}: use delete, compact, or compact,delete"
                            )));
                        }
                    }
                }
                (self.cleanup_delete, self.cleanup_compact) = (delete, compact);
            }
            "min.cleanable.dirty.ratio" => {
                let v: f64 =
                    value.trim().parse().map_err(|_| format!("{key}={value:?} is not a number"))?;
                if !(0.0..=1.0).contains(&v) {
                    return Err(InvalidConfig::new(format!("{key}={v} is outside [0, 1]")));
                }
                self.min_cleanable_dirty_ppm = (v * 1e6).round() as u32;
            }
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = int(0, i64::MAX)?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = int(1, i64::MAX)?,
            "delete.retention.ms" => self.delete_retention_ms = int(0, i64::MAX)?,
            "segment.ms" => self.segment_ms = int(1, i64::MAX)?,
            "segment.bytes" => self.segment_bytes = int(SEGMENT_BYTES_MIN, i64::from(i32::MAX))?,
            "compression.type" => {
                use crate::domain::batch::Codec;
                self.compression = match value.trim() {
                    "producer" => None,
                    "uncompressed" | "none" => Some(Codec::None),
                    "gzip" => Some(Codec::Gzip),
                    "snappy" => Some(Codec::Snappy),
                    "lz4" => Some(Codec::Lz4),
                    "zstd" => Some(Codec::Zstd),
                    _ => {
                        return Err(InvalidConfig::new(format!(
                            "compression.type={value:?}: use producer, uncompressed, gzip, snappy, lz4 or zstd"
                        )));
                    }
                }
            }
            "message.timestamp.before.max.ms" => self.timestamp_before_max_ms = int(0, i64::MAX)?,
            "message.timestamp.after.max.ms" => self.timestamp_after_max_ms = int(0, i64::MAX)?,
            "message.timestamp.type" => {
                self.timestamp_type = match value.trim() {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => {
                        return Err(InvalidConfig::new(format!(
                            "message.timestamp.type={value:?}: use CreateTime or LogAppendTime"
                        )));
                    }
                }
            }
            "min.insync.replicas" => self.min_insync_replicas = Some(int(1, 255)? as i32),
            "confluent.key.schema.validation" => self.key_schema_validation = flag(key, value)?,
            "confluent.value.schema.validation" => {
                self.value_schema_validation = flag(key, value)?;
            }
            "remote.storage.enable" => match value.trim() {
                "false" => {}
                _ => {
                    return Err(InvalidConfig::new(format!(
                        "remote.storage.enable={value:?}: Folio has no tiered storage (only false)"
                    )));
                }
            },
            inert if self.set_inert(inert, value)? => {}
            _ => {
                let known: Vec<&str> = TOPIC_CONFIG_KEYS.iter().map(|(k, _)| *k).collect();
                return Err(InvalidConfig::new(format!(
                    "unknown or unsupported topic config {key:?} (supported: {})",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Sets one of `INERT_TOPIC_CONFIGS` (checked by its kind); false: `key` is not one.
    fn set_inert(&mut self, key: &str, value: &str) -> Result<bool, InvalidConfig> {
        let Some((name, _, kind, _)) = INERT_TOPIC_CONFIGS.iter().find(|(n, ..)| *n == key) else {
            return Ok(false);
        };
        let v = value.trim();
        let ok = match kind {
            Kind::Long(lo, hi) => v.parse::<i64>().is_ok_and(|n| (*lo..=*hi).contains(&n)),
            Kind::Bool => matches!(v, "true" | "false"),
            Kind::List => true,
        };
        if !ok {
            let want = match kind {
                Kind::Long(lo, hi) => format!("an integer in [{lo}, {hi}]"),
                _ => "true or false".to_string(),
            };
            return Err(InvalidConfig::new(format!("{key}={value:?}: {want}")));
        }
        self.inert.insert(name, v.to_string());
        Ok(true)
    }

    /// The value of a known key as Kafka prints it.
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "cleanup.policy" => match (self.cleanup_compact, self.cleanup_delete) {
                (true, true) => "compact,delete".to_string(),
                (true, false) => "compact".to_string(),
                _ => "delete".to_string(),
            },
            "min.cleanable.dirty.ratio" => {
                (f64::from(self.min_cleanable_dirty_ppm) / 1e6).to_string()
            }
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "segment.bytes" => self.segment_bytes.to_string(),
            "compression.type" => self.compression.map_or("producer", |c| c.name()).to_string(),
            "message.timestamp.before.max.ms" => self.timestamp_before_max_ms.to_string(),
            "message.timestamp.after.max.ms" => self.timestamp_after_max_ms.to_string(),
            "message.timestamp.type" => match self.timestamp_type {
                TimestampType::CreateTime => "CreateTime".to_string(),
                TimestampType::LogAppendTime => "LogAppendTime".to_string(),
            },
            "min.insync.replicas" => self.min_insync_replicas.unwrap_or(1).to_string(),
            "remote.storage.enable" => "false".to_string(),
            "confluent.key.schema.validation" => self.key_schema_validation.to_string(),
            "confluent.value.schema.validation" => self.value_schema_validation.to_string(),
            inert => {
                let (name, default, ..) = INERT_TOPIC_CONFIGS.iter().find(|(n, ..)| *n == inert)?;
                self.inert.get(name).cloned().unwrap_or_else(|| default.to_string())
            }
        })
    }

    /// Whether produce checks the schema ids of keys or values.
    pub fn schema_validation(&self) -> bool {
        self.key_schema_validation || self.value_schema_validation
    }

    /// Retention as the managed log takes it (none without `cleanup.policy=delete`).
    pub fn retention(&self) -> (Option<Duration>, Option<u64>) {
        if !self.cleanup_delete {
            return (None, None);
        }
        let time =
            (self.retention_ms >= 0).then(|| Duration::from_millis(self.retention_ms as u64));
        let bytes = (self.retention_bytes >= 0).then_some(self.retention_bytes as u64);
        (time, bytes)
    }
}

/// `true` or `false` for `key`.
fn flag(key: &str, value: &str) -> Result<bool, InvalidConfig> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(InvalidConfig::new(format!("{key}={value:?}: true or false"))),
    }
}

impl Default for TopicConfig {
    /// Kafka's defaults: 7 days, no size limit, 1 MiB + 12 bytes per batch, CreateTime
    /// with record timestamps at most an hour ahead (Kafka 4) and any age behind,
    /// delete; for compaction a dirty ratio of 0.5, no lags, tombstones kept a day,
    /// segments (here ledgers) closed after 7 days or 1 GiB, and batches stored as sent.
    fn default() -> Self {
        TopicConfig {
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            cleanup_delete: true,
            cleanup_compact: false,
            min_cleanable_dirty_ppm: 500_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 3600 * 1000,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_bytes: 1 << 30,
            compression: None,
            min_insync_replicas: None,
            key_schema_validation: false,
            value_schema_validation: false,
            inert: BTreeMap::new(),
        }
    }
}

/// Validates a set of overrides; returns them normalised (trimmed values).
pub fn validate_configs<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<BTreeMap<String, String>, InvalidConfig> {
    let mut scratch = TopicConfig::default();
    let mut out = BTreeMap::new();
    for (k, v) in pairs {
        scratch.set(k, v)?;
        out.insert(k.to_string(), v.trim().to_string());
    }
    if out.len() > CONFIGS_MAX {
        return Err(InvalidConfig::new(format!("more than {CONFIGS_MAX} configs")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #50 item 3: every config Kafka 4 accepts on a topic is taken: min.insync.replicas
    /// sets the ack quorum, the inert ones are stored and described with Kafka's defaults,
    /// bad values and unknown names are refused.
    #[test]
    fn kafka_4_topic_configs_are_taken_and_checked() {
        let ok = validate_configs([
            ("min.insync.replicas", "2"),
            ("flush.messages", "1"),
            ("preallocate", "true"),
            ("leader.replication.throttled.replicas", "*"),
            ("compression.zstd.level", "19"),
        ])
        .unwrap();
        let c = TopicConfig::resolve(&TopicConfig::default(), &ok);
        assert_eq!(c.min_insync_replicas, Some(2));
        assert_eq!(c.get("flush.messages").as_deref(), Some("1"));
        assert_eq!(c.get("flush.ms").as_deref(), Some("9223372036854775807"), "Kafka's default");
        assert_eq!(c.get("preallocate").as_deref(), Some("true"));
        for (k, _) in TOPIC_CONFIG_KEYS {
            assert!(TopicConfig::default().get(k).is_some(), "{k} is described");
        }
        for bad in [
            ("min.insync.replicas", "0"),
            ("preallocate", "yes"),
            ("segment.index.bytes", "2"),
            ("remote.storage.enable", "true"),
            ("message.downconversion.enable", "true"),
            ("no.such.config", "1"),
        ] {
            assert!(validate_configs([bad]).is_err(), "{bad:?} was taken");
        }
    }
}
