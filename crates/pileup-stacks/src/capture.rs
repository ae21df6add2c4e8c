//! Capture: stop threads as briefly as possible and copy what unwinding needs.
//!
//! For each thread: `PTRACE_SEIZE` (no stop, and — unlike `PTRACE_ATTACH` — the
//! kernel resumes the thread by itself if pileup dies), `PTRACE_INTERRUPT`,
//! wait for the stop, read the registers, copy the live part of the stack with
//! `process_vm_readv`, read the futex word the thread is blocked on (for lock
//! owners), then `PTRACE_DETACH`. Nothing else happens while a thread is
//! stopped: unwinding and symbolizing run later on the copies.
//!
//! All ptrace work runs on a dedicated OS thread created for the capture. The
//! kernel ties tracees to the tracing *thread*: when that thread exits, every
//! thread it still traces is detached and resumed. So if the `--max-stop-ms`
//! budget runs out while some thread has not even stopped yet (blocked in an
//! uninterruptible syscall, say), the capture thread detaches what it holds and
//! returns, and the kernel releases the rest: pileup never waits on the server.
//!
//! Modes:
//! * `Consistent`: interrupt every thread, copy each as it stops, and release
//!   them all once every thread has stopped — one true snapshot in which all
//!   threads were stopped at the same instant.
//! * `Rolling`: one thread at a time — the least stop for any single thread,
//!   but threads are seen at slightly different moments.

use std::io::IoSliceMut;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde::Serialize;

use crate::error::{tracer_of, StacksError};
use crate::proc::{find_map, MapEntry, SYS_FUTEX};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// All threads stopped together: one true snapshot, window as short as possible.
    Consistent,
    /// One thread at a time: the least stop for any single thread.
    Rolling,
}

#[derive(Debug, Clone)]
pub struct CaptureOptions {
    pub mode: Mode,
    /// Upper bound on the stack bytes copied per thread.
    pub stack_bytes: usize,
    /// Longest any thread may stay stopped (consistent: the whole window).
    pub max_stop: Duration,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        CaptureOptions { mode: Mode::Consistent, stack_bytes: 256 * 1024, max_stop: Duration::from_millis(200) }
    }
}

/// The registers unwinding and annotation need (x86_64).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Syscall number if the thread was stopped inside one (`orig_rax`), else -1.
    pub orig_ax: i64,
    pub ax: i64,
    /// First syscall argument (the futex address for futex waits).
    pub di: u64,
    pub si: u64,
}

impl Regs {
    /// The syscall the thread was blocked in when interrupted, if any.
    /// A syscall interrupted by the stop returns one of the -ERESTART* codes
    /// and is restarted transparently when the thread resumes.
    pub fn blocked_syscall(&self) -> Option<u64> {
        (self.orig_ax >= 0 && (-516..=-512).contains(&self.ax)).then_some(self.orig_ax as u64)
    }
}

/// Bytes copied before the futex word: rwlock waiters block on a field inside
/// the lock (offset 8 or 12), not at its start.
pub const FUTEX_BEFORE: u64 = 16;
pub const FUTEX_WINDOW: usize = 48;

/// What was copied from one stopped thread.
#[derive(Debug, Clone, Default)]
pub struct RawThread {
    pub tid: i32,
    pub regs: Regs,
    /// Address of `stack[0]` (the stack pointer at the stop).
    pub stack_addr: u64,
    pub stack: Vec<u8>,
    /// When blocked in futex: the futex address and the [`FUTEX_WINDOW`]
    /// bytes starting [`FUTEX_BEFORE`] bytes before it (lock owner lookup).
    pub futex: Option<(u64, [u8; FUTEX_WINDOW])>,
    /// How long this thread was stopped (µs), from the interrupt to the detach.
    pub stopped_us: u64,
}

/// A thread we could not capture, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missed {
    pub tid: i32,
    pub reason: String,
}

/// Timing and counts of one capture.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CaptureStats {
    pub mode: String,
    pub threads_listed: usize,
    pub threads_captured: usize,
    pub threads_missed: usize,
    pub threads_appeared: usize,
    /// From the first interrupt to the last detach (µs).
    pub window_us: u64,
    /// The longest any single thread was stopped (µs).
    pub max_thread_stop_us: u64,
    /// Median single-thread stop (µs).
    pub median_thread_stop_us: u64,
    /// Wall time of the capture call, including listing threads (µs).
    pub capture_us: u64,
    pub stack_bytes_copied: u64,
    /// True when `--max-stop-ms` ran out and the capture was cut short.
    pub budget_exceeded: bool,
}

pub struct RawSample {
    pub threads: Vec<RawThread>,
    pub missed: Vec<Missed>,
    pub stats: CaptureStats,
}

/// Stop `tids` of `pid` and copy their registers and stacks. `maps` (read
/// beforehand) bounds each stack copy at the end of its mapping.
pub fn capture(pid: i32, tids: &[i32], maps: &[MapEntry], opts: &CaptureOptions) -> Result<RawSample, StacksError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(StacksError::UnsupportedArch);
    }
    let tids = tids.to_vec();
    let maps = maps.to_vec();
    let opts = opts.clone();
    // A fresh OS thread per capture: see the module docs for why.
    std::thread::Builder::new()
        .name("pileup-capture".into())
        .spawn(move || match opts.mode {
            Mode::Consistent => capture_consistent(pid, &tids, &maps, &opts),
            Mode::Rolling => capture_rolling(pid, &tids, &maps, &opts),
        })
        .expect("spawning the capture thread")
        .join()
        .unwrap_or(Err(StacksError::ProcessExited(pid)))
}

enum Seized {
    Ok,
    Gone,
}

/// `held_any`: some thread of this capture was seized already, so an EPERM
/// now means this thread is exiting (the kernel refuses to trace those), not
/// that we lack permission.
fn seize(pid: i32, tid: i32, held_any: bool) -> Result<Seized, StacksError> {
    match ptrace::seize(Pid::from_raw(tid), ptrace::Options::empty()) {
        Ok(()) => Ok(Seized::Ok),
        Err(Errno::ESRCH) => Ok(Seized::Gone),
        Err(Errno::EPERM) => match tracer_of(pid, tid) {
            Some(t) => Err(StacksError::AlreadyTraced { pid, tracer: t }),
            None if held_any || exiting(pid, tid) => Ok(Seized::Gone),
            None => Err(StacksError::Permission { pid, detail: "PTRACE_SEIZE: operation not permitted".into() }),
        },
        Err(e) => Err(StacksError::Permission { pid, detail: format!("PTRACE_SEIZE: {e}") }),
    }
}

fn exiting(pid: i32, tid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) {
        Ok(s) => matches!(s.rsplit_once(')').and_then(|(_, r)| r.trim_start().chars().next()), Some('Z') | Some('X')),
        Err(_) => true,
    }
}

/// Outcome of polling one interrupted thread.
enum Poll {
    NotYet,
    /// Stopped; the signal to re-inject at detach (a signal-delivery stop).
    Stopped(Option<Signal>),
    Exited,
}

fn poll(tid: i32) -> Poll {
    match waitpid(Pid::from_raw(tid), Some(WaitPidFlag::__WALL | WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => Poll::NotYet,
        Ok(WaitStatus::PtraceEvent(_, _, _)) => Poll::Stopped(None),
        // A signal arrived before our interrupt: deliver it when we let go.
        Ok(WaitStatus::Stopped(_, sig)) => Poll::Stopped(Some(sig)),
        Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => Poll::Exited,
        Ok(_) => Poll::Stopped(None),
        Err(_) => Poll::Exited,
    }
}

fn read_thread(pid: i32, tid: i32, maps: &[MapEntry], stack_bytes: usize) -> Option<RawThread> {
    let r = ptrace::getregs(Pid::from_raw(tid)).ok()?;
    let regs =
        Regs { ip: r.rip, sp: r.rsp, bp: r.rbp, orig_ax: r.orig_rax as i64, ax: r.rax as i64, di: r.rdi, si: r.rsi };
    let sp = regs.sp;
    let end = find_map(maps, sp).map(|m| m.end).unwrap_or(sp.saturating_add(stack_bytes as u64));
    let len = (end.saturating_sub(sp) as usize).min(stack_bytes);
    let mut stack = vec![0u8; len];
    let got = read_mem(pid, sp, &mut stack);
    stack.truncate(got);
    let futex = if regs.blocked_syscall() == Some(SYS_FUTEX) {
        let mut b = [0u8; FUTEX_WINDOW];
        (read_mem(pid, regs.di.wrapping_sub(FUTEX_BEFORE), &mut b) == FUTEX_WINDOW).then_some((regs.di, b))
    } else {
        None
    };
    Some(RawThread { tid, regs, stack_addr: sp, stack, futex, stopped_us: 0 })
}

/// Copy remote memory; returns how many bytes were read (partial at a fault).
pub fn read_mem(pid: i32, addr: u64, buf: &mut [u8]) -> usize {
    if buf.is_empty() {
        return 0;
    }
    let len = buf.len();
    let mut local = [IoSliceMut::new(buf)];
    let remote = [RemoteIoVec { base: addr as usize, len }];
    process_vm_readv(Pid::from_raw(pid), &mut local, &remote).unwrap_or(0)
}

fn detach(tid: i32, sig: Option<Signal>) {
    let _ = ptrace::detach(Pid::from_raw(tid), sig);
}

fn capture_consistent(
    pid: i32,
    tids: &[i32],
    maps: &[MapEntry],
    opts: &CaptureOptions,
) -> Result<RawSample, StacksError> {
    let t0 = Instant::now();
    let mut missed = vec![];
    // (tid, interrupted at)
    let mut pending: Vec<(i32, Instant)> = Vec::with_capacity(tids.len());
    let mut budget_exceeded = false;
    for (i, &tid) in tids.iter().enumerate() {
        // The budget counts from the first interrupt: on a big server seizing
        // and interrupting alone can outlast it, so stop interrupting more.
        if pending.first().is_some_and(|(_, first)| first.elapsed() > opts.max_stop) {
            budget_exceeded = true;
            for &t in &tids[i..] {
                missed.push(Missed {
                    tid: t,
                    reason: format!("not interrupted: --max-stop-ms ({} ms) ran out", opts.max_stop.as_millis()),
                });
            }
            break;
        }
        match seize(pid, tid, !pending.is_empty()) {
            Ok(Seized::Ok) => {}
            Ok(Seized::Gone) => {
                missed.push(Missed { tid, reason: "exited before the capture".into() });
                continue;
            }
            Err(e) => {
                // Release what we already hold, then report.
                for &(t, _) in &pending {
                    release_pending(t);
                }
                return Err(e);
            }
        }
        if ptrace::interrupt(Pid::from_raw(tid)).is_err() {
            detach(tid, None);
            missed.push(Missed { tid, reason: "exited before the capture".into() });
            continue;
        }
        pending.push((tid, Instant::now()));
    }
    let window_start = t0;
    // stopped threads in stop order: (RawThread, signal to re-inject, interrupted at)
    let mut stopped: Vec<(RawThread, Option<Signal>, Instant)> = Vec::with_capacity(pending.len());
    while !pending.is_empty() && !budget_exceeded {
        let mut progress = false;
        let mut i = 0;
        while i < pending.len() {
            if window_start.elapsed() > opts.max_stop {
                budget_exceeded = true;
                break;
            }
            let (tid, at) = pending[i];
            match poll(tid) {
                Poll::NotYet => i += 1,
                Poll::Stopped(sig) => {
                    pending.swap_remove(i);
                    progress = true;
                    match read_thread(pid, tid, maps, opts.stack_bytes) {
                        Some(rt) => stopped.push((rt, sig, at)),
                        None => {
                            detach(tid, sig);
                            missed.push(Missed { tid, reason: "registers unreadable".into() });
                        }
                    }
                }
                Poll::Exited => {
                    pending.swap_remove(i);
                    progress = true;
                    missed.push(Missed { tid, reason: "exited during the capture".into() });
                }
            }
        }
        if pending.is_empty() || budget_exceeded {
            break;
        }
        if window_start.elapsed() > opts.max_stop {
            budget_exceeded = true;
            break;
        }
        if !progress {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    // Everyone we hold is stopped now (or the budget ran out): let them go in
    // the order they stopped, so the earliest stopped is released first.
    let mut threads = Vec::with_capacity(stopped.len());
    for (mut rt, sig, at) in stopped {
        detach(rt.tid, sig);
        rt.stopped_us = at.elapsed().as_micros() as u64;
        // If the budget ran out this is no longer one instant, but each stack
        // is still a true stack of its thread; stats.budget_exceeded says so.
        threads.push(rt);
    }
    let window_us = window_start.elapsed().as_micros() as u64;
    for (tid, _) in pending {
        release_pending(tid);
        missed.push(Missed {
            tid,
            reason: format!("did not stop within --max-stop-ms ({} ms)", opts.max_stop.as_millis()),
        });
    }
    Ok(finish(pid, tids, threads, missed, window_us, t0, budget_exceeded, "consistent"))
}

/// A thread that was interrupted but has not stopped yet: give it a short
/// while to stop so we can detach it cleanly; if it still has not, the kernel
/// releases it when the capture thread exits.
/// Returns false if it is still pending.
fn release_pending(tid: i32) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(5) {
        match poll(tid) {
            Poll::NotYet => std::thread::sleep(Duration::from_micros(50)),
            Poll::Stopped(sig) => {
                detach(tid, sig);
                return true;
            }
            Poll::Exited => return true,
        }
    }
    false
}

fn capture_rolling(pid: i32, tids: &[i32], maps: &[MapEntry], opts: &CaptureOptions) -> Result<RawSample, StacksError> {
    let t0 = Instant::now();
    let mut missed = vec![];
    let mut threads = Vec::with_capacity(tids.len());
    let mut budget_exceeded = false;
    // Interrupted threads that had not stopped when their budget ran out: they
    // will stop when they leave the kernel, so keep letting them go as we move on.
    let mut lingering: Vec<i32> = vec![];
    for &tid in tids {
        lingering.retain(|&t| match poll(t) {
            Poll::NotYet => true,
            Poll::Stopped(sig) => {
                detach(t, sig);
                false
            }
            Poll::Exited => false,
        });
        match seize(pid, tid, !threads.is_empty())? {
            Seized::Ok => {}
            Seized::Gone => {
                missed.push(Missed { tid, reason: "exited before the capture".into() });
                continue;
            }
        }
        let at = Instant::now();
        if ptrace::interrupt(Pid::from_raw(tid)).is_err() {
            detach(tid, None);
            missed.push(Missed { tid, reason: "exited before the capture".into() });
            continue;
        }
        loop {
            match poll(tid) {
                Poll::NotYet => {
                    if at.elapsed() > opts.max_stop {
                        budget_exceeded = true;
                        if !release_pending(tid) {
                            lingering.push(tid);
                        }
                        missed.push(Missed {
                            tid,
                            reason: format!("did not stop within --max-stop-ms ({} ms)", opts.max_stop.as_millis()),
                        });
                        break;
                    }
                    // The target needs a CPU to reach its stop; on a busy
                    // box spinning here would take it away.
                    std::thread::yield_now();
                }
                Poll::Stopped(sig) => {
                    let rt = read_thread(pid, tid, maps, opts.stack_bytes);
                    detach(tid, sig);
                    match rt {
                        Some(mut rt) => {
                            rt.stopped_us = at.elapsed().as_micros() as u64;
                            threads.push(rt);
                        }
                        None => missed.push(Missed { tid, reason: "registers unreadable".into() }),
                    }
                    break;
                }
                Poll::Exited => {
                    missed.push(Missed { tid, reason: "exited during the capture".into() });
                    break;
                }
            }
        }
    }
    for t in lingering {
        release_pending(t); // the rest are released when this thread exits
    }
    let window_us = t0.elapsed().as_micros() as u64;
    Ok(finish(pid, tids, threads, missed, window_us, t0, budget_exceeded, "rolling"))
}

#[allow(clippy::too_many_arguments)]
fn finish(
    pid: i32,
    tids: &[i32],
    mut threads: Vec<RawThread>,
    missed: Vec<Missed>,
    window_us: u64,
    t0: Instant,
    budget_exceeded: bool,
    mode: &str,
) -> RawSample {
    threads.sort_by_key(|t| t.tid);
    let mut stops: Vec<u64> = threads.iter().map(|t| t.stopped_us).collect();
    stops.sort_unstable();
    let appeared =
        crate::proc::tids(pid).map(|now| now.iter().filter(|t| tids.binary_search(t).is_err()).count()).unwrap_or(0);
    let stats = CaptureStats {
        mode: mode.into(),
        threads_listed: tids.len(),
        threads_captured: threads.len(),
        threads_missed: missed.len(),
        threads_appeared: appeared,
        window_us,
        max_thread_stop_us: stops.last().copied().unwrap_or(0),
        median_thread_stop_us: stops.get(stops.len() / 2).copied().unwrap_or(0),
        capture_us: t0.elapsed().as_micros() as u64,
        stack_bytes_copied: threads.iter().map(|t| t.stack.len() as u64).sum(),
        budget_exceeded,
    };
    RawSample { threads, missed, stats }
}
