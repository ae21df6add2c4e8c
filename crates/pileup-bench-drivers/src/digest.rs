//! Slow-log digest benchmark: `pileup digest` against pt-query-digest on
//! the same logs, side by side in one run.
//!
//! A MariaDB sandbox logs every statement (`long_query_time=0`,
//! `log_slow_verbosity=full`) while sysbench oltp_read_write runs beside
//! three planted problems (a lookup on an unindexed column, a 999-value IN
//! list over indexes (a), (b), (a,b), a sort in a tiny sort buffer). That
//! real log is the base of two shapes:
//! * `grown`: the base log repeated to `--size-mb`, each copy with its
//!   statements' numbers shifted and its timestamps moved on (varied
//!   literals, the classes of the base log);
//! * `distinct`: the base log repeated to `--distinct-mb`, each statement's
//!   tables renamed with a letters-only suffix so the log holds
//!   `--distinct` classes (letters, because pt-query-digest folds digits in
//!   identifiers).
//!
//! Each shape is digested `--rounds` times by `pileup digest --jobs 1`,
//! `pileup digest` (all cores), both keeping every class apart as
//! pt-query-digest does (`--max-classes` out of the way), and
//! `pt-query-digest` (its default report),
//! in an order rotated each round, output to /dev/null. Reported per tool:
//! median wall time, CPU seconds, peak RSS, MB/s, MB/s per CPU-second, and
//! the ratios to pt-query-digest's medians.
//!
//! Usage: see [`USAGE`].

const USAGE: &str = "Usage: digest-bench --pileup PATH [--seconds 30] [--size-mb 1024] [--distinct-mb 50] [--distinct 12000] [--rounds 3] [--out FILE] [--keep DIR]";

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median};
use pileup_sandbox::{Options, Sandbox};

/// One run of a tool: wall seconds, CPU seconds, peak RSS in MiB.
struct Run {
    wall: f64,
    cpu: f64,
    rss_mib: f64,
}

/// Run `cmd` with stdout to /dev/null under GNU time, which reports the
/// tool's CPU seconds and its own peak RSS. (A child this process spawns
/// directly would report this process's RSS as its peak: the kernel keeps
/// the high-water mark of the memory a child had before its exec.)
fn measured(cmd: &[String], dir: &Path) -> Result<Run> {
    let report = dir.join("time.out");
    let t0 = Instant::now();
    let st = Command::new("/usr/bin/time")
        .arg("-o")
        .arg(&report)
        .args(["-f", "%U %S %M"])
        .args(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {} under /usr/bin/time", cmd[0]))?;
    let wall = t0.elapsed().as_secs_f64();
    // pileup digest exits 3 when it skipped entries; the logs here have none.
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    let text = std::fs::read_to_string(&report)?;
    let f: Vec<f64> = text.lines().last().unwrap_or("").split_whitespace().filter_map(|x| x.parse().ok()).collect();
    let [user, sys, kb] = f[..] else { bail!("unexpected GNU time output {text:?}") };
    Ok(Run { wall, cpu: user + sys, rss_mib: kb / 1024.0 })
}

/// The base log: sysbench oltp_read_write for `seconds` beside the planted
/// problems, every statement logged with every detail.
fn base_log(dir: &Path, seconds: u32) -> Result<PathBuf> {
    let log = dir.join("base.log");
    let sb = Sandbox::start(Options {
        cnf: vec![
            // Turned on once the tables are made: the log holds the load.
            ("slow_query_log".into(), "OFF".into()),
            ("long_query_time".into(), "0".into()),
            ("log_slow_verbosity".into(), "full".into()),
            ("slow_query_log_file".into(), log.display().to_string()),
        ],
        ..Default::default()
    })?;
    let sbargs = pileup_bench_drivers::sysbench_prepared_sized(&sb, "oltp_read_write", 4, 20_000)?;
    let mut c = sb.connect()?;
    pileup_sandbox::planted::make(&mut c)?;
    c.query_drop("SET GLOBAL slow_query_log = ON")?;
    let mut load = Command::new("sysbench")
        .arg("oltp_read_write")
        .args(&sbargs)
        .args(["--threads=4", &format!("--time={seconds}"), "run"])
        .stdout(Stdio::null())
        .spawn()?;
    // Ten rounds a second: the planted statements are a small share of the
    // log, as problems are.
    let t0 = Instant::now();
    let mut r = 0u32;
    while t0.elapsed().as_secs() < u64::from(seconds) {
        let next = t0 + std::time::Duration::from_millis(100 * u64::from(r));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        pileup_sandbox::planted::round(&mut c, r)?;
        r += 1;
    }
    if !load.wait()?.success() {
        bail!("sysbench run failed");
    }
    drop(c);
    sb.stop()?;
    Ok(log)
}

/// Letters-only name for class `i` (pt-query-digest folds digits).
fn letters(mut i: usize) -> String {
    let mut s = String::new();
    loop {
        s.push((b'g' + (i % 20) as u8) as char);
        i /= 20;
        if i == 0 {
            return s;
        }
    }
}

/// Write `out` from copies of `base` until it holds `target` bytes. Copy
/// `k` shifts every number in statement lines by `k` and every
/// `SET timestamp` by `k` hours; with `distinct`, each
/// statement's `sbtest` tables get the suffix of class
/// `entry % distinct`.
fn grow(base: &[u8], out: &Path, target: u64, distinct: Option<usize>) -> Result<u64> {
    let mut w = BufWriter::with_capacity(8 << 20, File::create(out)?);
    let mut written = 0u64;
    let mut k = 0u64;
    let mut entry = 0usize;
    let mut line = Vec::with_capacity(4096);
    'copies: loop {
        for l in base.split_inclusive(|&b| b == b'\n') {
            // Stop only where an entry begins, so no entry is cut.
            if written >= target && (l.starts_with(b"# Time: ") || l.starts_with(b"# User@Host: ")) {
                break 'copies;
            }
            line.clear();
            if l.starts_with(b"SET timestamp=") {
                let n: u64 = std::str::from_utf8(&l[14..])
                    .ok()
                    .and_then(|s| s.trim_end_matches([';', '\n']).parse().ok())
                    .unwrap_or(0);
                line.extend_from_slice(format!("SET timestamp={};\n", n + k * 3600).as_bytes());
                entry += 1;
            } else if l.starts_with(b"#") || l.starts_with(b"use ") || k == 0 && distinct.is_none() {
                line.extend_from_slice(l);
            } else {
                // A statement line: numbers shifted, tables renamed.
                let mut i = 0;
                while i < l.len() {
                    let c = l[i];
                    if c.is_ascii_digit() && (i == 0 || !(l[i - 1].is_ascii_alphanumeric() || l[i - 1] == b'_')) {
                        let s = i;
                        while i < l.len() && l[i].is_ascii_digit() {
                            i += 1;
                        }
                        let n: u64 = std::str::from_utf8(&l[s..i]).unwrap().parse().unwrap_or(0);
                        line.extend_from_slice((n + k).to_string().as_bytes());
                        continue;
                    }
                    if let (Some(d), true) = (distinct, l[i..].starts_with(b"sbtest")) {
                        let mut j = i + 6;
                        while j < l.len() && l[j].is_ascii_digit() {
                            j += 1;
                        }
                        line.extend_from_slice(&l[i..j]);
                        line.push(b'_');
                        line.extend_from_slice(letters(entry % d).as_bytes());
                        i = j;
                        continue;
                    }
                    line.push(c);
                    i += 1;
                }
            }
            w.write_all(&line)?;
            written += line.len() as u64;
        }
        k += 1;
    }
    w.flush()?;
    Ok(written)
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH")?;
    let num = |k: &str, d: u64| -> Result<u64> {
        arg(&args, k).map(|v| v.parse().with_context(|| format!("{k} {v:?}"))).transpose().map(|v| v.unwrap_or(d))
    };
    let seconds = num("--seconds", 30)? as u32;
    let size_mb = num("--size-mb", 1024)?;
    let distinct_mb = num("--distinct-mb", 50)?;
    let distinct = num("--distinct", 12_000)? as usize;
    let rounds = num("--rounds", 3)?.max(1) as usize;
    which("pt-query-digest", "percona-toolkit")?;
    let keep = arg(&args, "--keep").map(PathBuf::from);
    let tmp = tempfile_dir()?;
    let dir = keep.clone().unwrap_or_else(|| tmp.clone());
    std::fs::create_dir_all(&dir)?;
    eprintln!("base log: sysbench oltp_read_write and the planted problems, {seconds} s, every statement logged");
    let base_path = base_log(&dir, seconds)?;
    let base = std::fs::read(&base_path)?;
    let shapes = [
        ("grown", dir.join("grown.log"), size_mb << 20, None),
        ("distinct", dir.join("distinct.log"), distinct_mb << 20, Some(distinct)),
    ];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Every class kept apart, as pt-query-digest keeps them.
    let all = |v: &[&str]| -> Vec<String> {
        [pileup.as_str(), "digest", "--max-classes", "100000000"].iter().chain(v).map(|s| s.to_string()).collect()
    };
    let tools: [(&str, Vec<String>); 3] = [
        ("pileup digest --jobs 1", all(&["--jobs", "1"])),
        (if cores > 1 { "pileup digest (all cores)" } else { "pileup digest" }, all(&[])),
        ("pt-query-digest", vec!["pt-query-digest".into(), "--no-version-check".into()]),
    ];
    let mut md = String::new();
    md.push_str(&format!(
        "\nBase log: {:.1} MB of slow log from a real MariaDB run ({} statements). {} rounds per shape, tools' order rotated each round; medians.\n",
        base.len() as f64 / 1e6,
        base.split(|&b| b == b'\n').filter(|l| l.starts_with(b"# Query_time: ")).count(),
        rounds
    ));
    for (name, path, target, d) in &shapes {
        let bytes = grow(&base, path, *target, *d)?;
        let mb = bytes as f64 / 1e6;
        let classes = {
            let out = Command::new(&pileup)
                .args(["digest", "--format", "json", "--max-classes", "1000000"])
                .arg(path)
                .output()?;
            let j: serde_json::Value = serde_json::from_slice(&out.stdout).context("pileup digest --format json")?;
            (j["events"].as_u64().unwrap_or(0), j["classes"].as_array().map_or(0, |a| a.len()))
        };
        eprintln!("shape {name}: {mb:.0} MB, {} statements, {} classes", classes.0, classes.1);
        let mut runs: Vec<Vec<Run>> = (0..tools.len()).map(|_| vec![]).collect();
        for r in 0..rounds {
            for j in 0..tools.len() {
                let t = (j + r) % tools.len();
                let mut cmd = tools[t].1.clone();
                cmd.push(path.display().to_string());
                let run = measured(&cmd, &dir)?;
                eprintln!(
                    "  round {} {}: {:.2} s wall, {:.2} CPU-s, {:.0} MiB",
                    r + 1,
                    tools[t].0,
                    run.wall,
                    run.cpu,
                    run.rss_mib
                );
                runs[t].push(run);
            }
        }
        let med = |t: usize, f: fn(&Run) -> f64| median(&runs[t].iter().map(f).collect::<Vec<f64>>());
        let pt = tools.len() - 1;
        md.push_str(&format!(
            "\n### {name}: {mb:.0} MB, {} statements, {} classes\n\n\
             | tool | wall s | CPU s | peak RSS MiB | MB/s | MB per CPU-s | × pt-query-digest (MB per CPU-s) | RSS ÷ pt-query-digest |\n|---|---|---|---|---|---|---|---|\n",
            classes.0, classes.1
        ));
        for (t, (label, _)) in tools.iter().enumerate() {
            let (wall, cpu, rss) = (med(t, |r| r.wall), med(t, |r| r.cpu), med(t, |r| r.rss_mib));
            md.push_str(&format!(
                "| {label} | {wall:.2} | {cpu:.2} | {rss:.0} | {:.1} | {:.1} | {:.1}× | {:.3} |\n",
                mb / wall,
                mb / cpu,
                (mb / cpu) / (mb / med(pt, |r| r.cpu)),
                rss / med(pt, |r| r.rss_mib)
            ));
        }
        if keep.is_none() {
            let _ = std::fs::remove_file(path);
        }
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    match arg(&args, "--out") {
        Some(o) => pileup_bench_drivers::write(o, md)?,
        None => print!("{md}"),
    }
    Ok(())
}

fn which(cmd: &str, package: &str) -> Result<()> {
    let ok = Command::new("sh").args(["-c", &format!("command -v {cmd}")]).stdout(Stdio::null()).status()?.success();
    if !ok {
        bail!("{cmd} is not installed: apt-get install {package}");
    }
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("pileup-digest-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
