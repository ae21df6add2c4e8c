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

mod error;
pub mod malloc;
mod report;
mod server;

use std::time::{Duration, Instant};

use pileup_annotate::SqlSource;
use pileup_engine::Resolver;
use pileup_growth::{GrowthOptions, Tick};

pub use error::MemoryError;
pub use pileup_growth::procmem;
pub use pileup_growth::Growth;
pub use report::{Point, Report, Traced, TracedSoFar};
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
    proc: procmem::ProcReader,
    server: Option<server::Reader>,
    points: Vec<Point>,
    notes: Vec<String>,
    sql_failed: bool,
    /// The last point's time, and when it was read.
    last: Option<(f64, Instant)>,
}

impl Timeline {
    /// Read one point at `at` seconds (the mappings walked when `force`);
    /// false when the server is gone.
    fn point(
        &mut self,
        at: f64,
        sql: Option<&mut mysql::Conn>,
        touched: Option<u64>,
        force: bool,
        sink: &mut dyn Sink,
    ) -> bool {
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
        let Some(r) = self.proc.read(at, pool_size, s.as_ref().map(|s| s.memory_used), force) else {
            self.notes.push(format!("the server exited at {at:.1} s"));
            return false;
        };
        let p = Point { at_s: at, resident: r.resident, regions: r.regions, server: s, touched };
        sink.point(&p);
        self.points.push(p);
        self.last = Some((at, Instant::now()));
        true
    }

    /// End the window on a point whose mappings were walked: the heap's
    /// figures are read at its end, never carried from an earlier walk.
    fn close(&mut self, sql: Option<&mut mysql::Conn>, sink: &mut dyn Sink) {
        if let (Some((at, when)), Some(p)) = (self.last, self.points.last()) {
            if p.regions.is_none() && !self.notes.iter().any(|n| n.contains("exited")) {
                let at = at + when.elapsed().as_secs_f64();
                self.point(at, sql, p.touched, true, sink);
            }
        }
    }
}

/// Follow the server's memory for the window; `sql` reads its accounting
/// and, when tracing, which statement each thread runs (none: `/proc`
/// alone, growth charged to stacks and threads).
pub fn run(o: &MemoryOptions, mut sql: Option<SqlSource>, sink: &mut dyn Sink) -> Result<Report, MemoryError> {
    let exe = pileup_engine::process::check_target(o.pid, false)?;
    if o.trace {
        pileup_growth::preflight()?;
    }
    let server = match sql.as_mut() {
        Some(s) => Some(server::Reader::new(&mut s.conn)?),
        None => None,
    };
    let mut tl = Timeline {
        pid: o.pid,
        proc: procmem::ProcReader::new(o.pid),
        server,
        points: vec![],
        notes: vec![],
        sql_failed: false,
        last: None,
    };
    let traced = if o.trace {
        Some(traced_run(o, &mut sql, &mut tl, sink)?)
    } else {
        let t0 = Instant::now();
        loop {
            let at = t0.elapsed().as_secs_f64();
            let last = t0.elapsed() + o.interval > o.duration;
            if !tl.point(at, sql.as_mut().map(|s| &mut s.conn), None, last, sink) || last || sink.stop() {
                break;
            }
            std::thread::sleep(o.interval.saturating_sub(Duration::from_secs_f64(t0.elapsed().as_secs_f64() - at)));
        }
        None
    };
    if tl.points.is_empty() {
        return Err(MemoryError::ProcessGone(tl.pid));
    }
    tl.close(sql.as_mut().map(|s| &mut s.conn), sink);
    Ok(Report::new(o.pid, exe, tl.points, traced, tl.notes))
}

/// The window with growth traced: points each interval, events charged as
/// they arrive, and with `--focus` the chosen threads' allocations.
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
    let mut allocs = malloc::Allocations::default();
    let mut chosen_at: Option<u64> = None;
    let mut next_point = 0.0f64;
    let mut malloc_error: Option<MemoryError> = None;
    let gopts = GrowthOptions { pid: o.pid, stack_budget: o.stack_budget, probe_cost: o.probe_cost, top: o.top };
    let on_tick = |t: Tick<'_, SqlSource>| {
        if let (Some(p), Some(f)) = (mprobe.as_mut(), &focus) {
            // The chosen threads again after each processlist read
            // (connections come and go).
            if chosen_at.is_none() || chosen_at != t.rows_at {
                chosen_at = t.rows_at;
                let tids = pileup_engine::process::tids(o.pid).unwrap_or_default();
                let chosen = tids.into_iter().filter(|&tid| f.chooses(o.pid, tid, t.rows.get(&tid))).collect();
                if let Err(e) = p.watch(chosen) {
                    malloc_error = Some(e);
                    return false;
                }
            }
            for e in p.poll() {
                allocs.take(e, t.resolver);
            }
        }
        sink.traced(t.grown, t.charged);
        let at = t.elapsed.as_secs_f64();
        if at >= next_point {
            if !tl.point(at, t.sql.map(|s| &mut s.conn), Some(t.grown), false, sink) {
                return false;
            }
            next_point = at + o.interval.as_secs_f64();
        }
        t.elapsed < o.duration && !sink.stop()
    };
    let g = pileup_growth::trace_growth(
        &gopts,
        sql,
        &mut resolver,
        Box::new(pileup_sql::statement_class),
        focus.is_some(),
        on_tick,
    )?;
    if let Some(e) = malloc_error {
        return Err(e);
    }
    if !pileup_engine::process::alive(o.pid) && !tl.notes.iter().any(|n| n.contains("exited")) {
        tl.notes.push(format!("the server exited at {:.1} s", g.elapsed_s));
    }
    let end_ns = pileup_engine::ebpf::monotonic_ns();
    let malloc = match (mprobe, calibration) {
        (Some(p), Some(cal)) => {
            let allocator = p.allocator.clone();
            let (last, counters, cost, elapsed) = p.finish(cal);
            for e in last {
                allocs.take(e, &mut resolver);
            }
            let (alloc_sampled, held_sampled) = allocs.live.totals();
            Some(report::MallocReport {
                allocator,
                focus: o.malloc_focus.clone().unwrap_or_default(),
                every: o.malloc_every,
                counters,
                cost,
                elapsed_s: elapsed.as_secs_f64(),
                alloc_sampled,
                held_sampled,
                stacks: allocs.live.by_stack(&allocs.stacks, end_ns, o.top),
            })
        }
        _ => None,
    };
    tl.notes.extend(g.notes.iter().cloned());
    Ok(Traced { trace: g, cpu_us: pileup_engine::process::own_cpu_us(), malloc })
}
