//! Progress of a long command on stderr: a bar redrawn in place on a terminal, plain lines
//! otherwise (a log, a pipe, CI), at most one per [`PROGRESS_LINE_EVERY`] unless the
//! fraction done moved by a tenth. No dependency: a bar is one line of text.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::limits::{PROGRESS_LINE_EVERY, PROGRESS_TICKER_LINE_EVERY};

/// Width of the bar in characters.
const BAR_WIDTH: usize = 30;

/// One operation's progress towards `total` units.
#[derive(Debug)]
pub struct Progress {
    what: String,
    total: u64,
    tty: bool,
    last_line: Option<(Instant, u64)>,
}

impl Progress {
    /// Progress of `what` over `total` units (at least 1).
    pub fn new(what: impl Into<String>, total: u64) -> Progress {
        let tty = std::io::stderr().is_terminal();
        Progress { what: what.into(), total: total.max(1), tty, last_line: None }
    }

    /// The units of the whole operation.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// `done` of the total units are done; `detail` says what is left.
    pub fn set(&mut self, done: u64, detail: &str) {
        let done = done.min(self.total);
        let percent = done * 100 / self.total;
        if self.tty {
            let filled = (done as usize * BAR_WIDTH) / self.total as usize;
            let bar = format!("{}{}", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
            eprint!("\r\x1b[2K{} [{bar}] {percent:>3}% {detail}", self.what);
            let _ = std::io::stderr().flush();
            return;
        }
        let due = match self.last_line {
            None => true,
            Some((at, was)) => {
                at.elapsed() >= PROGRESS_LINE_EVERY
                    || done * 10 / self.total != was * 10 / self.total
            }
        };
        if due {
            eprintln!("{}: {percent}% {detail}", self.what);
            self.last_line = Some((Instant::now(), done));
        }
    }

    /// The operation ended: the bar's line is closed with `outcome`.
    pub fn finish(&mut self, outcome: &str) {
        if self.tty {
            eprintln!("\r\x1b[2K{}: {outcome}", self.what);
        } else {
            eprintln!("{}: {outcome}", self.what);
        }
    }
}

/// Progress of a run whose length is not known ahead (a benchmark): its elapsed time, in
/// place every second on a terminal when stdout is elsewhere (the figures it prints would
/// cut a line drawn in place), else a plain line on stderr every
/// [`PROGRESS_TICKER_LINE_EVERY`]; a line when it starts and when it ends.
#[derive(Debug)]
pub struct Ticker {
    what: String,
    in_place: bool,
    started: Instant,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Starts showing `what`'s elapsed time until the ticker is dropped.
    pub fn start(what: impl Into<String>) -> Ticker {
        use std::sync::atomic::Ordering;
        let what = what.into();
        let in_place = std::io::stderr().is_terminal() && !std::io::stdout().is_terminal();
        let every = if in_place { Duration::from_secs(1) } else { PROGRESS_TICKER_LINE_EVERY };
        eprintln!("{what}: started");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, label, started) = (stop.clone(), what.clone(), Instant::now());
        let thread = std::thread::spawn(move || {
            let mut next = every;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let elapsed = started.elapsed();
                if elapsed < next {
                    continue;
                }
                next += every;
                if in_place {
                    eprint!("\r\x1b[2K{label}: running for {} s", elapsed.as_secs());
                    let _ = std::io::stderr().flush();
                } else {
                    eprintln!("{label}: running for {} s", elapsed.as_secs());
                }
            }
        });
        Ticker { what, in_place, started, stop, thread: Some(thread) }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let took = self.started.elapsed().as_secs_f64();
        let clear = if self.in_place { "\r\x1b[2K" } else { "" };
        eprintln!("{clear}{}: done in {took:.1} s", self.what);
    }
}
