//! Passive capture: threads are read without ever being stopped.
//!
//! * A thread blocked in the kernel (in `poll`, `futex`, `pread`, …) cannot
//!   change its user-space registers or stack until it wakes. The kernel
//!   gives its stack pointer, program counter and syscall arguments in
//!   `/proc/PID/task/TID/syscall` once it is off its CPU; its stack is then
//!   copied with `process_vm_readv`. The thread's scheduler counters
//!   (`schedstat`) are read before and after: if they moved, it ran
//!   meanwhile and the copy is thrown away and taken again.
//! * A runnable thread is looked at through an eBPF task iterator
//!   ([`super::queued`]), which gives whether it is on a CPU now, its
//!   context switch count and the registers the kernel saved when it last
//!   entered the kernel. One waiting for a CPU is read where it stands from
//!   those registers, and a second look after its stack is copied tells
//!   whether it ran meanwhile.
//! * One on a CPU is sampled there by a perf event armed for one sample
//!   ([`super::perf`]): its CPU's clock, armed 10 µs ahead. A sample of
//!   another thread (it was preempted meanwhile) is dropped and the thread
//!   looked at again.
//! * Without CPU events or the iterator (no `CAP_PERFMON`/`CAP_BPF`, a
//!   kernel without BTF), a runnable thread is sampled by a perf event
//!   attached to it, once it has run 10 µs; while such an event exists, and
//!   for about a second after, the kernel runs its perf hooks at every
//!   context switch of the machine, and the cost line says so.
//!
//! No thread is interrupted, so nothing is held and nothing can be left
//! stopped; perf events close with pileup, however it exits. The price:
//! threads are seen one after another, not at one instant (no consistent
//! snapshot: lock holders are not matched to waiters), and the frame
//! pointer of a blocked thread is not known, so a caller that keeps its
//! frame in `rbp` without an inner frame having saved it ends that stack.

use std::time::{Duration, Instant};

use super::memory::{copy_stack, read_mem};
use super::perf::{self, Event};
use super::queued::TaskRegs;
use super::types::{finish, CaptureOptions, Missed, RawSample, RawThread};
use crate::proc::{parse_syscall, schedstat, MapEntry, SyscallState, SYS_FUTEX};
use crate::regs::{Regs, FUTEX_BEFORE, FUTEX_WINDOW};

/// What a syscall interrupted by a ptrace stop returns (`-ERESTARTSYS`):
/// a blocked thread read here is recorded as the stop would have seen it.
const RESTARTSYS: i64 = -512;

/// How long one wait for an on-CPU sample lasts before the thread's state
/// is looked at again (it may have gone to sleep meanwhile).
const RECHECK: Duration = Duration::from_millis(2);

/// Reads of a blocked thread thrown away because it ran meanwhile, before
/// it is treated as running.
const RETRIES: usize = 3;

/// What passive capture keeps from sample to sample: each CPU's event,
/// opened when a running thread is first found there and kept (a CPU event
/// costs nothing while disarmed). A thread's own event, used only when CPU
/// events cannot be opened, is not kept: it is opened when the thread is
/// found running and closed once the thread is read, since while one
/// exists the kernel adds work to every context switch of the machine
/// (`bench/perf-context`).
#[derive(Default)]
pub struct Passive {
    /// Each CPU's event, by CPU number.
    cpus: Vec<Option<Event>>,
    /// Why CPU events could not be opened, once: threads' own events are
    /// used from then on.
    cpu_error: Option<String>,
    /// The eBPF task iterator that reads a thread waiting for a CPU, loaded
    /// at the first such thread, or why it could not be (threads' own
    /// events are used for them then).
    task_regs: Option<Result<TaskRegs, String>>,
    /// Why perf events could not be opened at all, once: running threads
    /// are then missed with this reason.
    perf_error: Option<String>,
}

pub(super) enum Read {
    /// Read while blocked, with its scheduler counters (`schedstat`) then.
    Blocked(Box<(RawThread, String)>),
    /// It woke while being copied.
    Moved,
    /// Runnable: running on a CPU, or waiting for one.
    Running,
    Gone,
}

/// How an attempt at reading a runnable thread ended.
enum OnCpu {
    /// Sampled on its CPU.
    Sampled(perf::OnCpu),
    /// Read while it waited for a CPU.
    Queued(RawThread),
    /// Not read yet: look at the thread again.
    Again,
}

impl Passive {
    /// Read `tids` of `pid` without stopping any: blocked threads as they
    /// sleep, runnable ones where they wait for a CPU or sampled on it; a
    /// thread not read within `opts.max_stop` is missed.
    pub fn capture(&mut self, pid: i32, tids: &[i32], maps: &[MapEntry], opts: &CaptureOptions) -> RawSample {
        let t0 = Instant::now();
        let mut threads = Vec::with_capacity(tids.len());
        let mut missed = vec![];
        let (mut blocked, mut on_cpu, mut by_thread_event, mut queued) = (0, 0, 0, 0);
        for &tid in tids {
            // Each thread gets the whole budget: none of them is stopped.
            let deadline = Instant::now() + opts.max_stop;
            let mut tries = 0;
            // A thread's own event, if one is needed: closed when it goes
            // out of scope, once the thread is read.
            let mut event: Option<Event> = None;
            loop {
                let attempt = match read_blocked(pid, tid, maps, opts.stack_bytes) {
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
                    Read::Moved if tries < RETRIES => {
                        tries += 1;
                        Ok(OnCpu::Again)
                    }
                    Read::Moved | Read::Running => self.runnable(&mut event, pid, tid, maps, opts.stack_bytes),
                };
                match attempt {
                    Err(reason) => {
                        missed.push(Missed { tid, reason });
                        break;
                    }
                    Ok(OnCpu::Sampled(s)) => {
                        on_cpu += 1;
                        by_thread_event += event.is_some() as usize;
                        threads.push(RawThread {
                            tid,
                            stack_addr: s.regs.sp,
                            regs: s.regs,
                            stack: s.stack,
                            ..Default::default()
                        });
                        break;
                    }
                    Ok(OnCpu::Queued(rt)) => {
                        queued += 1;
                        threads.push(rt);
                        break;
                    }
                    Ok(OnCpu::Again) => {}
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
        s.stats.threads_sampled_by_thread_event = by_thread_event;
        s.stats.threads_read_queued = queued;
        s
    }

    /// One attempt at reading a runnable thread: read where it stands when
    /// it waits for a CPU, sampled with its CPU's event when it is on one,
    /// or sampled with its own event (opened into `event` on first use)
    /// when the iterator or CPU events cannot be had.
    fn runnable(
        &mut self,
        event: &mut Option<Event>,
        pid: i32,
        tid: i32,
        maps: &[MapEntry],
        stack_bytes: usize,
    ) -> Result<OnCpu, String> {
        // The CPU it is on, when the iterator found it on one.
        let mut running = None;
        if event.is_none() {
            if let Ok(tr) = self.task_regs.get_or_insert_with(TaskRegs::load) {
                match read_queued(tr, pid, tid, maps, stack_bytes) {
                    Queued::Read(rt) => return Ok(OnCpu::Queued(*rt)),
                    Queued::Gone => return Err("exited".into()),
                    Queued::Moved => return Ok(OnCpu::Again),
                    Queued::OnCpu(cpu) => running = Some(cpu),
                    // The iterator stopped working: threads' own events
                    // from now on.
                    Queued::Failed(why) => self.task_regs = Some(Err(why)),
                }
            }
        }
        if let Some(e) = &self.perf_error {
            return Err(e.clone());
        }
        if let (None, Some(cpu)) = (&self.cpu_error, running) {
            match self.cpu_event(cpu, stack_bytes) {
                Ok(ev) => {
                    ev.arm().map_err(|e| format!("arming its CPU's perf event failed ({e})"))?;
                    return Ok(match ev.wait(RECHECK) {
                        Some(s) if s.tid == tid as u32 => OnCpu::Sampled(s),
                        // Another thread, a kernel thread or the idle task
                        // ran there when the clock fired.
                        _ => OnCpu::Again,
                    });
                }
                // An offline CPU: the thread will be elsewhere next look.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(OnCpu::Again),
                Err(e) => self.cpu_error = Some(e.to_string()),
            }
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
        Ok(ev.wait(RECHECK).map_or(OnCpu::Again, OnCpu::Sampled))
    }

    /// Why runnable threads were sampled with their own perf events, if
    /// they were: the eBPF iterator or CPU events could not be had.
    pub fn fallback_reason(&self) -> Option<String> {
        let mut why = vec![];
        if let Some(Err(e)) = &self.task_regs {
            why.push(e.clone());
        }
        if let Some(e) = &self.cpu_error {
            why.push(format!("CPU perf events could not be opened ({e})"));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// CPU `cpu`'s event, opened on first use.
    fn cpu_event(&mut self, cpu: usize, stack_bytes: usize) -> std::io::Result<&mut Event> {
        if self.cpus.len() <= cpu {
            self.cpus.resize_with(cpu + 1, || None);
        }
        let slot = &mut self.cpus[cpu];
        if slot.is_none() {
            *slot = Some(Event::open_cpu(cpu as i32, stack_bytes)?);
        }
        Ok(slot.as_mut().expect("opened above"))
    }
}

/// What a look at a runnable thread gave.
enum Queued {
    /// Read while it waited for a CPU.
    Read(Box<RawThread>),
    /// On a CPU now: that one.
    OnCpu(usize),
    /// It ran while being read.
    Moved,
    Gone,
    /// The iterator failed (the reason).
    Failed(String),
}

/// Read a runnable thread that waits for a CPU, from the registers the
/// kernel saved when it was preempted, checked by a second look after its
/// stack is copied.
fn read_queued(tr: &TaskRegs, pid: i32, tid: i32, maps: &[MapEntry], stack_bytes: usize) -> Queued {
    let gone = || {
        if std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
            Queued::Failed("the eBPF task iterator gave nothing for a live thread".into())
        } else {
            Queued::Gone
        }
    };
    let first = match tr.look(tid) {
        Ok(Some(l)) => l,
        Ok(None) => return gone(),
        Err(e) => return Queued::Failed(format!("the eBPF task iterator failed ({e})")),
    };
    if first.on_cpu {
        return Queued::OnCpu(first.cpu);
    }
    let regs = first.regs;
    let stack = copy_stack(pid, regs.sp, maps, stack_bytes);
    match tr.look(tid) {
        Ok(Some(again)) if again == first => {
            Queued::Read(Box::new(RawThread { tid, regs, stack_addr: regs.sp, stack, ..Default::default() }))
        }
        Ok(None) => gone(),
        Ok(Some(_)) => Queued::Moved,
        Err(e) => Queued::Failed(format!("the eBPF task iterator failed ({e})")),
    }
}

/// Read a thread that is blocked, without stopping it.
pub(super) fn read_blocked(pid: i32, tid: i32, maps: &[MapEntry], stack_bytes: usize) -> Read {
    let Some(before) = schedstat(pid, tid) else { return Read::Gone };
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")) else {
        return Read::Gone;
    };
    let Some(SyscallState::Blocked { nr, args, sp, pc }) = parse_syscall(&text) else { return Read::Running };
    let stack = copy_stack(pid, sp, maps, stack_bytes);
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
