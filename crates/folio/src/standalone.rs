//! `folio standalone`: everything in one process on embedded defaults.
//!
//! Today that is the bookie storage engine on `--data-dir`: it opens (recovering from the
//! journal after a crash), reports what it recovered, and on Ctrl-C flushes, checkpoints and
//! shuts down cleanly. The network server, the embedded metadata store and the Kafka broker
//! join this process as their layers land (see ARCHITECTURE.md).

use std::path::PathBuf;

use folio_bookie::{Storage, StorageConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where all data lives (journal, entry logs, index).
    #[arg(long, default_value = "./folio-data")]
    data_dir: PathBuf,
}

pub fn run(args: Args) -> Result<(), String> {
    let config = StorageConfig::new(&args.data_dir);
    let storage = Storage::open_default(config)
        .map_err(|e| format!("opening {}: {e}", args.data_dir.display()))?;
    let r = storage.recovery_report();
    tracing::info!(
        data_dir = %args.data_dir.display(),
        ledgers = r.n_ledgers,
        journal_records_replayed = r.journal.n_records,
        "folio standalone: storage engine up; Ctrl-C to stop"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting runtime: {e}"))?;
    runtime
        .block_on(async { tokio::signal::ctrl_c().await })
        .map_err(|e| format!("waiting for Ctrl-C: {e}"))?;
    tracing::info!("shutting down: flushing and checkpointing");
    storage.close().map_err(|e| format!("clean shutdown failed: {e}"))?;
    tracing::info!("stopped cleanly");
    Ok(())
}
