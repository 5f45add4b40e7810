//! `folio debug …`: hidden helpers for process-level tests.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;

use folio_bookie::{Storage, StorageConfig};
use folio_proto::{Entry, EntryHeader};

#[derive(Debug, clap::Subcommand)]
pub enum Debug {
    /// Adds entries to ledgers 1-4 until killed, printing `acked <ledger> <entry>` for each
    /// acknowledged add and `fenced 4` once ledger 4 is fenced (after 500 of its entries).
    /// Payloads are `payload(ledger, entry, bytes)`, so a verifier can recompute them.
    Load {
        #[arg(long)]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 512)]
        entry_bytes: usize,
        /// The storage mode: `single-write` (the default) or `two-write`.
        #[arg(long, default_value = "two-write")]
        mode: String,
    },
    /// Commits transactions to an embedded metadata store until killed: transaction `n`
    /// creates `a/<n>` and `b/<n>` together; prints `committed <n>` after each, and
    /// `id <id>` for an id taken from the `ids` sequence after each. With `--writers W`,
    /// W writers commit at once (so their transactions share group commits): writer `w`
    /// takes the numbers `start + w`, `start + w + W`, ... where `start` follows the
    /// highest number already there.
    MetaLoad {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 1)]
        writers: usize,
    },
}

/// The payload `folio debug load` writes for an entry.
pub fn payload(ledger_id: u64, entry_id: i64, bytes: usize) -> Vec<u8> {
    format!("{ledger_id}:{entry_id};").bytes().cycle().take(bytes).collect()
}

pub fn run(what: Debug) -> Result<(), String> {
    match what {
        Debug::Load { data_dir, entry_bytes, mode } => load(data_dir, entry_bytes, &mode),
        Debug::MetaLoad { dir, writers } => meta_load(dir, writers.max(1)),
    }
}

fn meta_load(dir: PathBuf, writers: usize) -> Result<(), String> {
    use folio_meta::embedded::EmbeddedStore;
    let store = std::sync::Arc::new(EmbeddedStore::open(&dir).map_err(|e| e.to_string())?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let there = folio_meta::list_all(store.as_ref(), "a/").await.map_err(|e| e.to_string())?;
        let start = there
            .iter()
            .filter_map(|v| v.key.strip_prefix("a/")?.parse::<usize>().ok())
            .max()
            .map_or(0, |n| n + 1);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..writers {
            let store = store.clone();
            tasks.spawn(meta_writer(store, (start + w..).step_by(writers)));
        }
        match tasks.join_next().await {
            Some(Ok(r)) => r,
            Some(Err(e)) => Err(e.to_string()),
            None => Ok(()),
        }
    })
}

/// One writer of `meta_load`: transaction `n` for each `n` of `numbers`.
async fn meta_writer(
    store: std::sync::Arc<folio_meta::embedded::EmbeddedStore>,
    numbers: impl Iterator<Item = usize>,
) -> Result<(), String> {
    use folio_meta::{Compare, MetadataStore, Txn};
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| e.to_string())
    };
    for n in numbers {
        let (a, b) = (format!("a/{n:08}"), format!("b/{n:08}"));
        let txn = Txn::new()
            .compare(Compare::Absent(a.clone()))
            .compare(Compare::Absent(b.clone()))
            .put(a, bytes::Bytes::from(n.to_string()))
            .put(b, bytes::Bytes::from(n.to_string()));
        let outcome = store.txn(txn).await.map_err(|e| e.to_string())?;
        if !outcome.succeeded {
            return Err(format!("transaction {n} found its keys already there"));
        }
        say(format!("committed {n}"))?;
        let id = store.next_id("ids").await.map_err(|e| e.to_string())?;
        say(format!("id {id}"))?;
    }
    Ok(())
}

fn load(data_dir: PathBuf, entry_bytes: usize, mode: &str) -> Result<(), String> {
    let mut config = StorageConfig::new(&data_dir);
    config.mode = folio_bookie::StorageMode::parse(mode).map_err(|e| e.0)?;
    let storage = Storage::open_default(config).map_err(|e| e.to_string())?;
    let key = [3u8; 20];
    let (tx, rx) = mpsc::sync_channel::<String>(1024);
    let printer = std::thread::spawn(move || {
        let mut out = std::io::stdout().lock();
        for line in rx {
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return;
            }
        }
    });
    let start = storage.last_entry_id(1).map_err(|e| e.to_string())?.map_or(0, |e| e + 1);
    for entry_id in start.. {
        for ledger_id in 1..=4u64 {
            if ledger_id == 4 && entry_id == 500 {
                let (ftx, frx) = mpsc::sync_channel(1);
                storage
                    .fence(4, &key, Box::new(move |r| drop(ftx.send(r))))
                    .map_err(|e| e.to_string())?;
                frx.recv().map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
                let _ = tx.send("fenced 4".into());
            }
            if ledger_id == 4 && entry_id >= 500 {
                continue;
            }
            let h =
                EntryHeader { ledger_id, entry_id, last_add_confirmed: entry_id - 1, length: 0 };
            let e = Entry::encode(h, &payload(ledger_id, entry_id, entry_bytes));
            let tx = tx.clone();
            storage
                .add_entry(
                    e.into_bytes(),
                    &key,
                    false,
                    Box::new(move |r| {
                        if r.is_ok() {
                            let _ = tx.send(format!("acked {ledger_id} {entry_id}"));
                        }
                    }),
                )
                .map_err(|e| e.to_string())?;
        }
    }
    drop(tx);
    let _ = printer.join();
    Ok(())
}
