//! One timed run of a tool: its wall time, its own CPU seconds (from
//! `wait4`, the child's own rusage) and peak resident memory (its
//! `VmHWM`, read every 100 ms: a child's rusage counts the memory of the
//! process that forked it, this driver's), the server's CPU
//! seconds over the same window, how long the datadir's device was busy,
//! and how the two cores were used (sampled every 100 ms), so that the run's
//! critical path can be named: the seconds at its end when no more than
//! one core was busy.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What one run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    pub wall_s: f64,
    /// The tool's own processes: user + system seconds.
    pub tool_cpu_s: f64,
    /// The server's threads but the one serving the writer probe.
    pub server_cpu_s: f64,
    pub tool_rss_mib: f64,
    /// Seconds the datadir's device had I/O in flight (`io_ticks`).
    pub device_busy_s: f64,
    /// Seconds at the run's end with at most one core busy (tool + server).
    pub one_core_tail_s: f64,
}

impl Measured {
    /// This run followed by `after`, as one run: times, CPU and the device
    /// added, the larger peak; the end left to one core runs on from this
    /// run's into `after`'s when `after` used no more than one core.
    pub fn then(self, after: Measured) -> Measured {
        let all_one_core = after.one_core_tail_s >= after.wall_s - 0.1;
        Measured {
            wall_s: self.wall_s + after.wall_s,
            tool_cpu_s: self.tool_cpu_s + after.tool_cpu_s,
            server_cpu_s: self.server_cpu_s + after.server_cpu_s,
            tool_rss_mib: self.tool_rss_mib.max(after.tool_rss_mib),
            device_busy_s: self.device_busy_s + after.device_busy_s,
            one_core_tail_s: if all_one_core { self.one_core_tail_s + after.wall_s } else { after.one_core_tail_s },
        }
    }
}

/// The server's file syncs (`fdatasync`, `fsync`) and file extensions
/// (`fallocate`) over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FileWork {
    pub syncs: u64,
    pub extensions: u64,
}

/// [`FileWork`] counted at the kernel's syscall tracepoints by `perf stat`
/// on the server's process (counting only: no samples, no stacks; threads
/// the server starts meanwhile are counted with it). Written as a child
/// `perf` rather than through perf_event_open here: perf already attaches
/// to every thread of a process and sums them.
pub struct FileWorkCount {
    child: std::process::Child,
    out: std::path::PathBuf,
}

const FILE_WORK_EVENTS: &str = "syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync,syscalls:sys_enter_fallocate";

impl FileWorkCount {
    /// Start counting; None where perf or the tracepoints are missing.
    pub fn start(pid: u32) -> Option<FileWorkCount> {
        // In a directory of the driver's own (0700): perf, run as root,
        // writes its counts by name.
        let dir = std::env::temp_dir().join(format!("pileup-dump-bench-perf-{}", std::process::id()));
        pileup_files::create_private_dir(&dir).ok()?;
        let out = dir.join("counts.csv");
        let child = Command::new("perf")
            .args(["stat", "-x", ",", "-e", FILE_WORK_EVENTS, "-p", &pid.to_string(), "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // perf attaches before it counts; a run started sooner would lose
        // its first calls.
        std::thread::sleep(Duration::from_millis(300));
        Some(FileWorkCount { child, out })
    }

    /// Stop counting (SIGINT: perf then writes its counts) and read them.
    pub fn stop(mut self) -> Option<FileWork> {
        // SAFETY: a signal to the child this value started and still owns.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).ok();
        let _ = std::fs::remove_file(&self.out);
        parse_file_work(&text?)
    }
}

/// `perf stat -x ,` lines: `count,unit,event,…`; None unless every event
/// was counted.
fn parse_file_work(text: &str) -> Option<FileWork> {
    let mut w = FileWork::default();
    let mut seen = 0;
    for l in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = l.split(',').collect();
        let (Some(n), Some(event)) = (f.first().and_then(|n| n.parse::<u64>().ok()), f.get(2)) else { continue };
        match *event {
            "syscalls:sys_enter_fdatasync" | "syscalls:sys_enter_fsync" => w.syncs += n,
            "syscalls:sys_enter_fallocate" => w.extensions += n,
            _ => continue,
        }
        seen += 1;
    }
    (seen == 3).then_some(w)
}

/// Where the server's and the device's figures are read.
#[derive(Clone)]
pub struct Meters {
    pub server_pid: u32,
    pub server_stat: String,
    /// The writer probe's server thread, whose time is left out.
    pub writer_stat: Option<String>,
    /// `/sys/dev/block/MAJ:MIN/stat` of the datadir's device.
    pub device_stat: Option<String>,
}

impl Meters {
    pub fn server_cpu(&self) -> f64 {
        pileup_bench_drivers::stat_cpu(&self.server_stat, 2)
            - self.writer_stat.as_deref().map_or(0.0, |w| pileup_bench_drivers::stat_cpu(w, 2))
    }

    /// Milliseconds the device has had I/O in flight since boot.
    pub fn device_ms(&self) -> f64 {
        let Some(p) = &self.device_stat else { return 0.0 };
        let s = std::fs::read_to_string(p).unwrap_or_default();
        s.split_whitespace().nth(9).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    }

    /// The device holding `dir`: its whole disk's statistics when `dir` is
    /// on a partition (a partition's own file has the same fields).
    pub fn device_of(dir: &std::path::Path) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        let p = format!("/sys/dev/block/{}:{}/stat", libc::major(dev), libc::minor(dev));
        std::path::Path::new(&p).exists().then_some(p)
    }
}

/// Run `cmd` to its end, measured; each line it prints on stdout goes to
/// `line`. Fails when the tool fails, with its last line of stderr.
pub fn run(cmd: &mut Command, what: &str, m: &Meters, mut line: impl FnMut(&str)) -> Result<Measured> {
    let (server0, device0) = (m.server_cpu(), m.device_ms());
    let t0 = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let pid = child.id() as i32;
    let stderr = child.stderr.take().expect("piped");
    let err_tail = std::thread::spawn(move || {
        std::io::BufReader::new(stderr).lines().map_while(|l| l.ok()).last().unwrap_or_default()
    });
    let busy = Arc::new(Mutex::new(Vec::<(f64, f64)>::new()));
    let hwm_kib = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_cores(pid, m.server_stat.clone(), (busy.clone(), hwm_kib.clone()), stop.clone());
    let out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    for l in out.lines().map_while(|l| l.ok()) {
        line(&l);
    }
    // The child's own rusage: std's wait gives none.
    let mut status = 0;
    // SAFETY: rusage is plain data the kernel fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let tail = err_tail.join().unwrap_or_default();
    if r != pid {
        bail!("waiting for {what}: {}", std::io::Error::last_os_error());
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        bail!("{what} failed: {tail}");
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let busy = busy.lock().unwrap().clone();
    Ok(Measured {
        wall_s,
        tool_cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
        server_cpu_s: m.server_cpu() - server0,
        tool_rss_mib: hwm_kib.load(Ordering::Relaxed) as f64 / 1024.0,
        device_busy_s: (m.device_ms() - device0) / 1e3,
        one_core_tail_s: one_core_tail(&busy, wall_s),
    })
}

/// Every 100 ms, the cores the tool (with its threads) and the server used
/// since the sample before: `(seconds since the start, cores)`; and the
/// tool's peak resident memory so far (`VmHWM`, KiB).
type Samples = (Arc<Mutex<Vec<(f64, f64)>>>, Arc<std::sync::atomic::AtomicU64>);

fn sample_cores(
    pid: i32,
    server_stat: String,
    (busy, hwm_kib): Samples,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let tool_stat = format!("/proc/{pid}/stat");
        let status = format!("/proc/{pid}/status");
        let hwm = || -> Option<u64> {
            let s = std::fs::read_to_string(&status).ok()?;
            s.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()
        };
        let cpu = || pileup_bench_drivers::stat_cpu(&tool_stat, 4) + pileup_bench_drivers::stat_cpu(&server_stat, 2);
        let t0 = Instant::now();
        let (mut last_t, mut last_cpu) = (0.0, cpu());
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            let (t, c) = (t0.elapsed().as_secs_f64(), cpu());
            if let Some(k) = hwm() {
                hwm_kib.fetch_max(k, Ordering::Relaxed);
            }
            if c >= last_cpu && t > last_t {
                busy.lock().unwrap().push((t, (c - last_cpu) / (t - last_t)));
            }
            (last_t, last_cpu) = (t, c);
        }
    })
}

/// The seconds at the end of a run during which no more than one core
/// (1.2, for the sampling's noise) was busy: the work left for one thread.
/// The last sample, cut short by the tool's exit, is not counted.
pub fn one_core_tail(busy: &[(f64, f64)], wall_s: f64) -> f64 {
    let Some(last_full) = busy.len().checked_sub(1) else { return 0.0 };
    let mut start = None;
    for (t, cores) in busy[..last_full].iter().rev() {
        if *cores > 1.2 {
            break;
        }
        start = Some(*t - 0.1);
    }
    start.map_or(0.0, |s| (wall_s - s).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_stat_counts_are_read_and_a_missing_event_is_no_answer() {
        let text = "# started on Mon Nov 30\n\n95,,syscalls:sys_enter_fdatasync,3000,100.00,,\n2,,syscalls:sys_enter_fsync,3000,100.00,,\n44,,syscalls:sys_enter_fallocate,3000,100.00,,\n";
        assert_eq!(parse_file_work(text), Some(FileWork { syncs: 97, extensions: 44 }));
        let missing =
            "<not supported>,,syscalls:sys_enter_fdatasync,0,100.00,,\n2,,syscalls:sys_enter_fsync,1,100.00,,\n";
        assert_eq!(parse_file_work(missing), None);
    }

    #[test]
    fn a_run_then_another_adds_up_and_its_tail_runs_on_through_an_idle_second() {
        let m = |wall_s, tool_cpu_s, tool_rss_mib, one_core_tail_s| Measured {
            wall_s,
            tool_cpu_s,
            server_cpu_s: 1.0,
            tool_rss_mib,
            device_busy_s: 0.5,
            one_core_tail_s,
        };
        let both = m(2.0, 3.0, 10.0, 0.4).then(m(0.5, 0.01, 2.0, 0.5));
        assert_eq!((both.wall_s, both.tool_cpu_s, both.server_cpu_s), (2.5, 3.01, 2.0));
        assert_eq!((both.tool_rss_mib, both.device_busy_s, both.one_core_tail_s), (10.0, 1.0, 0.9));
        assert_eq!(m(2.0, 3.0, 10.0, 0.4).then(m(1.0, 2.0, 2.0, 0.2)).one_core_tail_s, 0.2);
    }

    #[test]
    fn the_tail_is_the_run_s_end_on_one_core() {
        let busy: Vec<(f64, f64)> = (1..=50).map(|i| (f64::from(i) * 0.1, if i <= 30 { 1.9 } else { 1.0 })).collect();
        let tail = one_core_tail(&busy, 5.05);
        assert!((tail - 2.05).abs() < 1e-9, "{tail}");
        let all_busy: Vec<(f64, f64)> = (1..=10).map(|i| (f64::from(i) * 0.1, 2.0)).collect();
        assert_eq!(one_core_tail(&all_busy, 1.0), 0.0);
        assert_eq!(one_core_tail(&[], 1.0), 0.0);
    }
}
