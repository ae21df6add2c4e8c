//! Helpers shared by the benchmark drivers.

/// Median of a sample (NaN when empty): this machine is noisy, so every
/// figure the benchmarks report is a median.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

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
    pileup_files::write_private_bytes(path.as_ref(), bytes.as_ref())
}

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_sandbox::Sandbox;

/// Create `sbtest` on a sandbox and prepare sysbench's tables for `test`
/// (4 tables of 10,000 rows); returns the arguments that reach them.
pub fn sysbench_prepared(sb: &Sandbox, test: &str) -> anyhow::Result<Vec<String>> {
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    sb.sql("CREATE DATABASE sbtest")?;
    let sbargs = vec![
        "--db-driver=mysql".to_string(),
        format!("--mysql-socket={sock}"),
        "--mysql-user=root".into(),
        "--tables=4".into(),
        "--table-size=10000".into(),
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
    samples: Arc<Mutex<Vec<(Instant, Duration)>>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    pub fn start(sb: &Sandbox) -> anyhow::Result<Probe> {
        Probe::start_with(sb, "DO 1")
    }

    /// A probe looping `stmt` (a one-row UPDATE: a writer's round trip).
    pub fn start_with(sb: &Sandbox, stmt: &str) -> anyhow::Result<Probe> {
        let stmt = stmt.to_string();
        let mut c = sb.connect()?;
        let samples = Arc::new(Mutex::new(Vec::with_capacity(1 << 20)));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (samples.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !st2.load(Ordering::Relaxed) {
                let t = Instant::now();
                if c.query_drop(&stmt).is_err() {
                    break;
                }
                s2.lock().unwrap().push((t, t.elapsed()));
            }
        });
        Ok(Probe { samples, stop, handle: Some(handle) })
    }
    /// Worst round trip of probes that overlap [from, to].
    pub fn worst(&self, from: Instant, to: Instant) -> Duration {
        let s = self.samples.lock().unwrap();
        s.iter().filter(|(t, d)| *t + *d >= from && *t <= to).map(|(_, d)| *d).max().unwrap_or_default()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
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
}
