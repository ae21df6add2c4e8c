//! The storage side of the period: what the device holding the server's
//! datadir did (/proc/diskstats) and how much the applier threads read from
//! and wrote to storage themselves (/proc/PID/task/TID/io).
//!
//! On an I/O-bound replica the applier's page reads are only as fast as
//! the device answers, and the device is shared with the replica's own
//! writes (page flushes, doublewrite, redo): a read that takes 50 µs on an
//! idle device takes several times that while the replica flushes. The
//! stack samples say the applier waits for reads; these numbers say why the
//! reads are slow and how many there were.
//!
//! Linux only, and only for a server on this host whose files pileup may
//! stat (it already ptraces the server, so it may).

use std::collections::HashMap;

use serde::Serialize;

/// Cumulative counters of one block device (a line of /proc/diskstats).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct DiskCounters {
    pub reads: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_sectors: u64,
    /// Time the device had I/O in flight.
    pub busy_ms: u64,
}

/// Parse the /proc/diskstats line of device `major:minor`: (name, counters).
pub fn parse_diskstats(text: &str, major: u32, minor: u32) -> Option<(String, DiskCounters)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 14 || f[0].parse::<u32>().ok()? != major || f[1].parse::<u32>().ok()? != minor {
            return None;
        }
        let g = |i: usize| f[i].parse::<u64>().unwrap_or(0);
        Some((
            f[2].to_string(),
            DiskCounters { reads: g(3), read_ms: g(6), writes: g(7), write_sectors: g(9), busy_ms: g(12) },
        ))
    })
}

/// The device holding `path` (as the server `pid` sees it) and its counters
/// now. None for a filesystem without a block device (tmpfs, overlay on
/// some hosts) or a path pileup cannot stat.
pub fn device_of(pid: i32, path: &str) -> Option<(String, DiskCounters)> {
    use std::os::unix::fs::MetadataExt;
    // Through the server's root, so a server in a container resolves its
    // own path.
    let inside = format!("/proc/{pid}/root{path}");
    let meta = std::fs::metadata(&inside).or_else(|_| std::fs::metadata(path)).ok()?;
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    parse_diskstats(&std::fs::read_to_string("/proc/diskstats").ok()?, major, minor)
}

/// Storage I/O a thread has caused (/proc/PID/task/TID/io): `read_bytes`
/// (pages it read, with O_DIRECT every one) and `write_bytes` (what it
/// wrote itself: for an InnoDB thread, pages it had to flush, or log
/// writes it made as the group-commit leader).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadIo {
    pub read: u64,
    pub write: u64,
}

/// Storage I/O of each thread of `pid`, by thread id.
pub fn thread_io(pid: i32) -> HashMap<i32, ThreadIo> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Some(b) = std::fs::read_to_string(e.path().join("io")).ok().as_deref().and_then(thread_io_of) {
            out.insert(tid, b);
        }
    }
    out
}

/// Storage I/O of one thread of `pid` (None: it has exited, or pileup may
/// not read it).
pub fn task_io(pid: i32, tid: i32) -> Option<ThreadIo> {
    thread_io_of(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/io")).ok()?)
}

fn thread_io_of(io: &str) -> Option<ThreadIo> {
    let field = |k: &str| io.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse().ok());
    Some(ThreadIo { read: field("read_bytes:")?, write: field("write_bytes:")? })
}

/// The device over the period.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceReport {
    pub device: String,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    pub mb_written_per_s: f64,
    /// Mean time a read spent at the device, queueing included.
    pub mean_read_us: f64,
    /// Share of the period the device had I/O in flight (0..1).
    pub busy: f64,
}

impl DeviceReport {
    pub fn between(device: &str, a: &DiskCounters, b: &DiskCounters, seconds: f64) -> DeviceReport {
        let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
        let reads = d(a.reads, b.reads);
        let secs = seconds.max(1e-9);
        DeviceReport {
            device: device.to_string(),
            reads_per_s: reads / secs,
            writes_per_s: d(a.writes, b.writes) / secs,
            mb_written_per_s: d(a.write_sectors, b.write_sectors) * 512.0 / 1e6 / secs,
            mean_read_us: if reads > 0.0 { 1000.0 * d(a.read_ms, b.read_ms) / reads } else { 0.0 },
            busy: (d(a.busy_ms, b.busy_ms) / 1000.0 / secs).min(1.0),
        }
    }
}

/// Storage I/O of the threads `tids` between two snapshots (a thread
/// born in between counts from zero).
pub fn io_between(
    before: &HashMap<i32, ThreadIo>,
    after: &HashMap<i32, ThreadIo>,
    tids: impl IntoIterator<Item = i32>,
) -> ThreadIo {
    let mut sum = ThreadIo::default();
    for t in tids {
        let (a, b) = (after.get(&t).copied().unwrap_or_default(), before.get(&t).copied().unwrap_or_default());
        sum.read += a.read.saturating_sub(b.read);
        sum.write += a.write.saturating_sub(b.write);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = "   7       0 loop0 10 0 20 3 0 0 0 0 0 4 3 0 0 0 0 0 0\n \
                         254       0 vda 45753056 405499 1514351354 13496513 44536265 4953484 3263856936 39158846 12 5299888 55128865 505004 64 564834056 317610 3108994 2155895\n \
                         254       1 vda1 100 0 200 30 5 0 40 7 0 50 37\n";

    #[test]
    fn diskstats_line_of_a_device() {
        let (name, c) = parse_diskstats(STATS, 254, 0).unwrap();
        assert_eq!(name, "vda");
        assert_eq!(
            c,
            DiskCounters {
                reads: 45753056,
                read_ms: 13496513,
                writes: 44536265,
                write_sectors: 3263856936,
                busy_ms: 5299888
            }
        );
        assert_eq!(parse_diskstats(STATS, 254, 1).unwrap().0, "vda1");
        assert!(parse_diskstats(STATS, 8, 0).is_none());
    }

    #[test]
    fn device_rates_over_a_period() {
        let a = DiskCounters { reads: 1000, read_ms: 100, writes: 500, write_sectors: 0, busy_ms: 0 };
        let b = DiskCounters { reads: 5000, read_ms: 900, writes: 2500, write_sectors: 64_000, busy_ms: 1400 };
        let r = DeviceReport::between("vda", &a, &b, 2.0);
        assert_eq!((r.reads_per_s, r.writes_per_s), (2000.0, 1000.0));
        assert!((r.mean_read_us - 200.0).abs() < 1e-9, "{r:?}");
        assert!((r.mb_written_per_s - 64_000.0 * 512.0 / 1e6 / 2.0).abs() < 1e-9);
        assert!((r.busy - 0.7).abs() < 1e-9);
        // No reads: no latency, not a division by zero.
        assert_eq!(DeviceReport::between("vda", &a, &a, 1.0).mean_read_us, 0.0);
    }

    #[test]
    fn thread_io_of_this_process() {
        let me = std::process::id() as i32;
        let m = thread_io(me);
        assert!(m.contains_key(&me), "the main thread's io file is readable: {m:?}");
        assert_eq!(task_io(me, me).map(|_| ()), Some(()));
        assert_eq!(task_io(me, -1), None);
        assert_eq!(
            thread_io_of("rchar: 5\nread_bytes: 8192\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n"),
            Some(ThreadIo { read: 8192, write: 4096 })
        );
        assert_eq!(thread_io_of("rchar: 5\n"), None);
        let io = |read, write| ThreadIo { read, write };
        let before = HashMap::from([(1, io(100, 0)), (2, io(50, 50))]);
        let after = HashMap::from([(1, io(16484, 16384)), (2, io(50, 9000)), (3, io(7, 1))]);
        assert_eq!(io_between(&before, &after, [1, 3]), io(16391, 16385));
    }
}
