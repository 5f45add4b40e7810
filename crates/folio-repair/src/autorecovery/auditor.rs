//! The auditor: finds ledgers with copies to restore and marks them.
//!
//! Each round (while this process holds the auditor claim):
//! 1. Bookies known to the cluster (their cookies) are compared with the registrations: a
//!    bookie unregistered for `lost_after` is **lost** (one in maintenance,
//!    `<root>/autorecovery/maintenance/<id>`, is not); a registered bookie whose cookie
//!    instance differs from the one last seen was **wiped** (formatted); a decommission
//!    request names a bookie to **drain**.
//! 2. When that set changed, or every `REMARK_INTERVAL` while it is not empty, every
//!    ledger's metadata is read and each fragment holding one of those bookies is added to
//!    the ledger's mark (a compare-and-set merge; the first mark's time is kept).
//! 3. Every `check_interval` (its last run kept at `<root>/autorecovery/last-check`), the
//!    periodic check asks each registered bookie of each
//!    ledger's ensembles for the entries it holds (`ListEntries`, paced to
//!    `check_requests_per_s`) and marks fragments whose write-set entries are missing.
//!
//! "Gone since" lives in memory: an auditor that takes over starts its own clock, which
//! only ever delays a loss, never invents one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use folio_meta::list_all;
use folio_meta::records::{Cookie, LedgerMetadata, LedgerState, Record, Update, update};

use super::mark::{MarkedFragment, Reason, ReplicationMark};
use super::worker::{entries_on, fragments_of, listed};
use super::{Autorecovery, now_ms};

/// While some bookie is lost, wiped or draining, the ledgers are scanned again this often
/// (a ledger closed or changed since the last scan is marked then).
pub const REMARK_INTERVAL: Duration = Duration::from_secs(60);

/// What the auditor remembers between rounds.
#[derive(Debug, Default)]
pub struct AuditorState {
    /// Known bookies not registered, and since when this auditor has seen them so.
    gone_since: HashMap<String, Instant>,
    /// The bookies the last scan marked for, with why.
    marked_for: BTreeMap<String, Reason>,
    last_scan: Option<Instant>,
}

/// What one audit round found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditReport {
    pub lost: Vec<String>,
    pub wiped: Vec<String>,
    pub draining: Vec<String>,
    /// Ledgers whose mark was created or grew.
    pub ledgers_marked: u64,
    /// The periodic check ran (and how many fragments it found missing entries in).
    pub checked: bool,
    pub missing_fragments: u64,
}

impl Autorecovery {
    /// One auditor round (see the module comment).
    pub async fn audit_once(&self, st: &mut AuditorState) -> Result<AuditReport, String> {
        let inner = &self.inner;
        let (meta, keys) = (inner.meta.as_ref(), &inner.keys);
        let err = |e: folio_meta::MetaError| e.to_string();
        let registered = self.registered().await?;
        let draining = self.draining().await?;
        let maintenance = self.listed_ids(&keys.maintenances()).await?;
        let mut cookies = BTreeMap::new();
        for v in list_all(meta, &keys.cookies()).await.map_err(err)? {
            if let Ok(c) = Cookie::decode(&v.key, &v.value) {
                cookies.insert(c.bookie_id.clone(), c.instance_id);
            }
        }
        let mut seen = BTreeMap::new();
        for v in list_all(meta, &keys.bookies_seen()).await.map_err(err)? {
            let id = v.key[keys.bookies_seen().len()..].to_string();
            seen.insert(id, String::from_utf8_lossy(&v.value).to_string());
        }
        let mut report = AuditReport::default();
        let now = Instant::now();
        st.gone_since.retain(|b, _| !registered.contains(b) && cookies.contains_key(b));
        for b in cookies.keys().filter(|b| !registered.contains(*b)) {
            let since = *st.gone_since.entry(b.clone()).or_insert(now);
            if now.duration_since(since) >= inner.config.lost_after && !maintenance.contains(b) {
                report.lost.push(b.clone());
            }
        }
        for (b, instance) in &cookies {
            if registered.contains(b) && seen.get(b).is_some_and(|s| s != instance) {
                report.wiped.push(b.clone());
            }
        }
        report.draining = draining.iter().cloned().collect();
        let mut targets: BTreeMap<String, Reason> = BTreeMap::new();
        for b in &report.lost {
            targets.insert(b.clone(), Reason::Lost);
        }
        for b in &report.wiped {
            targets.insert(b.clone(), Reason::Wiped);
        }
        for b in &report.draining {
            targets.insert(b.clone(), Reason::Decommission);
        }
        let rescan = !targets.is_empty()
            && (targets != st.marked_for
                || st.last_scan.is_none_or(|t| t.elapsed() >= REMARK_INTERVAL)
                || !report.wiped.is_empty());
        if rescan {
            for (b, why) in &targets {
                if st.marked_for.get(b) != Some(why) {
                    tracing::warn!(bookie = %b, reason = why.name(), "auditor: marking every ledger with copies on this bookie as under-replicated");
                }
            }
            report.ledgers_marked = self.mark_ledgers(&targets).await?;
            st.last_scan = Some(Instant::now());
        }
        st.marked_for = targets;
        // The wiped bookies are marked: now the instance they run is the one seen.
        for (b, instance) in &cookies {
            if registered.contains(b) && seen.get(b) != Some(instance) {
                meta.put(
                    &keys.bookie_seen(b),
                    bytes::Bytes::from(instance.clone()),
                    folio_meta::Expect::Any,
                )
                .await
                .map_err(err)?;
            }
        }
        if let Some(every) = inner.config.check_interval {
            // When the last check finished is kept in the store, so that auditors taking
            // over from each other keep to the interval (a cluster never checked: now).
            let key = keys.last_check();
            let last: u64 = match meta.get(&key).await.map_err(err)? {
                Some(v) => {
                    std::str::from_utf8(&v.value).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
                }
                None => 0,
            };
            if now_ms().saturating_sub(last) >= every.as_millis() as u64 {
                report.missing_fragments = self.check_all(&registered, &cookies).await?;
                report.checked = true;
                let stamp = bytes::Bytes::from(now_ms().to_string());
                meta.put(&key, stamp, folio_meta::Expect::Any).await.map_err(err)?;
            }
        }
        Ok(report)
    }

    /// Adds every fragment holding one of `targets` to its ledger's mark; returns the number
    /// of ledgers whose mark was created or grew.
    async fn mark_ledgers(&self, targets: &BTreeMap<String, Reason>) -> Result<u64, String> {
        let inner = &self.inner;
        let listed = list_all(inner.meta.as_ref(), &inner.keys.ledgers())
            .await
            .map_err(|e| e.to_string())?;
        let mut marked = 0;
        for v in listed {
            let Some(id) = inner.keys.parse_ledger(&v.key) else { continue };
            let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
            let mut found = Vec::new();
            for (b, why) in targets {
                for f in fragments_of(&m, b) {
                    found.push(MarkedFragment {
                        first_entry: f.first,
                        bookie: b.clone(),
                        reason: *why,
                    });
                }
            }
            if !found.is_empty() && self.mark(id, found).await? {
                marked += 1;
            }
        }
        Ok(marked)
    }

    /// Merges `fragments` into `ledger_id`'s mark (creating it); whether it changed.
    pub async fn mark(
        &self,
        ledger_id: u64,
        fragments: Vec<MarkedFragment>,
    ) -> Result<bool, String> {
        let key = self.inner.keys.under_replicated_ledger(ledger_id);
        let mut changed = false;
        update::<ReplicationMark>(self.inner.meta.as_ref(), &key, |m| {
            let mut m =
                m.cloned().unwrap_or(ReplicationMark { since_ms: now_ms(), fragments: Vec::new() });
            changed = m.merge(fragments.iter().cloned());
            Ok(if changed { Update::Write(m) } else { Update::Nothing })
        })
        .await
        .map_err(|e| format!("marking ledger {ledger_id}: {e}"))?;
        if changed {
            self.inner.stats.ledgers_marked.fetch_add(1, Relaxed);
        }
        Ok(changed)
    }

    /// The periodic check: every registered bookie of every ledger lists what it holds;
    /// fragments with write-set entries missing are marked. Returns the fragments marked.
    async fn check_all(
        &self,
        registered: &BTreeSet<String>,
        cookies: &BTreeMap<String, String>,
    ) -> Result<u64, String> {
        let inner = &self.inner;
        let started = Instant::now();
        let listed_ledgers = list_all(inner.meta.as_ref(), &inner.keys.ledgers())
            .await
            .map_err(|e| e.to_string())?;
        let (mut requests, mut missing_fragments) = (0u64, 0u64);
        let rate = f64::from(inner.config.check_requests_per_s.max(1));
        for v in listed_ledgers {
            let Some(id) = inner.keys.parse_ledger(&v.key) else { continue };
            let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
            if m.state == LedgerState::InRecovery {
                continue;
            }
            let bookies: BTreeSet<&String> = m.ensembles.values().flatten().collect();
            let mut found = Vec::new();
            for b in bookies {
                if !registered.contains(b) {
                    // Gone: lost-bookie detection handles it, unless nothing knows it any
                    // more (no cookie): then it is lost now.
                    if !cookies.contains_key(b) {
                        for f in fragments_of(&m, b) {
                            found.push(MarkedFragment {
                                first_entry: f.first,
                                bookie: b.clone(),
                                reason: Reason::Lost,
                            });
                        }
                    }
                    continue;
                }
                let due = Duration::from_secs_f64(requests as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
                requests += 1;
                let ranges = match inner.client.list_entries(b, id).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::debug!(ledger = id, bookie = %b, error = %e, "check: listing failed; next check");
                        continue;
                    }
                };
                let (e, w) = (m.ensemble_size as usize, m.write_quorum as usize);
                for f in fragments_of(&m, b) {
                    let Some(last) = f.last else { continue }; // still being written
                    if entries_on(f.first, last, f.pos, e, w).any(|x| !listed(&ranges, x)) {
                        found.push(MarkedFragment {
                            first_entry: f.first,
                            bookie: b.clone(),
                            reason: Reason::Missing,
                        });
                    }
                }
            }
            if !found.is_empty() {
                missing_fragments += found.len() as u64;
                tracing::warn!(
                    ledger = id,
                    fragments = found.len(),
                    "check: copies missing; marking"
                );
                self.mark(id, found).await?;
            }
        }
        Ok(missing_fragments)
    }
}
