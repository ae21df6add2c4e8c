//! One thread's system calls, counted and timed exactly with eBPF: how
//! many of each and how long the thread spent in them, over a window.
//!
//! ```text
//! sys_enter / sys_exit raw tracepoints (this thread only)
//!   ─▶ per-number tally in the kernel ─▶ read once at the end ─▶ SyscallTally
//! ```
//!
//! Sampled stacks say where a thread's time goes in proportion; this says
//! it exactly for the system calls (a server's accept loop: `accept4`,
//! `poll`, `fcntl`, `setsockopt`, the `futex` that wakes a cached thread),
//! and how many calls each connection costs. Beside them, the scheduler's
//! own accounting says how long the thread ran and how long it waited for
//! a CPU. The probes stop nothing. While they are attached every system
//! call on the host takes the kernel's traced entry and exit path and runs
//! the probe, which for any other thread compares its id and returns.

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use serde::{Deserialize, Serialize};

use pileup_engine::ebpf::{monotonic_ns, Unavailable};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/syscalls.skel.rs"));
}
use skel::{SyscallsSkel, SyscallsSkelBuilder};

/// Numbers the probe tallies separately; the last one also holds every
/// larger or negative number.
const MAX_NR: u32 = 512;

/// Why a thread's system calls could not be counted.
#[derive(Debug, thiserror::Error)]
pub enum SyscallError {
    #[error(transparent)]
    Unavailable(#[from] Unavailable),
    #[error("thread {0} does not exist (it exited, or the id is wrong)")]
    NoThread(i32),
    #[error("eBPF: {0}")]
    Ebpf(String),
}

/// One system call's count and time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyscallTime {
    /// Its name on x86-64 (`accept4`), or `syscall_N` for a number with no
    /// name.
    pub name: String,
    /// Calls that returned in the window.
    pub calls: u64,
    /// Seconds spent in it: calls that returned, and the one under way at
    /// the window's end.
    pub seconds: f64,
}

/// A thread's system calls over a window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyscallTally {
    pub tid: i32,
    /// The window's length.
    pub seconds: f64,
    /// By time spent, most first; calls never made are left out.
    pub calls: Vec<SyscallTime>,
    /// Seconds the thread ran on a CPU in the window (user and kernel),
    /// and seconds it was runnable but waiting for one (the scheduler's
    /// own accounting, `/proc/…/schedstat`).
    #[serde(default)]
    pub on_cpu: f64,
    #[serde(default)]
    pub waiting_for_cpu: f64,
}

impl SyscallTally {
    /// The share of the window that `seconds` are (0–1).
    pub fn share(&self, seconds: f64) -> f64 {
        seconds / self.seconds.max(1e-9)
    }

    /// The share of the window the thread spent in system calls (0–1).
    pub fn in_syscalls(&self) -> f64 {
        self.share(self.calls.iter().map(|c| c.seconds).sum())
    }

    /// Calls made in the window, all system calls.
    pub fn total_calls(&self) -> u64 {
        self.calls.iter().map(|c| c.calls).sum()
    }

    /// Calls of `name` made in the window.
    pub fn calls_of(&self, name: &str) -> u64 {
        self.calls.iter().filter(|c| c.name == name).map(|c| c.calls).sum()
    }
}

pub use pileup_engine::process::syscall_name;

/// Count and time thread `tid`'s system calls for `duration`, or until
/// `stop` says so (asked every 100 ms).
pub fn tally_thread(tid: i32, duration: Duration, stop: impl Fn() -> bool) -> Result<SyscallTally, SyscallError> {
    pileup_engine::ebpf::preflight()?;
    if !std::path::Path::new(&format!("/proc/{tid}")).exists() {
        return Err(SyscallError::NoThread(tid));
    }
    libbpf_rs::set_print(None);
    let mut storage = MaybeUninit::uninit();
    let mut open = SyscallsSkelBuilder::default().open(&mut storage).map_err(|e| ebpf("opening", &e))?;
    let ro = open.maps.rodata_data.as_deref_mut().ok_or_else(|| SyscallError::Ebpf("no .rodata".into()))?;
    ro.target_tid = tid as u32;
    let mut skel: SyscallsSkel = open.load().map_err(|e| ebpf("loading", &e))?;
    let sched = || pileup_engine::process::sched_times(tid, tid);
    skel.attach().map_err(|e| ebpf("attaching", &e))?;
    let started = Instant::now();
    let sched_before = sched();
    while started.elapsed() < duration && !stop() {
        std::thread::sleep(Duration::from_millis(100).min(duration.saturating_sub(started.elapsed())));
    }
    // Detach first, so the tallies stop moving, then read them.
    skel.links = Default::default();
    let seconds = started.elapsed().as_secs_f64();
    let sched_after = sched();
    let now = monotonic_ns();
    let mut by_nr = vec![(0u64, 0u64); MAX_NR as usize];
    for (nr, slot) in by_nr.iter_mut().enumerate() {
        if let Some(v) =
            skel.maps.tallies.lookup(&(nr as u32).to_ne_bytes(), MapFlags::ANY).map_err(|e| ebpf("reading", &e))?
        {
            *slot = (u64_at(&v, 0), u64_at(&v, 8));
        }
    }
    // The call under way at the end: its time so far.
    if let Some(v) = skel.maps.inflight.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).map_err(|e| ebpf("reading", &e))? {
        let (nr, start) = (u64_at(&v, 0), u64_at(&v, 8));
        if start != 0 && (nr as usize) < by_nr.len() {
            by_nr[nr as usize].1 += now.saturating_sub(start);
        }
    }
    let mut t = tally_of(tid, seconds, &by_nr);
    if let (Some(a), Some(b)) = (sched_before, sched_after) {
        t.on_cpu = b.on_cpu_ns.saturating_sub(a.on_cpu_ns) as f64 / 1e9;
        t.waiting_for_cpu = b.waiting_ns.saturating_sub(a.waiting_ns) as f64 / 1e9;
    }
    Ok(t)
}

/// The tally from per-number (calls, ns), by time spent.
fn tally_of(tid: i32, seconds: f64, by_nr: &[(u64, u64)]) -> SyscallTally {
    let mut calls: Vec<SyscallTime> = by_nr
        .iter()
        .enumerate()
        .filter(|(_, (n, ns))| *n > 0 || *ns > 0)
        .map(|(nr, &(n, ns))| SyscallTime {
            name: if nr as u32 == MAX_NR - 1 { "other".into() } else { syscall_name(nr as u64) },
            calls: n,
            seconds: ns as f64 / 1e9,
        })
        .collect();
    calls.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(b.calls.cmp(&a.calls)).then(a.name.cmp(&b.name)));
    SyscallTally { tid, seconds, calls, on_cpu: 0.0, waiting_for_cpu: 0.0 }
}

fn u64_at(v: &[u8], at: usize) -> u64 {
    v.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes).unwrap_or(0)
}

fn ebpf(what: &str, e: &libbpf_rs::Error) -> SyscallError {
    match pileup_engine::ebpf::refused(what, e) {
        Some(refused) => SyscallError::Unavailable(refused),
        None => SyscallError::Ebpf(format!("{what} the eBPF program: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_named_for_x86_64() {
        assert_eq!(syscall_name(7), "poll");
        assert_eq!(syscall_name(288), "accept4");
        assert_eq!(syscall_name(72), "fcntl");
        assert_eq!(syscall_name(54), "setsockopt");
        assert_eq!(syscall_name(202), "futex");
        assert_eq!(syscall_name(500), "syscall_500");
    }

    #[test]
    fn the_tally_is_by_time_with_unmade_calls_left_out() {
        let mut by_nr = vec![(0, 0); MAX_NR as usize];
        by_nr[7] = (10, 900_000_000);
        by_nr[288] = (1000, 50_000_000);
        by_nr[72] = (2000, 50_000_000);
        by_nr[MAX_NR as usize - 1] = (1, 1);
        let t = tally_of(1, 1.0, &by_nr);
        let names: Vec<&str> = t.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["poll", "fcntl", "accept4", "other"]);
        assert_eq!(t.calls_of("accept4"), 1000);
        assert!((t.in_syscalls() - 1.0).abs() < 1e-6);
    }

    /// This process's own thread: its nanosleeps and the pipe writes it is
    /// made to do are counted exactly.
    #[test]
    fn a_threads_own_calls_are_counted_exactly() {
        if pileup_engine::ebpf::preflight().is_err() {
            eprintln!("skipped: eBPF is not available to this test");
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        // The worker makes its calls once the probes are attached: `stop`
        // is first asked after attaching, and says go.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            wait.recv().unwrap();
            for _ in 0..300 {
                // SAFETY: getppid has no preconditions.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
            std::thread::sleep(Duration::from_millis(2500));
        });
        let tid = rx.recv().unwrap();
        let t = tally_thread(tid, Duration::from_millis(2000), || {
            let _ = go.send(());
            false
        })
        .unwrap();
        worker.join().unwrap();
        assert_eq!(t.calls_of("getppid"), 300, "{t:?}");
        // The thread slept through most of the window: in nanosleep (or
        // clock_nanosleep), the one under way at the end included.
        let slept: f64 = t.calls.iter().filter(|c| c.name.contains("nanosleep")).map(|c| c.seconds).sum();
        assert!(slept > 1.5, "{t:?}");
        assert!(t.in_syscalls() <= 1.05, "{t:?}");
        // Asleep, it ran for a sliver of the window.
        assert!(t.on_cpu < 0.5 && t.on_cpu + t.waiting_for_cpu < t.seconds, "{t:?}");
    }
}
