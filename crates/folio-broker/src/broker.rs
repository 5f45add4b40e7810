//! The broker: its settings, the topics it serves, and the managed log behind each
//! partition (opened on first use, closed on shutdown).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_log::{LogConfig, LogEnv, ManagedLog};
use tokio::net::TcpListener;
use tokio::sync::{OnceCell, watch};
use uuid::Uuid;

use crate::cluster::{self, BrokerInfo, Membership};
use crate::group::{Coordinator, GroupConfig};
use crate::limits::ListenerLimits;
use crate::metrics::{Metrics, label_value};
use crate::producers::{Producers, REBUILD_OFFSETS};
use crate::topics::{Topic, TopicConfig, Topics, log_name};

/// What a broker is and how it behaves; every field has the default a Kafka user expects.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `node.id`: the broker's id in Metadata answers.
    pub node_id: i32,
    /// Where the Kafka listener binds (port 0: any free port).
    pub listen: SocketAddr,
    /// The host and port clients are told to connect to (`advertised.listeners`); by default
    /// the bound address.
    pub advertised: Option<(String, u16)>,
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
    /// The group coordinator's settings.
    pub groups: GroupConfig,
    /// The broker's registration lease: when it dies, its partitions move this long after.
    pub lease_ttl: Duration,
    /// How often the live brokers are listed.
    pub membership_poll: Duration,
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
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            listen: "127.0.0.1:9092".parse().expect("address"),
            advertised: None,
            auto_create_topics: true,
            default_partitions: 1,
            default_replication: 1,
            replication_max: 1,
            topic_defaults: TopicConfig::default(),
            log: LogConfig::default(),
            limits: ListenerLimits::default(),
            batches_per_partition_max: 1024,
            groups: GroupConfig::default(),
            lease_ttl: Duration::from_secs(10),
            membership_poll: Duration::from_millis(500),
            delete_topic_enable: true,
            deletion_busy_fraction: 0.5,
            trash: Some(folio_log::TrashConfig::default()),
            audit_interval: Some(Duration::from_secs(600)),
            topic_refresh: Duration::from_secs(1),
        }
    }
}

/// A partition this broker has opened: its log and its idempotent producers.
#[derive(Debug)]
pub(crate) struct Partition {
    pub log: ManagedLog,
    pub producers: Mutex<Producers>,
    /// When a request last used it (`LogEnv::now_ms`): idle and least recently used
    /// partitions are closed (`partition_idle_timeout`, `partitions_open_max`).
    last_used_ms: AtomicU64,
}

impl Partition {
    /// Forgets an idempotent batch whose append failed, so its retry is appended.
    pub fn forget_batch(&self, producer_id: i64, base_sequence: i32) {
        self.producers.lock().expect("producers lock").forget(producer_id, base_sequence);
    }
}

type LogCell = Arc<OnceCell<Arc<Partition>>>;

pub(crate) struct Inner {
    pub config: BrokerConfig,
    pub env: LogEnv,
    pub topics: Topics,
    pub metrics: Metrics,
    pub groups: Arc<Coordinator>,
    pub groups_config: GroupConfig,
    pub membership: Arc<Membership>,
    /// Wakes the topic deleter.
    pub deletions: tokio::sync::Notify,
    pub cluster_id: String,
    /// Host and port in Metadata answers.
    pub advertised: (String, i32),
    logs: Mutex<HashMap<(Uuid, i32), LogCell>>,
    pub shutdown: watch::Sender<bool>,
    /// The trash deleter, active while this broker is the controller; taken (and so
    /// stopped) when the broker stops.
    trash: Mutex<Option<folio_log::TrashHandle>>,
    /// The deleter itself (for status and wake-ups), also after it stopped.
    pub trash_deleter: folio_log::Trash,
    /// The last audit this broker ran as the controller.
    pub last_audit: Mutex<Option<crate::audit::Audit>>,
    /// Request and answer bytes all connections may hold (`limits.process_bytes_max`).
    pub request_budget: Arc<tokio::sync::Semaphore>,
    /// Fetch answer bytes all connections may hold (`limits.answer_bytes_max`).
    pub answer_budget: Arc<tokio::sync::Semaphore>,
    /// Topics auto-created in the current minute (`limits.auto_create_per_minute_max`).
    pub auto_created: Mutex<(std::time::Instant, usize)>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("node_id", &self.config.node_id)
            .field("advertised", &self.advertised)
            .finish_non_exhaustive()
    }
}

/// A running broker. Clones share it.
#[derive(Debug, Clone)]
pub struct Broker {
    pub(crate) inner: Arc<Inner>,
    addr: SocketAddr,
}

impl Broker {
    /// Binds the listener and starts serving.
    pub async fn start(config: BrokerConfig, env: LogEnv) -> Result<Broker, String> {
        config.limits.validate()?;
        let config_limits = config.limits.clone();
        if config.default_partitions == 0
            || config.default_partitions > crate::topics::PARTITIONS_MAX as u32
        {
            return Err(format!(
                "num.partitions must be 1..={}, not {}",
                crate::topics::PARTITIONS_MAX,
                config.default_partitions
            ));
        }
        if config.default_replication == 0 || config.default_replication > config.replication_max {
            return Err(format!(
                "default replication factor {} must be 1..={} (the bookies there are)",
                config.default_replication, config.replication_max
            ));
        }
        let listener = listen(config.listen, &config.limits)
            .map_err(|e| format!("binding the Kafka listener on {}: {e}", config.listen))?;
        let addr = listener.local_addr().map_err(|e| format!("listener address: {e}"))?;
        let advertised = match &config.advertised {
            Some((h, p)) => (h.clone(), *p as i32),
            None if addr.ip().is_unspecified() => {
                return Err(format!(
                    "listening on {addr} needs an advertised address clients can reach (--advertise host:port)"
                ));
            }
            None => (addr.ip().to_string(), addr.port() as i32),
        };
        let cluster_id = folio_meta::records::ensure_cluster_id(env.meta.as_ref(), &env.keys)
            .await
            .map_err(|e| format!("reading the cluster id: {e}"))?;
        let me =
            BrokerInfo { node_id: config.node_id, host: advertised.0.clone(), port: advertised.1 };
        let lease = cluster::register(env.meta.as_ref(), &env.keys, &me, config.lease_ttl).await?;
        let membership = Membership::new(me);
        let trash_deleter =
            folio_log::Trash::new(env.clone(), config.trash.clone().unwrap_or_default());
        let trash = config
            .trash
            .is_some()
            .then(|| trash_deleter.clone().spawn_gated(membership.controller_gate()));
        // Who is live and who is controller, before serving.
        if let Err(e) = cluster::join(env.meta.as_ref(), &env.keys, &membership, lease).await {
            tracing::warn!(error = %e, "reading the live brokers and the controller failed; retrying in the background");
        }
        let inner = Arc::new(Inner {
            topics: Topics::new(env.meta.clone(), env.keys.clone()),
            groups: Coordinator::new(config.groups.clone(), env.meta.clone(), env.keys.clone()),
            groups_config: config.groups.clone(),
            membership,
            deletions: tokio::sync::Notify::new(),
            config,
            env,
            metrics: Metrics::default(),
            cluster_id,
            advertised,
            logs: Mutex::new(HashMap::new()),
            shutdown: watch::channel(false).0,
            trash: Mutex::new(trash),
            trash_deleter,
            last_audit: Mutex::new(None),
            request_budget: Arc::new(tokio::sync::Semaphore::new(config_limits.process_bytes_max)),
            answer_budget: Arc::new(tokio::sync::Semaphore::new(config_limits.answer_bytes_max)),
            auto_created: Mutex::new((std::time::Instant::now(), 0)),
        });
        tracing::info!(
            node_id = inner.config.node_id,
            %addr,
            advertised = %format!("{}:{}", inner.advertised.0, inner.advertised.1),
            cluster_id = %inner.cluster_id,
            "Kafka listener up"
        );
        tokio::spawn(crate::server::accept(inner.clone(), listener));
        tokio::spawn(inner.groups.clone().tick(inner.shutdown.subscribe()));
        tokio::spawn(cluster::maintain(
            inner.env.meta.clone(),
            inner.env.keys.clone(),
            inner.membership.clone(),
            lease,
            inner.config.lease_ttl,
            inner.config.membership_poll,
            inner.shutdown.subscribe(),
        ));
        tokio::spawn(release_moved(inner.clone()));
        tokio::spawn(refresh_topics(inner.clone()));
        tokio::spawn(close_idle_partitions(inner.clone()));
        tokio::spawn(crate::deletion::run(inner.clone()));
        if let Some(every) = inner.config.audit_interval {
            tokio::spawn(run_audits(inner.clone(), every));
        }
        Ok(Broker { inner, addr })
    }

    /// The bound listener address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Partition logs open on this broker now (at most `limits.partitions_open_max`).
    pub fn partitions_open(&self) -> usize {
        self.inner.partitions_open()
    }

    /// Request and answer bytes all connections hold now (at most
    /// `limits.process_bytes_max + limits.answer_bytes_max`).
    pub fn bytes_held(&self) -> usize {
        let l = &self.inner.config.limits;
        l.process_bytes_max - self.inner.request_budget.available_permits() + l.answer_bytes_max
            - self.inner.answer_budget.available_permits()
    }

    /// Every metric in Prometheus text: requests, bytes, latencies, topics, and the groups
    /// this broker coordinates (state, members, rebalances, lag per partition).
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        let mut out = self.inner.metrics.render();
        if let Some(a) = self.last_audit() {
            out.push_str(&a.gauges());
        }
        let held = self.bytes_held();
        let _ = writeln!(
            out,
            "# HELP folio_kafka_bytes_held Request and answer bytes connections hold now (limit: process_bytes_max + answer_bytes_max).\n# TYPE folio_kafka_bytes_held gauge\nfolio_kafka_bytes_held {held}"
        );
        let _ = writeln!(
            out,
            "# HELP folio_kafka_partitions_open Partition logs open here (limit: partitions_open_max).\n# TYPE folio_kafka_partitions_open gauge\nfolio_kafka_partitions_open {}",
            self.partitions_open()
        );
        out.push_str("# HELP folio_kafka_group_members Members of a group this broker coordinates.\n# TYPE folio_kafka_group_members gauge\n");
        let groups = self.inner.groups.snapshot();
        // Group ids are any string a client sends: escaped, they cannot forge samples.
        let groups: Vec<_> = groups.iter().map(|(n, g)| (label_value(n), g)).collect();
        for (name, g) in &groups {
            let _ = writeln!(
                out,
                "folio_kafka_group_members{{group=\"{name}\",state=\"{}\"}} {}",
                g.state.name(),
                g.members.len()
            );
        }
        out.push_str("# HELP folio_kafka_group_rebalances_total Rebalances a group has started here.\n# TYPE folio_kafka_group_rebalances_total counter\n");
        for (name, g) in &groups {
            let _ = writeln!(
                out,
                "folio_kafka_group_rebalances_total{{group=\"{name}\"}} {}",
                g.rebalances
            );
        }
        out.push_str("# HELP folio_kafka_group_lag Records between a group's committed offset and the end of a partition this broker serves.\n# TYPE folio_kafka_group_lag gauge\n");
        for (group, topic, id, p, committed) in self.inner.groups.last_commits() {
            if let Some(log) = self.inner.open_log(id, p) {
                let lag = (log.end_offset() as i64 - committed).max(0);
                let (group, topic) = (label_value(&group), label_value(&topic));
                let _ = writeln!(
                    out,
                    "folio_kafka_group_lag{{group=\"{group}\",topic=\"{topic}\",partition=\"{p}\"}} {lag}"
                );
            }
        }
        out
    }

    /// The last audit this broker ran (as the controller), if any.
    pub fn last_audit(&self) -> Option<crate::audit::Audit> {
        self.inner.last_audit.lock().expect("audit lock").clone()
    }

    /// A simulated crash (benchmarks and tests): stops serving and renewing the lease, but
    /// neither unregisters nor closes its partition logs, so the others take over only when
    /// the lease expires, fencing the logs left open.
    pub fn abort(&self) {
        self.inner.membership.revoke_on_stop.store(false, std::sync::atomic::Ordering::SeqCst);
        self.inner.shutdown.send_replace(true);
        self.inner.trash.lock().expect("trash lock").take();
    }

    /// The cluster's trash deleter as this broker runs it (active only on the controller).
    pub fn trash(&self) -> &folio_log::Trash {
        &self.inner.trash_deleter
    }

    /// Whether this broker's trash deleter is running passes now (it is the controller).
    pub fn trash_deleter_active(&self) -> bool {
        self.inner.trash.lock().expect("trash lock").as_ref().is_some_and(|t| t.is_active())
    }

    /// The controller's node id as this broker last read it (-1: none yet).
    pub fn controller(&self) -> i32 {
        self.inner.membership.controller()
    }

    /// Whether this broker serves `topic`'s `partition` now (by the live brokers it sees).
    pub fn owns_partition(&self, topic_id: Uuid, partition: i32) -> bool {
        self.inner.membership.owns(&cluster::partition_key(topic_id, partition))
    }

    /// The live brokers this broker sees (node ids).
    pub fn live_brokers(&self) -> Vec<i32> {
        self.inner.membership.live().iter().map(|b| b.node_id).collect()
    }

    /// Takes `topic`'s `partition` over now if this broker owns it: opens the log (fencing
    /// and recovering the previous owner's last ledger) and rebuilds producer state.
    pub async fn open_partition(&self, topic: &str, partition: i32) -> Result<(), String> {
        let t = self
            .inner
            .topics
            .get(topic)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no topic {topic}"))?;
        self.inner.partition(&t, partition).await.map(|_| ()).map_err(|e| e.to_string())
    }

    /// Topic deletions in progress (from the metadata store): see `deletion::progress`.
    pub async fn deletions(&self) -> Result<Vec<crate::deletion::DeletionProgress>, String> {
        crate::deletion::progress(&self.inner.env).await
    }

    /// The id of `topic`, if it exists.
    pub async fn topic_id(&self, topic: &str) -> Option<Uuid> {
        self.inner.topics.get(topic).await.ok().flatten().map(|t| t.record.id)
    }

    /// Stops accepting, ends connections, and closes every open partition log (pending
    /// appends finish first).
    pub async fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        self.inner.trash.lock().expect("trash lock").take();
        cluster::unregister(
            self.inner.env.meta.as_ref(),
            &self.inner.env.keys,
            self.inner.config.node_id,
        )
        .await;
        self.inner.close_partitions(|_, _| true, "the broker is stopping").await;
        tracing::info!(node_id = self.inner.config.node_id, "broker stopped");
    }
}

impl Inner {
    /// The effective config of `topic`.
    pub fn topic_config(&self, topic: &Topic) -> TopicConfig {
        TopicConfig::resolve(&self.config.topic_defaults, &topic.record.configs)
    }

    /// The log of `topic`'s `partition`, opened (and so owned) on first use.
    pub async fn log(
        &self,
        topic: &Topic,
        partition: i32,
    ) -> Result<ManagedLog, folio_log::LogError> {
        Ok(self.partition(topic, partition).await?.log.clone())
    }

    /// `topic`'s `partition`, opened on first use: the log is fenced and recovered, then
    /// the idempotent producers' state is rebuilt from its tail.
    pub async fn partition(
        &self,
        topic: &Topic,
        partition: i32,
    ) -> Result<Arc<Partition>, folio_log::LogError> {
        let key = (topic.record.id, partition);
        let owner = self.membership.owner(&cluster::partition_key(topic.record.id, partition));
        if owner.node_id != self.config.node_id {
            return Err(folio_log::LogError::Fenced(format!(
                "{} partition {partition}: served by broker {}",
                topic.name, owner.node_id
            )));
        }
        let (cell, evicted) = {
            let mut logs = self.logs.lock().expect("logs lock");
            let evicted = if logs.contains_key(&key) {
                None
            } else {
                Self::make_room(&mut logs, &self.config.limits)
            };
            (logs.entry(key).or_default().clone(), evicted)
        };
        if let Some(((id, p), old)) = evicted {
            self.metrics.limit_hit(crate::limits::Limit::PartitionsOpen);
            self.close_cell(
                id,
                p,
                old,
                "least recently used, to open another (partitions_open_max)",
            )
            .await;
        }
        let log = cell
            .get_or_try_init(|| async {
                let tc = self.topic_config(topic);
                let (retention_time, retention_bytes) = tc.retention();
                let quorums = LogConfig::for_bookies(topic.record.replication as usize);
                let mut lc = self.config.log.clone();
                lc.ensemble_size = quorums.ensemble_size;
                lc.write_quorum = quorums.write_quorum;
                lc.ack_quorum = quorums.ack_quorum;
                lc.retention_time = retention_time;
                lc.retention_bytes = retention_bytes;
                let log = self.open_or_create_log(topic, partition, lc).await?;
                let producers = rebuild_producers(&log).await?;
                self.metrics.partitions_opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok::<_, folio_log::LogError>(Arc::new(Partition {
                    log,
                    producers: Mutex::new(producers),
                    last_used_ms: AtomicU64::new(self.env.now_ms()),
                }))
            })
            .await;
        match log {
            Ok(p) if !p.log.is_usable() => {
                // Fenced or deleted under us: forget it so the next use opens it afresh.
                self.logs.lock().expect("logs lock").remove(&key);
                Err(p.log.unusable_error())
            }
            Ok(p) => {
                p.last_used_ms.fetch_max(self.env.now_ms(), Ordering::Relaxed);
                Ok(p.clone())
            }
            Err(e) => {
                self.logs.lock().expect("logs lock").remove(&key);
                Err(e)
            }
        }
    }

    /// Opens `topic`'s `partition` log; creates it first if it was never created (a
    /// partition's log is created on its first use). The creation compares the topic's
    /// record, read from the store now, in the same transaction: a broker whose caches
    /// still show a deleted topic never creates storage for it again (the L1 leak of a
    /// resurrected log, and appends acknowledged into it that nobody would ever read).
    async fn open_or_create_log(
        &self,
        topic: &Topic,
        partition: i32,
        config: LogConfig,
    ) -> Result<ManagedLog, folio_log::LogError> {
        let name = log_name(topic.record.id, partition);
        match ManagedLog::open(self.env.clone(), &name, config.clone()).await {
            Err(folio_log::LogError::NoSuchLog(_)) => {}
            other => return other,
        }
        let gone =
            || folio_log::LogError::Deleted(format!("{name}: topic {} was deleted", topic.name));
        let fresh = self.topics.load(&topic.name).await?.ok_or_else(gone)?;
        if fresh.record.id != topic.record.id || partition >= fresh.record.partitions as i32 {
            return Err(gone());
        }
        let guard =
            vec![folio_meta::Compare::Version(self.env.keys.topic(&topic.name), fresh.version)];
        match ManagedLog::create(&self.env, &name, &config, guard).await {
            // Exists: another broker (an owner before this one) created it first.
            Ok(()) | Err(folio_log::LogError::Exists(_)) => {}
            Err(folio_log::LogError::CreateRefused { .. }) => {
                // Changed (configs, partitions) or deleted since the read: a caller retries
                // with what the store says then.
                return Err(folio_log::LogError::Fenced(format!(
                    "{name}: topic {} changed while its log was being created; retry",
                    topic.name
                )));
            }
            Err(e) => return Err(e),
        }
        ManagedLog::open(self.env.clone(), &name, config).await
    }

    /// Stops serving every open partition `which` selects (pending appends finish first);
    /// returns how many were open.
    pub async fn close_partitions(&self, which: impl Fn(Uuid, i32) -> bool, why: &str) -> u64 {
        let cells: Vec<((Uuid, i32), LogCell)> = {
            let mut logs = self.logs.lock().expect("logs lock");
            let keys: Vec<(Uuid, i32)> =
                logs.keys().filter(|(id, p)| which(*id, *p)).copied().collect();
            keys.into_iter().filter_map(|k| logs.remove(&k).map(|c| (k, c))).collect()
        };
        let mut closed = 0;
        for ((id, p), cell) in cells {
            closed += u64::from(self.close_cell(id, p, cell, why).await);
        }
        closed
    }

    /// Closes a partition already taken out of the open set; false if it never opened.
    async fn close_cell(&self, id: Uuid, p: i32, cell: LogCell, why: &str) -> bool {
        let Some(part) = cell.get() else { return false };
        tracing::info!(log = part.log.name(), topic_id = %id, partition = p, why, "no longer serving a partition");
        if let Err(e) = part.log.close().await {
            tracing::warn!(log = part.log.name(), error = %e, "closing a partition failed");
        }
        true
    }

    /// With `partitions_open_max` partitions open, takes the least recently used one out
    /// of `logs` for the caller to close (one still opening is never taken).
    fn make_room(
        logs: &mut HashMap<(Uuid, i32), LogCell>,
        limits: &ListenerLimits,
    ) -> Option<((Uuid, i32), LogCell)> {
        if logs.len() < limits.partitions_open_max {
            return None;
        }
        let lru = logs
            .iter()
            .filter_map(|(k, c)| Some((*k, c.get()?.last_used_ms.load(Ordering::Relaxed))))
            .min_by_key(|(_, used)| *used)?
            .0;
        logs.remove(&lru).map(|c| (lru, c))
    }

    /// Closes the partitions no request used for `partition_idle_timeout`; returns how
    /// many it closed.
    pub async fn close_idle_partitions(&self) -> u64 {
        let idle = self.config.limits.partition_idle_timeout.as_millis() as u64;
        let before = self.env.now_ms().saturating_sub(idle);
        let idle_keys: std::collections::HashSet<(Uuid, i32)> = {
            let logs = self.logs.lock().expect("logs lock");
            logs.iter()
                .filter(|(_, c)| {
                    c.get().is_some_and(|p| p.last_used_ms.load(Ordering::Relaxed) <= before)
                })
                .map(|(k, _)| *k)
                .collect()
        };
        if idle_keys.is_empty() {
            return 0;
        }
        let closed = self
            .close_partitions(|id, p| idle_keys.contains(&(id, p)), "idle (partition_idle_timeout)")
            .await;
        self.metrics.partitions_closed_idle.fetch_add(closed, Ordering::Relaxed);
        closed
    }

    /// Partitions open here now (including those being opened).
    pub fn partitions_open(&self) -> usize {
        self.logs.lock().expect("logs lock").len()
    }

    /// The open log of a partition, if this broker has opened it (no metadata access).
    pub fn open_log(&self, id: Uuid, partition: i32) -> Option<ManagedLog> {
        self.logs
            .lock()
            .expect("logs lock")
            .get(&(id, partition))
            .and_then(|c| c.get().map(|p| p.log.clone()))
    }

    /// Applies a topic's (new) retention to its open logs and trims them now.
    pub async fn apply_retention(&self, topic: &Topic) {
        let (time, bytes) = self.topic_config(topic).retention();
        for p in 0..topic.record.partitions as i32 {
            if let Some(log) = self.open_log(topic.record.id, p) {
                log.set_retention(time, bytes);
                if let Err(e) = log.trim().await {
                    tracing::warn!(log = log.name(), error = %e, "trim after a retention change failed");
                }
            }
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.env.now_ms() as i64
    }
}

/// The idempotent producers' state, from the batch headers of the log's last
/// `REBUILD_OFFSETS` offsets.
async fn rebuild_producers(log: &ManagedLog) -> Result<Producers, folio_log::LogError> {
    let mut producers = Producers::default();
    let status = log.status();
    let mut offset = status.start_offset.max(status.end_offset.saturating_sub(REBUILD_OFFSETS));
    while offset < status.end_offset {
        let entries = log.read(offset, 8 << 20, 4096).await?;
        let Some(last) = entries.last() else { break };
        offset = last.next_offset();
        for e in &entries {
            match crate::batch::read_header(&e.payload) {
                Ok(info) => producers.restore(&info, e.base_offset as i64),
                Err(err) => {
                    tracing::warn!(log = log.name(), offset = e.base_offset, error = %err, "a stored batch does not parse")
                }
            }
        }
    }
    if !producers.is_empty() {
        tracing::info!(
            log = log.name(),
            producers = producers.len(),
            "idempotent producer state rebuilt"
        );
    }
    Ok(producers)
}

/// When the live brokers change: closes the partitions and forgets the groups this broker
/// no longer owns, so their new owners take over without a fight.
async fn release_moved(inner: Arc<Inner>) {
    let mut changes = inner.membership.changes.subscribe();
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let membership = inner.membership.clone();
        let moved = inner
            .close_partitions(
                |id, p| !membership.owns(&cluster::partition_key(id, p)),
                "it moved to another broker",
            )
            .await;
        inner.metrics.partitions_released.fetch_add(moved, std::sync::atomic::Ordering::Relaxed);
        inner.groups.forget_unless(|g| membership.owns(&cluster::group_key(g)));
    }
}

/// Re-reads the topics every second: partition counts and configs changed through another
/// broker reach this one, and new retention applies to the partitions it serves.
async fn refresh_topics(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    let mut first = true;
    loop {
        tokio::select! {
            () = tokio::time::sleep(inner.config.topic_refresh) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        match inner.topics.refresh().await {
            Ok(changed) => {
                if !first {
                    for t in changed {
                        inner.apply_retention(&t).await;
                    }
                }
                // Partitions of topics deleted (through any broker) stop being served.
                let ids = inner.topics.cached_ids();
                inner.close_partitions(|id, _| !ids.contains(&id), "its topic was deleted").await;
            }
            Err(e) => tracing::warn!(error = %e, "re-reading topics failed"),
        }
        first = false;
    }
}

/// Closes idle partitions, checking four times per `partition_idle_timeout` (at most
/// every 30 s, at least every 100 ms).
async fn close_idle_partitions(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    let every = (inner.config.limits.partition_idle_timeout / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        inner.close_idle_partitions().await;
    }
}

/// How long a long poll may be asked to wait at most.
pub const FETCH_WAIT_MAX: Duration = Duration::from_secs(60);

/// On the controller: runs the audit every `every` and keeps the result for the gauges.
async fn run_audits(inner: Arc<Inner>, every: Duration) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if inner.membership.controller() != inner.config.node_id {
            continue;
        }
        match crate::audit::run(&inner.env).await {
            Ok(a) => {
                let orphans = a.findings.iter().filter(|f| f.class.is_orphan()).count();
                if orphans > 0 {
                    tracing::warn!(
                        orphans,
                        "the audit found orphans: run `folio audit` for the list"
                    );
                }
                *inner.last_audit.lock().expect("audit lock") = Some(a);
            }
            Err(e) => tracing::warn!(error = %e, "audit failed; the next one retries"),
        }
    }
}

/// Connections waiting to be accepted (the kernel's listen backlog).
const LISTEN_BACKLOG: u32 = 1024;

/// Binds the Kafka listener. Its send buffer size (`send_buffer_bytes`) is inherited by
/// every connection it accepts.
fn listen(addr: SocketAddr, limits: &ListenerLimits) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if limits.send_buffer_bytes > 0 {
        let bytes = u32::try_from(limits.send_buffer_bytes).map_err(std::io::Error::other)?;
        socket.set_send_buffer_size(bytes)?;
    }
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}
