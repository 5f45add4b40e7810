//! #24 where users rely on it: a secured cluster on etcd with separate processes. Three
//! `folio bookie` processes require the cluster secret; two `folio broker` processes prove
//! it, serve SASL_PLAINTEXT with SCRAM users from `folio users` and check ACLs from
//! `folio acls` (one granted while they run: the watch on etcd carries it to both). kcat
//! produces and consumes as the users the ACLs allow and is refused where they do not; a
//! bookie connection without the secret is refused; a forged add, recovery add and fence
//! on a partition's open ledger (with the secret, without the ledger's password) are
//! refused and the partition goes on; tools without the secret fail with a clear error;
//! the broker's HTTP POST routes need the token.
#![cfg(feature = "etcd")]

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use folio_client::{BookieConnection, ConnectionError, LedgerClient};
use folio_meta::keys::Keys;
use folio_meta::records::LedgerState;
use folio_proto::auth::ClusterSecret;
use folio_proto::wire::{self, Request};
use folio_proto::{Entry, EntryHeader, Status};

use common::{Proc, kcat, kcat_status, kcat_status_with, start_bookie_at};

fn folio(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(args)
        .env_remove("FOLIO_CLUSTER_SECRET_FILE")
        .output()
        .expect("run folio")
}

fn folio_ok(args: &[&str]) -> String {
    let out = folio(args);
    assert!(out.status.success(), "folio {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn start_broker(
    etcd: &str,
    root: &str,
    node_id: u16,
    secret: &Path,
    token: &Path,
) -> (Proc, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["broker", "--metadata", &format!("etcd://{etcd}"), "--root", root])
        .args(["--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--node-id", &node_id.to_string(), "--broker-lease-ms", "2000"])
        .args(["--authorizer", "--super-user", "User:admin"])
        .arg("--cluster-secret-file")
        .arg(secret)
        .arg("--http-token-file")
        .arg(token)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio broker");
    let (listeners, http) = common::broker_up(&mut child);
    assert_eq!(listeners.len(), 1, "{listeners:?}");
    (Proc(child), listeners[0].1.clone(), http)
}

fn as_user(base: &[&str], user: &str) -> Vec<String> {
    let sasl = [
        "security.protocol=SASL_PLAINTEXT".to_string(),
        "sasl.mechanisms=SCRAM-SHA-512".into(),
        format!("sasl.username={user}"),
        format!("sasl.password={user}-pw"),
    ];
    let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    v.extend(sasl.into_iter().flat_map(|x| ["-X".to_string(), x]));
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Consumes `topic` as `user` in group `g` until `n` records came (kcat may join the group
/// before the partition is assigned and end early); the records.
fn consume(addr: &str, user: &str, topic: &str, n: usize) -> Vec<String> {
    let c = as_user(&["-C", "-b", addr, "-t", topic, "-p", "0", "-o", "beginning", "-e"], user);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got: Vec<String> = kcat(&strs(&c), None).lines().map(str::to_string).collect();
        if got.len() >= n || Instant::now() > deadline {
            return got;
        }
    }
}

/// `POST /gc` on an HTTP endpoint with an optional bearer token; the status line.
fn post_gc(http: &str, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(http).unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let req = format!("POST /gc HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_string()
}

fn forged_add(ledger_id: u64, entry_id: i64, key: [u8; 20], recovery: bool) -> Request {
    let header = EntryHeader { ledger_id, entry_id, last_add_confirmed: entry_id - 1, length: 0 };
    let entry: Bytes = Entry::encode(header, b"forged").into_bytes();
    Request::Add { master_key: key, recovery, entry }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_cluster_on_etcd_serves_its_members_and_users_and_refuses_everyone_else() {
    let etcd = std::env::var("FOLIO_ETCD_ENDPOINTS")
        .expect("FOLIO_ETCD_ENDPOINTS (scripts/test.sh sets it)");
    let root = format!("secured-test-{:x}", rand::random::<u64>());
    let tmp = tempfile::tempdir().unwrap();
    let secret_file = tmp.path().join("cluster-secret");
    let secret_text = format!("{:032x}{:032x}\n", rand::random::<u128>(), rand::random::<u128>());
    std::fs::write(&secret_file, &secret_text).unwrap();
    let secret = ClusterSecret::from_file(&secret_file).unwrap();
    let token_file = tmp.path().join("http-token");
    std::fs::write(&token_file, "an-http-token-for-the-test\n").unwrap();
    let meta_flag = format!("etcd://{etcd}");
    let cluster = ["--metadata", meta_flag.as_str(), "--root", root.as_str()];

    // Three bookies that require the secret; a bookie beyond loopback without one refuses
    // to start.
    let secret_key = format!("cluster_secret_file={:?}", secret_file.to_str().unwrap());
    let mut bookies: BTreeMap<String, (Proc, SocketAddr)> = BTreeMap::new();
    for i in 0..3 {
        let id = format!("bookie-{i}");
        let b = start_bookie_at(tmp.path(), &id, &etcd, &root, &[&secret_key, "lease_ttl_ms=2000"]);
        bookies.insert(id, b);
    }
    let open = folio(&[
        "bookie",
        "--listen",
        "0.0.0.0:0",
        "--data-dir",
        tmp.path().join("open").to_str().unwrap(),
        "--metadata",
        &format!("etcd:{etcd}"),
    ]);
    let stderr = String::from_utf8_lossy(&open.stderr);
    assert!(!open.status.success() && stderr.contains("beyond loopback"), "{stderr}");

    // Users and ACLs, written to etcd by the tools before the brokers start.
    for user in ["admin", "alice", "bob"] {
        let pw = format!("{user}-pw");
        folio_ok(&[&["users"][..], &cluster[..], &["add", user, "--password", &pw][..]].concat());
    }
    let acl = |args: &[&str]| folio_ok(&[&["acls"][..], &cluster[..], &["add"][..], args].concat());
    acl(&[
        "--principal",
        "User:alice",
        "--resource-type",
        "Topic",
        "--name",
        "orders",
        "--operation",
        "Read",
    ]);
    acl(&[
        "--principal",
        "User:alice",
        "--resource-type",
        "Group",
        "--name",
        "*",
        "--operation",
        "Read",
    ]);

    let (_b1, kafka1, http1) = start_broker(&etcd, &root, 1, &secret_file, &token_file);
    let (_b2, kafka2, _http2) = start_broker(&etcd, &root, 2, &secret_file, &token_file);

    // The super user creates the topic and writes through broker 1; alice reads through
    // broker 2; bob, with no ACL, is refused both.
    let lines: Vec<String> = (0..50).map(|i| format!("order-{i}")).collect();
    let p = as_user(&["-P", "-b", &kafka1, "-t", "orders", "-p", "0", "-X", "acks=all"], "admin");
    kcat(&strs(&p), Some(&(lines.join("\n") + "\n")));
    assert_eq!(consume(&kafka2, "alice", "orders", 50), lines);
    let p = as_user(&["-P", "-b", &kafka2, "-t", "orders", "-p", "0"], "bob");
    let (ok, _, stderr) = kcat_status_with(&strs(&p), "from-bob\n");
    assert!(!ok && stderr.contains("Topic authorization failed"), "bob wrote ({ok}): {stderr}");
    let c = as_user(&["-C", "-b", &kafka1, "-t", "orders", "-o", "beginning", "-e"], "bob");
    let (_, _, stderr) = kcat_status(&strs(&c));
    assert!(stderr.contains("Topic authorization failed"), "bob read: {stderr}");

    // alice may not write yet; an ACL added while the brokers run reaches broker 2 through
    // its watch on etcd.
    let p = as_user(&["-P", "-b", &kafka2, "-t", "orders", "-p", "0", "-X", "acks=all"], "alice");
    let (ok, _, stderr) = kcat_status_with(&strs(&p), "early\n");
    assert!(!ok && stderr.contains("Topic authorization failed"), "{stderr}");
    acl(&[
        "--principal",
        "User:alice",
        "--resource-type",
        "Topic",
        "--name",
        "orders",
        "--operation",
        "Write",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, stderr) = kcat_status_with(&strs(&p), "from-alice\n");
        if ok {
            break;
        }
        assert!(Instant::now() < deadline, "the new ACL never reached broker 2: {stderr}");
        std::thread::sleep(Duration::from_millis(200)); // polling a process for a change
    }

    // A bookie connection without the secret is refused with a clear reason, on every bookie.
    for (id, (_, addr)) in &bookies {
        let bare = BookieConnection::connect(*addr, 4).await.unwrap();
        match bare.request(Request::GetBookieInfo).await {
            Err(ConnectionError::Refused { reason, .. }) => {
                assert!(reason.contains("requires the cluster secret"), "{id}: {reason}")
            }
            other => panic!("{id} served a connection without the secret: {other:?}"),
        }
    }

    // A member with the secret but not the partition's writer: its adds, recovery adds and
    // fences on the partition's open ledger are refused, and the partition goes on.
    let meta: Arc<dyn folio_meta::MetadataStore> =
        Arc::new(folio_meta::etcd::EtcdStore::connect(std::slice::from_ref(&etcd)).await.unwrap());
    let client = LedgerClient::new(meta.clone(), Keys::new(root.clone()))
        .with_cluster_secret(Some(secret.clone()));
    let mut open_ledgers = Vec::new();
    for id in client.list().await.unwrap() {
        let m = client.metadata(id).await.unwrap();
        if m.state == LedgerState::Open {
            open_ledgers.push((id, m));
        }
    }
    assert!(!open_ledgers.is_empty(), "the partition has an open ledger");
    let mut forged = 0;
    for (id, m) in &open_ledgers {
        let password = m.password.clone().unwrap_or_default();
        assert_eq!(password.len(), folio_client::LEDGER_PASSWORD_BYTES, "a random password");
        let ensemble = m.ensembles.values().next_back().unwrap();
        for bookie in ensemble {
            let addr = bookies[bookie].1;
            let conn = BookieConnection::connect_with(addr, 4, Some(&secret)).await.unwrap();
            for key in [wire::master_key(b""), wire::master_key(b"a guess")] {
                for recovery in [false, true] {
                    let r = conn.request(forged_add(*id, 1_000_000, key, recovery)).await.unwrap();
                    assert_eq!(r.status, Status::Unauthorized, "forged add on {bookie}");
                    forged += 1;
                }
                let fence = Request::Read { ledger_id: *id, entry_id: -1, fence: Some(key) };
                let r = conn.request(fence).await.unwrap();
                assert_eq!(r.status, Status::Unauthorized, "forged fence on {bookie}");
            }
        }
    }
    assert!(forged > 0);
    let p = as_user(&["-P", "-b", &kafka1, "-t", "orders", "-p", "0", "-X", "acks=all"], "admin");
    kcat(&strs(&p), Some("after-the-forgery\n"));
    let got = consume(&kafka1, "admin", "orders", 52);
    assert_eq!(got.len(), 52, "{got:?}");
    assert_eq!(&got[..50], &lines[..]);
    assert_eq!(&got[50..], ["from-alice", "after-the-forgery"]);

    // Tools: without the secret `folio ledger check` fails saying why; with it (here from
    // the environment) every copy of the open ledger is there.
    let id = open_ledgers[0].0.to_string();
    let check = [&["ledger"][..], &cluster[..], &["check", &id][..]].concat();
    let out = folio(&check);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("cluster secret"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(&check)
        .env("FOLIO_CLUSTER_SECRET_FILE", &secret_file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The broker's HTTP POST routes need its token; GET does not.
    assert!(post_gc(&http1, None).contains("401"), "no token");
    assert!(post_gc(&http1, Some("a-wrong-token-of-the-length")).contains("403"));
    assert!(post_gc(&http1, Some("an-http-token-for-the-test")).contains("200 OK"));
    assert!(common::http_get(&http1, "/metrics").contains("folio_"), "GET needs no token");
}
