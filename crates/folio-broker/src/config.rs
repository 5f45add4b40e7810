//! What a broker is and how it behaves: [`BrokerConfig`], every field with the default a
//! Kafka user expects.

use std::net::SocketAddr;
use std::time::Duration;

pub use crate::domain::acl::AuthorizerConfig;
pub use crate::security::tls::TlsConfig;
pub use crate::security::{ListenerConfig, SaslConfig};

use folio_log::LogConfig;

use crate::domain::group::GroupConfig;
use crate::domain::topics::TopicConfig;
use crate::limits::ListenerLimits;

/// What a broker is and how it behaves; every field has the default a Kafka user expects.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `node.id`: the broker's id in Metadata answers.
    pub node_id: i32,
    /// The Kafka listeners (`listeners`, `advertised.listeners`,
    /// `listener.security.protocol.map`), the first the one `Broker::addr` names.
    pub listeners: Vec<ListenerConfig>,
    /// The certificate and key of the TLS listeners (`ssl.*`).
    pub tls: Option<TlsConfig>,
    /// SASL mechanisms and session lifetime of the SASL listeners (`sasl.*`).
    pub sasl: SaslConfig,
    /// Kafka ACLs are checked on every request (`authorizer.class.name`); `None`: every
    /// client may do everything, and the ACL APIs answer SECURITY_DISABLED.
    pub authorizer: Option<AuthorizerConfig>,
    /// `auto.create.topics.enable`: Metadata for an unknown topic creates it.
    pub auto_create_topics: bool,
    /// `num.partitions`: partitions of auto-created topics and of CreateTopics with -1.
    pub default_partitions: u32,
    /// `default.replication.factor`: copies of each batch (ledger ensemble = write quorum).
    pub default_replication: u16,
    /// The most copies a topic may ask for (the bookies there are).
    pub replication_max: u16,
    /// Topic config defaults (`log.retention.ms`, `message.max.bytes`, ...).
    pub topic_defaults: TopicConfig,
    /// Rollover, trimming and append settings of every partition's log (quorums and
    /// retention come from the topic).
    pub log: LogConfig,
    /// The Kafka listener's limits: request and answer bytes, connections, timeouts,
    /// fetch size, auto-creation (see `crate::limits`).
    pub limits: ListenerLimits,
    /// Batches per partition in one produce request.
    pub batches_per_partition_max: usize,
    /// The metadata store is this process's alone (`folio standalone`'s embedded store, held
    /// under a file lock): a registration of its node id can only be an earlier run's, so
    /// it is replaced at once instead of waited out.
    pub store_exclusive: bool,
    /// Whether produce walks every record of every batch (Kafka's log validator:
    /// `records::validate`). On by default; off only to measure what it costs (`folio bench
    /// kafka`): then only the batch header, CRC and (compacted topics) keys are checked.
    pub validate_records: bool,
    /// `producer.id.expiration.ms`: an idempotent producer that appended nothing to a
    /// partition for this long is forgotten there (its next batch starts it anew).
    pub producer_id_expiration: Duration,
    /// A transactional id whose transaction ended (or never began) this long ago is
    /// forgotten: its record is deleted (Kafka's `transactional.id.expiration.ms`, 7 days).
    pub transactional_id_expiration: Duration,
    /// How often an open partition's idempotent producer state is snapshotted beside its
    /// log while it changes (also at every close): the next owner replays the log from
    /// the snapshot, so a longer interval means a longer replay after a crash.
    pub producer_snapshot_interval: Duration,
    /// The group coordinator's settings.
    pub groups: GroupConfig,
    /// The broker's registration lease: when it dies, its partitions move this long after.
    pub lease_ttl: Duration,
    /// How often the live brokers are listed.
    pub membership_poll: Duration,
    /// The clock the lease is counted on: the process's (the simulator stops it to pause
    /// a broker).
    pub clock: folio_rt::ProcessClock,
    /// `delete.topic.enable`.
    pub delete_topic_enable: bool,
    /// The share of time the controller spends deleting topics' partitions while there is
    /// work (it waits between partitions for the rest), so metadata writes of other
    /// requests are not queued behind a large deletion. 1.0: no pause.
    pub deletion_busy_fraction: f64,
    /// The trash deleter this broker runs while it is the controller (exactly one deleter
    /// per cluster: it moves with the controller lease). `None`: this broker never runs it
    /// (tests that look at what the controller put in the trash).
    pub trash: Option<folio_log::TrashConfig>,
    /// How often the controller runs `folio audit`'s walk and publishes its classes as
    /// gauges (`folio_audit_*`); `None`: never.
    pub audit_interval: Option<Duration>,
    /// How often topics are re-read from the metadata store (changes made through other
    /// brokers arrive this late; a stale cache never resurrects a deleted topic's storage).
    pub topic_refresh: Duration,
    /// The compactor of compacted topics' partitions open here.
    pub compaction: CompactionConfig,
}

impl BrokerConfig {
    /// A broker with one `PLAINTEXT` listener on `bind` and defaults otherwise.
    pub fn plaintext(bind: SocketAddr) -> BrokerConfig {
        BrokerConfig { listeners: vec![ListenerConfig::plaintext(bind)], ..BrokerConfig::default() }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            listeners: vec![ListenerConfig::plaintext("127.0.0.1:9092".parse().expect("address"))],
            tls: None,
            sasl: SaslConfig::default(),
            authorizer: None,
            auto_create_topics: true,
            default_partitions: 1,
            default_replication: 1,
            replication_max: 1,
            topic_defaults: TopicConfig::default(),
            log: LogConfig::default(),
            limits: ListenerLimits::default(),
            batches_per_partition_max: 1024,
            validate_records: true,
            store_exclusive: false,
            producer_id_expiration: Duration::from_secs(24 * 3600),
            transactional_id_expiration: Duration::from_secs(7 * 24 * 3600),
            producer_snapshot_interval: Duration::from_secs(30),
            groups: GroupConfig::default(),
            lease_ttl: Duration::from_secs(10),
            membership_poll: Duration::from_millis(500),
            clock: folio_rt::ProcessClock::default(),
            delete_topic_enable: true,
            deletion_busy_fraction: 0.5,
            trash: Some(folio_log::TrashConfig::default()),
            audit_interval: Some(Duration::from_secs(600)),
            topic_refresh: Duration::from_secs(1),
            compaction: CompactionConfig::default(),
        }
    }
}

/// The compactor's settings.
#[derive(Debug, Clone)]
pub struct CompactionConfig {
    /// How often compacted partitions are looked at (Kafka's `log.cleaner.backoff.ms`,
    /// 15 s).
    pub check_interval: Duration,
    /// The share of time a pass works; it waits for the rest (0.5).
    pub busy_fraction: f64,
    /// Distinct keys one pass maps (24 bytes each in memory; Kafka's 128 MiB dedupe
    /// buffer holds about 5 M). 4 M: about 100 MiB.
    pub keys_max: usize,
    /// For tests of a crash mid-swap: a pass whose output is written waits for ever
    /// instead of swapping it in (counted in `folio_kafka_compaction_paused_total`).
    pub pause_before_swap: bool,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            check_interval: Duration::from_secs(15),
            busy_fraction: 0.5,
            keys_max: 4 * 1024 * 1024,
            pause_before_swap: false,
        }
    }
}
