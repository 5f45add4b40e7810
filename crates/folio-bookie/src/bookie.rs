//! A running bookie: identity, cookies, the DIRTY marker, registration, the disk monitor,
//! the server, and clean shutdown.
//!
//! Start: bind the listener (the bookie id defaults to the advertised `host:port`); read
//! the cluster id; check cookies (a `VERSION` file in every data dir and one in the
//! metadata store must all agree on bookie id, cluster id, dirs and instance; a fresh bookie
//! with empty dirs and no cookie anywhere gets new ones); note an unclean shutdown if the
//! ledger dir still has a `DIRTY` marker, then (re)create it; open storage (recovering from
//! the journal); register under `bookies/writable/<id>` with a lease kept alive in the
//! background; serve.
//!
//! Disk monitor: above `disk_usage_threshold` the bookie turns read-only (non-recovery adds
//! answer READ_ONLY and the registration moves to `bookies/readonly/`); below
//! `disk_usage_lwm` it turns writable again.
//!
//! Clean shutdown: stop serving, flush and checkpoint, remove `DIRTY`, revoke the lease.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use folio_meta::keys::Keys;
use folio_meta::records::{BookieRegistration, Cookie, Record, ensure_cluster_id};
use folio_meta::{Expect, LeaseId, MetaError, MetadataStore, Txn};
use folio_proto::InvalidConfig;
use folio_rt::net::Listener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::StorageConfig;
pub use crate::error::BookieError;
use crate::fs::{FileSystem, RealFs};
pub use crate::limits::SHUTDOWN_REQUESTS_WAIT_MAX;
use crate::server::{self, Handler, ServerStats};
use crate::storage::Storage;

/// The cookie's file name in each of the bookie's directories.
pub const COOKIE_FILE: &str = "VERSION";
/// Present while the bookie runs: found at start, the last stop was not clean.
pub const DIRTY_FILE: &str = "DIRTY";

/// How a bookie runs: its directories, listener, storage, GC, integrity check and limits.
#[derive(Debug, Clone)]
pub struct BookieConfig {
    /// Defaults to the advertised address.
    pub bookie_id: Option<String>,
    pub listen: SocketAddr,
    /// What clients connect to; defaults to the bound listen address.
    pub advertised_address: Option<String>,
    /// The rack (or zone) registered for placement; none by default.
    pub rack: Option<String>,
    pub storage: StorageConfig,
    pub metadata_root: String,
    pub lease_ttl: Duration,
    pub disk_check_interval: Duration,
    pub disk_usage_threshold: f64,
    pub disk_usage_lwm: f64,
    /// The listener's limits: bytes and requests in flight, connections, timeouts.
    pub server: crate::limits::ServerLimits,
    pub gc: crate::gc::GcConfig,
    pub integrity: crate::integrity::IntegrityConfig,
    /// Who may connect: the cluster secret connections prove (`crate::auth`).
    pub auth: crate::auth::AuthConfig,
    /// The file layer for the node's files: its storage's journal and data files (not the
    /// fjall index), cookies and `DIRTY`; tests gate or crash it.
    pub fs: Arc<dyn FileSystem>,
}

/// What a bookie registers: its id, address and rack.
fn registration_of(id: &str, advertised: &str, config: &BookieConfig) -> BookieRegistration {
    BookieRegistration {
        bookie_id: id.to_string(),
        address: advertised.to_string(),
        http_address: None,
        rack: config.rack.clone(),
    }
}

impl BookieConfig {
    /// Defaults for a bookie keeping its data under `data_dir` and listening on `listen`.
    pub fn new(data_dir: impl Into<PathBuf>, listen: SocketAddr) -> BookieConfig {
        BookieConfig {
            bookie_id: None,
            listen,
            advertised_address: None,
            rack: None,
            storage: StorageConfig::new(data_dir),
            metadata_root: "folio".into(),
            lease_ttl: Duration::from_secs(10),
            disk_check_interval: Duration::from_secs(10),
            disk_usage_threshold: 0.95,
            disk_usage_lwm: 0.90,
            server: crate::limits::ServerLimits::default(),
            gc: crate::gc::GcConfig::default(),
            integrity: crate::integrity::IntegrityConfig::default(),
            auth: crate::auth::AuthConfig::default(),
            fs: Arc::new(RealFs),
        }
    }

    /// Checks every setting, naming the first that is out of range.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        self.storage.validate()?;
        let (t, l) = (self.disk_usage_threshold, self.disk_usage_lwm);
        if !(0.0 < l && l < t && t <= 1.0) {
            return Err(InvalidConfig::new(format!(
                "need 0 < disk_usage_lwm ({l}) < disk_usage_threshold ({t}) <= 1"
            )));
        }
        if self.lease_ttl < Duration::from_secs(1) {
            return Err(InvalidConfig::new("lease_ttl must be at least 1 s"));
        }
        self.auth.validate(self.listen)?;
        self.server.validate()
    }

    /// The data dirs a cookie covers, journal first, without duplicates.
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.storage.journal_dir.clone()];
        if self.storage.ledger_dir != self.storage.journal_dir {
            dirs.push(self.storage.ledger_dir.clone());
        }
        dirs
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BookieError {
    let context = context.into();
    move |source| BookieError::Io { context, source }
}

/// Reports how full the disk holding a path is (0.0–1.0). Injectable for tests.
pub trait DiskUsage: Send + Sync + std::fmt::Debug {
    fn usage(&self, dir: &Path) -> std::io::Result<f64>;
}

/// Disk usage from `statvfs(2)` of the directory's file system.
#[derive(Debug, Default)]
pub struct StatvfsUsage;

impl DiskUsage for StatvfsUsage {
    fn usage(&self, dir: &Path) -> std::io::Result<f64> {
        let (total, free) = server::disk_space(dir)?;
        Ok(if total == 0 { 0.0 } else { 1.0 - free as f64 / total as f64 })
    }
}

/// A running bookie. Stop it with [`Bookie::shutdown`] (clean) or [`Bookie::abort`].
#[derive(Debug)]
pub struct Bookie {
    id: String,
    addr: SocketAddr,
    storage: Arc<Storage>,
    read_only: Arc<AtomicBool>,
    /// Why the bookie is read-only, while it is.
    read_only_reason: Arc<std::sync::Mutex<Option<String>>>,
    unclean_shutdown: bool,
    handler: Arc<Handler>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    lease: Arc<std::sync::Mutex<LeaseId>>,
    ledger_dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    /// What the GC passes found; a watch, so that a caller can await the next pass.
    gc_status: Arc<watch::Sender<crate::gc::GcStatus>>,
    disk: Arc<dyn DiskUsage>,
    disk_usage_threshold: f64,
}

impl Bookie {
    /// Starts a bookie on the real disk: checks cookies, recovers storage, registers, serves.
    pub async fn start(
        config: BookieConfig,
        meta: Arc<dyn MetadataStore>,
    ) -> Result<Bookie, BookieError> {
        Bookie::start_with(config, meta, Arc::new(StatvfsUsage)).await
    }

    /// Starts a bookie that reads its disk usage from `disk` (tests fill the disk with it).
    pub async fn start_with(
        config: BookieConfig,
        meta: Arc<dyn MetadataStore>,
        disk: Arc<dyn DiskUsage>,
    ) -> Result<Bookie, BookieError> {
        let fs = config.fs.clone();
        Bookie::start_on(config, meta, disk, move |c| Storage::open_on(c, fs)).await
    }

    /// Starts on storage made by `open` (tests open it on a fault-injecting file system).
    pub async fn start_on(
        config: BookieConfig,
        meta: Arc<dyn MetadataStore>,
        disk: Arc<dyn DiskUsage>,
        open: impl FnOnce(crate::config::StorageConfig) -> folio_storage::Result<Storage>
        + Send
        + 'static,
    ) -> Result<Bookie, BookieError> {
        config.validate()?;
        let listener = Listener::bind(config.listen)
            .await
            .map_err(io(format!("binding {}", config.listen)))?;
        let addr = listener.local_addr().map_err(io("listener address"))?;
        let advertised = config.advertised_address.clone().unwrap_or_else(|| addr.to_string());
        let id = config.bookie_id.clone().unwrap_or_else(|| advertised.clone());
        let keys = Keys::new(config.metadata_root.clone());
        let cluster_id = ensure_cluster_id(meta.as_ref(), &keys).await?;
        let integrity = config.integrity.is_enabled(&config.storage);
        let stamp = integrity && config.integrity.stamp_missing_cookies;
        let cookies = check_cookies(&config, meta.as_ref(), &keys, &id, &cluster_id, stamp).await?;
        let restamp = cookies.restamp;
        // A bookie stamped as new although ledgers name its id: its disk was formatted (or
        // replaced) under a known id. Its empty storage must not answer "no such entry"
        // for what it held (D2): the pre-boot fence and limbo run, journal or not.
        let known_id = if cookies.stamped_new {
            let (n, examples) = crate::integrity::ledgers_naming(meta.as_ref(), &keys, &id).await?;
            if n > 0 {
                tracing::warn!(bookie = %id, ledgers = n, ?examples, "a new bookie under an id that ledgers name: fencing and putting in limbo what it held before serving");
            }
            n > 0
        } else {
            false
        };
        let ledger_dir = config.storage.ledger_dir.clone();
        let unclean_shutdown = config.fs.exists(&ledger_dir.join(DIRTY_FILE));
        if unclean_shutdown {
            tracing::warn!(bookie = %id, dir = %ledger_dir.display(), "DIRTY marker found: the last shutdown was not clean");
        }
        write_synced(config.fs.as_ref(), &ledger_dir.join(DIRTY_FILE), b"")?;
        let storage_config = config.storage.clone();
        let storage = folio_rt::blocking(move || open(storage_config)).await??;
        let storage = Arc::new(storage);
        // Journal-less after an unclean stop, or a wiped dir being re-stamped: fence and
        // limbo what this bookie may have lost before serving (see `integrity`).
        let lost_writes = unclean_shutdown && !config.storage.journal.write_data;
        if known_id || (integrity && (lost_writes || !restamp.is_empty())) {
            let why = if known_id {
                "empty data dirs under a bookie id that ledgers name"
            } else if lost_writes {
                "journal-less unclean shutdown"
            } else {
                "missing cookie"
            };
            tracing::warn!(bookie = %id, why, "running the pre-boot integrity check");
            crate::integrity::pre_boot_check(
                &storage,
                meta.as_ref(),
                &keys,
                &id,
                &config.integrity,
            )
            .await?;
        }
        for (dir, cookie) in &restamp {
            write_synced(config.fs.as_ref(), &dir.join(COOKIE_FILE), cookie)?;
            tracing::warn!(bookie = %id, dir = %dir.display(), "cookie re-stamped after the pre-boot check");
        }
        let read_only = Arc::new(AtomicBool::new(false));
        let registration = registration_of(&id, &advertised, &config);
        let lease = meta.grant_lease(config.lease_ttl).await?;
        register(meta.as_ref(), &keys, &registration, lease, false).await?;
        let lease = Arc::new(std::sync::Mutex::new(lease));
        let handler = Arc::new(
            Handler::new(
                storage.clone(),
                read_only.clone(),
                ledger_dir.clone(),
                config.server.clone(),
            )
            .with_secret(config.auth.secret.clone()),
        );
        let (stop, stop_rx) = watch::channel(false);
        let stop_rx_gc = stop_rx.clone();
        let mut tasks =
            vec![tokio::spawn(server::serve(listener, handler.clone(), stop_rx.clone()))];
        tasks.push(tokio::spawn(keep_registered(
            meta.clone(),
            keys.clone(),
            registration.clone(),
            lease.clone(),
            read_only.clone(),
            config.lease_ttl,
            stop_rx.clone(),
        )));
        let read_only_reason = Arc::new(std::sync::Mutex::new(None));
        tasks.push(tokio::spawn(monitor_disk(
            disk.clone(),
            storage.clone(),
            config.clone(),
            meta.clone(),
            keys.clone(),
            registration,
            lease.clone(),
            read_only.clone(),
            read_only_reason.clone(),
            stop_rx,
        )));
        let gc_status = Arc::new(watch::Sender::new(crate::gc::GcStatus::default()));
        tasks.push(tokio::spawn(run_gc(
            storage.clone(),
            meta.clone(),
            keys.clone(),
            id.clone(),
            config.gc.clone(),
            (gc_status.clone(), handler.gc_listed_ms.clone()),
            stop_rx_gc,
        )));
        tracing::info!(bookie = %id, %addr, cluster = %cluster_id, unclean_shutdown, "bookie started");
        Ok(Bookie {
            id,
            addr,
            storage,
            read_only,
            read_only_reason,
            unclean_shutdown,
            handler,
            stop,
            tasks,
            meta,
            keys,
            lease,
            ledger_dir,
            fs: config.fs.clone(),
            gc_status,
            disk,
            disk_usage_threshold: config.disk_usage_threshold,
        })
    }

    /// The bookie's id, as registered in the metadata store.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The address the bookie serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// The bookie's storage engine.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }
    /// Whether the bookie refuses adds (disk full, storage poisoned, or started read-only).
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::SeqCst)
    }

    /// How full the ledger dir's disk is now (0 to 1), probed now; `None` if it cannot be.
    pub fn disk_usage(&self) -> Option<f64> {
        self.disk.usage(&self.ledger_dir).ok()
    }

    /// The ledger directory's file system: (total bytes, bytes free), when it answers.
    pub fn disk_space(&self) -> Option<(u64, u64)> {
        crate::server::disk_space(&self.ledger_dir).ok()
    }

    /// The disk usage at which the bookie turns read-only (`disk_usage_threshold`).
    pub fn disk_usage_threshold(&self) -> f64 {
        self.disk_usage_threshold
    }
    /// Why the bookie is read-only (a full or unprobeable disk, a poisoned storage).
    pub fn read_only_reason(&self) -> Option<String> {
        self.read_only_reason.lock().expect("read-only reason lock").clone()
    }
    /// Runs a garbage-collection pass now.
    pub async fn gc_now(&self) -> Result<crate::gc::GcReport, crate::gc::GcError> {
        let started = PassStart::now();
        let config = crate::gc::GcConfig::default();
        let result =
            crate::gc::gc_once(&self.storage, self.meta.as_ref(), &self.keys, &self.id, &config)
                .await;
        started.report(&result, &self.gc_status, &self.handler.gc_listed_ms);
        result
    }

    /// What the last GC passes found.
    pub fn gc_status(&self) -> crate::gc::GcStatus {
        self.gc_status.borrow().clone()
    }

    /// Waits until `n` more GC passes (of the loop or [`Bookie::gc_now`]) have ended, counted
    /// from the call. A pass that was already running counts, so a caller that needs a pass
    /// which *began* after some change waits for two.
    pub async fn gc_passes_after(&self, n: u64) {
        let mut rx = self.gc_status.subscribe();
        let target = rx.borrow_and_update().passes + n;
        // The sender lives as long as `self`, so the wait only ends at `target`.
        let _ = rx.wait_for(|s| s.passes >= target).await;
    }

    /// Whether this start found the DIRTY marker of an unclean shutdown.
    /// Whether the full integrity check still has work (the persistent storage flag).
    pub fn needs_integrity_check(&self) -> bool {
        self.storage
            .storage_flags()
            .is_ok_and(|f| f & crate::index::flags::NEEDS_INTEGRITY_CHECK != 0)
    }

    /// Whether the last stop was not clean (`DIRTY` was found at start).
    pub fn unclean_shutdown(&self) -> bool {
        self.unclean_shutdown
    }
    /// The server's counters (connections, requests, refusals).
    pub fn stats(&self) -> &ServerStats {
        &self.handler.stats
    }
    /// Request and reply bytes all connections hold now (at most
    /// `server.process_bytes_max`).
    pub fn bytes_held(&self) -> usize {
        self.handler.bytes_held()
    }

    /// Stops serving without flushing or removing DIRTY: what a crash leaves, minus the
    /// loss of unsynced data. Returns once the storage is closed.
    pub async fn abort(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        let weak = Arc::downgrade(&self.storage);
        drop(self);
        // Requests still running on blocking threads hold the storage until they finish.
        storage_holders_at_most(&weak, 0, None).await;
    }

    /// Clean shutdown: stop serving, flush and checkpoint, remove DIRTY, revoke the lease.
    pub async fn shutdown(mut self) -> Result<(), BookieError> {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        drop(self.handler);
        // A connection's last request (on a blocking thread, or its task winding down after
        // the stop) still holds the storage: wait for it rather than leave the storage
        // unclosed, which made a clean stop unclean (found by the simulator, seed 337).
        let deadline = tokio::time::Instant::now() + SHUTDOWN_REQUESTS_WAIT_MAX;
        storage_holders_at_most(&Arc::downgrade(&self.storage), 1, Some(deadline)).await;
        let storage = Arc::try_unwrap(self.storage)
            .map_err(|_| BookieError::StorageInUse { waited: SHUTDOWN_REQUESTS_WAIT_MAX })?;
        folio_rt::blocking(move || storage.close()).await??;
        let dirty = self.ledger_dir.join(DIRTY_FILE);
        self.fs.remove_file(&dirty).map_err(io(format!("removing {}", dirty.display())))?;
        self.fs
            .sync_dir(&self.ledger_dir)
            .map_err(io(format!("syncing {}", self.ledger_dir.display())))?;
        let lease = *self.lease.lock().expect("lease lock");
        if let Err(e) = self.meta.revoke_lease(lease).await {
            tracing::warn!(error = %e, "revoking the registration lease failed; it will expire");
        }
        tracing::info!(bookie = %self.id, root = %self.keys.root(), "bookie stopped cleanly");
        Ok(())
    }
}

/// Waits until at most `holders` hold the storage (requests still running let go of it),
/// or until `deadline`.
async fn storage_holders_at_most(
    storage: &std::sync::Weak<Storage>,
    holders: usize,
    deadline: Option<tokio::time::Instant>,
) {
    while storage.strong_count() > holders
        && deadline.is_none_or(|d| tokio::time::Instant::now() < d)
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Writes a small file of the node's atomically and durably (its directory created first).
fn write_synced(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> Result<(), BookieError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs.create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    fs.write_atomic(path, bytes).map_err(io(format!("writing {}", path.display())))
}

/// Whether a data dir holds anything but a cookie.
fn has_data(fs: &dyn FileSystem, dir: &Path) -> bool {
    fs.list_dir(dir).map(|names| names.iter().any(|n| n != COOKIE_FILE)).unwrap_or(false)
}

async fn check_cookies(
    config: &BookieConfig,
    meta: &dyn MetadataStore,
    keys: &Keys,
    id: &str,
    cluster_id: &str,
    stamp_missing: bool,
) -> Result<CookieCheck, BookieError> {
    let dirs = config.dirs();
    let journal_dirs = vec![config.storage.journal_dir.display().to_string()];
    let ledger_dirs = vec![config.storage.ledger_dir.display().to_string()];
    let remote_key = keys.cookie(id);
    let remote = match meta.get(&remote_key).await? {
        Some(v) => Some(Cookie::decode(&remote_key, &v.value)?),
        None => None,
    };
    let mut local = Vec::new();
    for d in &dirs {
        let path = d.join(COOKIE_FILE);
        let cookie = match config.fs.read_all(&path) {
            Ok(b) => Some(Cookie::decode(&path.display().to_string(), &b).map_err(|e| {
                BookieError::Cookie {
                    dir: d.display().to_string(),
                    reason: format!("unreadable cookie: {e}"),
                }
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
        };
        local.push((d, cookie));
    }
    let cookie_err =
        |d: &Path, reason: String| BookieError::Cookie { dir: d.display().to_string(), reason };
    if remote.is_none() && local.iter().all(|(_, c)| c.is_none()) {
        // A new bookie: its dirs must not hold data from an earlier life.
        // (Whether ledgers still name its id is the caller's check: `known_id`.)
        for d in &dirs {
            if has_data(config.fs.as_ref(), d) {
                return Err(cookie_err(
                    d,
                    "holds data but no cookie; run `folio bookie format` to start over".into(),
                ));
            }
        }
        let cookie = Cookie {
            bookie_id: id.to_string(),
            cluster_id: cluster_id.to_string(),
            journal_dirs,
            ledger_dirs,
            instance_id: format!("{:016x}", folio_rt::random::<u64>()),
        };
        meta.put(&remote_key, cookie.encode(), Expect::Absent).await?;
        for d in &dirs {
            write_synced(config.fs.as_ref(), &d.join(COOKIE_FILE), &cookie.encode())?;
        }
        tracing::info!(bookie = %id, "new bookie: cookies stamped");
        return Ok(CookieCheck { restamp: Vec::new(), stamped_new: true });
    }
    let Some(remote) = remote else {
        let (d, _) = local.iter().find(|(_, c)| c.is_some()).expect("some local cookie");
        return Err(cookie_err(
            d,
            format!(
                "has a cookie but the metadata store has none for bookie {id} (was the cluster reset?)"
            ),
        ));
    };
    let mut restamp = Vec::new();
    for (d, c) in &local {
        let Some(c) = c else {
            if stamp_missing {
                // A wiped (or new, empty) dir of a known bookie: checked, then re-stamped.
                restamp.push((d.to_path_buf(), remote.encode()));
                continue;
            }
            let why = if d.exists() { "has no cookie (wiped or replaced?)" } else { "is missing" };
            return Err(cookie_err(
                d,
                format!("{why}, but bookie {id} is registered with a cookie in the metadata store"),
            ));
        };
        let mismatch = [
            ("bookie_id", &c.bookie_id, &remote.bookie_id),
            ("cluster_id", &c.cluster_id, &remote.cluster_id),
            ("instance_id", &c.instance_id, &remote.instance_id),
        ]
        .into_iter()
        .find(|(_, a, b)| a != b);
        if let Some((field, a, b)) = mismatch {
            return Err(cookie_err(
                d,
                format!("cookie says {field}={a} but the metadata store says {field}={b}"),
            ));
        }
        if c.journal_dirs != journal_dirs || c.ledger_dirs != ledger_dirs {
            return Err(cookie_err(
                d,
                format!(
                    "cookie lists journal dirs {:?} and ledger dirs {:?}, but this bookie is configured with {:?} and {:?}",
                    c.journal_dirs, c.ledger_dirs, journal_dirs, ledger_dirs
                ),
            ));
        }
    }
    if remote.cluster_id != cluster_id {
        return Err(cookie_err(
            &dirs[0],
            format!(
                "cookie belongs to cluster {} but the metadata store is cluster {cluster_id}",
                remote.cluster_id
            ),
        ));
    }
    Ok(CookieCheck { restamp, stamped_new: false })
}

/// What the cookie check found.
struct CookieCheck {
    /// Dirs of a known bookie found without their cookie: re-stamped after the pre-boot
    /// check.
    restamp: Vec<(PathBuf, bytes::Bytes)>,
    /// No cookie anywhere: stamped as a new bookie now.
    stamped_new: bool,
}

/// Runs GC every `config.interval` until stopped.
async fn run_gc(
    storage: Arc<Storage>,
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    id: String,
    config: crate::gc::GcConfig,
    // Where passes are reported: the status, and since when the metadata is unlisted.
    (status, listed_ms): (Arc<watch::Sender<crate::gc::GcStatus>>, Arc<AtomicU64>),
    mut stop: watch::Receiver<bool>,
) {
    // The first compactions run one interval after start, not at once.
    let clock = storage.config().clock.clone();
    let (mut last_minor, mut last_major) = (clock.now_ms(), clock.now_ms());
    loop {
        tokio::select! {
            () = tokio::time::sleep(config.interval) => {}
            _ = stop.changed() => return,
        }
        let (started, started_ms) = (PassStart::now(), clock.now_ms());
        let mut pass = config.clone();
        let due = crate::gc::compaction_due(&config, started_ms, last_minor, last_major);
        pass.compaction_threshold = due.map_or(0.0, |(t, _)| t);
        let result = crate::gc::gc_once(&storage, meta.as_ref(), &keys, &id, &pass).await;
        match (&result, due) {
            (Err(e), _) => tracing::warn!(error = %e, "GC pass failed; the next one retries"),
            (Ok(_), Some((_, true))) => (last_major, last_minor) = (started_ms, started_ms),
            (Ok(_), Some((_, false))) => last_minor = started_ms,
            (Ok(_), None) => {}
        }
        started.report(&result, &status, &listed_ms);
    }
}

/// When a GC pass began, for its report.
struct PassStart {
    at: std::time::Instant,
    wall_ms: u64,
}

impl PassStart {
    fn now() -> PassStart {
        let wall_ms = folio_proto::clock::Clock::now_ms(&folio_proto::clock::WallClock);
        PassStart { at: std::time::Instant::now(), wall_ms }
    }

    /// Records the pass in the status; a good one also moves the time since which the
    /// metadata is unlisted (LIST_LEDGERS reports it) to its start.
    fn report(
        &self,
        result: &Result<crate::gc::GcReport, crate::gc::GcError>,
        status: &watch::Sender<crate::gc::GcStatus>,
        listed_ms: &AtomicU64,
    ) {
        if result.is_ok() {
            listed_ms.store(self.wall_ms, Ordering::SeqCst);
        }
        status.send_modify(|s| s.record(self.at, result));
    }
}

/// Registers under the writable or read-only key (and removes the other one), on `lease`.
async fn register(
    meta: &dyn MetadataStore,
    keys: &Keys,
    reg: &BookieRegistration,
    lease: LeaseId,
    read_only: bool,
) -> Result<(), MetaError> {
    let txn = Txn::new()
        .put_with_lease(keys.bookie(&reg.bookie_id, read_only), reg.encode(), lease)
        .delete(keys.bookie(&reg.bookie_id, !read_only));
    meta.txn(txn).await.map(|_| ())
}

async fn keep_registered(
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    reg: BookieRegistration,
    lease: Arc<std::sync::Mutex<LeaseId>>,
    read_only: Arc<AtomicBool>,
    ttl: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(ttl / 3) => {}
            _ = stop.changed() => return,
        }
        let id = *lease.lock().expect("lease lock");
        match meta.keep_alive(id).await {
            Ok(()) => {}
            Err(MetaError::LeaseNotFound(_)) => {
                tracing::warn!(bookie = %reg.bookie_id, "registration lease expired; registering again");
                match meta.grant_lease(ttl).await {
                    Ok(new) => {
                        *lease.lock().expect("lease lock") = new;
                        if let Err(e) = register(
                            meta.as_ref(),
                            &keys,
                            &reg,
                            new,
                            read_only.load(Ordering::SeqCst),
                        )
                        .await
                        {
                            tracing::warn!(error = %e, "re-registration failed");
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "granting a new lease failed"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "lease keep-alive failed; retrying"),
        }
    }
}

/// Why the bookie must not take new writes, if it must not.
fn read_only_reason(
    storage: &Storage,
    usage: &std::io::Result<f64>,
    was: bool,
    config: &BookieConfig,
) -> Option<String> {
    if let Some(reason) = storage.poisoned() {
        return Some(format!("storage poisoned: {reason}"));
    }
    match usage {
        // A disk that cannot say how full it is is not trusted with new data.
        Err(e) => Some(format!("disk usage probe failed: {e}")),
        Ok(u) if was && *u >= config.disk_usage_lwm => Some(format!("disk {:.0}% full", u * 100.0)),
        Ok(u) if *u >= config.disk_usage_threshold => Some(format!("disk {:.0}% full", u * 100.0)),
        Ok(_) => None,
    }
}

/// Keeps the registration under the writable or the read-only key: read-only while the disk
/// is above its threshold (down to the low-water mark), cannot be probed, or the storage is
/// poisoned by a failed write or fsync (for good: a restart recovers from the journal).
/// A poisoning is acted on at once, not at the next check.
#[allow(clippy::too_many_arguments)]
async fn monitor_disk(
    disk: Arc<dyn DiskUsage>,
    storage: Arc<Storage>,
    config: BookieConfig,
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    reg: BookieRegistration,
    lease: Arc<std::sync::Mutex<LeaseId>>,
    read_only: Arc<AtomicBool>,
    reason_out: Arc<std::sync::Mutex<Option<String>>>,
    mut stop: watch::Receiver<bool>,
) {
    let (poisoned, mut poison) = watch::channel(());
    storage.on_poison(move |_| {
        let _ = poisoned.send(());
    });
    // Once the poison's sender is gone (it fired, or the storage went), only the timed
    // checks remain: a receiver without a sender is ready at once, for ever (it spun a core
    // after every poisoning until the simulator found it, #26).
    let mut poison_watched = true;
    loop {
        let usage = disk.usage(&config.storage.ledger_dir);
        let was = read_only.load(Ordering::SeqCst);
        let reason = read_only_reason(&storage, &usage, was, &config);
        let now = reason.is_some();
        *reason_out.lock().expect("read-only reason lock") = reason.clone();
        if now != was {
            read_only.store(now, Ordering::SeqCst);
            match &reason {
                Some(why) => {
                    tracing::error!(bookie = %reg.bookie_id, %why, "bookie turned read-only")
                }
                None => tracing::warn!(bookie = %reg.bookie_id, "bookie writable again"),
            }
            let id = *lease.lock().expect("lease lock");
            if let Err(e) = register(meta.as_ref(), &keys, &reg, id, now).await {
                tracing::warn!(error = %e, "moving the registration failed");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(config.disk_check_interval) => {}
            r = poison.changed(), if poison_watched => poison_watched = r.is_ok(),
            _ = stop.changed() => return,
        }
    }
}

/// `folio bookie format`: removes the bookie's cookies (local and in the metadata store) and
/// everything in its data dirs. Refuses when data exists unless `force`.
pub async fn format(
    config: &BookieConfig,
    meta: &dyn MetadataStore,
    bookie_id: &str,
    force: bool,
    decommissioned: bool,
) -> Result<(), BookieError> {
    let keys = Keys::new(config.metadata_root.clone());
    // Erasing a bookie that ledgers still name would make its "no such entry" answers look
    // like real negatives to a recovery (BookKeeper #2612). Only a bookie that nothing
    // names any more (decommissioned, its ledgers re-replicated) may be erased without
    // saying so; a restart under a known id runs the pre-boot fence anyway.
    if !decommissioned {
        let (n, examples) = crate::integrity::ledgers_naming(meta, &keys, bookie_id).await?;
        if n > 0 {
            return Err(BookieError::FormatRefused {
                bookie: bookie_id.to_string(),
                ledgers: n,
                examples,
            });
        }
    }
    for d in config.dirs() {
        if has_data(config.fs.as_ref(), &d) && !force {
            return Err(BookieError::Cookie {
                dir: d.display().to_string(),
                reason: "holds data; pass --force to erase it".into(),
            });
        }
    }
    // Erasing whole directory trees is outside what the file layer models; `format` runs
    // offline, on no bookie.
    for d in config.dirs() {
        if d.exists() {
            for e in std::fs::read_dir(&d).map_err(io(format!("listing {}", d.display())))? {
                let p = e.map_err(io("listing"))?.path();
                let r =
                    if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
                r.map_err(io(format!("removing {}", p.display())))?;
            }
        }
    }
    meta.delete(&keys.cookie(bookie_id), Expect::Any).await?;
    tracing::info!(bookie = %bookie_id, "formatted: data and cookies removed");
    Ok(())
}
