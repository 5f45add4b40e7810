//! `folio`: the one binary. Subcommands run a node, administer a cluster, or benchmark.

mod access;
mod acls_cmd;
mod audit_cmd;
mod autorecovery_cmd;
mod bench;
mod bookie_cmd;
mod broker_cmd;
mod cluster;
mod config_value;
mod debug;
mod http;
mod inspect;
mod ledger_cmd;
mod limits;
mod log_cmd;
mod progress;
mod standalone;
mod topics_cmd;
mod transactions_cmd;
mod users_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(all(target_os = "linux", target_env = "gnu"))]
use crate::limits::MALLOC_ARENAS_MAX;

#[derive(Debug, Parser)]
#[command(name = "folio", version, about = "Folio: a replicated log store for streaming data")]
struct Cli {
    /// Log filter, e.g. `info`, `folio_bookie=debug` (also read from RUST_LOG).
    #[arg(long, global = true, default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a storage node (bookie); `format` and `inspect` manage its data dirs.
    Bookie(Box<bookie_cmd::Args>),
    /// Create, write, read, recover, delete, list and inspect ledgers in a cluster.
    Ledger(ledger_cmd::Args),
    /// Managed logs (ledger chains): list, inspect (why each ledger is kept), delete.
    Log(log_cmd::Args),
    /// The trash of ledgers removed from logs: list (why each is still there), run the
    /// deleter once.
    Trash(log_cmd::TrashArgs),
    /// Run Folio in one process with embedded defaults: metadata, bookies and a Kafka
    /// broker (listening on 127.0.0.1:9092).
    Standalone(Box<standalone::Args>),
    /// Run a Kafka-compatible broker on a cluster's metadata and bookies.
    Broker(Box<broker_cmd::Args>),
    /// Kafka topics and the deletions in progress (list, describe, create, delete).
    Topics(topics_cmd::Args),
    /// Transactional ids and their transactions (list, abort a hanging one).
    Transactions(transactions_cmd::Args),
    /// SCRAM users of the SASL listeners (add, list, delete); PLAIN checks against the same
    /// salted credential.
    Users(users_cmd::Args),
    /// Kafka ACLs checked by brokers run with --authorizer (add, list, delete).
    Acls(acls_cmd::Args),
    /// Account for every ledger and stored byte: live, trashed, being deleted, or an
    /// orphan (metadata nobody references, data no metadata names, a log with no topic).
    /// Exits non-zero when orphans older than the grace period exist.
    Audit(audit_cmd::Args),
    /// Autorecovery: run an auditor candidate and a replication worker (every bookie runs
    /// one too), or show the under-replicated ledgers and the work in progress.
    Autorecovery(autorecovery_cmd::Args),
    /// Benchmarks; each prints key=value figures and ratios against a baseline measured in
    /// the same run.
    Bench {
        #[command(subcommand)]
        what: bench::Bench,
    },
    /// Helpers for process-level tests.
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        what: debug::Debug,
    },
}

/// Caps glibc's malloc arenas; call before any thread is started. Returns whether glibc
/// took the setting.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn limit_malloc_arenas() -> bool {
    // SAFETY: `mallopt` takes two integers and changes a malloc tunable; it touches no
    // memory of ours. It is called before any other thread exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS_MAX) == 1 }
}

fn main() -> ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    limit_malloc_arenas();
    let cli = Cli::parse();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| cli.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Bookie(args) => bookie_cmd::run(*args),
        Command::Ledger(args) => ledger_cmd::run(args),
        Command::Log(args) => log_cmd::run(args),
        Command::Trash(args) => log_cmd::run_trash(args),
        Command::Standalone(args) => standalone::run(*args),
        Command::Broker(args) => broker_cmd::run(*args),
        Command::Topics(args) => topics_cmd::run(args),
        Command::Transactions(args) => transactions_cmd::run(args),
        Command::Users(args) => users_cmd::run(args),
        Command::Acls(args) => acls_cmd::run(args),
        Command::Audit(args) => audit_cmd::run(args),
        Command::Autorecovery(args) => autorecovery_cmd::run(args),
        Command::Bench { what } => bench::run(what),
        Command::Debug { what } => debug::run(what),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("folio: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #[test]
    fn glibc_takes_the_arena_limit() {
        assert!(super::limit_malloc_arenas());
    }
}
