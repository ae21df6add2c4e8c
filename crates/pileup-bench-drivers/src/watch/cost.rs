//! What watching costs: throughput under a read-only load, and CPU
//! against an idle server.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;
use pileup_bench_drivers::median;
use pileup_sandbox::{Options, Sandbox};

use crate::watcher::{cpu_secs, proc_cpu_secs, start_watcher, stop, sysbench_args};

/// Transactions per second of a 20 s sysbench oltp_read_only run on the
/// server at `sock`.
fn tps(sock: &str) -> Result<f64> {
    let out = Command::new("sysbench")
        .arg("oltp_read_only")
        .args(sysbench_args(sock))
        .args(["--threads=8", "--time=20", "run"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("transactions:")).unwrap_or("");
    // "    transactions:                        12345  (617.21 per sec.)"
    let per_sec = line.split('(').nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse().ok());
    per_sec.ok_or_else(|| anyhow::anyhow!("could not read sysbench output: {text}"))
}

/// The throughput part: transactions per second under each watcher, and
/// the watcher's CPU.
pub(crate) fn throughput(pileup: &str, root: &Path, rounds: usize) -> Result<String> {
    let pileup = pileup.to_string();
    let sb = Sandbox::start(Options::default())?;
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    sb.sql("CREATE DATABASE sbtest")?;
    Command::new("sysbench")
        .arg("oltp_read_only")
        .args(sysbench_args(&sock))
        .arg("prepare")
        .stdout(Stdio::null())
        .status()?;
    let kinds = ["none", "pileup 1s", "pileup 1s, no scan", "pileup 100ms", "pt-stalk"];
    let mut res: Vec<Vec<f64>> = vec![vec![]; kinds.len()];
    let mut cpu: Vec<Vec<f64>> = vec![vec![]; kinds.len()];
    for r in 0..rounds {
        // Rotate the order each round so no watcher always follows the same
        // one (pt-stalk's collectors can outlive it by a moment).
        for j in 0..kinds.len() {
            let i = (j + r) % kinds.len();
            let k = &kinds[i];
            let w = start_watcher(k, &pileup, &sb, &root.join(format!("tput-{r}-{i}")))?;
            let (c0, t0) = (cpu_secs(&w), Instant::now());
            let t = tps(&sock)?;
            let share = (cpu_secs(&w) - c0) / t0.elapsed().as_secs_f64() * 100.0;
            stop(w);
            eprintln!("round {r} {k:<14} {t:8.1} tps, watcher {share:.2}% of a core");
            res[i].push(t);
            cpu[i].push(share);
        }
    }
    drop(sb);
    let base = median(&res[0].clone());
    let mut md = format!("\n### Throughput while watching (sysbench oltp_read_only, 8 threads, 20 s runs, {rounds} interleaved rounds, medians)\n\n| watcher | tx/s | vs no watcher | watcher's own CPU (% of one core) |\n|---|---|---|---|\n");
    for (i, k) in kinds.iter().enumerate() {
        let m = median(&res[i].clone());
        md.push_str(&format!(
            "| {k} | {m:.1} | {:+.2}% | {:.2} |\n",
            (m / base - 1.0) * 100.0,
            median(&cpu[i].clone())
        ));
    }
    md.push_str(&format!(
        "\nRuns: {}\n",
        kinds
            .iter()
            .zip(&res)
            .map(|(k, v)| format!("{k}: {}", v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    Ok(md)
}

/// What watching costs with nothing else running: the server's CPU
/// (answering the polls) and the watcher's own, over 30 s, against an idle
/// server with no watcher. Low-noise where tx/s on a shared box is not.
pub(crate) fn idle_cost(pileup: &str, root: &Path, rounds: usize) -> Result<String> {
    let sb = Sandbox::start(Options::default())?;
    let kinds = ["none", "pileup 1s", "pileup 1s, no scan", "pileup 100ms", "pt-stalk"];
    let mut server: Vec<Vec<f64>> = vec![vec![]; kinds.len()];
    let mut own: Vec<Vec<f64>> = vec![vec![]; kinds.len()];
    for r in 0..rounds {
        for j in 0..kinds.len() {
            let i = (j + r) % kinds.len();
            let w = start_watcher(kinds[i], pileup, &sb, &root.join(format!("idle-{r}-{i}")))?;
            let (s0, c0, t0) = (proc_cpu_secs(sb.pid()), cpu_secs(&w), Instant::now());
            std::thread::sleep(Duration::from_secs(30));
            let secs = t0.elapsed().as_secs_f64();
            let (sv, ow) = ((proc_cpu_secs(sb.pid()) - s0) / secs * 100.0, (cpu_secs(&w) - c0) / secs * 100.0);
            stop(w);
            eprintln!("round {r} {:<14} server {sv:.2}% watcher {ow:.2}% of a core", kinds[i]);
            server[i].push(sv);
            own[i].push(ow);
        }
    }
    let base = median(&server[0].clone());
    let mut md = format!("\n### Cost on an idle server (30 s each, {rounds} rounds, medians, % of one core)\n\n| watcher | server CPU | server CPU above no watcher | watcher's own CPU | total cost |\n|---|---|---|---|---|\n");
    for (i, k) in kinds.iter().enumerate() {
        let (sv, ow) = (median(&server[i].clone()), median(&own[i].clone()));
        md.push_str(&format!("| {k} | {sv:.2} | {:.2} | {ow:.2} | {:.2} |\n", sv - base, (sv - base).max(0.0) + ow));
    }
    Ok(md)
}
