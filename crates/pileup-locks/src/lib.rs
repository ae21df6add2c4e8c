//! `pileup-locks`: which locks a server's threads wait on, for how long,
//! where and for whom, over a time window — the lockstat MariaDB never had.
//!
//! Data flows through one module per stage:
//!
//! ```text
//! capture ─▶ event ─▶ unwind + symbolize ─▶ annotate ─▶ aggregate ─▶ render
//! (eBPF on    (record    (the stacks engine's  (kind, owner,  (per lock:     (text, json,
//!  futex       bytes)     Resolver: framehop,   name, SQL)     exact counts,  folded, svg)
//!  waits)                 blazesym)                            top stacks)
//! ```
//!
//! A contended pthread mutex, rwlock or condition variable, and an InnoDB
//! srw lock, sleeps in `futex(FUTEX_WAIT…)`; the uncontended paths never
//! enter the kernel and cost nothing. The kernel side counts every wait per
//! futex word (exact totals and a histogram) and, within a per-second
//! budget, records the waiter's registers and the top of its stack, which
//! are unwound here (the server has no frame pointers). [`run`] wires it
//! and reports through callbacks; it prints nothing.

pub mod aggregate;
pub mod annotate;
pub mod capture;
mod error;
pub mod event;
pub mod ps;
pub mod render;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pileup_annotate::SqlSource;
use pileup_engine::Regs;
use pileup_engine::{DataName, Resolver};
use pileup_engine::{SqlThread, ThreadFilter};
use pileup_output::plural;
use pileup_sql::statement_class;
use serde::Serialize;

pub use aggregate::LockEntry;
pub use capture::Counters;
pub use error::LocksError;

/// What to trace and how.
#[derive(Debug, Clone)]
pub struct Options {
    pub pid: i32,
    pub duration: Duration,
    /// Waits recorded with a stack per second, at most.
    pub stack_budget: u64,
    /// Accept a process that is not mariadbd/mysqld.
    pub any_process: bool,
    /// DWARF names (inlined frames, lines) where debug info exists.
    pub dwarf: bool,
    pub debug_dirs: Vec<std::path::PathBuf>,
    /// Debug files the server's modules lack, from debuginfod's cache (and
    /// its servers), looked up before tracing starts.
    pub debuginfod: Option<pileup_engine::debug_files::DebuginfodOptions>,
    /// Stacks, statements and holders kept per lock in the report.
    pub top: usize,
    /// Re-read the processlist at most this often.
    pub sql_refresh: Duration,
    /// Only these threads (`--focus`: ids, roles, name patterns, as for
    /// `stacks`), re-chosen as threads come and go.
    pub threads: Option<String>,
    /// Time the probe itself with the kernel's BPF run-time statistics
    /// (on for every BPF program of the host while tracing).
    pub probe_cost: bool,
}

/// How far a trace is, for a progress line.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub elapsed: Duration,
    pub of: Duration,
    pub recorded: u64,
    pub locks: usize,
}

impl Serialize for Progress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("event", "progress")?;
        m.serialize_entry("elapsed_ms", &(self.elapsed.as_millis() as u64))?;
        m.serialize_entry("of_ms", &(self.of.as_millis() as u64))?;
        m.serialize_entry("recorded", &self.recorded)?;
        m.serialize_entry("locks", &self.locks)?;
        m.end()
    }
}

/// The bar moves in milliseconds of the window; what was recorded beside it.
impl pileup_output::News for Progress {
    fn progress(&self) -> pileup_output::Progress {
        let counted = self.recorded > 0 || self.locks > 0;
        pileup_output::Progress::at(self.elapsed.as_millis() as u64, Some(self.of.as_millis() as u64)).and_doing(
            counted.then(|| {
                format!("{} recorded, {}", plural(self.recorded, "wait", "waits"), plural(self.locks, "lock", "locks"))
            }),
        )
    }
}

/// The lock profile of one window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// `ebpf`, or `performance_schema` where eBPF could not be used.
    pub source: &'static str,
    /// The traced process (none with performance_schema on another host).
    pub pid: Option<i32>,
    pub exe: String,
    pub server_version: Option<String>,
    pub started_unix_ms: u64,
    pub duration_s: f64,
    /// Threads of the process when the trace began (with `--focus`, the
    /// most threads followed at once).
    pub threads: usize,
    /// The `--focus` filter, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_filter: Option<String>,
    pub counters: Counters,
    pub stack_budget_per_s: u64,
    /// pileup's own CPU time over the run (user and system), microseconds.
    pub cpu_us: u64,
    /// With `--probe-cost`: the probe's runs and time in the kernel.
    pub probe_cost: Option<capture::ProbeCost>,
    pub locks: Vec<LockEntry>,
    pub notes: Vec<String>,
}

/// What is known of the traced process's threads: their ids (a lock
/// owner must be one) and their SQL connections, re-read at most once per
/// refresh interval while waits arrive.
struct Threads {
    pid: i32,
    tids: HashSet<i32>,
    sql: Option<SqlSource>,
    server_version: Option<String>,
    sql_by_tid: HashMap<i32, SqlThread>,
    read_at: Instant,
    sql_error: Option<String>,
}

impl Threads {
    fn new(pid: i32, sql: Option<SqlSource>) -> Result<Threads, LocksError> {
        let mut t = Threads {
            pid,
            tids: HashSet::new(),
            server_version: sql.as_ref().map(|s| s.version.clone()),
            sql,
            sql_by_tid: HashMap::new(),
            read_at: Instant::now(),
            sql_error: None,
        };
        t.tids = pileup_engine::process::tids(pid)?.into_iter().collect();
        t.read_sql();
        Ok(t)
    }

    fn refresh(&mut self, every: Duration) {
        if self.read_at.elapsed() < every {
            return;
        }
        self.read_at = Instant::now();
        if let Ok(t) = pileup_engine::process::tids(self.pid) {
            self.tids = t.into_iter().collect();
        }
        self.read_sql();
    }

    /// The threads `filter` chooses now: by id, by role (from the SQL
    /// connection where there is one), and by name when it has a pattern.
    fn chosen(&self, filter: &ThreadFilter) -> HashSet<i32> {
        self.tids.iter().copied().filter(|&t| filter.chooses(self.pid, t, self.sql_by_tid.get(&t))).collect()
    }

    fn read_sql(&mut self) {
        let Some(s) = self.sql.as_mut() else { return };
        match s.threads() {
            Ok(m) => self.sql_by_tid = m,
            Err(e) => {
                if self.sql_error.is_none() {
                    self.sql_error = Some(format!(
                        "SQL annotation failed ({}); waits are traced without it",
                        pileup_conn::error_text(&e)
                    ));
                }
            }
        }
    }
}

/// One recorded wait: its stack unwound and named, its lock read from the
/// futex word and frames, its statement and holder, counted.
fn record_wait(
    e: event::Event,
    resolver: &mut Resolver,
    known: &Threads,
    pid: i32,
    agg: &mut aggregate::Aggregator,
    unwind_stops: &mut HashMap<String, u64>,
) {
    let regs = Regs { ip: e.ip, sp: e.sp, bp: e.bp, orig_ax: -1, ax: 0, di: e.uaddr, si: e.op as u64, dx: 0 };
    let (addrs, error) =
        if e.ip == 0 { (vec![], Some("no registers".to_string())) } else { resolver.unwind(&regs, e.sp, &e.stack) };
    if let Some(err) = &error {
        *unwind_stops.entry(err.clone()).or_default() += 1;
    }
    let frames = resolver.frames(&addrs);
    let w = annotate::lock_wait(&frames, &e, &known.tids);
    tracing::trace!(word = e.uaddr, op = e.op, val = e.val, kind = ?w.kind, "wait");
    let taken_in = annotate::taken_in(&frames);
    let statement = known.sql_by_tid.get(&e.tid).and_then(|t| t.info.as_deref()).map(statement_class);
    let holder = w.owner_tid.map(|t| {
        let who = match known.sql_by_tid.get(&t) {
            Some(s) => s.summary(120),
            None => pileup_engine::process::os_thread(pid, t).map(|o| o.name).unwrap_or_default(),
        };
        (t, if who.is_empty() { format!("thread {t}") } else { format!("thread {t}: {who}") })
    });
    agg.add(aggregate::Sampled {
        word: e.uaddr,
        kind: w.kind,
        lock: w.addr,
        wait_ns: e.wait_ns,
        tid: e.tid,
        addrs,
        labels: frames.iter().map(|f| f.label.clone()).collect(),
        truncated: error.is_some(),
        statement,
        holder,
        taken_in,
    });
}

/// What the user must know to read a trace honestly: waits counted
/// without their stack or not followed, stacks cut short, frames a
/// stripped server leaves unnamed.
fn trace_notes(
    counters: &capture::Counters,
    stack_budget: u64,
    unwind_stops: HashMap<String, u64>,
    locks: &[aggregate::LockEntry],
    exe: &str,
) -> Vec<String> {
    let were = |n: u64| if n == 1 { "was" } else { "were" };
    let mut notes = vec![];
    if counters.over_budget > 0 {
        notes.push(format!(
            "{} over the budget of {} stacks a second {} counted without their stack",
            plural(counters.over_budget, "wait", "waits"),
            stack_budget,
            were(counters.over_budget)
        ));
    }
    if counters.ring_full > 0 {
        notes.push(format!(
            "{} {} counted without their stack: pileup fell behind the ring buffer",
            plural(counters.ring_full, "wait", "waits"),
            were(counters.ring_full)
        ));
    }
    if counters.slot_shared > 0 {
        notes.push(format!(
            "{} {} not followed: another thread whose id shares its low 16 bits was waiting at the same time",
            plural(counters.slot_shared, "wait", "waits"),
            were(counters.slot_shared)
        ));
    }
    if counters.table_full > 0 {
        notes.push(format!(
            "{} on futex words past the table of 65,536 {} not counted per lock",
            plural(counters.table_full, "wait", "waits"),
            were(counters.table_full)
        ));
    }
    let mut stops: Vec<(String, u64)> = unwind_stops.into_iter().collect();
    stops.sort_by_key(|s| std::cmp::Reverse(s.1));
    if let Some((why, n)) = stops.first() {
        let (ends, they) = if *n == 1 { ("ends", "it is") } else { ("end", "they are") };
        notes.push(format!("{} {ends} early ({why}); {they} marked truncated", plural(*n, "stack", "stacks")));
    }
    if locks.iter().any(|l| l.kind.starts_with("InnoDB") && l.taken_in.as_deref().is_some_and(|t| t.contains("+0x"))) {
        notes.push(format!(
            "{} does not export InnoDB's functions: their frames show as module+offset of the function's start (the same offset in every run of this binary); with its debug symbols installed they are named",
            exe
        ));
    }
    if locks.iter().any(|l| l.kind == "futex" && l.recorded > 0 && l.name_source == "heap") {
        notes.push(
            "a \"futex\" lock is a futex word pileup could not tell the kind of (its waiters' frames are unnamed)"
                .into(),
        );
    }
    notes
}

/// Trace `opts.pid` for `opts.duration` (or until `stop`), annotating
/// waiters with SQL from `sql` when given, and return the report.
pub fn run(
    opts: &Options,
    sql: Option<SqlSource>,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Progress),
) -> Result<Report, LocksError> {
    let (mut resolver, mut notes) = open_resolver(opts, stop)?;
    let filter = opts
        .threads
        .as_deref()
        .map(ThreadFilter::parse)
        .transpose()
        .map_err(|e| LocksError::Usage(format!("thread selection {e}")))?;
    let known = std::cell::RefCell::new(Threads::new(opts.pid, sql)?);
    let mut threads = threads_at_start(&known.borrow(), filter.as_ref(), &mut notes);
    let started_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut agg = aggregate::Aggregator::default();
    let mut unwind_stops: HashMap<String, u64> = HashMap::new();
    let pid = opts.pid;
    let trace_opts = capture::TraceOptions {
        pid: opts.pid,
        duration: opts.duration,
        stack_budget: opts.stack_budget,
        probe_cost: opts.probe_cost,
        filter_threads: opts.threads.is_some(),
    };
    // What the progress line shows, shared between the two callbacks.
    let seen = std::cell::Cell::new((0u64, 0usize));
    let capture::Traced { words, counters, elapsed, probe_cost } = {
        let on_event = |e: event::Event| {
            let mut known = known.borrow_mut();
            known.refresh(opts.sql_refresh);
            record_wait(e, &mut resolver, &known, pid, &mut agg, &mut unwind_stops);
            seen.set((agg.recorded, agg.locks()));
        };
        let on_tick = |el: Duration| {
            progress(&Progress { elapsed: el, of: opts.duration, recorded: seen.get().0, locks: seen.get().1 });
        };
        // Chosen again only when the threads were read again (at most once
        // per refresh interval), not at every tick: a name pattern reads
        // each thread's name from /proc.
        let mut last: Option<(Instant, HashSet<i32>)> = None;
        let most = &mut threads;
        let watch = || {
            let mut k = known.borrow_mut();
            k.refresh(opts.sql_refresh);
            match (&last, &filter) {
                (Some((at, set)), _) if *at == k.read_at => set.clone(),
                (_, Some(f)) => {
                    let set = k.chosen(f);
                    // The time base of the shares: the most threads followed at once.
                    *most = (*most).max(set.len());
                    last = Some((k.read_at, set.clone()));
                    set
                }
                (_, None) => HashSet::new(),
            }
        };
        capture::trace(&trace_opts, stop, on_event, on_tick, watch)?
    };
    let known = known.into_inner();
    if let Some(e) = known.sql_error {
        notes.push(e);
    }
    // The window ends when the server does: said, so a short report is not
    // read as a quiet server.
    if !pileup_engine::process::alive(opts.pid) {
        notes.push(format!(
            "the server (pid {}) exited {:.1} s into the window; the report covers until then",
            opts.pid,
            elapsed.as_secs_f64()
        ));
    }
    let thread_ns = (elapsed.as_nanos() as u64).saturating_mul(threads.max(1) as u64);
    let locks = agg.finish(words, thread_ns, opts.top, |addr, taken_in| lock_name(&resolver, addr, taken_in));
    notes.extend(trace_notes(&counters, opts.stack_budget, unwind_stops, &locks, &resolver.exe));
    Ok(Report {
        source: "ebpf",
        pid: Some(opts.pid),
        exe: resolver.exe.clone(),
        server_version: known.server_version,
        started_unix_ms,
        duration_s: elapsed.as_secs_f64(),
        threads,
        thread_filter: opts.threads.clone(),
        counters,
        stack_budget_per_s: opts.stack_budget,
        cpu_us: pileup_engine::process::own_cpu_us(),
        probe_cost,
        locks,
        notes,
    })
}

/// The server's symbols and debug files (fetched from debuginfod when
/// asked), once the system can trace, and the notes they left.
fn open_resolver(opts: &Options, stop: &AtomicBool) -> Result<(Resolver, Vec<String>), LocksError> {
    capture::preflight()?;
    let mut resolver = Resolver::new(opts.pid, opts.any_process, opts.dwarf, &opts.debug_dirs)?;
    let mut notes = std::mem::take(&mut resolver.notes);
    if let Some(o) = &opts.debuginfod {
        notes.extend(resolver.use_debuginfod(o));
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(LocksError::Usage("stopped while debug files were being fetched; nothing was traced".into()));
        }
    }
    Ok((resolver, notes))
}

/// How many threads are followed when the trace begins: those `filter`
/// chooses (a note when none does yet), or all.
fn threads_at_start(known: &Threads, filter: Option<&ThreadFilter>, notes: &mut Vec<String>) -> usize {
    match filter {
        Some(f) => {
            let chosen = known.chosen(f);
            if chosen.is_empty() {
                notes.push(
                    "no thread matched --focus when the trace began; threads that appear later and match are followed"
                        .into(),
                );
            }
            chosen.len()
        }
        None => known.tids.len(),
    }
}

/// A lock's name and what named it: a heap address (with where it was
/// taken), an exported symbol, or a section.
fn lock_name(resolver: &Resolver, addr: u64, taken_in: Option<&str>) -> (String, String) {
    match resolver.data_name(addr) {
        DataName::Heap => match taken_in {
            Some(t) => (format!("heap lock {addr:#x} taken in {t}"), "heap".into()),
            None => (format!("futex {addr:#x}"), "heap".into()),
        },
        n @ DataName::Symbol { .. } => (n.label(), "symbol".into()),
        n @ DataName::Section { .. } => (format!("{} (not exported)", n.label()), "section".into()),
    }
}

/// Time the server's instrumented synchronisation waits with
/// performance_schema over `duration` (or until `stop`): the source where
/// eBPF cannot be used. `why` says why eBPF was not, for the report.
pub fn run_performance_schema(
    mut conn: mysql::Conn,
    duration: Duration,
    why: Option<String>,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Progress),
) -> Result<Report, LocksError> {
    use mysql::prelude::Queryable;
    ps::check(&mut conn).map_err(LocksError::PerformanceSchema)?;
    let version: Option<String> = conn.query_first("SELECT VERSION()").ok().flatten();
    let threads: Option<u64> = conn.query_first("SELECT COUNT(*) FROM performance_schema.threads").ok().flatten();
    let threads = threads.unwrap_or(1) as usize;
    let started_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let fingerprint = statement_class;
    let (locks, elapsed) = ps::trace(&mut conn, duration, threads, stop, fingerprint, |el| {
        progress(&Progress { elapsed: el, of: duration, recorded: 0, locks: 0 })
    })
    .map_err(LocksError::PerformanceSchema)?;
    let mut notes = vec![];
    if let Some(w) = why {
        notes.push(format!("eBPF was not used ({w}); the waits are performance_schema's"));
    }
    notes.push(
        "performance_schema times every acquisition, contended or not, of the instruments enabled at server start; it keeps neither stacks nor holders, and its maximum is since the server started; a connection's waits are put under the statement it ran when the window ended (or began, if it was idle then)".into(),
    );
    Ok(Report {
        source: "performance_schema",
        pid: None,
        exe: "server".into(),
        server_version: version,
        started_unix_ms,
        duration_s: elapsed.as_secs_f64(),
        threads,
        thread_filter: None,
        counters: Counters::default(),
        stack_budget_per_s: 0,
        cpu_us: pileup_engine::process::own_cpu_us(),
        probe_cost: None,
        locks,
        notes,
    })
}
