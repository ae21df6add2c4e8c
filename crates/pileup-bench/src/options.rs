//! How a run goes and what it reports as it goes.

use std::time::Duration;

use crate::report::ExperimentReport;

/// How an experiment runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Client threads of each point of a curve.
    pub threads: Vec<u32>,
    /// Each round's counted window.
    pub duration: Duration,
    /// Before each window: connected, running, not counted.
    pub warmup: Duration,
    pub rounds: u32,
    /// Profile the server at the knee (and at the most threads).
    pub profile: bool,
    /// Tables of the table-open experiment.
    pub tables: u32,
    /// Rows of the point-select and range tables.
    pub rows: u32,
    /// Set by a signal: the window running ends, the settings changed are
    /// put back, and the run returns what it measured.
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: vec![1, 10, 50, 100, 200],
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            rounds: 3,
            profile: true,
            tables: 2000,
            rows: 100_000,
            stop: None,
        }
    }
}

/// What a run reports as it goes.
#[derive(serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    /// A series (one curve) begins.
    Series { experiment: &'a str, label: &'a str, index: usize, of: usize },
    /// A window is about to run (for a progress line).
    Window { experiment: &'a str, label: &'a str, threads: u32, round: u32, rounds: u32 },
    /// A point is measured; the report so far (for keeping partial results).
    Point { report: &'a ExperimentReport },
    /// The server is being profiled.
    Profiling { threads: u32, seconds: f64 },
}

/// How a run's progress line reads; the points are for the program to
/// keep (partial results), not to say.
impl pileup_output::News for Event<'_> {
    fn progress(&self) -> pileup_output::Progress {
        use pileup_output::Progress;
        let doing = |s: String| Progress::doing(s);
        match self {
            Event::Series { experiment, label, index, of } => doing(format!("{experiment}: {label} ({index} of {of})")),
            Event::Window { experiment, label, threads, round, rounds } => {
                doing(format!("{experiment}: {label}, {}, round {round} of {rounds}", crate::words::threads(*threads)))
            }
            Event::Profiling { threads, seconds } => {
                doing(format!("profiling the server at {} for {seconds:.0} s", crate::words::threads(*threads)))
            }
            Event::Point { .. } => Progress::none(),
        }
    }
}

/// Where a run reports (ripgrep's `Sink`).
pub trait Sink {
    fn event(&mut self, e: &Event);
}

impl<F: FnMut(&Event)> Sink for F {
    fn event(&mut self, e: &Event) {
        self(e)
    }
}
