//! A process's memory as the kernel shows it: resident memory split into
//! anonymous, file-backed and shared (`/proc/PID/status`), and each mapping
//! with its resident and anonymous bytes (`/proc/PID/smaps`), from which
//! glibc's heaps and the server's large regions are told apart.
//!
//! [`ProcReader`] reads them over a window, walking the mappings when memory
//! moves and at its ends, and [`HeapIdentity`] states what the resident heap
//! did from reads made at the same instants: start + grown − given back =
//! end.

/// Resident and virtual sizes of a process, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Resident {
    pub rss: u64,
    pub anon: u64,
    pub file: u64,
    pub shmem: u64,
    pub swap: u64,
    pub virt: u64,
}

/// `/proc/PID/status`'s memory lines (`VmRSS`, `RssAnon`, `RssFile`,
/// `RssShmem`, `VmSwap`, `VmSize`, in kB).
pub fn parse_status(text: &str) -> Resident {
    let mut r = Resident::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let kb = || rest.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 1024;
        match key {
            "VmRSS" => r.rss = kb(),
            "RssAnon" => r.anon = kb(),
            "RssFile" => r.file = kb(),
            "RssShmem" => r.shmem = kb(),
            "VmSwap" => r.swap = kb(),
            "VmSize" => r.virt = kb(),
            _ => {}
        }
    }
    r
}

/// One mapping of `/proc/PID/smaps`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    /// The file, `[heap]`, `[stack]`, or empty for anonymous memory.
    pub path: String,
    pub rss: u64,
    pub anon: u64,
}

impl Mapping {
    pub fn size(&self) -> u64 {
        self.end - self.start
    }

    fn anonymous(&self) -> bool {
        self.path.is_empty()
    }
}

/// The mappings of `/proc/PID/smaps`, with their `Rss` and `Anonymous`.
pub fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = vec![];
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((a, b)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            if let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                let perms = words.next().unwrap_or("").to_string();
                // offset, device, inode, then the path (which may hold spaces).
                let path = words.skip(3).collect::<Vec<_>>().join(" ");
                out.push(Mapping { start, end, perms, path, rss: 0, anon: 0 });
                continue;
            }
        }
        let kb = || words.clone().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 1024;
        if let Some(m) = out.last_mut() {
            match first {
                "Rss:" => m.rss = kb(),
                "Anonymous:" => m.anon = kb(),
                _ => {}
            }
        }
    }
    out
}

/// glibc reserves each arena's heap as one region of this size, aligned to
/// it (`HEAP_MAX_SIZE` on 64-bit: twice the largest mmap threshold).
pub const ARENA_HEAP: u64 = 64 << 20;

/// Where a process's anonymous memory is, by what holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Regions {
    /// The main arena (`[heap]`, grown by brk), resident bytes.
    pub main_arena: u64,
    /// glibc's other arenas: how many heaps, resident bytes.
    pub arena_heaps: usize,
    pub arenas: u64,
    /// One region named by the caller (the buffer pool: the anonymous
    /// mapping of the size it was given), resident bytes.
    pub named: u64,
    /// Thread stacks (an anonymous region after a guard page), resident.
    pub stacks: u64,
    /// Every other anonymous mapping (large allocations mmapped on their
    /// own, other engines' pools), resident bytes.
    pub other_anon: u64,
}

/// Sort anonymous memory into glibc's heaps, thread stacks, the region of
/// `named_size` bytes (the buffer pool; 0 for none) and the rest.
pub fn regions(maps: &[Mapping], named_size: u64) -> Regions {
    let mut r = Regions::default();
    // The named region: the anonymous mapping of exactly its size (InnoDB
    // maps the buffer pool whole, in pages), else the closest larger one.
    // Caches malloc'd at the same size (Aria's page cache, 128 MiB by
    // default like the pool) are mapped by glibc a page larger.
    let named_at = (named_size > 0)
        .then(|| {
            maps.iter()
                .enumerate()
                .filter(|(_, m)| m.anonymous() && m.perms.starts_with("rw"))
                .filter(|(_, m)| m.size() >= named_size && m.size() - named_size < (64 << 20))
                .min_by_key(|(_, m)| m.size() - named_size)
                .map(|(i, _)| i)
        })
        .flatten();
    for (i, m) in maps.iter().enumerate() {
        if m.path == "[heap]" {
            r.main_arena += m.rss;
            continue;
        }
        if !m.anonymous() || m.perms.starts_with("---") {
            continue;
        }
        let prev = i.checked_sub(1).map(|p| &maps[p]);
        let next = maps.get(i + 1);
        // An arena heap: its usable part then the reserve, 64 MiB in all,
        // starting on a 64 MiB boundary.
        let reserve_end =
            next.filter(|n| n.start == m.end && n.perms.starts_with("---") && n.anonymous()).map(|n| n.end);
        let heap_end = reserve_end.unwrap_or(m.end);
        if m.start % ARENA_HEAP == 0 && heap_end - m.start == ARENA_HEAP {
            r.arena_heaps += 1;
            r.arenas += m.rss;
        } else if prev
            .is_some_and(|p| p.end == m.start && p.perms.starts_with("---") && p.anonymous() && p.size() <= 64 << 10)
        {
            r.stacks += m.rss;
        } else if named_at == Some(i) {
            r.named += m.rss;
        } else {
            r.other_anon += m.rss;
        }
    }
    r
}

/// Resident heap memory: glibc's arenas and the anonymous mappings that
/// are not the named region or a thread's stack (where malloc'd memory
/// lives).
pub fn heap(r: &Regions) -> u64 {
    r.main_arena + r.arenas + r.other_anon
}

/// What one read of the process gave: its resident sizes, always, and its
/// mappings when they were walked at this read (never carried from an
/// earlier one: a figure not read is unknown).
#[derive(Debug, Clone)]
pub struct ProcRead {
    pub resident: Resident,
    pub regions: Option<Regions>,
}

/// Reads a process's memory over a window: `/proc/PID/status` at every
/// read (cheap), `smaps` (a walk of every page table, about 16 ms per
/// resident GiB of kernel time) at the window's first read, when the
/// caller forces it (its last), when memory moved since the last walk
/// (anonymous memory or the server's own accounting by more than
/// [`MOVED`]) within a 5% share of a core, and otherwise within 1%.
pub struct ProcReader {
    pid: i32,
    /// At the last walk: anonymous bytes, the accounting's figure.
    last_walk: Option<(u64, Option<u64>)>,
    /// Seconds into the window before which smaps is not walked again
    /// while memory is still, and while it moves.
    next_still_s: f64,
    next_moving_s: f64,
}

/// How far memory moves before the mappings are walked again, bytes.
pub const MOVED: u64 = 1 << 20;
/// The shares of one core the walks may take, memory still and moving.
const STILL_BUDGET: f64 = 0.01;
const MOVING_BUDGET: f64 = 0.05;

impl ProcReader {
    pub fn new(pid: i32) -> ProcReader {
        ProcReader { pid, last_walk: None, next_still_s: 0.0, next_moving_s: 0.0 }
    }

    /// Read the process at `at_s` seconds into the window; `pool_size`
    /// names the buffer pool's region, `accounted` is the server's own
    /// figure (`Memory_used`) when read. `None` when the process is gone.
    pub fn read(&mut self, at_s: f64, pool_size: u64, accounted: Option<u64>, force: bool) -> Option<ProcRead> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let resident = parse_status(&status);
        // An exiting process (a zombie) has no memory left to show.
        if resident.rss == 0 {
            return None;
        }
        if !self.due(at_s, resident.anon, accounted, force) {
            return Some(ProcRead { resident, regions: None });
        }
        let t = std::time::Instant::now();
        let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", self.pid)).ok()?;
        let took = t.elapsed().as_secs_f64();
        self.next_still_s = at_s + took / STILL_BUDGET;
        self.next_moving_s = at_s + took / MOVING_BUDGET;
        self.last_walk = Some((resident.anon, accounted));
        Some(ProcRead { resident, regions: Some(regions(&parse_smaps(&smaps), pool_size)) })
    }

    /// Whether this read walks the mappings.
    fn due(&self, at_s: f64, anon: u64, accounted: Option<u64>, force: bool) -> bool {
        let Some((anon_then, used_then)) = self.last_walk else { return true };
        let moved = anon.abs_diff(anon_then) >= MOVED
            || matches!((used_then, accounted), (Some(a), Some(b)) if a.abs_diff(b) >= MOVED);
        force || at_s >= self.next_still_s || (moved && at_s >= self.next_moving_s)
    }
}

/// What the resident heap did over a window, from three walks of the
/// mappings: the first, the one where the heap was largest, and the last.
/// `start + grown − given_back = end` holds by construction; what makes it
/// worth printing is that every figure beside it is read from the same
/// walks.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct HeapIdentity {
    pub start_s: f64,
    pub start: u64,
    pub peak_s: f64,
    pub peak: u64,
    pub end_s: f64,
    pub end: u64,
    /// `peak − start` and `peak − end`.
    pub grown: u64,
    pub given_back: u64,
}

impl HeapIdentity {
    /// From the window's reads in order, `(seconds, heap when walked)`;
    /// `None` when no read walked the mappings.
    pub fn of(reads: impl IntoIterator<Item = (f64, Option<u64>)>) -> Option<HeapIdentity> {
        let walked: Vec<(f64, u64)> = reads.into_iter().filter_map(|(at, h)| Some((at, h?))).collect();
        let (&(start_s, start), &(end_s, end)) = (walked.first()?, walked.last()?);
        // The first of equal peaks: when the heap got there.
        let (peak_s, peak) = walked.iter().copied().fold((start_s, start), |m, p| if p.1 > m.1 { p } else { m });
        Some(HeapIdentity { start_s, start, peak_s, peak, end_s, end, grown: peak - start, given_back: peak - end })
    }

    /// The identity in one line: start + grown − given back = end.
    pub fn line(&self) -> String {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / 1048576.0);
        format!(
            "resident heap {} at {:.1} s + {} grown to {} at {:.1} s − {} given back = {} at {:.1} s",
            mib(self.start),
            self.start_s,
            mib(self.grown),
            mib(self.peak),
            self.peak_s,
            mib(self.given_back),
            mib(self.end),
            self.end_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read_in_bytes() {
        let t = "Name:\tmariadbd\nVmSize:\t 1837472 kB\nVmRSS:\t  412336 kB\nRssAnon:\t  301000 kB\nRssFile:\t  111000 kB\nRssShmem:\t     336 kB\nVmSwap:\t       0 kB\n";
        let r = parse_status(t);
        assert_eq!(r.rss, 412336 * 1024);
        assert_eq!((r.anon, r.file, r.shmem), (301000 * 1024, 111000 * 1024, 336 * 1024));
        assert_eq!(r.virt, 1837472 * 1024);
    }

    fn smaps(maps: &[(u64, u64, &str, &str, u64)]) -> String {
        let mut s = String::new();
        for (start, end, perms, path, rss_kb) in maps {
            s.push_str(&format!("{start:x}-{end:x} {perms} 00000000 00:00 0          {path}\n"));
            s.push_str(&format!(
                "Size:           {} kB\nRss:            {rss_kb} kB\nPss:            {rss_kb} kB\n",
                (end - start) / 1024
            ));
            s.push_str(&format!(
                "Anonymous:      {} kB\nVmFlags: rd wr mr mw me ac sd\n",
                if path.is_empty() { *rss_kb } else { 0 }
            ));
        }
        s
    }

    #[test]
    fn arenas_stacks_the_buffer_pool_and_the_rest_are_told_apart() {
        let mib = 1u64 << 20;
        let pool = 128 * mib;
        let text = smaps(&[
            (0x5555_0000_0000, 0x5555_0010_0000, "r-xp", "/usr/sbin/mariadbd", 900),
            (0x5555_0100_0000, 0x5555_0300_0000, "rw-p", "[heap]", 20_000),
            // An arena heap: 8 MiB usable, the rest reserved, on a 64 MiB boundary.
            (0x7f00_0000_0000, 0x7f00_0080_0000, "rw-p", "", 6_000),
            (0x7f00_0080_0000, 0x7f00_0400_0000, "---p", "", 0),
            // A thread stack behind its guard page.
            (0x7f10_0000_0000, 0x7f10_0000_1000, "---p", "", 0),
            (0x7f10_0000_1000, 0x7f10_0004_9000, "rw-p", "", 40),
            // A cache malloc'd at the pool's size: glibc maps it a page larger.
            (0x7f18_0000_0000, 0x7f18_0000_0000 + pool + 4096, "rw-p", "", 3_000),
            // The buffer pool: one anonymous region of exactly its size.
            (0x7f20_0000_0000, 0x7f20_0000_0000 + pool, "rw-p", "", 100_000),
            // A large allocation mapped on its own.
            (0x7f30_0000_0000, 0x7f30_0100_0000, "rw-p", "", 16_384),
        ]);
        let maps = parse_smaps(&text);
        assert_eq!(maps.len(), 9);
        assert_eq!(maps[0].path, "/usr/sbin/mariadbd");
        assert_eq!(maps[2].rss, 6_000 * 1024);
        let r = regions(&maps, pool);
        assert_eq!(r.main_arena, 20_000 * 1024);
        assert_eq!((r.arena_heaps, r.arenas), (1, 6_000 * 1024));
        assert_eq!(r.stacks, 40 * 1024);
        assert_eq!(r.named, 100_000 * 1024);
        assert_eq!(r.other_anon, (16_384 + 3_000) * 1024);
    }

    #[test]
    fn the_heap_identity_uses_walked_reads_only() {
        let reads = [(0.0, Some(100)), (0.5, None), (1.0, Some(700)), (1.5, Some(700)), (2.0, None), (3.0, Some(160))];
        let h = HeapIdentity::of(reads).unwrap();
        assert_eq!((h.start_s, h.start, h.peak_s, h.peak, h.end_s, h.end), (0.0, 100, 1.0, 700, 3.0, 160));
        assert_eq!((h.grown, h.given_back), (600, 540));
        assert_eq!(h.start + h.grown - h.given_back, h.end);
        assert!(HeapIdentity::of([(0.0, None)]).is_none());
        // One walk: nothing grown, nothing given back.
        let one = HeapIdentity::of([(0.0, Some(5))]).unwrap();
        assert_eq!((one.grown, one.given_back, one.end), (0, 0, 5));
    }

    #[test]
    fn the_mappings_are_walked_first_when_forced_and_when_memory_moves() {
        let me = std::process::id() as i32;
        let mut r = ProcReader::new(me);
        assert!(r.read(0.0, 0, None, false).unwrap().regions.is_some(), "the first read walks");
        // Scripted: walked at 0 s with 100 MiB anonymous, 50 MiB accounted;
        // still until 2 s, moving until 0.4 s.
        let mib = 1u64 << 20;
        r.last_walk = Some((100 * mib, Some(50 * mib)));
        (r.next_still_s, r.next_moving_s) = (2.0, 0.4);
        assert!(!r.due(0.25, 100 * mib, Some(50 * mib), false), "still, within the budget");
        assert!(r.due(0.25, 100 * mib, Some(50 * mib), true), "forced");
        assert!(!r.due(0.25, 120 * mib, Some(50 * mib), false), "moved, but the moving budget is spent");
        assert!(r.due(0.5, 120 * mib, Some(50 * mib), false), "anonymous memory moved");
        assert!(r.due(0.5, 100 * mib, Some(80 * mib), false), "the accounting moved");
        assert!(!r.due(0.5, 100 * mib + 4096, Some(50 * mib), false), "a page is not a move");
        assert!(r.due(2.0, 100 * mib, Some(50 * mib), false), "still, the budget allows again");
        // A read that is not walked carries nothing.
        r.last_walk = Some((r.read(3.0, 0, None, true).unwrap().resident.anon, None));
        (r.next_still_s, r.next_moving_s) = (10.0, 10.0);
        assert!(r.read(3.1, 0, None, false).unwrap().regions.is_none());
        assert!(ProcReader::new(i32::MAX).read(0.0, 0, None, true).is_none(), "no such process");
    }
}
