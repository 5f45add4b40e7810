//! Progress of a long command on stderr: a bar redrawn in place on a terminal, plain lines
//! otherwise (a log, a pipe, CI), at most one per [`PROGRESS_LINE_EVERY`] unless the
//! fraction done moved by a tenth. No dependency: a bar is one line of text.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::limits::PROGRESS_LINE_EVERY;

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
