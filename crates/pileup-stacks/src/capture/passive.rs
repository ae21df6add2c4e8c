//! Passive capture: threads are read without ever being stopped.
//!
//! * A thread blocked in the kernel (in `poll`, `futex`, `pread`, …) cannot
//!   change its user-space registers or stack until it wakes. The kernel
//!   gives its stack pointer, program counter and syscall arguments in
//!   `/proc/PID/task/TID/syscall` once it is off its CPU; its stack is then
//!   copied with `process_vm_readv`. The thread's scheduler counters
//!   (`schedstat`) are read before and after: if they moved, it ran
//!   meanwhile and the copy is thrown away and taken again.
//! * A running thread is sampled on its CPU by a perf event armed for one
//!   sample ([`super::perf`]), within 10 µs of its CPU time.
//!
//! No thread is interrupted, so nothing is held and nothing can be left
//! stopped; perf events close with pileup, however it exits. The price:
//! threads are seen one after another, not at one instant (no consistent
//! snapshot: lock holders are not matched to waiters), and the frame
//! pointer of a blocked thread is not known, so a caller that keeps its
//! frame in `rbp` without an inner frame having saved it ends that stack.

use std::time::{Duration, Instant};

use super::perf::{self, Event};
use super::{finish, read_mem, CaptureOptions, Missed, RawSample, RawThread, Regs, FUTEX_BEFORE, FUTEX_WINDOW};
use crate::proc::{find_map, parse_syscall, schedstat, MapEntry, SyscallState, SYS_FUTEX};

/// What a syscall interrupted by a ptrace stop returns (`-ERESTARTSYS`):
/// a blocked thread read here is recorded as the stop would have seen it.
const RESTARTSYS: i64 = -512;

/// How long one wait for an on-CPU sample lasts before the thread's state
/// is looked at again (it may have gone to sleep meanwhile).
const RECHECK: Duration = Duration::from_millis(2);

/// Reads of a blocked thread thrown away because it ran meanwhile, before
/// it is treated as running.
const RETRIES: usize = 3;

/// What passive capture keeps from sample to sample. A thread's perf event
/// is not kept: it is opened when the thread is found running and closed
/// once the thread is read, since an open event on a thread adds work to
/// each of its context switches (0.4 µs a switch measured, and nothing once
/// closed: `bench/perf-context`), and a busy server thread switches
/// thousands of times a second between samples.
#[derive(Default)]
pub struct Passive {
    /// Why perf events could not be opened, once: running threads are then
    /// missed with this reason.
    perf_error: Option<String>,
}

pub(super) enum Read {
    /// Read while blocked, with its scheduler counters (`schedstat`) then.
    Blocked(Box<(RawThread, String)>),
    /// It woke while being copied.
    Moved,
    Running,
    Gone,
}

impl Passive {
    pub fn capture(&mut self, pid: i32, tids: &[i32], maps: &[MapEntry], opts: &CaptureOptions) -> RawSample {
        let t0 = Instant::now();
        let mut threads = Vec::with_capacity(tids.len());
        let mut missed = vec![];
        let (mut blocked, mut on_cpu) = (0, 0);
        for &tid in tids {
            // Each thread gets the whole budget: none of them is stopped.
            let deadline = Instant::now() + opts.max_stop;
            let mut tries = 0;
            // Closed when it goes out of scope, once the thread is read.
            let mut event: Option<Event> = None;
            loop {
                match read_blocked(pid, tid, maps, opts.stack_bytes) {
                    Read::Blocked(b) => {
                        let (rt, _) = *b;
                        blocked += 1;
                        threads.push(rt);
                        break;
                    }
                    Read::Gone => {
                        missed.push(Missed { tid, reason: "exited".into() });
                        break;
                    }
                    Read::Moved if tries < RETRIES => tries += 1,
                    Read::Moved | Read::Running => match self.on_cpu(&mut event, tid, opts.stack_bytes) {
                        Err(reason) => {
                            missed.push(Missed { tid, reason });
                            break;
                        }
                        Ok(Some(s)) => {
                            on_cpu += 1;
                            threads.push(RawThread {
                                tid,
                                stack_addr: s.regs.sp,
                                regs: s.regs,
                                stack: s.stack,
                                ..Default::default()
                            });
                            break;
                        }
                        Ok(None) => {}
                    },
                }
                if Instant::now() >= deadline {
                    missed.push(Missed {
                        tid,
                        reason: format!(
                            "running but not on a CPU long enough to be sampled within --max-stop-ms ({} ms)",
                            opts.max_stop.as_millis()
                        ),
                    });
                    break;
                }
            }
        }
        let mut s = finish(tids, threads, missed, 0, t0, false, "passive");
        s.stats.threads_read_blocked = blocked;
        s.stats.threads_sampled_on_cpu = on_cpu;
        s
    }

    /// Arm the thread's perf event (opened into `event` on first use) and
    /// wait a little for its sample.
    fn on_cpu(
        &mut self,
        event: &mut Option<Event>,
        tid: i32,
        stack_bytes: usize,
    ) -> Result<Option<perf::OnCpu>, String> {
        if let Some(e) = &self.perf_error {
            return Err(e.clone());
        }
        let ev = match event {
            Some(e) => e,
            None => match Event::open(tid, stack_bytes) {
                Ok(e) => event.insert(e),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err("exited".into()),
                Err(e) => {
                    let why = format!(
                        "running, and perf events are not available to sample it on its CPU ({e}); run as root or with CAP_PERFMON, or use --mode rolling"
                    );
                    self.perf_error = Some(why.clone());
                    return Err(why);
                }
            },
        };
        ev.arm().map_err(|e| format!("arming its perf event failed ({e})"))?;
        Ok(ev.wait(RECHECK))
    }
}

/// Read a thread that is blocked, without stopping it.
pub(super) fn read_blocked(pid: i32, tid: i32, maps: &[MapEntry], stack_bytes: usize) -> Read {
    let Some(before) = schedstat(pid, tid) else { return Read::Gone };
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) else {
        return Read::Gone;
    };
    let Some(SyscallState::Blocked { nr, args, sp, pc }) = parse_syscall(&text) else { return Read::Running };
    let end = find_map(maps, sp).map(|m| m.end).unwrap_or(sp.saturating_add(stack_bytes as u64));
    let len = (end.saturating_sub(sp) as usize).min(stack_bytes);
    let mut stack = vec![0u8; len];
    let got = read_mem(pid, sp, &mut stack);
    stack.truncate(got);
    let futex = (nr == SYS_FUTEX as i64)
        .then(|| {
            let mut b = [0u8; FUTEX_WINDOW];
            (read_mem(pid, args[0].wrapping_sub(FUTEX_BEFORE), &mut b) == FUTEX_WINDOW).then_some((args[0], b))
        })
        .flatten();
    if schedstat(pid, tid).as_deref() != Some(before.as_str()) {
        return Read::Moved;
    }
    let regs = Regs {
        ip: pc,
        sp,
        // Not given by the kernel without a stop: see the module docs.
        bp: 0,
        orig_ax: nr,
        ax: if nr >= 0 { RESTARTSYS } else { 0 },
        di: args[0],
        si: args[1],
        dx: args[2],
    };
    Read::Blocked(Box::new((
        RawThread { tid, regs, stack_addr: sp, stack, futex, late: false, stopped_us: 0, held_us: 0 },
        before,
    )))
}
