//! Folio's deterministic simulator: N bookies, ledger writers, readers and recoveries,
//! managed logs with rollover and trimming, the trash deleter and the embedded metadata
//! store, all the production code, run on one thread under one seed.
//!
//! How a seed fixes everything: the run enters a [`folio_rt::sim::Simulation`] on a tokio
//! current-thread runtime with its clock paused and its RNG seeded. Timers are simulated
//! time (the clock jumps to the next timer whenever every task waits); ready tasks run in
//! the order they became ready; tokio's own choices (the wake order of a watch channel's
//! waiters, `select!` branches) follow the runtime's seed; and each seam
//! (`folio_rt::blocking`, each network write) adds a seeded number of yields and a seeded
//! delay. So the seed decides every interleaving at an await point, every message delay,
//! partition, crash and disk fault. Blocking work runs inline, the storage engines are
//! stepped by driver tasks (`Background::Stepped`), the network is simulated (`SimNet`),
//! disks are `FaultFs`, and all randomness (placement, passwords, nonces, faults, workloads)
//! comes from the seed. Nothing reads real time for a decision; the trace's checksum shows a
//! seed replays to the same run. What one thread cannot show: races between OS threads
//! inside code that does not await (a simulated run has none).
//!
//! A run (`run`): draw a plan from the seed (bookies, quorums, a journal-less bookie or
//! not, how hard faults come, the logs' rollover and retention), start the cluster
//! (`world`), start the workloads (`ledgers`, `logs`) and the deleter, let the nemesis
//! (`nemesis`) break things for the fault window, mend everything, stop the workloads and
//! check liveness (every operation ends within [`LIVENESS_BOUND`] once faults stop), then
//! the promises (`check`: D1, D3, L1, L2; D2 and the pre-boot fence are probed when a
//! journal-less bookie starts again after a crash). A failing seed prints its violations,
//! the command that replays it and the last lines of its trace.
//!
//! Seeds come from `FOLIO_SIM_SEEDS` (`a..b` or `a,b,c`); `FOLIO_SIM_VERBOSE=1` prints
//! the whole trace as it happens and the components' debug logs.

#[cfg(not(tokio_unstable))]
compile_error!(
    "folio-sim needs tokio's seeded RNG: build with --cfg tokio_unstable (.cargo/config.toml sets it; a RUSTFLAGS variable replaces that)"
);

pub mod check;
pub mod clock;
pub mod kafka;
pub mod ledgers;
pub mod limits;
pub mod logs;
pub mod meta;
pub mod model;
pub mod nemesis;
pub mod repair;
pub mod trace;
pub mod world;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use folio_log::{LogConfig, Trash, TrashConfig};
use folio_rt::sim::{NetConfig, NetStats, Simulation};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing_subscriber::layer::SubscriberExt;

use crate::ledgers::Quorums;
use crate::model::Model;
use crate::trace::{Trace, TraceLayer};

/// Once faults stop, every operation must end (succeed or fail) within this.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(120);

/// Client nodes: writers 0..3, the recoverer 5, the reader 6, log owners from 20 (30 per
/// log), the checker 200, the deleter 201.
const CHECKER_NODE: usize = 200;
const DELETER_NODE: usize = 201;
const RECOVERER_NODE: usize = 5;

/// What a run is allowed to vary.
#[derive(Debug, Clone)]
pub struct Options {
    /// The fault window is drawn from this range.
    pub fault_window: (Duration, Duration),
    /// Print the trace as it happens.
    pub verbose: bool,
    /// The journal bookies' storage mode (`FOLIO_SIM_STORAGE_MODE` by default).
    pub storage_mode: folio_bookie::StorageMode,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            fault_window: (Duration::from_secs(8), Duration::from_secs(20)),
            verbose: std::env::var_os("FOLIO_SIM_VERBOSE").is_some(),
            storage_mode: world::storage_mode_from_env(),
        }
    }
}

/// What a seed drew.
#[derive(Debug, Clone)]
pub struct Plan {
    pub journals: Vec<bool>,
    pub quorums: Quorums,
    pub fault_window: Duration,
    pub intensity: nemesis::Intensity,
    pub writers: usize,
    pub logs: usize,
    pub rollover_entries: u64,
    pub retention_bytes: Option<u64>,
    pub meta_delay_max: Duration,
    /// Autorecovery runs (with the zombie workload, and disk wipes when every bookie keeps
    /// a journal): half the seeds, so the other half replays as before it existed.
    pub autorecovery: bool,
}

impl Plan {
    fn draw(rng: &mut SmallRng, opts: &Options) -> Plan {
        let n = rng.random_range(4..=6usize);
        // (2, 2, 2): two ensemble changes replace every bookie of a write set, and the
        // ledger's earlier entries are on none of its last fragment (BookKeeper #2615's case).
        let quorums = [(3, 3, 2), (3, 2, 2), (3, 3, 3), (4, 3, 2), (4, 2, 2), (5, 3, 2), (2, 2, 2)]
            .into_iter()
            .filter(|(e, _, _)| (*e as usize) < n)
            .collect::<Vec<_>>();
        let quorums = quorums[rng.random_range(0..quorums.len())];
        let mut journals = vec![true; n];
        if rng.random_range(0..10) < 3 {
            journals[rng.random_range(0..n)] = false; // one journal-less bookie
        }
        let (lo, hi) = opts.fault_window;
        let fault_window = Duration::from_millis(
            rng.random_range(lo.as_millis() as u64..=hi.as_millis().max(lo.as_millis()) as u64),
        );
        Plan {
            journals,
            quorums,
            fault_window,
            intensity: nemesis::Intensity {
                mean_gap: Duration::from_millis(rng.random_range(300..=1500)),
                max_down: (n - quorums.0 as usize).clamp(1, 2),
                meta_faults: rng.random_range(0..10) < 3,
                wipes: false,
            },
            writers: rng.random_range(1..=3),
            logs: rng.random_range(1..=2),
            rollover_entries: rng.random_range(3..=20),
            retention_bytes: (rng.random_range(0..2) == 0).then(|| rng.random_range(8..=64) * 1024),
            meta_delay_max: Duration::from_micros(rng.random_range(100..=3000)),
            autorecovery: false,
        }
        .with_autorecovery(rng.random_range(0..2) == 0)
    }

    /// Drawn last, so the draws before it are those of the runs before autorecovery.
    fn with_autorecovery(mut self, on: bool) -> Plan {
        self.autorecovery = on;
        self.intensity.wipes = on && self.journals.iter().all(|j| *j);
        self
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub plan: String,
    /// Broken promises (empty: the seed passed).
    pub violations: Vec<String>,
    /// The last lines of the trace.
    pub trace: Vec<String>,
    /// Checksum and count of the simulator's trace lines: equal for equal seeds.
    pub checksum: (u32, u64),
    pub sim_time: Duration,
    /// Operations by outcome.
    pub counts: BTreeMap<String, u64>,
    pub net: NetStats,
    pub orphans: usize,
}

impl Report {
    /// Whether every promise held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The command that replays this seed, with the whole trace.
    pub fn replay_command(&self) -> String {
        format!(
            "FOLIO_SIM_SEEDS={} FOLIO_SIM_VERBOSE=1 cargo test -p folio-sim --test sim -- --nocapture",
            self.seed
        )
    }

    /// The failure report: violations, the replay command, the trace's last lines.
    pub fn failure_text(&self) -> String {
        let mut s = format!("seed {} failed ({}):\n", self.seed, self.plan);
        for v in &self.violations {
            s.push_str(&format!("  - {v}\n"));
        }
        s.push_str(&format!(
            "replay: {}\nlast {} trace lines:\n",
            self.replay_command(),
            self.trace.len()
        ));
        for l in &self.trace {
            s.push_str(&format!("  {l}\n"));
        }
        s
    }
}

thread_local! {
    /// Panics on this thread since the run began (a production assertion that fired).
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let simulated = folio_rt::sim::active();
            if simulated {
                PANICS.with(|p| p.borrow_mut().push(info.to_string()));
            }
            if !simulated || std::env::var_os("FOLIO_SIM_VERBOSE").is_some() {
                previous(info);
            }
        }));
    });
}

/// Runs one seed (see the crate docs).
pub fn run(seed: u64, opts: &Options) -> Report {
    run_scenario(seed, opts, |seed, opts, sim, trace| Box::pin(scenario(seed, opts, sim, trace)))
}

/// What a scenario returns: its plan, its violations, its counts and the orphans it found.
pub type Outcome = (String, Vec<String>, BTreeMap<String, u64>, usize);

/// Runs `scenario` under one seed: the simulation entered, a paused current-thread runtime
/// seeded by it, the trace collecting the components' logs, a watchdog on real time, and
/// panics on the thread counted as violations.
pub fn run_scenario<'a>(
    seed: u64,
    opts: &'a Options,
    scenario: impl FnOnce(
        u64,
        &'a Options,
        Arc<Simulation>,
        Trace,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + 'a>>,
) -> Report {
    // One run at a time per process: the components keep a few process-wide budgets
    // (read-ahead bytes), which concurrent runs would share.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    install_panic_hook();
    PANICS.with(|p| p.borrow_mut().clear());
    let net = NetConfig {
        trace_writes: std::env::var_os("FOLIO_SIM_TRACE_NET").is_some(),
        ..NetConfig::default()
    };
    let sim = Simulation::new(seed, net);
    let _simulated = folio_rt::sim::enter(sim.clone());
    // tokio's own random choices (the wake order of a watch channel's waiters, select!
    // without `biased`) follow the seed too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()))
        .build()
        .expect("a current-thread runtime");
    let trace = rt.block_on(async { Trace::new(opts.verbose) });
    sim.net().set_events({
        let t = trace.clone();
        Arc::new(move |e| t.event(e))
    });
    let level = if opts.verbose { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::new(
        std::env::var("FOLIO_SIM_LOG").unwrap_or_else(|_| level.to_string()),
    );
    let subscriber = tracing_subscriber::registry().with(filter).with(TraceLayer(trace.clone()));
    let _logs = tracing::subscriber::set_default(subscriber);
    let started = rt.block_on(async { tokio::time::Instant::now() });
    let sim_ms = Arc::new(AtomicU64::new(0));
    let watchdog = watchdog(seed, trace.clone(), sim_ms.clone());
    let ticking = sim_ms.clone();
    rt.spawn(tick(ticking));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(scenario(seed, opts, sim.clone(), trace.clone()))
    }));
    drop(watchdog);
    let sim_time = rt.block_on(async move { started.elapsed() });
    drop(rt);
    let (plan, mut violations, counts, orphans) = match outcome {
        Ok(o) => o,
        Err(_) => ("?".into(), vec!["the scenario panicked".into()], BTreeMap::new(), 0),
    };
    for p in PANICS.with(|p| std::mem::take(&mut *p.borrow_mut())) {
        violations.push(format!("panic: {p}"));
    }
    Report {
        seed,
        plan,
        violations,
        trace: trace.tail(),
        checksum: trace.checksum(),
        sim_time,
        counts,
        net: sim.net().stats(),
        orphans,
    }
}

/// Real seconds a seed may take (`FOLIO_SIM_WALL_MAX_S`, 300), and real seconds simulated
/// time may stand still (`FOLIO_SIM_STALL_S`, 20), before the process is aborted with the
/// seed's trace: a run whose thread spins (simulated time stops: no task waits for a timer
/// any more) or blocks never ends by itself.
fn watchdog(seed: u64, trace: Trace, sim_ms: Arc<AtomicU64>) -> std::sync::mpsc::Sender<()> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let env = |var: &str, default: u64| {
        std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    let (max, stall) = (env("FOLIO_SIM_WALL_MAX_S", 300), env("FOLIO_SIM_STALL_S", 20));
    std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let (mut seen, mut since) = (u64::MAX, std::time::Instant::now());
        let why = loop {
            match wait.recv_timeout(Duration::from_secs(1)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let now = sim_ms.load(Ordering::Relaxed);
            if now != seen {
                (seen, since) = (now, std::time::Instant::now());
            }
            if since.elapsed() >= Duration::from_secs(stall) {
                break format!(
                    "simulated time stood still at {now} ms for {stall} s: its thread spins or blocks"
                );
            }
            if started.elapsed() >= Duration::from_secs(max) {
                break format!("it ran for {max} s of real time");
            }
        };
        eprintln!("seed {seed}: {why}");
        eprintln!(
            "replay: FOLIO_SIM_SEEDS={seed} FOLIO_SIM_VERBOSE=1 cargo test -p folio-sim --test sim -- --nocapture"
        );
        for l in trace.tail() {
            eprintln!("  {l}");
        }
        std::process::abort();
    });
    done
}

/// Publishes simulated time for the watchdog, every 10 simulated ms.
async fn tick(sim_ms: Arc<AtomicU64>) {
    let start = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        sim_ms.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl Plan {
    fn describe(&self) -> String {
        format!(
            "{} bookies (journal {:?}), quorums {:?}, {} writers, {} logs rolling every {} entries, retention {:?}, faults for {:?} every ~{:?}, {} down at most, metadata faults {}, autorecovery {} (wipes {})",
            self.journals.len(),
            self.journals,
            self.quorums,
            self.writers,
            self.logs,
            self.rollover_entries,
            self.retention_bytes,
            self.fault_window,
            self.intensity.mean_gap,
            self.intensity.max_down,
            self.intensity.meta_faults,
            self.autorecovery,
            self.intensity.wipes
        )
    }

    fn log_config(&self) -> LogConfig {
        let (e, w, a) = self.quorums;
        LogConfig {
            ensemble_size: e,
            write_quorum: w,
            ack_quorum: a,
            rollover_entries: self.rollover_entries,
            retention_time: None,
            retention_bytes: self.retention_bytes,
            trim_interval: Duration::from_secs(2),
            append_timeout: Duration::from_secs(10),
            ..LogConfig::default()
        }
    }
}

/// The workloads of a run, started.
struct Workloads {
    tasks: JoinSet<()>,
    logs: Vec<String>,
    /// Client nodes the nemesis may cut off from bookies.
    clients: Vec<usize>,
    /// What the log workloads share (nodes aside).
    base: logs::LogShared,
}

fn start_workloads(
    world: &world::World,
    plan: &Plan,
    model: &Model,
    stop: watch::Receiver<bool>,
) -> Workloads {
    let trace = world.trace.clone();
    let mut tasks = JoinSet::new();
    let shared = ledgers::Shared {
        model: model.clone(),
        trace: trace.clone(),
        stop: stop.clone(),
        quorums: plan.quorums,
        net: world.sim.net().clone(),
        bookies: world.bookies.iter().map(|b| (b.id.clone(), b.addr.ip())).collect(),
        recoverer: world::client_ip(RECOVERER_NODE),
    };
    let (abandon, abandoned) = mpsc::unbounded_channel();
    for w in 0..plan.writers {
        let name = format!("writer-{w}");
        let (client, node) = (world.client(w), world::client_ip(w));
        tasks.spawn(ledgers::writer(client, node, shared.clone(), name, abandon.clone()));
    }
    drop(abandon);
    let recoverer = world.client(RECOVERER_NODE);
    tasks.spawn(ledgers::recoverer(recoverer, shared.clone(), "recoverer".into(), abandoned));
    tasks.spawn(ledgers::reader(world.client(6), shared.clone(), "reader".into()));
    let base = logs::LogShared {
        model: model.clone(),
        trace,
        stop,
        meta: world.store(),
        keys: world.keys.clone(),
        clock: world.clock.clone(),
        net: world.sim.net().clone(),
        bookies: world.bookies.iter().map(|b| b.addr.ip()).collect(),
        config: plan.log_config(),
        nodes: 0..0,
    };
    let mut clients: Vec<usize> = (0..plan.writers).chain([RECOVERER_NODE, 6]).collect();
    if plan.autorecovery {
        let node = repair::ZOMBIE_NODE;
        let s = ledgers::Shared { recoverer: world::client_ip(node), ..shared.clone() };
        tasks.spawn(repair::zombie(world.client(node), s, "zombie".into()));
        clients.push(node);
        clients.extend(repair::AUTORECOVERY_NODES);
    }
    let mut names = Vec::new();
    for k in 0..plan.logs {
        let name = format!("log-{k}");
        let s = logs::LogShared { nodes: 20 + 30 * k..20 + 30 * (k + 1), ..base.clone() };
        clients.extend(s.nodes.clone().take(4));
        let (current, follow) = watch::channel(None);
        tasks.spawn(logs::owner(s.clone(), name.clone(), current));
        tasks.spawn(logs::consumer(s, name.clone(), follow));
        names.push(name);
    }
    Workloads { tasks, logs: names, clients, base }
}

/// Liveness: once the faults stopped, every workload ends and every operation ends (acked
/// or failed) within [`LIVENESS_BOUND`].
async fn quiesce(tasks: &mut JoinSet<()>, model: &Model, violations: &mut Vec<String>) {
    let quiet = tokio::time::timeout(LIVENESS_BOUND, async {
        while tasks.join_next().await.is_some() {}
        while !model.lock().ops.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if quiet.is_err() {
        let stuck = model.stuck(LIVENESS_BOUND);
        violations.push(format!(
            "liveness: {} operations still pending {LIVENESS_BOUND:?} after the faults stopped: {:?}",
            stuck.len(),
            stuck.iter().take(8).collect::<Vec<_>>()
        ));
        tasks.abort_all();
    }
}

async fn scenario(seed: u64, opts: &Options, sim: Arc<Simulation>, trace: Trace) -> Outcome {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x005e_ed0f_f011_0000);
    let plan = Plan::draw(&mut rng, opts);
    let plan_text = plan.describe();
    trace.event(format!("seed {seed}: {plan_text}"));
    let mut world = world::World::start(
        sim,
        trace.clone(),
        &plan.journals,
        plan.meta_delay_max,
        opts.storage_mode,
    )
    .await;
    let model = Model::default();
    let (stop_tx, stop) = watch::channel(false);
    let mut w = start_workloads(&world, &plan, &model, stop);
    let deleter_env = w.base.env(DELETER_NODE);
    let trash =
        TrashConfig { interval: Duration::from_secs(1), concurrency: 2, busy_fraction: 1.0 };
    let deleter = Trash::new(deleter_env.clone(), trash).spawn();
    let (repair_stop_tx, repair_stop) = watch::channel(false);
    let mut repairs = JoinSet::new();
    if plan.autorecovery {
        repairs = repair::start(&world, &repair_stop);
        let journal = world.bookies.iter().filter(|b| b.journal).map(|b| b.id.clone()).collect();
        repairs.spawn(repair::watch_swaps(
            world.store(),
            world.keys.clone(),
            world.client(repair::WATCHER_NODE),
            journal,
            model.clone(),
            trace.clone(),
            repair_stop.clone(),
        ));
    }
    let until = tokio::time::Instant::now() + plan.fault_window;
    nemesis::run(&mut world, until, &w.clients, &plan.intensity).await;
    let _ = stop_tx.send(true);
    let mut violations = Vec::new();
    let quiet = quiesce(&mut w.tasks, &model, &mut violations);
    checking_tombstones(&world, plan.autorecovery, quiet).await;
    drop(deleter);
    trace.event("checks: workloads stopped");
    let mut findings = check::Findings::default();
    check::ledgers(&world.client(CHECKER_NODE), &model, &mut findings).await;
    check::logs(&w.base.env(CHECKER_NODE), &w.logs, &model, &mut findings).await;
    if plan.autorecovery {
        let settled = repair::copies_whole(&world, &mut findings.violations);
        checking_tombstones(&world, true, settled).await;
    }
    let _ = repair_stop_tx.send(true);
    while repairs.join_next().await.is_some() {}
    check::leaks(&mut world, &deleter_env, &model, &mut findings).await;
    world.check_tombstones();
    findings.violations.append(&mut world.d2);
    findings.violations.append(&mut world.resurrected.lock().expect("resurrected lock"));
    for b in &world.bookies {
        if b.bookie.is_none() {
            findings.violations.push(format!("{} did not start again after its faults", b.id));
        }
    }
    violations.extend(findings.violations);
    violations.extend(model.lock().violations.iter().cloned());
    // A copy found incomplete is no broken promise on a bookie that may lose what it
    // acknowledged (journal-less, or wiped).
    let may_lose: Vec<String> = world
        .bookies
        .iter()
        .filter(|b| !b.journal || world.wiped.contains(&b.id))
        .map(|b| format!("target={} ", b.id))
        .collect();
    let excused = |l: &String| {
        l.contains("a copy being made is never collected") && may_lose.iter().any(|t| l.contains(t))
    };
    violations.extend(
        trace.invariants().into_iter().filter(|l| !excused(l)).map(|l| format!("invariant: {l}")),
    );
    trace.event(format!("checks: {} violations", violations.len()));
    for i in 0..world.bookies.len() {
        world.stop_bookie(i).await;
    }
    let mut counts = model.lock().counts.clone();
    counts.extend(std::mem::take(&mut world.counts));
    (plan_text, violations, counts, findings.orphans)
}

/// Runs `f`, checking the tombstones every 500 ms meanwhile when `on` (a deleted ledger
/// created again is collected again by the next GC pass: it must be seen before).
async fn checking_tombstones<F: std::future::Future>(
    world: &world::World,
    on: bool,
    f: F,
) -> F::Output {
    if !on {
        return f.await;
    }
    tokio::pin!(f);
    loop {
        tokio::select! {
            biased;
            out = &mut f => return out,
            () = tokio::time::sleep(Duration::from_millis(500)) => world.check_tombstones(),
        }
    }
}

/// The seeds in `var` (`a..b` or `a,b,c`), else `default`.
pub fn seeds(var: &str, default: std::ops::Range<u64>) -> Vec<u64> {
    let parse = |x: &str| x.trim().parse::<u64>().unwrap_or_else(|e| panic!("{var}: {x:?}: {e}"));
    match std::env::var(var) {
        Ok(s) => match s.split_once("..") {
            Some((a, b)) => (parse(a)..parse(b)).collect(),
            None => s.split(',').map(parse).collect(),
        },
        Err(_) => default.collect(),
    }
}
