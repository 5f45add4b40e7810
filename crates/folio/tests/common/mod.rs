#![allow(dead_code)]
//! Helpers for tests that run `folio` processes.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Removes ANSI colour sequences from a log line.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Drains the child's stderr (echoed with FOLIO_TEST_VERBOSE) until `pick` finds what it
/// wants in a log line (ANSI colours stripped); returns that, or panics after 60 s.
fn wait_for_log<T: Send + 'static>(
    child: &mut Child,
    what: &str,
    pick: impl Fn(&str) -> Option<T> + Send + 'static,
) -> T {
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let plain = strip_ansi(&line);
            if tx.is_some()
                && let Some(found) = pick(&plain)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(found);
            }
            if std::env::var_os("FOLIO_TEST_VERBOSE").is_some() {
                eprintln!("[folio] {plain}");
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("no {what} within 60 s"))
}

fn field(line: &str, key: &str) -> Option<String> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)).map(str::to_string)
}

/// Waits for the child's "Kafka listener up ... addr=HOST:PORT" log line on stderr and
/// returns the address.
pub fn kafka_addr(child: &mut Child) -> String {
    wait_for_log(child, "Kafka listener", |l| {
        l.contains("Kafka listener up").then(|| field(l, "addr=")).flatten()
    })
}

/// Waits for `folio standalone`'s "folio standalone up" log line and returns its Kafka and
/// HTTP addresses.
pub fn standalone_addrs(child: &mut Child) -> (String, String) {
    wait_for_log(child, "standalone", |l| {
        if !l.contains("folio standalone up") {
            return None;
        }
        Some((field(l, "kafka=")?, field(l, "http=")?))
    })
}

/// `GET path` on an HTTP address; the body.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP endpoint");
    let request = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()
}

/// Waits for `folio broker`'s "Kafka listener up" lines and then its "folio broker up"
/// line; each listener's name and address, and the HTTP endpoint's address.
pub fn broker_up(child: &mut Child) -> (Vec<(String, String)>, String) {
    let seen = std::sync::Mutex::new(Vec::new());
    wait_for_log(child, "broker up", move |l| {
        let mut seen = seen.lock().unwrap();
        if l.contains("Kafka listener up") {
            seen.push((field(l, "listener=")?, field(l, "addr=")?));
            return None;
        }
        l.contains("folio broker up").then(|| Some((seen.clone(), field(l, "http=")?))).flatten()
    })
}

/// A child process, SIGKILLed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `folio bookie` process on etcd under `root`, with its data in `dir/<id>` and any
/// extra `--override KEY=VALUE` settings; returns once it listens.
pub fn start_bookie(dir: &Path, id: &str, etcd: &str, root: &str, overrides: &[&str]) -> Proc {
    start_bookie_at(dir, id, etcd, root, overrides).0
}

/// `start_bookie`, also returning the address the bookie listens on.
pub fn start_bookie_at(
    dir: &Path,
    id: &str,
    etcd: &str,
    root: &str,
    overrides: &[&str],
) -> (Proc, std::net::SocketAddr) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_folio"));
    cmd.args(["--log", "warn", "bookie", "--bookie-id", id, "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.join(id))
        .args(["--metadata", &format!("etcd:{etcd}")])
        .args(["--override", &format!("metadata_root={root:?}")]);
    for o in overrides {
        cmd.args(["--override", o]);
    }
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn folio bookie");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "bookie {id} did not start: {line}");
    let addr = line.trim().rsplit(' ').next().and_then(|a| a.parse().ok());
    (Proc(child), addr.unwrap_or_else(|| panic!("no address in {line:?}")))
}

/// A `folio broker` process on etcd under `root` (Kafka and HTTP on free ports, `extra`
/// arguments after the rest); returns it and its Kafka address once it listens.
pub fn start_broker_with(etcd: &str, root: &str, node_id: u16, extra: &[&str]) -> (Proc, String) {
    let mut child = spawn_broker(etcd, root, node_id, extra);
    let addr = kafka_addr(&mut child);
    (Proc(child), addr)
}

/// A `folio broker` process on etcd under `root`, Kafka and HTTP on free ports, its log on
/// a piped stderr.
fn spawn_broker(etcd: &str, root: &str, node_id: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_folio"))
        .args(["broker", "--metadata", &format!("etcd://{etcd}"), "--root", root])
        .args(["--kafka-listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--node-id", &node_id.to_string()])
        .args(extra)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn folio broker")
}

/// `start_broker_with`, also returning the broker's HTTP (metrics) address.
pub fn start_broker_http(
    etcd: &str,
    root: &str,
    node_id: u16,
    extra: &[&str],
) -> (Proc, String, String) {
    let mut child = spawn_broker(etcd, root, node_id, extra);
    let (listeners, http) = broker_up(&mut child);
    let kafka = listeners.into_iter().next().expect("a Kafka listener").1;
    (Proc(child), kafka, http)
}

/// A counter on a process's `/metrics` (0 while absent).
pub fn metric(http: &str, name: &str) -> u64 {
    let body = http_get(http, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the counter `name` on `http` is above `above` (e.g. a compaction pass
/// finished); returns it. Fails the test after 90 s.
pub fn wait_metric_above(http: &str, name: &str, above: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let v = metric(http, name);
        if v > above {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{name} stayed at {v} for 90 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs kcat with `args`, `stdin` fed to it; its stdout (fails the test if kcat fails).
pub fn kcat(args: &[&str], stdin: Option<&str>) -> String {
    let mut c = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat (apt-get install kcat; scripts/test.sh does this)");
    let mut input = c.stdin.take().unwrap();
    if let Some(s) = stdin {
        std::io::Write::write_all(&mut input, s.as_bytes()).unwrap();
    }
    drop(input);
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "kcat {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Waits for `n` "Kafka listener up" log lines; returns each listener's name and bound
/// address, in the order they came.
pub fn kafka_listeners(child: &mut Child, n: usize) -> Vec<(String, String)> {
    let seen = std::sync::Mutex::new(Vec::new());
    wait_for_log(child, "Kafka listeners", move |l| {
        if !l.contains("Kafka listener up") {
            return None;
        }
        let mut seen = seen.lock().unwrap();
        seen.push((field(l, "listener=")?, field(l, "addr=")?));
        (seen.len() == n).then(|| seen.clone())
    })
}

/// Runs kcat with `args`; its exit status, stdout and stderr (for runs meant to fail).
pub fn kcat_status(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kcat")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kcat (apt-get install kcat; scripts/test.sh does this)");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Runs kcat with `args` and `stdin`; its exit status, stdout and stderr.
pub fn kcat_status_with(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut c = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat (apt-get install kcat; scripts/test.sh does this)");
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}
