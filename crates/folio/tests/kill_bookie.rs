//! D1 across SIGKILL of a real bookie process: a client adds entries over TCP with many in
//! flight; the bookie is killed mid-stream and restarted on the same dirs; every entry it
//! acknowledged reads back byte-identical, and the restart reports the unclean shutdown.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use folio_client::BookieConnection;
use folio_proto::wire::{Request, Response};
use folio_proto::{Entry, EntryHeader, Status};

fn start(dir: &std::path::Path, port: u16, mode: &str) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["--log", "warn", "bookie", "--bookie-id", "b1"])
        .args(["--override", &format!("storage.mode=\"{mode}\"")])
        .arg("--data-dir")
        .arg(dir.join("bookie"))
        .arg("--metadata")
        .arg(format!("embedded:{}", dir.join("meta").display()))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn folio bookie");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "unexpected first line: {line}");
    (child, format!("127.0.0.1:{port}").parse().unwrap())
}

fn entry(l: u64, e: i64) -> Bytes {
    let payload = format!("{l}/{e}").repeat(40);
    Entry::encode(
        EntryHeader { ledger_id: l, entry_id: e, last_add_confirmed: e - 1, length: 0 },
        payload.as_bytes(),
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_sigkilled_bookie_serves_every_acknowledged_entry_after_restart() {
    sigkilled_bookie_serves_every_acknowledged_entry_after_restart("two-write").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_sigkilled_single_write_bookie_serves_every_acknowledged_entry_after_restart() {
    sigkilled_bookie_serves_every_acknowledged_entry_after_restart("single-write").await;
}

async fn sigkilled_bookie_serves_every_acknowledged_entry_after_restart(mode: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (mut child, addr) = start(tmp.path(), port, mode);
    let conn = Arc::new(BookieConnection::connect(addr, 512).await.unwrap());
    let acked = Arc::new(Mutex::new(Vec::new()));
    let enough = Arc::new(tokio::sync::Notify::new());
    let mut writers = Vec::new();
    for l in 1..=4u64 {
        let (conn, acked, enough) = (conn.clone(), acked.clone(), enough.clone());
        writers.push(tokio::spawn(async move {
            let mut inflight = tokio::task::JoinSet::new();
            for e in 0..i64::MAX {
                if inflight.len() >= 64 {
                    // A failed request means the bookie is gone: stop writing.
                    if let Some(Ok(false)) = inflight.join_next().await {
                        return;
                    }
                }
                let (c, acked, enough) = (conn.clone(), acked.clone(), enough.clone());
                inflight.spawn(async move {
                    let add =
                        Request::Add { master_key: [9; 20], recovery: false, entry: entry(l, e) };
                    match c.request(add).await {
                        Ok(r) => {
                            if r.status == Status::Ok {
                                let mut a = acked.lock().unwrap();
                                a.push((l, e));
                                if a.len() == 4000 {
                                    enough.notify_one();
                                }
                            }
                            true
                        }
                        Err(_) => false,
                    }
                });
            }
        }));
    }
    // Kill once enough entries were acknowledged.
    enough.notified().await;
    child.kill().unwrap();
    child.wait().unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 4000);

    let (mut child, addr) = start(tmp.path(), port, mode);
    let conn = BookieConnection::connect(addr, 512).await.unwrap();
    for (l, e) in &acked {
        let r =
            conn.request(Request::Read { ledger_id: *l, entry_id: *e, fence: None }).await.unwrap();
        assert_eq!(r.status, Status::Ok, "acknowledged {l}/{e} lost");
        let Response::Read { entry: Some(got), .. } = r.response else { panic!("no entry body") };
        assert_eq!(got, entry(*l, *e), "acknowledged {l}/{e} differs");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
