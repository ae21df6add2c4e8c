//! Consistent and rolling capture: threads stopped with ptrace on a
//! capture thread of their own (see the module docs of [`super`]).

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::memory::{copy_stack, read_mem};
use super::passive;
use super::types::{finish, CaptureOptions, Missed, RawSample, RawThread};
use crate::error::{tracer_of, EngineError};
use crate::proc::{MapEntry, SYS_FUTEX};
use crate::regs::{Regs, FUTEX_BEFORE, FUTEX_WINDOW};

/// Real-time priority for the capture thread while it holds threads
/// stopped. On a saturated server the capture thread is one runnable task
/// among dozens: every time it is preempted between two interrupts or
/// before it sees a stop, every thread it already holds stays stopped for
/// another scheduler slice. `SCHED_FIFO` (priority 1, the lowest) lets it
/// run as soon as it is runnable. It never spins (it sleeps in `waitpid`
/// until a stop is reported, leaving the CPU to the threads that must run
/// to reach their stop), the
/// window is bounded by `--max-stop-ms`, the kernel's real-time throttling
/// keeps 5% of each CPU for everything else, and the thread returns to
/// normal scheduling when the window closes (and exits after the capture).
/// Without the privilege (`CAP_SYS_NICE`), capture runs at normal priority.
struct RaisedPriority(bool);

impl RaisedPriority {
    fn raise(on: bool) -> RaisedPriority {
        if !on {
            return RaisedPriority(false);
        }
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets the calling thread's own policy (pid 0 = this thread).
        RaisedPriority(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0)
    }
}

impl Drop for RaisedPriority {
    fn drop(&mut self) {
        if self.0 {
            let p = libc::sched_param { sched_priority: 0 };
            // SAFETY: as above, back to the default policy.
            unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) };
        }
    }
}

enum Seized {
    Ok,
    Gone,
}

/// `held_any`: some thread of this capture was seized already, so an EPERM
/// now means this thread is exiting (the kernel refuses to trace those), not
/// that we lack permission.
fn seize(pid: i32, tid: i32, held_any: bool) -> Result<Seized, EngineError> {
    match ptrace::seize(Pid::from_raw(tid), ptrace::Options::empty()) {
        Ok(()) => Ok(Seized::Ok),
        Err(Errno::ESRCH) => Ok(Seized::Gone),
        Err(Errno::EPERM) => match tracer_of(pid, tid) {
            Some(t) => Err(EngineError::AlreadyTraced { pid, tracer: t }),
            None if held_any || exiting(pid, tid) => Ok(Seized::Gone),
            None => Err(EngineError::Permission { pid, detail: "PTRACE_SEIZE: operation not permitted".into() }),
        },
        Err(e) => Err(EngineError::Permission { pid, detail: format!("PTRACE_SEIZE: {e}") }),
    }
}

/// The thread is on its way out: a zombie or dead, or flagged exiting
/// (PF_EXITING, while it still shows R or D) — the kernel refuses to trace
/// such a thread.
pub(crate) fn exiting(pid: i32, tid: i32) -> bool {
    crate::proc::exiting(pid, tid)
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
        Ok(ws) => outcome(ws),
        Err(_) => Poll::Exited,
    }
}

fn outcome(ws: WaitStatus) -> Poll {
    match ws {
        WaitStatus::StillAlive => Poll::NotYet,
        WaitStatus::PtraceEvent(_, _, _) => Poll::Stopped(None),
        // A signal arrived before our interrupt: deliver it when we let go.
        WaitStatus::Stopped(_, sig) => Poll::Stopped(Some(sig)),
        WaitStatus::Exited(..) | WaitStatus::Signaled(..) => Poll::Exited,
        _ => Poll::Stopped(None),
    }
}

/// What a blocking wait for a tracee returned.
enum Waited {
    /// This tracee's state changed.
    Tid(i32, Poll),
    /// The deadline passed.
    Deadline,
    /// No tracee is left to wait for.
    None,
}

/// Wait, blocked, for the next stop or exit of `tid` (or of any tracee of
/// this thread), until `deadline`. The capture thread sleeps until the
/// kernel reports the stop: polling with short sleeps instead wakes it
/// every few tens of µs, and on a saturated server each wake preempts a
/// server thread (sampling one idle thread at 100 Hz that way cost 12–25%
/// of a saturated server's throughput; blocked, no measurable share).
fn wait_stop(tid: Option<i32>, deadline: Instant, timer: &DeadlineTimer) -> Waited {
    let waited = loop {
        if Instant::now() >= deadline {
            // A stop already reported is still taken.
            break match waitpid(
                tid.map(Pid::from_raw),
                Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD | WaitPidFlag::WNOHANG),
            ) {
                Ok(ws) => match ws.pid() {
                    Some(p) => Waited::Tid(p.as_raw(), outcome(ws)),
                    None => Waited::Deadline,
                },
                Err(Errno::ECHILD) => Waited::None,
                Err(_) => Waited::Deadline,
            };
        }
        timer.arm(Some(deadline));
        // Without a timer (none could be created) nothing would end a
        // blocked wait at the deadline: poll instead.
        let mut flags = WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD;
        if timer.0.is_none() {
            flags |= WaitPidFlag::WNOHANG;
        }
        match waitpid(tid.map(Pid::from_raw), Some(flags)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_micros(200)),
            Ok(ws) => match ws.pid() {
                Some(p) => break Waited::Tid(p.as_raw(), outcome(ws)),
                None => continue,
            },
            Err(Errno::EINTR) => continue,
            Err(_) => break Waited::None,
        }
    };
    timer.arm(None);
    waited
}

/// The signal that interrupts a blocked `waitpid` at its deadline: a
/// real-time signal no other part of pileup uses, handled by a no-op
/// installed without `SA_RESTART` (so the wait returns `EINTR`).
fn deadline_signal() -> i32 {
    libc::SIGRTMIN() + 6
}

/// A POSIX timer that sends [`deadline_signal`] to the capture thread alone
/// at a deadline, then every millisecond until disarmed (a signal that
/// lands just before the thread blocks is followed by another).
struct DeadlineTimer(Option<libc::timer_t>);

impl DeadlineTimer {
    fn new() -> DeadlineTimer {
        static HANDLER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let installed = *HANDLER.get_or_init(|| {
            extern "C" fn noop(_: libc::c_int) {}
            // SAFETY: installs a handler that does nothing, for a signal
            // only these timers send.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = noop as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = 0;
                libc::sigaction(deadline_signal(), &sa, std::ptr::null_mut()) == 0
            }
        });
        if !installed {
            return DeadlineTimer(None);
        }
        // SAFETY: the signal is unblocked in this thread (a mask inherited
        // from whoever spawned it must not keep the wait from ending), and
        // the timer is directed at this thread alone.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, deadline_signal());
            if libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) != 0 {
                return DeadlineTimer(None);
            }
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = deadline_signal();
            // The raw system call: glibc's gettid() wrapper is newer than
            // the oldest glibc pileup runs on.
            ev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as libc::c_int;
            let mut t: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut t) == 0 {
                DeadlineTimer(Some(t))
            } else {
                DeadlineTimer(None)
            }
        }
    }

    /// Fire at `deadline` (and every millisecond after), or never (`None`).
    fn arm(&self, deadline: Option<Instant>) {
        let Some(t) = self.0 else { return };
        let ts = |d: Duration| libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as _ };
        let spec = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now()).max(Duration::from_micros(1));
                libc::itimerspec { it_value: ts(left), it_interval: ts(Duration::from_millis(1)) }
            }
            None => libc::itimerspec { it_value: ts(Duration::ZERO), it_interval: ts(Duration::ZERO) },
        };
        // SAFETY: a timer this value owns.
        unsafe { libc::timer_settime(t, 0, &spec, std::ptr::null_mut()) };
    }
}

impl Drop for DeadlineTimer {
    fn drop(&mut self) {
        if let Some(t) = self.0 {
            // SAFETY: deleting the timer this value owns.
            unsafe { libc::timer_delete(t) };
        }
    }
}

fn read_thread(pid: i32, tid: i32, maps: &[MapEntry], stack_bytes: usize) -> Option<RawThread> {
    let r = ptrace::getregs(Pid::from_raw(tid)).ok()?;
    let regs = Regs {
        ip: r.rip,
        sp: r.rsp,
        bp: r.rbp,
        orig_ax: r.orig_rax as i64,
        ax: r.rax as i64,
        di: r.rdi,
        si: r.rsi,
        dx: r.rdx,
    };
    let sp = regs.sp;
    let stack = copy_stack(pid, sp, maps, stack_bytes);
    let futex = if regs.blocked_syscall() == Some(SYS_FUTEX) {
        let mut b = [0u8; FUTEX_WINDOW];
        (read_mem(pid, regs.di.wrapping_sub(FUTEX_BEFORE), &mut b) == FUTEX_WINDOW).then_some((regs.di, b))
    } else {
        None
    };
    Some(RawThread { tid, regs, stack_addr: sp, stack, futex, late: false, stopped_us: 0, held_us: 0 })
}

fn detach(tid: i32, sig: Option<Signal>) {
    let _ = ptrace::detach(Pid::from_raw(tid), sig);
}

/// How long consistent mode's sleeper checks may hold the stopped threads,
/// in all.
const CHECK_TIME: Duration = Duration::from_millis(2);

/// A stopped thread: its copy, the signal to re-inject, when it was
/// interrupted and when its stop was seen.
type Held = (RawThread, Option<Signal>, Instant, Instant);

/// Seize and interrupt `tids`, adding each to `pending`. `first` is when
/// the window's first interrupt went out (set by the first one): once the
/// budget has run out since, the rest are not interrupted and `true` is
/// returned.
fn interrupt_all(
    pid: i32,
    tids: &[i32],
    first: &mut Option<Instant>,
    held_any: bool,
    opts: &CaptureOptions,
    pending: &mut Vec<(i32, Instant)>,
    missed: &mut Vec<Missed>,
) -> Result<bool, EngineError> {
    for (i, &tid) in tids.iter().enumerate() {
        // The budget counts from the first interrupt: on a big server seizing
        // and interrupting alone can outlast it, so stop interrupting more.
        if first.is_some_and(|f| f.elapsed() > opts.max_stop) {
            for &t in &tids[i..] {
                missed.push(Missed {
                    tid: t,
                    reason: format!("not interrupted: --max-stop-ms ({} ms) ran out", opts.max_stop.as_millis()),
                });
            }
            return Ok(true);
        }
        match seize(pid, tid, held_any || !pending.is_empty())? {
            Seized::Ok => {}
            Seized::Gone => {
                missed.push(Missed { tid, reason: "exited before the capture".into() });
                continue;
            }
        }
        if ptrace::interrupt(Pid::from_raw(tid)).is_err() {
            detach(tid, None);
            missed.push(Missed { tid, reason: "exited before the capture".into() });
            continue;
        }
        let now = Instant::now();
        first.get_or_insert(now);
        pending.push((tid, now));
    }
    Ok(false)
}

/// How long the stops of a window may pause before the threads not yet
/// stopped are taken for threads waiting for a CPU. On a machine with idle
/// CPU every interrupted thread stops within microseconds; on a saturated
/// one a thread queued behind dozens of busy tasks may need tens of
/// milliseconds to be scheduled and enter its stop, and every thread
/// already held would wait with it.
const LULL: Duration = Duration::from_millis(1);

/// Let a stopped thread go, recording how long it was stopped and held.
fn let_go((mut rt, sig, at, seen): Held) -> RawThread {
    detach(rt.tid, sig);
    rt.stopped_us = at.elapsed().as_micros() as u64;
    rt.held_us = seen.elapsed().as_micros() as u64;
    rt
}

/// The threads of one consistent capture while its capture thread waits
/// for their stops.
struct Stops<'a> {
    pid: i32,
    maps: &'a [MapEntry],
    opts: &'a CaptureOptions,
    timer: DeadlineTimer,
    /// Interrupted, not yet stopped: (tid, interrupted at).
    pending: Vec<(i32, Instant)>,
    /// Stopped, copied and held.
    held: Vec<Held>,
    /// Interrupted, then read without their stop (in disk wait): let go as
    /// soon as each stops.
    unwaited: Vec<i32>,
    missed: Vec<Missed>,
}

impl Stops<'_> {
    /// Wait for the pending threads to stop, copying each as it does, until
    /// none is pending, `deadline` passes, or (with `lull`) no thread has
    /// stopped for that long; `true` if the budget (`budget`, the end of
    /// `--max-stop-ms`) ran out first. Stops already reported when
    /// `deadline` passes are still taken, but none once the budget is out:
    /// on a crowded CPU the stops can trickle in as fast as they are
    /// copied, and taking each would hold the others past the budget. A
    /// stopped thread is held, or with `release` let go as soon as it is
    /// copied.
    fn wait(
        &mut self,
        (deadline, lull, budget): (Instant, Option<Duration>, Instant),
        mut release: Option<&mut Vec<RawThread>>,
    ) -> bool {
        let mut progress = Instant::now();
        while !self.pending.is_empty() {
            if Instant::now() >= budget {
                return true;
            }
            let until = lull.map_or(deadline, |l| deadline.min(progress + l));
            let (tid, how) = match wait_stop(None, until, &self.timer) {
                Waited::Tid(tid, how) => (tid, how),
                Waited::Deadline => return until >= budget,
                Waited::None => return false,
            };
            let Some(i) = self.pending.iter().position(|&(t, _)| t == tid) else {
                if let (Poll::Stopped(sig), Some(j)) = (how, self.unwaited.iter().position(|&t| t == tid)) {
                    self.unwaited.swap_remove(j);
                    detach(tid, sig);
                }
                continue;
            };
            let (_, at) = self.pending[i];
            match how {
                Poll::NotYet => {}
                Poll::Stopped(sig) => {
                    let seen = Instant::now();
                    progress = seen;
                    self.pending.swap_remove(i);
                    match read_thread(self.pid, tid, self.maps, self.opts.stack_bytes) {
                        Some(mut rt) => match release.as_deref_mut() {
                            Some(out) => {
                                rt.late = true;
                                out.push(let_go((rt, sig, at, seen)))
                            }
                            None => self.held.push((rt, sig, at, seen)),
                        },
                        None => {
                            detach(tid, sig);
                            self.missed.push(Missed { tid, reason: "registers unreadable".into() });
                        }
                    }
                }
                Poll::Exited => {
                    progress = Instant::now();
                    self.pending.swap_remove(i);
                    self.missed.push(Missed { tid, reason: "exited during the capture".into() });
                }
            }
        }
        false
    }

    /// Let go every thread whose stop is already reported, without waiting
    /// or copying: the pending ones among them are returned (one that
    /// exited is counted missed).
    fn let_go_reported(&mut self) -> Vec<i32> {
        let mut reported = vec![];
        loop {
            let ws = match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD | WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(ws) => ws,
            };
            let Some(tid) = ws.pid().map(|p| p.as_raw()) else { break };
            let how = outcome(ws);
            if let Poll::Stopped(sig) = how {
                detach(tid, sig);
            }
            self.unwaited.retain(|&t| t != tid);
            if let Some(i) = self.pending.iter().position(|&(t, _)| t == tid) {
                self.pending.swap_remove(i);
                match how {
                    Poll::Stopped(_) => reported.push(tid),
                    Poll::Exited => self.missed.push(Missed { tid, reason: "exited during the capture".into() }),
                    Poll::NotYet => {}
                }
            }
        }
        reported
    }

    /// Interrupt `tids` (see [`interrupt_all`]).
    fn interrupt(&mut self, tids: &[i32], first: &mut Option<Instant>) -> Result<bool, EngineError> {
        let held_any = first.is_some();
        interrupt_all(self.pid, tids, first, held_any, self.opts, &mut self.pending, &mut self.missed)
    }

    /// Let every held thread go and release the pending ones, on an error.
    fn abandon(self) {
        for h in self.held {
            let_go(h);
        }
        release_all(&self.pending.iter().map(|&(t, _)| t).collect::<Vec<_>>());
    }
}

pub(super) fn capture_consistent(
    pid: i32,
    all_tids: &[i32],
    asleep: &[i32],
    maps: &[MapEntry],
    opts: &CaptureOptions,
) -> Result<RawSample, EngineError> {
    let started = Instant::now();
    let (sleepers, runnable) = read_sleepers(pid, all_tids, asleep, maps, opts);
    let priority = RaisedPriority::raise(opts.raised_priority);
    let t0 = Instant::now();
    let mut w = Stops {
        pid,
        maps,
        opts,
        timer: DeadlineTimer::new(),
        pending: Vec::with_capacity(runnable.len()),
        held: Vec::with_capacity(runnable.len()),
        unwaited: vec![],
        missed: vec![],
    };
    let mut first = None;
    // Phase one: every thread that can run, interrupted and copied as each
    // stops, until all have or the stops pause for LULL. Those left are
    // queued for a CPU: an interrupted thread runs no code of its own
    // before its stop (the interrupt is handled on its way back to user
    // space), so whenever it gets a CPU it stops as it was at its
    // interrupt, inside this window. It is waited for after the others
    // are let go (below) instead of holding them all while it waits.
    let mut budget_exceeded = match w.interrupt(&runnable, &mut first) {
        Ok(b) => b,
        Err(e) => {
            w.abandon();
            return Err(e);
        }
    };
    let deadline = |first: Option<Instant>| first.unwrap_or(t0) + opts.max_stop;
    if !budget_exceeded {
        budget_exceeded = w.wait((deadline(first), Some(LULL), deadline(first)), None);
    }
    let checks_start = Instant::now();
    let check_until = (checks_start + CHECK_TIME).min(deadline(first));
    let checks = match w.check_sleepers(sleepers, &mut first, check_until, budget_exceeded) {
        Ok(c) => c,
        Err(e) => {
            w.abandon();
            return Err(e);
        }
    };
    budget_exceeded = checks.budget_exceeded;
    // Checks cut short by --max-stop-ms itself, not by their own time.
    budget_exceeded |= checks.out_of_time && check_until >= deadline(first);
    let checks_us = if first.is_some() { checks_start.elapsed().as_micros() as u64 } else { 0 };
    // Stops already reported are taken while the others are still held.
    if !budget_exceeded {
        w.wait((Instant::now(), None, deadline(first)), None);
    }
    let end = w.release(first, checks.slept, deadline(first), budget_exceeded);
    drop(priority);
    let mut s = finish(all_tids, end.threads, end.missed, end.window_us, started, end.budget_exceeded, "consistent");
    s.stats.threads_read_blocked = end.read_blocked;
    s.stats.woke_after_read = checks.woke_after_read;
    s.stats.checks_us = checks_us;
    s.stats.stopped_late = end.stopped_late;
    Ok(s)
}

/// Read the threads blocked in the kernel where they sleep; returns them
/// (with their scheduler counters) and the threads to stop.
///
/// A thread blocked in the kernel (an idle connection in poll, a waiter in
/// futex, a disk wait) cannot change its registers or stack until it wakes:
/// it is read where it sleeps, as passive mode reads it, and not stopped.
/// Stopping it would wake it for nothing (its system call interrupted and
/// restarted), and one in an uninterruptible wait would hold every stopped
/// thread until its I/O ended. Whether it slept through the snapshot's
/// instant is told by its scheduler counters (a kernel that keeps none
/// shows `0 0 0` for every thread).
fn read_sleepers(
    pid: i32,
    all_tids: &[i32],
    asleep: &[i32],
    maps: &[MapEntry],
    opts: &CaptureOptions,
) -> (Vec<(RawThread, String)>, Vec<i32>) {
    let schedstat_kept = all_tids
        .first()
        .and_then(|&t| crate::proc::schedstat(pid, t))
        .is_some_and(|s| s.split_whitespace().any(|f| f != "0"));
    let mut sleepers: Vec<(RawThread, String)> = vec![];
    let runnable: Vec<i32> = all_tids
        .iter()
        .copied()
        .filter(|&tid| {
            if !asleep.contains(&tid) {
                return true;
            }
            // Without scheduler statistics whether a sleeper ran cannot be
            // told: only a thread in disk wait (which would hold every
            // stopped thread until its I/O ends) is read without a stop.
            if !schedstat_kept && crate::proc::state(pid, tid) != Some('D') {
                return true;
            }
            match passive::read_blocked(pid, tid, maps, opts.stack_bytes) {
                passive::Read::Blocked(b) => {
                    sleepers.push(*b);
                    false
                }
                _ => true,
            }
        })
        .collect();
    (sleepers, runnable)
}

/// What checking the sleepers found.
struct Checked {
    /// Sleepers whose copies stand.
    slept: Vec<(RawThread, String)>,
    woke_after_read: usize,
    out_of_time: bool,
    budget_exceeded: bool,
}

/// What letting the threads go leaves: the copies, the threads missed,
/// and the window.
struct Released {
    threads: Vec<RawThread>,
    missed: Vec<Missed>,
    window_us: u64,
    read_blocked: usize,
    stopped_late: usize,
    budget_exceeded: bool,
}

impl Stops<'_> {
    /// Every thread that can run is held, or interrupted and queued for a
    /// CPU: each sleeper is checked now. One whose counters did not move
    /// slept throughout, and its copy stands, but the lock word it sleeps
    /// on is read again (the lock may have changed hands since, and its
    /// owner is named from that word). One that ran since is interrupted in
    /// a further phase, as any thread that can run, without waiting for its
    /// stop (it stops as it was at its interrupt), and every sleeper is
    /// then checked again (it may have released a lock before its
    /// interrupt), until a check finds none woken. On a busy server clients
    /// wake sleepers all the time, and every check holds the stopped
    /// threads: the checks together get until `check_until`, lock waiters
    /// first; sleepers not checked by then keep the copy read just before
    /// the window.
    fn check_sleepers(
        &mut self,
        mut sleepers: Vec<(RawThread, String)>,
        first: &mut Option<Instant>,
        check_until: Instant,
        mut budget_exceeded: bool,
    ) -> Result<Checked, EngineError> {
        let pid = self.pid;
        sleepers.sort_by_key(|(rt, _)| rt.futex.is_none());
        let mut slept = sleepers;
        let mut woke_after_read = 0;
        let mut out_of_time = false;
        while !budget_exceeded && !out_of_time {
            let mut checked = Vec::with_capacity(slept.len());
            let mut woke = vec![];
            let mut rest = slept.into_iter();
            for (mut rt, sched) in rest.by_ref() {
                match crate::proc::schedstat(pid, rt.tid) {
                    Some(now) if now == sched => {
                        if let Some((addr, window)) = &mut rt.futex {
                            if read_mem(pid, addr.wrapping_sub(FUTEX_BEFORE), window) != FUTEX_WINDOW {
                                rt.futex = None;
                                rt.regs.ax = 0;
                            }
                        }
                        checked.push((rt, sched));
                    }
                    None => self.missed.push(Missed { tid: rt.tid, reason: "exited during the capture".into() }),
                    // It ran since it was read. Not read again where it
                    // sleeps: for a thread still queued on a CPU the
                    // kernel's read of its syscall sleeps until it is off
                    // the queue, while the others are held.
                    Some(_) => woke.push(rt.tid),
                }
                // The check holds the stopped threads too.
                if Instant::now() >= check_until {
                    out_of_time = true;
                    break;
                }
            }
            // Those not checked when the time ran out keep their copies.
            checked.extend(rest);
            slept = checked;
            if woke.is_empty() {
                break;
            }
            let before = self.pending.len();
            budget_exceeded = self.interrupt(&woke, first)?;
            woke_after_read += self.pending.len() - before;
        }
        Ok(Checked { slept, woke_after_read, out_of_time, budget_exceeded })
    }

    /// Let the held threads go in the order they stopped (the earliest
    /// stopped first), read those interrupted but asleep in disk wait where
    /// they sleep, copy those still queued for a CPU as each stops, and
    /// account for every thread not copied.
    fn release(
        mut self,
        first: Option<Instant>,
        slept: Vec<(RawThread, String)>,
        deadline: Instant,
        mut budget_exceeded: bool,
    ) -> Released {
        let (pid, maps, opts) = (self.pid, self.maps, self.opts);
        let mut threads: Vec<RawThread> = Vec::with_capacity(self.held.len() + slept.len() + self.pending.len());
        threads.extend(std::mem::take(&mut self.held).into_iter().map(let_go));
        // Nothing stopped, nothing held: no window.
        let window_us = first.map_or(0, |f| f.elapsed().as_micros() as u64);
        // Stops reported when the budget ran out are let go now, uncopied.
        let too_late = if budget_exceeded { self.let_go_reported() } else { vec![] };
        // A thread interrupted but not stopped that sleeps in an
        // uninterruptible wait (a disk read, a page fault) was in the kernel
        // at its interrupt and is there still: read where it sleeps (its
        // stopped_us stays 0), rather than copied after its I/O ends. It is
        // let go as soon as it stops, or by the kernel when the capture
        // thread exits.
        let mut read_blocked = slept.len();
        let read_asleep = |tid: i32| match crate::proc::state(pid, tid) {
            Some('D') => match passive::read_blocked(pid, tid, maps, opts.stack_bytes) {
                passive::Read::Blocked(b) => Some(b.0),
                _ => None,
            },
            _ => None,
        };
        let mut unwaited = vec![];
        self.pending.retain(|&(tid, _)| match read_asleep(tid) {
            Some(rt) => {
                read_blocked += 1;
                threads.push(rt);
                unwaited.push(tid);
                false
            }
            None => true,
        });
        self.unwaited = unwaited;
        // Threads interrupted but still queued for a CPU: each is copied
        // when it stops and let go at once, until the budget runs out. The
        // capture thread keeps its priority meanwhile, so a late thread is
        // let go as soon as it stops (it sleeps while it waits).
        let before = threads.len();
        if !self.pending.is_empty() && !budget_exceeded {
            budget_exceeded = self.wait((deadline, None, deadline), Some(&mut threads));
        }
        let stopped_late = threads.len() - before;
        let Stops { timer, pending, mut missed, mut unwaited, .. } = self;
        drop(timer);
        threads.extend(slept.into_iter().map(|(rt, _)| rt));
        // A thread that did not stop in time and went into an
        // uninterruptible wait meanwhile is read the same way.
        let mut late = Vec::with_capacity(pending.len());
        for &(tid, _) in &pending {
            match read_asleep(tid) {
                Some(rt) => {
                    read_blocked += 1;
                    threads.push(rt);
                }
                None => late.push(tid),
            }
        }
        // Threads read in disk wait that have not stopped yet go with them.
        unwaited.extend(pending.iter().map(|&(t, _)| t));
        release_all(&unwaited);
        for tid in late {
            missed.push(not_stopped(pid, tid, opts));
        }
        for tid in too_late {
            missed.push(Missed {
                tid,
                reason: format!("stopped too late to copy within --max-stop-ms ({} ms)", opts.max_stop.as_millis()),
            });
        }
        Released { threads, missed, window_us, read_blocked, stopped_late, budget_exceeded }
    }
}

/// Why a thread asked to stop did not within the budget: it was ending
/// (a thread that exits never reports its stop), or it did not stop.
fn not_stopped(pid: i32, tid: i32, opts: &CaptureOptions) -> Missed {
    if crate::proc::exiting(pid, tid) {
        return Missed { tid, reason: "exited during the capture".into() };
    }
    Missed { tid, reason: format!("did not stop within --max-stop-ms ({} ms)", opts.max_stop.as_millis()) }
}

/// Threads that were interrupted but had not stopped when the budget ran
/// out: for 5 ms in all, detach each as soon as it reports its stop, in
/// whatever order they stop (one slow thread never holds up the others).
/// Returns those still pending; the kernel releases them when the capture
/// thread exits.
fn release_all(tids: &[i32]) -> Vec<i32> {
    let mut left: Vec<i32> = tids.to_vec();
    let t = Instant::now();
    while !left.is_empty() && t.elapsed() < Duration::from_millis(5) {
        match waitpid(None, Some(WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD | WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_micros(50)),
            Ok(ws) => {
                let Some(p) = ws.pid().map(|p| p.as_raw()) else { continue };
                if let Poll::Stopped(sig) = outcome(ws) {
                    detach(p, sig);
                }
                left.retain(|&x| x != p);
            }
            Err(_) => break,
        }
    }
    left
}

pub(super) fn capture_rolling(
    pid: i32,
    tids: &[i32],
    maps: &[MapEntry],
    opts: &CaptureOptions,
) -> Result<RawSample, EngineError> {
    let priority = RaisedPriority::raise(opts.raised_priority);
    let t0 = Instant::now();
    let mut missed = vec![];
    let mut threads = Vec::with_capacity(tids.len());
    let mut budget_exceeded = false;
    // Interrupted threads that had not stopped when their budget ran out: they
    // will stop when they leave the kernel, so keep letting them go as we move on.
    let mut lingering: Vec<i32> = vec![];
    let timer = DeadlineTimer::new();
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
        // Wait for this thread's stop; a lingering one that stops meanwhile
        // is let go at once.
        let waited = loop {
            match wait_stop(None, at + opts.max_stop, &timer) {
                Waited::Tid(t, how) if t != tid => {
                    if let Poll::Stopped(sig) = how {
                        detach(t, sig);
                    }
                    lingering.retain(|&x| x != t);
                }
                other => break other,
            }
        };
        match waited {
            Waited::Deadline | Waited::Tid(_, Poll::NotYet) => {
                budget_exceeded = true;
                lingering.extend(release_all(&[tid]));
                missed.push(not_stopped(pid, tid, opts));
            }
            Waited::Tid(_, Poll::Stopped(sig)) => {
                let seen = Instant::now();
                let rt = read_thread(pid, tid, maps, opts.stack_bytes);
                detach(tid, sig);
                match rt {
                    Some(mut rt) => {
                        rt.stopped_us = at.elapsed().as_micros() as u64;
                        rt.held_us = seen.elapsed().as_micros() as u64;
                        threads.push(rt);
                    }
                    None => missed.push(Missed { tid, reason: "registers unreadable".into() }),
                }
            }
            Waited::Tid(_, Poll::Exited) | Waited::None => {
                missed.push(Missed { tid, reason: "exited during the capture".into() });
            }
        }
    }
    let window_us = t0.elapsed().as_micros() as u64;
    drop(timer);
    drop(priority);
    release_all(&lingering); // the rest are released when this thread exits
    Ok(finish(tids, threads, missed, window_us, t0, budget_exceeded, "rolling"))
}

/// The thread pointer (`fs_base`) of each of `tids`, one at a time: each
/// thread is stopped only while its registers are read (microseconds),
/// never longer than `max_stop`; a thread that has gone gets `None`. One
/// that does not stop in time ends the run (it and the rest get `None`), so
/// the caller's thread, which must end at once, ends while it may still be
/// on its way to a stop: the kernel lets go of whatever it traces then.
pub(super) fn thread_pointers(
    pid: i32,
    tids: &[i32],
    max_stop: Duration,
) -> Result<Vec<(i32, Option<u64>)>, EngineError> {
    let timer = DeadlineTimer::new();
    let mut out = Vec::with_capacity(tids.len());
    for (i, &tid) in tids.iter().enumerate() {
        match seize(pid, tid, !out.is_empty()) {
            Ok(Seized::Ok) => {}
            Ok(Seized::Gone) => {
                out.push((tid, None));
                continue;
            }
            Err(e) if out.is_empty() => return Err(e),
            // Refused part-way (another tracer took it): what was read stays.
            Err(_) => {
                out.push((tid, None));
                continue;
            }
        }
        let at = Instant::now();
        if ptrace::interrupt(Pid::from_raw(tid)).is_err() {
            detach(tid, None);
            out.push((tid, None));
            continue;
        }
        let fs = match wait_stop(Some(tid), at + max_stop, &timer) {
            Waited::Tid(_, Poll::Stopped(sig)) => {
                let fs = ptrace::getregs(Pid::from_raw(tid)).ok().map(|r| r.fs_base);
                detach(tid, sig);
                fs
            }
            Waited::Tid(_, Poll::Exited) | Waited::None => None,
            Waited::Deadline | Waited::Tid(_, Poll::NotYet) => {
                // It may stop later, and stays stopped until this thread
                // exits and the kernel lets it go: no further thread is
                // read, so that is now.
                release_all(&[tid]);
                out.push((tid, None));
                out.extend(tids[i + 1..].iter().map(|&t| (t, None)));
                return Ok(out);
            }
        };
        out.push((tid, fs));
    }
    Ok(out)
}
