//! `pileup memory`: where a running server's memory went over a window.
//!
//! ```text
//! procmem (/proc: resident memory, mappings → glibc heaps, stacks, pool) ─┐
//! server (Memory_used, per-connection MEMORY_USED, the buffer pool) ──────┼─▶ Point ─┐
//!                                                                        ─┘          │
//! trace (eBPF: first touches of pages, brk/mmap/mremap/mprotect/munmap/madvise)      ├─▶ Report
//!   ─▶ record ─▶ unwind + symbolize (the engine's Resolver) ─▶ attribute ─▶ Growth ──┘
//!                                  (by stack, by statement and connection from the
//!                                   processlist by thread id, by thread role)
//! ```
//!
//! Each interval the process's resident memory is read from `/proc` and
//! split by region, beside what the server says it allocated. With tracing
//! (the default), every first touch of a page and every change of the
//! address space is counted per thread in the kernel, and sampled by bytes
//! with the thread's stack; each sample is charged to its stack and to the
//! connection and statement its thread ran at that instant. The report
//! names the statements and stacks that grew the server, what they still
//! hold, heap growth the server's accounting does not explain, and memory
//! it freed that the allocator kept.

pub mod attribute;
mod error;
pub mod malloc;
pub mod procmem;
pub mod record;
mod report;
mod server;
pub mod trace;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use pileup_engine::{Regs, Resolver, SqlSource};

pub use attribute::Growth;
pub use error::MemoryError;
pub use report::{Point, Report, Traced};
pub use server::{ConnectionMemory, ServerMemory};

/// What to watch, and for how long.
#[derive(Debug, Clone)]
pub struct MemoryOptions {
    pub pid: i32,
    pub duration: Duration,
    pub interval: Duration,
    /// Trace growth with eBPF (stacks, statements); otherwise `/proc` and
    /// the server's accounting alone.
    pub trace: bool,
    /// Stacks copied per second, at most.
    pub stack_budget: u64,
    /// Time the probes with the kernel's BPF run-time statistics.
    pub probe_cost: bool,
    /// Entries kept per list (stacks, statements, connections).
    pub top: usize,
    /// Also sample these threads' allocations with uprobes on the
    /// allocator (a thread selection: ids, roles, conn:ID, name:REGEX).
    pub malloc_focus: Option<String>,
    /// Bytes between allocation samples of a thread.
    pub malloc_every: u64,
}

/// What the run reports as it goes.
pub trait Sink {
    /// A point of the timeline was read.
    fn point(&mut self, _p: &Point) {}
    /// Bytes first touched so far, and charged to a statement.
    fn traced(&mut self, _grown: u64, _charged: u64) {}
    /// Whether to stop early (Ctrl-C).
    fn stop(&mut self) -> bool {
        false
    }
}

/// The timeline's state: the points read so far, and what reads them.
struct Timeline {
    pid: i32,
    proc: report::ProcReader,
    server: Option<server::Reader>,
    points: Vec<Point>,
    notes: Vec<String>,
    sql_failed: bool,
}

impl Timeline {
    /// Read one point at `at` seconds; false when the server is gone.
    fn point(&mut self, at: f64, sql: Option<&mut mysql::Conn>, sink: &mut dyn Sink) -> bool {
        let s = match (self.server.as_mut(), sql) {
            (Some(r), Some(c)) if !self.sql_failed => match r.read(c) {
                Ok(s) => Some(s),
                Err(e) => {
                    self.notes.push(format!("the server's accounting could not be read at {at:.1} s: {e}"));
                    self.sql_failed = true;
                    None
                }
            },
            _ => None,
        };
        let pool_size = s.as_ref().map_or(0, |s| s.pool_size);
        let Some(p) = self.proc.read(at, pool_size, s) else {
            self.notes.push(format!("the server exited at {at:.1} s"));
            return false;
        };
        sink.point(&p);
        self.points.push(p);
        true
    }
}

/// Follow the server's memory for the window; `sql` reads its accounting
/// and, when tracing, which statement each thread runs (none: `/proc`
/// alone, growth charged to stacks and threads).
pub fn run(o: &MemoryOptions, mut sql: Option<SqlSource>, sink: &mut dyn Sink) -> Result<Report, MemoryError> {
    let exe = pileup_engine::process::check_target(o.pid, false)?;
    if o.trace {
        trace::preflight()?;
    }
    let server = match sql.as_mut() {
        Some(s) => Some(server::Reader::new(&mut s.conn)?),
        None => None,
    };
    let mut tl = Timeline {
        pid: o.pid,
        proc: report::ProcReader::new(o.pid),
        server,
        points: vec![],
        notes: vec![],
        sql_failed: false,
    };
    let traced = if o.trace {
        Some(traced_run(o, &mut sql, &mut tl, sink)?)
    } else {
        let t0 = Instant::now();
        loop {
            let at = t0.elapsed().as_secs_f64();
            if !tl.point(at, sql.as_mut().map(|s| &mut s.conn), sink) {
                break;
            }
            if t0.elapsed() + o.interval > o.duration || sink.stop() {
                break;
            }
            std::thread::sleep(o.interval.saturating_sub(Duration::from_secs_f64(t0.elapsed().as_secs_f64() - at)));
        }
        None
    };
    if tl.points.is_empty() {
        return Err(MemoryError::ProcessGone(tl.pid));
    }
    Ok(Report::new(o.pid, exe, tl.points, traced, tl.notes))
}

/// How often the processlist is read while growth arrives: each event is
/// charged to the statement its thread ran, from the reads just before and
/// just after it.
const SQL_EVERY: Duration = Duration::from_millis(250);

/// The window with growth traced: points each interval, events charged as
/// they arrive.
fn traced_run(
    o: &MemoryOptions,
    sql: &mut Option<SqlSource>,
    tl: &mut Timeline,
    sink: &mut dyn Sink,
) -> Result<Traced, MemoryError> {
    let mut resolver = Resolver::new(o.pid, false, false, &pileup_engine::default_debug_dirs())?;
    tl.notes.append(&mut resolver.notes);
    let focus = o
        .malloc_focus
        .as_deref()
        .map(pileup_engine::ThreadFilter::parse)
        .transpose()
        .map_err(|e| MemoryError::Usage(format!("thread selection {e}")))?;
    // Timed before attaching anything: what one probed call costs here.
    let calibration = if focus.is_some() { Some(malloc::calibrate()?) } else { None };
    let mut malloc_storage = std::mem::MaybeUninit::uninit();
    let mut mprobe = match &focus {
        Some(_) => Some(malloc::MallocProbe::attach(&mut malloc_storage, o.pid, o.malloc_every, o.stack_budget)?),
        None => None,
    };
    let mut live = malloc::LiveSet::default();
    let mut alloc_stacks: Vec<Vec<String>> = vec![];
    let mut alloc_stack_ids: std::collections::HashMap<Vec<String>, usize> = Default::default();
    let mut chosen_at: Option<u64> = None;
    let start_ns = pileup_engine::ebpf::monotonic_ns();
    let class_of: Box<dyn Fn(&str) -> String> = Box::new(|q: &str| {
        let mut out = Vec::with_capacity(q.len());
        pileup_sql::fingerprint(q.as_bytes(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    let mut charger = attribute::Charger::new(start_ns, class_of);
    let mut timeline = attribute::SqlTimeline::default();
    let mut pending: Vec<attribute::Unwound> = vec![];
    let mut unwind_stops = std::collections::HashMap::<String, u64>::new();
    let arrived = RefCell::new(Vec::<record::Event>::new());
    let (mut grown, mut charged) = (0u64, 0u64);
    let mut sql_error: Option<String> = None;
    let mut next_point = 0.0f64;
    let topts = trace::TraceOptions { pid: o.pid, stack_budget: o.stack_budget, probe_cost: o.probe_cost };
    let read_sql = |sql: &mut Option<SqlSource>, timeline: &mut attribute::SqlTimeline, err: &mut Option<String>| {
        let Some(s) = sql.as_mut().filter(|_| err.is_none()) else { return };
        let before = pileup_engine::ebpf::monotonic_ns();
        match s.threads() {
            // Stamped at the query's middle: the server read its threads
            // some time between sending and answering.
            Ok(rows) => timeline.push((before + pileup_engine::ebpf::monotonic_ns()) / 2, rows),
            Err(e) => {
                *err = Some(format!(
                    "the processlist could not be read ({e}); growth is charged to stacks and threads only"
                ))
            }
        }
    };
    read_sql(sql, &mut timeline, &mut sql_error);
    let mut charge_ready = |all: bool, pending: &mut Vec<attribute::Unwound>, timeline: &mut attribute::SqlTimeline| {
        let upto = if all { u64::MAX } else { timeline.latest().unwrap_or(0) };
        let n = pending.iter().take_while(|e| e.time_ns <= upto).count();
        for e in pending.drain(..n) {
            let who = if e.release { attribute::Who::default() } else { timeline.who(e.tid, e.time_ns) };
            if e.what.is_fault() {
                grown += e.bytes;
                charged += if who.statement.is_some() { e.bytes } else { 0 };
            }
            charger.charge(e, &who);
        }
        if let Some(first) = pending.first() {
            timeline.forget_before(first.time_ns);
        } else if let Some(l) = timeline.latest() {
            timeline.forget_before(l);
        }
        (grown, charged)
    };
    let on_events = |b: Vec<record::Event>| arrived.borrow_mut().extend(b);
    let mut last_sql = Instant::now();
    let mut gone = false;
    let mut malloc_error: Option<MemoryError> = None;
    let mut on_tick = |el: Duration| {
        unwind_arrived(&arrived, &mut pending, &mut resolver, &mut unwind_stops);
        let want_sql = !pending.is_empty() || mprobe.is_some();
        if want_sql && last_sql.elapsed() >= SQL_EVERY {
            read_sql(sql, &mut timeline, &mut sql_error);
            last_sql = Instant::now();
        }
        if let (Some(p), Some(f)) = (mprobe.as_mut(), &focus) {
            // The chosen threads again after each processlist read
            // (connections come and go).
            if chosen_at != timeline.latest() || chosen_at.is_none() {
                chosen_at = timeline.latest();
                let tids = pileup_engine::process::tids(o.pid).unwrap_or_default();
                let chosen = tids.into_iter().filter(|&t| f.chooses(o.pid, t, timeline.last_seen.get(&t))).collect();
                if let Err(e) = p.watch(chosen) {
                    malloc_error = Some(e);
                    return false;
                }
            }
            for e in p.poll() {
                take_malloc(e, &mut resolver, &mut live, &mut alloc_stacks, &mut alloc_stack_ids);
            }
        }
        // Without SQL every event is charged as it comes.
        let all = sql.is_none() || sql_error.is_some();
        let (g, c) = charge_ready(all, &mut pending, &mut timeline);
        sink.traced(g, c);
        let at = el.as_secs_f64();
        if at >= next_point {
            if !tl.point(at, sql.as_mut().map(|s| &mut s.conn), sink) {
                gone = true;
                return false;
            }
            next_point = at + o.interval.as_secs_f64();
        }
        el < o.duration && !sink.stop()
    };
    let t = trace::trace(&topts, on_events, &mut on_tick)?;
    if let Some(e) = malloc_error {
        return Err(e);
    }
    let end_ns = pileup_engine::ebpf::monotonic_ns();
    let malloc = match (mprobe, calibration) {
        (Some(p), Some(cal)) => {
            let allocator = p.allocator.clone();
            let (last, counters, cost, elapsed) = p.finish(cal);
            for e in last {
                take_malloc(e, &mut resolver, &mut live, &mut alloc_stacks, &mut alloc_stack_ids);
            }
            let (alloc_sampled, held_sampled) = live.totals();
            Some(report::MallocReport {
                allocator,
                focus: o.malloc_focus.clone().unwrap_or_default(),
                every: o.malloc_every,
                counters,
                cost,
                elapsed_s: elapsed.as_secs_f64(),
                alloc_sampled,
                held_sampled,
                stacks: live.by_stack(&alloc_stacks, end_ns, o.top),
            })
        }
        _ => None,
    };
    unwind_arrived(&arrived, &mut pending, &mut resolver, &mut unwind_stops);
    if !gone {
        read_sql(sql, &mut timeline, &mut sql_error);
    }
    charge_ready(true, &mut pending, &mut timeline);
    if let Some(e) = sql_error {
        tl.notes.push(e);
    }
    let mut stops: Vec<(String, u64)> = unwind_stops.into_iter().collect();
    stops.sort_by_key(|s| std::cmp::Reverse(s.1));
    if let Some((why, n)) = stops.first() {
        tl.notes.push(format!("{n} stack(s) end early ({why}); they are marked truncated"));
    }
    let pid = o.pid;
    let role = |tid: i32| {
        let row = timeline.last_seen.get(&tid);
        if let Some(r) = pileup_engine::role_of(pid, tid, row) {
            return r.as_str().to_string();
        }
        match (row, pileup_engine::process::os_thread(pid, tid)) {
            (Some(_), _) => "background (in the processlist)".to_string(),
            (None, Some(t)) => format!("not in the processlist ({})", t.name),
            (None, None) => "threads that exited".to_string(),
        }
    };
    let growth = charger.finish(&t.threads, role, o.top);
    Ok(Traced {
        growth,
        counters: t.counters,
        probe_cost: t.probe_cost,
        stack_budget: o.stack_budget,
        period: t.period,
        elapsed_s: t.elapsed.as_secs_f64(),
        cpu_us: pileup_engine::process::own_cpu_us(),
        malloc,
    })
}

/// One event of the allocation probes: a sample unwound and kept, or a
/// free.
fn take_malloc(
    e: malloc::MallocEvent,
    resolver: &mut Resolver,
    live: &mut malloc::LiveSet,
    stacks: &mut Vec<Vec<String>>,
    ids: &mut std::collections::HashMap<Vec<String>, usize>,
) {
    match e {
        malloc::MallocEvent::Free { addr, .. } => live.free(addr),
        malloc::MallocEvent::Alloc { time_ns, addr, size, weight, regs, .. } => {
            let stack = regs.map(|r| {
                let regs = Regs { ip: r.ip, sp: r.sp, bp: r.bp, orig_ax: -1, ax: 0, di: 0, si: 0, dx: 0 };
                let (addrs, _) = resolver.unwind(&regs, r.sp, &r.stack);
                let frames: Vec<String> = resolver.frames(&addrs).into_iter().map(|f| f.label).collect();
                *ids.entry(frames.clone()).or_insert_with(|| {
                    stacks.push(frames);
                    stacks.len() - 1
                })
            });
            live.alloc(time_ns, addr, weight, size, stack);
        }
    }
}

/// Unwind the events that arrived into `pending`.
fn unwind_arrived(
    arrived: &RefCell<Vec<record::Event>>,
    pending: &mut Vec<attribute::Unwound>,
    resolver: &mut Resolver,
    stops: &mut std::collections::HashMap<String, u64>,
) {
    for e in arrived.borrow_mut().drain(..) {
        pending.push(unwind(e, resolver, stops));
    }
}

/// Unwind and name an event's stack, if it has one.
fn unwind(
    e: record::Event,
    resolver: &mut Resolver,
    stops: &mut std::collections::HashMap<String, u64>,
) -> attribute::Unwound {
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
