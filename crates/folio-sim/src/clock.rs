//! Time as the simulated components read it: tokio's paused clock, which moves only when
//! every task waits (to the next timer), so a run takes as long as its work, not its
//! timeouts.

use folio_proto::clock::Clock;
use tokio::time::Instant;

/// The run's start on the wall-clock scale (records carry wall-clock milliseconds): fixed,
/// so a seed replays to the same bytes.
pub const EPOCH_MS: u64 = 1_767_225_600_000; // 2026-01-01

/// Simulated milliseconds: [`EPOCH_MS`] plus the simulated time since the run began. Serves
/// as every clock seam (monotonic and wall) of the simulated components.
#[derive(Debug)]
pub struct SimClock {
    start: Instant,
}

impl SimClock {
    /// A clock starting now (call it on the simulation's runtime).
    pub fn new() -> SimClock {
        SimClock { start: Instant::now() }
    }

    /// Simulated time since the run began.
    pub fn elapsed(&self) -> std::time::Duration {
        self.start.elapsed()
    }
}

impl Default for SimClock {
    fn default() -> Self {
        SimClock::new()
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        EPOCH_MS + self.start.elapsed().as_millis() as u64
    }
}
