//! `GET /` on a bookie's own HTTP port (a process with no broker, so no console): one page,
//! rendered here, of what an operator asks a bookie: is it writable, how full is its disk,
//! what did GC last do, how busy is its journal. No script; it links `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::admin::Bookies;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (n as f64, 0);
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

/// The page for the bookies of this process.
pub async fn render(bookies: &Bookies) -> String {
    let mut rows = String::new();
    for b in bookies.read().await.iter() {
        let state = match b.read_only_reason() {
            Some(why) => format!("<b class=bad>read-only</b> ({})", esc(&why)),
            None if b.is_read_only() => "<b class=bad>read-only</b>".to_string(),
            None => "<b class=ok>writable</b>".to_string(),
        };
        let (total, free) = b.disk_space().unwrap_or((0, 0));
        let used = total.saturating_sub(free);
        let percent = if total > 0 { used as f64 * 100.0 / total as f64 } else { 0.0 };
        let gc = b.gc_status();
        let journal = b.storage().journal_stats();
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{state}</td><td>{} of {} ({percent:.1} %; read-only at {:.0} %)\
             </td><td>{} passes, {} failed, {} given back</td><td>{} commits, {}</td></tr>",
            esc(b.id()),
            bytes(used),
            bytes(total),
            b.disk_usage_threshold() * 100.0,
            gc.passes,
            gc.failures,
            bytes(gc.bytes_reclaimed_total),
            journal.n_commits.load(Ordering::Relaxed),
            bytes(journal.bytes_committed.load(Ordering::Relaxed)),
        );
    }
    if rows.is_empty() {
        rows.push_str("<tr><td colspan=5>no bookie in this process</td></tr>");
    }
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Folio bookie</title>\
         <link rel=icon href=\"data:,\"><style>body{{font:14px system-ui,sans-serif;margin:24px}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ddd;padding:6px 10px;\
         text-align:left}}.bad{{color:#c0362c}}.ok{{color:#1b7f3b}}</style></head><body>\
         <h1>Folio bookie</h1><p>The console runs with a broker; this port serves the bookie's \
         <a href=/metrics>/metrics</a> and <a href=/health>/health</a>.</p><table \
         data-testid=bookies><tr><th>bookie</th><th>state</th><th>disk</th><th>GC</th>\
         <th>journal</th></tr>{rows}</table></body></html>"
    )
}
