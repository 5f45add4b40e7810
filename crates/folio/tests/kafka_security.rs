//! #24 with real clients: `folio standalone` with PLAINTEXT, SASL_SSL and SASL_PLAINTEXT
//! listeners, users made by `folio users`, certificates made by the test. kcat (librdkafka
//! 2.0.2), confluent-kafka (librdkafka 2.16), kafka-python and aiokafka produce and consume
//! with SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN, over TLS and not; wrong passwords and
//! unknown users fail with an authentication error; a new certificate is served after
//! SIGHUP. The Python scenarios are in `tests/kafka/security.py`.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn folio(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_folio")).args(args).output().expect("run folio");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "folio {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    text
}

fn sasl(protocol: &str, mechanism: &str, user: &str, password: &str, ca: &Path) -> Vec<String> {
    let mut v = vec![
        format!("security.protocol={protocol}"),
        format!("sasl.mechanisms={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ];
    if protocol.ends_with("SSL") {
        v.push(format!("ssl.ca.location={}", ca.display()));
    }
    v.into_iter().flat_map(|x| ["-X".to_string(), x]).collect()
}

fn with(base: &[&str], extra: &[String]) -> Vec<String> {
    base.iter().map(|s| s.to_string()).chain(extra.iter().cloned()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn python(scenario: &str, sasl_ssl: &str, sasl_plain: &str, ca: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/security.py");
    let out = Command::new("python3")
        .arg(script)
        .args([scenario, sasl_ssl, sasl_plain])
        .arg(ca)
        .output()
        .expect("python3 (scripts/test.sh installs confluent-kafka, kafka-python, aiokafka)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "security.py {scenario}:\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{stdout}");
}

#[test]
fn real_clients_authenticate_over_sasl_ssl_and_sasl_plaintext_and_bad_logins_fail() {
    let dir = tempfile::tempdir().unwrap();
    let certs = folio_testkit::certs::write(dir.path(), "");
    let data = dir.path().join("data");
    let meta = format!("embedded:{}", data.join("metadata").display());
    folio(&["users", "--metadata", &meta, "add", "alice", "--password", "alice-secret"]);
    let pw = dir.path().join("bob.pw");
    std::fs::write(&pw, "bob-secret\n").unwrap();
    let pw = pw.to_str().unwrap();
    folio(&[
        "users",
        "--metadata",
        &meta,
        "add",
        "bob",
        "--password-file",
        pw,
        "--mechanism",
        "SCRAM-SHA-256",
    ]);
    let list = folio(&["users", "--metadata", &meta, "list"]);
    assert!(
        list.contains("alice\tSCRAM-SHA-512 (4096 iterations), SCRAM-SHA-256 (4096 iterations)"),
        "{list}"
    );
    assert!(list.contains("bob\tSCRAM-SHA-256 (4096 iterations)"), "{list}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["standalone", "--data-dir"])
        .arg(&data)
        .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--listener", "PLAINTEXT://127.0.0.1:0"])
        .args(["--listener", "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"])
        .arg("--ssl-cert")
        .arg(&certs.server_cert)
        .arg("--ssl-key")
        .arg(&certs.server_key)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio standalone");
    let listeners = common::kafka_listeners(&mut child, 3);
    let mut child = common::Proc(child);
    let addr = |name: &str| listeners.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let (sasl_ssl, sasl_plain) = (addr("SASL_SSL"), addr("SASL_PLAINTEXT"));

    // kcat: produce with SCRAM-SHA-512 over TLS, read back with PLAIN over plaintext.
    let lines: Vec<String> = (0..20).map(|i| format!("kcat-{i}")).collect();
    let produce = with(
        &["-P", "-b", &sasl_ssl, "-t", "secured", "-p", "0"],
        &sasl("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret", &certs.ca),
    );
    common::kcat(&strs(&produce), Some(&(lines.join("\n") + "\n")));
    let consume = with(
        &["-C", "-b", &sasl_plain, "-t", "secured", "-p", "0", "-o", "beginning", "-e"],
        &sasl("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", &certs.ca),
    );
    let got: Vec<String> =
        common::kcat(&strs(&consume), None).lines().map(str::to_string).collect();
    assert_eq!(got, lines);
    // A wrong password and an unknown user: kcat fails with librdkafka's authentication
    // error, it does not hang.
    for (mech, user, password) in [("SCRAM-SHA-512", "alice", "nope"), ("PLAIN", "mallory", "x")] {
        let list = with(
            &["-L", "-b", &sasl_ssl, "-m", "5"],
            &sasl("SASL_SSL", mech, user, password, &certs.ca),
        );
        let started = Instant::now();
        let (ok, _, stderr) = common::kcat_status(&strs(&list));
        assert!(!ok, "kcat {mech} {user}: metadata with bad credentials succeeded");
        assert!(stderr.contains("uthentication"), "kcat {mech} {user}: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(60));
    }
    // Plaintext Kafka bytes on the TLS port fail there too (the broker logs the handshake).
    let (ok, _, _) = common::kcat_status(&["-L", "-b", &sasl_ssl, "-m", "3"]);
    assert!(!ok, "plaintext metadata on a SASL_SSL port");

    for scenario in ["confluent", "kafka_python", "aiokafka"] {
        python(scenario, &sasl_ssl, &sasl_plain, &certs.ca);
    }

    // SIGHUP: new certificate files (another CA) are served; the process lives on.
    let next = folio_testkit::certs::write(dir.path(), "next-");
    std::fs::copy(&next.server_cert, &certs.server_cert).unwrap();
    std::fs::copy(&next.server_key, &certs.server_key).unwrap();
    let pid = child.0.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let list = with(
        &["-L", "-b", &sasl_ssl, "-m", "5"],
        &sasl("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret", &next.ca),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !common::kcat_status(&strs(&list)).0 {
        assert!(Instant::now() < deadline, "the new certificate was never served");
        assert!(child.0.try_wait().unwrap().is_none(), "SIGHUP ended the process");
    }
    assert!(child.0.try_wait().unwrap().is_none(), "SIGHUP ended the process");
}

/// ACLs with a real client: `folio acls` grants alice WRITE and READ on `orders-*` and READ
/// on group `g`; kcat produces and consumes there as alice, is refused `secret` with
/// librdkafka's "Topic authorization failed", and the super user may do everything.
#[test]
fn kcat_is_allowed_and_refused_by_acls() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let meta = format!("embedded:{}", data.join("metadata").display());
    for user in ["admin", "alice"] {
        folio(&["users", "--metadata", &meta, "add", user, "--password", "pw"]);
    }
    let grant = ["--principal", "User:alice", "--resource-type", "Topic", "--name", "orders-"];
    let ops = ["--pattern", "Prefixed", "--operation", "Write", "--operation", "Read"];
    folio(&[&["acls", "--metadata", &meta, "add"][..], &grant, &ops].concat());
    let group = ["--principal", "User:alice", "--resource-type", "Group", "--name", "g"];
    folio(&[&["acls", "--metadata", &meta, "add"][..], &group, &["--operation", "Read"]].concat());
    let listed = folio(&["acls", "--metadata", &meta, "list"]);
    assert_eq!(listed.lines().count(), 3, "{listed}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["standalone", "--data-dir"])
        .arg(&data)
        .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--listener", "SASL_PLAINTEXT://127.0.0.1:0"])
        .args(["--authorizer", "--super-user", "User:admin"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio standalone");
    let at = common::kafka_listeners(&mut child, 1)[0].1.clone();
    let _child = common::Proc(child);
    let none = Path::new("");
    let as_user = |u: &str| sasl("SASL_PLAINTEXT", "SCRAM-SHA-512", u, "pw", none);
    // The super user creates both topics (auto-creation needs CREATE, which alice lacks).
    for topic in ["orders-1", "secret"] {
        let p = with(&["-P", "-b", &at, "-t", topic], &as_user("admin"));
        common::kcat(&strs(&p), Some("from-admin\n"));
    }
    let p = with(&["-P", "-b", &at, "-t", "orders-1"], &as_user("alice"));
    common::kcat(&strs(&p), Some("from-alice\n"));
    let c =
        with(&["-C", "-b", &at, "-G", "g", "-o", "beginning", "-e", "orders-1"], &as_user("alice"));
    let mut got: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < 2 && Instant::now() < deadline {
        got = common::kcat(&strs(&c), None).lines().map(str::to_string).collect();
    }
    assert_eq!(got, ["from-admin", "from-alice"]);
    let p = with(&["-P", "-b", &at, "-t", "secret"], &as_user("alice"));
    let (ok, _, stderr) = common::kcat_status_with(&strs(&p), "no\n");
    assert!(!ok && stderr.contains("Topic authorization failed"), "{stderr}");
    let c = with(&["-C", "-b", &at, "-t", "secret", "-o", "beginning", "-e"], &as_user("alice"));
    let (ok, _, stderr) = common::kcat_status(&strs(&c));
    assert!(stderr.contains("Topic authorization failed"), "alice read secret ({ok}): {stderr}");
}
