//! The simulated cluster: the metadata store and N bookies, each bookie the real
//! `folio_bookie::Bookie` on a fault-injecting in-memory disk ([`FaultFs`], which survives
//! its crashes as a disk would) and an in-memory index, listening on the simulated network
//! at `10.0.1.<i>:3181`, its storage engine stepped by a driver task with seeded disk
//! latencies. A journal-less bookie also runs the full integrity check (`folio-repair`),
//! as `folio bookie` does.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use folio_bookie::bookie::{Bookie, BookieConfig, DiskUsage};
use folio_client::LedgerClient;
use folio_meta::MetadataStore;
use folio_meta::embedded::{EmbeddedConfig, MemoryEngine};
use folio_meta::keys::Keys;
use folio_rt::sim::Simulation;
use folio_storage::fs::{CrashPlan, FaultFs};
use folio_storage::index::MemKv;
use folio_storage::{Background, Stepper, Storage, StorageConfig, StorageMode, Wake};
use rand::Rng;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::clock::SimClock;
use crate::limits::D2_LEDGERS_MAX;
use crate::meta::SimMeta;
use crate::trace::Trace;

/// The metadata root of the simulated cluster.
pub const ROOT: &str = "sim";

/// The cluster secret every bookie requires and every client proves.
pub fn secret() -> folio_proto::auth::ClusterSecret {
    folio_proto::auth::ClusterSecret::new(b"the simulated cluster's secret".to_vec())
        .expect("a valid secret")
}

/// A ledger client of the cluster connecting from `ip`.
pub fn client_at(meta: Arc<dyn MetadataStore>, keys: &Keys, ip: IpAddr) -> LedgerClient {
    LedgerClient::new(meta, keys.clone())
        .with_cluster_secret(Some(secret()))
        .with_source_address(Some(ip))
}

/// A disk that is never full.
#[derive(Debug)]
struct RoomyDisk;

impl DiskUsage for RoomyDisk {
    fn usage(&self, _: &std::path::Path) -> std::io::Result<f64> {
        Ok(0.1)
    }
}

/// The address of bookie `i`.
pub fn bookie_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 1, i as u8 + 1)), 3181)
}

/// The address of client node `i` (writers, log owners, readers, the checker).
pub fn client_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, i as u8 + 1))
}

/// One bookie of the cluster and what it keeps across crashes.
#[derive(Debug)]
pub struct BookieNode {
    pub id: String,
    pub addr: SocketAddr,
    /// Journal mode (`false`: journal-less, with the integrity check).
    pub journal: bool,
    /// The disk; a crash turns it into what a power cut leaves.
    pub fs: FaultFs,
    kv: MemKv,
    pub bookie: Option<Bookie>,
    /// The running bookie's view of its disk (dead after a crash).
    mount: Option<FaultFs>,
    stop_repair: Option<watch::Sender<bool>>,
    pub crashes: u32,
    /// What a journal-less bookie held when it crashed (ledger, its last entry here): D2
    /// is checked on these when it starts again.
    held_at_crash: Vec<(folio_proto::LedgerId, folio_proto::EntryId)>,
}

/// The cluster (see the module docs).
#[derive(Debug)]
pub struct World {
    pub sim: Arc<Simulation>,
    pub trace: Trace,
    pub clock: Arc<SimClock>,
    pub meta: Arc<SimMeta>,
    pub keys: Keys,
    pub bookies: Vec<BookieNode>,
    /// D2 violations found when journal-less bookies started again.
    pub d2: Vec<String>,
    /// L1 violations found during the run: a deleted ledger created again on a bookie.
    pub resurrected: std::sync::Mutex<Vec<String>>,
    /// Bookies whose disks were wiped (they lost what they acknowledged).
    pub wiped: std::collections::BTreeSet<String>,
    /// What happened to the cluster, by kind (faults, D2 probes), for the report.
    pub counts: BTreeMap<String, u64>,
    /// The storage mode of the bookies that keep a journal (journal-less ones are
    /// two-write): [`storage_mode_from_env`].
    pub storage_mode: StorageMode,
}

/// The storage mode a run's bookies use: `FOLIO_SIM_STORAGE_MODE` (`two-write` when unset).
/// Not drawn from the seed, so a seed's scenario stays the same; CI runs seeds in both.
pub fn storage_mode_from_env() -> StorageMode {
    match std::env::var("FOLIO_SIM_STORAGE_MODE") {
        Ok(m) => {
            StorageMode::parse(&m).unwrap_or_else(|e| panic!("FOLIO_SIM_STORAGE_MODE: {}", e.0))
        }
        Err(_) => StorageMode::TwoWrite,
    }
}

impl World {
    /// The store and `journals.len()` bookies (journal mode or not, each), all started.
    pub async fn start(
        sim: Arc<Simulation>,
        trace: Trace,
        journals: &[bool],
        meta_delay_max: Duration,
        storage_mode: StorageMode,
    ) -> World {
        let clock = Arc::new(SimClock::new());
        let config = EmbeddedConfig {
            txn_ops_max: folio_meta::ETCD_TXN_OPS_MAX,
            lease_expiry_thread: false,
            ..Default::default()
        };
        let meta = Arc::new(SimMeta::new(
            MemoryEngine::new(),
            config,
            clock.clone(),
            meta_delay_max,
            trace.clone(),
        ));
        let expiring = Arc::downgrade(&meta);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let Some(m) = expiring.upgrade() else { return };
                if let Err(e) = m.store().expire_due() {
                    tracing::warn!(error = %e, "lease expiry failed");
                }
            }
        });
        let bookies = journals
            .iter()
            .enumerate()
            .map(|(i, journal)| BookieNode {
                id: format!("bookie-{i}"),
                addr: bookie_addr(i),
                journal: *journal,
                fs: FaultFs::new(),
                kv: MemKv::new(),
                bookie: None,
                mount: None,
                stop_repair: None,
                crashes: 0,
                held_at_crash: Vec::new(),
            })
            .collect();
        let mut world = World {
            storage_mode,
            sim,
            trace,
            clock,
            meta,
            keys: Keys::new(ROOT),
            bookies,
            d2: Vec::new(),
            resurrected: std::sync::Mutex::default(),
            wiped: Default::default(),
            counts: BTreeMap::new(),
        };
        for i in 0..world.bookies.len() {
            world.start_bookie(i).await;
        }
        world
    }

    /// The store as the components take it.
    pub fn store(&self) -> Arc<dyn MetadataStore> {
        self.meta.clone()
    }

    /// A ledger client of client node `node`.
    pub fn client(&self, node: usize) -> LedgerClient {
        client_at(self.store(), &self.keys, client_ip(node))
    }

    /// Whether bookie `i` runs.
    pub fn is_up(&self, i: usize) -> bool {
        self.bookies[i].bookie.is_some()
    }

    /// Starts bookie `i` on its disk (after a crash: the disk as the crash left it). A start
    /// that fails (a refusal the bookie names) leaves it down, traced.
    pub async fn start_bookie(&mut self, i: usize) {
        let config = self.bookie_config(i);
        // D3 is owed for the ledgers that named this bookie when it started (what its
        // pre-boot check lists); read from the store itself, off the simulated network, so
        // the run's schedule does not change.
        let named_at_start = named_in_store(&self.meta.store(), &self.keys, &self.bookies[i]).await;
        let node = &mut self.bookies[i];
        let mount = node.fs.mount();
        node.mount = Some(mount.clone());
        let mut config = config;
        config.fs = Arc::new(mount.clone());
        let kv = node.kv.clone();
        let work = Arc::new(Notify::new());
        let notify = work.clone();
        config.storage.background =
            Background::Stepped(Wake(Arc::new(move || notify.notify_one())));
        let trace = self.trace.clone();
        let id = node.id.clone();
        let open = move |cfg: StorageConfig| {
            let storage = Storage::open(cfg, Arc::new(mount), Arc::new(kv))?;
            if let Some(stepper) = storage.stepper() {
                tokio::spawn(drive(stepper, work, id, trace));
            }
            Ok(storage)
        };
        match Bookie::start_on(config, self.meta.clone(), Arc::new(RoomyDisk), open).await {
            Ok(bookie) => {
                self.trace.event(format!(
                    "bookie {} started (journal {}, unclean {})",
                    node.id,
                    node.journal,
                    bookie.unclean_shutdown()
                ));
                // As `folio bookie` runs it: journal-less, or started empty under a known id.
                if !node.journal || bookie.needs_integrity_check() {
                    let (tx, rx) = watch::channel(false);
                    let check = folio_repair::IntegrityCheck {
                        storage: bookie.storage().clone(),
                        client: client_at(self.meta.clone(), &self.keys, node.addr.ip()),
                        meta: self.meta.clone(),
                        keys: self.keys.clone(),
                        bookie_id: node.id.clone(),
                    };
                    tokio::spawn(check.serve(Duration::from_secs(2), rx));
                    node.stop_repair = Some(tx);
                }
                let held = std::mem::take(&mut node.held_at_crash);
                let (probed, found) = d2_unknown_not_missing(
                    &bookie,
                    &held,
                    &named_at_start,
                    self.meta.as_ref(),
                    &self.keys,
                )
                .await;
                node.bookie = Some(bookie);
                self.d2.extend(found);
                *self.counts.entry("D2 entries probed".into()).or_default() += probed;
            }
            Err(e) => self.trace.event(format!("bookie {} failed to start: {e}", node.id)),
        }
    }

    /// Arms bookie `i`'s disk to crash inside its `n`-th mutating call from now (inside a
    /// journal write, a flush, a rotation, a checkpoint...); [`World::reap_crashed`] ends
    /// the process once it has.
    pub fn crash_disk_after(&mut self, i: usize, n: u64) {
        let seed = folio_rt::with_rng(|r| r.random::<u64>());
        self.trace.event(format!(
            "{}: its disk crashes inside its {n}-th write from now",
            self.bookies[i].id
        ));
        self.bookies[i].fs.crash_after_ops(n, CrashPlan::Random { seed });
    }

    /// Ends the process of every bookie whose disk crashed under it; returns them.
    pub async fn reap_crashed(&mut self) -> Vec<usize> {
        let mut reaped = Vec::new();
        for i in 0..self.bookies.len() {
            let node = &self.bookies[i];
            let crashed = node.mount.as_ref().is_some_and(|m| node.fs.has_crashed_since(m));
            if node.bookie.is_some() && crashed {
                self.trace
                    .event(format!("{}: its disk crashed; the process goes with it", node.id));
                self.end_process(i).await;
                reaped.push(i);
            }
        }
        reaped
    }

    /// What a crashed bookie leaves: no process, connections reset; for a journal-less
    /// one, what it held is noted for the D2 check at its next start.
    async fn end_process(&mut self, i: usize) {
        let node = &mut self.bookies[i];
        node.crashes += 1;
        if let Some(stop) = node.stop_repair.take() {
            let _ = stop.send(true);
        }
        let resets = self.sim.net().reset_ip(node.addr.ip());
        self.trace.event(format!("{}: process ended ({resets} connections reset)", node.id));
        if let Some(b) = node.bookie.take() {
            if !node.journal {
                node.held_at_crash = held(b.storage());
            }
            b.abort().await;
        }
    }

    fn bookie_config(&self, i: usize) -> BookieConfig {
        let node = &self.bookies[i];
        let dir = PathBuf::from(format!("/sim/{}", node.id));
        let mut config = BookieConfig::new(&dir, node.addr);
        config.bookie_id = Some(node.id.clone());
        config.advertised_address = Some(node.addr.to_string());
        config.metadata_root = ROOT.into();
        config.lease_ttl = Duration::from_secs(3);
        config.auth.secret = Some(secret());
        let mut storage = StorageConfig::small_for_tests(&dir);
        storage.journal.direct_io = false;
        storage.mode = self.storage_mode;
        if !node.journal {
            storage.make_journal_less();
        }
        storage.clock = self.clock.clone();
        storage.flush_interval = Duration::from_secs(1);
        storage.entry_log_idle_rotation = Duration::from_secs(10);
        config.storage = storage;
        config.gc.interval = Duration::from_secs(5);
        config
    }

    /// Crashes bookie `i`: its disk keeps what was synced and, per unsynced write, what the
    /// plan's seed says; its connections are reset; its process is gone.
    pub async fn crash_bookie(&mut self, i: usize, lose_all_unsynced: bool) {
        let seed = folio_rt::with_rng(|r| r.random::<u64>());
        let plan =
            if lose_all_unsynced { CrashPlan::LoseAllUnsynced } else { CrashPlan::Random { seed } };
        if !self.bookies[i].journal
            && let Some(b) = &self.bookies[i].bookie
        {
            self.bookies[i].held_at_crash = held(b.storage());
        }
        self.bookies[i].fs.crash(plan);
        self.trace.event(format!("crash {} ({plan:?})", self.bookies[i].id));
        self.end_process(i).await;
    }

    /// Crashes bookie `i` and wipes its disks, as an operator replacing a failed disk does
    /// (`folio bookie format`: its cookie in the store goes too). It starts again empty,
    /// under its id, as a new instance.
    pub async fn wipe_bookie(&mut self, i: usize) {
        self.crash_bookie(i, true).await;
        let node = &mut self.bookies[i];
        node.fs = FaultFs::new();
        node.kv = MemKv::new();
        node.held_at_crash.clear();
        let cookie = self.keys.cookie(&node.id);
        // The operator's `format` goes on until the store takes the deletion: a cookie left
        // behind keeps the empty disk from starting (the store's faults end in time).
        for attempt in 0..crate::limits::WIPE_COOKIE_ATTEMPTS_MAX {
            match self.meta.delete(&cookie, folio_meta::Expect::Any).await {
                Ok(_) => break,
                Err(e) => {
                    self.trace.event(format!(
                        "{}: its cookie could not be removed (attempt {attempt}): {e}",
                        node.id
                    ));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        self.trace.event(format!("{}: disks wiped", self.bookies[i].id));
        self.wiped.insert(self.bookies[i].id.clone());
    }

    /// L1, every step: no bookie holds a ledger whose id it tombstoned (a deleted ledger
    /// created again by a late add).
    pub fn check_tombstones(&self) {
        let mut found = self.resurrected.lock().expect("resurrected lock");
        for b in self.bookies.iter().filter_map(|b| b.bookie.as_ref()) {
            let s = b.storage();
            for id in s.ledger_ids().into_iter().filter(|l| s.is_tombstoned(*l)) {
                let v = format!("L1 {}: ledger {id} was deleted here and exists again", b.id());
                if !found.contains(&v) {
                    self.trace.event(format!("invariant broken: {v}"));
                    found.push(v);
                }
            }
        }
    }

    /// Stops bookie `i` cleanly (flush, checkpoint, lease revoked).
    pub async fn stop_bookie(&mut self, i: usize) {
        let node = &mut self.bookies[i];
        if let Some(stop) = node.stop_repair.take() {
            let _ = stop.send(true);
        }
        if let Some(b) = node.bookie.take()
            && let Err(e) = b.shutdown().await
        {
            self.trace.event(format!("{} did not stop cleanly: {e}", node.id));
        }
    }
}

/// Steps a bookie's storage engine (`Background::Stepped`) until it closes: writes and
/// syncs the journal with seeded latencies, flushes when asked and every second.
async fn drive(stepper: Stepper, work: Arc<Notify>, id: String, trace: Trace) {
    let flush_every = Duration::from_secs(1);
    let mut next_flush = Instant::now() + flush_every;
    let latency = |lo: u64, hi: u64| {
        Duration::from_micros(folio_rt::with_rng(|r| {
            let slow = r.random_range(0..100) == 0;
            r.random_range(lo..=hi) * if slow { 20 } else { 1 }
        }))
    };
    loop {
        if stepper.is_closed() {
            return;
        }
        if stepper.journal_has_work() {
            if stepper.write_journal() {
                tokio::time::sleep(latency(20, 200)).await;
            }
            tokio::time::sleep(latency(100, 1500)).await;
            stepper.sync_journal();
            continue;
        }
        if stepper.flush_requested() || Instant::now() >= next_flush {
            tokio::time::sleep(latency(200, 2000)).await;
            if let Err(e) = stepper.flush()
                && !stepper.is_closed()
            {
                trace.event(format!("{id}: flush failed: {e}"));
            }
            next_flush = Instant::now() + flush_every;
            continue;
        }
        tokio::select! {
            biased;
            () = work.notified() => {}
            () = tokio::time::sleep_until(next_flush) => {}
        }
    }
}

/// Ledgers (at most [`D2_LEDGERS_MAX`]) a bookie stores, each with its last entry there.
/// The ledgers of `node.held_at_crash` whose ensembles name it in the store now.
async fn named_in_store(
    store: &folio_meta::embedded::EmbeddedStore,
    keys: &Keys,
    node: &BookieNode,
) -> std::collections::BTreeSet<folio_proto::LedgerId> {
    use folio_meta::records::{LedgerMetadata, Record};
    let mut named = std::collections::BTreeSet::new();
    for (ledger, _) in &node.held_at_crash {
        let key = keys.ledger(*ledger);
        let Ok(Some(v)) = store.get(&key).await else { continue };
        let Ok(m) = LedgerMetadata::decode(&key, &v.value) else { continue };
        if m.ensembles.values().any(|e| e.contains(&node.id)) {
            named.insert(*ledger);
        }
    }
    named
}

fn held(storage: &Storage) -> Vec<(folio_proto::LedgerId, folio_proto::EntryId)> {
    storage
        .ledger_ids()
        .into_iter()
        .rev()
        .filter_map(|l| storage.last_entry_id(l).ok().flatten().map(|e| (l, e)))
        .take(D2_LEDGERS_MAX)
        .collect()
}

/// D2 (no truncation by unknown): a journal-less bookie that crashed may have lost what it
/// held; started again, it has fenced every ledger naming it (D3), and it never answers
/// "no such entry" or "no such ledger" for an entry it held of a ledger that is still open
/// with it in its last ensemble: it answers UNKNOWN (limbo), or has the entry. Checked on
/// its storage right after its start, before the integrity check repairs anything.
async fn d2_unknown_not_missing(
    bookie: &Bookie,
    held: &[(folio_proto::LedgerId, folio_proto::EntryId)],
    named_at_start: &std::collections::BTreeSet<folio_proto::LedgerId>,
    meta: &dyn MetadataStore,
    keys: &Keys,
) -> (u64, Vec<String>) {
    use folio_meta::records::{LedgerMetadata, LedgerState, Record};
    let (mut probed, mut found) = (0, Vec::new());
    for (ledger, entry) in held {
        let key = keys.ledger(*ledger);
        let Ok(Some(v)) = meta.get(&key).await else { continue };
        let Ok(m) = LedgerMetadata::decode(&key, &v.value) else { continue };
        // D3 after a possible loss: the pre-boot check fenced every ledger this bookie was
        // in an ensemble of when it started and still is, so no writer adds to what it may
        // have lost. (A recovery that names it in a new ensemble afterwards writes with
        // recovery adds; an ensemble change that dropped it meanwhile took it out of the
        // ledger before the check's listing.)
        let named_now = m.ensembles.values().any(|e| e.contains(&bookie.id().to_string()));
        if named_at_start.contains(ledger)
            && named_now
            && !bookie.storage().ledger_state(*ledger).is_some_and(|s| s.fenced)
        {
            found.push(format!(
                "D3 {}: ledger {ledger}, which it held before its crash, is not fenced after the pre-boot check (ensembles {:?})",
                bookie.id(),
                m.ensembles
            ));
        }
        let last = m.ensembles.values().next_back();
        if m.state == LedgerState::Closed
            || !last.is_some_and(|e| e.iter().any(|b| b == bookie.id()))
        {
            continue;
        }
        probed += 1;
        use folio_storage::StorageError::{NoEntry, NoLedger};
        if let Err(e @ (NoEntry(..) | NoLedger(_))) = bookie.storage().read_entry(*ledger, *entry) {
            found.push(format!(
                "D2 {}: entry {ledger}/{entry} it held before its crash is answered \"{e}\", not UNKNOWN",
                bookie.id()
            ));
        }
    }
    (probed, found)
}

impl World {
    /// Counts one thing that happened to the cluster.
    pub fn count(&mut self, what: &str) {
        *self.counts.entry(what.to_string()).or_default() += 1;
    }
}
