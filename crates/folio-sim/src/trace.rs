//! A run's trace: what the simulator did (workload operations, faults, the network's
//! resets and refusals, checks) and what the components logged, each line stamped with
//! simulated time. The last [`TRACE_LINES_MAX`] lines are kept for the failure report; a
//! checksum over the simulator's own lines (not the components' logs, which may carry
//! measured durations) shows that a seed replays exactly. A component's log line with an
//! `invariant` field (an invariant found broken and repaired at run time, such as a writer's
//! published LAC behind its confirmed one) is also kept as a broken promise of the run.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::limits::TRACE_LINES_MAX;
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// See the module docs. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Trace {
    inner: Arc<Mutex<TraceState>>,
}

#[derive(Debug)]
struct TraceState {
    start: Instant,
    lines: VecDeque<String>,
    checksum: u32,
    events: u64,
    /// Print every line to stderr as it comes (`FOLIO_SIM_VERBOSE`).
    echo: bool,
    /// The components' lines that name a broken invariant (at most `TRACE_LINES_MAX`).
    invariants: Vec<String>,
}

impl Trace {
    /// An empty trace whose time starts now (call it on the simulation's runtime).
    pub fn new(echo: bool) -> Trace {
        Trace {
            inner: Arc::new(Mutex::new(TraceState {
                start: Instant::now(),
                lines: VecDeque::with_capacity(TRACE_LINES_MAX),
                checksum: 0,
                events: 0,
                echo,
                invariants: Vec::new(),
            })),
        }
    }

    fn push(&self, line: String, hashed: bool) {
        let mut st = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = st.start.elapsed();
        let line = format!("[{:>4}.{:06}s] {line}", at.as_secs(), at.subsec_micros());
        if hashed {
            st.checksum = crc32c::crc32c_append(st.checksum, line.as_bytes());
            st.events += 1;
        }
        if st.echo {
            eprintln!("{line}");
        }
        if st.lines.len() == TRACE_LINES_MAX {
            st.lines.pop_front();
        }
        st.lines.push_back(line);
    }

    /// Records what the simulator did.
    pub fn event(&self, what: impl std::fmt::Display) {
        self.push(what.to_string(), true);
    }

    /// The checksum of the simulator's lines so far, and how many there were.
    pub fn checksum(&self) -> (u32, u64) {
        let st = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (st.checksum, st.events)
    }

    /// The components' lines that named a broken invariant.
    pub fn invariants(&self) -> Vec<String> {
        let st = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.invariants.clone()
    }

    /// The lines kept, oldest first.
    pub fn tail(&self) -> Vec<String> {
        let st = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        st.lines.iter().cloned().collect()
    }
}

/// Sends the components' log events into a [`Trace`] (unhashed).
#[derive(Debug, Clone)]
pub struct TraceLayer(pub Trace);

struct Fields(String, bool);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.1 |= field.name() == "invariant";
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.1 |= field.name() == "invariant";
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for TraceLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields(format!("{} {}:", meta.level(), meta.target()), false);
        event.record(&mut fields);
        if fields.1 {
            let mut st = self.0.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if st.invariants.len() < TRACE_LINES_MAX {
                st.invariants.push(fields.0.clone());
            }
        }
        self.0.push(fields.0, false);
    }
}
