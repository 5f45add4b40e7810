//! `folio broker`: a Kafka-compatible broker on a cluster's metadata and bookies; and the
//! Kafka settings `folio standalone` shares.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use folio_broker::config::TlsConfig;
use folio_broker::{Broker, BrokerConfig, TopicConfig};
use folio_log::{LogEnv, WallClock};

use crate::cluster::ClusterArgs;

/// The Kafka listener and topic defaults (Kafka's names in brackets).
#[derive(Debug, Clone, clap::Args)]
pub struct KafkaArgs {
    /// Where the Kafka listener binds, as one PLAINTEXT listener (port 0: any free port);
    /// default 127.0.0.1:9092. `--listener` gives several, with TLS and SASL.
    #[arg(long, conflicts_with = "listeners")]
    pub kafka_listen: Option<SocketAddr>,
    /// A Kafka listener, `NAME://IP:PORT` [listeners] (repeatable or comma-separated). NAME
    /// is its security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or any name
    /// mapped to one by --listener-security-protocol-map; e.g. `--listener
    /// PLAINTEXT://127.0.0.1:9092 --listener SASL_SSL://0.0.0.0:9093`.
    #[arg(long = "listener", value_name = "NAME://IP:PORT")]
    pub listeners: Vec<String>,
    /// What clients are told to connect to for a listener, `NAME://host:port`
    /// [advertised.listeners]; default: its bound address (required when binding 0.0.0.0).
    #[arg(long = "advertised-listener", value_name = "NAME://HOST:PORT")]
    pub advertised_listeners: Vec<String>,
    /// `NAME:PROTOCOL` pairs for listeners not named after their protocol
    /// [listener.security.protocol.map], e.g. `INTERNAL:SASL_PLAINTEXT`.
    #[arg(long = "listener-security-protocol-map", value_name = "NAME:PROTOCOL,…")]
    pub protocol_map: Vec<String>,
    /// The `host:port` clients are told to connect to for the first listener (a shorthand
    /// of --advertised-listener).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "advertised_listeners")]
    pub advertise: Option<String>,
    /// The TLS listeners' certificate chain, PEM, the broker's own first
    /// [ssl.keystore.location]. Reloaded on SIGHUP and when the file changes.
    #[arg(long, value_name = "PEM")]
    pub ssl_cert: Option<std::path::PathBuf>,
    /// The TLS listeners' private key, PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "ssl_cert")]
    pub ssl_key: Option<std::path::PathBuf>,
    /// CA certificates client certificates must chain to, PEM [ssl.truststore.location].
    #[arg(long, value_name = "PEM")]
    pub ssl_client_ca: Option<std::path::PathBuf>,
    /// Whether TLS clients must show a certificate [ssl.client.auth]: none, requested or
    /// required (the principal is then `User:<certificate subject>`).
    #[arg(long, default_value = "none")]
    pub ssl_client_auth: String,
    /// SASL mechanisms offered [sasl.enabled.mechanisms]. Users are `folio users`' (or
    /// AlterUserScramCredentials'); PLAIN checks the password against the same salted
    /// credential.
    #[arg(long, default_value = "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN")]
    pub sasl_enabled_mechanisms: String,
    /// A SASL session lasts this long; then the client must authenticate again on the
    /// connection (KIP-368) or is disconnected [connections.max.reauth.ms]; 0: for ever.
    #[arg(long, default_value_t = 0)]
    pub connections_max_reauth_ms: u64,
    /// Check Kafka ACLs on every request [authorizer.class.name]; without it every client
    /// may do everything. ACLs are managed with `folio acls` or CreateAcls/DeleteAcls.
    #[arg(long)]
    pub authorizer: bool,
    /// A principal that may do everything, e.g. `User:admin` [super.users] (repeatable).
    #[arg(long = "super-user", value_name = "User:NAME", requires = "authorizer")]
    pub super_users: Vec<String>,
    /// Allow a request on a resource no ACL names [allow.everyone.if.no.acl.found].
    #[arg(long, requires = "authorizer")]
    pub allow_everyone_if_no_acl_found: bool,
    /// This broker's id in Metadata answers [node.id].
    #[arg(long, default_value_t = 1)]
    pub node_id: i32,
    /// Partitions of auto-created topics and of CreateTopics with -1 [num.partitions].
    #[arg(long, default_value_t = 1)]
    pub num_partitions: u32,
    /// Copies of each batch for new topics [default.replication.factor]; default: the
    /// writable bookies, at most 3.
    #[arg(long)]
    pub default_replication_factor: Option<u16>,
    /// Do not create unknown topics on Metadata requests [auto.create.topics.enable=false].
    #[arg(long)]
    pub no_auto_create_topics: bool,
    /// Default retention of topics in ms, -1 for ever [log.retention.ms].
    #[arg(long, default_value_t = 7 * 24 * 3600 * 1000, allow_hyphen_values = true)]
    pub log_retention_ms: i64,
    /// Default retention per partition in bytes, -1 for no limit [log.retention.bytes].
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub log_retention_bytes: i64,
    /// Default largest record batch in bytes [message.max.bytes].
    #[arg(long, default_value_t = 1_048_588)]
    pub message_max_bytes: i32,
    /// How long the first rebalance of an empty classic group waits for more members, in
    /// ms, so that members starting together land in one generation
    /// [group.initial.rebalance.delay.ms]; 0 for test and benchmark clusters.
    #[arg(long, default_value_t = 3_000)]
    pub group_initial_rebalance_delay_ms: u64,
    /// Consumer-protocol (KIP-848) members not heard from for this long are fenced and
    /// their partitions reassigned, in ms [group.consumer.session.timeout.ms].
    #[arg(long, default_value_t = 45_000)]
    pub group_consumer_session_timeout_ms: u64,
    /// How often consumer-protocol members heartbeat, in ms
    /// [group.consumer.heartbeat.interval.ms]; below the session timeout.
    #[arg(long, default_value_t = 5_000)]
    pub group_consumer_heartbeat_interval_ms: u64,
    /// The assignors consumer-protocol members may choose (`group.remote.assignor`), the
    /// first the default [group.consumer.assignors]: uniform, range.
    #[arg(long, default_value = "uniform,range")]
    pub group_consumer_assignors: String,
    /// How long a share-group member holds a record it fetched before it is delivered
    /// again, in ms [group.share.record.lock.duration.ms].
    #[arg(long, default_value_t = 30_000)]
    pub group_share_record_lock_duration_ms: u64,
    /// Deliveries of a record to share-group members before it is archived
    /// [group.share.delivery.count.limit] (2 to 10).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=10))]
    pub group_share_delivery_count_limit: u16,
    /// Share-group members not heard from for this long are removed, in ms
    /// [group.share.session.timeout.ms].
    #[arg(long, default_value_t = 45_000)]
    pub group_share_session_timeout_ms: u64,
    /// How often share-group members heartbeat, in ms [group.share.heartbeat.interval.ms].
    #[arg(long, default_value_t = 5_000)]
    pub group_share_heartbeat_interval_ms: u64,
    /// Where a new share group starts reading a partition: `earliest` or `latest`
    /// [share.auto.offset.reset].
    #[arg(long, default_value = "latest")]
    pub share_auto_offset_reset: String,
    /// Refuse DeleteTopics [delete.topic.enable=false].
    #[arg(long)]
    pub no_delete_topics: bool,
    /// The broker's registration lease in ms: when a broker dies, its partitions and
    /// groups move to the others this long after.
    #[arg(long, default_value_t = 10_000)]
    pub broker_lease_ms: u64,
    /// How often the trash deleter passes over the trash, in ms (it runs on the
    /// controller broker only: one per cluster).
    #[arg(long, default_value_t = 10_000)]
    pub trash_interval_ms: u64,
    /// How often topics are re-read from the metadata store, in ms (changes made through
    /// other brokers arrive this late; a stale cache never resurrects a deleted topic's
    /// storage). Tests make it huge to show that.
    #[arg(long, default_value_t = 1_000, hide = true)]
    pub topic_refresh_ms: u64,
    /// How often the controller audits the cluster for the `folio_audit_*` gauges, in s
    /// (0: never).
    #[arg(long, default_value_t = 600)]
    pub audit_interval_s: u64,
    /// A partition's ledger is closed and a new one started after this many bytes
    /// [log.segment.bytes]...
    #[arg(long, default_value_t = 1 << 30)]
    pub ledger_rollover_bytes: u64,
    /// ...or this many batches (Pulsar's managedLedgerMaxEntriesPerLedger).
    #[arg(long, default_value_t = 50_000)]
    pub ledger_rollover_entries: u64,
    /// How often compacted topics' partitions open here are checked for a compaction pass,
    /// in ms [log.cleaner.backoff.ms].
    #[arg(long, default_value_t = 15_000)]
    pub compaction_check_ms: u64,
    /// Tests of a crash mid-compaction: a pass whose output is written waits for ever
    /// instead of swapping it in.
    #[arg(long, hide = true)]
    pub compaction_pause_before_swap: bool,
    /// Sets a limit of the Kafka listener, e.g. `--limit connections_per_address_max=64`
    /// (repeatable; durations in ms). The limits and their defaults: request_bytes_max
    /// 100 MiB [socket.request.max.bytes], connection_bytes_max 128 MiB,
    /// connection_read_ahead_bytes 8 MiB (the next request waits in the client while
    /// the earlier ones hold more: overload pushback), process_bytes_max
    /// 512 MiB [queued.max.request.bytes], inflight_per_connection 256, connections_max
    /// 4096, connections_per_address_max 1024 [max.connections.per.ip], idle_timeout_ms
    /// 600000 [connections.max.idle.ms], request_read_timeout_ms 30000,
    /// reply_write_timeout_ms 30000, fetch_bytes_max 55 MiB [fetch.max.bytes],
    /// auto_create_per_request_max 16, auto_create_per_minute_max 120,
    /// client_id_bytes_max 1024, send_buffer_bytes 100 KiB [socket.send.buffer.bytes],
    /// partitions_open_max 10000 (the least recently used closes to open another),
    /// partition_idle_timeout_ms 600000, fetch_sessions_max 1000
    /// [max.incremental.fetch.session.cache.slots], fetch_session_partitions_max 200000.
    #[arg(long = "limit", value_name = "NAME=VALUE")]
    pub limits: Vec<String>,
}

impl KafkaArgs {
    /// The broker's config for a cluster with `bookies` writable bookies.
    pub fn config(&self, bookies: usize) -> Result<BrokerConfig, String> {
        if bookies == 0 {
            return Err("no writable bookies are registered: start bookies first".into());
        }
        let replication_max = bookies.min(u16::MAX as usize) as u16;
        let default_replication = self.default_replication_factor.unwrap_or(replication_max.min(3));
        let (listeners, tls, sasl) = self.security()?;
        let mut topic_defaults = TopicConfig::default();
        for (k, v) in [
            ("retention.ms", self.log_retention_ms.to_string()),
            ("retention.bytes", self.log_retention_bytes.to_string()),
            ("max.message.bytes", self.message_max_bytes.to_string()),
        ] {
            topic_defaults.set(k, &v).map_err(|e| format!("broker default: {e}"))?;
        }
        let mut limits = folio_broker::limits::ListenerLimits::default();
        for l in &self.limits {
            let (name, value) =
                l.split_once('=').ok_or_else(|| format!("--limit {l:?}: expected NAME=VALUE"))?;
            limits.set(name.trim(), value.trim())?;
        }
        limits.validate()?;
        if self.ledger_rollover_bytes == 0 || self.ledger_rollover_entries == 0 {
            return Err("--ledger-rollover-bytes and --ledger-rollover-entries must be > 0".into());
        }
        let groups = self.group_config()?;
        if self.broker_lease_ms < 1000 {
            return Err("--broker-lease-ms must be at least 1000".into());
        }
        Ok(BrokerConfig {
            lease_ttl: Duration::from_millis(self.broker_lease_ms),
            delete_topic_enable: !self.no_delete_topics,
            node_id: self.node_id,
            listeners,
            tls,
            sasl,
            authorizer: self.authorizer.then(|| folio_broker::config::AuthorizerConfig {
                super_users: self.super_users.clone(),
                allow_if_no_acl: self.allow_everyone_if_no_acl_found,
            }),
            auto_create_topics: !self.no_auto_create_topics,
            default_partitions: self.num_partitions,
            default_replication,
            replication_max,
            topic_defaults,
            limits,
            trash: Some(folio_log::TrashConfig {
                interval: Duration::from_millis(self.trash_interval_ms.max(1)),
                ..folio_log::TrashConfig::default()
            }),
            topic_refresh: Duration::from_millis(self.topic_refresh_ms.max(1)),
            log: folio_log::LogConfig {
                rollover_bytes: self.ledger_rollover_bytes,
                rollover_entries: self.ledger_rollover_entries,
                ..folio_log::LogConfig::default()
            },
            audit_interval: (self.audit_interval_s > 0)
                .then(|| Duration::from_secs(self.audit_interval_s)),
            compaction: folio_broker::compaction::CompactionConfig {
                check_interval: Duration::from_millis(self.compaction_check_ms.max(1)),
                pause_before_swap: self.compaction_pause_before_swap,
                ..Default::default()
            },
            groups,
            ..BrokerConfig::default()
        })
    }

    /// The group coordinator's settings the flags set.
    fn group_config(&self) -> Result<folio_broker::domain::group::GroupConfig, String> {
        use folio_broker::domain::group::{GroupConfig, consumer::Assignor};
        let session = self.group_consumer_session_timeout_ms;
        let interval = self.group_consumer_heartbeat_interval_ms;
        if interval == 0 || interval >= session {
            return Err(format!(
                "--group-consumer-heartbeat-interval-ms {interval} must be above 0 and below \
                 --group-consumer-session-timeout-ms {session}"
            ));
        }
        let mut assignors = Vec::new();
        for name in self.group_consumer_assignors.split(',').map(str::trim) {
            let a = Assignor::parse(name).ok_or_else(|| {
                format!("--group-consumer-assignors: {name:?} is not uniform or range")
            })?;
            assignors.push(a);
        }
        let share_session = self.group_share_session_timeout_ms;
        let share_interval = self.group_share_heartbeat_interval_ms;
        if share_interval == 0 || share_interval >= share_session {
            return Err(format!(
                "--group-share-heartbeat-interval-ms {share_interval} must be above 0 and below \
                 --group-share-session-timeout-ms {share_session}"
            ));
        }
        if self.group_share_record_lock_duration_ms < 1000 {
            return Err("--group-share-record-lock-duration-ms must be at least 1000".into());
        }
        use folio_broker::domain::share::{Reset, ShareConfig};
        let reset = match self.share_auto_offset_reset.as_str() {
            "earliest" => Reset::Earliest,
            "latest" => Reset::Latest,
            other => {
                return Err(format!("--share-auto-offset-reset {other:?}: earliest or latest"));
            }
        };
        let shares = ShareConfig {
            lock_duration: Duration::from_millis(self.group_share_record_lock_duration_ms),
            delivery_count_limit: self.group_share_delivery_count_limit,
            session_timeout: Duration::from_millis(share_session),
            heartbeat_interval: Duration::from_millis(share_interval),
            auto_offset_reset: reset,
            ..ShareConfig::default()
        };
        Ok(GroupConfig {
            shares,
            consumer_session_timeout: Duration::from_millis(session),
            consumer_heartbeat_interval: Duration::from_millis(interval),
            consumer_assignors: assignors,
            initial_rebalance_delay: Duration::from_millis(self.group_initial_rebalance_delay_ms),
            ..GroupConfig::default()
        })
    }
}

impl KafkaArgs {
    /// The listeners, TLS and SASL settings.
    fn security(
        &self,
    ) -> Result<
        (
            Vec<folio_broker::config::ListenerConfig>,
            Option<TlsConfig>,
            folio_broker::config::SaslConfig,
        ),
        String,
    > {
        use folio_broker::security;
        let mut listeners = if self.listeners.is_empty() {
            let bind = self.kafka_listen.unwrap_or(([127, 0, 0, 1], 9092).into());
            vec![security::ListenerConfig::plaintext(bind)]
        } else {
            security::listeners_from(
                &self.listeners,
                &self.advertised_listeners,
                &self.protocol_map,
            )?
        };
        if let Some(a) = &self.advertise {
            let (host, port) = a
                .rsplit_once(':')
                .ok_or_else(|| format!("--advertise {a:?}: expected host:port"))?;
            let port: u16 =
                port.parse().map_err(|_| format!("--advertise {a:?}: bad port {port:?}"))?;
            if host.is_empty() {
                return Err(format!("--advertise {a:?}: empty host"));
            }
            listeners[0].advertised = Some((host.to_string(), port));
        }
        let tls = match (&self.ssl_cert, &self.ssl_key) {
            (Some(cert), Some(key)) => Some(TlsConfig {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.ssl_client_ca.clone(),
                client_auth: security::tls::ClientAuth::parse(&self.ssl_client_auth)?,
            }),
            (Some(_), None) => return Err("--ssl-cert needs --ssl-key".into()),
            _ => None,
        };
        let mut mechanisms = Vec::new();
        for m in self.sasl_enabled_mechanisms.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            mechanisms.push(security::Mechanism::parse(m).ok_or_else(|| {
                format!(
                    "--sasl-enabled-mechanisms: {m:?} is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                )
            })?);
        }
        let sasl = security::SaslConfig {
            mechanisms,
            session_lifetime: (self.connections_max_reauth_ms > 0)
                .then(|| Duration::from_millis(self.connections_max_reauth_ms)),
        };
        security::validate(&listeners, tls.as_ref(), &sasl)?;
        Ok((listeners, tls, sasl))
    }
}

/// `folio broker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Health and Prometheus metrics endpoint (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:8082")]
    http: SocketAddr,
    /// A file whose first line is the token the HTTP endpoint's POST routes need.
    #[arg(long, env = "FOLIO_HTTP_TOKEN_FILE", value_name = "FILE")]
    http_token_file: Option<std::path::PathBuf>,
}

/// Writable bookies registered in the cluster.
pub async fn writable_bookies(
    meta: &dyn folio_meta::MetadataStore,
    keys: &folio_meta::keys::Keys,
) -> Result<usize, String> {
    folio_meta::list_all(meta, &keys.bookies_writable())
        .await
        .map(|v| v.len())
        .map_err(|e| format!("listing bookies: {e}"))
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting runtime: {e}"))?;
    runtime.block_on(async {
        let (meta, keys, client) = args.cluster.connect().await?;
        let bookies = writable_bookies(meta.as_ref(), &keys).await?;
        let config = args.kafka.config(bookies)?;
        let env = LogEnv {
            meta,
            client,
            keys,
            clock: Arc::new(WallClock),
            owner: format!("broker-{}", args.kafka.node_id),
        };
        let http = crate::http::bind(args.http).await?;
        let http_addr = http.local_addr().map_err(|e| format!("HTTP listener: {e}"))?;
        let access = crate::http::HttpAccess::from_file(args.http_token_file.as_deref())?;
        let (meta, keys) = (env.meta.clone(), env.keys.clone());
        let broker = Broker::start(config, env).await.map_err(|e| e.to_string())?;
        let bookies: crate::http::Bookies = Arc::new(tokio::sync::RwLock::new(Vec::new()));
        let served = crate::http::Served { bookies, broker: broker.clone() };
        let backend = args.cluster.describe();
        let http_task = crate::http::spawn_for_broker(http, served, (meta, keys), backend, access);
        tracing::info!(kafka = %broker.addr(), http = %http_addr, "folio broker up; Ctrl-C to stop");
        tokio::signal::ctrl_c().await.map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
        http_task.abort();
        tokio::time::timeout(Duration::from_secs(30), broker.shutdown())
            .await
            .map_err(|_| "closing partition logs took over 30 s".to_string())
    })
}
