//! `folio bookie`: run a storage node, format it, or inspect its data dir.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::cluster::{open_metadata, parse_override};
use folio_bookie::bookie::{Bookie, BookieConfig};

const KEYS_HELP: &str = "\
CONFIG KEYS (TOML file via --config; any key also via --override KEY=VALUE):
  bookie_id                 string   default: the advertised address
  listen                    string   default \"127.0.0.1:3181\"
  advertised_address        string   default: the bound listen address
  rack                      string   default none (placement spreads ensembles over racks)
  data_dir                  path     default \"./folio-bookie\"
  journal_dir               path     default <data_dir>/journal
  ledger_dir                path     default <data_dir>/ledgers
  metadata                  string   \"embedded:<dir>\" (default \"embedded:./folio-meta\")
                                     or \"etcd:<host:port>[,<host:port>...]\"
  metadata_root             string   default \"folio\"
  http_listen               string   default none (health, metrics, POST /gc)
  http_token_file           path     default none: the token POST /gc needs (without one,
                                     POST is served only when http_listen is loopback)
  cluster_secret_file       path     default none: the secret every connection must prove
                                     (shared by the cluster; also --cluster-secret-file or
                                     FOLIO_CLUSTER_SECRET_FILE)
  allow_unauthenticated     bool     default false: without a secret, refuse to listen
                                     beyond loopback unless this is true
  etcd.user, etcd.password_file      etcd user and password file (--etcd-user, …)
  etcd.ca_file, etcd.cert_file, etcd.key_file  TLS to etcd: CA, client certificate, key
  lease_ttl_ms              integer  default 10000
  disk_check_interval_ms    integer  default 10000
  disk_usage_threshold      float    default 0.95 (read-only above it)
  disk_usage_lwm            float    default 0.90 (writable again below it)
  server.inflight_per_connection integer default 10000 (requests in flight per connection)
  server.connection_bytes_max integer default 268435456 (request and reply bytes per connection)
  server.process_bytes_max  integer  default 1073741824 (the same, all connections)
  server.connections_max    integer  default 4096
  server.idle_timeout_ms    integer  default 3600000
  server.request_read_timeout_ms integer default 30000
  server.reply_write_timeout_ms integer default 30000
  gc.interval_ms            integer  default 60000
  gc.incoming_grace_ms      integer  default 600000 (a copy being made here is kept this
                                     long after its last recovery add, mark or not)
  gc.minor_threshold        float    default 0.2  (compact logs below this usage…)
  gc.minor_interval_ms      integer  default 3600000 (…this often)
  gc.major_threshold        float    default 0.8
  gc.major_interval_ms      integer  default 86400000
  gc.compaction_bytes_per_s integer  default 67108864 (0 = unlimited)
  storage.mode              string   default \"single-write\": entries only in the journal's
                                     files (each byte written once; GC deletes and compacts
                                     those files); \"two-write\" also writes them, sorted, to
                                     entry logs (journal-less bookies). A bookie can move from
                                     two-write to single-write, not back.
  write_cache_bytes         integer  default 67108864
  write_cache_throttle_ms   integer  default 10000
  entry_log_bytes_max       integer  default 1073741824
  entry_log_sync_bytes      integer  default 0 (fdatasync once per flush)
  entry_log.per_ledger      bool     default false (one entry log per ledger)
  entry_log.open_max        integer  default 500 (per-ledger mode: logs open at once)
  entry_log.idle_rotation_ms integer default 300000 (per-ledger mode: seal idle logs)
  flush_interval_ms         integer  default 10000
  read_wait_ms              integer  default 1000 (a read waits this long for another read from disk of its entry)
  read_cache_bytes          integer  default 67108864
  read_ahead_entries        integer  default 100
  read_ahead_bytes          integer  default 4194304 (capped at half of read_cache_bytes)
  journal.sync              bool     default true
  journal.write_data        bool     default true (false = journal-less mode, with storage.mode = \"two-write\")
  journal.group_wait_us     integer  default 1000
  journal.group_bytes_max   integer  default 524288
  journal.file_bytes_max    integer  default 536870912
  journal.prealloc_bytes    integer  default 0
  journal.files_recycled_max integer default 2 (files kept to be written over instead of
                                     deleted: journal files a checkpoint covers, data
                                     files GC is done with; each up to file_bytes_max)
  journal.direct_io         bool     default true
  integrity.enabled         bool     default: true exactly when journal.write_data = false
                                     (pre-boot check after an unclean stop, full check
                                     with repair from peers while the flag is set)
  integrity.stamp_missing_cookies bool default false (a wiped dir of a known bookie is
                                     checked and re-stamped instead of refused)
  integrity.check_interval_ms integer default 3000";

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, after_help = format!("{KEYS_HELP}\n\n{}", crate::autorecovery_cmd::KEYS_HELP))]
pub struct Args {
    #[command(subcommand)]
    command: Option<BookieCommand>,
    #[command(flatten)]
    settings: Settings,
}

#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    /// TOML configuration file (keys listed below).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Sets any config key, after the file: `--override journal.sync=false` (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Same as `--override listen=…`.
    #[arg(long)]
    listen: Option<String>,
    /// Same as `--override data_dir=…`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Same as `--override metadata=…`.
    #[arg(long)]
    metadata: Option<String>,
    /// Same as `--override bookie_id=…`.
    #[arg(long)]
    bookie_id: Option<String>,
    /// Same as the keys `cluster_secret_file` and `etcd.*`.
    #[command(flatten)]
    access: crate::access::AccessArgs,
}

#[derive(Debug, clap::Subcommand)]
enum BookieCommand {
    /// Erase the bookie's data dirs and cookies (local and in the metadata store).
    #[command(after_help = KEYS_HELP)]
    Format {
        #[command(flatten)]
        settings: Settings,
        /// Erase even if the dirs hold data.
        #[arg(long)]
        force: bool,
        /// Erase although ledgers still name this bookie in their ensembles: its data is
        /// gone for good (their copies here are lost; a restart under the same id fences
        /// and puts in limbo what it held before serving).
        #[arg(long)]
        decommissioned: bool,
    },
    /// Run a garbage-collection pass on a running bookie now (through its `http_listen`).
    Gc {
        /// Required: run the pass now (the only mode there is).
        #[arg(long)]
        now: bool,
        /// The bookie's HTTP endpoint (its `http_listen`).
        #[arg(long)]
        http: std::net::SocketAddr,
        /// The file with the endpoint's token (its `http_token_file`), if it has one.
        #[arg(long, env = "FOLIO_HTTP_TOKEN_FILE", value_name = "FILE")]
        http_token_file: Option<PathBuf>,
    },
    /// Check a stopped bookie's ledgers against the metadata store: which entries of its
    /// write sets are missing locally. With `--repair`: recover ledgers in limbo, copy the
    /// missing entries from peers, and clear the integrity flag when all is whole.
    #[command(after_help = KEYS_HELP)]
    Check {
        #[command(flatten)]
        settings: Settings,
        #[arg(long)]
        repair: bool,
    },
    /// Drain a bookie: autorecovery copies everything it holds to other bookies (new
    /// ledgers avoid it meanwhile); waits with a progress line until no ledger names it,
    /// then removes its cookie and registration. Then stop its process.
    Decommission {
        #[command(flatten)]
        cluster: crate::cluster::ClusterArgs,
        /// The bookie's id.
        bookie_id: String,
        /// Only ask for the drain; do not wait for it.
        #[arg(long)]
        no_wait: bool,
    },
    /// Put a bookie in maintenance (`on`: its absence is not a loss, nothing is copied
    /// while it is down) or take it out (`off`).
    Maintenance {
        #[command(flatten)]
        cluster: crate::cluster::ClusterArgs,
        bookie_id: String,
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Describe a stopped bookie's data dir: cookie, journal, entry logs, ledgers, flags.
    Inspect {
        /// The data dir (with `journal/` and `ledgers/` inside).
        dir: PathBuf,
        /// Also show, for every sealed entry log, the ledgers that keep it from being
        /// collected and its usage (live bytes / size).
        #[arg(long)]
        gc: bool,
    },
}

/// A bookie's configuration plus where its metadata lives.
#[derive(Debug)]
pub struct Resolved {
    pub bookie: BookieConfig,
    pub metadata: String,
    /// etcd's user and TLS files, when `metadata` is etcd.
    pub etcd: crate::access::EtcdOptions,
    pub http_listen: Option<std::net::SocketAddr>,
    /// Who may call the HTTP endpoint's POST routes (`http_token_file`).
    pub http_access: crate::http::HttpAccess,
    /// This bookie's autorecovery (auditor candidate and worker); `None` when disabled.
    pub autorecovery: Option<folio_repair::autorecovery::AutorecoveryConfig>,
}

impl Resolved {
    /// The bookie id as configured for a stopped bookie: the id, else the advertised
    /// address, else the listen address (a running bookie also falls back to the bound one).
    pub fn bookie_id(&self) -> String {
        let b = &self.bookie;
        b.bookie_id.clone().or(b.advertised_address.clone()).unwrap_or(b.listen.to_string())
    }
}

fn set(table: &mut toml::Table, key: &str, value: toml::Value) {
    match key.split_once('.') {
        Some((head, rest)) => {
            let sub = table.entry(head).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(t) = sub {
                set(t, rest, value);
            }
        }
        None => {
            table.insert(key.to_string(), value);
        }
    }
}

fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push((key, other.clone())),
        }
    }
}

impl Settings {
    pub fn resolve(&self) -> Result<Resolved, String> {
        let mut table = match &self.config {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| format!("reading {}: {e}", p.display()))?
                .parse::<toml::Table>()
                .map_err(|e| format!("{}: {e}", p.display()))?,
            None => toml::Table::new(),
        };
        let direct = [
            ("listen", self.listen.clone()),
            ("data_dir", self.data_dir.as_ref().map(|p| p.display().to_string())),
            ("metadata", self.metadata.clone()),
            ("bookie_id", self.bookie_id.clone()),
        ];
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let a = &self.access;
        let access = [
            ("cluster_secret_file", path(&a.cluster_secret_file)),
            ("etcd.user", a.etcd_user.clone()),
            ("etcd.password_file", path(&a.etcd_password_file)),
            ("etcd.ca_file", path(&a.etcd_ca_file)),
            ("etcd.cert_file", path(&a.etcd_cert_file)),
            ("etcd.key_file", path(&a.etcd_key_file)),
        ];
        let direct = direct.into_iter().chain(access);
        for (k, v) in direct {
            if let Some(v) = v {
                set(&mut table, k, toml::Value::String(v));
            }
        }
        for o in &self.overrides {
            let (k, v) = parse_override(o)?;
            set(&mut table, &k, v);
        }
        let mut flat = Vec::new();
        flatten("", &table, &mut flat);
        let source = self.config.as_ref().map_or("flags".to_string(), |p| p.display().to_string());
        build(&flat).map_err(|e| format!("{source}: {e}"))
    }
}

/// The keys `access_keys` reads.
const ACCESS_KEYS: &[&str] = &[
    "cluster_secret_file",
    "etcd.user",
    "etcd.password_file",
    "etcd.ca_file",
    "etcd.cert_file",
    "etcd.key_file",
    "http_token_file",
];

/// The cluster secret, etcd's user and TLS, and the HTTP token, from their keys (files
/// read).
fn access_keys(
    string: &dyn Fn(&str) -> Result<Option<String>, String>,
) -> Result<
    (Option<folio_proto::auth::ClusterSecret>, crate::access::EtcdOptions, crate::http::HttpAccess),
    String,
> {
    let path = |k: &str| string(k).map(|s| s.map(PathBuf::from));
    let access = crate::access::AccessArgs {
        cluster_secret_file: path("cluster_secret_file")?,
        etcd_user: string("etcd.user")?,
        etcd_password_file: path("etcd.password_file")?,
        etcd_ca_file: path("etcd.ca_file")?,
        etcd_cert_file: path("etcd.cert_file")?,
        etcd_key_file: path("etcd.key_file")?,
    };
    let http = crate::http::HttpAccess::from_file(path("http_token_file")?.as_deref())?;
    Ok((access.cluster_secret()?, access.etcd()?, http))
}

/// Sets one `journal.*` key.
fn set_journal_key(
    j: &mut folio_bookie::JournalConfig,
    k: &str,
    v: &toml::Value,
) -> Result<(), String> {
    let (int, boolean) =
        (|| crate::config_value::non_negative(k, v), || crate::config_value::true_or_false(k, v));
    match k {
        "journal.sync" => j.sync = boolean()?,
        "journal.write_data" => j.write_data = boolean()?,
        "journal.group_wait_us" => j.group_wait_max = Duration::from_micros(int()?),
        "journal.group_bytes_max" => j.group_bytes_max = int()? as usize,
        "journal.file_bytes_max" => j.file_bytes_max = int()?,
        "journal.prealloc_bytes" => j.prealloc_bytes = int()?,
        "journal.files_recycled_max" => j.n_files_recycled_max = int()? as usize,
        "journal.direct_io" => j.direct_io = boolean()?,
        other => return Err(format!("unknown config key {other:?} (see `folio bookie --help`)")),
    }
    Ok(())
}

fn build(flat: &[(String, toml::Value)]) -> Result<Resolved, String> {
    let get = |k: &str| flat.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v);
    let string = |k: &str| -> Result<Option<String>, String> {
        match get(k) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(format!("{k} must be a string, not {v}")),
        }
    };
    let data_dir = PathBuf::from(string("data_dir")?.unwrap_or_else(|| "./folio-bookie".into()));
    let listen = string("listen")?.unwrap_or_else(|| "127.0.0.1:3181".into());
    let listen = listen.parse().map_err(|e| format!("listen = {listen:?}: {e}"))?;
    let mut c = BookieConfig::new(&data_dir, listen);
    c.bookie_id = string("bookie_id")?;
    c.advertised_address = string("advertised_address")?;
    c.rack = string("rack")?;
    if let Some(d) = string("journal_dir")? {
        c.storage.journal_dir = d.into();
    }
    if let Some(d) = string("ledger_dir")? {
        c.storage.ledger_dir = d.into();
    }
    if let Some(r) = string("metadata_root")? {
        c.metadata_root = r;
    }
    let metadata = string("metadata")?.unwrap_or_else(|| "embedded:./folio-meta".into());
    let http_listen = match string("http_listen")? {
        Some(a) => Some(a.parse().map_err(|e| format!("http_listen = {a:?}: {e}"))?),
        None => None,
    };
    let (secret, etcd, http_access) = access_keys(&string)?;
    c.auth.secret = secret;
    let (autorecovery, flat) = crate::autorecovery_cmd::take_keys(flat)?;
    for (k, v) in &flat {
        let (int, boolean) = (
            || crate::config_value::non_negative(k, v),
            || crate::config_value::true_or_false(k, v),
        );
        let float = || {
            v.as_float().or(v.as_integer().map(|i| i as f64)).ok_or(format!("{k} must be a number"))
        };
        let ms = |x: u64| Duration::from_millis(x);
        let j = &mut c.storage.journal;
        match k.as_str() {
            "bookie_id" | "listen" | "advertised_address" | "rack" | "data_dir" | "journal_dir"
            | "ledger_dir" | "metadata" | "metadata_root" | "http_listen" => {}
            "lease_ttl_ms" => c.lease_ttl = ms(int()?),
            "disk_check_interval_ms" => c.disk_check_interval = ms(int()?),
            "disk_usage_threshold" => c.disk_usage_threshold = float()?,
            "disk_usage_lwm" => c.disk_usage_lwm = float()?,
            "server.inflight_per_connection" => c.server.inflight_per_connection = int()? as usize,
            "server.connection_bytes_max" => c.server.connection_bytes_max = int()? as usize,
            "server.process_bytes_max" => c.server.process_bytes_max = int()? as usize,
            "server.connections_max" => c.server.connections_max = int()? as usize,
            "server.idle_timeout_ms" => c.server.idle_timeout = ms(int()?),
            "server.request_read_timeout_ms" => c.server.request_read_timeout = ms(int()?),
            "server.reply_write_timeout_ms" => c.server.reply_write_timeout = ms(int()?),
            "gc.interval_ms" => c.gc.interval = ms(int()?),
            "gc.incoming_grace_ms" => c.gc.incoming_grace = ms(int()?),
            "gc.minor_threshold" => c.gc.minor_threshold = float()?,
            "gc.minor_interval_ms" => c.gc.minor_interval = ms(int()?),
            "gc.major_threshold" => c.gc.major_threshold = float()?,
            "gc.major_interval_ms" => c.gc.major_interval = ms(int()?),
            "gc.compaction_bytes_per_s" => c.gc.compaction_bytes_per_s = int()?,
            "storage.mode" => c.storage.mode = storage_mode(v)?,
            "write_cache_bytes" => c.storage.write_cache_bytes = int()? as usize,
            "write_cache_throttle_ms" => c.storage.write_cache_throttle_max = ms(int()?),
            "entry_log_bytes_max" => c.storage.entry_log_bytes_max = int()?,
            "entry_log_sync_bytes" => c.storage.entry_log_sync_bytes = int()?,
            "entry_log.per_ledger" => c.storage.entry_log_per_ledger = boolean()?,
            "entry_log.open_max" => c.storage.entry_log_per_ledger_open_max = int()? as usize,
            "entry_log.idle_rotation_ms" => c.storage.entry_log_idle_rotation = ms(int()?),
            "flush_interval_ms" => c.storage.flush_interval = ms(int()?),
            "read_wait_ms" => c.storage.read_wait_max = ms(int()?),
            "read_cache_bytes" => c.storage.read_cache_bytes = int()? as usize,
            "read_ahead_entries" => c.storage.read_ahead_entries = int()? as usize,
            "read_ahead_bytes" => c.storage.read_ahead_bytes = int()? as usize,
            k if k.starts_with("journal.") => set_journal_key(j, k, v)?,
            "integrity.enabled" => c.integrity.enabled = Some(boolean()?),
            "integrity.stamp_missing_cookies" => c.integrity.stamp_missing_cookies = boolean()?,
            "integrity.check_interval_ms" => c.integrity.check_interval = ms(int()?),
            "allow_unauthenticated" => c.auth.allow_unauthenticated = boolean()?,
            k if ACCESS_KEYS.contains(&k) => {} // read by access_keys
            other => {
                return Err(format!("unknown config key {other:?} (see `folio bookie --help`)"));
            }
        }
    }
    c.validate()?;
    Ok(Resolved { bookie: c, metadata, etcd, http_listen, http_access, autorecovery })
}

/// The value of `storage.mode`.
fn storage_mode(v: &toml::Value) -> Result<folio_bookie::StorageMode, String> {
    let name = v.as_str().ok_or("storage.mode must be a string")?;
    folio_bookie::StorageMode::parse(name).map_err(|e| e.0)
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    match args.command {
        Some(BookieCommand::Inspect { dir, gc }) => crate::inspect::run(&dir, gc),
        Some(BookieCommand::Format { settings, force, decommissioned }) => {
            runtime.block_on(async {
                let r = settings.resolve()?;
                let meta = open_metadata(&r.metadata, &r.etcd).await?;
                let id = r.bookie_id();
                folio_bookie::bookie::format(&r.bookie, meta.as_ref(), &id, force, decommissioned)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("formatted bookie {id}");
                Ok(())
            })
        }
        Some(BookieCommand::Decommission { cluster, bookie_id, no_wait }) => {
            runtime.block_on(crate::autorecovery_cmd::decommission(&cluster, &bookie_id, !no_wait))
        }
        Some(BookieCommand::Maintenance { cluster, bookie_id, state }) => runtime
            .block_on(crate::autorecovery_cmd::maintenance(&cluster, &bookie_id, state == "on")),
        Some(BookieCommand::Check { settings, repair }) => {
            runtime.block_on(check(settings, repair))
        }
        Some(BookieCommand::Gc { now, http, http_token_file }) => {
            let access = crate::http::HttpAccess::from_file(http_token_file.as_deref())?;
            runtime.block_on(gc_now(now, http, &access))
        }
        None => runtime.block_on(async {
            let r = args.settings.resolve()?;
            let meta = open_metadata(&r.metadata, &r.etcd).await?;
            let integrity = r.bookie.integrity.clone();
            let enabled = integrity.is_enabled(&r.bookie.storage);
            let keys = folio_meta::keys::Keys::new(r.bookie.metadata_root.clone());
            let secret = r.bookie.auth.secret.clone();
            let bookie = Bookie::start(r.bookie, meta.clone()).await.map_err(|e| e.to_string())?;
            println!("bookie {} listening on {}", bookie.id(), bookie.addr());
            // The full integrity check: repairs from peers while the storage flag is set.
            let (stop_check, stop_rx) = tokio::sync::watch::channel(false);
            let stop_rx_ar = stop_rx.clone();
            // Also without integrity on: a bookie restarted empty under a known id was fenced
            // before serving and repairs what it held from its peers.
            let check_task = (enabled || bookie.needs_integrity_check()).then(|| {
                let check = folio_repair::IntegrityCheck {
                    storage: bookie.storage().clone(),
                    client: folio_client::LedgerClient::new(meta.clone(), keys.clone())
                        .with_cluster_secret(secret.clone()),
                    meta: meta.clone(),
                    keys: keys.clone(),
                    bookie_id: bookie.id().to_string(),
                };
                tokio::spawn(check.serve(integrity.check_interval, stop_rx))
            });
            let recovery = r.autorecovery.map(|config| {
                let (meta, keys) = (meta.clone(), keys.clone());
                let client = folio_client::LedgerClient::new(meta.clone(), keys.clone())
                    .with_cluster_secret(secret.clone());
                crate::autorecovery_cmd::spawn(meta, keys, client, config, bookie.id(), stop_rx_ar)
            });
            let bookies: crate::http::Bookies =
                std::sync::Arc::new(tokio::sync::RwLock::new(vec![bookie]));
            let http = match r.http_listen {
                Some(addr) => Some(tokio::spawn(crate::http::serve(
                    crate::http::bind(addr).await?,
                    bookies.clone(),
                    None,
                    None,
                    None,
                    r.http_access.clone(),
                ))),
                None => None,
            };
            tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
            tracing::info!("Ctrl-C: shutting down cleanly");
            if let Some(h) = http {
                h.abort();
            }
            let _ = stop_check.send(true);
            if let Some(t) = check_task {
                let _ = t.await;
            }
            if let Some(t) = recovery {
                let _ = t.await;
            }
            let mut result = Ok(());
            for b in bookies.write().await.drain(..) {
                result = b.shutdown().await.map_err(|e| e.to_string());
            }
            result
        }),
    }
}

/// `folio bookie gc --now --http ADDR`: a GC pass on a running bookie through its HTTP port.
async fn gc_now(
    now: bool,
    http: std::net::SocketAddr,
    access: &crate::http::HttpAccess,
) -> Result<(), String> {
    if !now {
        return Err("say --now: the pass runs immediately".into());
    }
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(http)
        .await
        .map_err(|e| format!("connecting to {http}: {e}"))?;
    let auth = access.token().map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let request = format!("POST /gc HTTP/1.1\r\nhost: folio\r\n{auth}content-length: 0\r\n\r\n");
    s.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut response = String::new();
    s.read_to_string(&mut response).await.map_err(|e| e.to_string())?;
    let body = response.split_once("\r\n\r\n").map_or(response.as_str(), |(_, b)| b);
    if !response.starts_with("HTTP/1.1 200") {
        let status = response.lines().next().unwrap_or("no answer");
        return Err(format!("{http} answered {status}: {}", body.trim_end()));
    }
    print!("{body}");
    Ok(())
}

/// `folio bookie check [--repair]` on a stopped bookie's dirs.
async fn check(settings: Settings, repair: bool) -> Result<(), String> {
    let r = settings.resolve()?;
    let meta = open_metadata(&r.metadata, &r.etcd).await?;
    let id = r.bookie_id();
    let storage_config = r.bookie.storage.clone();
    let storage = tokio::task::spawn_blocking(move || {
        folio_bookie::storage::Storage::open_default(storage_config)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("opening the bookie's storage (is it stopped?): {e}"))?;
    let storage = Arc::new(storage);
    let keys = folio_meta::keys::Keys::new(r.bookie.metadata_root.clone());
    let check = folio_repair::IntegrityCheck {
        storage: storage.clone(),
        client: folio_client::LedgerClient::new(meta.clone(), keys.clone())
            .with_cluster_secret(r.bookie.auth.secret.clone()),
        meta,
        keys,
        bookie_id: id.clone(),
    };
    let t0 = std::time::Instant::now();
    let bar = std::sync::Mutex::new(None::<crate::progress::Progress>);
    let progress = |done: u64, total: u64| {
        let mut bar = bar.lock().expect("progress lock");
        let p = bar.get_or_insert_with(|| {
            crate::progress::Progress::new(format!("checking bookie {id}"), total)
        });
        p.set(done, &format!("{done} of {total} ledgers"));
    };
    let report = check.run(repair, &progress).await.map_err(|e| e.to_string())?;
    if let Some(p) = bar.lock().expect("progress lock").as_mut() {
        p.finish(&format!("{} ledgers checked", report.ledgers_checked));
    }
    println!(
        "bookie {id}: ledgers checked {}, gone {}, limbo cleared {}, entries checked {}, missing {}, copied {}, failed {}, ledgers failed {}, flag cleared {} ({:.1}s)",
        report.ledgers_checked,
        report.ledgers_gone,
        report.limbo_cleared,
        report.entries_checked,
        report.entries_missing,
        report.entries_copied,
        report.entries_failed,
        report.ledgers_failed,
        report.flag_cleared,
        t0.elapsed().as_secs_f64()
    );
    if !repair && report.entries_missing > 0 {
        println!("run again with --repair to copy the missing entries from peers");
    }
    drop(check);
    match Arc::try_unwrap(storage) {
        Ok(s) => s.close().map_err(|e| e.to_string())?,
        Err(_) => return Err("storage still in use at exit".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(config: Option<&str>, overrides: &[&str]) -> Result<Resolved, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bookie.toml");
        if let Some(c) = config {
            std::fs::write(&path, c).unwrap();
        }
        Settings {
            config: config.map(|_| path),
            overrides: overrides.iter().map(|s| s.to_string()).collect(),
            listen: None,
            data_dir: None,
            metadata: None,
            bookie_id: None,
            access: Default::default(),
        }
        .resolve()
    }

    #[test]
    fn file_then_overrides_and_clear_errors_for_bad_keys() {
        let r = settings(
            Some("data_dir = \"/d\"\n[journal]\nsync = false\n"),
            &["journal.sync=true", "lease_ttl_ms=5000"],
        )
        .unwrap();
        assert!(r.bookie.storage.journal.sync, "--override wins over the file");
        assert_eq!(r.bookie.storage.journal_dir, PathBuf::from("/d/journal"));
        assert_eq!(r.bookie.lease_ttl, Duration::from_secs(5));
        let e = settings(Some("jornal_dir = \"/x\"\n"), &[]).unwrap_err();
        assert!(
            e.contains("unknown config key \"jornal_dir\"") && e.contains("bookie.toml"),
            "{e}"
        );
        let e = settings(None, &["journal.sync=maybe"]).unwrap_err();
        assert!(e.contains("journal.sync must be true or false"), "{e}");
        let e = settings(None, &["disk_usage_lwm=0.99"]).unwrap_err();
        assert!(e.contains("disk_usage_lwm"), "{e}");
        let r = settings(None, &["http_listen=\"127.0.0.1:9\""]).unwrap();
        assert_eq!(r.http_listen, Some("127.0.0.1:9".parse().unwrap()));
        let e = settings(None, &["http_listen=nowhere"]).unwrap_err();
        assert!(e.contains("http_listen"), "{e}");
        let e = settings(Some("listen = \"nonsense\"\n"), &[]).unwrap_err();
        assert!(e.contains("listen"), "{e}");
    }
}
