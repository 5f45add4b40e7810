//! `folio audit`: accounts for every ledger and every stored byte of a cluster.
//!
//! It walks the metadata store (topics, deletion markers, logs and their chains, the trash,
//! ledger metadata) and asks every registered bookie what it stores (LIST_LEDGERS), then
//! puts each ledger, and each bookie's bytes of it, in exactly one class:
//!
//! | class             | meaning                                                             |
//! |-------------------|---------------------------------------------------------------------|
//! | `live`            | in the chain of a log whose topic exists (or of a non-Kafka log), or its compaction's output, or a plain ledger with no owner tag |
//! | `trashed`         | named by a trash record: the deleter will delete it (age, last error) |
//! | `being-deleted`   | in the chain of a log whose topic has a deletion marker              |
//! | `orphan-metadata` | its owner tag names a log, but no chain and no trash record names it |
//! | `awaiting-gc`     | stored on a bookie, deleted from the metadata (or closed and not in that bookie's ensembles) since the bookie's GC last listed the metadata: its next pass drops it; the age is the time since that listing |
//! | `orphan-data`     | stored on a bookie, but not in the metadata, or not in that bookie's ensembles, and no GC pass will drop it (an open ledger's stray copy) |
//! | `stray-log`       | in the chain of a Kafka partition log whose topic id exists nowhere |
//!
//! Orphans are leaks (L1); data awaiting GC is one only once it has waited longer than the
//! grace period (the bookie's GC is not running). A copy not in the ensembles of a ledger
//! with an under-replication mark is autorecovery's copy in progress: `live`. `repair`
//! moves orphan metadata into the trash under the log its owner tag names (the deleter
//! then checks that tag, as for every record) and deletes stray logs through the trash;
//! orphan data needs nothing but the bookies' GC.
//!
//! Besides ledgers, a closed ledger's persisted offset index (`offset-index/<ledger>`) is
//! an orphan once no chain and no trash record names its ledger (the deleter removes it
//! before the trash record, so none should be left); `repair` deletes it (it is a cache).
//! Indexes are listed before the chains, so an index written by a rollover during the
//! audit is never taken for an orphan.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use folio_log::records::{LogRecord, TrashRecord};
use folio_log::{LogEnv, OWNER_TAG};
use folio_meta::records::{BookieRegistration, LedgerMetadata, Record};
use folio_meta::{Expect, MetaError, list_all};
use folio_proto::wire::LedgerUsage;
use uuid::Uuid;

use crate::domain::topics::{TopicRecord, parse_log_name};

/// Where a ledger (or a bookie's copy of it) belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Live,
    Trashed,
    BeingDeleted,
    OrphanMetadata,
    AwaitingGc,
    OrphanData,
    StrayLog,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 7] = [
        Class::Live,
        Class::Trashed,
        Class::BeingDeleted,
        Class::OrphanMetadata,
        Class::AwaitingGc,
        Class::OrphanData,
        Class::StrayLog,
    ];

    /// The class's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Live => "live",
            Class::Trashed => "trashed",
            Class::BeingDeleted => "being-deleted",
            Class::OrphanMetadata => "orphan-metadata",
            Class::AwaitingGc => "awaiting-gc",
            Class::OrphanData => "orphan-data",
            Class::StrayLog => "stray-log",
        }
    }

    /// A leak: something nobody will ever delete on their own.
    pub fn is_orphan(self) -> bool {
        matches!(self, Class::OrphanMetadata | Class::OrphanData | Class::StrayLog)
    }

    /// Counted as a leak once older than the grace period: orphans, and data whose GC is
    /// overdue.
    pub fn leaks_after_grace(self) -> bool {
        self.is_orphan() || self == Class::AwaitingGc
    }
}

/// One ledger the audit found outside `live`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub class: Class,
    pub ledger_id: u64,
    /// The log that owns it (chain, trash record or owner tag), if any.
    pub log: String,
    /// How old it is (ledger creation, or trash record), when known.
    pub age_ms: Option<u64>,
    /// Bytes the bookies store of it (for orphan data: the bookie named in `detail`).
    pub bytes: u64,
    pub detail: String,
}

/// What the audit found.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    /// Per class: ledgers and bytes stored on the bookies.
    pub totals: BTreeMap<Class, (u64, u64)>,
    /// Every ledger not `live`.
    pub findings: Vec<Finding>,
    /// Bookies listed, and those that could not be (id, why): their bytes are unknown.
    pub bookies_listed: Vec<String>,
    pub bookies_unreachable: Vec<(String, String)>,
    /// Stray logs (Kafka partition logs whose topic id exists nowhere).
    pub stray_logs: Vec<String>,
    /// Ledgers whose persisted offset index outlived their place in a chain or the trash.
    pub orphan_offset_indexes: Vec<u64>,
}

impl Audit {
    /// Orphans, and data awaiting GC, older than `grace` (those without an age count).
    pub fn orphans_older_than(&self, grace: Duration) -> Vec<&Finding> {
        let grace = grace.as_millis() as u64;
        self.findings
            .iter()
            .filter(|f| f.class.leaks_after_grace() && f.age_ms.is_none_or(|a| a >= grace))
            .collect()
    }

    /// Leaks of any kind: orphans older than `grace` and orphan offset indexes.
    pub fn leaks_older_than(&self, grace: Duration) -> usize {
        self.orphans_older_than(grace).len() + self.orphan_offset_indexes.len()
    }

    /// Counts one ledger (or copy) of class `c` holding `bytes`.
    fn count(&mut self, c: Class, bytes: u64) {
        let t = self.totals.entry(c).or_default();
        t.0 += 1;
        t.1 += bytes;
    }

    /// Ledgers and bytes of class `c`.
    pub fn total(&self, c: Class) -> (u64, u64) {
        self.totals.get(&c).copied().unwrap_or_default()
    }

    /// The human table: one line per class, then every finding.
    pub fn table(&self) -> String {
        let mut out = format!("{:<16} {:>8} {:>14}\n", "class", "ledgers", "bytes");
        for c in Class::ALL {
            let (n, b) = self.total(c);
            let _ = writeln!(out, "{:<16} {n:>8} {b:>14}", c.name());
        }
        let _ = writeln!(
            out,
            "bookies: {} listed{}",
            self.bookies_listed.len(),
            if self.bookies_unreachable.is_empty() {
                String::new()
            } else {
                format!(
                    ", unreachable (their bytes unknown): {}",
                    self.bookies_unreachable
                        .iter()
                        .map(|(b, e)| format!("{b} ({e})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        if !self.orphan_offset_indexes.is_empty() {
            let _ = writeln!(
                out,
                "orphan offset indexes (ledgers in no chain and not in the trash): {:?}",
                self.orphan_offset_indexes
            );
        }
        for f in &self.findings {
            let age = f
                .age_ms
                .map_or("age unknown".to_string(), |a| format!("{:.1} s old", a as f64 / 1000.0));
            let _ = writeln!(
                out,
                "{:<16} ledger {} log {:?} {} {} bytes: {}",
                f.class.name(),
                f.ledger_id,
                f.log,
                age,
                f.bytes,
                f.detail
            );
        }
        out
    }

    /// Prometheus gauges: ledgers and bytes per class.
    pub fn gauges(&self) -> String {
        let mut out = String::from(
            "# HELP folio_audit_ledgers Ledgers per class at the last audit (orphan-data: copies).\n# TYPE folio_audit_ledgers gauge\n",
        );
        for c in Class::ALL {
            let (n, _) = self.total(c);
            let _ = writeln!(out, "folio_audit_ledgers{{class=\"{}\"}} {n}", c.name());
        }
        out.push_str("# HELP folio_audit_bytes Bytes the bookies store per class at the last audit.\n# TYPE folio_audit_bytes gauge\n");
        for c in Class::ALL {
            let (_, b) = self.total(c);
            let _ = writeln!(out, "folio_audit_bytes{{class=\"{}\"}} {b}", c.name());
        }
        let _ = writeln!(
            out,
            "# HELP folio_audit_bookies_unreachable Bookies the last audit could not list.\n# TYPE folio_audit_bookies_unreachable gauge\nfolio_audit_bookies_unreachable {}",
            self.bookies_unreachable.len()
        );
        let _ = writeln!(
            out,
            "# HELP folio_audit_orphan_offset_indexes Offset indexes of ledgers in no chain and not in the trash.\n# TYPE folio_audit_orphan_offset_indexes gauge\nfolio_audit_orphan_offset_indexes {}",
            self.orphan_offset_indexes.len()
        );
        out
    }

    /// The same as JSON, for scripts.
    pub fn json(&self) -> String {
        let mut out = String::from("{\"classes\":{");
        for (i, c) in Class::ALL.iter().enumerate() {
            let (n, b) = self.total(*c);
            let _ = write!(
                out,
                "{}\"{}\":{{\"ledgers\":{n},\"bytes\":{b}}}",
                if i > 0 { "," } else { "" },
                c.name()
            );
        }
        out.push_str("},\"bookies_listed\":[");
        out.push_str(
            &self.bookies_listed.iter().map(|b| json_str(b)).collect::<Vec<_>>().join(","),
        );
        out.push_str("],\"bookies_unreachable\":[");
        out.push_str(
            &self
                .bookies_unreachable
                .iter()
                .map(|(b, e)| format!("{{\"bookie\":{},\"error\":{}}}", json_str(b), json_str(e)))
                .collect::<Vec<_>>()
                .join(","),
        );
        out.push_str("],\"orphan_offset_indexes\":[");
        out.push_str(
            &self.orphan_offset_indexes.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(","),
        );
        out.push_str("],\"findings\":[");
        for (i, f) in self.findings.iter().enumerate() {
            let _ = write!(
                out,
                "{}\n{{\"class\":\"{}\",\"ledger\":{},\"log\":{},\"age_ms\":{},\"bytes\":{},\"detail\":{}}}",
                if i > 0 { "," } else { "" },
                f.class.name(),
                f.ledger_id,
                json_str(&f.log),
                f.age_ms.map_or("null".to_string(), |a| a.to_string()),
                f.bytes,
                json_str(&f.detail)
            );
        }
        out.push_str("\n]}\n");
        out
    }
}

/// A JSON string literal (names here come from the store and may hold anything).
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// How long listing one bookie may take before the audit counts it unreachable.
pub const BOOKIE_LISTING_TIMEOUT: Duration = Duration::from_secs(30);

/// What one bookie stores, and since when (wall ms) its GC has not listed the metadata.
type Listing = (Vec<LedgerUsage>, u64);

/// What each registered bookie stores: bookie id → ledgers, or why it could not be listed.
async fn list_bookies(env: &LogEnv) -> Result<Vec<(String, Result<Listing, String>)>, MetaError> {
    let mut regs = Vec::new();
    for prefix in [env.keys.bookies_writable(), env.keys.bookies_readonly()] {
        for v in list_all(env.meta.as_ref(), &prefix).await? {
            if let Ok(r) = BookieRegistration::decode(&v.key, &v.value) {
                regs.push(r);
            }
        }
    }
    let mut out = Vec::new();
    for r in regs {
        let listing = async {
            let l = env.client.stored_on(&r.bookie_id).await.map_err(|e| e.to_string())?;
            Ok((l.ledgers, l.gc_listed_ms))
        };
        let listing = match tokio::time::timeout(BOOKIE_LISTING_TIMEOUT, listing).await {
            Ok(r) => r,
            Err(_) => Err("timed out".to_string()),
        };
        out.push((r.bookie_id, listing));
    }
    Ok(out)
}

/// Every chained ledger → (its log, the log's class), and the stray logs. A compaction's
/// output counts as chained: its log record names it until it is swapped in.
async fn chains(
    env: &LogEnv,
    topic_ids: &std::collections::HashSet<Uuid>,
    deleting: &std::collections::HashSet<Uuid>,
) -> Result<(HashMap<u64, (String, Class)>, Vec<String>), MetaError> {
    let keys = &env.keys;
    let mut chained: HashMap<u64, (String, Class)> = HashMap::new();
    let mut stray_logs = Vec::new();
    for v in list_all(env.meta.as_ref(), &keys.logs()).await? {
        let Some(name) = keys.parse_log(&v.key) else { continue };
        let Ok(record) = LogRecord::decode(&v.key, &v.value) else { continue };
        let class = match parse_log_name(name) {
            None => Class::Live,
            Some((id, _)) if topic_ids.contains(&id) => Class::Live,
            Some((id, _)) if deleting.contains(&id) => Class::BeingDeleted,
            Some(_) => {
                stray_logs.push(name.to_string());
                Class::StrayLog
            }
        };
        let output = record.properties.get(folio_log::COMPACTION_OUTPUT);
        let output = output.and_then(|v| v.parse::<u64>().ok());
        for id in record.ledgers.iter().map(|l| l.ledger_id).chain(output) {
            chained.insert(id, (name.to_string(), class));
        }
    }
    Ok((chained, stray_logs))
}

/// Runs the audit once against the metadata store and the registered bookies.
pub async fn run(env: &LogEnv) -> Result<Audit, MetaError> {
    let now = env.now_ms();
    let keys = &env.keys;
    // Offset indexes first (see the module doc).
    let mut indexed = offset_indexes(env).await?;
    // Topics and deletions in progress, by topic id.
    let mut topic_ids = std::collections::HashSet::new();
    for v in list_all(env.meta.as_ref(), &keys.topics()).await? {
        if let Ok(t) = TopicRecord::decode(&v.key, &v.value) {
            topic_ids.insert(t.id);
        }
    }
    let deleting: std::collections::HashSet<Uuid> =
        list_all(env.meta.as_ref(), &keys.topic_deletions())
            .await?
            .iter()
            .filter_map(|v| Uuid::try_parse(&v.key[keys.topic_deletions().len()..]).ok())
            .collect();
    let (chained, stray_logs) = chains(env, &topic_ids, &deleting).await?;
    let trashed = trash_records(env).await?;
    indexed.retain(|l| !chained.contains_key(l) && !trashed.contains_key(l));
    // What the bookies hold.
    let mut audit = Audit { stray_logs, orphan_offset_indexes: indexed, ..Audit::default() };
    let (stored, gc_since) = stored_copies(env, &mut audit).await?;
    // Ledgers autorecovery is copying: a copy outside their ensembles is one in progress.
    let prefix = keys.under_replicated();
    let marked: std::collections::HashSet<u64> = list_all(env.meta.as_ref(), &prefix)
        .await?
        .iter()
        .filter_map(|v| keys.parse_under_replicated(&v.key))
        .collect();
    let awaiting = |bookie: &str| awaiting_gc(&gc_since, now, bookie);
    // Every ledger in the metadata, then every stored copy of a ledger that is not.
    let mut known = std::collections::HashSet::new();
    for v in list_all(env.meta.as_ref(), &keys.ledgers()).await? {
        let Some(id) = keys.parse_ledger(&v.key) else { continue };
        let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
        known.insert(id);
        let tag = m.custom.get(OWNER_TAG).map(|b| String::from_utf8_lossy(b).into_owned());
        let copies = stored.get(&id).cloned().unwrap_or_default();
        let (in_ensemble, extra): (Vec<_>, Vec<_>) = copies
            .into_iter()
            .partition(|(b, _)| m.ensembles.values().any(|e| e.iter().any(|x| x == b)));
        let bytes: u64 = in_ensemble.iter().map(|(_, b)| b).sum();
        let age = Some(now.saturating_sub(m.ctime_ms));
        let (class, log, age_ms, detail) = if let Some(t) = trashed.get(&id) {
            let why = if t.last_error.is_empty() {
                format!("trashed ({}), waiting for the deleter", t.reason)
            } else {
                format!("trashed ({}), last attempt failed: {}", t.reason, t.last_error)
            };
            (Class::Trashed, t.log.clone(), Some(now.saturating_sub(t.time_ms)), why)
        } else if let Some((log, class)) = chained.get(&id) {
            let why = match class {
                Class::BeingDeleted => "its topic is being deleted".to_string(),
                Class::StrayLog => "in the chain of a log whose topic exists nowhere".to_string(),
                _ => String::new(),
            };
            (*class, log.clone(), age, why)
        } else if let Some(tag) = tag {
            (Class::OrphanMetadata, tag, age, "in no chain and not in the trash".to_string())
        } else {
            (Class::Live, String::new(), age, String::new())
        };
        audit.count(class, bytes);
        if class != Class::Live {
            audit.findings.push(Finding { class, ledger_id: id, log, age_ms, bytes, detail });
        }
        for (bookie, b) in extra {
            if marked.contains(&id) {
                audit.count(Class::Live, b); // autorecovery's copy in progress
            } else if m.state == folio_meta::records::LedgerState::Closed {
                let (age_ms, detail) = awaiting(&bookie);
                let detail = format!("closed, not in its ensembles; {detail}");
                push_copy(&mut audit, Class::AwaitingGc, id, b, age_ms, detail);
            } else {
                let detail = format!("on bookie {bookie}, which none of its ensembles names");
                push_copy(&mut audit, Class::OrphanData, id, b, None, detail);
            }
        }
    }
    let mut unknown: Vec<(&u64, &Vec<(String, u64)>)> =
        stored.iter().filter(|(id, _)| !known.contains(id)).collect();
    unknown.sort_by_key(|(id, _)| **id);
    for (id, copies) in unknown {
        for (bookie, b) in copies {
            let (age_ms, detail) = awaiting(bookie);
            let detail = format!("deleted from the metadata; {detail}");
            push_copy(&mut audit, Class::AwaitingGc, *id, *b, age_ms, detail);
        }
    }
    Ok(audit)
}

/// Every bookie's copies (ledger → (bookie, bytes)), and since when each bookie's GC has
/// not listed the metadata (0: unknown); the bookies listed or not go into `audit`.
async fn stored_copies(
    env: &LogEnv,
    audit: &mut Audit,
) -> Result<(HashMap<u64, Vec<(String, u64)>>, HashMap<String, u64>), MetaError> {
    let mut stored: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    let mut gc_since: HashMap<String, u64> = HashMap::new();
    for (bookie, listing) in list_bookies(env).await? {
        match listing {
            Ok((ledgers, since)) => {
                gc_since.insert(bookie.clone(), since);
                for l in ledgers {
                    stored.entry(l.ledger_id).or_default().push((bookie.clone(), l.bytes));
                }
                audit.bookies_listed.push(bookie);
            }
            Err(e) => audit.bookies_unreachable.push((bookie, e)),
        }
    }
    Ok((stored, gc_since))
}

/// The age and detail of a copy on `bookie` that its next GC pass drops.
fn awaiting_gc(gc_since: &HashMap<String, u64>, now: u64, bookie: &str) -> (Option<u64>, String) {
    match gc_since.get(bookie).copied().filter(|s| *s > 0) {
        Some(since) => (
            Some(now.saturating_sub(since)),
            format!(
                "on bookie {bookie}, whose GC has not listed the metadata for {:.1} s; its next pass drops it",
                now.saturating_sub(since) as f64 / 1000.0
            ),
        ),
        None => (None, format!("on bookie {bookie}, which does not say when its GC last ran")),
    }
}

/// The ledgers that have a persisted offset index.
async fn offset_indexes(env: &LogEnv) -> Result<Vec<u64>, MetaError> {
    let prefix = env.keys.offset_indexes();
    let listed = list_all(env.meta.as_ref(), &prefix).await?;
    Ok(listed.iter().filter_map(|v| v.key[prefix.len()..].parse().ok()).collect())
}

/// Every trash record, by ledger.
async fn trash_records(env: &LogEnv) -> Result<HashMap<u64, TrashRecord>, MetaError> {
    let mut trashed = HashMap::new();
    for v in list_all(env.meta.as_ref(), &env.keys.trash()).await? {
        if let Ok(t) = TrashRecord::decode(&v.key, &v.value) {
            trashed.insert(t.ledger_id, t);
        }
    }
    Ok(trashed)
}

/// A bookie's copy outside the metadata (`AwaitingGc` or `OrphanData`).
fn push_copy(
    audit: &mut Audit,
    class: Class,
    ledger_id: u64,
    bytes: u64,
    age_ms: Option<u64>,
    detail: String,
) {
    audit.count(class, bytes);
    audit.findings.push(Finding { class, ledger_id, log: String::new(), age_ms, bytes, detail });
}

/// Moves the orphans of `audit` older than `grace` into the trash: orphan metadata under
/// the log its owner tag names (the deleter checks the tag again), stray logs through
/// `delete_log`. Returns what it did, a line each.
pub async fn repair(env: &LogEnv, audit: &Audit, grace: Duration) -> Vec<String> {
    let mut done = Vec::new();
    for f in audit.orphans_older_than(grace) {
        if f.class != Class::OrphanMetadata {
            continue;
        }
        let t = TrashRecord::new(f.ledger_id, &f.log, "audit: orphan metadata", env.now_ms());
        let line = match env
            .meta
            .put(&env.keys.trash_ledger(f.ledger_id), t.encode(), Expect::Absent)
            .await
        {
            Ok(_) => format!("ledger {}: moved to the trash (log {:?})", f.ledger_id, f.log),
            Err(MetaError::Conflict { .. }) => {
                format!("ledger {}: already in the trash", f.ledger_id)
            }
            Err(e) => format!("ledger {}: not moved: {e}", f.ledger_id),
        };
        done.push(line);
    }
    for ledger in &audit.orphan_offset_indexes {
        let line = match env.meta.delete(&env.keys.offset_index(*ledger), Expect::Any).await {
            Ok(_) => format!("offset index of ledger {ledger}: deleted"),
            Err(e) => format!("offset index of ledger {ledger}: not deleted: {e}"),
        };
        done.push(line);
    }
    for log in &audit.stray_logs {
        let line = match folio_log::trash::delete_log(env, log, "audit: stray log").await {
            Ok(()) => format!("stray log {log}: its ledgers moved to the trash"),
            Err(e) => format!("stray log {log}: not deleted: {e}"),
        };
        done.push(line);
    }
    done
}
