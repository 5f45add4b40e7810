//! `folio bookie check` on a stopped journal-less bookie that lost its unflushed entries:
//! the check finds them missing; `--repair` with no peer serving fails and keeps the flag.

use std::process::Command;
use std::sync::Arc;

use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_client::{CreateOptions, LedgerClient};
use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;

fn folio(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_folio")).args(args).output().unwrap();
    assert!(out.status.success(), "folio {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookie_check_finds_and_repairs_lost_entries() {
    let dir = tempfile::tempdir().unwrap();
    let meta_dir = dir.path().join("meta");
    let data = |i: usize| dir.path().join(format!("b{i}"));
    {
        let meta: Arc<dyn MetadataStore> = Arc::new(EmbeddedStore::open(&meta_dir).unwrap());
        let mut bookies = Vec::new();
        for i in 0..2 {
            let mut c = BookieConfig::new(data(i), "127.0.0.1:0".parse().unwrap());
            c.bookie_id = Some(format!("b{i}"));
            c.storage.make_journal_less();
            bookies.push(Bookie::start(c, meta.clone()).await.unwrap());
        }
        let client = LedgerClient::new(meta.clone(), Keys::default());
        let w = client.create(CreateOptions::new(2, 2, 2)).await.unwrap();
        for i in 0..10 {
            w.add(format!("e{i}").as_bytes()).await.unwrap();
        }
        w.close().await.unwrap();
        let b1 = bookies.pop().unwrap();
        b1.shutdown().await.unwrap(); // b1 keeps its entries
        bookies.pop().unwrap().abort().await; // b0 loses its write cache
    }
    let m = format!("embedded:{}", meta_dir.display());
    let d0 = data(0).display().to_string();
    let out = folio(&["bookie", "check", "--data-dir", &d0, "--metadata", &m, "--bookie-id", "b0"]);
    assert!(out.contains("entries checked 10, missing 10"), "{out}");
    assert!(out.contains("--repair"), "{out}");
    // (Repair needs the peer serving while the CLI holds the metadata store, which the
    // embedded store, one process at a time, cannot do; `folio-repair`'s tests cover it.)
    let repair = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args([
            "bookie",
            "check",
            "--repair",
            "--data-dir",
            &d0,
            "--metadata",
            &m,
            "--bookie-id",
            "b0",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&repair.stdout);
    assert!(out.contains("failed 10") && out.contains("flag cleared false"), "{out}");
    // Progress on stderr, as plain lines without a terminal.
    let err = String::from_utf8_lossy(&repair.stderr);
    assert!(err.contains("checking bookie b0: 100% 1 of 1 ledgers"), "{err}");
    assert!(err.contains("checking bookie b0: 1 ledgers checked"), "{err}");
}
