//! The raw-ledger workload, through `folio-client` as any user of ledgers runs it: writers
//! that create ledgers and pipeline adds, then close them or walk away (a writer crash);
//! recoveries that fence and close what writers left (and, now and then, a ledger whose
//! writer is still writing: a zombie); readers of closed and open ledgers up to the LAC;
//! and deletions of closed ledgers.
//!
//! Now and then a writer's rack fails under it ([`rack_fails`]): its node loses every
//! bookie of its ledger's ensemble at once and waits on every other bookie for a while, so
//! its ensemble changes replace a whole write set from the same entry on, and the new
//! bookies hear nothing before the writer dies. The ledger's acknowledged entries are then
//! on no bookie of its last fragment, which must not make recovery lose them (BookKeeper
//! #2615). And now and then a writer is split from its recovery ([`fence_split`]): the
//! recovery starts while the writer still writes, the recoverer cannot reach one bookie of
//! the ensemble and the writer can reach only that one, so the recovery fences the others
//! without it and the writer, failing to reach them, would replace them by bookies nobody
//! fenced; its adds must not be acknowledged past the end the recovery settles on
//! (BookKeeper #2614: no ensemble change while in recovery, and recovery reads fence).
//! And now and then a bookie misses the fence of a writer's last add ([`missed_fence`]):
//! the add reaches Qa − 1 bookies of its write set (which ack it) and waits on the links to
//! the others; the recovery cannot reach one of those others while it fences, then can,
//! while it no longer reaches the bookies that hold the add, so the add is decided absent
//! and the ledger closed below it; then the waiting add reaches the bookie that missed the
//! fence. Only the recovery read's fence keeps that bookie from making the add the Qa-th
//! acknowledgement of an entry past the end (BookKeeper #2614 itself, with no ensemble
//! change).

use std::net::IpAddr;
use std::time::Duration;

use folio_client::{CreateOptions, LedgerClient};
use folio_proto::{EntryId, LedgerId};
use folio_rt::sim::{Link, SimNet};
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::limits::RECOVERY_WAIT_MAX;
use crate::model::Model;
use crate::trace::Trace;

/// Quorums (E, Qw, Qa) the writers create ledgers with.
pub type Quorums = (u16, u16, u16);

/// What the ledger workloads share.
#[derive(Debug, Clone)]
pub struct Shared {
    pub model: Model,
    pub trace: Trace,
    pub stop: watch::Receiver<bool>,
    pub quorums: Quorums,
    /// The network, and every bookie's id and address: for a writer's rack failing.
    pub net: SimNet,
    pub bookies: Vec<(String, IpAddr)>,
    /// The recoverer's node.
    pub recoverer: IpAddr,
}

impl Shared {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

fn rand_range(lo: u64, hi: u64) -> u64 {
    folio_rt::with_rng(|r| r.random_range(lo..=hi))
}

fn chance(per_100: u64) -> bool {
    rand_range(0, 99) < per_100
}

/// A seeded payload of 1..=`max` bytes.
pub fn payload(max: usize) -> Vec<u8> {
    let n = rand_range(1, max as u64) as usize;
    folio_rt::with_rng(|r| (0..n).map(|_| r.random::<u8>()).collect())
}

/// Sleeps for a seeded time in `lo..=hi` milliseconds.
pub async fn pause(lo: u64, hi: u64) {
    tokio::time::sleep(Duration::from_millis(rand_range(lo, hi))).await;
}

/// Writes ledgers until stopped; each one is closed, or left to `abandoned` (a writer that
/// died, or failed).
pub async fn writer(
    client: LedgerClient,
    node: IpAddr,
    s: Shared,
    name: String,
    abandoned: mpsc::UnboundedSender<LedgerId>,
) {
    let (e, w, a) = s.quorums;
    while !s.stopped() {
        let op = s.model.begin(format!("{name}: create ledger"));
        let writer = match client.create(CreateOptions::new(e, w, a)).await {
            Ok(writer) => {
                s.model.end(op, "create ok");
                writer
            }
            Err(err) => {
                s.model.end(op, "create failed");
                s.trace.event(format!("{name}: create failed: {err}"));
                pause(100, 1000).await;
                continue;
            }
        };
        let id = writer.id();
        let ensemble = writer.metadata().ensembles.first_key_value().map(|(_, b)| b.clone());
        s.trace.event(format!("{name}: ledger {id} created, ensemble {ensemble:?}"));
        let n = rand_range(1, 40);
        let inflight = rand_range(1, 8) as usize;
        let mut adds = JoinSet::new();
        let mut failed = false;
        // Now and then the writer dies in the middle: its adds in flight go on without it
        // (a zombie's), and its ledger goes to recovery at once.
        let dies_at = chance(20).then(|| rand_range(0, n));
        let faults = WriterFaults::draw(n);
        let mut died = false;
        let mut fragment = last_fragment(&writer);
        for k in 0..n {
            if s.stopped() || failed {
                break;
            }
            if faults.strike(k, &s, (node, &name), id, fragment.as_ref().map(|f| &f.1[..])) {
                let _ = abandoned.send(id); // recovered now, while this writer goes on
            }
            while adds.len() >= inflight {
                failed |= adds.join_next().await.is_some_and(|r| r.unwrap_or(true));
            }
            // Or it dies as its ensemble changes (a broker lost with the bookies of its
            // rack): its bookies may then have last heard of a LAC before the new
            // fragment, where recovery must not start (BookKeeper #2615).
            let now = last_fragment(&writer);
            let changed = now != fragment;
            fragment = now;
            if dies_at == Some(k) || (changed && chance(50)) {
                died = true;
                break;
            }
            let bytes = payload(2048);
            match writer.add_nowait(&bytes) {
                Ok((entry, done)) => {
                    s.model.sent(id, entry, &bytes);
                    let op = s.model.begin(format!("{name}: add {id}/{entry}"));
                    adds.spawn(await_add(s.clone(), name.clone(), op, (id, entry), done));
                }
                Err(err) => {
                    s.trace.event(format!("{name}: add to {id} refused: {err}"));
                    failed = true;
                }
            }
            pause(0, 5).await;
        }
        if died {
            s.trace.event(format!("{name}: dies writing ledger {id}"));
            adds.detach_all();
            drop(writer);
            let _ = abandoned.send(id);
            continue;
        }
        while let Some(r) = adds.join_next().await {
            failed |= r.unwrap_or(true);
        }
        if failed || chance(25) {
            s.trace.event(format!("{name}: leaves ledger {id} (failed {failed})"));
            drop(writer);
            let _ = abandoned.send(id);
            continue;
        }
        let op = s.model.begin(format!("{name}: close {id}"));
        match writer.close().await {
            Ok(last) => {
                s.model.end(op, "close ok");
                s.model.ended(id, last, &format!("{name}'s close"));
                s.trace.event(format!("{name}: ledger {id} closed at {last}"));
            }
            Err(err) => {
                s.model.end(op, "close failed");
                s.trace.event(format!("{name}: close of {id} failed: {err}"));
                let _ = abandoned.send(id);
            }
        }
    }
}

/// The faults a writer's node takes while it writes one ledger: at which add its rack
/// fails, and at which it is split from its recovery (see the module doc).
struct WriterFaults {
    rack_at: Option<u64>,
    split_at: Option<u64>,
    /// The last add (`n - 1`), if a bookie misses its fence.
    missed_fence_at: Option<u64>,
}

impl WriterFaults {
    /// Drawn for a ledger of `n` adds.
    fn draw(n: u64) -> WriterFaults {
        if chance(MISSED_FENCES_PER_100) {
            return WriterFaults { rack_at: None, split_at: None, missed_fence_at: Some(n - 1) };
        }
        WriterFaults {
            rack_at: chance(RACK_FAILS_PER_100).then(|| rand_range(1, n)),
            split_at: chance(FENCE_SPLITS_PER_100).then(|| rand_range(1, n)),
            missed_fence_at: None,
        }
    }

    /// Strikes before add `k` to ledger `id` on `ensemble` (the writer's last fragment);
    /// true if the ledger goes to recovery now.
    fn strike(
        &self,
        k: u64,
        s: &Shared,
        (node, name): (IpAddr, &str),
        id: LedgerId,
        ens: Option<&[String]>,
    ) -> bool {
        let Some(ensemble) = ens else { return false };
        if self.rack_at == Some(k) {
            rack_fails(s, node, name, ensemble);
        }
        let split = self.split_at == Some(k);
        if split {
            fence_split(s, node, name, ensemble);
        }
        let missed = self.missed_fence_at == Some(k)
            && missed_fence(s, node, name, ensemble, (id, k as EntryId));
        split || missed
    }
}

/// Ledgers (in 100) whose writer's rack fails while it writes them.
const RACK_FAILS_PER_100: u64 = 10;

/// The writer on `node` loses its rack (see the module doc): its links to the bookies of
/// `ensemble` go down and those to every other bookie hold, for 1-3 s (or until the
/// workloads stop). It still reaches the metadata store, so it changes its ensemble to
/// bookies it already had connections to, and what it sends them waits.
fn rack_fails(s: &Shared, node: IpAddr, name: &str, ensemble: &[String]) {
    s.trace
        .event(format!("{name}: its rack fails (ensemble {ensemble:?} down, other bookies held)"));
    *s.model.lock().counts.entry("fault: a writer's rack".into()).or_default() += 1;
    for (id, ip) in &s.bookies {
        let link = if ensemble.contains(id) { Link::Down } else { Link::Held };
        s.net.set_link(node, *ip, link);
    }
    let (net, bookies, mut stop) = (s.net.clone(), s.bookies.clone(), s.stop.clone());
    let (trace, name) = (s.trace.clone(), name.to_string());
    let heal = Duration::from_millis(rand_range(1000, 3000));
    tokio::spawn(async move {
        sleep_or_stop(heal, &mut stop).await;
        trace.event(format!("{name}: its rack is back"));
        for (_, ip) in &bookies {
            net.set_link(node, *ip, Link::Up);
        }
    });
}

/// Ledgers (in 100) whose writer is split from their recovery while it writes them.
const FENCE_SPLITS_PER_100: u64 = 10;

/// Splits the writer on `node` from the recovery it just asked for (see the module doc): the
/// recoverer's link to one bookie of `ensemble` holds and, a moment later (once the
/// recovery has marked the ledger), the writer's links to the others go down, for 1-3 s.
fn fence_split(s: &Shared, node: IpAddr, name: &str, ensemble: &[String]) {
    let hidden = &ensemble[rand_range(0, ensemble.len() as u64 - 1) as usize];
    s.trace.event(format!("{name}: split from its recovery ({hidden} only for the writer)"));
    *s.model.lock().counts.entry("fault: a writer split from its recovery".into()).or_default() +=
        1;
    let ip = |id: &String| s.bookies.iter().find(|(b, _)| b == id).map(|(_, ip)| *ip);
    let Some(hidden_ip) = ip(hidden) else { return };
    let others: Vec<IpAddr> = ensemble.iter().filter(|b| *b != hidden).filter_map(ip).collect();
    s.net.set_link(s.recoverer, hidden_ip, Link::Held);
    let (net, recoverer, mut stop, trace) =
        (s.net.clone(), s.recoverer, s.stop.clone(), s.trace.clone());
    let (cut, heal) = (rand_range(1, 30), rand_range(1000, 3000));
    let name = name.to_string();
    tokio::spawn(async move {
        if !sleep_or_stop(Duration::from_millis(cut), &mut stop).await {
            for b in &others {
                net.set_link(node, *b, Link::Down);
            }
            sleep_or_stop(Duration::from_millis(heal), &mut stop).await;
        }
        trace.event(format!("{name}: no longer split from its recovery"));
        net.set_link(recoverer, hidden_ip, Link::Up);
        for b in &others {
            net.set_link(node, *b, Link::Up);
        }
    });
}

/// Ledgers (in 100) whose last add a bookie misses the fence of.
const MISSED_FENCES_PER_100: u64 = 8;

/// A bookie misses the fence of `entry`, the last add to `ledger` of the writer on `node`
/// (see the module doc). Of the entry's write set in `ensemble`: `held` (Qa − 1 bookies) get
/// the add, `missing` (one) misses the fence, `rest` gets neither. The recovery starts now; the
/// recoverer cannot reach `missing` and waits on `rest` until the holders have answered
/// its fence, then reaches `missing` and `rest` but no longer the holders; once the
/// recovery ended (or gave up), the add waiting for `missing` goes through; a moment later
/// every link is back. False if the fault cannot strike (one ack is a quorum).
fn missed_fence(
    s: &Shared,
    node: IpAddr,
    name: &str,
    ensemble: &[String],
    (ledger, entry): (LedgerId, EntryId),
) -> bool {
    let (_, w, a) = s.quorums;
    let ip = |id: &String| s.bookies.iter().find(|(b, _)| b == id).map(|(_, ip)| *ip);
    let mut set: Vec<IpAddr> = (0..i64::from(w))
        .filter_map(|i| ip(&ensemble[((entry + i) % ensemble.len() as i64) as usize]))
        .collect();
    if set.len() != w as usize || a < 2 {
        return false; // the write set has an unknown bookie, or one ack is a quorum
    }
    folio_rt::with_rng(|r| rand::seq::SliceRandom::shuffle(&mut set[..], r));
    let rest = set.split_off(usize::from(a));
    let missing = set.pop().expect("a >= 2");
    let held = set;
    s.trace.event(format!(
        "{name}: its last add {entry} goes to {held:?} alone; {missing} misses the fence"
    ));
    *s.model.lock().counts.entry("fault: a bookie missed the fence".into()).or_default() += 1;
    let (net, rec) = (s.net.clone(), s.recoverer);
    for b in rest.iter().chain([&missing]) {
        net.set_link(node, *b, Link::Held);
    }
    net.set_link(rec, missing, Link::Down);
    for b in &rest {
        net.set_link(rec, *b, Link::Held);
    }
    let (s, name) = (s.clone(), name.to_string());
    tokio::spawn(async move {
        let recovering = |s: &Shared| s.model.lock().recovering.contains(&ledger);
        let mut stop = s.stop.clone();
        wait_until(&s, |s| recovering(s)).await;
        sleep_or_stop(Duration::from_millis(rand_range(200, 500)), &mut stop).await;
        for b in &held {
            net.set_link(rec, *b, Link::Down);
        }
        for b in rest.iter().chain([&missing]) {
            net.set_link(rec, *b, Link::Up);
        }
        wait_until(&s, |s| !recovering(s)).await;
        s.trace.event(format!("{name}: the add {entry} waiting for {missing} goes on"));
        net.set_link(node, missing, Link::Up);
        sleep_or_stop(Duration::from_millis(rand_range(200, 1000)), &mut stop).await;
        for b in &held {
            net.set_link(rec, *b, Link::Up);
        }
        for b in &rest {
            net.set_link(node, *b, Link::Up);
        }
    });
    true
}

/// Waits (polling each simulated millisecond) until `ready`, the workloads stop, or
/// `RECOVERY_WAIT_MAX` has passed.
async fn wait_until(s: &Shared, ready: impl Fn(&Shared) -> bool) {
    let deadline = tokio::time::Instant::now() + RECOVERY_WAIT_MAX;
    while !ready(s) && !s.stopped() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Sleeps for `d` or until the workloads stop; true if they stopped.
async fn sleep_or_stop(d: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let stopped = async {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = stopped => true,
    }
}

/// The start and bookies of a writer's last fragment.
fn last_fragment(writer: &folio_client::LedgerWriter) -> Option<(EntryId, Vec<String>)> {
    writer.metadata().ensembles.last_key_value().map(|(s, e)| (*s, e.clone()))
}

/// Awaits one add's answer and records it in the model; true if it failed.
async fn await_add<T, E: std::fmt::Display>(
    s: Shared,
    who: String,
    op: u64,
    (id, entry): (LedgerId, EntryId),
    done: impl std::future::Future<Output = Result<T, E>>,
) -> bool {
    match done.await {
        Ok(_) => {
            s.model.acked(id, entry);
            s.model.end(op, "add ok");
            false
        }
        Err(err) => {
            s.model.end(op, "add failed");
            s.trace.event(format!("{who}: add {id}/{entry} failed: {err}"));
            true
        }
    }
}

/// Recovers what writers left, and now and then a ledger still being written.
pub async fn recoverer(
    client: LedgerClient,
    s: Shared,
    name: String,
    mut abandoned: mpsc::UnboundedReceiver<LedgerId>,
) {
    while !s.stopped() {
        let id = tokio::select! {
            biased;
            id = abandoned.recv() => match id { Some(id) => id, None => return },
            () = pause(500, 3000) => {
                // A zombie: fence a ledger whose writer may still be adding to it.
                let open: Vec<LedgerId> = s.model.lock().ledgers.iter()
                    .filter(|(_, l)| l.ends.is_empty() && !l.deleted).map(|(id, _)| *id).collect();
                if open.is_empty() || !chance(30) { continue }
                open[rand_range(0, open.len() as u64 - 1) as usize]
            }
        };
        if s.model.lock().ledgers.get(&id).is_some_and(|l| !l.ends.is_empty()) {
            continue;
        }
        let op = s.model.begin(format!("{name}: recover {id}"));
        s.model.lock().recovering.insert(id);
        let recovered = client.recover(id).await;
        s.model.lock().recovering.remove(&id);
        match recovered {
            Ok(reader) => {
                s.model.end(op, "recover ok");
                let end = reader.last_entry_id().unwrap_or(-1);
                s.model.ended(id, end, &format!("{name}'s recovery"));
                s.trace.event(format!("{name}: ledger {id} recovered, ends at {end}"));
            }
            Err(err) => {
                s.model.end(op, "recover failed");
                s.trace.event(format!("{name}: recovery of {id} failed: {err}"));
                pause(200, 1000).await;
                // Tried again later, by this loop or by the final check.
            }
        }
    }
}

/// Reads ledgers (closed ones whole, open ones up to their LAC) and deletes some closed
/// ones.
pub async fn reader(client: LedgerClient, s: Shared, name: String) {
    while !s.stopped() {
        pause(50, 400).await;
        let pick: Vec<(LedgerId, bool)> = s
            .model
            .lock()
            .ledgers
            .iter()
            .filter(|(_, l)| !l.deleted)
            .map(|(id, l)| (*id, !l.ends.is_empty()))
            .collect();
        if pick.is_empty() {
            continue;
        }
        let (id, closed) = pick[rand_range(0, pick.len() as u64 - 1) as usize];
        if closed && chance(10) {
            let op = s.model.begin(format!("{name}: delete {id}"));
            match client.delete(id).await {
                Ok(()) => {
                    s.model.end(op, "delete ok");
                    s.model.deleted(id);
                    s.trace.event(format!("{name}: ledger {id} deleted"));
                }
                Err(err) => {
                    s.model.end(op, "delete failed");
                    s.model.delete_tried(id);
                    s.trace.event(format!("{name}: delete of {id} failed: {err}"));
                }
            }
            continue;
        }
        let op = s.model.begin(format!("{name}: read {id}"));
        let outcome = read_some(&client, &s, id).await;
        s.model.end(op, if outcome.is_ok() { "read ok" } else { "read failed" });
        if let Err(err) = outcome {
            s.trace.event(format!("{name}: read of {id} failed: {err}"));
        }
    }
}

async fn read_some(client: &LedgerClient, s: &Shared, id: LedgerId) -> folio_client::Result<()> {
    let reader = client.open(id).await?;
    let last = match reader.last_entry_id() {
        Some(last) => last,
        None => {
            let lac = reader.read_lac().await?;
            s.model.lac(id, lac);
            lac
        }
    };
    if last < 0 {
        return Ok(());
    }
    let from = rand_range(0, last as u64) as i64;
    for entry in from..=last.min(from + 8) {
        let e = reader.read(entry).await?;
        s.model.read_entry(id, entry, e.payload());
    }
    Ok(())
}
