//! `folio standalone`: everything in one process on embedded defaults.
//!
//! Today that is the embedded metadata store and one bookie serving the wire protocol on
//! `--listen`. It recovers after a crash (journal replay), and on Ctrl-C flushes,
//! checkpoints and shuts down cleanly. Further bookies, the HTTP endpoint and the Kafka
//! listener join this process as their layers land (see ARCHITECTURE.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use folio_bookie::bookie::{Bookie, BookieConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where all data lives: `metadata/` and `bookie-0/` (journal, entry logs, index).
    #[arg(long, default_value = "./folio-data")]
    data_dir: PathBuf,
    /// Where the bookie listens.
    #[arg(long, default_value = "127.0.0.1:3181")]
    listen: SocketAddr,
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting runtime: {e}"))?;
    runtime.block_on(async {
        let meta_dir = args.data_dir.join("metadata");
        std::fs::create_dir_all(&meta_dir)
            .map_err(|e| format!("creating {}: {e}", meta_dir.display()))?;
        let meta = folio_meta::embedded::EmbeddedStore::open(&meta_dir)
            .map_err(|e| format!("opening metadata in {}: {e}", meta_dir.display()))?;
        let mut config = BookieConfig::new(args.data_dir.join("bookie-0"), args.listen);
        config.bookie_id = Some("bookie-0".into());
        let bookie = Bookie::start(config, Arc::new(meta)).await.map_err(|e| e.to_string())?;
        let r = bookie.storage().recovery_report();
        tracing::info!(
            data_dir = %args.data_dir.display(),
            bookie = %bookie.addr(),
            ledgers = r.n_ledgers,
            journal_records_replayed = r.journal.n_records,
            unclean_shutdown = bookie.unclean_shutdown(),
            "folio standalone up: embedded metadata + 1 bookie; Ctrl-C to stop"
        );
        tokio::signal::ctrl_c().await.map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
        tracing::info!("shutting down: flushing and checkpointing");
        bookie.shutdown().await.map_err(|e| format!("clean shutdown failed: {e}"))?;
        tracing::info!("stopped cleanly");
        Ok(())
    })
}
