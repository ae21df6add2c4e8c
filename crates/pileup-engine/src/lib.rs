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
//! stacks. [`last_statement`] reads what an idle connection last ran from
//! the server's memory, each thread stopped only to read its thread pointer.
//! [`syscalls`] counts and times one thread's system calls exactly (eBPF).

mod aggregate;
mod annotate;
mod capture;
mod debuginfod;
pub mod ebpf;
mod error;
pub mod frames;
pub mod growth;
pub mod last_statement;
mod locks;
mod modules;
mod proc;
mod profile;
mod regs;
mod resolve;
mod sampler;
mod symbolize;
pub mod syscalls;
mod unwind;

// The API: what tools build on. Everything else is crate-private.

pub use annotate::{one_line, role_of, Role, SqlSource, SqlThread};
pub use capture::{CaptureOptions, CaptureStats, Missed, Mode};
pub use error::{Fix, StacksError};
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
        auto_pid, check_target, context_switches, cpu_seconds, is_server_name, os_thread, own_cpu_us, sched_times,
        server_for, server_pid_file, server_socket, tids, FileIo, OsThread, SchedTimes,
    };
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
    pub use crate::debuginfod::{fill_cache, DebuginfodOptions, FetchProgress, OnProgress};
}

/// Capture's building blocks, for benchmarks that measure them alone and
/// for recording fixtures (a live server's threads, replayed offline).
pub mod parts {
    pub use crate::capture::capture;
    pub use crate::capture::passive::Passive;
    pub use crate::capture::perf::Event as PerfEvent;
    pub use crate::capture::{RawSample, RawThread};
    pub use crate::proc::{read_maps, schedstat, MapEntry};
}
