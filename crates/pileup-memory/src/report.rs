//! One point of the timeline (what `/proc` and the server said at an
//! instant) and the report over the window: where resident memory is, what
//! the server accounts for, and the gap between them.

use std::io::Write;

use serde::Serialize;

use crate::server::ServerMemory;
use pileup_growth::procmem::{HeapIdentity, Regions, Resident, MOVED};
use pileup_growth::GrowthTrace;

/// The process and the server at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Seconds into the window.
    pub at_s: f64,
    pub resident: Resident,
    /// The mappings by what holds them, when they were walked at this point
    /// (as often as their cost allows, when memory moves, and at the
    /// window's ends); never carried from an earlier point.
    pub regions: Option<Regions>,
    pub server: Option<ServerMemory>,
    /// With tracing: bytes first touched since the window began, as charged
    /// so far (sampled weights; the last fraction of a second may come
    /// after the point).
    pub touched: Option<u64>,
}

impl Point {
    /// Resident heap memory (glibc's arenas and the anonymous mappings that
    /// are not the buffer pool or a thread's stack), when walked here.
    pub fn heap(&self) -> Option<u64> {
        self.regions.as_ref().map(pileup_growth::procmem::heap)
    }

    /// Growth of resident heap since `from` that `Memory_used`'s growth
    /// does not explain: memory allocated outside the server's accounting,
    /// and memory it freed that the allocator kept. (Absolute figures do
    /// not compare: `Memory_used` counts bytes allocated whether touched or
    /// not, and large caches count in full from the start.)
    pub fn unexplained_since(&self, from: &Point) -> Option<i64> {
        let (a, b) = (from.server.as_ref()?, self.server.as_ref()?);
        Some((self.heap()? as i64 - from.heap()? as i64) - (b.memory_used as i64 - a.memory_used as i64))
    }
}

/// A point moves the bar to its second of the window, with the RSS beside it.
impl pileup_output::News for Point {
    fn progress(&self) -> pileup_output::Progress {
        pileup_output::Progress::at(self.at_s as u64, None)
            .and_doing(Some(format!("rss {:.0} MiB", self.resident.rss as f64 / 1048576.0)))
    }
}

/// Bytes first touched so far, and how many of them are charged to a
/// statement (a progress line while growth is traced).
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "event", rename = "traced")]
pub struct TracedSoFar {
    pub grown: u64,
    pub charged: u64,
}

impl pileup_output::News for TracedSoFar {
    fn progress(&self) -> pileup_output::Progress {
        let mib = |b: u64| b as f64 / 1048576.0;
        pileup_output::Progress::doing(format!(
            "grown {:.0} MiB, {:.0} MiB charged to statements",
            mib(self.grown),
            mib(self.charged)
        ))
    }
}

/// What the window showed.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pid: i32,
    pub exe: String,
    pub points: Vec<Point>,
    /// What the resident heap did: start + grown − given back = end, from
    /// the walks of the mappings at the window's first and last points and
    /// where the heap peaked. `None` when the mappings could not be read.
    pub heap: Option<HeapIdentity>,
    /// The heap's change over the window less `Memory_used`'s: the part of
    /// `heap.end − heap.start` the server's accounting does not explain.
    pub unexplained: Option<i64>,
    /// Bytes the server freed after its peak (`Memory_used`, peak − end).
    pub freed_by_server: Option<u64>,
    /// Bytes the resident heap gave back from its peak to the end
    /// (`heap.given_back`).
    pub returned_to_kernel: Option<u64>,
    /// Freed by the server but still resident: kept by the allocator.
    pub kept_by_allocator: Option<u64>,
    /// Growth traced with eBPF, charged to stacks, statements, threads.
    pub traced: Option<Traced>,
    pub notes: Vec<String>,
}

/// What tracing found, and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct Traced {
    #[serde(flatten)]
    pub trace: GrowthTrace,
    /// pileup's own CPU time over the run, microseconds.
    pub cpu_us: u64,
    /// With `--focus`: the chosen threads' allocations, sampled.
    pub malloc: Option<MallocReport>,
}

/// The chosen threads' allocations, sampled by bytes with uprobes.
#[derive(Debug, Clone, Serialize)]
pub struct MallocReport {
    /// The allocator probed (its file name).
    pub allocator: String,
    /// The thread selection, as given.
    pub focus: String,
    /// Bytes between a thread's samples.
    pub every: u64,
    pub counters: crate::malloc::MallocCounters,
    /// What the probes cost the server's threads.
    pub cost: crate::malloc::MallocCost,
    pub elapsed_s: f64,
    /// Sampled bytes allocated, and still held at the end.
    pub alloc_sampled: u64,
    pub held_sampled: u64,
    /// By stack, most still held first.
    pub stacks: Vec<crate::malloc::AllocStack>,
}

impl Report {
    pub(crate) fn new(pid: i32, exe: String, points: Vec<Point>, traced: Option<Traced>, notes: Vec<String>) -> Report {
        let end = points.last().expect("at least one point");
        let heap = HeapIdentity::of(points.iter().map(|p| (p.at_s, p.heap())));
        let at = |s: f64| points.iter().find(|p| p.at_s == s);
        let unexplained = heap.and_then(|h| at(h.end_s)?.unexplained_since(at(h.start_s)?));
        let used = |p: &Point| p.server.as_ref().map(|s| s.memory_used);
        // From the server's peak on: what it freed.
        let peak_at = points.iter().enumerate().filter(|(_, p)| p.server.is_some()).max_by_key(|(_, p)| used(p));
        let freed_by_server = peak_at.and_then(|(_, p)| Some(used(p)?.saturating_sub(used(end)?)));
        let kept_by_allocator = match (freed_by_server, heap, peak_at) {
            (Some(freed), Some(h), Some((i, peak))) => {
                // What the server freed could be resident only as far as
                // the heap grew while the server allocated it: from the
                // walked point where Memory_used was lowest before its
                // peak. With no such point in the window, the heap's peak.
                let base = points[..i]
                    .iter()
                    .filter(|p| p.heap().is_some() && used(p).is_some_and(|u| u + MOVED <= used(peak).unwrap_or(0)))
                    .min_by_key(|p| used(p));
                let could_be_resident = h.peak.saturating_sub(base.and_then(Point::heap).unwrap_or(0));
                let kept = match &traced {
                    // Traced: less the address space given back since the
                    // peak (a large allocation is unmapped whole when freed,
                    // touched or not: none of it can be kept).
                    Some(t) => {
                        let from = peak.at_s.floor() as usize;
                        let released: u64 = t.trace.growth.released_per_second.iter().skip(from).sum();
                        freed.saturating_sub(released).min(could_be_resident.saturating_sub(h.given_back))
                    }
                    // Untraced: less what the resident heap gave back.
                    None => freed.min(could_be_resident).saturating_sub(h.given_back),
                };
                Some(kept.min(h.end))
            }
            _ => None,
        };
        Report {
            pid,
            exe,
            heap,
            unexplained,
            freed_by_server,
            returned_to_kernel: heap.map(|h| h.given_back),
            kept_by_allocator,
            points,
            traced,
            notes,
        }
    }

    /// Whether the report's figures agree with each other and with its
    /// points: RSS is its parts at every point, the heap identity is read
    /// from the points it names, the unexplained growth is the heap's
    /// change less `Memory_used`'s, and nothing is kept that was not freed
    /// or is not resident. The first disagreement, when there is one.
    pub fn check_identity(&self) -> Result<(), String> {
        for p in &self.points {
            let r = &p.resident;
            if r.rss != r.anon + r.file + r.shmem {
                return Err(format!("at {:.1} s RSS {} is not anon + file + shmem {:?}", p.at_s, r.rss, r));
            }
        }
        let Some(h) = self.heap else {
            return match self.points.iter().any(|p| p.regions.is_some()) {
                true => Err("the mappings were walked but the report has no heap identity".into()),
                false => Ok(()),
            };
        };
        let heap_at = |s: f64| self.points.iter().find(|p| p.at_s == s).and_then(Point::heap);
        if heap_at(h.start_s) != Some(h.start) || heap_at(h.peak_s) != Some(h.peak) || heap_at(h.end_s) != Some(h.end) {
            return Err(format!("the heap identity {h:?} is not read from the points it names"));
        }
        if self.points.iter().filter_map(Point::heap).any(|x| x > h.peak) || h.start + h.grown - h.given_back != h.end {
            return Err(format!("the heap identity {h:?} does not hold"));
        }
        if self.returned_to_kernel != Some(h.given_back) {
            return Err(format!(
                "returned to the kernel {:?}, the heap gave back {}",
                self.returned_to_kernel, h.given_back
            ));
        }
        let used = |s: f64| self.points.iter().find(|p| p.at_s == s)?.server.as_ref().map(|x| x.memory_used as i64);
        let expect = used(h.start_s).zip(used(h.end_s)).map(|(a, b)| (h.end as i64 - h.start as i64) - (b - a));
        if self.unexplained != expect {
            return Err(format!(
                "not explained {:?}, the heap's change less Memory_used's is {expect:?}",
                self.unexplained
            ));
        }
        if let Some(k) = self.kept_by_allocator {
            if Some(k) > self.freed_by_server || k > h.end {
                return Err(format!("kept {k} of {:?} freed, with {} resident heap", self.freed_by_server, h.end));
            }
        }
        Ok(())
    }

    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let (first, last) = (&self.points[0], self.points.last().unwrap());
        let peak = self.points.iter().max_by_key(|p| p.resident.rss).unwrap();
        self.text_resident(w, first, last, peak)?;
        self.text_accounting(w, first, last)?;
        self.text_freed(w)?;
        if let Some(t) = &self.traced {
            t.text(w)?;
        }
        text_peak_connections(w, peak)?;
        self.text_points(w, first)?;
        for n in &self.notes {
            writeln!(w, "note: {n}")?;
        }
        Ok(())
    }

    /// The window, resident memory from first to last point and at the
    /// peak, and the heap's parts at the end.
    fn text_resident(&self, w: &mut dyn Write, first: &Point, last: &Point, peak: &Point) -> std::io::Result<()> {
        writeln!(w, "pileup memory: {} pid {}, {:.1} s, {} points", self.exe, self.pid, last.at_s, self.points.len())?;
        writeln!(
            w,
            "resident: {} → {} (peak {} at {:.1} s); at the end {} anonymous, {} file-backed, {} shared",
            mib(first.resident.rss),
            mib(last.resident.rss),
            mib(peak.resident.rss),
            peak.at_s,
            mib(last.resident.anon),
            mib(last.resident.file),
            mib(last.resident.shmem)
        )?;
        match self.points.iter().rev().find(|p| p.regions.is_some()) {
            Some(p) => {
                let r = p.regions.as_ref().expect("walked");
                writeln!(
                    w,
                    "  at {:.1} s: heap {} (main arena {}, {} {}, other anonymous mappings {}); buffer pool {}; thread stacks {}",
                    p.at_s,
                    mib(pileup_growth::procmem::heap(r)),
                    mib(r.main_arena),
                    pileup_output::plural(r.arena_heaps, "more arena heap", "more arena heaps"),
                    mib(r.arenas),
                    mib(r.other_anon),
                    mib(r.named),
                    mib(r.stacks)
                )
            }
            None => writeln!(w, "  the process's mappings could not be read: its heap is unknown"),
        }
    }

    /// The server's own accounting (`Memory_used`), and the growth it does
    /// not explain.
    fn text_accounting(&self, w: &mut dyn Write, first: &Point, last: &Point) -> std::io::Result<()> {
        let pool = match self.points.iter().rev().find_map(|p| p.regions.as_ref()) {
            Some(r) => mib(r.named),
            None => "unknown".into(),
        };
        match (&first.server, &last.server) {
            (Some(a), Some(b)) => {
                let max =
                    self.points.iter().filter_map(|p| p.server.as_ref()).map(|s| s.memory_used).max().unwrap_or(0);
                writeln!(
                    w,
                    "the server's accounting: Memory_used {} → {} (peak {}); buffer pool {} of {} resident",
                    mib(a.memory_used),
                    mib(b.memory_used),
                    mib(max),
                    pool,
                    mib(b.pool_size)
                )?;
                if let Some(i) = b.instrumented {
                    writeln!(w, "  performance_schema's memory instruments: {} in use", mib(i))?;
                }
                writeln!(
                    w,
                    "  (Memory_used counts bytes allocated, resident or not: large caches count in full while untouched)"
                )?;
            }
            _ => writeln!(w, "the server's accounting: not read (no SQL connection)")?,
        }
        self.text_identity(w, first, last)
    }

    /// The identity: the heap from its first walk through its peak to its
    /// last, its change split into `Memory_used`'s and the rest, and RSS
    /// into its parts.
    fn text_identity(&self, w: &mut dyn Write, first: &Point, last: &Point) -> std::io::Result<()> {
        let Some(h) = self.heap else {
            return writeln!(w, "resident heap: unknown (the process's mappings could not be read)");
        };
        writeln!(w, "{}", h.line())?;
        let change = h.end as i64 - h.start as i64;
        match (self.unexplained, &first.server, &last.server) {
            (Some(u), Some(a), Some(b)) => writeln!(
                w,
                "  its change {} = Memory_used {} + not explained by the accounting {}",
                signed_mib(change),
                signed_mib(b.memory_used as i64 - a.memory_used as i64),
                signed_mib(u)
            )?,
            _ => writeln!(w, "  its change {}; not explained by the accounting: unknown", signed_mib(change))?,
        }
        let r = &last.resident;
        writeln!(
            w,
            "  resident at the end {} = {} anonymous + {} file-backed + {} shared",
            mib(r.rss),
            mib(r.anon),
            mib(r.file),
            mib(r.shmem)
        )
    }

    /// What the server freed after its peak, and whether the allocator
    /// kept it or gave it back.
    fn text_freed(&self, w: &mut dyn Write) -> std::io::Result<()> {
        if let (Some(freed), Some(kept), Some(back)) =
            (self.freed_by_server, self.kept_by_allocator, self.returned_to_kernel)
        {
            if freed > (1 << 20) {
                if kept > (1 << 20) {
                    writeln!(
                        w,
                        "kept by the allocator: the server freed {} after its peak, the resident heap gave back {}: {} stays resident, kept by glibc's malloc for reuse",
                        mib(freed),
                        mib(back),
                        mib(kept)
                    )?;
                } else {
                    writeln!(
                        w,
                        "the server freed {} after its peak, and the allocator kept {} of it resident (the resident heap gave back {})",
                        mib(freed),
                        mib(kept),
                        mib(back)
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The table of points: resident, heap, `Memory_used`, the unexplained
    /// growth and the pages first touched since the previous point.
    fn text_points(&self, w: &mut dyn Write, first: &Point) -> std::io::Result<()> {
        writeln!(
            w,
            "\n{:>8} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
            "at (s)", "rss", "anon", "heap", "Memory_used", "unexplained", "touched"
        )?;
        let mut prev_touched = 0;
        for p in &self.points {
            let used = p.server.as_ref().map_or("–".into(), |s| mib(s.memory_used));
            let gap = p.unexplained_since(first).map_or("–".into(), signed_mib);
            // Pages first touched since the previous point (traced).
            let touched = match p.touched {
                Some(t) => {
                    let d = t.saturating_sub(prev_touched);
                    prev_touched = t;
                    format!("+{}", mib(d))
                }
                None => "–".into(),
            };
            writeln!(
                w,
                "{:>8.1} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
                p.at_s,
                mib(p.resident.rss),
                mib(p.resident.anon),
                p.heap().map_or("–".into(), mib),
                used,
                gap,
                touched
            )?;
        }
        Ok(())
    }
}

/// The connections charged most at the peak, by their own accounting.
fn text_peak_connections(w: &mut dyn Write, peak: &Point) -> std::io::Result<()> {
    if let Some(s) = peak.server.as_ref().filter(|s| !s.connections.is_empty()) {
        writeln!(w, "\nconnections charged most at the peak ({:.1} s), their own accounting:", peak.at_s)?;
        for c in &s.connections {
            let stmt =
                c.info.as_deref().map(|i| format!(": `{}`", pileup_engine::one_line(i, 100))).unwrap_or_default();
            writeln!(w, "  conn {} {} {} {} (max {}){stmt}", c.id, c.user, c.command, mib(c.bytes), mib(c.max_bytes))?;
        }
    }
    Ok(())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

fn signed_mib(b: i64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

impl pileup_output::Report for Report {
    fn tool(&self) -> &'static str {
        "memory"
    }

    fn text(&self, _o: &pileup_output::Options, w: &mut dyn Write) -> std::io::Result<()> {
        Report::text(self, w)
    }

    /// The sampled stacks weighted by bytes: `alloc_space` (first touched)
    /// and `inuse_space` (still held at the end), pprof's heap profile
    /// sample types.
    fn stacks(&self, _o: &pileup_output::Options) -> Option<pileup_output::Stacks> {
        let t = self.traced.as_ref()?;
        if let Some(m) = t.malloc.as_ref().filter(|m| !m.stacks.is_empty()) {
            return Some(self.malloc_stacks(m, t.trace.elapsed_s));
        }
        pileup_growth::growth_stacks(&t.trace, format!("Memory growth of {} (pid {})", self.exe, self.pid))
    }
}

impl Report {
    /// The chosen threads' sampled allocations: pprof's heap profile
    /// (alloc_objects, alloc_space, inuse_objects, inuse_space).
    fn malloc_stacks(&self, m: &MallocReport, elapsed_s: f64) -> pileup_output::Stacks {
        let stacks = m
            .stacks
            .iter()
            .map(|s| pileup_output::Stack {
                frames: s.frames.iter().rev().cloned().collect(),
                values: vec![
                    s.alloc_space as i64,
                    s.inuse_space as i64,
                    s.alloc_objects as i64,
                    s.inuse_objects as i64,
                ],
                labels: vec![],
                num_labels: vec![],
            })
            .collect();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        pileup_output::Stacks {
            title: format!("Allocations of {} (pid {}), --focus {}", self.exe, self.pid, m.focus),
            subtitle: format!(
                "sampled every {} of requests, {:.1} s; widths are bytes allocated",
                human(m.every),
                elapsed_s
            ),
            sample_types: vec![
                ("alloc_space".into(), "bytes".into()),
                ("inuse_space".into(), "bytes".into()),
                ("alloc_objects".into(), "count".into()),
                ("inuse_objects".into(), "count".into()),
            ],
            count_name: "bytes".into(),
            stacks,
            start_unix_ms: now_ms.saturating_sub((elapsed_s * 1000.0) as u64),
            duration_ms: (elapsed_s * 1000.0) as u64,
            comment: "pileup memory --focus: allocations sampled by bytes with uprobes".into(),
        }
    }
}

/// Bytes in the unit that reads best.
fn human(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

fn pct(part: u64, of: u64) -> String {
    if of == 0 {
        "–".into()
    } else {
        format!("{:.0}%", part as f64 * 100.0 / of as f64)
    }
}

/// A stack in one line, leaf first: the first named frames.
fn stack_line(frames: &[String], max: usize) -> String {
    let mut out: Vec<&str> = frames.iter().map(String::as_str).take(max).collect();
    if frames.len() > max {
        out.push("…");
    }
    out.join(" ← ")
}

impl MallocReport {
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let c = &self.counters;
        writeln!(
            w,
            "\nallocations of the threads chosen by --focus {} ({}, a sample every {} of a thread's requests):",
            self.focus,
            self.allocator,
            human(self.every)
        )?;
        writeln!(
            w,
            "  {} calls asked for {}; sampled {} ({} with a stack): {} allocated, {} still held at the end",
            c.calls,
            human(c.bytes),
            c.sampled,
            c.with_stack,
            human(self.alloc_sampled),
            human(self.held_sampled)
        )?;
        for s in &self.stacks {
            let age = s.oldest_live_s.map(|a| format!(", the oldest live for {a:.1} s")).unwrap_or_default();
            writeln!(
                w,
                "  held {:>10} of {:>10} allocated (~{} of {} objects{age}): {}",
                human(s.inuse_space),
                human(s.alloc_space),
                s.inuse_objects,
                s.alloc_objects,
                stack_line(&s.frames, 10)
            )?;
        }
        let k = &self.cost;
        writeln!(
            w,
            "  probe cost: {} allocation and {} free calls probed on every thread of the server ({:.1} and {:.1} µs each, timed here): {:.2} CPU-s of the server's threads, {:.1}% of one core over {:.1} s",
            k.alloc_calls,
            k.free_calls,
            k.alloc_call_ns / 1000.0,
            k.free_call_ns / 1000.0,
            k.server_cpu_s,
            k.server_cpu_s * 100.0 / self.elapsed_s.max(1e-9),
            self.elapsed_s
        )?;
        if c.ring_full > 0 || c.live_full > 0 {
            writeln!(
                w,
                "  {} samples lost (pileup fell behind), {} past the table of live allocations",
                c.ring_full, c.live_full
            )?;
        }
        Ok(())
    }
}

impl Traced {
    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let g = &self.trace.growth;
        let touched = g.totals.anon_bytes + g.totals.file_bytes;
        writeln!(
            w,
            "\ngrowth traced ({:.1} s): {} of pages first touched ({} anonymous, {} file-backed); address space {} grown, {} given back",
            self.trace.elapsed_s,
            human(touched),
            human(g.totals.anon_bytes),
            human(g.totals.file_bytes),
            human(g.totals.mapped),
            human(g.totals.released)
        )?;
        if touched == 0 {
            writeln!(w, "  no page was first touched in the window: the server did not grow")?;
            return Ok(());
        }
        let sampled: u64 = g.per_second.iter().sum();
        writeln!(
            w,
            "  sampled: {} with a stack ({}), {} charged to a statement ({}); of the sampled growth {} was given back by the end, {} is still held",
            human(g.with_stack),
            pct(g.with_stack, touched),
            human(g.with_statement),
            pct(g.with_statement, touched),
            human(g.given_back),
            human(sampled.saturating_sub(g.given_back))
        )?;
        if g.between_statements > g.with_statement / 10 {
            writeln!(
                w,
                "  {} of it was charged between two reads of the processlist that named different statements: to the nearer, or to the one still running (a statement shorter than the time between reads can run unseen)",
                human(g.between_statements)
            )?;
        }
        self.text_tops(w, touched)?;
        writeln!(w, "\nthreads by kind (exact counts):")?;
        for r in &g.by_role {
            writeln!(
                w,
                "  {:<28} {:>12}: {} first touched, {} mapped, {} given back",
                r.role,
                pileup_output::plural(r.threads, "thread", "threads"),
                human(r.counts.anon_bytes + r.counts.file_bytes),
                human(r.counts.mapped),
                human(r.counts.released)
            )?;
        }
        if !g.mapped_by_stack.is_empty() {
            writeln!(w, "\naddress space grown, by stack:")?;
            for m in g.mapped_by_stack.iter().take(5) {
                writeln!(w, "  {:>10} {} × {}: {}", human(m.bytes), m.calls, m.what.name(), stack_line(&m.frames, 8))?;
            }
        }
        if let Some(m) = &self.malloc {
            m.text(w)?;
        }
        self.text_cost(w)?;
        Ok(())
    }

    /// The top statements, stacks and connections by growth.
    fn text_tops(&self, w: &mut dyn Write, touched: u64) -> std::io::Result<()> {
        let g = &self.trace.growth;
        if !g.by_statement.is_empty() {
            writeln!(w, "\ntop statements by growth (share of pages first touched):")?;
            for s in &g.by_statement {
                let conns: Vec<String> = s.connections.iter().take(5).map(|c| c.to_string()).collect();
                writeln!(
                    w,
                    "  {:>4} {:>10} (held {}) conn {}: `{}`",
                    pct(s.grown, touched),
                    human(s.grown),
                    human(s.held),
                    conns.join(","),
                    s.example
                )?;
                if !s.top_stack.is_empty() {
                    writeln!(w, "         through {}", stack_line(&s.top_stack, 8))?;
                }
            }
        }
        if !g.by_stack.is_empty() {
            writeln!(w, "\ntop stacks by growth (share of the {} sampled with a stack):", human(g.with_stack))?;
            for s in &g.by_stack {
                let cut = if s.truncated { " (truncated)" } else { "" };
                writeln!(
                    w,
                    "  {:>4} {:>10} (held {}, {} samples){cut} {}",
                    pct(s.grown, g.with_stack),
                    human(s.grown),
                    human(s.held),
                    s.samples,
                    stack_line(&s.frames, 10)
                )?;
            }
        }
        if !g.by_connection.is_empty() {
            writeln!(w, "\nconnections by growth:")?;
            for c in &g.by_connection {
                writeln!(
                    w,
                    "  {:>4} {:>10} (held {}) conn {} {}@{}",
                    pct(c.grown, touched),
                    human(c.grown),
                    human(c.held),
                    c.id,
                    c.user,
                    c.host
                )?;
            }
        }
        Ok(())
    }

    /// What the trace kept and lost, and what it cost pileup and the server.
    fn text_cost(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let c = &self.trace.counters;
        write!(
            w,
            "\ntrace: {} stacks (budget {}/s, a sample per {} at the end), {} over the budget sent without a stack",
            c.stacks,
            self.trace.stack_budget,
            human(self.trace.period),
            c.over_budget
        )?;
        if c.ring_full > 0 {
            write!(w, ", {} lost (pileup fell behind)", c.ring_full)?;
        }
        writeln!(w, "; pileup used {:.2} CPU-s", self.cpu_us as f64 / 1e6)?;
        if let Some(p) = self.trace.probe_cost {
            writeln!(
                w,
                "probe cost: {} runs, {:.3} CPU-s in the kernel ({:.2}% of one core)",
                p.runs,
                p.run_ns as f64 / 1e9,
                p.run_ns as f64 / 1e9 * 100.0 / self.trace.elapsed_s.max(1e-9)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at_s: f64, heap_mib: u64, used_mib: u64) -> Point {
        let mib = 1u64 << 20;
        Point {
            at_s,
            resident: Resident {
                rss: (heap_mib + 50) * mib,
                anon: heap_mib * mib,
                file: 50 * mib,
                ..Default::default()
            },
            regions: Some(Regions { main_arena: heap_mib * mib, ..Default::default() }),
            touched: None,
            server: Some(ServerMemory {
                memory_used: used_mib * mib,
                pool_size: 128 * mib,
                connections: vec![],
                instrumented: None,
            }),
        }
    }

    #[test]
    fn memory_the_server_freed_but_the_heap_kept_is_kept_by_the_allocator() {
        let mib = 1u64 << 20;
        // The server grows to 900 MiB of its own, frees 800, and the heap
        // gives back only 100.
        let r = Report::new(
            1,
            "mariadbd".into(),
            vec![point(0.0, 200, 150), point(1.0, 1000, 900), point(2.0, 900, 100)],
            None,
            vec![],
        );
        assert_eq!(r.freed_by_server, Some(800 * mib));
        assert_eq!(r.returned_to_kernel, Some(100 * mib));
        assert_eq!(r.kept_by_allocator, Some(700 * mib));
        // The heap grew 700 MiB while Memory_used fell 50: 750 unexplained.
        assert_eq!(r.points[2].unexplained_since(&r.points[0]), Some(750 * mib as i64));
        assert_eq!(r.unexplained, Some(750 * mib as i64));
        r.check_identity().unwrap();
        let mut out = vec![];
        r.text(&mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("kept by the allocator: the server freed 800.0 MiB") && t.contains("700.0 MiB stays resident"),
            "{t}"
        );
    }

    #[test]
    fn what_was_resident_before_the_statement_is_never_called_kept() {
        let mib = 1u64 << 20;
        // A statement allocates 640 MiB by the server's accounting but the
        // heap grows only 32 MiB (large allocations mapped and unmapped
        // whole); after it the heap is 19 MiB above where it began.
        let mut between = point(1.0, 170, 500);
        between.regions = None;
        let r = Report::new(
            1,
            "mariadbd".into(),
            vec![point(0.0, 148, 100), between, point(2.0, 180, 740), point(3.0, 167, 100)],
            None,
            vec![],
        );
        assert_eq!(r.freed_by_server, Some(640 * mib));
        let h = r.heap.unwrap();
        assert_eq!(
            (h.start, h.peak, h.end, h.grown, h.given_back),
            (148 * mib, 180 * mib, 167 * mib, 32 * mib, 13 * mib)
        );
        assert_eq!(r.kept_by_allocator, Some(19 * mib), "at most what the heap grew while the server allocated");
        assert_eq!(r.unexplained, Some(19 * mib as i64));
        r.check_identity().unwrap();
        let mut out = vec![];
        r.text(&mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("resident heap 148.0 MiB at 0.0 s + 32.0 MiB grown to 180.0 MiB at 2.0 s − 13.0 MiB given back = 167.0 MiB at 3.0 s"),
            "{t}"
        );
        assert!(
            t.contains("its change 19.0 MiB = Memory_used 0.0 MiB + not explained by the accounting 19.0 MiB"),
            "{t}"
        );
        assert!(t.contains("19.0 MiB stays resident"), "{t}");
        // The point whose mappings were not walked shows no heap.
        let row = t.lines().find(|l| l.trim_start().starts_with("1.0 ")).unwrap();
        assert_eq!(row.split_whitespace().filter(|w| *w == "–").count(), 3, "heap, unexplained, touched: {row}");
        // The checker catches a figure that disagrees.
        let mut bad = r.clone();
        bad.returned_to_kernel = Some(0);
        assert!(bad.check_identity().is_err());
        let mut bad = r.clone();
        bad.points[3].resident.file += 4096;
        assert!(bad.check_identity().unwrap_err().contains("RSS"));
        let mut bad = r;
        bad.unexplained = Some(0);
        assert!(bad.check_identity().is_err());
    }

    #[test]
    fn without_sql_the_report_says_the_accounting_was_not_read() {
        let mut p = point(0.0, 100, 0);
        p.server = None;
        let r = Report::new(1, "mariadbd".into(), vec![p], None, vec![]);
        assert_eq!(r.kept_by_allocator, None);
        let mut out = vec![];
        r.text(&mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("not read (no SQL connection)"));
    }
}
