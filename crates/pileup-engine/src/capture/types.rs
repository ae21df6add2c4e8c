//! What a capture is asked for and what it returns.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::regs::{Regs, FUTEX_WINDOW};

/// How a capture treats the threads it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// All threads stopped together: one true snapshot, window as short as possible.
    Consistent,
    /// One thread at a time: the least stop for any single thread.
    Rolling,
    /// No thread stopped: blocked threads read as they sleep, running ones
    /// sampled on their CPU (perf events). The default with --focus.
    Passive,
}

impl Mode {
    /// Every mode, for help and parsing.
    pub const ALL: [Mode; 3] = [Mode::Consistent, Mode::Rolling, Mode::Passive];

    /// A mode by its name.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The mode's name, as the command line takes it and JSON writes it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Consistent => "consistent",
            Mode::Rolling => "rolling",
            Mode::Passive => "passive",
        }
    }
}

/// What a capture is asked for.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// How the threads are captured.
    pub mode: Mode,
    /// Upper bound on the stack bytes copied per thread.
    pub stack_bytes: usize,
    /// Longest any thread may stay stopped (consistent: the whole window).
    pub max_stop: Duration,
    /// Run the capture thread at real-time priority for the stop window.
    pub raised_priority: bool,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        CaptureOptions {
            mode: Mode::Consistent,
            stack_bytes: 256 * 1024,
            max_stop: Duration::from_millis(200),
            raised_priority: true,
        }
    }
}

/// What was copied from one stopped thread.
#[derive(Debug, Clone, Default)]
pub struct RawThread {
    /// The thread's id.
    pub tid: i32,
    /// Its registers where it was read.
    pub regs: Regs,
    /// Address of `stack[0]` (the stack pointer at the stop).
    pub stack_addr: u64,
    /// The bytes copied from the stack pointer up (at most the capture's `stack_bytes`).
    pub stack: Vec<u8>,
    /// When blocked in futex: the futex address and the [`FUTEX_WINDOW`]
    /// bytes starting [`FUTEX_BEFORE`] bytes before it (lock owner lookup).
    pub futex: Option<(u64, [u8; FUTEX_WINDOW])>,
    /// Stopped after the threads held for the snapshot were let go (it was
    /// queued for a CPU until then). It ran no code of its own since its
    /// interrupt, inside the snapshot, so its frames are the snapshot's; but
    /// a system call it was inside then has finished (it shows just after
    /// the call), and the lock word it waits on was read later.
    pub late: bool,
    /// How long this thread was stopped (µs), from the interrupt to the detach.
    pub stopped_us: u64,
    /// The part of that after it had stopped (µs): the time it was held.
    /// The rest, from the interrupt to the stop, it spent getting a CPU to
    /// enter the stop (or waking from a sleep): time in which it would not
    /// have run its own code either.
    pub held_us: u64,
}

/// A thread we could not capture, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missed {
    /// The thread's id.
    pub tid: i32,
    /// Why it was not captured.
    pub reason: String,
}

/// Timing and counts of one capture.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CaptureStats {
    /// The capture mode's name.
    pub mode: String,
    /// Threads the capture was asked to read.
    pub threads_listed: usize,
    /// Threads whose registers and stack were copied.
    pub threads_captured: usize,
    /// Threads not captured (see [`Missed`]).
    pub threads_missed: usize,
    /// Threads of the process that were not there when the sample listed them,
    /// counted just after the capture.
    pub threads_appeared: usize,
    /// From the first interrupt until the held threads are let go (µs);
    /// threads stopped late are not held in it (see `stopped_late`).
    pub window_us: u64,
    /// The longest any single thread was stopped (µs), from its interrupt to
    /// its detach: for a thread stopped late, mostly its wait for a CPU.
    pub max_thread_stop_us: u64,
    /// Median single-thread stop (µs).
    pub median_thread_stop_us: u64,
    /// The longest and the median time a thread was held once stopped (µs):
    /// what the capture took from the server's threads. The difference to
    /// the stop is time waiting for a CPU to enter the stop, which on a
    /// saturated server is the run queue's wait, not the capture's cost.
    pub max_thread_held_us: u64,
    /// The median time a thread was held once stopped (µs).
    pub median_thread_held_us: u64,
    /// Wall time of the capture call, including listing threads (µs).
    pub capture_us: u64,
    /// Stack bytes copied, over all threads.
    pub stack_bytes_copied: u64,
    /// True when `--max-stop-ms` ran out and the capture was cut short.
    pub budget_exceeded: bool,
    /// Passive mode: threads read while blocked, and sampled on their CPU.
    pub threads_read_blocked: usize,
    /// Passive mode: running threads sampled on their CPU.
    pub threads_sampled_on_cpu: usize,
    /// Of those, sampled with an event attached to the thread (CPU events
    /// or the task iterator could not be had): see [`perf`].
    pub threads_sampled_by_thread_event: usize,
    /// Passive mode: runnable threads read while waiting for a CPU
    /// ([`queued`]).
    pub threads_read_queued: usize,
    /// Consistent mode: threads read asleep that had run by the time the
    /// others were held (interrupted in a further phase).
    pub woke_after_read: usize,
    /// Consistent mode: how long the sleeper checks held the threads
    /// already stopped (µs), part of `window_us`.
    pub checks_us: u64,
    /// Consistent mode: threads that were queued for a CPU when the others
    /// were let go, copied when they stopped (see `max_thread_stop_us`).
    pub stopped_late: usize,
}

/// What one capture copied: the threads read, those missed, and its statistics.
pub struct RawSample {
    /// The threads copied, sorted by tid.
    pub threads: Vec<RawThread>,
    /// The threads that could not be copied, and why.
    pub missed: Vec<Missed>,
    /// Timing and counts of the capture.
    pub stats: CaptureStats,
}

pub(crate) fn finish(
    tids: &[i32],
    mut threads: Vec<RawThread>,
    missed: Vec<Missed>,
    window_us: u64,
    t0: Instant,
    budget_exceeded: bool,
    mode: &str,
) -> RawSample {
    threads.sort_by_key(|t| t.tid);
    // The longest and the median of a per-thread figure.
    let stopped: Vec<&RawThread> = threads.iter().filter(|t| t.stopped_us > 0 || t.held_us > 0).collect();
    let max_median = |f: fn(&RawThread) -> u64| {
        let mut v: Vec<u64> = stopped.iter().map(|t| f(t)).collect();
        v.sort_unstable();
        (v.last().copied().unwrap_or(0), v.get(v.len() / 2).copied().unwrap_or(0))
    };
    // Threads read without a stop (in disk wait) stopped for no time: the
    // figures are of the threads stopped.
    let (max_stop, median_stop) = max_median(|t| t.stopped_us);
    let (max_held, median_held) = max_median(|t| t.held_us);
    let stats = CaptureStats {
        mode: mode.into(),
        threads_listed: tids.len(),
        threads_captured: threads.len(),
        threads_missed: missed.len(),
        // Threads created meanwhile: the sampler knows every thread it
        // listed (this capture may have been given a few of them).
        threads_appeared: 0,
        window_us,
        max_thread_stop_us: max_stop,
        median_thread_stop_us: median_stop,
        max_thread_held_us: max_held,
        median_thread_held_us: median_held,
        capture_us: t0.elapsed().as_micros() as u64,
        stack_bytes_copied: threads.iter().map(|t| t.stack.len() as u64).sum(),
        budget_exceeded,
        threads_read_blocked: 0,
        threads_sampled_on_cpu: 0,
        threads_sampled_by_thread_event: 0,
        threads_read_queued: 0,
        woke_after_read: 0,
        checks_us: 0,
        stopped_late: 0,
    };
    RawSample { threads, missed, stats }
}
