//! Stack sampling on a saturated server: what sampling costs the server's
//! throughput and latency when every CPU is busy, side by side in one run
//! against no sampling, eu-stack and gdb at the rate they manage, and
//! `perf record --call-graph dwarf -F 99`.
//!
//! Unthrottled sysbench (point selects, then read-write) keeps the CPUs at
//! 100%; windows of `--window` seconds alternate between the tools, round
//! after round, each tool's window between two windows without sampling, so
//! drift in the machine hits every tool alike and each tool is also
//! measured against its own flanking windows (the paired ratio). Per window it
//! records sysbench's per-second throughput, the worst round trip of a probe
//! client looping `DO 1` on its own connection, and pileup's own stop
//! statistics. Reported per tool: throughput as a ratio of medians against
//! the windows without sampling, the probe's worst round trip (median over
//! rounds) against theirs, and pileup's stop figures.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: stacks-saturated-bench --pileup PATH [--workloads oltp_point_select,oltp_read_write] [--connections 64] [--window 10] [--rounds 3] [--tools none,all-1hz,all-10hz,all-10hz-normal,one-10hz,consistent-one-10hz,one-100hz,rolling-all-1hz,rolling-all-10hz,passive-all-1hz,accept-100hz,eu-stack,gdb,perf] (pileup tools: [consistent-|rolling-|passive-]{all,one,accept}-Nhz[-normal][-nosql]; no mode: pileup's default; idle: a control that sleeps; exec:PROGRAM[:ARG...]: PROGRAM PID SECONDS ARG... for the window) [--out FILE]";

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, children_cpu, lost, median, Load, Probe};
use pileup_sandbox::{Options, Sandbox};

/// One window of one tool.
#[derive(Default, Clone)]
struct Window {
    tps: f64,
    worst_ms: f64,
    /// The tool's own CPU, in cores over the window.
    cpu_cores: f64,
    /// pileup: the server's CPU spent on its SQL queries, in cores over the window.
    sql_cores: Option<f64>,
    /// Context switches a second on the whole machine (`ctxt` in
    /// /proc/stat): the kernel's perf hooks run on every one of them while
    /// any thread has a perf event (bench/perf-context).
    switches: f64,
    /// Captures the tool completed in the window (eu-stack, gdb), or pileup's samples.
    captures: Option<u64>,
    /// pileup: median / worst stopped window, longest single thread stop,
    /// longest held once stopped (ms).
    stop: Option<[f64; 4]>,
    ok: bool,
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH is required")?;
    let workloads: Vec<String> = arg(&args, "--workloads")
        .unwrap_or_else(|| "oltp_point_select,oltp_read_write".into())
        .split(',')
        .map(String::from)
        .collect();
    let connections: usize = arg(&args, "--connections").map(|s| s.parse()).transpose()?.unwrap_or(64);
    let window = Duration::from_secs(arg(&args, "--window").map(|s| s.parse()).transpose()?.unwrap_or(10));
    let rounds: usize = arg(&args, "--rounds").map(|s| s.parse()).transpose()?.unwrap_or(3);
    let tools: Vec<String> = arg(&args, "--tools")
        .unwrap_or_else(|| {
            "none,all-1hz,all-10hz,one-10hz,consistent-one-10hz,one-100hz,rolling-all-1hz,eu-stack,gdb,perf".into()
        })
        .split(',')
        .map(String::from)
        .collect();
    if tools.first().map(String::as_str) != Some("none") {
        bail!("--tools must start with none: every figure is against the windows without sampling");
    }
    let out = arg(&args, "--out");

    let sb = Sandbox::start(Options::default())?;
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let sbargs = pileup_bench_drivers::sysbench_prepared(&sb, "oltp_read_write")?;
    let scratch = std::env::temp_dir().join(format!("pileup-saturated-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut report = format!(
        "\n{} connections of unthrottled sysbench on {} cores, windows of {} s, {rounds} rounds, tools interleaved; medians over rounds\n",
        connections,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        window.as_secs()
    );
    for w in &workloads {
        eprintln!("== {w}");
        let load = Load::start(w, &sbargs, connections)?;
        std::thread::sleep(Duration::from_secs(5));
        let probe = Probe::start(&sb)?;
        let mut c = sb.connect()?;
        // A busy connection thread for the one-thread runs: one seen
        // running a query (at a given instant a saturated server's
        // connections may all be between queries, so look a few times).
        let mut busy: Option<u64> = None;
        for _ in 0..100 {
            busy = c.query_first(
                "SELECT TID FROM information_schema.PROCESSLIST WHERE DB='sbtest' AND COMMAND<>'Sleep' ORDER BY ID LIMIT 1",
            )?;
            if busy.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let busy = busy.context("no sysbench connection found running a query in the processlist within 10 s")?;
        let threads = std::fs::read_dir(format!("/proc/{}/task", sb.pid()))?.count();
        let mut results: Vec<Vec<Window>> = vec![vec![]; tools.len()];
        // Every tool window sits between two windows without sampling: its
        // paired ratio is against their mean, which cancels the drift that
        // a ratio against the run's median leaves in.
        let paired = pileup_bench_drivers::interleaved(rounds, tools.len(), |i, r| {
            let tool = &tools[i];
            let win = run_window(tool, &pileup, &sb, &sock, busy, window, &scratch, &load, &probe)?;
            eprintln!(
                "   round {r} {tool:<22} {:8.1} tps, probe worst {:7.2} ms, tool CPU {:.3} cores{}{}{}",
                win.tps,
                win.worst_ms,
                win.cpu_cores,
                win.sql_cores.map(|c| format!(", server's CPU for its SQL {c:.4} cores")).unwrap_or_default(),
                win.captures.map(|c| format!(", {c} captures")).unwrap_or_default(),
                win.stop
                    .map(|s| format!(
                        ", stopped median {:.2} worst {:.2} ms, longest thread {:.2} ms (held {:.2})",
                        s[0], s[1], s[2], s[3]
                    ))
                    .unwrap_or_default()
            );
            let tps = win.tps;
            results[i].push(win);
            std::thread::sleep(Duration::from_secs(2));
            Ok(tps)
        })?;
        drop(probe);
        drop(load);
        report.push_str(&table(w, threads, &tools, &results, &paired));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{report}");
    if let Some(o) = out {
        pileup_bench_drivers::write(o, &report)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_window(
    tool: &str,
    pileup: &str,
    sb: &Sandbox,
    sock: &str,
    busy: u64,
    window: Duration,
    scratch: &std::path::Path,
    load: &Load,
    probe: &Probe,
) -> Result<Window> {
    let pid = sb.pid().to_string();
    let secs = window.as_secs().to_string();
    let cpu0 = children_cpu();
    let ctxt0 = context_switches();
    let t0 = Instant::now();
    let mut w = Window { ok: true, ..Default::default() };
    match tool {
        "none" => std::thread::sleep(window),
        // A control: a child process that does nothing for the window, run
        // like a tool. Its paired ratio shows what the design itself reads
        // as a loss.
        "idle" => {
            w.ok = Command::new("sleep").arg(&secs).status()?.success();
        }
        // Any program, run as `PROGRAM PID SECONDS [ARGS]` for the window:
        // `exec:PROGRAM[:ARG...]` (a build or sampler to compare against).
        t if t.starts_with("exec:") => {
            let mut parts = t["exec:".len()..].split(':');
            let prog = parts.next().unwrap_or_default();
            w.ok = Command::new(prog)
                .args([pid.as_str(), secs.as_str()])
                .args(parts)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .with_context(|| format!("running {prog}"))?
                .success();
        }
        "eu-stack" | "gdb" => {
            let (ok, n) = back_to_back(tool, &pid, t0, window)?;
            (w.ok, w.captures) = (ok, Some(n));
        }
        // DWARF call graphs at 99 Hz for the window.
        "perf" => {
            let target = ["-F", "99", "--call-graph", "dwarf", "-p", pid.as_str()];
            w.ok = pileup_bench_drivers::perf_record(&target, &secs, &scratch.join("perf.data"))?;
        }
        t => pileup_window(t, pileup, &pid, sock, busy, window, scratch, &mut w)?,
    }
    let t1 = Instant::now();
    w.cpu_cores = (children_cpu() - cpu0) / (t1 - t0).as_secs_f64();
    w.switches = (context_switches() - ctxt0) / (t1 - t0).as_secs_f64();
    w.tps = load.tps(t0, t1);
    w.worst_ms = probe.worst(t0, t1).as_secs_f64() * 1e3;
    Ok(w)
}

/// `gdb` or `eu-stack` as often as the tool manages, back to back, for
/// the window. Returns whether every run succeeded, and how many ran.
fn back_to_back(tool: &str, pid: &str, t0: Instant, window: Duration) -> Result<(bool, u64)> {
    let (mut ok, mut n) = (true, 0);
    while t0.elapsed() < window {
        let mut cmd = if tool == "gdb" {
            let mut c = Command::new("gdb");
            c.args(["-p", pid, "-batch", "-nx", "-ex", "set pagination 0", "-ex", "thread apply all bt"]);
            c
        } else {
            let mut c = Command::new("eu-stack");
            c.args(["-p", pid]);
            c
        };
        let s = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
        ok &= s.success();
        n += 1;
    }
    Ok((ok, n))
}

/// `pileup stacks` for the window, as the tool name says:
/// `[rolling-]{all,one,accept}-{N}hz[-normal][-nosql]`; its own figures
/// (samples, stops, SQL CPU) go in `w`.
#[allow(clippy::too_many_arguments)]
fn pileup_window(
    t: &str,
    pileup: &str,
    pid: &str,
    sock: &str,
    busy: u64,
    window: Duration,
    scratch: &std::path::Path,
    w: &mut Window,
) -> Result<()> {
    let (t, no_sql) = match t.strip_suffix("-nosql") {
        Some(t) => (t, true),
        None => (t, false),
    };
    let (t, normal) = match t.strip_suffix("-normal") {
        Some(t) => (t, true),
        None => (t, false),
    };
    let (mode, rest) = split_mode(t);
    let (which, hz) = rest.split_once('-').with_context(|| format!("unknown tool {t}"))?;
    let hz: u64 = hz.strip_suffix("hz").and_then(|h| h.parse().ok()).with_context(|| format!("unknown tool {t}"))?;
    let json = scratch.join("stacks.json");
    let mut cmd = Command::new(pileup);
    cmd.args(["stacks", "--pid", pid, "-S", sock, "-u", "root", "--duration"]).arg(format!("{}s", window.as_secs()));
    if let Some(m) = mode {
        cmd.args(["--mode", m]);
    }
    cmd.args(["--interval-ms", &(1000 / hz.max(1)).to_string(), "--keep-samples", "1", "--format", "json", "-o"])
        .arg(&json);
    if normal {
        cmd.arg("--normal-priority");
    }
    if no_sql {
        cmd.arg("--no-sql");
    }
    match which {
        "all" => {}
        "one" => {
            cmd.args(["--focus", &busy.to_string()]);
        }
        "accept" => {
            cmd.args(["--focus", "accept"]);
        }
        _ => bail!("unknown tool {t}"),
    }
    let s = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    w.ok = s.success();
    if let Ok(j) = std::fs::read(&json)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(serde_json::from_slice::<serde_json::Value>(&b)?))
    {
        let st = &j["stops"];
        let ms = |k: &str| st[k].as_f64().unwrap_or(f64::NAN) / 1e3;
        w.captures = st["samples"].as_u64();
        w.sql_cores = j["timing"]["server_sql_cpu_us"].as_f64().map(|us| us / 1e6 / window.as_secs_f64());
        w.stop = Some([ms("median_window_us"), ms("worst_window_us"), ms("longest_thread_us"), ms("longest_held_us")]);
    }
    let _ = std::fs::remove_file(&json);
    Ok(())
}

/// Context switches since boot, all CPUs (NaN where they cannot be read).
fn context_switches() -> f64 {
    pileup_engine::process::context_switches().map_or(f64::NAN, |n| n as f64)
}

fn table(workload: &str, threads: usize, tools: &[String], results: &[Vec<Window>], paired: &[Vec<f64>]) -> String {
    let base_tps = median(&results[0].iter().map(|w| w.tps).filter(|x| x.is_finite()).collect::<Vec<f64>>());
    let base_worst = median(&results[0].iter().map(|w| w.worst_ms).collect::<Vec<f64>>());
    let spread = {
        let v: Vec<f64> = results[0].iter().map(|w| w.tps).filter(|x| x.is_finite()).collect();
        let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        if v.len() > 1 {
            format!("; windows without sampling ranged {lo:.0}–{hi:.0} tps")
        } else {
            String::new()
        }
    };
    let mut md = format!(
        "\n### {workload}, {threads} server threads: {base_tps:.0} tps without sampling, probe worst round trip {base_worst:.2} ms{spread}\n\n"
    );
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    md.push_str("| tool | throughput (tps) | ÷ no sampling | ÷ flanking windows (paired) | throughput lost (paired), 95% interval | probe worst RTT (ms) | − no sampling (ms) | tool CPU (cores) | CPU taken: tool + server's SQL (% of the machine) | context switches/s (machine) | captures per window | pileup stopped window median / worst (ms) | longest thread stop / held once stopped (ms) | failed windows |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (i, tool) in tools.iter().enumerate() {
        let r = &results[i];
        let tps = median(&r.iter().map(|w| w.tps).filter(|x| x.is_finite()).collect::<Vec<f64>>());
        let worst = median(&r.iter().map(|w| w.worst_ms).collect::<Vec<f64>>());
        let caps: Vec<f64> = r.iter().filter_map(|w| w.captures.map(|c| c as f64)).collect();
        let stop = |k: usize| {
            let v: Vec<f64> = r.iter().filter_map(|w| w.stop.map(|s| s[k])).collect();
            if v.is_empty() {
                "–".to_string()
            } else {
                format!("{:.2}", median(&v))
            }
        };
        md.push_str(&format!(
            "| {} | {tps:.0} | {:.3} | {} | {} | {worst:.2} | {:+.2} | {:.3} | {:.2} | {:.0} | {} | {} / {} | {} / {} | {} |\n",
            describe(tool),
            tps / base_tps,
            if i == 0 { "1.000".into() } else { format!("{:.3}", median(&paired[i].clone())) },
            if i == 0 { "–".into() } else { lost(&paired[i]) },
            worst - base_worst,
            median(&r.iter().map(|w| w.cpu_cores).collect::<Vec<f64>>()),
            100.0 * median(&r.iter().map(|w| w.cpu_cores + w.sql_cores.unwrap_or(0.0)).collect::<Vec<f64>>()) / cores,
            median(&r.iter().map(|w| w.switches).filter(|x| x.is_finite()).collect::<Vec<f64>>()),
            if caps.is_empty() { "–".into() } else { format!("{:.0}", median(&caps)) },
            stop(0),
            stop(1),
            stop(2),
            stop(3),
            r.iter().filter(|w| !w.ok).count()
        ));
    }
    md
}

fn describe(tool: &str) -> String {
    match tool {
        "none" => "no sampling".into(),
        "idle" => "control: `sleep` for the window (no sampling)".into(),
        "eu-stack" => "eu-stack, back to back".into(),
        "gdb" => "gdb `thread apply all bt`, back to back".into(),
        "perf" => "perf record -F 99 --call-graph dwarf".into(),
        t if t.starts_with("exec:") => format!("`{}`", t["exec:".len()..].replace(':', " ")),
        t => {
            let (t, sql) = match t.strip_suffix("-nosql") {
                Some(t) => (t, ", no SQL"),
                None => (t, ""),
            };
            let (t, prio) = match t.strip_suffix("-normal") {
                Some(t) => (t, ", normal priority"),
                None => (t, ""),
            };
            let (mode, rest) = split_mode(t);
            let (which, hz) = rest.split_once('-').unwrap_or((rest, ""));
            // pileup's default: consistent for all threads, passive with --focus.
            let mode = mode.unwrap_or(if which == "all" { "consistent" } else { "passive" });
            let which = match which {
                "all" => "all threads",
                "accept" => "the accept thread (idle in poll)",
                _ => "one busy connection",
            };
            format!("pileup {mode}, {which} at {} Hz{prio}{sql}", hz.trim_end_matches("hz"))
        }
    }
}

/// `[consistent-|rolling-|passive-]REST`: the mode asked for, if any
/// (otherwise pileup's default for the threads chosen).
fn split_mode(t: &str) -> (Option<&'static str>, &str) {
    for m in ["consistent", "rolling", "passive"] {
        if let Some(r) = t.strip_prefix(m).and_then(|r| r.strip_prefix('-')) {
            return (Some(m), r);
        }
    }
    (None, t)
}
