//! #24: listeners with security protocols, TLS, SASL (PLAIN, SCRAM-SHA-256/512) and the
//! SCRAM credential APIs, on the raw protocol (exact requests, versions and error codes).
//! The real clients (kcat, confluent-kafka, kafka-python, aiokafka) are in
//! `crates/folio/tests/kafka_security.rs`.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::{Conn, Setup, metadata_req};
use folio_broker::config::{ListenerConfig, TlsConfig};
use folio_broker::errors;
use folio_broker::security::tls::ClientAuth;
use folio_broker::security::{Mechanism, SecurityProtocol};
use folio_testkit::kafka::{ClientError, KafkaConn, TlsClient};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, MetadataResponse,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

const ANY: &str = "127.0.0.1:0";

fn listener(p: SecurityProtocol) -> ListenerConfig {
    ListenerConfig::new(p, ANY.parse().unwrap())
}

/// A broker with all four protocols (TLS client certificates requested) and `tune`.
async fn secured(
    dir: &std::path::Path,
    tune: impl FnOnce(&mut folio_broker::BrokerConfig),
) -> (Setup, folio_testkit::certs::Certs) {
    let certs = folio_testkit::certs::write(dir, "a-");
    let tls = TlsConfig {
        cert: certs.server_cert.clone(),
        key: certs.server_key.clone(),
        client_ca: Some(certs.ca.clone()),
        client_auth: ClientAuth::Requested,
    };
    let s = common::start(1, |c| {
        c.listeners = SecurityProtocol::ALL.into_iter().map(listener).collect();
        c.tls = Some(tls);
        tune(c);
    })
    .await;
    (s, certs)
}

fn addr(s: &Setup, p: SecurityProtocol) -> SocketAddr {
    s.broker.listener_addr(p.name()).unwrap()
}

fn tls_client(ca: &std::path::Path) -> TlsClient {
    TlsClient { ca: ca.to_path_buf(), server_name: "localhost".into(), identity: None }
}

/// Sets `user`'s credential for `mech` through AlterUserScramCredentials on `conn` (the
/// salted password is computed here, as Kafka clients do).
async fn upsert(
    conn: &mut Conn,
    mech: Mechanism,
    user: &str,
    password: &str,
    iterations: i32,
) -> AlterUserScramCredentialsResponse {
    let salt = b"0123456789abcdef".to_vec();
    let salted = mech.salted_password(password.as_bytes(), &salt, iterations.max(1) as u32);
    let up = ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(user.into()))
        .with_mechanism(mech.kafka_code())
        .with_iterations(iterations)
        .with_salt(Bytes::from(salt))
        .with_salted_password(Bytes::from(salted));
    let req = AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]);
    conn.call(ApiKey::AlterUserScramCredentials, 0, &req).await
}

/// The broker answered SaslAuthenticate with SASL_AUTHENTICATION_FAILED.
fn refused_authentication(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused { api: "SaslAuthenticate", code, .. }
        if *code == errors::SASL_AUTHENTICATION_FAILED)
}

async fn metadata(conn: &mut KafkaConn) -> Result<MetadataResponse, ClientError> {
    conn.call(ApiKey::Metadata, 12, &metadata_req(&[])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_and_scram_authenticate_on_both_sasl_listeners_and_bad_logins_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (s, certs) = secured(dir.path(), |_| {}).await;
    let mut admin = Conn::open(addr(&s, SecurityProtocol::Plaintext)).await;
    for mech in Mechanism::SCRAM {
        let r = upsert(&mut admin, mech, "alice", "alice-secret", 4096).await;
        assert_eq!(r.results[0].error_code, 0, "{r:?}");
    }
    let sasl_plain = addr(&s, SecurityProtocol::SaslPlaintext);

    // Before authentication nothing but ApiVersions and the SASL requests is served.
    let mut c = KafkaConn::connect(sasl_plain).await.unwrap();
    c.send(ApiKey::Metadata, 12, &metadata_req(&[])).await.unwrap();
    assert_eq!(c.recv_raw().await.unwrap(), None, "Metadata before SASL closes the connection");

    // An unknown mechanism is answered with the ones offered.
    let mut c = KafkaConn::connect(sasl_plain).await.unwrap();
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("GSSAPI"));
    let r: SaslHandshakeResponse = c.call(ApiKey::SaslHandshake, 1, &hs).await.unwrap();
    assert_eq!(r.error_code, errors::UNSUPPORTED_SASL_MECHANISM);
    let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(offered, ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]);

    // Every mechanism with the right password; Metadata then names this listener's port.
    for mech in Mechanism::ALL {
        let mut c = KafkaConn::connect(sasl_plain).await.unwrap();
        c.authenticate(mech, "alice", "alice-secret")
            .await
            .unwrap_or_else(|e| panic!("{mech:?}: {e}"));
        let m = metadata(&mut c).await.unwrap();
        assert_eq!(m.brokers.len(), 1);
        assert_eq!(m.brokers[0].port, sasl_plain.port() as i32, "{mech:?}");
    }
    // Wrong passwords and unknown users: SASL_AUTHENTICATION_FAILED, then the connection
    // closes.
    for (mech, user, password) in [
        (Mechanism::ScramSha512, "alice", "wrong"),
        (Mechanism::ScramSha256, "mallory", "alice-secret"),
        (Mechanism::Plain, "alice", "wrong"),
        (Mechanism::Plain, "mallory", "x"),
    ] {
        let mut c = KafkaConn::connect(sasl_plain).await.unwrap();
        let e = c.authenticate(mech, user, password).await.unwrap_err();
        assert!(refused_authentication(&e), "{mech:?} {user}: {e}");
        assert!(
            !e.to_string().contains(password) || password == "x",
            "the answer says nothing of the password"
        );
        assert_eq!(c.recv_raw().await.unwrap(), None, "{mech:?} {user}: connection closed");
    }

    // SASL_SSL: TLS first, then SCRAM; Metadata names the SASL_SSL port. A wrong
    // password's answer arrives before the close over TLS too.
    let sasl_ssl = addr(&s, SecurityProtocol::SaslSsl);
    let mut c = KafkaConn::connect_tls(sasl_ssl, &tls_client(&certs.ca)).await.unwrap();
    let e = c.authenticate(Mechanism::ScramSha512, "alice", "wrong").await.unwrap_err();
    assert!(refused_authentication(&e), "over TLS: {e}");
    let mut c = KafkaConn::connect_tls(sasl_ssl, &tls_client(&certs.ca)).await.unwrap();
    c.authenticate(Mechanism::ScramSha512, "alice", "alice-secret").await.unwrap();
    assert_eq!(metadata(&mut c).await.unwrap().brokers[0].port, sasl_ssl.port() as i32);
    // SSL, with and without a client certificate (requested, not required).
    let ssl = addr(&s, SecurityProtocol::Ssl);
    let mut with_cert = tls_client(&certs.ca);
    with_cert.identity = Some((certs.client_cert.clone(), certs.client_key.clone()));
    for client in [tls_client(&certs.ca), with_cert] {
        let mut c = KafkaConn::connect_tls(ssl, &client).await.unwrap();
        assert_eq!(metadata(&mut c).await.unwrap().brokers[0].port, ssl.port() as i32);
    }
    // A client that does not trust the broker's CA fails its handshake; plaintext bytes
    // on a TLS port are a failed handshake too.
    let other = folio_testkit::certs::write(dir.path(), "other-");
    assert!(KafkaConn::connect_tls(ssl, &tls_client(&other.ca)).await.is_err());
    let mut raw = KafkaConn::connect(ssl).await.unwrap();
    let _ = raw.send(ApiKey::Metadata, 12, &metadata_req(&[])).await;
    assert!(matches!(raw.recv_raw().await, Ok(None) | Err(_)));
    // And the PLAINTEXT listener refuses the SASL requests with ILLEGAL_SASL_STATE.
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let r: SaslHandshakeResponse = admin.call(ApiKey::SaslHandshake, 1, &hs).await;
    assert_eq!(r.error_code, errors::ILLEGAL_SASL_STATE);
    let m = s.broker.metrics();
    assert_eq!(m.sasl_authentications.load(std::sync::atomic::Ordering::Relaxed), 4);
    assert_eq!(m.sasl_authentication_failures.load(std::sync::atomic::Ordering::Relaxed), 5);
    // The client sees its handshake fail before the broker's connection task counts it.
    common::eventually(Duration::from_secs(10), "two failed TLS handshakes counted", || {
        m.tls_handshake_failures.load(std::sync::atomic::Ordering::Relaxed) >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credential_apis_follow_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _certs) = secured(dir.path(), |_| {}).await;
    let mut admin = Conn::open(addr(&s, SecurityProtocol::Plaintext)).await;
    let code = |r: &AlterUserScramCredentialsResponse| r.results[0].error_code;
    assert_eq!(
        code(&upsert(&mut admin, Mechanism::ScramSha256, "bob", "pw", 4095).await),
        errors::UNACCEPTABLE_CREDENTIAL
    );
    assert_eq!(
        code(&upsert(&mut admin, Mechanism::ScramSha256, "bob", "pw", 16385).await),
        errors::UNACCEPTABLE_CREDENTIAL
    );
    assert_eq!(
        code(&upsert(&mut admin, Mechanism::ScramSha256, "", "pw", 4096).await),
        errors::UNACCEPTABLE_CREDENTIAL
    );
    assert_eq!(code(&upsert(&mut admin, Mechanism::ScramSha256, "bob", "pw", 8192).await), 0);
    let name = |n: &str| StrBytes::from_string(n.into());
    // A mechanism named twice for one user: nothing of that user's change is applied.
    let del =
        |n: &str, m: i8| ScramCredentialDeletion::default().with_name(name(n)).with_mechanism(m);
    let req = AlterUserScramCredentialsRequest::default().with_deletions(vec![
        del("bob", 1),
        del("bob", 1),
        del("carol", 2),
        del("dave", 9),
    ]);
    let r: AlterUserScramCredentialsResponse =
        admin.call(ApiKey::AlterUserScramCredentials, 0, &req).await;
    let by_user = |u: &str| r.results.iter().find(|x| x.user.as_str() == u).unwrap().error_code;
    assert_eq!(by_user("bob"), errors::DUPLICATE_RESOURCE);
    assert_eq!(by_user("carol"), errors::RESOURCE_NOT_FOUND);
    assert_eq!(by_user("dave"), errors::UNSUPPORTED_SASL_MECHANISM);
    // Describe: all users; a named unknown one; one named twice.
    let describe = |users: Option<Vec<&str>>| {
        DescribeUserScramCredentialsRequest::default().with_users(
            users.map(|u| u.into_iter().map(|n| UserName::default().with_name(name(n))).collect()),
        )
    };
    let r: DescribeUserScramCredentialsResponse =
        admin.call(ApiKey::DescribeUserScramCredentials, 0, &describe(None)).await;
    assert_eq!(r.results.len(), 1);
    assert_eq!(r.results[0].user.as_str(), "bob");
    let infos: Vec<(i8, i32)> =
        r.results[0].credential_infos.iter().map(|c| (c.mechanism, c.iterations)).collect();
    assert_eq!(infos, [(1, 8192)], "bob's SCRAM-SHA-256 credential is still there");
    let r: DescribeUserScramCredentialsResponse = admin
        .call(ApiKey::DescribeUserScramCredentials, 0, &describe(Some(vec!["bob", "zed", "zed"])))
        .await;
    let codes: Vec<(&str, i16)> =
        r.results.iter().map(|x| (x.user.as_str(), x.error_code)).collect();
    assert_eq!(codes, [("bob", 0), ("zed", errors::DUPLICATE_RESOURCE)]);
    // Deleted: bob cannot authenticate any more.
    let req = AlterUserScramCredentialsRequest::default().with_deletions(vec![del("bob", 1)]);
    let r: AlterUserScramCredentialsResponse =
        admin.call(ApiKey::AlterUserScramCredentials, 0, &req).await;
    assert_eq!(r.results[0].error_code, 0);
    let mut c = KafkaConn::connect(addr(&s, SecurityProtocol::SaslPlaintext)).await.unwrap();
    assert!(c.authenticate(Mechanism::ScramSha256, "bob", "pw").await.is_err());
}

/// KIP-368: with `connections.max.reauth.ms` the answer carries the session lifetime; a
/// client that authenticates again keeps its connection, one that does not is closed at
/// its next request after the end, and a re-authentication cannot change the principal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_sessions_end_unless_the_client_authenticates_again() {
    let dir = tempfile::tempdir().unwrap();
    let life = Duration::from_millis(1500);
    let (s, _certs) = secured(dir.path(), |c| c.sasl.session_lifetime = Some(life)).await;
    let mut admin = Conn::open(addr(&s, SecurityProtocol::Plaintext)).await;
    for user in ["alice", "bob"] {
        assert_eq!(
            upsert(&mut admin, Mechanism::ScramSha512, user, "pw", 4096).await.results[0]
                .error_code,
            0
        );
    }
    let at = addr(&s, SecurityProtocol::SaslPlaintext);
    // The answer of the last SaslAuthenticate names the lifetime.
    let mut c = KafkaConn::connect(at).await.unwrap();
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let _: SaslHandshakeResponse = c.call(ApiKey::SaslHandshake, 1, &hs).await.unwrap();
    let req =
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0alice\0pw"));
    let r: SaslAuthenticateResponse = c.call(ApiKey::SaslAuthenticate, 2, &req).await.unwrap();
    assert_eq!((r.error_code, r.session_lifetime_ms), (0, 1500));

    let mut again = KafkaConn::connect(at).await.unwrap();
    again.authenticate(Mechanism::ScramSha512, "alice", "pw").await.unwrap();
    let mut idle = KafkaConn::connect(at).await.unwrap();
    idle.authenticate(Mechanism::ScramSha512, "alice", "pw").await.unwrap();
    let mut other = KafkaConn::connect(at).await.unwrap();
    other.authenticate(Mechanism::ScramSha512, "alice", "pw").await.unwrap();
    assert!(other.authenticate(Mechanism::ScramSha512, "bob", "pw").await.is_err());
    assert_eq!(other.recv_raw().await.unwrap(), None, "a principal change closes the connection");
    // Half a lifetime later `again` authenticates again; after the first lifetime it is
    // still served, `idle` is not.
    tokio::time::sleep(life / 2).await;
    again.authenticate(Mechanism::ScramSha512, "alice", "pw").await.unwrap();
    tokio::time::sleep(life / 2 + Duration::from_millis(200)).await;
    metadata(&mut again).await.expect("re-authenticated: still served");
    assert!(metadata(&mut idle).await.is_err(), "an expired session is closed");
}

/// The TLS certificate is read again when its files change (the watcher) and on request
/// (what SIGHUP does): new connections get the new one, and a failed reload keeps the old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_certificates_reload_when_their_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let (s, first) = secured(dir.path(), |_| {}).await;
    let ssl = addr(&s, SecurityProtocol::Ssl);
    assert!(KafkaConn::connect_tls(ssl, &tls_client(&first.ca)).await.is_ok());
    // A broken key file: an explicit reload fails and the running certificate stays.
    let key = std::fs::read(&first.server_key).unwrap();
    std::fs::write(&first.server_key, b"-----BEGIN PRIVATE KEY-----\nAAAA\n").unwrap();
    assert!(s.broker.reload_tls().is_err());
    assert!(KafkaConn::connect_tls(ssl, &tls_client(&first.ca)).await.is_ok());
    std::fs::write(&first.server_key, key).unwrap();
    // New files from an unrelated CA, written over the old ones: the watcher swaps them in.
    let second = folio_testkit::certs::write(dir.path(), "b-");
    std::fs::copy(&second.server_cert, &first.server_cert).unwrap();
    std::fs::copy(&second.server_key, &first.server_key).unwrap();
    std::fs::copy(&second.ca, &first.ca).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if KafkaConn::connect_tls(ssl, &tls_client(&second.ca)).await.is_ok() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the new certificate never served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let old_ca = folio_testkit::certs::write(dir.path(), "c-");
    assert!(KafkaConn::connect_tls(ssl, &tls_client(&old_ca.ca)).await.is_err());
    s.broker.reload_tls().unwrap();
}

/// Hostile input before authentication: a frame above sasl.server.max.receive.size, a
/// garbage SCRAM message, a v0 handshake's raw tokens (served) — none panics, each closes
/// or answers as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_input_is_bounded_and_v0_raw_tokens_work() {
    let dir = tempfile::tempdir().unwrap();
    let (s, _certs) = secured(dir.path(), |_| {}).await;
    let mut admin = Conn::open(addr(&s, SecurityProtocol::Plaintext)).await;
    assert_eq!(
        upsert(&mut admin, Mechanism::ScramSha256, "alice", "pw", 4096).await.results[0].error_code,
        0
    );
    let at = addr(&s, SecurityProtocol::SaslPlaintext);
    let mut c = KafkaConn::connect(at).await.unwrap();
    let big = vec![0u8; folio_broker::security::SASL_RECEIVE_BYTES_MAX + 1];
    let _ = c.send_raw(&big).await;
    assert!(matches!(c.recv_raw().await, Ok(None) | Err(_)), "an oversized frame closes");
    let mut c = KafkaConn::connect(at).await.unwrap();
    let hs =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256"));
    let _: SaslHandshakeResponse = c.call(ApiKey::SaslHandshake, 1, &hs).await.unwrap();
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"n,,n=alice"));
    let r: SaslAuthenticateResponse = c.call(ApiKey::SaslAuthenticate, 2, &req).await.unwrap();
    assert_eq!(r.error_code, errors::SASL_AUTHENTICATION_FAILED);
    // v0: after the handshake the tokens travel raw (size, bytes).
    let mut c = KafkaConn::connect(at).await.unwrap();
    let hs = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    let r: SaslHandshakeResponse = c.call(ApiKey::SaslHandshake, 0, &hs).await.unwrap();
    assert_eq!(r.error_code, 0);
    c.send_raw(b"\0alice\0pw").await.unwrap();
    assert_eq!(c.recv_raw().await.unwrap().as_deref(), Some(&b""[..]), "an empty PLAIN answer");
    assert_eq!(metadata(&mut c).await.unwrap().brokers.len(), 1);
    let mut c = KafkaConn::connect(at).await.unwrap();
    let _: SaslHandshakeResponse = c.call(ApiKey::SaslHandshake, 0, &hs).await.unwrap();
    c.send_raw(b"\0alice\0wrong").await.unwrap();
    assert_eq!(c.recv_raw().await.unwrap(), None, "a failed v0 exchange closes without an answer");
}

/// A TLS connection's large answers: 12 MiB fetched in 10 MiB answers over SSL. When the
/// listener split the TLS stream into a reader and a writer, a read flushing pending TLS
/// records took the writer's wake-up and a large answer stalled half-sent for ever (found
/// by `bench kafka --tls`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_over_tls_are_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (s, certs) = secured(dir.path(), |_| {}).await;
    let mut plain = Conn::open(addr(&s, SecurityProtocol::Plaintext)).await;
    let _: MetadataResponse = plain.call(ApiKey::Metadata, 12, &metadata_req(&["big"])).await;
    let batches = 96;
    for _ in 0..batches {
        let b = Bytes::from(common::batch_sized(128, 1024));
        let req = folio_testkit::kafka::produce_request("big", 0, b, -1);
        let r: kafka_protocol::messages::ProduceResponse =
            plain.call(ApiKey::Produce, 9, &req).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    let mut c = KafkaConn::connect_tls(addr(&s, SecurityProtocol::Ssl), &tls_client(&certs.ca))
        .await
        .unwrap();
    let (mut offset, mut bytes) = (0i64, 0usize);
    let fetched = tokio::time::timeout(Duration::from_secs(60), async {
        while offset < batches * 128 {
            let mut req = common::fetch_req("big", uuid::Uuid::nil(), offset);
            req.max_bytes = 50 << 20;
            req.topics[0].partitions[0].partition_max_bytes = 10 << 20;
            let r: kafka_protocol::messages::FetchResponse =
                c.call(ApiKey::Fetch, 12, &req).await.unwrap();
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 0);
            let records = p.records.as_ref().unwrap();
            bytes += records.len();
            offset = common::base_offsets(records).last().unwrap() + 128;
        }
    })
    .await;
    assert!(fetched.is_ok(), "a fetch over TLS stalled at offset {offset} after {bytes} bytes");
    assert!(bytes >= 12 << 20, "{bytes} bytes fetched");
}
