//! `pileup locks`: a lock-contention profile over a time window.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use pileup_conn::ConnOptions;
use pileup_locks::Options;

use crate::output::{emit, stack_format, Target};

#[derive(clap::Args)]
#[command(after_long_help = "Traces the server's contended lock waits for a time window with eBPF and reports, \
per lock, lockstat-style: how many waits, total, mean and longest wait, a log2 histogram of wait times, the share \
of the threads' time, the stacks that waited, the statements of the waiting connections, and the holders seen.\n\n\
Every contended pthread mutex, rwlock and condition variable, and every InnoDB latch (srw_lock, ssux_lock; \
MariaDB 10.6+), sleeps in the futex system call; uncontended locking never reaches the kernel and costs nothing. \
A probe on the scheduler sees each thread of the server go to sleep in a futex wait and wake from it; every such \
wait is counted per lock (exact totals) and, up to --stack-budget a second, the waiter's registers and the top of \
its stack are recorded, which pileup unwinds (the server needs no frame pointers).\n\n\
Locks are named by the global object they lie in (LOCK_open, LOCK_status) where the binary exports it; \
otherwise by module and section (a stripped server's InnoDB globals), or, on the heap, by the function that \
takes them. A pthread mutex's holder is read from the lock when the wait began, with its connection and \
statement. Condition waits are listed apart: they include idle waiting, and metadata, table and row locks \
wait there (the SQL lock views name those holders).\n\n\
Needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE) and a kernel with BTF (5.15+). Every probe is \
detached when pileup exits, however it exits.\n\nExamples:\n  pileup locks --duration 30s\n  \
pileup locks --duration 1m -o locks.svg     # flame graph weighted by time waited\n  \
pileup locks --format json > locks.json")]
pub struct LocksArgs {
    /// Server process id, or "auto" for the one mysqld/mariadbd running.
    #[arg(long, default_value = "auto", value_name = "PID|auto")]
    pub pid: String,
    /// How long to trace (e.g. 10s, 2m, 1h). Ctrl-C ends it early and still reports.
    #[arg(long, default_value = "10s", value_parser = super::parse_duration)]
    pub duration: Duration,
    #[command(flatten)]
    pub out: crate::output::OutputArgs,
    /// Waits recorded with their stack per second, at most (every wait is counted regardless).
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub stack_budget: u64,
    /// Locks shown in detail (text), and stacks, statements and holders kept per lock.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Where the waits come from: ebpf (this host's server, root), performance-schema (its
    /// wait/synch instruments, enabled at server start), or auto: eBPF where it can be used,
    /// else performance_schema.
    #[arg(long, default_value = "auto", value_parser = ["auto", "ebpf", "performance-schema"])]
    pub source: String,
    /// Do not connect for SQL (no statements or connections for waiters and holders).
    #[arg(long)]
    pub no_sql: bool,
    /// Only these threads: comma-separated thread ids, roles (accept, sql-thread, io-thread,
    /// connections), conn:ID and/or name:REGEX on thread names, as for `pileup stacks`. Threads that
    /// appear while tracing and match are followed too. The eBPF source only.
    #[arg(long, value_name = "SPEC")]
    pub focus: Option<String>,
    /// Trace a process that is not mysqld/mariadbd.
    #[arg(long)]
    pub any_process: bool,
    /// Read DWARF for inlined frames and source lines where debug info is installed (slower start).
    #[arg(long)]
    pub debug_info: bool,
    #[command(flatten)]
    pub debug_files: super::debug_files::DebugFileArgs,
    /// Also report the probe's own time in the kernel. Turns on the kernel's BPF run-time
    /// statistics while tracing (for every BPF program on this host: a clock read before and
    /// after each run); they turn off when pileup exits, however it exits.
    #[arg(long)]
    pub probe_cost: bool,
}

pub fn run(a: LocksArgs, conn: &ConnOptions) -> Result<()> {
    super::more_than_0("--duration", a.duration)?;
    super::at_least_1("--top", a.top as u64)?;
    super::at_least_1("--stack-budget", a.stack_budget)?;
    let targets = a.out.targets("locks")?;
    if let Some(t) = &a.focus {
        pileup_engine::ThreadFilter::parse(t).map_err(|e| super::Usage(format!("--focus {e}")))?;
    }
    if let Some(f) = stack_format(&targets) {
        if a.source == "performance-schema" {
            super::usage!(
                "performance_schema keeps no stacks to write as {f}: use --format text or json with --source performance-schema"
            );
        }
    }
    if a.source == "performance-schema" && a.focus.is_some() {
        super::usage!("--focus needs the eBPF source: performance_schema's summary is of every thread");
    }
    if a.source == "performance-schema" {
        return run_performance_schema(&a, conn, &targets, None);
    }
    // eBPF needs the server's process on this host and the privileges to
    // trace it; with --source auto, a server elsewhere or a kernel without
    // eBPF is timed with performance_schema instead, where that is on.
    let pid = match a.pid.as_str() {
        "auto" if conn.any_given() => {
            let spec = conn.resolve()?;
            match super::resolve_server_pid("auto", &spec)? {
                (Some(pid), _) => pid,
                (None, why) if a.source == "auto" => return run_performance_schema(&a, conn, &targets, why),
                (None, why) => {
                    super::usage!("--source ebpf needs the server's process: {}", why.unwrap_or_default())
                }
            }
        }
        p => super::parse_pid(p, conn)?,
    };
    // Privileges first: without them the server cannot even be looked at,
    // and the error should say what is missing.
    match pileup_locks::capture::preflight() {
        Ok(()) => {}
        Err(pileup_locks::LocksError::NoEbpf(why)) if a.source == "auto" && !a.no_sql => {
            return instead_of_ebpf(&a, conn, &targets, why);
        }
        Err(e) => return Err(e.into()),
    }
    pileup_engine::process::check_target(pid, a.any_process)?;
    let sql = if a.no_sql { None } else { super::stacks::open_sql(pid, conn) };
    let bars = super::debug_files::fetch_bars();
    let opts = Options {
        pid,
        duration: a.duration,
        stack_budget: a.stack_budget,
        any_process: a.any_process,
        dwarf: a.debug_info,
        debug_dirs: a.debug_files.dirs(),
        debuginfod: Some(a.debug_files.debuginfod_with_bars(&bars)),
        // A flame graph or folded stacks carry every recorded stack.
        top: if stack_format(&targets).is_some() { usize::MAX } else { a.top },
        sql_refresh: Duration::from_secs(1),
        probe_cost: a.probe_cost,
        threads: a.focus.clone(),
    };
    let mut sink = progress().among(&bars);
    // A signal ends the trace; what was recorded is still reported.
    let stop = super::stop_on_signals();
    let report = pileup_locks::run(&opts, sql, &stop, |p| sink.event(p));
    sink.finish();
    let report = match report {
        // The kernel refused the program when it was loaded (lockdown, a
        // security module): as when eBPF is missing outright.
        Err(pileup_locks::LocksError::NoEbpf(why)) if a.source == "auto" && !a.no_sql => {
            return instead_of_ebpf(&a, conn, &targets, why);
        }
        r => r?,
    };
    emit(&report, &targets, &crate::output::Options { detail: a.top, ..Default::default() })
}

/// The trace's bar (the result is a document: the sink only moves it).
fn progress() -> crate::output::Sink {
    crate::output::Sink::new(
        false,
        Some("{spinner} tracing lock waits [{bar:30}] {elapsed}/{duration} {msg} (Ctrl-C: stop and report)"),
    )
}

/// performance_schema where eBPF cannot be used (`why`), or one error naming both reasons.
fn instead_of_ebpf(a: &LocksArgs, conn: &ConnOptions, targets: &[Target], why: String) -> Result<()> {
    run_performance_schema(a, conn, targets, Some(why.clone()))
        .with_context(|| format!("eBPF tracing is not available here ({why}), and performance_schema cannot stand in"))
}

/// Time the instrumented waits with performance_schema over the window.
fn run_performance_schema(a: &LocksArgs, conn: &ConnOptions, targets: &[Target], why: Option<String>) -> Result<()> {
    let without_ebpf = why.as_deref().map(|w| format!(" (eBPF cannot be used here: {w})")).unwrap_or_default();
    if stack_format(targets).is_some() {
        bail!(
            "performance_schema keeps no stacks{without_ebpf}: use --format text or json (folded stacks, flame graphs, call graphs and pprof profiles need eBPF)"
        );
    }
    if a.focus.is_some() {
        super::usage!("--focus needs the eBPF source{without_ebpf}: performance_schema's summary is of every thread");
    }
    let c = conn.resolve()?.connect().context("performance_schema needs a connection to the server")?;
    let mut sink = progress();
    let stop = super::stop_on_signals();
    let report = pileup_locks::run_performance_schema(c, a.duration, why, &stop, |p| sink.event(p));
    sink.finish();
    let report = report?;
    emit(&report, targets, &crate::output::Options { detail: a.top, ..Default::default() })
}
