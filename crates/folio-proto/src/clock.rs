//! Time as Folio's components read it for decisions (lease expiry, idle logs, compaction
//! schedules), injectable so tests and the simulator drive it. Durations that are only
//! measured for metrics and logs read `Instant` directly.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of time for decisions; the real one is [`SystemClock`].
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds on a monotonic scale (the origin is arbitrary).
    fn now_ms(&self) -> u64;

    /// How long a task waiting for a time on this clock may sleep before reading it again.
    /// `None` (the real and the simulated clocks): the clock moves with tokio's timers, so
    /// one sleep for the difference wakes on time. A clock that jumps when told
    /// ([`ManualClock`]) needs a bound, or a waiter would miss the jump. Every idle
    /// partition log waits on its clock, so a bound costs wake-ups per partition.
    fn recheck_max(&self) -> Option<Duration> {
        None
    }
}

/// The real monotonic clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock { origin: Instant::now() }
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// The wall clock: milliseconds since the Unix epoch (for times stored and compared
/// across processes: trash records, marks, absences).
#[derive(Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told. Clones share the time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at 0.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }
    /// Moves the time forward by `by` (every clone sees it).
    pub fn advance(&self, by: Duration) {
        self.now_ms.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    /// A test's jump is noticed within 50 ms.
    fn recheck_max(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }
}
