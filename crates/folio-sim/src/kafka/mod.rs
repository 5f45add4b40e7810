//! The broker in the simulator: N brokers (`folio_broker::Broker`, the real code) on the
//! simulated cluster's bookies and store, at `10.0.3.<i>:9092`, each reaching the store
//! through its own cuttable link ([`node_meta`]) and the bookies from its own address; model
//! Kafka clients ([`clients`]) from client nodes `10.0.4.<i>`; a nemesis that crashes and
//! restarts brokers, pauses them (their clock stops and nothing they send or are sent
//! moves until they resume), cuts them off from the store, from the bookies or from both
//! (the isolated broker of #44), cuts clients off from brokers, crashes bookies and fails
//! store transactions; and the Kafka-level checkers of [`history`]. One seed fixes it all, as in
//! the storage scenario (`crate::run`); `run_kafka` is its entry point.

// Kafka's wire format is big-endian.
#![allow(clippy::big_endian_bytes)]

pub mod clients;
pub mod consumers;
pub mod history;
pub mod members;
pub mod node_meta;
pub mod txn_check;
pub mod txns;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use folio_broker::config::ListenerConfig;
use folio_broker::group::GroupConfig;
use folio_broker::{Broker, BrokerConfig};
use folio_log::{LogConfig, LogEnv};
use folio_rt::sim::{Link, Simulation};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::clients::{Node, Shared};
use self::history::History;
use self::node_meta::NodeMeta;
use crate::trace::Trace;
use crate::world::World;
use crate::{LIVENESS_BOUND, Options, Outcome, Report};

/// The topic every producer writes.
pub const TOPIC: &str = "events";

/// The brokers' registration lease (`lease.ttl`).
pub const LEASE_TTL: Duration = Duration::from_secs(4);

/// The address of broker `id` (1-based, as node ids are).
pub fn broker_addr(id: i32) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 3, id as u8)), 9092)
}

/// The address of Kafka client node `i`.
pub fn kafka_client_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 4, i as u8 + 1))
}

/// What a seed drew.
#[derive(Debug, Clone)]
pub struct KafkaPlan {
    pub bookies: usize,
    pub brokers: i32,
    pub replication: u16,
    pub partitions: i32,
    pub producers: usize,
    pub groups: usize,
    pub fault_window: Duration,
    pub mean_gap: Duration,
    pub rollover_entries: u64,
    pub meta_faults: bool,
}

impl KafkaPlan {
    fn draw(rng: &mut SmallRng) -> KafkaPlan {
        let bookies = rng.random_range(3..=4usize);
        KafkaPlan {
            bookies,
            brokers: rng.random_range(2..=3),
            replication: rng.random_range(2..=3u16).min(bookies as u16 - 1),
            partitions: rng.random_range(1..=4),
            producers: rng.random_range(1..=3),
            groups: rng.random_range(1..=2),
            fault_window: Duration::from_millis(rng.random_range(8_000..=20_000)),
            mean_gap: Duration::from_millis(rng.random_range(400..=1500)),
            rollover_entries: rng.random_range(5..=50),
            meta_faults: rng.random_range(0..10) < 3,
        }
    }
}

/// One broker of the run and what outlives its crashes.
#[derive(Debug)]
pub struct BrokerNode {
    pub id: i32,
    pub meta: Arc<NodeMeta>,
    /// Its process clock, which a pause stops (shared by its runs).
    pub clock: folio_rt::ProcessClock,
    /// The running broker (`None` while crashed or starting).
    pub broker: Arc<Mutex<Option<Broker>>>,
    starting: Option<tokio::task::JoinHandle<()>>,
    pub crashes: u32,
    /// Partitions its earlier runs reopened after a take-over (their metrics, summed).
    taken_back: u64,
    /// A second process with this node id, starting (see [`Fault::Impostor`]).
    impostor: Option<tokio::task::JoinHandle<()>>,
    impostor_broker: Arc<Mutex<Option<Broker>>>,
}

impl BrokerNode {
    fn running(&self) -> Option<Broker> {
        self.broker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

fn broker_config(id: i32, plan: &KafkaPlan, clock: folio_rt::ProcessClock) -> BrokerConfig {
    BrokerConfig {
        node_id: id,
        listeners: vec![ListenerConfig::plaintext(broker_addr(id))],
        auto_create_topics: false,
        default_partitions: plan.partitions as u32,
        default_replication: plan.replication,
        replication_max: plan.bookies as u16,
        log: LogConfig {
            rollover_entries: plan.rollover_entries,
            append_timeout: Duration::from_secs(10),
            ..LogConfig::default()
        },
        // `limits::CLAIM_OVERLAP_MAX` is derived from these two.
        lease_ttl: LEASE_TTL,
        membership_poll: Duration::from_millis(500),
        clock,
        producer_snapshot_interval: Duration::from_secs(1),
        trash: None,
        audit_interval: None,
        topic_refresh: Duration::from_secs(1),
        // Members' sessions and rebalances fit the scenario's seconds (`members.rs`).
        groups: GroupConfig {
            initial_rebalance_delay: Duration::from_millis(200),
            min_session_timeout: Duration::from_secs(1),
            // The consumer-protocol member (`consumers.rs`) is fenced as fast as a classic
            // one, so the group is downgraded and upgraded again within a run.
            consumer_session_timeout: Duration::from_secs(4),
            consumer_heartbeat_interval: Duration::from_secs(1),
            ..GroupConfig::default()
        },
        ..BrokerConfig::default()
    }
}

/// Starts broker `i` in the background: tries again until it starts (a crashed broker's
/// registration holds its node id until its lease expires).
fn start_broker(world: &World, node: &mut BrokerNode, plan: &KafkaPlan) {
    let (id, slot, trace) = (node.id, node.broker.clone(), world.trace.clone());
    let meta: Arc<dyn folio_meta::MetadataStore> = node.meta.clone();
    let env = LogEnv {
        meta: meta.clone(),
        client: crate::world::client_at(meta, &world.keys, broker_addr(id).ip()),
        keys: world.keys.clone(),
        clock: world.clock.clone(),
        owner: format!("broker-{id}"),
    };
    let config = broker_config(id, plan, node.clock.clone());
    node.starting = Some(tokio::spawn(async move {
        loop {
            match Broker::start(config.clone(), env.clone()).await {
                Ok(b) => {
                    trace.event(format!("broker {id} started"));
                    *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(b);
                    return;
                }
                Err(e) => {
                    trace.event(format!("broker {id} did not start: {e}"));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }));
}

/// Starts a second process with `node`'s node id, from another address, while `node` runs
/// unfenced: it must not start (two processes can never both serve one node id; #44). If
/// it starts while the first still serves, that is a broken promise; either way it is
/// stopped when the fault is mended.
fn start_impostor(world: &World, node: &mut BrokerNode, plan: &KafkaPlan, history: &History) {
    let id = node.id;
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 3, 100 + id as u8));
    let meta: Arc<dyn folio_meta::MetadataStore> = world.meta.clone();
    let env = LogEnv {
        meta: meta.clone(),
        client: crate::world::client_at(meta, &world.keys, ip),
        keys: world.keys.clone(),
        clock: world.clock.clone(),
        owner: format!("impostor-{id}"),
    };
    let mut config = broker_config(id, plan, folio_rt::ProcessClock::default());
    config.listeners = vec![ListenerConfig::plaintext(SocketAddr::new(ip, 9092))];
    let (original, slot, history, trace) =
        (node.broker.clone(), node.impostor_broker.clone(), history.clone(), world.trace.clone());
    node.impostor = Some(tokio::spawn(async move {
        match Broker::start(config, env).await {
            Ok(b) => {
                let first =
                    original.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                if first.is_some_and(|f| f.fenced().is_none()) {
                    history.violation(format!(
                        "a second broker with node id {id} started while broker {id} served unfenced"
                    ));
                }
                *slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(b);
            }
            Err(e) => trace.event(format!("the second broker {id} did not start: {e}")),
        }
    }));
}

/// Crashes broker `i`: it stops serving and renewing its lease, its connections are
/// reset; what it had open is left to the next owners to fence.
fn crash_broker(world: &World, node: &mut BrokerNode) {
    if let Some(h) = node.starting.take() {
        h.abort();
    }
    if let Some(b) = node.broker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        node.taken_back += b.metrics().partitions_taken_back.load(Ordering::Relaxed);
        b.abort();
    }
    node.crashes += 1;
    let resets = world.sim.net().reset_ip(broker_addr(node.id).ip());
    world.trace.event(format!("crash broker {} ({resets} connections reset)", node.id));
}

/// What the clients of a run do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Idempotent producers, consumers, groups, an admin and a liar ([`clients`]).
    Queue,
    /// Transactors and a read_committed consumer ([`txns`]).
    Transactions,
}

/// Runs one seed of the Kafka scenario.
pub fn run_kafka(seed: u64, opts: &Options) -> Report {
    crate::run_scenario(seed, opts, |seed, opts, sim, trace| {
        Box::pin(scenario(seed, opts.storage_mode, sim, trace, Workload::Queue))
    })
}

/// Runs one seed of the Kafka scenario with the transactional workload (#49).
pub fn run_kafka_txns(seed: u64, opts: &Options) -> Report {
    crate::run_scenario(seed, opts, |seed, opts, sim, trace| {
        Box::pin(scenario(seed, opts.storage_mode, sim, trace, Workload::Transactions))
    })
}

/// Which link a fault cut, and when it heals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// Broker → when it restarts.
    Crashed(i32),
    /// Broker cut off from the store.
    MetaCut(i32),
    /// Broker cut off from every bookie.
    BookiesCut(i32),
    /// A client node cut off from a broker.
    ClientCut(usize, i32),
    /// A second process started with a live broker's node id (from another address).
    Impostor(i32),
    /// Broker paused: its clock stopped, its links to the store, the bookies and every
    /// client held.
    Paused(i32),
    /// A bookie crashed.
    BookieDown(usize),
    MetaFailing,
}

fn rand_ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(folio_rt::with_rng(|r| r.random_range(lo..=hi)))
}

fn mend(world: &World, brokers: &mut [BrokerNode], plan: &KafkaPlan, f: Fault) {
    let net = world.sim.net().clone();
    world.trace.event(format!("mend {f:?}"));
    match f {
        Fault::Crashed(id) => start_broker(world, &mut brokers[id as usize - 1], plan),
        Fault::MetaCut(id) => brokers[id as usize - 1].meta.set_cut(false),
        Fault::BookiesCut(id) => {
            for b in &world.bookies {
                net.set_link(broker_addr(id).ip(), b.addr.ip(), Link::Up);
            }
        }
        Fault::ClientCut(c, id) => net.set_link(kafka_client_ip(c), broker_addr(id).ip(), Link::Up),
        // Started again by the caller (it awaits).
        Fault::BookieDown(_) => {}
        Fault::Impostor(id) => {
            let node = &mut brokers[id as usize - 1];
            if let Some(h) = node.impostor.take() {
                h.abort();
            }
            if let Some(b) = node
                .impostor_broker
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
            {
                b.abort();
            }
        }
        Fault::MetaFailing => world.meta.set_failures(0, 0),
        Fault::Paused(id) => {
            let node = &brokers[id as usize - 1];
            node.clock.resume();
            node.meta.set_cut(false);
            for peer in paused_peers(world, plan) {
                net.set_link(broker_addr(id).ip(), peer, Link::Up);
            }
        }
    }
}

/// Client nodes `plan`'s workloads use, the claims watcher and the checker among them
/// (checked in [`workloads`]).
fn clients_max(plan: &KafkaPlan) -> usize {
    plan.producers + 2 * plan.groups + 11
}

/// Every node a broker talks to besides the store: the bookies and each client node
/// (those the nemesis may cut off, the claims watcher and the final checker).
fn paused_peers(world: &World, plan: &KafkaPlan) -> Vec<IpAddr> {
    let clients = clients_max(plan);
    let bookies = world.bookies.iter().map(|b| b.addr.ip());
    bookies.chain((0..clients).map(kafka_client_ip)).collect()
}

/// Breaks things until `until`, then mends everything.
async fn nemesis(
    world: &mut World,
    brokers: &mut [BrokerNode],
    plan: &KafkaPlan,
    history: &History,
    clients: usize,
    until: Instant,
) {
    let mut broken: BTreeMap<Fault, Instant> = BTreeMap::new();
    loop {
        let now = Instant::now();
        let due: Vec<Fault> = broken.iter().filter(|(_, t)| **t <= now).map(|(f, _)| *f).collect();
        for f in due {
            broken.remove(&f);
            mend(world, brokers, plan, f);
            if let Fault::BookieDown(i) = f {
                world.start_bookie(i).await;
            }
        }
        let gap = plan.mean_gap.as_millis() as u64;
        let at = Instant::now() + rand_ms(gap / 4, gap * 2);
        if at >= until {
            break;
        }
        tokio::time::sleep_until(at).await;
        inject(world, brokers, plan, history, clients, &mut broken).await;
    }
    for (f, _) in std::mem::take(&mut broken) {
        mend(world, brokers, plan, f);
        if let Fault::BookieDown(i) = f {
            world.start_bookie(i).await;
        }
    }
    world.trace.event("nemesis: everything mended");
}

/// Breaks one thing, drawn by seed, that is not broken already: at most one broker faulted
/// at once, and one bookie.
async fn inject(
    world: &mut World,
    brokers: &mut [BrokerNode],
    plan: &KafkaPlan,
    history: &History,
    clients: usize,
    broken: &mut BTreeMap<Fault, Instant>,
) {
    {
        let broker_faulted = broken.keys().any(|f| {
            matches!(
                f,
                Fault::Crashed(_)
                    | Fault::MetaCut(_)
                    | Fault::BookiesCut(_)
                    | Fault::Impostor(_)
                    | Fault::Paused(_)
            )
        });
        let id = folio_rt::with_rng(|r| r.random_range(1..=plan.brokers));
        let heal = Instant::now() + rand_ms(1000, 9000);
        let net = world.sim.net().clone();
        match folio_rt::with_rng(|r| r.random_range(0..12)) {
            0 | 1 if !broker_faulted => {
                crash_broker(world, &mut brokers[id as usize - 1]);
                broken.insert(Fault::Crashed(id), heal);
                history.count("fault: broker crashed");
            }
            2 | 3 if !broker_faulted => {
                world.trace.event(format!("cut broker {id} off from the store"));
                brokers[id as usize - 1].meta.set_cut(true);
                broken.insert(Fault::MetaCut(id), heal);
                history.count("fault: broker cut from the store");
            }
            4 if !broker_faulted => {
                world.trace.event(format!("cut broker {id} off from the bookies"));
                for b in &world.bookies {
                    net.set_link(broker_addr(id).ip(), b.addr.ip(), Link::Held);
                }
                broken.insert(Fault::BookiesCut(id), heal);
                history.count("fault: broker cut from the bookies");
            }
            5 if !broker_faulted => {
                world.trace.event(format!("isolate broker {id} from the store and the bookies"));
                brokers[id as usize - 1].meta.set_cut(true);
                for b in &world.bookies {
                    net.set_link(broker_addr(id).ip(), b.addr.ip(), Link::Held);
                }
                broken.insert(Fault::MetaCut(id), heal);
                broken.insert(Fault::BookiesCut(id), heal);
                history.count("fault: broker isolated");
            }
            6 | 7 => {
                let c = folio_rt::with_rng(|r| r.random_range(0..clients));
                world.trace.event(format!("cut client {c} off from broker {id}"));
                net.set_link(kafka_client_ip(c), broker_addr(id).ip(), Link::Held);
                broken.insert(Fault::ClientCut(c, id), heal);
                history.count("fault: client cut from a broker");
            }
            8 if !broken.keys().any(|f| matches!(f, Fault::BookieDown(_)))
                && world.bookies.len() > plan.replication as usize =>
            {
                let i = folio_rt::with_rng(|r| r.random_range(0..world.bookies.len()));
                if world.is_up(i) {
                    world.crash_bookie(i, false).await;
                    broken.insert(Fault::BookieDown(i), heal);
                    history.count("fault: bookie crashed");
                }
            }
            10 if !broker_faulted && brokers[id as usize - 1].running().is_some() => {
                world.trace.event(format!("a second process starts with broker {id}'s node id"));
                start_impostor(world, &mut brokers[id as usize - 1], plan, history);
                broken.insert(Fault::Impostor(id), heal);
                history.count("fault: impostor started");
            }
            11 if !broker_faulted && brokers[id as usize - 1].running().is_some() => {
                world.trace.event(format!("pause broker {id}"));
                let node = &brokers[id as usize - 1];
                node.clock.stop();
                node.meta.set_cut(true);
                for peer in paused_peers(world, plan) {
                    net.set_link(broker_addr(id).ip(), peer, Link::Held);
                }
                broken.insert(Fault::Paused(id), heal);
                history.count("fault: broker paused");
            }
            9 if plan.meta_faults && !broken.contains_key(&Fault::MetaFailing) => {
                world.trace.event("the store fails transactions");
                world.meta.set_failures(50, 50);
                broken.insert(Fault::MetaFailing, heal);
                history.count("fault: store failing");
            }
            _ => {}
        }
    }
}

/// Creates `topic` through any broker until it exists.
async fn create_topic(node: &mut Node, topic: &str, partitions: i32, trace: &Trace) -> bool {
    let deadline = Instant::now() + LIVENESS_BOUND;
    while Instant::now() < deadline {
        let req = folio_testkit::kafka::create_topics_request(&[topic.to_string()], partitions);
        let addr = node.any_broker();
        let r = node
            .call::<_, kafka_protocol::messages::CreateTopicsResponse>(
                addr,
                kafka_protocol::messages::ApiKey::CreateTopics,
                5,
                &req,
            )
            .await;
        match r.map(|r| r.topics.first().map(|t| t.error_code)) {
            Ok(Some(0 | 36)) => return true,
            other => trace.event(format!("creating {topic}: {other:?}")),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    false
}

async fn scenario(
    seed: u64,
    mode: folio_bookie::StorageMode,
    sim: Arc<Simulation>,
    trace: Trace,
    workload: Workload,
) -> Outcome {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x6b61_666b_6100_0000);
    let plan = KafkaPlan::draw(&mut rng);
    let plan_text = format!("{plan:?}");
    trace.event(format!("seed {seed}: {plan_text}"));
    let journals = vec![true; plan.bookies];
    let mut world =
        World::start(sim, trace.clone(), &journals, Duration::from_millis(1), mode).await;
    let mut brokers: Vec<BrokerNode> = (1..=plan.brokers)
        .map(|id| BrokerNode {
            id,
            meta: Arc::new(NodeMeta::new(world.meta.clone())),
            clock: folio_rt::ProcessClock::stoppable(),
            broker: Arc::default(),
            starting: None,
            crashes: 0,
            taken_back: 0,
            impostor: None,
            impostor_broker: Arc::default(),
        })
        .collect();
    for b in &mut brokers {
        start_broker(&world, b, &plan);
    }
    let history = History::default();
    let (stop_tx, stop) = watch::channel(false);
    let shared = Shared {
        history: history.clone(),
        trace: trace.clone(),
        stop,
        brokers: (1..=plan.brokers).map(broker_addr).collect(),
        topic: TOPIC.into(),
        partitions: plan.partitions,
        clock: world.clock.clone(),
        meta: world.meta.clone(),
        keys: world.keys.clone(),
    };
    let mut violations = Vec::new();
    let mut admin = Node::new(kafka_client_ip(0), shared.brokers.clone());
    if !create_topic(&mut admin, TOPIC, plan.partitions, &trace).await {
        violations.push(format!("{TOPIC} could not be created within {LIVENESS_BOUND:?}"));
    }
    let (mut tasks, groups, clients) = match workload {
        Workload::Queue => workloads(&shared, &plan),
        Workload::Transactions => txns::workloads(&shared, &plan),
    };
    let until = Instant::now() + plan.fault_window;
    nemesis(&mut world, &mut brokers, &plan, &history, clients, until).await;
    let _ = stop_tx.send(true);
    // Liveness: once the faults stopped, every workload ends.
    let quiet =
        tokio::time::timeout(LIVENESS_BOUND, async { while tasks.join_next().await.is_some() {} })
            .await;
    if quiet.is_err() {
        let f = history.lock();
        violations.push(format!(
            "liveness: {} operations still pending {LIVENESS_BOUND:?} after the faults stopped: {:?}",
            f.ops.len(),
            f.ops.values().take(8).map(|(w, since)| (w.clone(), since.elapsed())).collect::<Vec<_>>()
        ));
        tasks.abort_all();
    }
    trace.event("checks: workloads stopped");
    let checker = kafka_client_ip(clients + 2);
    let txn_counts = match workload {
        Workload::Queue => check(&shared, checker, &groups, &mut violations).await,
        Workload::Transactions => {
            txns::check(&shared, checker, txns::transactors(&plan), &mut violations).await
        }
    };
    let mut counts = {
        let mut f = history.lock();
        violations.append(&mut f.violations);
        std::mem::take(&mut f.counts)
    };
    counts.extend(txn_counts);
    violations.extend(trace.invariants().into_iter().map(|l| format!("invariant: {l}")));
    trace.event(format!("checks: {} violations", violations.len()));
    stop_all(&mut world, &mut brokers, &mut counts).await;
    (plan_text, violations, counts, 0)
}

/// Stops every broker and bookie; adds what they counted to `counts`.
async fn stop_all(
    world: &mut World,
    brokers: &mut [BrokerNode],
    counts: &mut BTreeMap<String, u64>,
) {
    for b in brokers {
        if let Some(h) = b.starting.take() {
            h.abort();
        }
        if let Some(broker) = b.running() {
            b.taken_back += broker.metrics().partitions_taken_back.load(Ordering::Relaxed);
            broker.shutdown().await;
        }
        *counts.entry("broker crashes".into()).or_default() += u64::from(b.crashes);
        *counts.entry("broker: partitions reopened after a take-over".into()).or_default() +=
            b.taken_back;
    }
    for i in 0..world.bookies.len() {
        world.stop_bookie(i).await;
    }
    counts.extend(std::mem::take(&mut world.counts));
}

/// Starts every workload of `plan`'s clients: the tasks, the groups whose committed
/// offsets are checked, and how many client nodes the nemesis may cut off.
fn workloads(s: &Shared, plan: &KafkaPlan) -> (JoinSet<()>, Vec<String>, usize) {
    let mut tasks = JoinSet::new();
    let mut clients = 1;
    for p in 0..plan.producers {
        tasks.spawn(clients::producer(s.clone(), kafka_client_ip(clients), format!("p{p}")));
        clients += 1;
    }
    tasks.spawn(clients::consumer(s.clone(), kafka_client_ip(clients), "consumer".into()));
    clients += 1;
    tasks.spawn(clients::liar(s.clone(), kafka_client_ip(clients), "liar".into()));
    clients += 1;
    let groups: Vec<String> = (0..plan.groups).map(|g| format!("group-{g}")).collect();
    for g in &groups {
        tasks.spawn(clients::committer(s.clone(), kafka_client_ip(clients), g.clone()));
        tasks.spawn(clients::observer(s.clone(), kafka_client_ip(clients + 1), g.clone()));
        clients += 2;
    }
    // Consumers in a group (two classic members and one of the consumer protocol: the
    // coordinator upgrades and downgrades the group as they come and go) and an observer of
    // its committed offsets.
    let members = "members-0".to_string();
    for m in 0..2 {
        let ip = kafka_client_ip(clients);
        tasks.spawn(members::member(s.clone(), ip, members.clone(), format!("member-{m}")));
        clients += 1;
    }
    let ip = kafka_client_ip(clients);
    tasks.spawn(consumers::member(s.clone(), ip, members.clone(), "member-2".into()));
    clients += 1;
    tasks.spawn(clients::observer(s.clone(), kafka_client_ip(clients), members.clone()));
    clients += 1;
    let groups: Vec<String> = groups.into_iter().chain([members]).collect();
    tasks.spawn(clients::admin(s.clone(), kafka_client_ip(clients), "admin".into()));
    clients += 1;
    // Never cut off (not among the nodes the nemesis picks from).
    tasks.spawn(clients::claims(s.clone(), kafka_client_ip(clients + 1)));
    // The checker is `clients + 2`.
    assert!(clients + 3 <= clients_max(plan), "a client node a pause would not hold");
    (tasks, groups, clients)
}

/// The final read of every partition and the checks of [`history`] (they count nothing
/// beyond the history's counts).
async fn check(
    s: &Shared,
    ip: IpAddr,
    groups: &[String],
    violations: &mut Vec<String>,
) -> BTreeMap<String, u64> {
    let mut node = Node::new(ip, s.brokers.clone());
    for p in 0..s.partitions {
        let deadline = Instant::now() + LIVENESS_BOUND;
        let mut log = BTreeMap::new();
        let (mut pos, mut refresh) = (0i64, false);
        let end = loop {
            if Instant::now() >= deadline {
                violations.push(format!("partition {p} could not be read to its end (at {pos})"));
                break None;
            }
            match clients::fetch_once(&mut node, &s.topic, p, pos, refresh).await {
                Ok((records, next, hw)) => {
                    refresh = false;
                    if records.is_empty() && pos >= hw {
                        break Some(hw);
                    }
                    for (o, v) in records {
                        log.insert(o, v);
                    }
                    // Past every batch answered (a batch claiming more records than it
                    // holds ends past its last record: the checks name the gap).
                    pos = pos.max(next);
                }
                Err(e) => {
                    s.trace.event(format!("checker: partition {p} at {pos}: {e}"));
                    refresh = true;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let Some(end) = end else { continue };
        s.trace.event(format!("checker: partition {p} holds {} records, end {end}", log.len()));
        let f = s.history.lock();
        violations.extend(history::check_partition(&f, p, &log, end));
    }
    // Deleted topics never come back: no broker lists one.
    let deleted = s.history.lock().deleted_topics.clone();
    for (i, addr) in s.brokers.iter().enumerate() {
        let deadline = Instant::now() + LIVENESS_BOUND;
        let req = kafka_protocol::messages::MetadataRequest::default().with_topics(None);
        let listed = loop {
            if Instant::now() >= deadline {
                break None;
            }
            match node
                .call::<_, kafka_protocol::messages::MetadataResponse>(
                    *addr,
                    kafka_protocol::messages::ApiKey::Metadata,
                    12,
                    &req,
                )
                .await
            {
                Ok(r) => break Some(r.topics),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let Some(listed) = listed else {
            violations.push(format!("broker {} did not answer Metadata", i + 1));
            continue;
        };
        for t in listed {
            if let Some(n) = t.name.filter(|n| deleted.contains(n.0.as_str())) {
                violations.push(format!("broker {} lists {}, deleted before", i + 1, n.0));
            }
        }
    }
    for g in groups {
        let acked = s.history.lock().commits_acked.get(g).copied();
        let deadline = Instant::now() + LIVENESS_BOUND;
        let found = loop {
            if Instant::now() >= deadline {
                break None;
            }
            match clients::committed(&mut node, &s.topic, g).await {
                Ok(Some((o, coord))) => break Some((o, coord)),
                Ok(None) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        match (acked, found) {
            (_, None) => violations.push(format!("group {g}'s committed offset could not be read")),
            (Some(a), Some((o, coord))) if o < a => violations.push(format!(
                "group {g}: commit {a} was acknowledged, broker {coord} answers {o}"
            )),
            (_, Some((o, coord))) => s.history.commit_seen(g, o, coord),
        }
    }
    BTreeMap::new()
}
