//! `folio log` and `folio trash` against a store written by a real managed log: inspect
//! explains each ledger, the trash lists why each ledger is still there, and `trash run`
//! empties it.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_client::LedgerClient;
use folio_log::{LogConfig, LogEnv, ManagedLog, WallClock};
use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;

fn folio(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_folio")).args(args).output().unwrap();
    assert!(out.status.success(), "folio {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn log_inspect_and_trash_list_say_why_ledgers_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let meta: Arc<dyn MetadataStore> =
            Arc::new(EmbeddedStore::open(&dir.path().join("meta")).unwrap());
        let mut c = BookieConfig::new(dir.path().join("bookie"), "127.0.0.1:0".parse().unwrap());
        c.bookie_id = Some("b0".into());
        let bookie = Bookie::start(c, meta.clone()).await.unwrap();
        let env = LogEnv {
            meta: meta.clone(),
            client: LedgerClient::new(meta.clone(), Keys::default()),
            keys: Keys::default(),
            clock: Arc::new(WallClock),
            owner: "test".into(),
        };
        let config = LogConfig {
            rollover_entries: 2,
            retention_time: Some(Duration::from_secs(3600)),
            ..LogConfig::for_bookies(1)
        };
        let log = ManagedLog::open_or_create(env, "orders/0", config).await.unwrap();
        let now = WallClock;
        let ts = folio_meta::Clock::now_ms(&now) as i64;
        for i in 0..6 {
            log.append(format!("batch {i}").as_bytes(), 1, ts).await.unwrap();
        }
        log.cursor_open("billing", 3).await.unwrap();
        log.delete_records(2).await.unwrap();
        log.close().await.unwrap();
        bookie.shutdown().await.unwrap();
    }
    let m = format!("embedded:{}", dir.path().join("meta").display());
    let list = folio(&["log", "--metadata", &m, "list"]);
    assert!(list.contains("orders/0\tactive"), "{list}");
    let inspect = folio(&["log", "--metadata", &m, "inspect", "orders/0"]);
    assert!(inspect.contains("billing\toffset 3"), "{inspect}");
    assert!(inspect.contains("retained: newest record"), "{inspect}");
    // The ledger trimmed by delete-records, and the empty one the rollover had opened,
    // which the clean close recorded as empty.
    assert!(inspect.contains("in the trash (2)"), "{inspect}");
    assert!(inspect.contains("for delete-records"), "{inspect}");
    assert!(inspect.contains("for empty"), "{inspect}");
    let trash = folio(&["trash", "--metadata", &m, "list"]);
    assert!(trash.starts_with("trash: 2 ledgers"), "{trash}");
    assert!(trash.contains("waiting for the deleter"), "{trash}");
    let run = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["trash", "--metadata", &m, "run"])
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(out.contains("deleted=2 failed=0"), "{out}");
    assert!(err.contains("trash pass: 2 ledgers deleted, 0 failed"), "progress: {err}");
    let trash = folio(&["trash", "--metadata", &m, "list"]);
    assert!(trash.starts_with("trash: 0 ledgers"), "{trash}");
    let missing = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["log", "--metadata", &m, "inspect", "nope"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no log named \"nope\""));
}

/// #51 item 5: a benchmark says on stderr when it starts and ends (and, run long, how long
/// it has run; in place on a terminal), leaving stdout to its figures.
#[test]
fn a_benchmark_reports_its_progress_on_stderr_and_its_figures_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["bench", "codecs", "--quick", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("ratio_vs_none=") && !stdout.contains("bench codecs"), "{stdout}");
    assert!(stderr.starts_with("bench codecs: started\n"), "{stderr}");
    assert!(stderr.contains("bench codecs: done in ") && !stderr.contains('\x1b'), "{stderr}");
}
