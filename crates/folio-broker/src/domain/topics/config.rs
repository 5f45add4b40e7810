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
}

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
            _ => return None,
        })
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
