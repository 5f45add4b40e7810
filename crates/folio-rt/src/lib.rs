//! What Folio asks of its runtime beyond tokio's tasks and timers: work that blocks a
//! thread ([`blocking`]), TCP connections and listeners ([`net`]), randomness
//! ([`with_rng`], [`random`]), and a process clock the simulator can stop
//! ([`clock::ProcessClock`]). Each is real by default. On a thread the simulator has claimed
//! ([`sim::enter`]) each is simulated instead: blocking work runs inline, connections go
//! through the simulated network ([`sim::SimNet`]), and randomness comes from the
//! simulation's seed; with tokio's paused clock on a current-thread runtime, one seed then
//! fixes every scheduling decision, delay and fault of a run (`folio-sim`).
//!
//! **Architecture invariant:** production code reaches threads, sockets and randomness
//! only through this crate (the storage engine, which has no runtime, has its own stepped
//! mode); nothing here knows Folio's protocols.

pub mod clock;
mod error;
pub mod net;
pub mod sim;

pub use clock::ProcessClock;
pub use error::BlockingFailed;

use std::future::Future;

/// Runs `f`, which may block its thread (disk I/O, a lock held through an fsync), off the
/// async workers: on tokio's blocking pool, or inline under the simulator (where nothing
/// blocks: its disks are in memory and its engines are stepped).
pub fn blocking<T, F>(f: F) -> impl Future<Output = Result<T, BlockingFailed>> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let inline = sim::active();
    async move {
        if inline {
            sim::perturb().await;
            return Ok(f());
        }
        tokio::task::spawn_blocking(f).await.map_err(|e| BlockingFailed(e.to_string()))
    }
}

/// Runs `f`: code that follows the release of a lock and that another thread may overtake
/// before it runs (publishing what was computed under the lock). Runs it now; under the
/// simulator, a seeded share of the time, as a task that runs once the tasks ready
/// meanwhile (and a seeded number of yields) have run, so that what two threads could
/// interleave there interleaves by seed.
pub fn after_unlock(f: impl FnOnce() + Send + 'static) {
    use rand::Rng as _;
    if sim::current().is_some_and(|s| s.with_rng(|r| r.random_range(0..256u32)) < s.yield_per_256) {
        tokio::spawn(async move {
            sim::perturb().await;
            f()
        });
    } else {
        f();
    }
}

/// Starts `f`, which may block its thread, and does not wait for it: on tokio's blocking
/// pool, or as a task that runs it inline under the simulator.
pub fn spawn_blocking(f: impl FnOnce() + Send + 'static) {
    if sim::active() {
        tokio::spawn(async move {
            sim::perturb().await;
            f()
        });
    } else {
        drop(tokio::task::spawn_blocking(f));
    }
}

/// Runs `f` with the thread's random number generator: the simulation's seeded one on a
/// simulated thread, else the operating system's.
pub fn with_rng<R>(f: impl FnOnce(&mut dyn rand::RngCore) -> R) -> R {
    match sim::current() {
        Some(s) => s.with_rng(f),
        None => f(&mut rand::rng()),
    }
}

/// A random value (see [`with_rng`]).
pub fn random<T>() -> T
where
    rand::distr::StandardUniform: rand::distr::Distribution<T>,
{
    with_rng(|r| rand::Rng::random(r))
}

/// The thread's random number generator as a value (see [`with_rng`]): each draw goes to
/// the simulation's generator on a simulated thread, else to the operating system's.
pub fn rng() -> SeamRng {
    SeamRng(())
}

/// See [`rng`].
#[derive(Debug)]
pub struct SeamRng(());

impl rand::RngCore for SeamRng {
    fn next_u32(&mut self) -> u32 {
        with_rng(|r| r.next_u32())
    }

    fn next_u64(&mut self) -> u64 {
        with_rng(|r| r.next_u64())
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        with_rng(|r| r.fill_bytes(dst))
    }
}
