//! One point of the timeline (what `/proc` and the server said at an
//! instant) and the report over the window: where resident memory is, what
//! the server accounts for, and the gap between them.

use std::io::Write;

use serde::Serialize;

use crate::procmem::{parse_smaps, parse_status, regions, Regions, Resident};
use crate::server::ServerMemory;

/// The process and the server at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Seconds into the window.
    pub at_s: f64,
    pub resident: Resident,
    pub regions: Regions,
    /// When `regions` was read (seconds into the window): the mappings are
    /// walked only as often as their cost allows, and carried between.
    pub regions_at_s: f64,
    pub server: Option<ServerMemory>,
}

impl Point {
    /// Heap memory: glibc's arenas and the anonymous mappings that are not
    /// the buffer pool or a thread's stack (where malloc'd memory lives).
    pub fn heap(&self) -> u64 {
        self.regions.main_arena + self.regions.arenas + self.regions.other_anon
    }

    /// Growth of resident heap since `from` that `Memory_used`'s growth
    /// does not explain: memory allocated outside the server's accounting,
    /// and memory it freed that the allocator kept. (Absolute figures do
    /// not compare: `Memory_used` counts bytes allocated whether touched or
    /// not, and large caches count in full from the start.)
    pub fn unexplained_since(&self, from: &Point) -> Option<i64> {
        let (a, b) = (from.server.as_ref()?, self.server.as_ref()?);
        Some((self.heap() as i64 - from.heap() as i64) - (b.memory_used as i64 - a.memory_used as i64))
    }
}

/// Reads the process's memory each interval: `/proc/PID/status` always
/// (cheap), `smaps` (a walk of every page table, about 16 ms per resident
/// GiB of kernel time) only as often as keeps it under 1% of a core.
pub(crate) struct ProcReader {
    pid: i32,
    last: Option<(f64, Regions)>,
    /// Seconds into the window before which smaps is not walked again.
    next_walk_s: f64,
}

/// The share of one core the mappings' walks may take.
const WALK_BUDGET: f64 = 0.01;

impl ProcReader {
    pub(crate) fn new(pid: i32) -> ProcReader {
        ProcReader { pid, last: None, next_walk_s: 0.0 }
    }

    /// One point: `None` when the process is gone.
    pub(crate) fn read(&mut self, at_s: f64, pool_size: u64, server: Option<ServerMemory>) -> Option<Point> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let resident = parse_status(&status);
        // An exiting process (a zombie) has no memory left to show.
        if resident.rss == 0 {
            return None;
        }
        if self.last.is_none() || at_s >= self.next_walk_s {
            let t = std::time::Instant::now();
            let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", self.pid)).ok()?;
            let took = t.elapsed().as_secs_f64();
            self.next_walk_s = at_s + took / WALK_BUDGET;
            self.last = Some((at_s, regions(&parse_smaps(&smaps), pool_size)));
        }
        let (regions_at_s, regions) = self.last.clone()?;
        Some(Point { at_s, resident, regions, regions_at_s, server })
    }
}

/// What the window showed.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pid: i32,
    pub exe: String,
    pub points: Vec<Point>,
    /// Bytes the server freed after its peak (`Memory_used`, peak − end).
    pub freed_by_server: Option<u64>,
    /// Bytes resident heap memory fell by over the same span.
    pub returned_to_kernel: u64,
    /// Freed by the server but still resident: kept by the allocator.
    pub kept_by_allocator: Option<u64>,
    pub notes: Vec<String>,
}

impl Report {
    pub(crate) fn new(pid: i32, exe: String, points: Vec<Point>, notes: Vec<String>) -> Report {
        let end = points.last().expect("at least one point");
        let used = |p: &Point| p.server.as_ref().map(|s| s.memory_used);
        // From the server's peak on: what it freed, and what left the heap.
        let peak = points.iter().filter(|p| p.server.is_some()).max_by_key(|p| used(p));
        let freed_by_server = peak.and_then(|p| Some(used(p)?.saturating_sub(used(end)?)));
        let returned_to_kernel = peak.map_or(0, |p| p.heap().saturating_sub(end.heap()));
        let kept_by_allocator = freed_by_server.map(|f| f.saturating_sub(returned_to_kernel));
        Report { pid, exe, freed_by_server, returned_to_kernel, kept_by_allocator, points, notes }
    }

    fn text(&self, w: &mut dyn Write) -> std::io::Result<()> {
        let (first, last) = (&self.points[0], self.points.last().unwrap());
        let peak = self.points.iter().max_by_key(|p| p.resident.rss).unwrap();
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
        let r = &last.regions;
        writeln!(
            w,
            "  heap: main arena {}, {} more arena heap(s) {}, other anonymous mappings {}; buffer pool {}; thread stacks {}",
            mib(r.main_arena),
            r.arena_heaps,
            mib(r.arenas),
            mib(r.other_anon),
            mib(r.named),
            mib(r.stacks)
        )?;
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
                    mib(r.named),
                    mib(b.pool_size)
                )?;
                if let Some(i) = b.instrumented {
                    writeln!(w, "  performance_schema's memory instruments: {} in use", mib(i))?;
                }
                writeln!(
                    w,
                    "  (Memory_used counts bytes allocated, resident or not: large caches count in full while untouched)"
                )?;
                writeln!(
                    w,
                    "growth the accounting does not explain: {} (resident heap {}, Memory_used {} over the window)",
                    signed_mib(last.unexplained_since(first).unwrap_or(0)),
                    signed_mib(last.heap() as i64 - first.heap() as i64),
                    signed_mib(b.memory_used as i64 - a.memory_used as i64)
                )?;
            }
            _ => writeln!(w, "the server's accounting: not read (no SQL connection)")?,
        }
        if let (Some(freed), Some(kept)) = (self.freed_by_server, self.kept_by_allocator) {
            if freed > (1 << 20) {
                writeln!(
                    w,
                    "kept by the allocator: the server freed {} after its peak, resident heap fell by {}: {} stays resident, kept by glibc's malloc for reuse",
                    mib(freed),
                    mib(self.returned_to_kernel),
                    mib(kept)
                )?;
            }
        }
        if let Some(s) = peak.server.as_ref().filter(|s| !s.connections.is_empty()) {
            writeln!(w, "\nconnections charged most at the peak ({:.1} s), their own accounting:", peak.at_s)?;
            for c in &s.connections {
                let stmt =
                    c.info.as_deref().map(|i| format!(": `{}`", pileup_engine::one_line(i, 100))).unwrap_or_default();
                writeln!(
                    w,
                    "  conn {} {} {} {} (max {}){stmt}",
                    c.id,
                    c.user,
                    c.command,
                    mib(c.bytes),
                    mib(c.max_bytes)
                )?;
            }
        }
        writeln!(
            w,
            "\n{:>8} {:>10} {:>10} {:>10} {:>12} {:>12}",
            "at (s)", "rss", "anon", "heap", "Memory_used", "unexplained"
        )?;
        for p in &self.points {
            let (used, gap) = match &p.server {
                Some(s) => (mib(s.memory_used), signed_mib(p.unexplained_since(first).unwrap_or(0))),
                None => ("–".into(), "–".into()),
            };
            writeln!(
                w,
                "{:>8.1} {:>10} {:>10} {:>10} {:>12} {:>12}",
                p.at_s,
                mib(p.resident.rss),
                mib(p.resident.anon),
                mib(p.heap()),
                used,
                gap
            )?;
        }
        for n in &self.notes {
            writeln!(w, "note: {n}")?;
        }
        Ok(())
    }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at_s: f64, heap_mib: u64, used_mib: u64) -> Point {
        let mib = 1u64 << 20;
        Point {
            at_s,
            resident: Resident { rss: (heap_mib + 50) * mib, anon: heap_mib * mib, ..Default::default() },
            regions: Regions { main_arena: heap_mib * mib, ..Default::default() },
            regions_at_s: at_s,
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
            vec![],
        );
        assert_eq!(r.freed_by_server, Some(800 * mib));
        assert_eq!(r.returned_to_kernel, 100 * mib);
        assert_eq!(r.kept_by_allocator, Some(700 * mib));
        // The heap grew 700 MiB while Memory_used fell 50: 750 unexplained.
        assert_eq!(r.points[2].unexplained_since(&r.points[0]), Some(750 * mib as i64));
        let mut out = vec![];
        r.text(&mut out).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.contains("kept by the allocator: the server freed 800.0 MiB") && t.contains("700.0 MiB stays resident"),
            "{t}"
        );
    }

    #[test]
    fn without_sql_the_report_says_the_accounting_was_not_read() {
        let mut p = point(0.0, 100, 0);
        p.server = None;
        let r = Report::new(1, "mariadbd".into(), vec![p], vec![]);
        assert_eq!(r.kept_by_allocator, None);
        let mut out = vec![];
        r.text(&mut out).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("not read (no SQL connection)"));
    }
}
