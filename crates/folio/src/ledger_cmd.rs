//! `folio ledger …`: create, write, read, recover, delete, list and inspect ledgers in a
//! cluster (usually `--metadata etcd://host:port`; an embedded store can only be used by one
//! process at a time).

use std::io::BufRead;

use folio_client::CreateOptions;

pub use crate::cluster::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Create a ledger and write entries: each line of stdin (with `--stdin`), or `--count`
    /// generated entries of `--size` bytes. Quorums default to E=3, Qw=2, Qa=2 with three or
    /// more writable bookies, else E = Qw = Qa = the number of bookies.
    Write {
        #[arg(long)]
        ensemble: Option<u16>,
        #[arg(long)]
        write_quorum: Option<u16>,
        #[arg(long)]
        ack_quorum: Option<u16>,
        /// The ledger's password (default: a random one, kept in its metadata).
        #[arg(long)]
        password: Option<String>,
        #[arg(long)]
        stdin: bool,
        #[arg(long, default_value_t = 10)]
        count: u64,
        #[arg(long, default_value_t = 100)]
        size: usize,
        /// Leave the ledger open (for recovery experiments).
        #[arg(long)]
        no_close: bool,
    },
    /// Print entries (`<entry id>\t<payload>`) of a closed ledger, or up to the LAC.
    Read {
        ledger: u64,
        #[arg(long, default_value_t = 0)]
        from: i64,
        #[arg(long)]
        to: Option<i64>,
    },
    /// Fence and close a ledger whose writer is gone; prints its last entry.
    Recover { ledger: u64 },
    /// Delete a ledger's metadata (bookies reclaim the data).
    Delete { ledger: u64 },
    /// List ledger ids.
    List,
    /// Show a ledger's metadata.
    Inspect { ledger: u64 },
    /// Read every entry (through the last, or the LAC of an open ledger) from every bookie
    /// of its write set, checking digests; names each missing or damaged copy and fails if
    /// there is one.
    Check { ledger: u64 },
}

pub fn run(args: Args) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (_, _, client) = args.cluster.connect().await?;
        let e = |e: folio_client::LedgerError| e.to_string();
        match args.command {
            Command::Write {
                ensemble,
                write_quorum,
                ack_quorum,
                password,
                stdin,
                count,
                size,
                no_close,
            } => {
                let n = client.writable_bookies().await.map_err(e)?.len() as u16;
                let (de, dw, da) = if n >= 3 { (3, 2, 2) } else { (n, n, n) };
                let mut opts = CreateOptions::new(
                    ensemble.unwrap_or(de),
                    write_quorum.unwrap_or(dw),
                    ack_quorum.unwrap_or(da),
                );
                if let Some(p) = password {
                    opts.password = p.into_bytes();
                }
                let w = client.create(opts).await.map_err(e)?;
                let mut last = -1;
                if stdin {
                    for line in std::io::stdin().lock().lines() {
                        let line = line.map_err(|e| e.to_string())?;
                        last = w.add(line.as_bytes()).await.map_err(e)?;
                    }
                } else {
                    for i in 0..count {
                        let payload: Vec<u8> =
                            format!("entry-{i} ").bytes().cycle().take(size).collect();
                        last = w.add(&payload).await.map_err(e)?;
                    }
                }
                if !no_close {
                    w.close().await.map_err(e)?;
                }
                let m = w.metadata();
                println!(
                    "ledger {}: {} entries, last entry {last}, E={} Qw={} Qa={}, ensemble {:?}{}",
                    w.id(),
                    last + 1,
                    m.ensemble_size,
                    m.write_quorum,
                    m.ack_quorum,
                    m.ensembles.last_key_value().map(|(_, b)| b.clone()).unwrap_or_default(),
                    if no_close { " (left open)" } else { ", closed" }
                );
            }
            Command::Read { ledger, from, to } => {
                let r = client.open(ledger).await.map_err(e)?;
                let last = match r.last_entry_id() {
                    Some(l) => l,
                    None => r.read_lac().await.map_err(e)?,
                };
                for id in from..=to.unwrap_or(last).min(last) {
                    let entry = r.read(id).await.map_err(e)?;
                    println!("{id}\t{}", String::from_utf8_lossy(entry.payload()));
                }
            }
            Command::Recover { ledger } => {
                let r = client.recover(ledger).await.map_err(e)?;
                println!(
                    "ledger {ledger}: recovered and closed, last entry {}",
                    r.last_entry_id().unwrap_or(-1)
                );
            }
            Command::Delete { ledger } => {
                client.delete(ledger).await.map_err(e)?;
                println!("ledger {ledger}: deleted");
            }
            Command::List => {
                for id in client.list().await.map_err(e)? {
                    println!("{id}");
                }
            }
            Command::Check { ledger } => check(&client, ledger).await?,
            Command::Inspect { ledger } => inspect(&client, ledger).await?,
        }
        Ok(())
    })
}

/// `folio ledger inspect`: the ledger's metadata.
async fn inspect(client: &folio_client::LedgerClient, ledger: u64) -> Result<(), String> {
    let m = client.metadata(ledger).await.map_err(|e| e.to_string())?;
    println!("ledger {ledger}");
    println!("  state: {:?}", m.state);
    println!("  quorums: E={} Qw={} Qa={}", m.ensemble_size, m.write_quorum, m.ack_quorum);
    println!("  last entry: {}, length: {} bytes", m.last_entry_id, m.length);
    for (first, bookies) in &m.ensembles {
        println!("  fragment from entry {first}: {}", bookies.join(", "));
    }
    for (k, v) in &m.custom {
        println!("  custom {k} = {}", String::from_utf8_lossy(v));
    }
    println!("  created (ms since epoch): {}", m.ctime_ms);
    Ok(())
}

/// `folio ledger check`: every copy of every entry (see `LedgerReader::check_replicas`).
async fn check(client: &folio_client::LedgerClient, ledger: u64) -> Result<(), String> {
    let r = client.open(ledger).await.map_err(|e| e.to_string())?;
    let check = r.check_replicas().await.map_err(|e| e.to_string())?;
    for m in &check.missing {
        println!("entry {}\tbookie {}\t{}", m.entry_id, m.bookie, m.error);
    }
    println!(
        "ledger {ledger}: {} entries, {} copies read, {} missing or damaged",
        check.entries,
        check.copies,
        check.missing.len()
    );
    if check.missing.is_empty() {
        Ok(())
    } else {
        Err(format!("ledger {ledger}: {} copies missing or damaged", check.missing.len()))
    }
}
