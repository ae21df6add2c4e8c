//! Capture: stop threads as briefly as possible and copy what unwinding needs.
//!
//! For each thread: `PTRACE_SEIZE` (no stop, and — unlike `PTRACE_ATTACH` — the
//! kernel resumes the thread by itself if pileup dies), `PTRACE_INTERRUPT`,
//! wait for the stop, read the registers, copy the live part of the stack with
//! `process_vm_readv`, read the futex word the thread is blocked on (for lock
//! owners), then `PTRACE_DETACH`. While threads are held only the checks
//! that keep a consistent snapshot true run (sleepers' scheduler counters
//! and lock words): unwinding and symbolizing run later on the copies.
//!
//! All ptrace work runs on a dedicated OS thread created for the capture. The
//! kernel ties tracees to the tracing *thread*: when that thread exits, every
//! thread it still traces is detached and resumed. So if the `--max-stop-ms`
//! budget runs out while some thread has not even stopped yet (blocked in an
//! uninterruptible syscall, say), the capture thread detaches what it holds and
//! returns, and the kernel releases the rest: pileup never waits on the server.
//!
//! Modes:
//! * `Consistent`: one true snapshot of every thread at one instant. Threads
//!   blocked in the kernel (idle connections in `poll`, waiters in `futex`,
//!   disk waits) cannot change until they wake, so they are read where they
//!   sleep, without a stop ([`passive`]); the others are interrupted and
//!   copied as each stops. While those are held, each sleeper is checked by
//!   its scheduler counters: asleep throughout, its lock word is read again;
//!   if it ran since, it is interrupted in a further phase. The held threads
//!   are then released together; an interrupted thread still queued for a
//!   CPU runs none of its own code before it stops, so it is copied when it
//!   does and let go at once, without holding the others meanwhile.
//! * `Rolling`: one thread at a time — the least stop for any single thread,
//!   but threads are seen at slightly different moments.
//! * `Passive`: no thread is stopped at all ([`passive`]): blocked threads
//!   are read as they sleep, running ones sampled on their CPU by a perf
//!   event. For one or a few threads sampled for a long time.

pub(crate) mod memory;
pub(crate) mod passive;
pub(crate) mod perf;
mod ptrace;
pub(crate) mod queued;
mod types;

/// Tests that keep a spinning process on CPU 0 and look at what runs there
/// take turns: run at once, each would see the other's spinner.
#[cfg(test)]
pub(crate) static CPU0_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) use memory::read_mem;
pub use types::{CaptureOptions, CaptureStats, Missed, Mode};
pub use types::{RawSample, RawThread};

use crate::error::EngineError;
use crate::proc::MapEntry;

/// Stop `tids` of `pid` and copy their registers and stacks. `maps` (read
/// beforehand) bounds each stack copy at the end of its mapping.
/// `asleep`: those of `tids` the caller just saw blocked (state S or D),
/// which consistent mode reads where they sleep, without a stop.
pub fn capture(
    pid: i32,
    tids: &[i32],
    asleep: &[i32],
    maps: &[MapEntry],
    opts: &CaptureOptions,
) -> Result<RawSample, EngineError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(EngineError::UnsupportedArch);
    }
    if opts.mode == Mode::Passive {
        return Ok(passive::Passive::default().capture(pid, tids, maps, opts));
    }
    let tids = tids.to_vec();
    let asleep = asleep.to_vec();
    let maps = maps.to_vec();
    let opts = opts.clone();
    // A fresh OS thread per capture: see the module docs for why.
    std::thread::Builder::new()
        .name("pileup-capture".into())
        .spawn(move || match opts.mode {
            Mode::Consistent => ptrace::capture_consistent(pid, &tids, &asleep, &maps, &opts),
            Mode::Rolling => ptrace::capture_rolling(pid, &tids, &maps, &opts),
            Mode::Passive => unreachable!("passive capture runs on the caller's thread"),
        })
        .expect("spawning the capture thread")
        .join()
        .unwrap_or(Err(EngineError::ProcessExited(pid)))
}

/// The thread pointer (`fs_base`, where the thread's thread-local
/// variables are found) of each of `tids` of `pid`, read while each is
/// stopped for microseconds (at most `max_stop`); `None` for a thread that
/// has gone or did not stop in time. x86_64 only.
pub fn thread_pointers(
    pid: i32,
    tids: &[i32],
    max_stop: std::time::Duration,
) -> Result<Vec<(i32, Option<u64>)>, EngineError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(EngineError::UnsupportedArch);
    }
    let tids = tids.to_vec();
    // A fresh OS thread, as for a capture: see the module docs for why.
    std::thread::Builder::new()
        .name("pileup-tp".into())
        .spawn(move || ptrace::thread_pointers(pid, &tids, max_stop))
        .expect("spawning the capture thread")
        .join()
        .unwrap_or(Err(EngineError::ProcessExited(pid)))
}
