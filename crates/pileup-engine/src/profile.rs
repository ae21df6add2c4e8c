//! What a sampling run learned: each sample's threads and the profile built
//! from all of them, the data every renderer reads.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::annotate::{Role, SqlThread};
use crate::capture::{CaptureStats, Missed, Mode};
use crate::locks::{LockGroup, LockWait};
use crate::proc;
use crate::regs::FUTEX_WINDOW;
use crate::symbolize::Frame;

/// Label used for a thread whose stack could not be unwound at all.
pub const NO_STACK: &str = "<no stack>";

/// One thread in one sample.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadStack {
    /// The thread's OS id.
    pub tid: i32,
    /// The thread's name (`comm`).
    pub name: String,
    /// OS state letter before the stop (R, S, D, …) and its meaning.
    pub state: char,
    /// The meaning of `state` (`running`, `sleeping`, `disk wait`, …).
    pub state_label: &'static str,
    /// Kernel function the thread slept in, if any.
    pub wchan: Option<String>,
    /// The system call the thread was blocked in, if any.
    pub syscall: Option<String>,
    /// The file a read, write, sync or allocation the thread was in works
    /// on, named from its descriptor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<proc::FileIo>,
    /// The thread's role, when it has one.
    pub role: Option<Role>,
    /// The SQL connection the thread serves, when the annotator knows it.
    pub sql: Option<SqlThread>,
    /// The lock the thread waits on, when it was blocked in a futex.
    pub lock_wait: Option<LockWait>,
    /// Microseconds this thread was stopped, and the part of it after it
    /// had stopped (held; the rest it was getting a CPU to enter the stop).
    pub stopped_us: u64,
    /// Microseconds the thread was held once stopped.
    pub held_us: u64,
    /// Frames, innermost first (inlined frames expanded).
    pub frames: Vec<Frame>,
    /// Raw lookup addresses, innermost first.
    pub addrs: Vec<u64>,
    /// Why the stack may be incomplete.
    pub unwind_error: Option<String>,
    #[serde(skip)]
    pub(crate) futex: Option<(u64, [u8; FUTEX_WINDOW])>,
}

impl ThreadStack {
    /// The frames' labels, innermost first.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.frames.iter().map(|f| f.label.as_str())
    }

    #[cfg(test)]
    pub(crate) fn test_thread(tid: i32, state: char) -> ThreadStack {
        ThreadStack {
            tid,
            name: String::new(),
            state,
            state_label: proc::state_label(state),
            wchan: None,
            syscall: None,
            file: None,
            role: None,
            sql: None,
            lock_wait: None,
            stopped_us: 0,
            held_us: 0,
            frames: vec![],
            addrs: vec![],
            unwind_error: None,
            futex: None,
        }
    }
}

/// One sample: the threads one capture read, with their stacks and annotations.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// The sample's number in the run, from 0.
    pub index: usize,
    /// Unix time of the capture, milliseconds.
    pub at_unix_ms: u64,
    /// The capture's timing and counts.
    pub stats: CaptureStats,
    /// The threads read, with their stacks and annotations.
    pub threads: Vec<ThreadStack>,
    /// The threads that could not be read, and why.
    pub missed: Vec<Missed>,
}

/// Per-module symbol coverage, for the "how complete are the symbols" line.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleReport {
    /// Short module name (`mariadbd`, `libc.so.6`).
    pub name: String,
    /// The module's path as the process sees it.
    pub path: String,
    /// The module's build id (hex), when it has one.
    pub build_id: Option<String>,
    /// What symbol information the module has, in words: `stripped, no symbols`,
    /// `full symbol table (N symbols), no debug info`, …
    pub symbols: String,
    /// The separate debug file used, when one was found.
    pub debug_file: Option<String>,
    /// Distinct frame addresses in this module, and how many got a name.
    pub frames: usize,
    /// How many of those addresses got a function name.
    pub named: usize,
}

/// Where a run's time went, stage by stage (µs, summed over the samples), and what the run cost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timing {
    /// Loading the target's modules (µs).
    pub load_modules_us: u64,
    /// Capturing the threads (µs).
    pub capture_us: u64,
    /// Unwinding the copied stacks (µs).
    pub unwind_us: u64,
    /// Naming frames (µs).
    pub symbolize_us: u64,
    /// Reading the threads' SQL and OS state, their lock waits, and counting stacks (µs).
    pub annotate_us: u64,
    /// pileup's own CPU time over the run, user and system, start-up included.
    pub cpu_us: u64,
    /// CPU time the server spent serving pileup's SQL connection over the
    /// run (null without SQL, on another host, with a thread pool, or
    /// after an SQL error).
    pub server_sql_cpu_us: Option<u64>,
    /// Context switches a second on the whole machine over the run. While
    /// any thread has a perf event attached (passive mode's fallback when
    /// CPU events or the eBPF iterator cannot be had), and for about a
    /// second after, the kernel runs its perf hooks on every one of them.
    pub machine_context_switches_per_s: Option<u64>,
}

/// What stopping the threads cost, over every sample of a run (bounded:
/// extremes and percentiles, not a line per sample).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StopSummary {
    /// Samples taken.
    pub samples: usize,
    /// The longest stopped window of any sample, and that sample's index.
    pub worst_window_us: u64,
    /// The index of the sample with the longest window.
    pub worst_window_sample: usize,
    /// Median and 99th percentile of the samples' stopped windows.
    pub median_window_us: u64,
    /// 99th percentile of the samples' stopped windows (µs).
    pub p99_window_us: u64,
    /// The longest any single thread was stopped, and the longest any was
    /// held once stopped (the rest of a stop is the wait for a CPU to enter
    /// it, which a saturated server's run queue imposes anyway).
    pub longest_thread_us: u64,
    /// The longest any single thread was held once stopped (µs).
    pub longest_held_us: u64,
    /// Samples whose `--max-stop-ms` ran out.
    pub budget_exceeded: usize,
    /// Thread stacks read while the thread was blocked, without a stop
    /// (both modes), and sampled on its CPU (passive mode).
    pub read_blocked: usize,
    /// Passive mode: running threads sampled on their CPU.
    pub sampled_on_cpu: usize,
    /// Of those, sampled with a perf event attached to the thread, used
    /// when CPU events or the eBPF iterator cannot be had (see the cost
    /// line).
    pub sampled_by_thread_event: usize,
    /// Passive mode: runnable threads read while waiting for a CPU.
    pub read_queued: usize,
    /// Consistent mode: threads read asleep that had run by the time the
    /// others were held, and were interrupted then.
    pub woke_after_read: usize,
    /// Consistent mode: threads still queued for a CPU when the others were
    /// let go, copied as each stopped.
    pub stopped_late: usize,
    /// Threads missed, by reason.
    pub missed: BTreeMap<String, usize>,
    /// Unix time of the first and the last sample, milliseconds.
    pub first_unix_ms: u64,
    /// Unix time of the last sample, milliseconds.
    pub last_unix_ms: u64,
}

impl StopSummary {
    /// Count sample `idx`'s capture, taken at `at_unix_ms`.
    pub(crate) fn add(&mut self, idx: usize, st: &CaptureStats, missed: &[Missed], at_unix_ms: u64) {
        self.samples += 1;
        if self.samples == 1 || st.window_us > self.worst_window_us {
            (self.worst_window_us, self.worst_window_sample) = (st.window_us, idx);
        }
        self.longest_thread_us = self.longest_thread_us.max(st.max_thread_stop_us);
        self.longest_held_us = self.longest_held_us.max(st.max_thread_held_us);
        self.budget_exceeded += st.budget_exceeded as usize;
        self.read_blocked += st.threads_read_blocked;
        self.sampled_on_cpu += st.threads_sampled_on_cpu;
        self.sampled_by_thread_event += st.threads_sampled_by_thread_event;
        self.read_queued += st.threads_read_queued;
        self.woke_after_read += st.woke_after_read;
        self.stopped_late += st.stopped_late;
        for m in missed {
            *self.missed.entry(m.reason.clone()).or_default() += 1;
        }
        if self.samples == 1 {
            self.first_unix_ms = at_unix_ms;
        }
        self.last_unix_ms = at_unix_ms;
    }
}

/// Everything one `pileup stacks` run learned.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// The process sampled.
    pub pid: i32,
    /// Its executable's name.
    pub exe: String,
    /// The server's version, when an annotator reported it.
    pub server_version: Option<String>,
    /// The capture mode used.
    pub mode: Mode,
    /// Every sample's stacks, counted: distinct stack, thread kind and state
    /// with how many thread-samples had it, most frequent first.
    pub stacks: Vec<Counted>,
    /// Thread stacks counted in all (the sum of `stacks`' counts).
    pub thread_stacks: usize,
    /// The stop statistics of every sample.
    pub stops: StopSummary,
    /// The last samples taken, whole (every thread's frames and annotations):
    /// all of them unless the run took more than `keep_samples`.
    pub samples: Vec<Sample>,
    /// Symbol coverage of each module with frames in the run, most frames first.
    pub modules: Vec<ModuleReport>,
    /// Share of distinct frame addresses that have a function name (0–100).
    pub named_pct: f64,
    /// Locks threads waited on, with their owners where known, the most contended first.
    pub locks: Vec<LockGroup>,
    /// Where the run's time went, and what it cost.
    pub timing: Timing,
    /// Things the user must know to read the result honestly.
    pub notes: Vec<String>,
}

impl Profile {
    /// Every thread of the samples kept whole.
    pub fn threads(&self) -> impl Iterator<Item = &ThreadStack> {
        self.samples.iter().flat_map(|s| s.threads.iter())
    }

    /// The stack of a thread in the last kept sample that has it.
    pub fn thread(&self, tid: i32) -> Option<&ThreadStack> {
        self.samples.iter().rev().find_map(|s| s.threads.iter().find(|t| t.tid == tid))
    }

    /// The stack of a thread in sample `index`, if that sample was kept.
    pub fn thread_in(&self, index: usize, tid: i32) -> Option<&ThreadStack> {
        self.samples.iter().find(|s| s.index == index).and_then(|s| s.threads.iter().find(|t| t.tid == tid))
    }

    /// Thread-samples whose unwinding stopped early.
    pub fn partial_stacks(&self) -> usize {
        self.stacks.iter().map(|c| c.partial).sum()
    }
}

/// One distinct stack as one kind of thread had it, with every sample of it
/// counted: the unit every renderer reads.
#[derive(Debug, Clone, Serialize)]
pub struct Counted {
    /// Frames, innermost first (inlined frames expanded).
    pub frames: Vec<Frame>,
    /// Raw lookup addresses, innermost first.
    pub addrs: Vec<u64>,
    /// Thread name, role and OS state letter of the threads counted here.
    pub thread: String,
    /// Their role, when they have one.
    pub role: Option<Role>,
    /// Their OS state letter.
    pub state: char,
    /// The meaning of `state`.
    pub state_label: &'static str,
    /// Their SQL command (`Query`, `Sleep`, …), when annotated.
    pub sql_command: Option<String>,
    /// Their SQL user, when annotated.
    pub sql_user: Option<String>,
    /// Thread-samples with this stack.
    pub count: usize,
    /// Distinct threads seen with it (the first [`TIDS_KEPT`]).
    pub tids: BTreeSet<i32>,
    /// More threads had it than `tids` holds.
    pub tids_capped: bool,
    /// Distinct SQL summaries of the threads behind it (capped).
    pub sql: BTreeSet<String>,
    /// Statements (normalised whitespace) with counts; statements beyond the
    /// kept ones are counted in `other_statements`.
    pub statements: BTreeMap<String, usize>,
    /// Statements seen beyond the kept ones.
    pub other_statements: usize,
    /// Thread-samples whose unwinding stopped early.
    pub partial: usize,
}

impl Counted {
    /// The frames' labels, innermost first, or `<no stack>` alone for a stack with no frames.
    pub fn labels(&self) -> Vec<String> {
        if self.frames.is_empty() {
            vec![NO_STACK.to_string()]
        } else {
            self.frames.iter().map(|f| f.label.clone()).collect()
        }
    }

    /// The root a flame graph puts this stack under with `--thread-root`.
    pub fn root(&self) -> String {
        match (&self.role, self.thread.as_str()) {
            (Some(r), _) => r.as_str().to_string(),
            (None, "") => "thread".to_string(),
            (None, n) => n.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_statistics_keep_the_worst_window_sums_and_missed_reasons() {
        let mut s = StopSummary::default();
        let st = |window_us, stop| CaptureStats {
            window_us,
            max_thread_stop_us: stop,
            threads_read_blocked: 3,
            ..Default::default()
        };
        let gone = Missed { tid: 9, reason: "exited during the capture".into() };
        s.add(0, &st(500, 400), &[], 1_000);
        s.add(1, &st(900, 100), std::slice::from_ref(&gone), 1_100);
        s.add(2, &st(700, 800), &[gone], 1_200);
        assert_eq!((s.samples, s.worst_window_us, s.worst_window_sample), (3, 900, 1));
        assert_eq!((s.longest_thread_us, s.read_blocked), (800, 9));
        assert_eq!(s.missed["exited during the capture"], 2);
        assert_eq!((s.first_unix_ms, s.last_unix_ms), (1_000, 1_200));
    }
}
