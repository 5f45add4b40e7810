//! What the admin routes and the console share: the bookies this process runs, a GC pass
//! on them, and topic deletions as JSON.

use std::fmt::Write as _;
use std::sync::Arc;

use folio_bookie::bookie::Bookie;
use tokio::sync::RwLock;

/// The bookies this process runs (none in a broker-only process).
pub type Bookies = Arc<RwLock<Vec<Bookie>>>;

/// Runs a GC pass on every bookie now; one line per bookie.
pub(crate) async fn gc_now(bookies: &Bookies) -> String {
    let mut out = String::new();
    for b in bookies.read().await.iter() {
        match b.gc_now().await {
            Ok(r) => {
                let _ = writeln!(
                    out,
                    "{}: dropped ledgers {:?}, over-replicated {:?}, deleted logs {:?}, compacted logs {:?}, {} bytes reclaimed, {} logs kept",
                    b.id(),
                    r.ledgers_dropped,
                    r.over_replicated_dropped,
                    r.logs_deleted,
                    r.logs_compacted,
                    r.bytes_reclaimed,
                    r.logs_kept.len()
                );
            }
            Err(e) => {
                let _ = writeln!(out, "{}: GC failed: {e}", b.id());
            }
        }
    }
    out
}

/// Topic deletions in progress as JSON: one object per topic with its partitions' states,
/// the partitions left, the ledgers in the trash and the bytes not yet reclaimed.
pub(crate) fn deletions_json(d: &[folio_broker::deletion::DeletionProgress]) -> String {
    let mut out = String::from("{\"deletions\":[");
    for (i, t) in d.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Topic names are `[a-zA-Z0-9._-]` (validated on create): nothing to escape.
        let _ = write!(
            out,
            "\n{{\"topic\":\"{}\",\"topic_id\":\"{}\",\"marker\":{},\"requested_ms\":{},\"partitions_left\":{},\"ledgers_in_trash\":{},\"bytes_not_reclaimed\":{},\"partitions\":[",
            t.name,
            t.id,
            t.marker,
            t.requested_ms,
            t.partitions_left(),
            t.ledgers_in_trash,
            t.bytes_not_reclaimed
        );
        for (j, (p, s)) in t.partitions.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(out, "{{\"partition\":{p},\"state\":\"{}\"}}", s.name());
        }
        out.push_str("]}");
    }
    out.push_str("\n]}\n");
    out
}
