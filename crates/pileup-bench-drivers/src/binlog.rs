//! Binlog decoding benchmark: how fast `pileup binlog` reads a relay log
//! written by a real replica, against `mariadb-binlog --verbose` (what users
//! run to see row images), side by side in one run.
//!
//! A primary (binlog_format=ROW) and its replica; sysbench fills two tables
//! (bulk INSERTs: many rows per event), the replica's relay log is rotated,
//! then sysbench oltp_write_only runs (one row per event, the shape of an
//! OLTP replication stream). Each relay-log set is decoded `--runs` times by:
//! * `pileup binlog --stats`: every event and every column of every row
//!   decoded, nothing printed;
//! * `pileup binlog --format json > /dev/null`: decoded and printed as JSON;
//! * `mariadb-binlog --verbose --base64-output=DECODE-ROWS > /dev/null`.
//!
//! Reported: median wall time, the CPU time the tool used, events and rows
//! per second of wall time, and the ratio to mariadb-binlog.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: binlog-bench --pileup PATH [--rows 300000] [--seconds 40] [--runs 5] [--out FILE]";

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median};
use pileup_sandbox::{Options, Sandbox};

fn sysbench(sock: &str, rows: u64, cmd: &[&str]) -> Result<()> {
    let out = Command::new("sysbench")
        .arg("oltp_write_only")
        .args([
            "--db-driver=mysql",
            &format!("--mysql-socket={sock}"),
            "--mysql-user=root",
            "--mysql-db=d",
            "--tables=2",
            &format!("--table-size={rows}"),
        ])
        .args(cmd)
        .output()
        .context("sysbench (make deps installs it)")?;
    if !out.status.success() {
        bail!("sysbench {cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn relay_files(replica: &Sandbox) -> Result<Vec<PathBuf>> {
    let (index, datadir): (String, String) =
        replica.connect()?.query_first("SELECT @@relay_log_index, @@datadir")?.unwrap();
    let index = Path::new(&datadir).join(index);
    Ok(std::fs::read_to_string(index)?.lines().filter(|l| !l.is_empty()).map(|l| Path::new(&datadir).join(l)).collect())
}

/// CPU seconds used by reaped children so far.
fn children_cpu() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// Run a command with stdout to /dev/null; (wall seconds, CPU seconds).
fn timed(cmd: &[String]) -> Result<(f64, f64)> {
    let c0 = children_cpu();
    let t0 = Instant::now();
    let st = Command::new(&cmd[0]).args(&cmd[1..]).stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
    let wall = t0.elapsed().as_secs_f64();
    if !st.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&st.stderr));
    }
    Ok((wall, children_cpu() - c0))
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH")?;
    let rows: u64 = arg(&args, "--rows").map(|s| s.parse()).transpose()?.unwrap_or(300_000);
    let seconds: u64 = arg(&args, "--seconds").map(|s| s.parse()).transpose()?.unwrap_or(40);
    let runs: usize = arg(&args, "--runs").map(|s| s.parse()).transpose()?.unwrap_or(5);

    let primary = Sandbox::start(Options {
        binlog: true,
        cnf: vec![("binlog_format".into(), "ROW".into())],
        ..Default::default()
    })?;
    // Keep applied relay logs: they are what gets decoded.
    let replica = Sandbox::start(Options {
        replica_of: Some(primary.endpoint.clone()),
        cnf: vec![("relay_log_purge".into(), "0".into())],
        ..Default::default()
    })?;
    let sock = primary.endpoint.socket.to_string_lossy().into_owned();
    primary.sql("CREATE DATABASE d")?;
    let caught_up = || replica.wait_caught_up(&primary, std::time::Duration::from_secs(600)).map(|_| ());
    eprintln!("bulk load: 2 tables x {rows} rows");
    replica.sql("FLUSH RELAY LOGS")?;
    let before = relay_files(&replica)?.len();
    sysbench(&sock, rows, &["prepare"])?;
    caught_up()?;
    replica.sql("FLUSH RELAY LOGS")?;
    let all = relay_files(&replica)?;
    let bulk: Vec<PathBuf> = all[before..all.len() - 1].to_vec();
    eprintln!("oltp_write_only for {seconds} s");
    let before = all.len() - 1;
    sysbench(&sock, rows, &["--threads=4", &format!("--time={seconds}"), "run"])?;
    caught_up()?;
    replica.sql("FLUSH RELAY LOGS")?;
    let all = relay_files(&replica)?;
    let oltp: Vec<PathBuf> = all[before..all.len() - 1].to_vec();

    let mut md = format!("\n### Decoding relay logs written by a replica ({runs} runs each, medians; one core: both tools are single-threaded)\n");
    for (label, files) in [
        ("bulk INSERTs (sysbench prepare: many rows per event)", &bulk),
        ("OLTP writes (sysbench oltp_write_only: one row per event)", &oltp),
    ] {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        let bytes: u64 = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
        // Counts from pileup itself.
        let out = Command::new(&pileup).args(["binlog", "--stats", "--format", "json"]).args(&names).output()?;
        if !out.status.success() {
            bail!("pileup binlog --stats: {}", String::from_utf8_lossy(&out.stderr));
        }
        let st: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let (events, nrows) = (st["events"].as_f64().unwrap(), st["rows"].as_f64().unwrap());
        let tools: Vec<(&str, Vec<String>)> = vec![
            (
                "pileup binlog --stats",
                [&pileup, "binlog", "--stats"].iter().map(|s| s.to_string()).chain(names.iter().cloned()).collect(),
            ),
            (
                "pileup binlog --format json",
                [&pileup, "binlog", "--format", "json"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain(names.iter().cloned())
                    .collect(),
            ),
            (
                "mariadb-binlog -v",
                ["mariadb-binlog", "--verbose", "--base64-output=DECODE-ROWS"]
                    .iter()
                    .map(|s| s.to_string())
                    .chain(names.iter().cloned())
                    .collect(),
            ),
        ];
        let mut res: Vec<(f64, f64)> = vec![];
        for (name, cmd) in &tools {
            let mut w = vec![];
            let mut c = vec![];
            for _ in 0..runs {
                let (wall, cpu) = timed(cmd)?;
                w.push(wall);
                c.push(cpu);
            }
            eprintln!("{label}: {name}: {:.3} s", median(&w.clone()));
            res.push((median(&w), median(&c)));
        }
        let base = res[2].0;
        md.push_str(&format!("\n#### {label}: {} file{}, {:.1} MB, {events:.0} events, {nrows:.0} rows\n\n| tool | wall (s) | CPU (s) | events/s | rows/s | mariadb-binlog's time ÷ this |\n|---|---|---|---|---|---|\n", files.len(), if files.len() == 1 { "" } else { "s" }, bytes as f64 / 1e6));
        for ((name, _), (w, c)) in tools.iter().zip(&res) {
            md.push_str(&format!(
                "| {name} | {w:.3} | {c:.3} | {:.0} | {:.0} | {:.1}× |\n",
                events / w,
                nrows / w,
                base / w
            ));
        }
    }
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    Ok(())
}
