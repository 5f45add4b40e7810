//! A small HTTP/1.1 endpoint: `GET /health`, `GET /metrics` (Prometheus text format),
//! `POST /gc`, `GET /admin/deletions` (topic deletions in progress, JSON) and
//! `GET /admin/trash` (the trash and whether this process runs its deleter, JSON).
//! Hand-rolled on tokio: four routes do not need a web framework.
//!
//! It binds to loopback unless told otherwise. Routes that change something (POST) need
//! the token (`Authorization: Bearer <token>`) when one is set (`--http-token-file`); with
//! no token they are served only on an endpoint bound to loopback, and refused (403) on one
//! bound beyond it.

pub mod admin;
mod bookie_page;
pub mod console;
pub mod request;

pub use admin::Bookies;
use admin::{deletions_json, gc_now};
use request::constant_time_eq;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use folio_bookie::bookie::Bookie;
use folio_log::Trash;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

pub use crate::limits::HTTP_CONNECTIONS_MAX;
pub use crate::limits::HTTP_TOKEN_BYTES_MIN;

/// A metric: name, help text, and how to read it from one bookie.
type Metric<'a> = (&'a str, &'a str, &'a dyn Fn(&Bookie) -> u64);

/// Who may call the mutating routes: whoever sends the token, or with no token, whoever
/// reaches an endpoint bound to loopback.
#[derive(Clone, Default)]
pub struct HttpAccess {
    token: Option<Arc<str>>,
}

impl std::fmt::Debug for HttpAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HttpAccess {{ token: {} }}", if self.token.is_some() { "set" } else { "none" })
    }
}

impl HttpAccess {
    /// The token in the first line of `path`, if a path is given.
    pub fn from_file(path: Option<&std::path::Path>) -> Result<HttpAccess, String> {
        let Some(path) = path else { return Ok(HttpAccess::default()) };
        let token = crate::access::first_line(path, "HTTP token")?;
        let token = token.trim();
        if token.len() < HTTP_TOKEN_BYTES_MIN {
            return Err(format!(
                "the HTTP token in {} has {} bytes; it needs at least {HTTP_TOKEN_BYTES_MIN}",
                path.display(),
                token.len()
            ));
        }
        Ok(HttpAccess { token: Some(token.into()) })
    }

    /// The token, to send as a client.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Whether `request` (its head) may call a mutating route on an endpoint bound to
    /// `local`; the refusal's status and text otherwise.
    fn check(&self, request: &str, local: Option<SocketAddr>) -> Result<(), (u16, String)> {
        let Some(token) = &self.token else {
            return match local {
                Some(a) if a.ip().is_loopback() => Ok(()),
                _ => Err((
                    403,
                    "this endpoint is bound beyond loopback and has no token: set \
                     --http-token-file (http_token_file) to allow POST, PUT and DELETE\n"
                        .to_string(),
                )),
            };
        };
        let sent = request::header(request, "authorization");
        let sent = sent.and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
        match sent {
            Some(s) if constant_time_eq(s.as_bytes(), token.as_bytes()) => Ok(()),
            Some(_) => Err((403, "wrong token\n".into())),
            None => Err((
                401,
                "this route needs the token: send `Authorization: Bearer <token>`\n".into(),
            )),
        }
    }
}

/// The HTTP endpoint of a process that runs a broker: its bookies and broker.
#[derive(Debug)]
pub struct Served {
    pub bookies: Bookies,
    pub broker: folio_broker::Broker,
}

/// Serves [`serve`] with the schema registry and the console of `served`'s broker, over the
/// cluster's store (`meta`, `keys`; `backend` names it on the console).
pub fn spawn_for_broker(
    listener: TcpListener,
    served: Served,
    (meta, keys): (Arc<dyn folio_meta::MetadataStore>, folio_meta::keys::Keys),
    backend: String,
    access: HttpAccess,
) -> tokio::task::JoinHandle<()> {
    let registry = folio_registry::Registry::new(meta.clone(), &keys);
    let Served { bookies, broker } = served;
    let console = console::Console::new(broker.clone(), bookies.clone(), meta, keys, backend);
    let serve = serve(listener, bookies, Some(broker), Some(registry), Some(console), access);
    tokio::spawn(serve)
}

/// Serves until the task is dropped. `broker`: the Kafka broker this process runs, if any
/// (with it the trash deleter, active while the broker is the controller). `access`: who
/// may call POST routes.
pub async fn serve(
    listener: TcpListener,
    bookies: Bookies,
    broker: Option<folio_broker::Broker>,
    registry: Option<folio_registry::Registry>,
    console: Option<console::Console>,
    access: HttpAccess,
) {
    let local = listener.local_addr().ok();
    let connections = Arc::new(tokio::sync::Semaphore::new(HTTP_CONNECTIONS_MAX));
    let gc_running = Arc::new(tokio::sync::Mutex::new(()));
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was taken: the
                // endpoint stays up and tries again shortly.
                tracing::warn!(error = %e, "HTTP accept failed; retrying");
                tokio::time::sleep(HTTP_ACCEPT_RETRY).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            let _ = stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")
                .await;
            continue;
        };
        let (bookies, broker, gc_running) = (bookies.clone(), broker.clone(), gc_running.clone());
        let (access, registry, console) = (access.clone(), registry.clone(), console.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let request = tokio::time::timeout(HTTP_READ_TIMEOUT, request::read(&mut stream)).await;
            let mut headers = String::new();
            let (status, content_type, body) = match request {
                Err(_) | Ok(Err(None)) => return,
                Ok(Err(Some((status, why)))) => (status, TEXT, why),
                Ok(Ok(req)) if console::is_console_path(&req.path) => match &console {
                    Some(c) => {
                        let a = c.handle(&req).await;
                        headers = a.headers.iter().map(|h| format!("{h}\r\n")).collect();
                        (a.status, a.content_type, a.body)
                    }
                    None if req.path == "/" => {
                        (200, "text/html; charset=utf-8", bookie_page::render(&bookies).await)
                    }
                    None => (404, TEXT, "no console here: it runs with a broker\n".to_string()),
                },
                Ok(Ok(req)) => {
                    let refused = match mutates(&req) {
                        true => access.check(&req.head, local).err(),
                        false => None,
                    };
                    match refused {
                        Some((status, why)) => (status, TEXT, why),
                        None => {
                            route(&req, &bookies, broker.as_ref(), registry.as_ref(), &gc_running)
                                .await
                        }
                    }
                }
            };
            let response = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n{headers}connection: close\r\n\r\n{body}",
                request::reason(status),
                body.len()
            );
            let _ = tokio::time::timeout(HTTP_READ_TIMEOUT, stream.write_all(response.as_bytes()))
                .await;
        });
    }
}

const TEXT: &str = "text/plain; version=0.0.4";
const JSON: &str = "application/json";
/// What Confluent's registry answers with (its clients accept it and plain JSON).
const REGISTRY_JSON: &str = "application/vnd.schemaregistry.v1+json";

/// Whether `req` changes something (and so passes [`HttpAccess::check`]): every POST, PUT
/// and DELETE but the registry's lookups and compatibility checks, which only read.
fn mutates(req: &request::Request) -> bool {
    let registry_read = req.method == "POST"
        && (req.path.starts_with("/compatibility/")
            || (req.path.starts_with("/subjects/") && !req.path.ends_with("/versions")));
    // The console's changes pass its own session and CSRF checks, and the broker's ACLs.
    let console = req.path.starts_with("/api/v1/");
    matches!(req.method.as_str(), "POST" | "PUT" | "DELETE") && !registry_read && !console
}

/// Answers one request: its status, content type and body.
async fn route(
    req: &request::Request,
    bookies: &Bookies,
    broker: Option<&folio_broker::Broker>,
    registry: Option<&folio_registry::Registry>,
    gc_running: &tokio::sync::Mutex<()>,
) -> (u16, &'static str, String) {
    if folio_registry::api::is_registry_path(&req.path) {
        let Some(registry) = registry else {
            return (
                404,
                TEXT,
                "no schema registry in this process (it runs with a broker)\n".into(),
            );
        };
        let api = folio_registry::api::Request {
            method: &req.method,
            path: &req.path,
            query: &req.query,
            body: &req.body,
        };
        let reply = folio_registry::api::handle(registry, api).await;
        return (reply.status, REGISTRY_JSON, reply.body);
    }
    let json_or_text = |(status, body): (u16, String)| {
        (status, if body.starts_with('{') { JSON } else { TEXT }, body)
    };
    json_or_text(match (req.method.as_str(), req.path.as_str()) {
        (_, "/health") => health(bookies, broker).await,
        (_, "/metrics") => {
            let mut m = metrics(bookies).await;
            m.push_str(&autorecovery_metrics());
            if let Some(b) = broker {
                m.push_str(&trash_metrics(b.trash(), b.trash_deleter_active()).await);
                m.push_str(&b.render_metrics());
            }
            (200, m)
        }
        ("POST", "/gc") => match gc_running.try_lock() {
            Ok(_one) => (200, gc_now(bookies).await),
            Err(_) => (429, "a GC pass started through this endpoint is still running\n".to_string()),
        },
        (_, "/admin/deletions") => match broker {
            Some(b) => match b.deletions().await {
                Ok(d) => (200, deletions_json(&d)),
                Err(e) => (503, format!("reading deletions: {e}\n")),
            },
            None => (404, "no Kafka broker in this process\n".to_string()),
        },
        (_, "/admin/trash") => match broker {
            Some(b) => match b.trash().status().await {
                Ok(t) => (200, trash_json(&t, b.trash_deleter_active(), b.controller())),
                Err(e) => (503, format!("reading the trash: {e}\n")),
            },
            None => (404, "no Kafka broker in this process\n".to_string()),
        },
        _ => (
            404,
            "not found: try GET /health, GET /metrics, GET /admin/deletions, GET /admin/trash, POST /gc \
             or the schema registry's /subjects, /schemas, /config, /compatibility, /mode\n"
                .to_string(),
        ),
    })
}

/// How long a client may take to send its request (and to take the answer).
pub const HTTP_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept (EMFILE and the like) before the next one.
const HTTP_ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// `GET /health`: 503 while the broker is fenced (it could not hold its registration), else
/// the bookies' state.
async fn health(bookies: &Bookies, broker: Option<&folio_broker::Broker>) -> (u16, String) {
    if let Some(why) = broker.and_then(|b| b.fenced()) {
        let body = format!("fenced: this broker serves no partition and no group: {why}\n");
        return (503, body);
    }
    let b = bookies.read().await;
    let read_only: Vec<String> = b
        .iter()
        .filter(|b| b.is_read_only())
        .map(|b| match b.read_only_reason() {
            Some(why) => format!("{} ({why})", b.id()),
            None => b.id().to_string(),
        })
        .collect();
    if read_only.is_empty() {
        (200, format!("ok: {} bookies writable\n", b.len()))
    } else {
        (200, format!("ok: {} bookies, read-only: {}\n", b.len(), read_only.join(", ")))
    }
}

async fn metrics(bookies: &Bookies) -> String {
    let b = bookies.read().await;
    let mut out = String::new();
    let mut metrics: Vec<Metric> = vec![
        ("folio_bookie_requests_total", "Requests served.", &|b| {
            b.stats().requests.load(Ordering::Relaxed)
        }),
        ("folio_bookie_connections_open", "Open client connections.", &|b| {
            b.stats().connections_open.load(Ordering::Relaxed)
        }),
        (
            "folio_bookie_malformed_frames_total",
            "Connections closed for a malformed frame.",
            &|b| b.stats().malformed_frames.load(Ordering::Relaxed),
        ),
        (
            "folio_bookie_auth_refused_total",
            "Connections refused: they did not prove the cluster secret.",
            &|b| b.stats().auth_refused.load(Ordering::Relaxed),
        ),
        ("folio_bookie_read_only", "1 while the bookie is read-only.", &|b| {
            u64::from(b.is_read_only())
        }),
        (
            "folio_bookie_entry_log_read_bytes_total",
            "Bytes read from entry-log files (cache misses and read-ahead).",
            &|b| b.storage().entry_log_bytes_read(),
        ),
        ("folio_journal_commits_total", "Journal group commits.", &|b| {
            b.storage().journal_stats().n_commits.load(Ordering::Relaxed)
        }),
        ("folio_journal_bytes_total", "Bytes committed to the journal.", &|b| {
            b.storage().journal_stats().bytes_committed.load(Ordering::Relaxed)
        }),
        ("folio_journal_records_total", "Records committed to the journal.", &|b| {
            b.storage().journal_stats().n_records.load(Ordering::Relaxed)
        }),
    ];
    metrics.extend::<[Metric; 10]>([
        ("folio_gc_passes_total", "Garbage-collection passes run.", &|b| b.gc_status().passes),
        (
            "folio_gc_incoming_kept",
            "Copies no ensemble names yet that the last GC pass kept (being copied here).",
            &|b| b.gc_status().last.incoming_kept.len() as u64,
        ),
        ("folio_bookie_tombstone_ranges", "Ranges of deleted ledger ids kept.", &|b| {
            b.storage().tombstone_counts().0 as u64
        }),
        (
            "folio_bookie_tombstones_forgotten_total",
            "Tombstone ranges dropped at their bound (TOMBSTONE_RANGES_MAX).",
            &|b| b.storage().tombstone_counts().1,
        ),
        ("folio_gc_failures_total", "GC passes that failed (and deleted nothing).", &|b| {
            b.gc_status().failures
        }),
        (
            "folio_gc_last_run_timestamp_ms",
            "When the last GC pass ran (ms since the epoch).",
            &|b| b.gc_status().last_run_unix_ms,
        ),
        ("folio_gc_last_duration_ms", "How long the last GC pass took.", &|b| {
            b.gc_status().last_duration_ms
        }),
        ("folio_gc_bytes_reclaimed_total", "Entry-log bytes GC gave back.", &|b| {
            b.gc_status().bytes_reclaimed_total
        }),
        ("folio_gc_live_bytes", "Live bytes in the sealed logs GC kept.", &|b| {
            b.gc_status().live_and_garbage_bytes().0
        }),
        ("folio_gc_garbage_bytes", "Garbage bytes in the sealed logs GC kept.", &|b| {
            b.gc_status().live_and_garbage_bytes().1
        }),
    ]);
    for (name, help, f) in metrics {
        let _ = writeln!(out, "# HELP {name} {help}");
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for bookie in b.iter() {
            let _ = writeln!(out, "{name}{{bookie=\"{}\"}} {}", bookie.id(), f(bookie));
        }
    }
    disk_metrics(&mut out, &b);
    let _ = writeln!(
        out,
        "# HELP folio_gc_logs Sealed entry logs GC kept, by usage (live bytes / size)."
    );
    let _ = writeln!(out, "# TYPE folio_gc_logs gauge");
    for bookie in b.iter() {
        let buckets = bookie.gc_status().usage_buckets();
        for (label, n) in ["lt20", "20to50", "50to80", "ge80"].iter().zip(buckets) {
            let _ =
                writeln!(out, "folio_gc_logs{{bookie=\"{}\",usage=\"{label}\"}} {n}", bookie.id());
        }
    }
    out
}

/// How full each bookie's disk is, and where it turns read-only.
fn disk_metrics(out: &mut String, bookies: &[Bookie]) {
    let _ = writeln!(
        out,
        "# HELP folio_bookie_disk_usage_ratio How full the ledger dir's disk is (0 to 1; absent \
         when it cannot be probed).\n# TYPE folio_bookie_disk_usage_ratio gauge"
    );
    for bookie in bookies {
        if let Some(u) = bookie.disk_usage() {
            let _ =
                writeln!(out, "folio_bookie_disk_usage_ratio{{bookie=\"{}\"}} {u:.4}", bookie.id());
        }
    }
    let _ = writeln!(
        out,
        "# HELP folio_bookie_disk_usage_threshold Disk usage at which the bookie turns read-only \
         (disk_usage_threshold).\n# TYPE folio_bookie_disk_usage_threshold gauge"
    );
    for bookie in bookies {
        let t = bookie.disk_usage_threshold();
        let _ =
            writeln!(out, "folio_bookie_disk_usage_threshold{{bookie=\"{}\"}} {t}", bookie.id());
    }
}

/// The trash as JSON: its size, oldest record, failing records, and whether this process
/// runs the cluster's deleter now (and which broker is the controller that should).
fn trash_json(t: &folio_log::TrashStatus, active: bool, controller: i32) -> String {
    format!(
        "{{\"deleter_active_here\":{active},\"controller\":{controller},\"ledgers\":{},\"oldest_age_ms\":{},\"failing\":{}}}\n",
        t.ledgers, t.oldest_age_ms, t.failing
    )
}

/// The trash: its size, its oldest record, and the deleter's counters.
async fn trash_metrics(trash: &Trash, active: bool) -> String {
    let mut out = String::new();
    let status = match trash.status().await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "reading the trash for metrics failed");
            return out;
        }
    };
    let rows: [(&str, &str, u64); 6] = [
        (
            "folio_trash_deleter_active",
            "1 while this process runs the cluster's trash deleter (the controller does).",
            u64::from(active),
        ),
        ("folio_trash_ledgers", "Ledgers in the trash, not yet deleted.", status.ledgers),
        ("folio_trash_oldest_age_ms", "Age of the oldest trash record.", status.oldest_age_ms),
        (
            "folio_trash_failing",
            "Trash records whose last deletion attempt failed.",
            status.failing,
        ),
        (
            "folio_trash_deletions_total",
            "Trashed ledgers this process deleted.",
            trash.stats().deleted.load(Ordering::Relaxed),
        ),
        (
            "folio_trash_deletion_failures_total",
            "Failed deletion attempts (retried with backoff).",
            trash.stats().failed.load(Ordering::Relaxed),
        ),
    ];
    write_rows(&mut out, &rows);
    out
}

/// The `folio_autorecovery_*` metrics of this process's autorecovery (none if it runs none).
fn autorecovery_metrics() -> String {
    let mut out = String::new();
    let Some(s) = folio_repair::autorecovery::process_stats() else { return out };
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let rows: [(&str, &str, u64); 11] = [
        (
            "folio_autorecovery_auditor",
            "1 while this process is the cluster's auditor.",
            l(&s.auditor),
        ),
        (
            "folio_autorecovery_under_replicated_ledgers",
            "Ledgers with an under-replication mark.",
            l(&s.marks),
        ),
        (
            "folio_autorecovery_under_replicated_fragments",
            "Fragments the marks name.",
            l(&s.marked_fragments),
        ),
        (
            "folio_autorecovery_oldest_mark_age_ms",
            "Age of the oldest under-replication mark.",
            l(&s.oldest_mark_age_ms),
        ),
        (
            "folio_autorecovery_bytes_rereplicated_total",
            "Bytes this process's worker copied.",
            l(&s.bytes_copied),
        ),
        (
            "folio_autorecovery_entries_rereplicated_total",
            "Entries this process's worker copied.",
            l(&s.entries_copied),
        ),
        (
            "folio_autorecovery_copy_errors_total",
            "Entry copies that failed (the ledger is retried).",
            l(&s.copy_errors),
        ),
        (
            "folio_autorecovery_copies_discarded_total",
            "Fragment copies another worker won the swap for.",
            l(&s.copies_discarded),
        ),
        (
            "folio_autorecovery_copies_stopped_total",
            "Fragment copies stopped half-way because the worker's lease was lost.",
            l(&s.copies_stopped),
        ),
        (
            "folio_autorecovery_ledgers_healed_total",
            "Ledgers this process's worker restored.",
            l(&s.ledgers_healed),
        ),
        (
            "folio_autorecovery_ledgers_marked_total",
            "Marks this process's auditor created or grew.",
            l(&s.ledgers_marked),
        ),
    ];
    write_rows(&mut out, &rows);
    out
}

/// Writes `(name, help, value)` rows in the Prometheus text format: a counter when the name
/// ends in `_total`, else a gauge.
fn write_rows(out: &mut String, rows: &[(&str, &str, u64)]) {
    for (name, help, v) in rows {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
    }
}

/// Binds the endpoint; the caller spawns `serve`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr).await.map_err(|e| format!("binding the HTTP endpoint on {addr}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_bookie::bookie::BookieConfig;
    use tokio::io::AsyncReadExt;
    use tokio::sync::RwLock;

    /// The answer, or "reset" when the endpoint closed the connection without reading the
    /// request (a refused connection: the unread request makes the close a reset, which
    /// can overtake the 503).
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut out = String::new();
        let sent = s.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes()).await;
        match sent.and(s.read_to_string(&mut out).await.map(|_| ())) {
            Ok(()) => out,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => "reset".into(),
            Err(e) => panic!("GET {path}: {e}"),
        }
    }

    /// POST needs the token when one is set (401 without it, 403 with a wrong one), and with
    /// none is served on loopback only; GET needs nothing.
    #[test]
    fn post_routes_need_the_token_or_a_loopback_endpoint() {
        let head = |auth: &str| format!("POST /gc HTTP/1.1\r\nhost: x\r\n{auth}\r\n");
        let (lo, wide) =
            (Some("127.0.0.1:1".parse().unwrap()), Some("10.0.0.1:1".parse().unwrap()));
        let open = HttpAccess::default();
        assert!(open.check(&head(""), lo).is_ok());
        assert_eq!(open.check(&head(""), wide).unwrap_err().0, 403);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "short\n").unwrap();
        assert!(HttpAccess::from_file(Some(&file)).unwrap_err().contains("at least 16"));
        std::fs::write(&file, "0123456789abcdef-token\n").unwrap();
        let t = HttpAccess::from_file(Some(&file)).unwrap();
        assert_eq!(t.check(&head(""), lo).unwrap_err().0, 401, "also on loopback");
        let wrong = head("Authorization: Bearer 0123456789abcdef-tokeN\r\n");
        assert_eq!(t.check(&wrong, wide).unwrap_err().0, 403);
        let right = head("authorization: Bearer 0123456789abcdef-token\r\n");
        assert!(t.check(&right, wide).is_ok());
        // A header after the blank line (in a body) does not count.
        let smuggled = format!("{}authorization: Bearer 0123456789abcdef-token\r\n", head(""));
        assert_eq!(t.check(&smuggled, lo).unwrap_err().0, 401);
    }

    /// Idle connections never block the endpoint; above the connection cap a client gets
    /// 503 at once, and once the idle ones go, requests are served again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_connections_are_capped_and_never_block_the_endpoint() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let access = HttpAccess::default();
        let server = tokio::spawn(serve(
            listener,
            Arc::new(RwLock::new(Vec::new())),
            None,
            None,
            None,
            access,
        ));
        let mut idle = Vec::new();
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        assert!(
            get(addr, "/health").await.starts_with("HTTP/1.1 200 OK"),
            "served beside an idle one"
        );
        while idle.len() < HTTP_CONNECTIONS_MAX {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // The accept loop takes them in order: once the cap is reached, the next is refused.
        let refused = loop {
            let answer = get(addr, "/health").await;
            if answer.starts_with("HTTP/1.1 503") || answer == "reset" {
                break answer;
            }
            assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        };
        assert!(refused == "reset" || refused.contains("content-length: 0"), "{refused}");
        drop(idle);
        let served = loop {
            let answer = get(addr, "/health").await;
            if answer.starts_with("HTTP/1.1 200 OK") {
                break answer;
            }
            tokio::task::yield_now().await;
        };
        assert!(served.contains("0 bookies writable"), "{served}");
        server.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metrics_report_bookie_journal_and_gc_figures() {
        let dir = tempfile::tempdir().unwrap();
        let meta: Arc<dyn folio_meta::MetadataStore> =
            Arc::new(folio_meta::embedded::EmbeddedStore::open(&dir.path().join("m")).unwrap());
        let mut c = BookieConfig::new(dir.path().join("b"), "127.0.0.1:0".parse().unwrap());
        c.bookie_id = Some("b0".into());
        let b = Bookie::start(c, meta.clone()).await.unwrap();
        b.gc_now().await.unwrap();
        let bookies: Bookies = Arc::new(RwLock::new(vec![b]));
        let text = metrics(&bookies).await;
        for line in [
            "folio_bookie_requests_total{bookie=\"b0\"} 0",
            "folio_gc_passes_total{bookie=\"b0\"} 1",
            "folio_gc_failures_total{bookie=\"b0\"} 0",
            "folio_gc_logs{bookie=\"b0\",usage=\"lt20\"} 0",
            "# TYPE folio_gc_live_bytes gauge",
            "folio_gc_incoming_kept{bookie=\"b0\"} 0",
            "folio_bookie_tombstone_ranges{bookie=\"b0\"} 0",
            "folio_bookie_tombstones_forgotten_total{bookie=\"b0\"} 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        assert!(gc_now(&bookies).await.starts_with("b0: dropped ledgers []"));
        let env = folio_log::LogEnv {
            meta: meta.clone(),
            client: folio_client::LedgerClient::new(meta.clone(), Default::default()),
            keys: Default::default(),
            clock: Arc::new(folio_log::WallClock),
            owner: "t".into(),
        };
        let trash = Trash::new(env, Default::default());
        let text = trash_metrics(&trash, true).await;
        assert!(text.contains("# TYPE folio_trash_ledgers gauge\nfolio_trash_ledgers 0"), "{text}");
        assert!(text.contains("folio_trash_deletions_total 0"), "{text}");
        assert!(text.contains("folio_trash_deleter_active 1"), "{text}");
        let page = bookie_page::render(&bookies).await;
        assert!(page.contains("<td>b0</td>") && page.contains("writable"), "{page}");
        let passes = bookies.read().await[0].gc_status().passes;
        assert!(page.contains(&format!("{passes} passes, 0 failed")), "{page}");
        let (status, body) = health(&bookies, None).await;
        assert_eq!(status, 200);
        assert!(body.contains("1 bookies writable"), "{body}");
        for b in bookies.write().await.drain(..) {
            b.shutdown().await.unwrap();
        }
    }
}
