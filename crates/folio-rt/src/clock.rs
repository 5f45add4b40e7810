//! The process's monotonic clock, for what a process decides from how much time passed
//! since it last heard from others (a broker's lease: may it still serve?). Real, it is
//! tokio's clock. The simulator can *stop* one process's clock ([`ProcessClock::stop`]) to
//! model a paused process (SIGSTOP, a long garbage-collection pause, a VM migrated or
//! starved): while stopped, the process sees no time pass, so it does not notice that its
//! lease ran out; once resumed ([`ProcessClock::resume`]) it reads the true time again, all
//! at once, as a process does after SIGCONT. What it did in between on a stale belief is
//! what the simulator checks.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

/// See the module docs. Clones share one clock.
#[derive(Debug, Clone, Default)]
pub struct ProcessClock {
    /// `None`: tokio's clock, never stopped. `Some`: stoppable; holds the moment it stopped.
    stopped: Option<Arc<Mutex<Option<Instant>>>>,
}

impl ProcessClock {
    /// A clock the simulator can stop (running until it does).
    pub fn stoppable() -> ProcessClock {
        ProcessClock { stopped: Some(Arc::default()) }
    }

    /// Now, as the process sees it: the moment the clock stopped while it is stopped.
    pub fn now(&self) -> Instant {
        let real = Instant::now();
        match &self.stopped {
            None => real,
            Some(s) => s.lock().unwrap_or_else(PoisonError::into_inner).unwrap_or(real),
        }
    }

    /// Stops the clock (a paused process); stopping a stopped clock keeps its first moment.
    /// Returns whether it was running (`false` too for a clock that cannot stop).
    pub fn stop(&self) -> bool {
        let Some(s) = &self.stopped else { return false };
        let mut s = s.lock().unwrap_or_else(PoisonError::into_inner);
        let was_running = s.is_none();
        s.get_or_insert_with(Instant::now);
        was_running
    }

    /// Resumes the clock: it reads the true time again (the pause is seen all at once).
    pub fn resume(&self) {
        if let Some(s) = &self.stopped {
            *s.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
    }

    /// Whether the clock is stopped now.
    pub fn is_stopped(&self) -> bool {
        self.stopped
            .as_ref()
            .is_some_and(|s| s.lock().unwrap_or_else(PoisonError::into_inner).is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stopped_clock_sees_no_time_pass_and_the_whole_pause_at_once_when_resumed() {
        let real = ProcessClock::default();
        let clock = ProcessClock::stoppable();
        let start = clock.now();
        assert!(!real.stop(), "tokio's clock cannot stop");
        assert!(clock.stop());
        assert!(!clock.stop(), "already stopped");
        tokio::time::sleep(Duration::from_secs(7)).await;
        assert_eq!(clock.now(), start, "stopped: no time passed");
        assert_eq!(real.now() - start, Duration::from_secs(7));
        assert!(clock.is_stopped());
        clock.resume();
        assert!(!clock.is_stopped());
        assert_eq!(clock.now() - start, Duration::from_secs(7), "the pause, seen at once");
        let shared = clock.clone();
        shared.stop();
        assert!(clock.is_stopped(), "clones share one clock");
    }
}
