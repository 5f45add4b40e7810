//! #24 item 3: a secured etcd. The test starts its own etcd that serves clients only over
//! TLS with client certificates (`--client-cert-auth`) and has auth enabled (user `root`).
//! A `folio bookie` process reaches it with the `FOLIO_ETCD_*` environment variables, and
//! `folio ledger write`, `read` and `check` with the flags; without TLS, with a wrong
//! password, and with a certificate of another CA, the tools fail with a clear error.
#![cfg(feature = "etcd")]

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Proc;
use folio_testkit::certs::Certs;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn etcdctl(endpoint: &str, certs: &Certs, args: &[&str]) -> Output {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=https://{endpoint}"))
        .arg(format!("--cacert={}", certs.ca.display()))
        .arg(format!("--cert={}", certs.client_cert.display()))
        .arg(format!("--key={}", certs.client_key.display()))
        .args(args)
        .output()
        .expect("etcdctl (apt-get install etcd-client; scripts/test.sh does this)")
}

/// An etcd on free loopback ports serving clients over TLS with client certificates.
fn start_etcd(dir: &Path, certs: &Certs) -> (Proc, String) {
    let (client, peer) = (free_port(), free_port());
    let endpoint = format!("127.0.0.1:{client}");
    let child = Command::new("etcd")
        .args(["--name", "secured", "--data-dir"])
        .arg(dir.join("etcd"))
        .arg(format!("--listen-client-urls=https://{endpoint}"))
        .arg(format!("--advertise-client-urls=https://{endpoint}"))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"))
        .arg(format!("--initial-cluster=secured=http://127.0.0.1:{peer}"))
        .arg(format!("--cert-file={}", certs.server_cert.display()))
        .arg(format!("--key-file={}", certs.server_key.display()))
        .arg(format!("--trusted-ca-file={}", certs.ca.display()))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd (apt-get install etcd-server; scripts/test.sh does this)");
    let mut etcd = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Polling another process's readiness: etcdctl answers once etcd serves.
    while !etcdctl(&endpoint, certs, &["endpoint", "health"]).status.success() {
        assert!(etcd.0.try_wait().unwrap().is_none(), "etcd exited");
        assert!(Instant::now() < deadline, "etcd not healthy in 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    (etcd, endpoint)
}

fn folio(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_folio"));
    c.args(["--log", "warn"]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run folio")
}

#[test]
fn bookies_and_tools_reach_an_etcd_with_tls_client_certificates_and_a_password() {
    let tmp = tempfile::tempdir().unwrap();
    let certs = folio_testkit::certs::write(tmp.path(), "");
    let (_etcd, endpoint) = start_etcd(tmp.path(), &certs);
    for args in [&["user", "add", "root:root-pw", "--interactive=false"][..], &["auth", "enable"]] {
        let out = etcdctl(&endpoint, &certs, args);
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let pw = tmp.path().join("etcd-password");
    std::fs::write(&pw, "root-pw\n").unwrap();
    let wrong_pw = tmp.path().join("wrong-password");
    std::fs::write(&wrong_pw, "not-the-password\n").unwrap();
    let metadata = format!("etcd://{endpoint}");
    let cluster = ["--metadata", metadata.as_str(), "--root", "secured"];
    let (ca, cert, key) = (&certs.ca, &certs.client_cert, &certs.client_key);
    let tls_flags = |password: &Path| {
        let mut v: Vec<String> = vec!["--etcd-user".into(), "root".into()];
        for (flag, p) in [
            ("--etcd-password-file", password),
            ("--etcd-ca-file", ca.as_path()),
            ("--etcd-cert-file", cert.as_path()),
            ("--etcd-key-file", key.as_path()),
        ] {
            v.push(flag.into());
            v.push(p.display().to_string());
        }
        v
    };

    // A bookie process configured from the environment.
    let mut bookie = Command::new(env!("CARGO_BIN_EXE_folio"));
    bookie
        .args(["--log", "warn", "bookie", "--bookie-id", "bookie-0", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(tmp.path().join("bookie-0"))
        .args(["--metadata", &format!("etcd:{endpoint}")])
        .args(["--override", "metadata_root=\"secured\""])
        .env("FOLIO_ETCD_USER", "root")
        .env("FOLIO_ETCD_PASSWORD_FILE", &pw)
        .env("FOLIO_ETCD_CA_FILE", ca)
        .env("FOLIO_ETCD_CERT_FILE", cert)
        .env("FOLIO_ETCD_KEY_FILE", key)
        .stdout(Stdio::piped());
    let mut child = bookie.spawn().expect("spawn folio bookie");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let _bookie = Proc(child);
    assert!(line.contains("listening on"), "the bookie did not start on the secured etcd: {line}");

    // Tools with the flags: write a ledger, read it back, check its copies.
    let flags = tls_flags(&pw);
    let with = |cmd: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["ledger".into()];
        v.extend(cluster.iter().map(|s| s.to_string()));
        v.extend(flags.iter().cloned());
        v.extend(cmd.iter().map(|s| s.to_string()));
        v
    };
    let run = |v: &[String]| folio(&v.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    let out = run(&with(&["write", "--count", "5", "--size", "10"]));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = stdout.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_string();
    let out = run(&with(&["read", &id]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
    assert!(run(&with(&["check", &id])).status.success());

    // Refusals, each a clear error and no hang.
    let list = |extra: &[String]| {
        let mut v: Vec<String> = vec!["ledger".into()];
        v.extend(cluster.iter().map(|s| s.to_string()));
        v.extend(extra.iter().cloned());
        v.push("list".into());
        let started = Instant::now();
        let out = run(&v);
        assert!(started.elapsed() < Duration::from_secs(60), "{v:?} hung");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, stderr) = list(&[]);
    assert!(!ok && stderr.contains("etcd"), "plaintext to a TLS etcd: {stderr}");
    let (ok, stderr) = list(&tls_flags(&wrong_pw));
    assert!(!ok && stderr.contains("etcd"), "a wrong password: {stderr}");
    let other = folio_testkit::certs::write(tmp.path(), "other-");
    let mut foreign = tls_flags(&pw);
    let at = foreign.iter().position(|f| f == "--etcd-ca-file").unwrap() + 1;
    foreign[at] = other.ca.display().to_string();
    let (ok, stderr) = list(&foreign);
    assert!(!ok && stderr.contains("etcd"), "an etcd certificate of another CA: {stderr}");
    let (ok, stderr) = list(&tls_flags(&pw));
    assert!(ok, "{stderr}");
}
