//! The broker: its settings, the topics it serves, and the managed log behind each
//! partition (opened on first use, closed on shutdown).

use crate::domain::schema_ids::SchemaIds;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_log::{LogEnv, ManagedLog};
use folio_proto::InvalidConfig;
use folio_rt::net::{ListenOptions, Listener};
use tokio::sync::watch;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::domain::cluster::{self, BrokerInfo, Membership};
use crate::domain::group::Coordinator;
use crate::domain::topics::Topics;
use crate::domain::txn::TxnCoordinator;
use crate::errors::BrokerError;
use crate::limits::ListenerLimits;
use crate::metrics::{Metrics, label_value};
use crate::security::tls::TlsAcceptor;
use crate::startup::StartError;
use crate::state::Inner;

/// A running broker. Clones share it.
#[derive(Debug, Clone)]
pub struct Broker {
    pub(crate) inner: Arc<Inner>,
    addr: SocketAddr,
    /// Every listener's name and bound address.
    addrs: Arc<Vec<(String, SocketAddr)>>,
    /// The TLS configuration of the TLS listeners (reloaded in place).
    tls: Option<Arc<TlsAcceptor>>,
}

/// The limits and the topic defaults make sense together (each error names the setting).
fn check_defaults(config: &BrokerConfig) -> Result<(), InvalidConfig> {
    config.limits.validate()?;
    if config.default_partitions == 0
        || config.default_partitions > crate::domain::topics::PARTITIONS_MAX as u32
    {
        return Err(InvalidConfig::new(format!(
            "num.partitions must be 1..={}, not {}",
            crate::domain::topics::PARTITIONS_MAX,
            config.default_partitions
        )));
    }
    if config.default_replication == 0 || config.default_replication > config.replication_max {
        return Err(InvalidConfig::new(format!(
            "default replication factor {} must be 1..={} (the bookies there are)",
            config.default_replication, config.replication_max
        )));
    }
    Ok(())
}

impl Broker {
    /// Binds the listener and starts serving.
    pub async fn start(config: BrokerConfig, env: LogEnv) -> Result<Broker, StartError> {
        check_defaults(&config)?;
        let config_limits = config.limits.clone();
        crate::security::validate(&config.listeners, config.tls.as_ref(), &config.sasl)?;
        let (bound, endpoints, tls) = bind_listeners(&config)?;
        let addr = bound[0].1;
        let cluster_id = folio_meta::records::ensure_cluster_id(env.meta.as_ref(), &env.keys)
            .await
            .map_err(StartError::meta("reading the cluster id"))?;
        let me = BrokerInfo { node_id: config.node_id, endpoints };
        forget_earlier_run(&env, &config).await?;
        let cluster::Registration { lease, valid_at: granted_at } =
            cluster::register(env.meta.as_ref(), &env.keys, &me, config.lease_ttl, &config.clock)
                .await?;
        let membership = Membership::new(me, config.clock.clone());
        membership.set_lease(lease);
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
        let acls = config.authorizer.clone().map(crate::domain::acl::Acls::new);
        let (meta, keys, clock) = (env.meta.clone(), env.keys.clone(), env.clock.clone());
        let tenure = membership.changes.subscribe();
        let groups =
            Coordinator::new(config.groups.clone(), meta, keys, clock, config.node_id, tenure);
        let (group_configs, shares) = group_parts(&config, &env);
        let inner = Arc::new(Inner {
            topics: Topics::new(env.meta.clone(), env.keys.clone()),
            groups,
            group_configs,
            shares,
            txns: Arc::new(TxnCoordinator::new(env.meta.clone(), env.keys.clone())),
            txns_ending: tokio::sync::Notify::new(),
            schema_ids: SchemaIds::new(folio_registry::Registry::new(env.meta.clone(), &env.keys)),
            groups_config: config.groups.clone(),
            membership,
            deletions: tokio::sync::Notify::new(),
            config,
            env,
            metrics: Metrics::default(),
            cluster_id,
            acls,
            logs: Mutex::new(BTreeMap::new()),
            shutdown: watch::channel(false).0,
            trash: Mutex::new(trash),
            trash_deleter,
            last_audit: Mutex::new(None),
            request_budget: Arc::new(tokio::sync::Semaphore::new(config_limits.process_bytes_max)),
            answer_budget: Arc::new(tokio::sync::Semaphore::new(config_limits.answer_bytes_max)),
            auto_created: Mutex::new((tokio::time::Instant::now(), 0)),
            fetch_sessions: crate::domain::fetch_sessions::FetchSessions::new(&config_limits),
            quotas: crate::domain::quotas::Quotas::new(),
            leader_epochs: Default::default(),
        });
        start_security(&inner, tls.as_ref()).await?;
        let admission = crate::wire::server::Admission::new(&inner.config.limits);
        let mut addrs = Vec::new();
        for ((socket, addr, runtime), e) in bound.into_iter().zip(&inner.membership.me().endpoints)
        {
            tracing::info!(
                node_id = inner.config.node_id,
                listener = %runtime.name,
                protocol = runtime.protocol.name(),
                %addr,
                advertised = %format!("{}:{}", e.host, e.port),
                cluster_id = %inner.cluster_id,
                "Kafka listener up"
            );
            addrs.push((runtime.name.to_string(), addr));
            tokio::spawn(crate::wire::server::accept(
                inner.clone(),
                socket,
                runtime,
                admission.clone(),
            ));
        }
        tokio::spawn(inner.groups.clone().tick(inner.shutdown.subscribe()));
        tokio::spawn(cluster::lease::maintain(
            inner.env.meta.clone(),
            inner.env.keys.clone(),
            inner.membership.clone(),
            granted_at,
            inner.config.lease_ttl,
            inner.config.membership_poll,
            inner.shutdown.subscribe(),
        ));
        spawn_background(&inner);
        Ok(Broker { inner, addr, addrs: Arc::new(addrs), tls })
    }

    /// The bound address of the first listener.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// This broker's node id.
    pub fn node_id(&self) -> i32 {
        self.inner.config.node_id
    }

    /// Whether `principal` (`User:<name>`) may do `op` on the cluster, as the Kafka API
    /// checks it (always, without an authorizer): for what the console does outside Kafka.
    pub fn cluster_allowed(&self, principal: &str, op: crate::domain::acl::Operation) -> bool {
        use crate::domain::acl::{CLUSTER_NAME, ResourceType, Session};
        let session = Session {
            listener: "console".into(),
            principal: principal.into(),
            host: "127.0.0.1".into(),
        };
        let acls = self.inner.acls.as_ref();
        acls.is_none_or(|a| a.authorize(&session, op, ResourceType::Cluster, CLUSTER_NAME))
    }

    /// Where a client in this process reaches the broker without TLS (the console): the
    /// first PLAINTEXT or SASL_PLAINTEXT listener (on loopback when bound to any address),
    /// with the SASL mechanism to log in with when it takes SASL (SCRAM if offered).
    pub fn console_listener(&self) -> Option<(SocketAddr, Option<crate::security::Mechanism>)> {
        use crate::security::{Mechanism, SecurityProtocol};
        let config = &self.inner.config;
        config.listeners.iter().find_map(|l| {
            let sasl = match l.protocol {
                SecurityProtocol::Plaintext => false,
                SecurityProtocol::SaslPlaintext => true,
                _ => return None,
            };
            let mut addr = self.listener_addr(&l.name)?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let offered = &config.sasl.mechanisms;
            let scram = offered.iter().copied().find(|m| *m != Mechanism::Plain);
            let mechanism = scram.or_else(|| offered.first().copied());
            Some((addr, if sasl { mechanism } else { None }))
        })
    }

    /// The bound address of the listener named `name`.
    pub fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        self.addrs.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
    }

    /// Reads the TLS certificate and key again now (what SIGHUP does); an error keeps the
    /// running ones.
    pub fn reload_tls(&self) -> Result<(), crate::security::tls::TlsError> {
        match &self.tls {
            Some(t) => t.reload(),
            None => Err(crate::security::tls::TlsError::NoTlsListener),
        }
    }

    /// The broker's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Partition logs open on this broker now (at most `limits.partitions_open_max`).
    pub fn partitions_open(&self) -> usize {
        self.inner.partitions_open()
    }

    /// Entities with client quotas in this broker's cache.
    pub fn client_quota_entities(&self) -> usize {
        self.inner.quotas.entities().len()
    }

    /// Fetch sessions (KIP-227) open now (at most `limits.fetch_sessions_max`).
    pub fn fetch_sessions(&self) -> usize {
        self.inner.fetch_sessions.len()
    }

    /// Request and answer bytes all connections hold now (at most
    /// `limits.process_bytes_max + limits.answer_bytes_max`).
    pub fn bytes_held(&self) -> usize {
        let l = &self.inner.config.limits;
        l.process_bytes_max - self.inner.request_budget.available_permits() + l.answer_bytes_max
            - self.inner.answer_budget.available_permits()
    }

    /// The transactions open on the partitions served here: how many, how long the oldest
    /// has been open (seconds, since this owner saw it), and each partition's LSO lag (its
    /// end less its last stable offset: what read_committed consumers wait for) where
    /// one is open.
    fn render_txn_gauges(&self, out: &mut String) {
        use std::fmt::Write as _;
        let now = self.inner.env.now_ms();
        let (mut open, mut oldest, mut lags) = (0, None::<u64>, Vec::new());
        for part in self.inner.open_partition_states() {
            let t = part.txns.lock().expect("txns lock");
            if t.open_count() == 0 {
                continue;
            }
            open += t.open_count();
            if let Some(o) = t.oldest_open_ms() {
                oldest = Some(oldest.map_or(o, |x| x.min(o)));
            }
            let end = part.log.status().end_offset as i64;
            lags.push((part.log.name().to_string(), end - t.last_stable_offset(end)));
        }
        let age = oldest.map_or(0, |o| now.saturating_sub(o) / 1000);
        let _ = writeln!(
            out,
            "# HELP folio_kafka_txn_open Transactions open on the partitions served here.\n# TYPE folio_kafka_txn_open gauge\nfolio_kafka_txn_open {open}\n# HELP folio_kafka_txn_oldest_open_seconds How long the oldest transaction open on a partition served here has been open (since this owner saw it).\n# TYPE folio_kafka_txn_oldest_open_seconds gauge\nfolio_kafka_txn_oldest_open_seconds {age}"
        );
        out.push_str("# HELP folio_kafka_lso_lag Offsets between a partition's end and its last stable offset, where a transaction is open.\n# TYPE folio_kafka_lso_lag gauge\n");
        for (log, lag) in lags {
            let _ = writeln!(out, "folio_kafka_lso_lag{{log=\"{}\"}} {lag}", label_value(&log));
        }
    }

    /// Every metric in Prometheus text: requests, bytes, latencies, topics, and the groups
    /// this broker coordinates (state, members, rebalances, lag per partition).
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        let mut out = self.inner.metrics.render(crate::api::framing::api_name);
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
        let _ = writeln!(
            out,
            "# HELP folio_kafka_leader_epochs_cached Logs whose leader epoch this broker caches for Metadata.\n# TYPE folio_kafka_leader_epochs_cached gauge\nfolio_kafka_leader_epochs_cached {}",
            self.inner.leader_epochs.len()
        );
        let _ = writeln!(
            out,
            "# HELP folio_kafka_fetch_sessions Fetch sessions (KIP-227) open here (limit: fetch_sessions_max).\n# TYPE folio_kafka_fetch_sessions gauge\nfolio_kafka_fetch_sessions {}",
            self.fetch_sessions()
        );
        let _ = writeln!(
            out,
            "# HELP folio_log_read_prefetched_bytes Bytes partition readers hold or have in flight ahead of their next fetch (limit: PREFETCH_BYTES_MAX).\n# TYPE folio_log_read_prefetched_bytes gauge\nfolio_log_read_prefetched_bytes {}",
            folio_log::prefetched_bytes()
        );
        let _ = writeln!(
            out,
            "# HELP folio_ledger_adds_stalled_total Ledger adds of this process reported as stalled: not confirmed within add_stall_after (each logged with its bookies).\n# TYPE folio_ledger_adds_stalled_total counter\nfolio_ledger_adds_stalled_total {}",
            folio_client::adds_stalled_total()
        );
        self.render_txn_gauges(&mut out);
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
    pub fn last_audit(&self) -> Option<crate::domain::audit::Audit> {
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

    /// Why this broker is fenced (it could not hold its registration and serves no
    /// partition and no group), if it is.
    pub fn fenced(&self) -> Option<String> {
        self.inner.membership.fenced()
    }

    /// The live brokers this broker sees (node ids).
    pub fn live_brokers(&self) -> Vec<i32> {
        self.inner.membership.live().iter().map(|b| b.node_id).collect()
    }

    /// Takes `topic`'s `partition` over now if this broker owns it: opens the log (fencing
    /// and recovering the previous owner's last ledger) and rebuilds producer state.
    pub async fn open_partition(&self, topic: &str, partition: i32) -> Result<(), BrokerError> {
        self.partition_log(topic, partition).await.map(|_| ())
    }

    /// Runs a compaction pass over `topic`'s `partition` now, if one is due under the
    /// topic's configs (as the compactor's next check would); opens the partition if this
    /// broker owns it. `None`: nothing due (or not a compacted topic).
    pub async fn compact_now(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<folio_log::CompactionReport>, BrokerError> {
        let t = self.inner.topics.get(topic).await?;
        let t = t.ok_or_else(|| BrokerError::UnknownTopic(topic.to_string()))?;
        let tc = self.inner.topic_config(&t);
        if !tc.cleanup_compact {
            return Ok(None);
        }
        let part = self.inner.partition(&t, partition).await?;
        crate::compaction::compact_if_due(&self.inner, &part, &tc).await.map_err(|e| {
            BrokerError::background(format!("compacting {topic} partition {partition}"), e)
        })
    }

    /// Closes `topic`'s `partition`'s current ledger and starts the next (its data becomes
    /// compactable and trimmable); opens the partition if this broker owns it.
    pub async fn roll_partition(&self, topic: &str, partition: i32) -> Result<(), BrokerError> {
        Ok(self.partition_log(topic, partition).await?.roll().await?)
    }

    /// What `topic`'s `partition` holds (its ledgers, offsets, cursors), opening it if this
    /// broker owns it.
    pub async fn partition_info(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<folio_log::LogInfo, BrokerError> {
        Ok(self.partition_log(topic, partition).await?.info())
    }

    /// `topic`'s `partition` log, opened if this broker owns it.
    async fn partition_log(&self, topic: &str, partition: i32) -> Result<ManagedLog, BrokerError> {
        let t = self.inner.topics.get(topic).await?;
        let t = t.ok_or_else(|| BrokerError::UnknownTopic(topic.to_string()))?;
        Ok(self.inner.log(&t, partition).await?)
    }

    /// Topic deletions in progress (from the metadata store): see `deletion::progress`.
    pub async fn deletions(&self) -> Result<Vec<crate::deletion::DeletionProgress>, BrokerError> {
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
            self.inner.membership.lease(),
        )
        .await;
        self.inner.close_partitions(|_, _| true, "the broker is stopping").await;
        tracing::info!(node_id = self.inner.config.node_id, "broker stopped");
    }
}

/// With `store_exclusive` (this process holds the metadata store alone), removes the
/// registration an earlier run of this node id left, instead of waiting for its lease.
async fn forget_earlier_run(env: &LogEnv, config: &BrokerConfig) -> Result<(), StartError> {
    if !config.store_exclusive {
        return Ok(());
    }
    let key = env.keys.broker(config.node_id);
    env.meta
        .delete(&key, folio_meta::Expect::Any)
        .await
        .map(drop)
        .map_err(StartError::meta(format!("removing an earlier run's registration {key}")))
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

/// The groups' dynamic configs and the share groups' data plane of a broker.
fn group_parts(
    config: &BrokerConfig,
    env: &LogEnv,
) -> (crate::domain::group::configs::GroupConfigs, crate::domain::share::Shares) {
    let (meta, keys) = (env.meta.clone(), env.keys.clone());
    let configs = crate::domain::group::configs::GroupConfigs::new(meta.clone(), keys.clone());
    let shares = crate::domain::share::Shares::new(
        config.groups.shares.clone(),
        meta,
        keys,
        env.clock.clone(),
    );
    (configs, shares)
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

/// Expires committed offsets of the groups this broker coordinates, every
/// `offsets_retention_check_interval` (`group::lifecycle`).
async fn expire_offsets(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(inner.groups_config.offsets_retention_check_interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let membership = inner.membership.clone();
        let owns = |g: &str| membership.owns(&cluster::group_key(g));
        if let Err(e) = inner.groups.expire_offsets(owns).await {
            tracing::warn!(error = %e, "expiring committed offsets failed; trying again at the next check");
        }
    }
}

/// Snapshots the idempotent producer state of every open partition whose state changed,
/// every `producer_snapshot_interval`.
async fn snapshot_producers(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(inner.config.producer_snapshot_interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let open: Vec<Arc<crate::state::Partition>> = inner.open_partition_states();
        for part in open {
            inner.snapshot_producers(&part).await;
        }
    }
}

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
        match crate::domain::audit::run(&inner.env).await {
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

/// Loads the client quotas, the leader epochs and the ACLs (before any connection is
/// served) and starts the watches that keep them and the TLS certificate current.
/// The broker's background tasks over its shared state, each until the broker stops.
fn spawn_background(inner: &Arc<Inner>) {
    tokio::spawn(release_moved(inner.clone()));
    tokio::spawn(refresh_topics(inner.clone()));
    tokio::spawn(close_idle_partitions(inner.clone()));
    tokio::spawn(snapshot_producers(inner.clone()));
    tokio::spawn(expire_offsets(inner.clone()));
    tokio::spawn(crate::deletion::run(inner.clone()));
    tokio::spawn(crate::transactions::run(inner.clone()));
    tokio::spawn(crate::compaction::run(inner.clone()));
    if let Some(every) = inner.config.audit_interval {
        tokio::spawn(run_audits(inner.clone(), every));
    }
}

async fn start_security(
    inner: &Arc<Inner>,
    tls: Option<&Arc<TlsAcceptor>>,
) -> Result<(), StartError> {
    if let Some(tls) = tls {
        tokio::spawn(tls.clone().watch(inner.shutdown.subscribe()));
    }
    start_watched(inner, &inner.quotas).await?;
    start_watched(inner, &inner.leader_epochs).await?;
    if let Some(acls) = &inner.acls {
        start_watched(inner, acls).await?;
    }
    Ok(())
}

/// Lists `cache`'s records once, then keeps it current until the broker stops.
async fn start_watched<T: crate::domain::watched::Watched>(
    inner: &Inner,
    cache: &Arc<T>,
) -> Result<(), StartError> {
    let loading = format!("loading the {}s", T::WHAT);
    cache
        .reload(inner.env.meta.as_ref(), &inner.env.keys)
        .await
        .map_err(StartError::meta(loading))?;
    let (meta, keys) = (inner.env.meta.clone(), inner.env.keys.clone());
    tokio::spawn(crate::domain::watched::keep_current(
        cache.clone(),
        meta,
        keys,
        inner.shutdown.subscribe(),
    ));
    Ok(())
}

/// A bound listener: its socket, address and what runs it.
type Bound = (Listener, SocketAddr, Arc<crate::wire::server::Listener>);
/// The bound listeners, what they advertise, and the TLS configuration they share.
type Listeners = (Vec<Bound>, Vec<cluster::Endpoint>, Option<Arc<TlsAcceptor>>);

/// Binds every listener; returns them, what each advertises, and the TLS configuration
/// if a listener needs it.
fn bind_listeners(config: &BrokerConfig) -> Result<Listeners, StartError> {
    let tls = match &config.tls {
        Some(t) if config.listeners.iter().any(|l| l.protocol.tls()) => {
            Some(Arc::new(TlsAcceptor::new(t.clone())?))
        }
        _ => None,
    };
    let mut bound = Vec::new();
    let mut endpoints = Vec::new();
    for l in &config.listeners {
        let bind = |source| StartError::Bind { listener: l.name.to_string(), addr: l.bind, source };
        let socket = listen(l.bind, &config.limits).map_err(bind)?;
        let addr = socket.local_addr().map_err(bind)?;
        let (host, port) = match &l.advertised {
            Some((h, p)) => (h.clone(), *p as i32),
            None if addr.ip().is_unspecified() => {
                return Err(StartError::Config(InvalidConfig::new(format!(
                    "listener {} on {addr} needs an advertised address clients can reach \
                     (--advertise host:port or --advertised-listener {}://host:port)",
                    l.name, l.name
                ))));
            }
            None => (addr.ip().to_string(), addr.port() as i32),
        };
        endpoints.push(cluster::Endpoint { listener: l.name.clone(), host, port });
        let runtime = crate::wire::server::Listener {
            name: l.name.as_str().into(),
            protocol: l.protocol,
            tls: if l.protocol.tls() { tls.clone() } else { None },
        };
        bound.push((socket, addr, Arc::new(runtime)));
    }
    Ok((bound, endpoints, tls))
}

/// Connections waiting to be accepted (the kernel's listen backlog).
const LISTEN_BACKLOG: u32 = 1024;

/// Binds the Kafka listener. Its send buffer size (`send_buffer_bytes`) is inherited by
/// every connection it accepts.
fn listen(addr: SocketAddr, limits: &ListenerLimits) -> std::io::Result<Listener> {
    let send_buffer_bytes =
        u32::try_from(limits.send_buffer_bytes).map_err(std::io::Error::other)?;
    Listener::bind_with(addr, ListenOptions { backlog: LISTEN_BACKLOG, send_buffer_bytes })
}
