//! Autorecovery, garbage collection and tombstones in the simulator (#45).
//!
//! Two autorecovery processes (auditor candidates and replication workers, on short
//! intervals and the run's clock) run beside the workloads from the start, so bookies the
//! nemesis keeps down past `lost_after`, or wipes, are re-replicated while writers write,
//! logs roll and the deleter deletes; the bookies collect every 5 s. What is checked:
//!
//! - **at every swap** ([`watch_swaps`]): when a closed ledger's fragment names a new bookie
//!   (a worker's compare-and-set), that bookie holds every entry of the fragment its
//!   position is in the write set of, at once (a copy the new bookie's GC took for
//!   over-replication half-way would lack its first entries);
//! - **no deleted id is ever written again** (`World::check_tombstones`, every nemesis
//!   step): no bookie holds a ledger whose id it tombstoned; the [`zombie`] workload deletes
//!   ledgers under their writers and adds on across the bookies' GC passes (a crash right
//!   after one replays those adds);
//! - **a copy being made is never collected**: the worker's check after its copy finds
//!   nothing missing (its `invariant` log line), unless the target is journal-less or was
//!   wiped (it may lose what it acknowledged);
//! - **copies whole after faults stop** ([`copies_whole`], a liveness bound): within
//!   [`COPIES_BOUND`] autorecovery has nothing marked and two periodic checks ran, and then
//!   every closed ledger's every fragment has every write-set entry on every bookie its
//!   ensemble names: Qw complete copies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient};
use folio_meta::keys::Keys;
use folio_meta::records::{LedgerMetadata, LedgerState, Record};
use folio_meta::{MetadataStore, list_all};
use folio_proto::{EntryId, LedgerId};
use folio_repair::autorecovery::worker::{Fragment, missing_from};
use folio_repair::autorecovery::{Autorecovery, AutorecoveryConfig};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::ledgers::{Shared, pause, payload};
use crate::model::Model;
use crate::trace::Trace;
use crate::world::World;

/// The nodes the two autorecovery processes run on.
pub const AUTORECOVERY_NODES: [usize; 2] = [202, 203];
/// The node of the swap watcher (never cut off: it only observes).
pub const WATCHER_NODE: usize = 204;
/// The zombie workload's node.
pub const ZOMBIE_NODE: usize = 7;

/// Once the workloads stopped, autorecovery settles (nothing marked, two checks run)
/// within this.
pub const COPIES_BOUND: Duration = Duration::from_secs(240);

/// Autorecovery on the simulator's scale: rounds every 500 ms, a periodic check every 5 s,
/// lost 1 s after its registration expired (3 s after its crash), copies paced to 8 KiB/s
/// (so they overlap GC passes).
pub fn config(world: &World) -> AutorecoveryConfig {
    AutorecoveryConfig {
        lost_after: Duration::from_secs(1),
        poll_interval: Duration::from_millis(500),
        check_interval: Some(Duration::from_secs(5)),
        check_requests_per_s: 2000,
        open_ledger_grace: Duration::from_secs(5),
        bytes_per_s: 8 * 1024,
        lease_ttl: Duration::from_secs(3),
        auditor: true,
        absence_window: Duration::from_secs(30),
        clock: world.clock.clone(),
    }
}

/// Starts the autorecovery processes; they run until `stop` says so.
pub fn start(world: &World, stop: &watch::Receiver<bool>) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for node in AUTORECOVERY_NODES {
        let a = Autorecovery::new(
            world.store(),
            world.keys.clone(),
            world.client(node),
            config(world),
            format!("autorecovery-{node}"),
        );
        tasks.spawn(a.run(stop.clone()));
    }
    tasks
}

/// The write-set entries of `f` that the bookie at its position lacks, or `None` when it
/// cannot be asked now.
async fn lacking(
    client: &LedgerClient,
    m: &LedgerMetadata,
    id: LedgerId,
    f: &Fragment,
) -> Option<Vec<EntryId>> {
    let present = client.list_entries(&f.ensemble[f.pos], id).await.ok()?;
    Some(missing_from(m, f, &present))
}

/// Every bookie position of every non-empty fragment of closed ledger `m`, as a `Fragment`.
fn positions(m: &LedgerMetadata) -> Vec<Fragment> {
    let firsts: Vec<EntryId> = m.ensembles.keys().copied().collect();
    let mut out = Vec::new();
    for (i, (first, ens)) in m.ensembles.iter().enumerate() {
        let last = firsts.get(i + 1).map_or(m.last_entry_id, |next| next - 1);
        if last < *first {
            continue; // an empty fragment: nothing to hold
        }
        for pos in 0..ens.len() {
            out.push(Fragment { first: *first, last: Some(last), ensemble: ens.clone(), pos });
        }
    }
    out
}

/// Watches the ledgers' metadata until `stop`; see the module docs. `journal` names the
/// bookies that keep what they acknowledge (a journal-less one may lose a copy in a crash).
pub async fn watch_swaps(
    meta: Arc<dyn MetadataStore>,
    keys: Keys,
    client: LedgerClient,
    journal: BTreeSet<String>,
    model: Model,
    trace: Trace,
    stop: watch::Receiver<bool>,
) {
    let mut seen: BTreeMap<LedgerId, BTreeMap<EntryId, Vec<String>>> = BTreeMap::new();
    while !*stop.borrow() {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let Ok(all) = list_all(meta.as_ref(), &keys.ledgers()).await else { continue };
        for v in all {
            let Some(id) = keys.parse_ledger(&v.key) else { continue };
            let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
            if m.state != LedgerState::Closed {
                seen.remove(&id);
                continue;
            }
            // Closed then and now: a changed position is a worker's swap.
            let Some(before) = seen.insert(id, m.ensembles.clone()) else { continue };
            for f in positions(&m) {
                let (first, pos, b) = (f.first, f.pos, &f.ensemble[f.pos]);
                let Some(old) = before.get(&first) else { continue };
                if old.get(pos) == Some(b) || !journal.contains(b) {
                    continue;
                }
                trace.event(format!("watch: ledger {id} fragment {first} names {b} now"));
                *model.lock().counts.entry("copy: swaps watched".into()).or_default() += 1;
                if let Some(missing) = lacking(&client, &m, id, &f).await
                    && !missing.is_empty()
                {
                    model.violation(format!(
                        "copy: ledger {id} names {b} in fragment {first} (swapped in for {:?}), which lacks entries {missing:?}",
                        old.get(pos)
                    ));
                }
            }
        }
    }
}

/// Creates ledgers, deletes each under its writer (as the trash deletes a log's ledger a
/// zombie owner still writes), waits long enough for the bookies to collect it, and adds
/// to it again: no bookie may take the add into a ledger it deleted.
pub async fn zombie(client: LedgerClient, s: Shared, name: String) {
    let (e, w, a) = s.quorums;
    while !*s.stop.borrow() {
        pause(200, 2000).await;
        let op = s.model.begin(format!("{name}: create"));
        let Ok(writer) = client.create(CreateOptions::new(e, w, a)).await else {
            s.model.end(op, "create failed");
            continue;
        };
        s.model.end(op, "create ok");
        let id = writer.id();
        for _ in 0..3 {
            let op = s.model.begin(format!("{name}: add to {id}"));
            let r = writer.add(&payload(256)).await;
            s.model.end(op, if r.is_ok() { "add ok" } else { "add failed" });
        }
        let op = s.model.begin(format!("{name}: delete {id} under its writer"));
        let deleted = client.delete(id).await;
        s.model.end(op, if deleted.is_ok() { "delete ok" } else { "delete failed" });
        s.trace.event(format!("{name}: ledger {id} deleted under its writer: {deleted:?}"));
        // The zombie adds on, across its bookies' GC passes (every 5 s; a bookie that has
        // not collected the ledger yet still takes them), until refused or 20 s are over.
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < until {
            pause(200, 800).await;
            let op = s.model.begin(format!("{name}: zombie add to deleted {id}"));
            let r = tokio::time::timeout(Duration::from_secs(30), writer.add(&payload(64))).await;
            let outcome = match &r {
                Ok(Ok(_)) => "zombie add acknowledged",
                Ok(Err(_)) => "zombie add refused",
                Err(_) => "zombie add timed out",
            };
            s.model.end(op, outcome);
            if !matches!(r, Ok(Ok(_))) {
                s.trace.event(format!("{name}: ledger {id}: {outcome}"));
                break;
            }
        }
    }
}

/// The value of the auditor's last-check stamp, if any.
async fn last_check(meta: &dyn MetadataStore, keys: &Keys) -> Option<bytes::Bytes> {
    meta.get(&keys.last_check()).await.ok().flatten().map(|v| v.value)
}

/// Waits for autorecovery to settle, then checks every closed ledger whole (module docs).
pub async fn copies_whole(world: &World, out: &mut Vec<String>) {
    let (meta, keys) = (world.store(), &world.keys);
    let client = world.client(WATCHER_NODE);
    let deadline = tokio::time::Instant::now() + COPIES_BOUND;
    let mut stamp = last_check(meta.as_ref(), keys).await;
    let mut checks = 0;
    loop {
        let now = last_check(meta.as_ref(), keys).await;
        if now != stamp {
            (checks, stamp) = (checks + 1, now);
        }
        let marks = list_all(meta.as_ref(), &keys.under_replicated()).await.map(|m| m.len());
        if checks >= 2 && marks.as_ref().is_ok_and(|n| *n == 0) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            out.push(format!(
                "liveness: autorecovery did not settle within {COPIES_BOUND:?} after the workloads stopped: marks {marks:?}, periodic checks since {checks}"
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    world.trace.event(format!("checks: autorecovery settled ({checks} periodic checks)"));
    let Ok(all) = list_all(meta.as_ref(), &keys.ledgers()).await else {
        out.push("copies: the ledgers cannot be listed".into());
        return;
    };
    for v in all {
        let Some(id) = keys.parse_ledger(&v.key) else { continue };
        let Ok(m) = LedgerMetadata::decode(&v.key, &v.value) else { continue };
        if m.state != LedgerState::Closed {
            continue;
        }
        for f in positions(&m) {
            let (first, b) = (f.first, &f.ensemble[f.pos]);
            match lacking(&client, &m, id, &f).await {
                Some(missing) if missing.is_empty() => {}
                Some(missing) => out.push(format!(
                    "copies: ledger {id} fragment {first}: {b} lacks entries {missing:?} after autorecovery settled (Qw copies promised)"
                )),
                None => out.push(format!(
                    "copies: ledger {id}: {b} cannot list its entries after the faults stopped"
                )),
            }
        }
    }
}
