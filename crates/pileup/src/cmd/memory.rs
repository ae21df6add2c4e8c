//! `pileup memory`: wiring for pileup_memory.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use pileup_annotate::SqlSource;
use pileup_conn::ConnOptions;
use pileup_memory::{MemoryOptions, Point, Sink};

use crate::output::{emit, Options, OutputArgs};

/// Where a running server's memory went over a window: which statements and
/// which code paths grew it, what they still hold, its resident memory by
/// region (glibc's heaps, the buffer pool, thread stacks, file-backed)
/// beside what the server says it allocated (Memory_used, each
/// connection's MEMORY_USED), the heap growth that accounting does not
/// explain, and the memory the server freed that the allocator kept.
///
/// Growth is traced with eBPF (root, or CAP_BPF, CAP_PERFMON and
/// CAP_SYS_PTRACE): every first touch of a page by the server
/// (exceptions:page_fault_user) and every change of its address space
/// (brk, mmap, mremap, mprotect, munmap, madvise) is counted per thread in
/// the kernel, and sampled by bytes with the thread's stack, copied in the
/// kernel within --stack-budget a second. Each sample is charged to its
/// stack and to the connection and statement its thread ran at that
/// instant (the processlist, read every 250 ms while the server grows).
/// The probes never stop a thread and leave with pileup, however it exits.
///
/// It also reads /proc/PID/status and three queries per interval, and
/// /proc/PID/smaps (a walk of the page tables in the kernel) only as often
/// as keeps that under 1% of a core; nothing is changed on the server.
///
/// Formats: text, json; svg (a flame graph weighted by bytes), folded,
/// pprof (alloc_space and inuse_space, as a heap profile) and dot from
/// the traced stacks.
#[derive(clap::Args)]
#[command(
    verbatim_doc_comment,
    after_long_help = "Examples:\n  pileup memory --duration 1m\n  pileup memory --pid 4242 --interval 500ms -o memory.json\n  pileup memory --duration 20s -o growth.svg   # a flame graph by bytes\n  pileup memory --duration 20s -o heap.pb.gz   # pprof: go tool pprof -sample_index=alloc_space\n  pileup memory --no-trace --duration 10s      # /proc and the accounting alone"
)]
pub struct MemoryArgs {
    /// The server process: a pid, or "auto" (the server the connection
    /// options reach, else the one running).
    #[arg(long, default_value = "auto", value_name = "PID|auto")]
    pub pid: String,
    /// How long to follow it.
    #[arg(long, default_value = "30s", value_parser = super::parse_duration)]
    pub duration: Duration,
    /// Time between points (at least 100ms).
    #[arg(long, default_value = "1s", value_parser = super::parse_duration)]
    pub interval: Duration,
    /// Read /proc alone: no SQL connection, so neither the server's
    /// accounting nor statements (growth is charged to stacks and threads).
    #[arg(long)]
    pub no_sql: bool,
    /// Do not trace growth with eBPF: /proc and the server's accounting
    /// alone (no privileges needed beyond reading the server's /proc).
    #[arg(long)]
    pub no_trace: bool,
    /// Stacks copied per second at most; the sampling period follows the
    /// growth rate so that the budget is spent, and samples past it are
    /// charged to their statement without a stack.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub stack_budget: u64,
    /// Time the probes with the kernel's BPF run-time statistics (on for
    /// every BPF program of the host while pileup runs) and print their cost.
    #[arg(long)]
    pub probe_cost: bool,
    /// Statements, stacks and connections listed.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Also sample the allocations of these threads (malloc, calloc, realloc
    /// and free, with uprobes on the server's allocator): comma-separated
    /// thread ids, roles (accept, sql-thread, io-thread, connections),
    /// conn:ID (a processlist id) and/or name:REGEX. Shows what they
    /// allocated and still hold, by stack. Every allocator call of the
    /// server traps while this runs; the cost is timed and printed.
    #[arg(long, value_name = "SPEC")]
    pub focus: Option<String>,
    /// With --focus: bytes between a thread's allocation samples (K, M, G
    /// suffixes).
    #[arg(long, default_value = "512K", value_name = "BYTES", value_parser = super::parse_bytes)]
    pub malloc_every: u64,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// A progress line on a terminal, and Ctrl-C to stop early.
struct Progress {
    sink: crate::output::Sink,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Sink for Progress {
    fn point(&mut self, p: &Point) {
        self.sink.event(p)
    }

    fn traced(&mut self, grown: u64, charged: u64) {
        self.sink.event(&pileup_memory::TracedSoFar { grown, charged })
    }

    fn stop(&mut self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

pub fn run(a: MemoryArgs, conn: &ConnOptions) -> Result<()> {
    if a.interval < Duration::from_millis(100) {
        super::usage!("--interval must be at least 100ms");
    }
    super::more_than_0("--duration", a.duration)?;
    super::at_least_1("--stack-budget", a.stack_budget)?;
    super::at_least_1("--top", a.top as u64)?;
    if a.focus.is_some() && a.no_trace {
        super::usage!("--focus samples allocations with eBPF, which --no-trace turns off; drop one of them");
    }
    if let Some(f) = &a.focus {
        pileup_engine::ThreadFilter::parse(f).map_err(|e| super::Usage(format!("--focus {e}")))?;
    }
    let targets = a.out.targets("memory")?;
    if a.no_trace {
        if let Some(f) = crate::output::stack_format(&targets) {
            super::usage!("{f} is written from the traced stacks, which --no-trace turns off; drop one of them");
        }
    }
    let spec = conn.resolve()?;
    let pid = super::parse_pid(&a.pid, conn)?;
    let sql = if a.no_sql { None } else { Some(SqlSource::new(spec.connect()?)?) };
    // The result is a document: the sink only moves the bar.
    let mut bar =
        crate::output::Sink::new(false, Some("{spinner} following the server's memory [{bar:30}] {pos}/{len} s {msg}"));
    bar.event(&pileup_output::Step { done: 0, total: Some(a.duration.as_secs().max(1)) });
    let mut sink = Progress { sink: bar, stop: super::stop_on_signals() };
    let o = MemoryOptions {
        pid,
        duration: a.duration,
        interval: a.interval,
        trace: !a.no_trace,
        stack_budget: a.stack_budget,
        probe_cost: a.probe_cost,
        top: a.top,
        malloc_focus: a.focus.clone(),
        malloc_every: a.malloc_every,
    };
    let r = pileup_memory::run(&o, sql, &mut sink);
    sink.sink.finish();
    emit(&r?, &targets, &Options::default())?;
    Ok(())
}
