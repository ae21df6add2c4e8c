//! The storage side of the period: what the device holding the server's
//! datadir did (/proc/diskstats) and how much the applier threads read from
//! storage themselves (/proc/PID/task/TID/io).
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
        Some((f[2].to_string(), DiskCounters { reads: g(3), read_ms: g(6), writes: g(7), write_sectors: g(9), busy_ms: g(12) }))
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

/// Bytes each thread of `pid` has caused to be read from storage
/// (`read_bytes` of /proc/PID/task/TID/io), by thread id.
pub fn thread_read_bytes(pid: i32) -> HashMap<i32, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Some(b) = std::fs::read_to_string(e.path().join("io")).ok().as_deref().and_then(read_bytes_of) {
            out.insert(tid, b);
        }
    }
    out
}

fn read_bytes_of(io: &str) -> Option<u64> {
    io.lines().find_map(|l| l.strip_prefix("read_bytes:")).and_then(|v| v.trim().parse().ok())
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

/// Storage bytes the threads `tids` read between two snapshots.
pub fn read_between(before: &HashMap<i32, u64>, after: &HashMap<i32, u64>, tids: impl IntoIterator<Item = i32>) -> u64 {
    tids.into_iter().map(|t| after.get(&t).copied().unwrap_or(0).saturating_sub(before.get(&t).copied().unwrap_or(0))).sum()
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
        assert_eq!(c, DiskCounters { reads: 45753056, read_ms: 13496513, writes: 44536265, write_sectors: 3263856936, busy_ms: 5299888 });
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
        let m = thread_read_bytes(me);
        assert!(m.contains_key(&me), "the main thread's io file is readable: {m:?}");
        assert_eq!(read_bytes_of("rchar: 5\nread_bytes: 8192\nwrite_bytes: 0\n"), Some(8192));
        let before = HashMap::from([(1, 100), (2, 50)]);
        let after = HashMap::from([(1, 16484), (2, 50), (3, 7)]);
        assert_eq!(read_between(&before, &after, [1, 3]), 16391);
    }
}
