//! `pileup-engine`: what every pileup tool that looks inside the server
//! process builds on.
//!
//! Data flows through one module per concern:
//!
//! ```text
//! proc ─▶ capture ─▶ unwind ─▶ symbolize ─▶ annotate / locks ─▶ aggregate ─▶ profile
//! (/proc)  (ptrace,   (framehop,  (blazesym,   (SQL, OS state,     (group      (what a run
//!           perf,      offline)    debuginfod)  lock owners)        stacks)     learned)
//!           eBPF)
//! ```
//!
//! [`Sampler`] wires them: it loads the target's modules once, then each
//! [`Sampler::sample`] stops the selected threads only for the copy, resumes
//! them, unwinds the copies, symbolizes addresses not seen before, reads the
//! lock waits and counts the stacks; [`Sampler::finish`] builds the
//! [`Profile`] the renderers (`pileup-output`) consume. [`Resolver`] runs the
//! unwind and symbolize stages for stacks another tracer copied (`pileup
//! locks`' eBPF records). Only the last `keep_samples` samples
//! are kept whole, so a run of hours costs the memory of its distinct
//! stacks.
//!
//! The engine knows processes, not servers: which SQL connection a thread
//! serves comes from an [`Annotator`] (`pileup-annotate` reads it over a
//! connection), and debug files from debuginfod through
//! [`debug_files`]. Tracers that serve one tool live with it or above the
//! engine (`pileup-growth`; `pileup bench`'s system call counter).

#![warn(missing_docs)]

mod aggregate;
mod annotate;
mod capture;
mod debuginfod;
pub mod ebpf;
mod error;
pub mod frames;
mod locks;
mod modules;
mod proc;
mod profile;
mod regs;
mod resolve;
mod sampler;
mod symbolize;
mod unwind;

// The API: what tools build on. Everything else is crate-private.

pub use annotate::{one_line, role_of, Annotator, Role, SqlThread};
pub use capture::{CaptureOptions, CaptureStats, Missed, Mode};
pub use error::{EngineError, Fix};
pub use locks::{LockGroup, LockKind, LockWait, WaitSeen};
pub use modules::ModuleFile;
pub use profile::{Counted, ModuleReport, Profile, Sample, StopSummary, ThreadStack, Timing};
pub use regs::Regs;
pub use resolve::{DataName, Resolver};
pub use sampler::{default_debug_dirs, LoadedModules, Progress, Sampler, SamplerOptions, ThreadFilter, KEEP_SAMPLES};
pub use symbolize::Frame;

/// The server process as `/proc` shows it: finding it, its threads and
/// their state, and the files their system calls work on.
pub mod process {
    pub use crate::proc::{
        alive, auto_pid, check_target, context_switches, cpu_seconds, is_server_name, os_thread, own_cpu_us,
        sched_times, server_listening_on, server_socket, state, tids, FileIo, Listener, OsThread, SchedTimes,
    };
    pub use crate::regs::syscall_name;
}

/// What stacks mean: grouping them as pt-pmp does, where the threads'
/// time went, and which lock a waiting thread's frames and futex word name.
pub mod analysis {
    pub use crate::aggregate::{group, where_time_went, where_time_went_line, Share, StackGroup};
    pub use crate::locks::classify as classify_lock_wait;
}

/// Separate debug files looked up by build id on debuginfod servers (and
/// their cache), so a stripped server's frames get names.
pub mod debug_files {
    pub use crate::debuginfod::{cache_dir, fill_cache, DebugFetcher, DebuginfodOptions, FetchProgress, OnProgress};
}

/// Capture's building blocks, for benchmarks that measure them alone and
/// for recording fixtures (a live server's threads, replayed offline).
pub mod parts {
    pub use crate::capture::memory::read_mem;
    pub use crate::capture::passive::Passive;
    pub use crate::capture::perf::Event as PerfEvent;
    pub use crate::capture::{capture, thread_pointers};
    pub use crate::capture::{RawSample, RawThread};
    pub use crate::proc::{find_map, read_maps, schedstat, MapEntry};
}
