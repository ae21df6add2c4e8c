//! A server's threads sampled in the background while other work runs
//! (`pileup load --profile`), passively (no thread stopped), and where
//! their time went.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use pileup_engine::analysis::Share;
use pileup_engine::{CaptureOptions, EngineError, Mode, Profile, Sampler, SamplerOptions, ThreadFilter};
use pileup_output::{plural, News};

/// Sampling on a thread of its own until [`Background::finish`].
pub struct Background {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<Profile, EngineError>>,
}

impl Background {
    /// Start sampling process `pid` every `interval`; an error (no such
    /// process, no permission) comes back before any work starts.
    pub fn start(pid: i32, interval: Duration) -> Result<Background, EngineError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let flag = stop.clone();
        let handle = std::thread::spawn(move || -> Result<Profile, EngineError> {
            let opts = SamplerOptions {
                capture: CaptureOptions { mode: Mode::Passive, ..Default::default() },
                filter: ThreadFilter::default(),
                any_process: false,
                debug_info: false,
                sql_refresh: Duration::from_secs(60),
                sql_bracket: false,
                debug_dirs: pileup_engine::default_debug_dirs(),
                debuginfod: None,
                debuginfod_wait: false,
                keep_samples: 1,
            };
            // Made on this thread, which then samples with it; a failure
            // drops the sender unsent and is this thread's result.
            let mut sampler = Sampler::new(pid, opts, None)?;
            let _ = ready_tx.send(());
            sampler.run_until(usize::MAX, interval, None, Some(&flag), |_| {})?;
            Ok(sampler.finish())
        });
        if ready_rx.recv().is_ok() {
            return Ok(Background { stop, handle });
        }
        // It did not start: the thread's result says why (a thread that
        // returns a profile has started, so that arm is the process gone).
        match handle.join() {
            Ok(Err(e)) => Err(e),
            Ok(Ok(_)) => Err(EngineError::ProcessExited(pid)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Stop sampling and return what was sampled.
    pub fn finish(self) -> Result<Profile, EngineError> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// Where a server's working threads spent their time while it was sampled
/// in the background, and the file their stacks went to (the `profile`
/// event of `pileup load --json`).
#[derive(serde::Serialize)]
#[serde(tag = "event", rename = "profile")]
pub struct WhereTimeWent<'a> {
    /// Samples taken.
    pub samples: usize,
    /// How often (per second).
    pub hz: f64,
    /// The folded stacks' file.
    pub file: &'a Path,
    /// Thread-samples by state and function, largest first.
    pub shares: Vec<Share>,
    /// Share of frames with a name.
    pub named_pct: f64,
}

impl<'a> WhereTimeWent<'a> {
    /// Profile `p`'s answer, sampled every `interval`, its stacks in `file`.
    pub fn of(p: &Profile, interval: Duration, file: &'a Path) -> WhereTimeWent<'a> {
        WhereTimeWent {
            samples: p.stops.samples,
            hz: 1.0 / interval.as_secs_f64().max(1e-6),
            file,
            shares: pileup_engine::analysis::where_time_went(&p.stacks, 12),
            named_pct: p.named_pct,
        }
    }
}

impl News for WhereTimeWent<'_> {
    fn text(&self) -> Option<String> {
        use std::fmt::Write;
        let mut s = format!(
            "where the server's working threads spent the load ({} at {:.0} Hz, no thread stopped; stacks in {}):",
            plural(self.samples, "sample", "samples"),
            self.hz,
            self.file.display()
        );
        if self.shares.is_empty() {
            s.push_str("\n  no thread was seen on a CPU, waiting on the disk or on a lock");
        }
        for sh in &self.shares {
            let innermost = sh.innermost.as_deref().map(|i| format!("  (innermost: {i})")).unwrap_or_default();
            let _ = write!(s, "\n  {:5.1}%  {:<9}  {}{innermost}", sh.pct, sh.state, sh.function);
        }
        if self.named_pct < 100.0 {
            s.push_str(
                "\n  frames shown as module+0xOFFSET have no name in the binary (a stripped build: install its debug symbols to name them)",
            );
        }
        Some(s)
    }
}
