//! `pileup-growth`: memory growth of a server process, traced with eBPF and
//! charged to what caused it (`pileup memory`, and `pileup watch`'s
//! memory captures).
//!
//! ```text
//! trace (eBPF: first touches of pages, brk/mmap/mremap/mprotect/munmap/madvise)
//!   ─▶ record ─▶ unwind + symbolize (Resolver) ─▶ attribute ─▶ Growth
//!                                    (by stack; by statement and connection from
//!                                     the processlist read around each event;
//!                                     by thread kind)
//! ```
//!
//! [`trace_growth`] runs it for as long as its tick callback says, reading
//! the processlist every 250 ms while growth arrives, and hands the caller
//! the resolver and the processlist at each tick (for what it follows
//! beside: a timeline, allocation probes).

pub mod attribute;
mod error;
pub mod procmem;
pub mod record;
mod stacks;
pub mod trace;

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use pileup_engine::ebpf::ProbeCost;
use pileup_engine::Regs;
use pileup_engine::Resolver;
use pileup_engine::{Annotator, SqlThread};

pub use attribute::Growth;
pub use error::GrowthError;
pub use trace::Counters;

#[derive(Debug, Clone)]
pub struct GrowthOptions {
    pub pid: i32,
    /// Stacks copied per second, at most.
    pub stack_budget: u64,
    /// Time the probes with the kernel's BPF run-time statistics.
    pub probe_cost: bool,
    /// Entries kept per list.
    pub top: usize,
}

/// The stacks that grew a process (`title` names it) as weighted stacks:
/// pprof's heap sample types (`alloc_space`, bytes first touched;
/// `inuse_space`, still held at the end) and flame graphs whose widths are
/// bytes; `None` when no growth was sampled with a stack.
pub fn growth_stacks(t: &GrowthTrace, title: String) -> Option<pileup_output::Stacks> {
    stacks::of(&t.growth, t.elapsed_s, title)
}

/// What a trace found, and what it cost.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct GrowthTrace {
    pub growth: Growth,
    pub counters: Counters,
    pub probe_cost: Option<ProbeCost>,
    pub stack_budget: u64,
    /// Bytes between samples at the end (kept to the budget).
    pub period: u64,
    pub elapsed_s: f64,
    /// What the reader should know (stacks cut short, SQL unreadable).
    #[serde(skip)]
    pub notes: Vec<String>,
}

impl GrowthTrace {
    /// One line naming what grew the process: how much and how fast, the
    /// statement (and its connections) charged most and the stack it grew
    /// through, and how much of it is still held; `None` when less than a
    /// MiB was first touched.
    pub fn headline(&self) -> Option<String> {
        let g = &self.growth;
        let touched = g.totals.anon_bytes + g.totals.file_bytes;
        if touched < 1 << 20 {
            return None;
        }
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
        let mut line = format!(
            "memory growth: {} first touched in {:.1} s ({}/s)",
            mib(touched),
            self.elapsed_s,
            mib((touched as f64 / self.elapsed_s.max(0.001)) as u64)
        );
        let stack = |frames: &[String]| {
            let mut f: Vec<&str> = frames.iter().map(String::as_str).take(7).collect();
            if frames.len() > 7 {
                f.push("…");
            }
            f.join(" ← ")
        };
        match g.by_statement.first() {
            Some(s) => {
                let conns: Vec<String> = s.connections.iter().take(3).map(|c| c.to_string()).collect();
                line += &format!(
                    "; {:.0}% by `{}` (connection {})",
                    s.grown as f64 * 100.0 / touched as f64,
                    pileup_engine::one_line(&s.example, 120),
                    conns.join(", ")
                );
                if !s.top_stack.is_empty() {
                    line += &format!(" through {}", stack(&s.top_stack));
                }
                line += &format!("; {} of it still held", mib(s.held));
            }
            None => {
                if let Some(s) = g.by_stack.first() {
                    line += &format!("; no statement ran it; most through {}", stack(&s.frames));
                }
            }
        }
        Some(line)
    }
}

/// What a tick hands the caller.
pub struct Tick<'a, S> {
    /// Since the probes were attached.
    pub elapsed: Duration,
    pub sql: Option<&'a mut S>,
    pub resolver: &'a mut Resolver,
    /// The processlist by thread id as last read, and when (monotonic ns).
    pub rows: &'a HashMap<i32, SqlThread>,
    pub rows_at: Option<u64>,
    /// Bytes first touched so far, and charged to a statement.
    pub grown: u64,
    pub charged: u64,
}

/// How often the processlist is read while growth arrives: each event is
/// charged to the statement its thread ran, from the reads just before and
/// just after it. While the server grows fast (more than FAST bytes since
/// the last tick), more often: a statement shorter than the time between
/// reads can run unseen.
const SQL_EVERY: Duration = Duration::from_millis(250);
const SQL_EVERY_FAST: Duration = Duration::from_millis(100);
const FAST: u64 = 4 << 20;

/// Check what tracing needs, with the fix in the error.
pub fn preflight() -> Result<(), GrowthError> {
    let map = |e: pileup_engine::ebpf::Unavailable| match e {
        pileup_engine::ebpf::Unavailable::Privileges(m) => GrowthError::Privileges(m),
        pileup_engine::ebpf::Unavailable::Kernel(m) => GrowthError::NoEbpf(m),
    };
    pileup_engine::ebpf::preflight().map_err(map)?;
    pileup_engine::ebpf::syscall_tracepoints().map_err(map)
}

/// The processlist, read around events to charge them, and what stops.
struct Charging {
    charger: attribute::Charger,
    timeline: attribute::SqlTimeline,
    pending: Vec<attribute::Unwound>,
    stops: HashMap<String, u64>,
    grown: u64,
    charged: u64,
    sql_error: Option<String>,
    last_sql: Option<Instant>,
    /// The processlist wanted at every SQL_EVERY even without growth.
    always_sql: bool,
}

impl Charging {
    fn read_sql<S: Annotator>(&mut self, sql: &mut Option<S>) {
        let Some(s) = sql.as_mut().filter(|_| self.sql_error.is_none()) else { return };
        let before = pileup_engine::ebpf::monotonic_ns();
        self.last_sql = Some(Instant::now());
        match s.threads() {
            // Stamped at the query's middle: the server read its threads
            // some time between sending and answering.
            Ok(rows) => self.timeline.push((before + pileup_engine::ebpf::monotonic_ns()) / 2, rows),
            Err(e) => {
                self.sql_error = Some(format!(
                    "the processlist could not be read ({e}); growth is charged to stacks and threads only"
                ))
            }
        }
    }

    /// Charge the events the processlist has been read after (all of them
    /// when it cannot be read).
    fn charge_ready(&mut self, all: bool) {
        let upto = if all { u64::MAX } else { self.timeline.latest().unwrap_or(0) };
        let n = self.pending.iter().take_while(|e| e.time_ns <= upto).count();
        for e in self.pending.drain(..n) {
            let who = if e.release { attribute::Who::default() } else { self.timeline.who(e.tid, e.time_ns) };
            if e.what.is_fault() {
                self.grown += e.bytes;
                self.charged += if who.statement.is_some() { e.bytes } else { 0 };
            }
            self.charger.charge(e, &who);
        }
        match self.pending.first() {
            Some(first) => self.timeline.forget_before(first.time_ns),
            None => {
                if let Some(l) = self.timeline.latest() {
                    self.timeline.forget_before(l)
                }
            }
        }
    }

    fn unwind_arrived(&mut self, arrived: &RefCell<Vec<record::Event>>, resolver: &mut Resolver) {
        for e in arrived.borrow_mut().drain(..) {
            self.pending.push(unwind(e, resolver, &mut self.stops));
        }
    }
}

/// Trace `o.pid`'s growth until `on_tick` returns false (called about
/// every 100 ms). `sql` reads the processlist (none: growth is charged to
/// stacks and threads only); `class_of` turns a statement into its class;
/// `always_sql` reads the processlist every 250 ms even while nothing
/// grows (for a caller that follows threads by connection).
pub fn trace_growth<S: Annotator>(
    o: &GrowthOptions,
    sql: &mut Option<S>,
    resolver: &mut Resolver,
    class_of: Box<dyn Fn(&str) -> String>,
    always_sql: bool,
    mut on_tick: impl FnMut(Tick<'_, S>) -> bool,
) -> Result<GrowthTrace, GrowthError> {
    let mut c = Charging {
        charger: attribute::Charger::new(pileup_engine::ebpf::monotonic_ns(), class_of),
        timeline: attribute::SqlTimeline::default(),
        pending: vec![],
        stops: HashMap::new(),
        grown: 0,
        charged: 0,
        sql_error: None,
        last_sql: None,
        always_sql,
    };
    c.read_sql(sql);
    let arrived = RefCell::new(Vec::<record::Event>::new());
    let topts = trace::TraceOptions { pid: o.pid, stack_budget: o.stack_budget, probe_cost: o.probe_cost };
    let on_events = |b: Vec<record::Event>| arrived.borrow_mut().extend(b);
    let tick = |el: Duration| {
        c.unwind_arrived(&arrived, resolver);
        let fast = c.pending.iter().filter(|e| e.what.is_fault()).map(|e| e.bytes).sum::<u64>() > FAST;
        let every = if fast { SQL_EVERY_FAST } else { SQL_EVERY };
        let due = c.last_sql.is_none_or(|t| t.elapsed() >= every);
        if due && (!c.pending.is_empty() || c.always_sql) {
            c.read_sql(sql);
        }
        // Without SQL every event is charged as it comes.
        let all = sql.is_none() || c.sql_error.is_some();
        c.charge_ready(all);
        on_tick(Tick {
            elapsed: el,
            sql: sql.as_mut(),
            resolver,
            rows: &c.timeline.last_seen,
            rows_at: c.timeline.latest(),
            grown: c.grown,
            charged: c.charged,
        })
    };
    let t = trace::trace(&topts, on_events, tick)?;
    c.unwind_arrived(&arrived, resolver);
    if pileup_engine::process::check_target(o.pid, true).is_ok() {
        c.read_sql(sql);
    }
    c.charge_ready(true);
    let mut notes = vec![];
    notes.extend(c.sql_error.take());
    let mut stops: Vec<(String, u64)> = c.stops.into_iter().collect();
    stops.sort_by_key(|s| std::cmp::Reverse(s.1));
    if let Some((why, n)) = stops.first() {
        let (ends, they) = if *n == 1 { ("ends", "it is") } else { ("end", "they are") };
        notes.push(format!(
            "{} {ends} early ({why}); {they} marked truncated",
            pileup_output::plural(*n, "stack", "stacks")
        ));
    }
    let pid = o.pid;
    let last_seen = &c.timeline.last_seen;
    let role = |tid: i32| {
        let row = last_seen.get(&tid);
        if let Some(r) = pileup_engine::role_of(pid, tid, row) {
            return r.as_str().to_string();
        }
        match (row, pileup_engine::process::os_thread(pid, tid)) {
            (Some(_), _) => "background (in the processlist)".to_string(),
            (None, Some(t)) => format!("not in the processlist ({})", t.name),
            (None, None) => "threads that exited".to_string(),
        }
    };
    let growth = c.charger.finish(&t.threads, role, o.top);
    Ok(GrowthTrace {
        growth,
        counters: t.counters,
        probe_cost: t.probe_cost,
        stack_budget: o.stack_budget,
        period: t.period,
        elapsed_s: t.elapsed.as_secs_f64(),
        notes,
    })
}

/// Unwind and name an event's stack, if it has one.
fn unwind(e: record::Event, resolver: &mut Resolver, stops: &mut HashMap<String, u64>) -> attribute::Unwound {
    let (frames, truncated) = match &e.regs {
        Some(r) if r.ip != 0 => {
            let regs = Regs { ip: r.ip, sp: r.sp, bp: r.bp, orig_ax: -1, ax: 0, di: 0, si: 0, dx: 0 };
            let (addrs, error) = resolver.unwind(&regs, r.sp, &r.stack);
            if let Some(err) = &error {
                *stops.entry(err.clone()).or_default() += 1;
            }
            let frames = resolver.frames(&addrs).into_iter().map(|f| f.label).collect();
            (Some(frames), error.is_some())
        }
        _ => (None, false),
    };
    attribute::Unwound {
        time_ns: e.time_ns,
        tid: e.tid,
        what: e.what,
        bytes: e.bytes,
        addr: e.addr,
        release: e.release,
        frames,
        truncated,
    }
}
