//! Who may talk to a bookie: the cluster-secret handshake (`folio_proto::auth`), and the
//! per-ledger secret password that keeps one writer's ledger from another's adds.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{BufMut, Bytes, BytesMut};
use folio_bookie::bookie::{Bookie, BookieConfig};
use folio_client::{BookieConnection, ConnectionError, CreateOptions, LedgerClient};
use folio_meta::MetadataStore;
use folio_meta::embedded::EmbeddedStore;
use folio_meta::keys::Keys;
use folio_proto::auth::ClusterSecret;
use folio_proto::wire::{self, Request, RequestFrame, Response};
use folio_proto::{Entry, EntryHeader, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn secret(s: &str) -> ClusterSecret {
    ClusterSecret::new(s.as_bytes()).unwrap()
}

fn entry(l: u64, e: i64, payload: &[u8]) -> Bytes {
    let header = EntryHeader { ledger_id: l, entry_id: e, last_add_confirmed: e - 1, length: 0 };
    Entry::encode(header, payload).into_bytes()
}

struct Env {
    _tmp: tempfile::TempDir,
    meta: Arc<dyn MetadataStore>,
    bookie: Bookie,
}

async fn start(secret: Option<ClusterSecret>) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let meta: Arc<dyn MetadataStore> =
        Arc::new(EmbeddedStore::open(&tmp.path().join("meta")).unwrap());
    let mut c = BookieConfig::new(tmp.path().join("bookie"), "127.0.0.1:0".parse().unwrap());
    c.bookie_id = Some("bookie-1".into());
    c.storage.write_cache_bytes = 16 * 1024 * 1024;
    c.storage.mode = common::mode_from_env();
    c.auth.secret = secret;
    let bookie = Bookie::start(c, meta.clone()).await.unwrap();
    Env { _tmp: tmp, meta, bookie }
}

fn refusal(e: ConnectionError) -> String {
    match e {
        ConnectionError::Refused { reason, .. } => reason,
        other => panic!("expected a refusal, got {other}"),
    }
}

/// A bookie with a secret serves a client that proves it, and refuses (UNAUTHORIZED, then
/// a close) a client without it, one with another secret, and one that sends a large
/// request first, which the bookie does not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_with_a_secret_serves_only_peers_that_prove_it() {
    let env = start(Some(secret("the cluster secret"))).await;
    let addr = env.bookie.addr();
    let stats = env.bookie.stats();

    let good = secret("the cluster secret");
    let conn = BookieConnection::connect_with(addr, 8, Some(&good)).await.unwrap();
    let r = conn.request(Request::GetBookieInfo).await.unwrap();
    assert_eq!(r.status, Status::Ok, "served after the handshake");
    assert_eq!(stats.auth_refused.load(Ordering::Relaxed), 0);

    // No secret: the first request is answered UNAUTHORIZED and the connection fails.
    let bare = BookieConnection::connect(addr, 8).await.unwrap();
    let e = bare.request(Request::GetBookieInfo).await.unwrap_err();
    assert!(refusal(e).contains("requires the cluster secret"), "a clear reason");
    assert!(bare.is_closed());

    // A client that sends a proof of another secret is refused.
    let wrong = secret("another cluster's secret");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client_nonce = [3u8; 32];
    let hello = Request::Auth(wire::AuthStep::Hello { client_nonce });
    let f = raw_step(&mut s, 1, hello).await;
    let Response::Auth { step: 1, challenge: Some((server_nonce, _)) } = f.response else {
        panic!("no challenge: {f:?}");
    };
    let client_proof = wrong.client_proof(&client_nonce, &server_nonce);
    let f = raw_step(&mut s, 2, Request::Auth(wire::AuthStep::Proof { client_proof })).await;
    assert_eq!((f.request_id, f.status), (2, Status::Unauthorized), "a proof of another secret");

    // A 1 MiB ADD as the first frame: refused from its header; the bookie stored nothing.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let add =
        Request::Add { master_key: [1; 20], recovery: false, entry: entry(9, 0, &[7; 1 << 20]) };
    let mut out = BytesMut::new();
    wire::encode_request(&RequestFrame { request_id: 42, request: add }, &mut out);
    let _ = s.write_all(&out).await; // the bookie may close before it has all of it
    let mut answer = BytesMut::new();
    while s.read_buf(&mut answer).await.is_ok_and(|n| n > 0) {}
    let f = wire::decode_response(wire::take_frame(&mut answer).unwrap().unwrap()).unwrap();
    assert_eq!((f.request_id, f.status), (42, Status::Unauthorized));
    assert!(matches!(f.response, Response::Auth { .. }));
    let r = conn.request(Request::Read { ledger_id: 9, entry_id: 0, fence: None }).await.unwrap();
    assert_eq!(r.status, Status::NoLedger, "nothing of the refused add was stored");

    // Each refusal is counted before its answer is sent.
    assert_eq!(stats.auth_refused.load(Ordering::Relaxed), 3);

    // Another secret: the client finds that the bookie's proof is not of its secret and
    // leaves (the bookie counts that once it sees the close).
    let e = BookieConnection::connect_with(addr, 8, Some(&wrong)).await.unwrap_err();
    assert!(refusal(e).contains("cannot prove the cluster secret"), "a clear reason");
    env.bookie.shutdown().await.unwrap();
}

/// Sends one request on a bare stream and reads one answer.
async fn raw_step(s: &mut tokio::net::TcpStream, id: u64, request: Request) -> wire::ResponseFrame {
    let mut out = BytesMut::new();
    wire::encode_request(&RequestFrame { request_id: id, request }, &mut out);
    s.write_all(&out).await.unwrap();
    let mut answer = BytesMut::new();
    loop {
        if let Some(body) = wire::take_frame(&mut answer).unwrap() {
            return wire::decode_response(body).unwrap();
        }
        assert!(s.read_buf(&mut answer).await.unwrap() > 0, "closed before an answer");
    }
}

/// A client with a secret refuses a bookie that has none (it cannot prove the secret), and
/// a garbage hello closes the connection without an answer to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_secret_refuses_a_bookie_without_one() {
    let env = start(None).await;
    let s = secret("the cluster secret");
    let e = BookieConnection::connect_with(env.bookie.addr(), 8, Some(&s)).await.unwrap_err();
    assert!(refusal(e).contains("the bookie has no cluster secret"));
    env.bookie.shutdown().await.unwrap();

    let env = start(Some(s)).await;
    let mut c = tokio::net::TcpStream::connect(env.bookie.addr()).await.unwrap();
    let mut junk = BytesMut::new();
    junk.put_u32_le(20);
    junk.put_slice(&[9; 20]); // version 9: no frame of this protocol
    c.write_all(&junk).await.unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "no answer to a malformed hello, only the close");
    assert_eq!(env.bookie.stats().auth_refused.load(Ordering::Relaxed), 1);
    env.bookie.shutdown().await.unwrap();
}

/// Without a secret a bookie refuses to listen beyond loopback, unless told to.
#[test]
fn a_bookie_without_a_secret_does_not_listen_beyond_loopback_unless_told() {
    let mut c = BookieConfig::new("/nonexistent", "0.0.0.0:3181".parse().unwrap());
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("beyond loopback") && e.contains("cluster_secret_file"), "{e}");
    c.auth.allow_unauthenticated = true;
    c.validate().unwrap();
    c.auth = folio_bookie::auth::AuthConfig {
        secret: Some(secret("the cluster secret")),
        allow_unauthenticated: false,
    };
    c.validate().unwrap();
    c.listen = "127.0.0.1:3181".parse().unwrap();
    c.auth = Default::default();
    c.validate().unwrap();
}

/// Every ledger has a random password, so its master key is secret: adds (also recovery
/// adds), fences and LAC writes with any other key are refused UNAUTHORIZED and change
/// nothing, while the writer goes on and recovery (which reads the metadata) works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_add_to_another_writers_ledger_is_refused() {
    let env = start(None).await;
    let client = LedgerClient::new(env.meta.clone(), Keys::default());
    let w = client.create(CreateOptions::new(1, 1, 1)).await.unwrap();
    assert_eq!(w.add(b"the writer's entry").await.unwrap(), 0);
    let m = client.metadata(w.id()).await.unwrap();
    let password = m.password.clone().unwrap();
    assert_eq!(password.len(), folio_client::LEDGER_PASSWORD_BYTES);
    let other = client.create(CreateOptions::new(1, 1, 1)).await.unwrap();
    let other_password = client.metadata(other.id()).await.unwrap().password.unwrap();
    assert_ne!(password, other_password, "every ledger its own password");

    let conn = BookieConnection::connect(env.bookie.addr(), 8).await.unwrap();
    for key in [wire::master_key(b""), wire::master_key(&other_password)] {
        for recovery in [false, true] {
            let forged =
                Request::Add { master_key: key, recovery, entry: entry(w.id(), 0, b"forged") };
            assert_eq!(conn.request(forged).await.unwrap().status, Status::Unauthorized);
        }
        let fence = Request::Read { ledger_id: w.id(), entry_id: -1, fence: Some(key) };
        assert_eq!(conn.request(fence).await.unwrap().status, Status::Unauthorized);
        let lac = Request::WriteLac { ledger_id: w.id(), lac: 5, master_key: key };
        assert_eq!(conn.request(lac).await.unwrap().status, Status::Unauthorized);
    }
    assert_eq!(w.add(b"the writer goes on").await.unwrap(), 1, "not fenced by the forger");
    let id = w.id();
    drop(w);
    let r = client.recover(id).await.unwrap();
    assert_eq!(r.last_entry_id(), Some(1));
    assert_eq!(r.read(0).await.unwrap().payload(), b"the writer's entry");
    env.bookie.shutdown().await.unwrap();
}
