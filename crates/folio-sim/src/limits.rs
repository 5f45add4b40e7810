//! The simulator's own limits, in one place: how much of a run it keeps and how long its
//! faults and checks wait.

use std::time::Duration;

/// Watch events a cut link holds for one watch (then the store's side waits, as a full
/// TCP window does).
pub const WATCH_HELD_MAX: usize = 1024;

/// How often a wipe tries to remove the bookie's cookie, 500 ms apart, while the store
/// fails (a metadata fault lasts far less).
pub const WIPE_COOKIE_ATTEMPTS_MAX: u32 = 120;

/// Lines of trace kept for a failure report.
pub const TRACE_LINES_MAX: usize = 400;

/// Ledgers a D2 check looks at per crash.
pub const D2_LEDGERS_MAX: usize = 64;

/// How long a call waits on a cut link before it fails.
pub const HELD_MAX: Duration = Duration::from_secs(6);

/// How long a fault timed to a recovery waits for it to start, or to end, before it goes on
/// regardless (the recoverer may be busy with another ledger).
pub const RECOVERY_WAIT_MAX: Duration = Duration::from_secs(3);

/// Appended payloads at least this long are checked to be stored once (shorter random
/// payloads may repeat by chance).
pub const ONCE_CHECK_BYTES_MIN: usize = 16;

/// How long two brokers may each name themselves leader of one partition: a broker cut off
/// from the store keeps its view until it fences itself, two thirds of its lease (4 s in
/// the Kafka scenario) after its last renewal, while a broker that joined meanwhile takes
/// its share at once (the log's fencing keeps the two from both acknowledging); then a
/// membership poll (500 ms) and a claims poll (300 ms) to see it. Seed 22 of the Kafka
/// scenario overlapped 2.07 s so.
pub const CLAIM_OVERLAP_MAX: Duration = Duration::from_millis(2_667 + 500 + 300 + 233);
