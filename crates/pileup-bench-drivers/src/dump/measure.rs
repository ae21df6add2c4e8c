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
/// (`fallocate`) over a run, and the seconds its threads spent in the
/// syncs (summed over the threads: two threads each waiting 1 s is 2 s).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FileWork {
    pub syncs: u64,
    pub extensions: u64,
    pub sync_wait_s: f64,
}

/// [`FileWork`] recorded by `perf record` at the kernel's syscall
/// tracepoints of the three calls (entry and exit, no samples, no stacks),
/// on every CPU, and the server's own calls (its process id) picked out by
/// `perf script`: a per-process perf misses the threads the server starts
/// meanwhile (a loader's connections), and tracing every system call
/// (`perf trace`) slowed a load by a third. Written as a child `perf`
/// rather than through perf_event_open here: perf already opens an event
/// per CPU and orders their records.
pub struct FileWorkCount {
    child: std::process::Child,
    out: std::path::PathBuf,
    pid: u32,
}

const FILE_WORK_EVENTS: &str = "syscalls:sys_enter_fdatasync,syscalls:sys_exit_fdatasync,syscalls:sys_enter_fsync,syscalls:sys_exit_fsync,syscalls:sys_enter_fallocate";

impl FileWorkCount {
    /// Start recording; None where perf or the tracepoints are missing.
    pub fn start(pid: u32) -> Option<FileWorkCount> {
        // In a directory of the driver's own (0700): perf, run as root,
        // writes its records by name.
        let dir = std::env::temp_dir().join(format!("pileup-dump-bench-perf-{}", std::process::id()));
        pileup_files::create_private_dir(&dir).ok()?;
        let out = dir.join("file-work.data");
        let child = Command::new("perf")
            .args(["record", "-q", "-a", "-e", FILE_WORK_EVENTS, "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // perf attaches before it records; a run started sooner would lose
        // its first calls.
        std::thread::sleep(Duration::from_millis(500));
        Some(FileWorkCount { child, out, pid })
    }

    /// Stop recording (SIGINT: perf then writes its records out) and read
    /// the server's calls from them.
    pub fn stop(mut self) -> Option<FileWork> {
        // SAFETY: a signal to the child this value started and still owns.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        let script = Command::new("perf")
            .args(["script", "-F", "pid,tid,time,event", "-i"])
            .arg(&self.out)
            .stderr(Stdio::null())
            .output();
        let _ = std::fs::remove_file(&self.out);
        let script = script.ok().filter(|o| o.status.success())?;
        parse_file_work(&String::from_utf8_lossy(&script.stdout), self.pid)
    }
}

/// `perf script -F pid,tid,time,event` lines (`PID/TID SECONDS: EVENT:`)
/// of process `pid`: its syncs and extensions counted at their entry, a
/// sync's time from its entry to its exit on the same thread; None when
/// perf recorded nothing at all (it could not trace).
fn parse_file_work(text: &str, pid: u32) -> Option<FileWork> {
    let mut w = FileWork::default();
    let mut entered: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
    let mut lines = 0;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let [ids, time, event, ..] = f[..] else { continue };
        lines += 1;
        let Some((p, tid)) = ids.split_once('/') else { continue };
        let Ok(t) = time.trim_end_matches(':').parse::<f64>() else { continue };
        if p.parse() != Ok(pid) {
            continue;
        }
        match event.trim_end_matches(':') {
            "syscalls:sys_enter_fdatasync" | "syscalls:sys_enter_fsync" => {
                w.syncs += 1;
                entered.insert(tid, t);
            }
            "syscalls:sys_exit_fdatasync" | "syscalls:sys_exit_fsync" => {
                if let Some(t0) = entered.remove(tid) {
                    w.sync_wait_s += t - t0;
                }
            }
            "syscalls:sys_enter_fallocate" => w.extensions += 1,
            _ => {}
        }
    }
    (lines > 0).then_some(w)
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
    fn the_servers_calls_are_picked_out_and_timed_from_entry_to_exit_on_their_thread() {
        let text = "\
  500/501  100.000000: syscalls:sys_enter_fdatasync: 
  500/502  100.100000: syscalls:sys_enter_fsync: 
  900/901  100.150000: syscalls:sys_enter_fdatasync: 
  500/501  100.250000:  syscalls:sys_exit_fdatasync: 
  500/502  100.350000:  syscalls:sys_exit_fsync: 
  900/901  105.000000:  syscalls:sys_exit_fdatasync: 
  500/501  100.400000: syscalls:sys_enter_fallocate: 
  500/503  100.500000:  syscalls:sys_exit_fdatasync: 
";
        let w = parse_file_work(text, 500).unwrap();
        // Two syncs of 0.25 s each on two threads (another process's and
        // an exit whose entry came before the recording are left out).
        assert_eq!((w.syncs, w.extensions), (2, 1));
        assert!((w.sync_wait_s - 0.5).abs() < 1e-9, "{}", w.sync_wait_s);
        assert_eq!(parse_file_work("", 500), None, "nothing recorded: no answer");
        assert_eq!(parse_file_work(text, 700), Some(FileWork::default()), "a server that made no such call");
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
