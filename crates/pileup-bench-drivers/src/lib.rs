//! Helpers shared by the benchmark drivers.

pub use pileup_stats::{median, median_ci_rank};

/// The command line, checked against a driver's usage text. `-h`/`--help`
/// prints the usage and exits; a flag the usage does not name is an error,
/// because a typo (or `--help` itself) would otherwise start a benchmark
/// that loads gigabytes and runs for many minutes with the defaults.
///
/// The flags a driver knows are the `--name` words of its usage text; a flag
/// written `--name VALUE` there takes the next argument as its value, which
/// is not checked (so `--prefetch-args "--batch 8"` passes through).
pub fn args(usage: &str) -> anyhow::Result<Vec<String>> {
    let args: Vec<String> = std::env::args().collect();
    if let Err(e) = check_args(&args[1.min(args.len())..], usage) {
        eprintln!("error: {e} (--help lists the flags)\n{usage}");
        std::process::exit(2);
    }
    if args.iter().skip(1).any(|a| a == "--help" || a == "-h") {
        println!("{usage}");
        std::process::exit(0);
    }
    Ok(args)
}

/// The flags of a usage text: each `--name`, and whether it takes a value
/// (followed by a space and something other than `[`, `-` or `|`).
fn usage_flags(usage: &str) -> Vec<(String, bool)> {
    let b = usage.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = usage[i..].find("--") {
        let start = i + at;
        let mut end = start + 2;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'-') {
            end += 1;
        }
        if end > start + 2 {
            let value = b.get(end) == Some(&b' ') && b.get(end + 1).is_some_and(|c| !matches!(c, b'[' | b'-' | b'|'));
            out.push((usage[start..end].to_string(), value));
        }
        i = end;
    }
    out
}

fn check_args(args: &[String], usage: &str) -> Result<(), String> {
    let flags = usage_flags(usage);
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--help" || a == "-h" {
            i += 1;
            continue;
        }
        match flags.iter().find(|(f, _)| f == a) {
            Some((_, true)) if i + 1 >= args.len() => return Err(format!("{a} needs a value")),
            Some((_, true)) => i += 2,
            Some((_, false)) => i += 1,
            None => return Err(format!("unknown argument {a:?}")),
        }
    }
    Ok(())
}

/// `--key value` from the command line.
pub fn arg(args: &[String], key: &str) -> Option<String> {
    args.iter().position(|a| a == key).and_then(|i| args.get(i + 1)).cloned()
}

/// Write a result file (0600, whole or not at all: results and the
/// captured output of the tools can hold query text).
pub fn write(path: impl AsRef<std::path::Path>, bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    Ok(pileup_files::write_private_bytes(path.as_ref(), bytes.as_ref())?)
}

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_sandbox::Sandbox;

/// Create `sbtest` on a sandbox and prepare sysbench's tables for `test`
/// (4 tables of 10,000 rows); returns the arguments that reach them.
pub fn sysbench_prepared(sb: &Sandbox, test: &str) -> anyhow::Result<Vec<String>> {
    sysbench_prepared_sized(sb, test, 4, 10_000)
}

/// [`sysbench_prepared`] with `tables` tables of `rows` rows.
pub fn sysbench_prepared_sized(sb: &Sandbox, test: &str, tables: u32, rows: u32) -> anyhow::Result<Vec<String>> {
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    sb.sql("CREATE DATABASE sbtest")?;
    let sbargs = vec![
        "--db-driver=mysql".to_string(),
        format!("--mysql-socket={sock}"),
        "--mysql-user=root".into(),
        format!("--tables={tables}"),
        format!("--table-size={rows}"),
    ];
    let st = std::process::Command::new("sysbench")
        .arg(test)
        .args(&sbargs)
        .arg("prepare")
        .stdout(std::process::Stdio::null())
        .status()?;
    if !st.success() {
        anyhow::bail!("sysbench prepare failed");
    }
    Ok(sbargs)
}

/// A client looping `DO 1` on its own connection: the worst round trip
/// over a window is what a server's clients felt then.
pub struct Probe {
    /// The server thread serving the probe's connection (MariaDB), whose
    /// CPU time a benchmark can take out of the server's.
    pub server_tid: Option<i32>,
    /// A writer's threads run at nice -10 (see [`Probe::writer`]); false
    /// when that was refused (it needs root or CAP_SYS_NICE).
    pub prioritized: bool,
    samples: Arc<Mutex<Vec<(Instant, Duration)>>>,
    /// Why the loop stopped before it was told to (a failed statement).
    failed: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    pub fn start(sb: &Sandbox) -> anyhow::Result<Probe> {
        Probe::looping(sb, "DO 1", None)
    }

    /// A writer: `stmt` (a one-row UPDATE) once a millisecond, its thread
    /// and the server thread serving it at nice -10 where allowed. Its
    /// round trips then measure what holds a commit up (a lock, the disk),
    /// not the wait for a core that the tools under test keep busy, and it
    /// takes little of the CPU they are timed on.
    pub fn writer(sb: &Sandbox, stmt: &str) -> anyhow::Result<Probe> {
        Probe::looping(sb, stmt, Some(Duration::from_millis(1)))
    }

    /// `stmt` in a loop, back to back or (`pace`, prioritized) once per `pace`.
    fn looping(sb: &Sandbox, stmt: &str, pace: Option<Duration>) -> anyhow::Result<Probe> {
        let stmt = stmt.to_string();
        let mut c = sb.connect()?;
        let server_tid: Option<i32> =
            c.query_first("SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()").ok().flatten();
        let samples = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
        let failed = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, f2, st2) = (samples.clone(), failed.clone(), stop.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() });
            while !st2.load(Ordering::Relaxed) {
                let t = Instant::now();
                if let Err(e) = c.query_drop(&stmt) {
                    *f2.lock().unwrap() = Some(format!("{stmt}: {e}"));
                    break;
                }
                let d = t.elapsed();
                s2.lock().unwrap().push((t, d));
                if let Some(p) = pace {
                    std::thread::sleep(p.saturating_sub(d));
                }
            }
        });
        let own_tid = rx.recv()?;
        let mut p = Probe { server_tid, prioritized: false, samples, failed, stop, handle: Some(handle) };
        if pace.is_some() {
            let tids: Vec<i32> = std::iter::once(own_tid).chain(server_tid).collect();
            match tids.iter().try_for_each(|&t| nice(t, -10)) {
                Ok(()) => p.prioritized = true,
                Err(e) => {
                    tids.iter().for_each(|&t| drop(nice(t, 0)));
                    eprintln!("   the writer runs at normal priority ({e:#}; it needs root or CAP_SYS_NICE)");
                }
            }
        }
        Ok(p)
    }

    /// Worst round trip of probes that overlap [from, to].
    pub fn worst(&self, from: Instant, to: Instant) -> Duration {
        let s = self.samples.lock().unwrap();
        s.iter().filter(|(t, d)| *t + *d >= from && *t <= to).map(|(_, d)| *d).max().unwrap_or_default()
    }

    /// An error if the loop has stopped on a failed statement: its round
    /// trips since then are missing, and a worst round trip read from them
    /// would be too low.
    pub fn check(&self) -> anyhow::Result<()> {
        match self.failed.lock().unwrap().as_ref() {
            Some(e) => anyhow::bail!("the probe stopped: {e}"),
            None => Ok(()),
        }
    }
}

/// Set thread `tid`'s nice value.
fn nice(tid: i32, value: i32) -> anyhow::Result<()> {
    // SAFETY: setpriority reads its arguments only.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, value) } != 0 {
        anyhow::bail!("cannot set thread {tid}'s nice value to {value}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        // The server thread goes back to the thread cache or on serving
        // other connections: at its usual priority.
        if let (true, Some(t)) = (self.prioritized, self.server_tid) {
            let _ = nice(t, 0);
        }
    }
}

/// sysbench's per-second reports, as they arrive.
pub struct Load {
    child: Child,
    reports: Arc<Mutex<Vec<(Instant, f64)>>>,
}

impl Load {
    pub fn start(workload: &str, sbargs: &[String], connections: usize) -> anyhow::Result<Load> {
        let mut child = Command::new("sysbench")
            .arg(workload)
            .args(sbargs)
            .arg(format!("--threads={connections}"))
            .args(["--time=0", "--events=0", "--report-interval=1", "run"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child.stdout.take().unwrap();
        let reports = Arc::new(Mutex::new(vec![]));
        let r2 = reports.clone();
        std::thread::spawn(move || {
            // "[ 5s ] thds: 64 tps: 1234.56 qps: …"
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let tps = line.split("tps: ").nth(1).and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok());
                if let Some(t) = tps {
                    r2.lock().unwrap().push((Instant::now(), t));
                }
            }
        });
        Ok(Load { child, reports })
    }

    /// Mean throughput of the reports that fall inside [from, to] (each
    /// covers the second before it).
    pub fn tps(&self, from: Instant, to: Instant) -> f64 {
        let r = self.reports.lock().unwrap();
        let v: Vec<f64> =
            r.iter().filter(|(t, _)| *t >= from + Duration::from_secs(1) && *t <= to).map(|(_, x)| *x).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait (at most `limit`) until purge has brought InnoDB's history list
/// under 1,000, so that a run does not pay for the purge of the one
/// before it; returns the seconds waited.
pub fn wait_purged(c: &mut mysql::Conn, limit: Duration) -> anyhow::Result<f64> {
    let t = Instant::now();
    while pileup_conn::global_status(c, "Innodb_history_list_length")?.unwrap_or(0) > 1000 && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(t.elapsed().as_secs_f64())
}

/// CPU seconds in the first `fields` CPU-time fields of a `/proc/.../stat`
/// file (utime, stime, cutime, cstime): 2 for a process's or thread's own
/// time, 4 to add the children it has reaped. 0 for a process that is gone.
pub fn stat_cpu(stat_path: &str, fields: usize) -> f64 {
    pileup_engine::process::cpu_seconds(std::path::Path::new(stat_path), fields > 2).unwrap_or(0.0)
}

/// CPU seconds (user + system) of every child process waited for so far:
/// the tools run as children and are waited for within their window.
pub fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Run each tool's window between two windows of tool 0 (the baseline),
/// round after round, the tools' order rotated by one each round (so no
/// tool always follows the same one): `run(tool, round)` runs one window
/// and returns its throughput. Returns, per tool, its windows' ratios to the mean of their
/// flanking baseline windows (paired ratios, which cancel the drift a ratio
/// against the run's median leaves in).
pub fn interleaved(
    rounds: usize,
    tools: usize,
    mut run: impl FnMut(usize, usize) -> anyhow::Result<f64>,
) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut order: Vec<(usize, f64)> = vec![];
    for r in 0..rounds {
        for j in 0..tools.saturating_sub(1) {
            let i = 1 + (j + r) % (tools - 1);
            order.push((0, run(0, r)?));
            order.push((i, run(i, r)?));
        }
    }
    order.push((0, run(0, rounds)?));
    let mut paired: Vec<Vec<f64>> = vec![vec![]; tools];
    for k in 1..order.len().saturating_sub(1) {
        let (i, tps) = order[k];
        if i != 0 {
            paired[i].push(tps / ((order[k - 1].1 + order[k + 1].1) / 2.0));
        }
    }
    Ok(paired)
}

/// Throughput lost by the median paired ratio, with a distribution-free 95%
/// interval for that median (order statistics: the ranks between which the
/// median lies with 95% probability under the binomial), so a small loss is
/// shown or ruled out rather than read from one round's noise.
pub fn lost(ratios: &[f64]) -> String {
    let m = median(ratios);
    let v = pileup_stats::sorted(ratios);
    let n = v.len();
    let k = median_ci_rank(n);
    match k {
        Some(k) => {
            format!("{:.1}% [{:.1}, {:.1}]", 100.0 * (1.0 - m), 100.0 * (1.0 - v[n - 1 - k]), 100.0 * (1.0 - v[k]))
        }
        None => format!("{:.1}% (too few rounds for an interval)", 100.0 * (1.0 - m)),
    }
}

/// `perf record -q TARGET... -o DATA -- sleep SECS`, quiet, the data file
/// removed after. Returns whether perf succeeded.
pub fn perf_record(target: &[&str], secs: &str, data: &std::path::Path) -> anyhow::Result<bool> {
    use anyhow::Context;
    let s = std::process::Command::new("perf")
        .args(["record", "-q"])
        .args(target)
        .arg("-o")
        .arg(data)
        .args(["--", "sleep", secs])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("perf (Debian: linux-perf)")?;
    let _ = std::fs::remove_file(data);
    Ok(s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: &str =
        "Usage: x --pileup PATH [--rounds 3] [--hold-purge] [--part all|idle] [--prefetch-args \"--batch 8\"]";

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_and_their_values_come_from_the_usage_text() {
        let f = usage_flags(USAGE);
        assert!(f.contains(&("--pileup".into(), true)));
        assert!(f.contains(&("--rounds".into(), true)));
        assert!(f.contains(&("--hold-purge".into(), false)));
        assert!(f.contains(&("--part".into(), true)));
    }

    #[test]
    fn unknown_flags_and_missing_values_are_refused() {
        assert!(check_args(&v(&["--pileup", "p", "--rounds", "2", "--hold-purge"]), USAGE).is_ok());
        assert!(check_args(&v(&["--prefetch-args", "--primary-only"]), USAGE).is_ok());
        assert!(check_args(&v(&["--help"]), USAGE).is_ok());
        assert_eq!(check_args(&v(&["--round", "2"]), USAGE), Err("unknown argument \"--round\"".into()));
        assert_eq!(check_args(&v(&["--pileup"]), USAGE), Err("--pileup needs a value".into()));
        assert!(check_args(&v(&["stray"]), USAGE).is_err());
    }

    #[test]
    fn tools_run_between_baselines_in_an_order_rotated_each_round() {
        let mut ran = vec![];
        let paired = interleaved(3, 4, |i, r| {
            ran.push((i, r));
            Ok(if i == 0 { 100.0 } else { 100.0 - i as f64 })
        })
        .unwrap();
        let tools: Vec<usize> = ran.iter().map(|x| x.0).filter(|&i| i != 0).collect();
        assert_eq!(tools, [1, 2, 3, 2, 3, 1, 3, 1, 2]);
        // Every tool window sits between two baseline windows.
        assert!(ran.iter().step_by(2).all(|x| x.0 == 0) && ran.len() == 19);
        assert_eq!(paired[2], [0.98; 3]);
    }

    #[test]
    fn a_window_without_a_figure_is_left_out_not_a_crash() {
        let mut r = vec![0.99; 10];
        r.push(f64::NAN);
        assert_eq!(lost(&r), "1.0% [1.0, 1.0]");
    }

    #[test]
    fn the_median_interval_uses_binomial_ranks() {
        let r: Vec<f64> = (0..11).map(|i| 0.99 + i as f64 / 1000.0).collect();
        assert_eq!(lost(&r), "0.5% [0.1, 0.9]");
    }
}
