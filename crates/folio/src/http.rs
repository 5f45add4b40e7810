//! A small HTTP/1.1 endpoint: `GET /health` and `GET /metrics` (Prometheus text format).
//! Hand-rolled on tokio: two routes do not need a web framework.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use folio_bookie::bookie::Bookie;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::RwLock;

pub type Bookies = Arc<RwLock<Vec<Bookie>>>;

/// A metric: name, help text, and how to read it from one bookie.
type Metric<'a> = (&'a str, &'a str, &'a dyn Fn(&Bookie) -> u64);

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, bookies: Bookies) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let bookies = bookies.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let Ok(n) = stream.read(&mut buf).await else { return };
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/health" => health(&bookies).await,
                "/metrics" => ("200 OK", metrics(&bookies).await),
                _ => ("404 Not Found", "not found: try /health or /metrics\n".to_string()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

async fn health(bookies: &Bookies) -> (&'static str, String) {
    let b = bookies.read().await;
    let read_only: Vec<&str> = b.iter().filter(|b| b.is_read_only()).map(|b| b.id()).collect();
    if read_only.is_empty() {
        ("200 OK", format!("ok: {} bookies writable\n", b.len()))
    } else {
        ("200 OK", format!("ok: {} bookies, read-only: {}\n", b.len(), read_only.join(", ")))
    }
}

async fn metrics(bookies: &Bookies) -> String {
    let b = bookies.read().await;
    let mut out = String::new();
    let gauges: [Metric; 7] = [
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
        ("folio_bookie_read_only", "1 while the bookie is read-only.", &|b| {
            u64::from(b.is_read_only())
        }),
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
    for (name, help, f) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for bookie in b.iter() {
            let _ = writeln!(out, "{name}{{bookie=\"{}\"}} {}", bookie.id(), f(bookie));
        }
    }
    out
}

/// Binds the endpoint; the caller spawns `serve`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr).await.map_err(|e| format!("binding the HTTP endpoint on {addr}: {e}"))
}
