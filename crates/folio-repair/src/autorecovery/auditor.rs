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
//! How long each bookie was gone is kept in the store (`<root>/autorecovery/absence/<id>`,
//! see [`Absence`]), so an auditor that takes over, or a bookie that keeps coming back for
//! a moment (a crash loop), does not restart the count: a bookie gone for `lost_after` in
//! total within `absence_window` is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use folio_meta::{Expect, MetaError};
use tokio::time::Instant;

use folio_meta::list_all;
use folio_meta::records::{Cookie, LedgerMetadata, LedgerState, Record, Update, update};

use super::Autorecovery;
use super::mark::{MarkedFragment, Reason, ReplicationMark};
use super::worker::{fragments_of, missing_from};
use crate::{During, RepairError};

/// While some bookie is lost, wiped or draining, the ledgers are scanned again this often
/// (a ledger closed or changed since the last scan is marked then).
pub const REMARK_INTERVAL: Duration = Duration::from_secs(60);

/// What the auditor remembers between rounds.
#[derive(Debug, Default)]
pub struct AuditorState {
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
    pub async fn audit_once(&self, st: &mut AuditorState) -> Result<AuditReport, RepairError> {
        let inner = &self.inner;
        let (meta, keys) = (inner.meta.as_ref(), &inner.keys);
        let registered = self.registered().await?;
        let draining = self.draining().await?;
        let maintenance = self.listed_ids(&keys.maintenances()).await?;
        let mut cookies = BTreeMap::new();
        for v in list_all(meta, &keys.cookies()).await? {
            if let Ok(c) = Cookie::decode(&v.key, &v.value) {
                cookies.insert(c.bookie_id.clone(), c.instance_id);
            }
        }
        let mut seen = BTreeMap::new();
        for v in list_all(meta, &keys.bookies_seen()).await? {
            let id = v.key[keys.bookies_seen().len()..].to_string();
            seen.insert(id, String::from_utf8_lossy(&v.value).to_string());
        }
        let mut report = AuditReport::default();
        let absent = self.count_absences(&cookies, &registered).await?;
        let lost_after = inner.config.lost_after.as_millis() as u64;
        for b in cookies.keys().filter(|b| !registered.contains(*b)) {
            if absent.get(b).is_some_and(|ms| *ms >= lost_after) && !maintenance.contains(b) {
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
                .await?;
            }
        }
        if let Some(every) = inner.config.check_interval {
            // When the last check finished is kept in the store, so that auditors taking
            // over from each other keep to the interval (a cluster never checked: now).
            let key = keys.last_check();
            let last: u64 = match meta.get(&key).await? {
                Some(v) => {
                    std::str::from_utf8(&v.value).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
                }
                None => 0,
            };
            if self.now_ms().saturating_sub(last) >= every.as_millis() as u64 {
                report.missing_fragments = self.check_all(&registered, &cookies).await?;
                report.checked = true;
                let stamp = bytes::Bytes::from(self.now_ms().to_string());
                meta.put(&key, stamp, folio_meta::Expect::Any).await?;
            }
        }
        Ok(report)
    }

    /// Adds every fragment holding one of `targets` to its ledger's mark; returns the number
    /// of ledgers whose mark was created or grew.
    async fn mark_ledgers(&self, targets: &BTreeMap<String, Reason>) -> Result<u64, RepairError> {
        let inner = &self.inner;
        let listed = list_all(inner.meta.as_ref(), &inner.keys.ledgers()).await?;
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
    ) -> Result<bool, RepairError> {
        let key = self.inner.keys.under_replicated_ledger(ledger_id);
        let now = self.now_ms();
        let mut changed = false;
        update::<ReplicationMark>(self.inner.meta.as_ref(), &key, |m| {
            let mut m =
                m.cloned().unwrap_or(ReplicationMark { since_ms: now, fragments: Vec::new() });
            changed = m.merge(fragments.iter().cloned());
            Ok(if changed { Update::Write(m) } else { Update::Nothing })
        })
        .await
        .during(|| format!("marking ledger {ledger_id}"))?;
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
    ) -> Result<u64, RepairError> {
        let inner = &self.inner;
        let started = Instant::now();
        let listed_ledgers = list_all(inner.meta.as_ref(), &inner.keys.ledgers()).await?;
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
                for f in fragments_of(&m, b) {
                    if !missing_from(&m, &f, &ranges).is_empty() {
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

/// A bookie's absences, as the auditor counts them (`<root>/autorecovery/absence/<id>`, the
/// text `window_start_ms absent_ms last_gone_ms`): the wall-clock start of the window, the
/// milliseconds it was seen gone in it, and when it was last seen gone. Each round that
/// finds it gone adds the time since `last_gone_ms`, at most two poll intervals (a round
/// that found it back in between, or no auditor at all, counts no more than that).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Absence {
    pub window_start_ms: u64,
    pub absent_ms: u64,
    pub last_gone_ms: u64,
}

impl Absence {
    fn encode(&self) -> bytes::Bytes {
        format!("{} {} {}", self.window_start_ms, self.absent_ms, self.last_gone_ms).into()
    }

    fn decode(b: &[u8]) -> Option<Absence> {
        let s = std::str::from_utf8(b).ok()?;
        let mut it = s.split(' ').map(|x| x.parse::<u64>());
        let (a, b, c) = (it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?);
        it.next().is_none().then_some(Absence { window_start_ms: a, absent_ms: b, last_gone_ms: c })
    }

    /// The record after a round at `now` that found the bookie gone.
    pub fn gone_at(
        prev: Option<Absence>,
        now: u64,
        step_max: u64,
        window: u64,
        lost_after: u64,
    ) -> Absence {
        let fresh = Absence { window_start_ms: now, absent_ms: 0, last_gone_ms: now };
        let Some(mut a) = prev else { return fresh };
        if now.saturating_sub(a.window_start_ms) >= window {
            if a.absent_ms < lost_after {
                return fresh; // a new window; a bookie lost already stays lost
            }
            a.window_start_ms = now;
        }
        let before = a.absent_ms;
        a.absent_ms += now.saturating_sub(a.last_gone_ms).min(step_max);
        a.last_gone_ms = now;
        assert!(a.absent_ms >= before && a.window_start_ms <= now, "an absence only grows");
        a
    }
}

impl Autorecovery {
    /// Updates the stored absences of the known bookies for this round; returns the
    /// milliseconds each bookie gone now was gone within its window.
    async fn count_absences(
        &self,
        cookies: &BTreeMap<String, String>,
        registered: &BTreeSet<String>,
    ) -> Result<BTreeMap<String, u64>, RepairError> {
        let (meta, keys, config) = (self.inner.meta.as_ref(), &self.inner.keys, &self.inner.config);
        let now = self.now_ms();
        let window = config.absence_window.as_millis() as u64;
        let lost_after = config.lost_after.as_millis() as u64;
        let step_max = 2 * config.poll_interval.as_millis() as u64;
        let prefix = keys.absences();
        let mut stored = BTreeMap::new();
        for v in list_all(meta, &prefix).await? {
            stored
                .insert(v.key[prefix.len()..].to_string(), (Absence::decode(&v.value), v.version));
        }
        let mut out = BTreeMap::new();
        for (b, (a, version)) in &stored {
            // Forgotten bookies, and bookies back whose window is over, lose their record.
            let over = a.is_none_or(|a| now.saturating_sub(a.window_start_ms) >= window);
            if !cookies.contains_key(b) || (registered.contains(b) && over) {
                let _ = meta.delete(&keys.absence(b), Expect::Version(*version)).await;
            }
        }
        for b in cookies.keys().filter(|b| !registered.contains(*b)) {
            let (prev, expect) = match stored.get(b) {
                Some((a, version)) => (*a, Expect::Version(*version)),
                None => (None, Expect::Absent),
            };
            let a = Absence::gone_at(prev, now, step_max, window, lost_after);
            match meta.put(&keys.absence(b), a.encode(), expect).await {
                Ok(_) | Err(MetaError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            out.insert(b.clone(), a.absent_ms);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absences_add_up_over_a_window_and_each_step_is_bounded() {
        let (step, window, lost) = (10, 1000, 60);
        let a = Absence::gone_at(None, 100, step, window, lost);
        assert_eq!(a, Absence { window_start_ms: 100, absent_ms: 0, last_gone_ms: 100 });
        let a = Absence::gone_at(Some(a), 105, step, window, lost);
        assert_eq!(a.absent_ms, 5);
        // Back for a long while in between: that gap counts one step at most.
        let a = Absence::gone_at(Some(a), 500, step, window, lost);
        assert_eq!(a.absent_ms, 15);
        // A new window forgets a short absence...
        let b = Absence::gone_at(Some(a), 1200, step, window, lost);
        assert_eq!((b.window_start_ms, b.absent_ms), (1200, 0));
        // ...but not a loss.
        let long = Absence { window_start_ms: 100, absent_ms: 70, last_gone_ms: 1195 };
        let c = Absence::gone_at(Some(long), 1200, step, window, lost);
        assert_eq!((c.window_start_ms, c.absent_ms), (1200, 75));
        assert_eq!(Absence::decode(&c.encode()), Some(c));
        assert_eq!(Absence::decode(b"1 2"), None);
        assert_eq!(Absence::decode(b"1 2 3 4"), None);
    }
}
