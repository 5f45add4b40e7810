//! `folio standalone`: everything in one process on embedded defaults.
//!
//! The embedded metadata store, `--bookies N` bookies serving the bookie wire protocol on
//! consecutive ports from `--listen`, the deleter of trashed ledgers, autorecovery (auditor
//! and replication worker), a Kafka broker
//! (`--kafka-listen`, default 127.0.0.1:9092), and an HTTP endpoint (`/health`,
//! `/metrics`). Topics get E = Qw = min(bookies, 3) copies by default. It recovers after a
//! crash (journal replay per bookie, then each partition log is fenced and recovered on
//! first use) and on Ctrl-C closes the partition logs, flushes, checkpoints and shuts down
//! cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use folio_bookie::bookie::{Bookie, BookieConfig};
use tokio::sync::RwLock;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where all data lives: `metadata/` and `bookie-<i>/` (journal, entry logs, index).
    #[arg(long, default_value = "./folio-data")]
    data_dir: PathBuf,
    /// How many bookies to run.
    #[arg(long, default_value_t = 1)]
    bookies: u16,
    /// Where the first bookie listens; bookie i uses the port + i (port 0: any free ports).
    #[arg(long, default_value = "127.0.0.1:3181")]
    listen: SocketAddr,
    /// Health and Prometheus metrics endpoint (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:8081")]
    http: SocketAddr,
    /// A file whose first line is the token the HTTP endpoint's POST routes need.
    #[arg(long, env = "FOLIO_HTTP_TOKEN_FILE", value_name = "FILE")]
    http_token_file: Option<PathBuf>,
    #[command(flatten)]
    kafka: crate::broker_cmd::KafkaArgs,
}

pub fn run(args: Args) -> Result<(), String> {
    if args.bookies == 0 {
        return Err("--bookies must be at least 1".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting runtime: {e}"))?;
    runtime.block_on(async {
        let meta_dir = args.data_dir.join("metadata");
        std::fs::create_dir_all(&meta_dir)
            .map_err(|e| format!("creating {}: {e}", meta_dir.display()))?;
        let meta = Arc::new(
            folio_meta::embedded::EmbeddedStore::open(&meta_dir)
                .map_err(|e| format!("opening metadata in {}: {e}", meta_dir.display()))?,
        );
        let http = crate::http::bind(args.http).await?;
        let access = crate::http::HttpAccess::from_file(args.http_token_file.as_deref())?;
        let http_addr = http.local_addr().map_err(|e| format!("HTTP listener: {e}"))?;
        let bookies: crate::http::Bookies = Arc::new(RwLock::new(Vec::new()));
        for i in 0..args.bookies {
            let mut listen = args.listen;
            if listen.port() != 0 {
                listen.set_port(listen.port() + i);
            }
            let mut config = BookieConfig::new(args.data_dir.join(format!("bookie-{i}")), listen);
            config.bookie_id = Some(format!("bookie-{i}"));
            let b = Bookie::start(config, meta.clone())
                .await
                .map_err(|e| format!("bookie-{i}: {e}"))?;
            let r = b.storage().recovery_report();
            tracing::info!(
                bookie = b.id(),
                addr = %b.addr(),
                ledgers = r.n_ledgers,
                journal_records_replayed = r.journal.n_records,
                unclean_shutdown = b.unclean_shutdown(),
                "bookie up"
            );
            bookies.write().await.push(b);
        }
        // The broker runs the trash deleter (it is the controller of this one-broker
        // cluster): it resumes whatever an earlier run left.
        let meta_dyn: Arc<dyn folio_meta::MetadataStore> = meta.clone();
        let keys = folio_meta::keys::Keys::default();
        let env = folio_log::LogEnv {
            client: folio_client::LedgerClient::new(meta_dyn.clone(), keys.clone()),
            meta: meta_dyn,
            keys,
            clock: Arc::new(folio_log::WallClock),
            owner: "standalone".into(),
        };
        // Autorecovery: with several bookies, a bookie that stops serving is healed from
        // the others like in a cluster.
        let (stop_recovery, stop_rx) = tokio::sync::watch::channel(false);
        let recovery = crate::autorecovery_cmd::spawn(
            env.meta.clone(),
            env.keys.clone(),
            env.client.clone(),
            folio_repair::autorecovery::AutorecoveryConfig::default(),
            "standalone",
            stop_rx,
        );
        let (meta, keys) = (env.meta.clone(), env.keys.clone());
        let mut broker_config = args.kafka.config(args.bookies as usize)?;
        // The embedded store is this process's alone: an earlier run's registration is ours.
        broker_config.store_exclusive = true;
        let broker =
            folio_broker::Broker::start(broker_config, env).await.map_err(|e| e.to_string())?;
        let backend = format!("embedded ({})", args.data_dir.join("metadata").display());
        let served = crate::http::Served { bookies: bookies.clone(), broker: broker.clone() };
        let http_task = crate::http::spawn_for_broker(http, served, (meta, keys), backend, access);
        tracing::info!(
            data_dir = %args.data_dir.display(),
            bookies = args.bookies,
            kafka = %broker.addr(),
            http = %http_addr,
            "folio standalone up: embedded metadata, {} bookie(s), Kafka on {}; Ctrl-C to stop",
            args.bookies,
            broker.addr()
        );
        tokio::signal::ctrl_c().await.map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
        tracing::info!("shutting down: flushing and checkpointing");
        http_task.abort();
        broker.shutdown().await;
        let _ = stop_recovery.send(true);
        let _ = recovery.await;
        let mut result = Ok(());
        for b in bookies.write().await.drain(..) {
            if let Err(e) = b.shutdown().await {
                result = Err(format!("clean shutdown failed: {e}"));
            }
        }
        tracing::info!("stopped");
        result
    })
}
