//! The faults of a run, drawn from its seed until the fault window ends: bookie crashes (a
//! power cut: unsynced writes dropped, applied or torn, or all lost) and restarts, clean
//! restarts, failing fsyncs (the bookie poisons itself, turns read-only and is restarted),
//! held and down links between a client node and a bookie, connection resets, a metadata
//! store that fails transactions before or after they apply, and (with autorecovery) a
//! bookie whose disks are wiped and that comes back empty. At the end every
//! fault is repaired: bookies restarted, links healed, the store reliable again.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use folio_rt::sim::Link;
use rand::Rng;
use tokio::time::Instant;

use crate::world::{World, client_ip};

/// How hard the faults come.
#[derive(Debug, Clone)]
pub struct Intensity {
    /// Mean time between faults.
    pub mean_gap: Duration,
    /// Bookies down (crashed or stopped) at once, at most.
    pub max_down: usize,
    /// Whether the store fails transactions.
    pub meta_faults: bool,
    /// Whether a bookie's disks may be wiped (once a run).
    pub wipes: bool,
}

fn rand_ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(folio_rt::with_rng(|r| r.random_range(lo..=hi)))
}

fn pick<T: Copy>(of: &[T]) -> Option<T> {
    (!of.is_empty()).then(|| of[folio_rt::with_rng(|r| r.random_range(0..of.len()))])
}

/// What the nemesis broke and when it mends it.
#[derive(Debug, Default)]
struct Broken {
    /// Bookie → when it restarts.
    down: BTreeMap<usize, Instant>,
    /// Bookie whose fsyncs fail → when it is crashed and restarted.
    failing_sync: BTreeMap<usize, Instant>,
    /// (client, bookie) → when the link heals.
    links: BTreeMap<(IpAddr, IpAddr), Instant>,
    meta_until: Option<Instant>,
    /// Bookie whose disk crashes at its N-th write → when it crashes anyway.
    armed: BTreeMap<usize, Instant>,
    /// A bookie's disks were wiped already.
    wiped: bool,
}

/// Breaks things until `until`, then mends everything.
pub async fn run(world: &mut World, until: Instant, clients: &[usize], intensity: &Intensity) {
    let mut broken = Broken::default();
    let bookie_ips: Vec<IpAddr> = world.bookies.iter().map(|b| b.addr.ip()).collect();
    let clients: Vec<IpAddr> = clients.iter().map(|c| client_ip(*c)).collect();
    loop {
        mend_due(world, &mut broken, Instant::now()).await;
        world.check_tombstones();
        let gap = intensity.mean_gap.as_millis() as u64;
        let at = Instant::now() + rand_ms(gap / 4, gap * 2);
        if at >= until {
            break;
        }
        // An armed disk crashes whenever its write comes: look every 20 ms meanwhile.
        while !broken.armed.is_empty() && Instant::now() + Duration::from_millis(20) < at {
            tokio::time::sleep(Duration::from_millis(20)).await;
            mend_due(world, &mut broken, Instant::now()).await;
        }
        tokio::time::sleep_until(at).await;
        mend_due(world, &mut broken, Instant::now()).await;
        let now = Instant::now();
        let up: Vec<usize> = (0..world.bookies.len())
            .filter(|i| world.is_up(*i) && !broken.failing_sync.contains_key(i))
            .collect();
        let can_take_down =
            broken.down.len() + broken.failing_sync.len() + broken.armed.len() < intensity.max_down;
        match folio_rt::with_rng(|r| r.random_range(0..100)) {
            0..=24 if can_take_down => crash(world, &mut broken, &up, &bookie_ips, now).await,
            25..=32 if can_take_down => {
                let Some(i) = pick(&up) else { continue };
                world.trace.event(format!("stop {} cleanly", world.bookies[i].id));
                world.stop_bookie(i).await;
                world.count("fault: clean stop");
                broken.down.insert(i, now + rand_ms(200, 3000));
            }
            33..=39 if can_take_down => {
                let Some(i) = pick(&up) else { continue };
                let after = folio_rt::with_rng(|r| r.random_range(0..30));
                world
                    .trace
                    .event(format!("{}: fsync fails after {after} more", world.bookies[i].id));
                world.bookies[i].fs.fail_sync_after(after);
                world.count("fault: fsync failure");
                broken.failing_sync.insert(i, now + rand_ms(2000, 6000));
            }
            // Once a run at most, a bookie's disks are replaced (when every bookie keeps a
            // journal: a wipe on top of a journal-less crash can lose the last copy).
            90..=91 if can_take_down && intensity.wipes && !broken.wiped => {
                let Some(i) = pick(&up) else { continue };
                world.wipe_bookie(i).await;
                world.count("fault: disks wiped");
                broken.wiped = true;
                broken.down.insert(i, now + rand_ms(500, 6000));
            }
            92..=99 if can_take_down => {
                let Some(i) = pick(&up) else { continue };
                let n = folio_rt::with_rng(|r| r.random_range(0..400));
                world.crash_disk_after(i, n);
                world.count("fault: disk crash at a write");
                broken.armed.insert(i, now + rand_ms(1000, 5000));
            }
            40..=59 => break_link(world, &mut broken, &clients, &bookie_ips, Link::Held, now),
            60..=64 => break_link(world, &mut broken, &clients, &bookie_ips, Link::Down, now),
            65..=69 => {
                // One client node loses two bookies at once: two ensemble changes in a row.
                let Some(c) = pick(&clients) else { continue };
                for _ in 0..2 {
                    let link = if folio_rt::with_rng(|r| r.random_bool(0.5)) {
                        Link::Held
                    } else {
                        Link::Down
                    };
                    break_link(world, &mut broken, &[c], &bookie_ips, link, now);
                }
            }
            70..=84 => {
                if let Some((a, b)) = world.sim.net().reset_one() {
                    world.trace.event(format!("reset connection {a} - {b}"));
                    world.count("fault: connection reset");
                }
            }
            85..=87 if intensity.meta_faults => {
                world.meta.restart();
                world.count("fault: metadata store restart");
            }
            88..=91 if intensity.meta_faults => {
                world.trace.event("metadata store fails transactions");
                world.meta.set_failures(40, 15);
                world.count("fault: metadata failures");
                broken.meta_until = Some(now + rand_ms(500, 4000));
            }
            _ => {}
        }
    }
    mend_all(world, &mut broken).await;
}

/// Crashes a bookie (half the time the journal-less one, when there is one).
async fn crash(world: &mut World, broken: &mut Broken, up: &[usize], ips: &[IpAddr], now: Instant) {
    // Half the crashes go to a journal-less bookie when there is one: what D2 and the
    // integrity check are about.
    let journal_less: Vec<usize> =
        up.iter().copied().filter(|i| !world.bookies[*i].journal).collect();
    let target = if folio_rt::with_rng(|r| r.random_bool(0.5)) { &journal_less[..] } else { up };
    let Some(i) = pick(target).or_else(|| pick(up)) else { return };
    let lose_all = folio_rt::with_rng(|r| r.random_range(0..5) == 0);
    world.crash_bookie(i, lose_all).await;
    world.count("fault: bookie crash");
    broken.down.insert(i, now + rand_ms(500, 8000));
    // Now and then the crash takes a rack: the recoverer loses another bookie for a while
    // too (recoveries then decide with one answer unknown).
    if folio_rt::with_rng(|r| r.random_bool(0.3)) {
        let rest: Vec<IpAddr> = up.iter().filter(|j| **j != i).map(|j| ips[*j]).collect();
        let recoverer = [client_ip(crate::RECOVERER_NODE)];
        break_link(world, broken, &recoverer, &rest, Link::Held, now);
    }
}

fn break_link(
    world: &mut World,
    broken: &mut Broken,
    clients: &[IpAddr],
    bookies: &[IpAddr],
    link: Link,
    now: Instant,
) {
    let (Some(c), Some(b)) = (pick(clients), pick(bookies)) else { return };
    if broken.links.contains_key(&(c, b)) {
        return;
    }
    world.trace.event(format!("link {c} - {b} {link:?}"));
    world.sim.net().set_link(c, b, link);
    world.count(if link == Link::Held { "fault: link held" } else { "fault: link down" });
    let heal = if link == Link::Held { rand_ms(500, 8000) } else { rand_ms(300, 4000) };
    broken.links.insert((c, b), now + heal);
}

async fn mend_due(world: &mut World, broken: &mut Broken, now: Instant) {
    for i in world.reap_crashed().await {
        broken.armed.remove(&i);
        broken.down.insert(i, now + rand_ms(500, 6000));
    }
    let due: Vec<usize> =
        broken.armed.iter().filter(|(_, t)| **t <= now).map(|(i, _)| *i).collect();
    for i in due {
        // Its write never came (an idle bookie): it crashes now, as a power cut would.
        broken.armed.remove(&i);
        world.crash_bookie(i, false).await;
        broken.down.insert(i, now + rand_ms(500, 6000));
    }
    let due: Vec<usize> = broken.down.iter().filter(|(_, t)| **t <= now).map(|(i, _)| *i).collect();
    for i in due {
        broken.down.remove(&i);
        world.start_bookie(i).await;
    }
    let due: Vec<usize> =
        broken.failing_sync.iter().filter(|(_, t)| **t <= now).map(|(i, _)| *i).collect();
    for i in due {
        broken.failing_sync.remove(&i);
        // A poisoned bookie recovers by a restart (from its journal).
        world.crash_bookie(i, false).await;
        world.start_bookie(i).await;
    }
    let healed: Vec<(IpAddr, IpAddr)> =
        broken.links.iter().filter(|(_, t)| **t <= now).map(|(k, _)| *k).collect();
    for (c, b) in healed {
        broken.links.remove(&(c, b));
        world.sim.net().set_link(c, b, Link::Up);
    }
    if broken.meta_until.is_some_and(|t| t <= now) {
        broken.meta_until = None;
        world.meta.set_failures(0, 0);
        world.trace.event("metadata store reliable again");
    }
}

async fn mend_all(world: &mut World, broken: &mut Broken) {
    let far = Instant::now() + Duration::from_secs(3600 * 24);
    mend_due(world, broken, far).await;
    for i in 0..world.bookies.len() {
        if !world.is_up(i) {
            world.start_bookie(i).await;
        }
    }
    world.trace.event("faults over: every bookie up, every link healed");
}
