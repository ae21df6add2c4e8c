//! What a lock-contention profile costs a contended server, side by side in
//! one run: no tracing, `pileup locks`, performance_schema with every
//! wait/synch instrument on (a second server started so, as its cost needs
//! a restart and is paid always), `perf trace -e futex` (the system-call
//! tracer users also know, which sees the futex addresses but cannot name a
//! lock or unwind a stripped server's stacks) and libbpf-tools'
//! `offcputime` (bcc's off-CPU profiler, CO-RE: every sleep of the server's
//! threads by stack, user stacks walked by frame pointers, which Debian's
//! server does not keep).
//!
//! The load is sysbench `oltp_insert` into one table (InnoDB's index and
//! page latches, the group commit) at each `--connections` count. Windows of
//! `--window` seconds alternate, each tool's window between two windows
//! without tracing. On the server without instruments one sysbench run goes
//! on through all its windows (a tool's window and its neighbours see the
//! same warmed-up load, with the same table growing); the
//! performance_schema server gets its own run, with a warm-up, for each of
//! its windows, and the first server's run is stopped meanwhile and started
//! again after (two loads at once on the same cores would halve both). Reported per tool: throughput as a ratio of
//! medians against the windows without tracing and paired against its
//! flanking windows (with a 95% interval over rounds), the tool's CPU, and
//! what it recorded.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

const USAGE: &str = "Usage: locks-bench --pileup PATH [--connections 64,300] [--window 10] [--rounds 3] [--workload oltp_insert] [--tools none,locks,performance-schema,perf-trace,offcputime] [--buffer-pool SIZE] (also locks-budget-N, locks-elsewhere: the probes on an idle process, locks-cost: the probe timed by the kernel, locks@PATH: another pileup build) [--out FILE]";

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pileup_bench_drivers::{arg, children_cpu, lost, median, Load};
use pileup_sandbox::{Options, Sandbox};

/// Seconds of each window's sysbench run before measuring.
const WARMUP: Duration = Duration::from_secs(3);

#[derive(Default, Clone)]
struct Window {
    tps: f64,
    cpu_cores: f64,
    /// pileup: contended waits counted, recorded with a stack; perf trace:
    /// futex events written.
    events: Option<(u64, u64)>,
    /// locks-cost: the probe's runs a second and its time in the kernel,
    /// in cores over the window.
    probe: Option<(f64, f64)>,
    /// Frames of the server's own code (user space) per stack written, median.
    depth: Option<f64>,
    ok: bool,
}

/// Create sbtest with one table on a sandbox; the arguments that reach it.
fn prepare(sb: &Sandbox, workload: &str) -> Result<Vec<String>> {
    pileup_bench_drivers::sysbench_prepared_sized(sb, workload, 1, 10_000)
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH is required")?;
    let connections: Vec<usize> = arg(&args, "--connections")
        .unwrap_or_else(|| "64,300".into())
        .split(',')
        .map(|s| s.parse().context("--connections: numbers"))
        .collect::<Result<_>>()?;
    let window = Duration::from_secs(arg(&args, "--window").map(|s| s.parse()).transpose()?.unwrap_or(10));
    let rounds: usize = arg(&args, "--rounds").map(|s| s.parse()).transpose()?.unwrap_or(3);
    let workload = arg(&args, "--workload").unwrap_or_else(|| "oltp_insert".into());
    let tools: Vec<String> = arg(&args, "--tools")
        .unwrap_or_else(|| "none,locks,performance-schema,perf-trace,offcputime".into())
        .split(',')
        .map(String::from)
        .collect();
    if tools.first().map(String::as_str) != Some("none") {
        bail!("--tools must start with none: every figure is against the windows without tracing");
    }
    let out = arg(&args, "--out");
    // A buffer pool the table keeps within for the whole run takes out the
    // drift of a table growing past it (throughput falling as reads start).
    let pool = arg(&args, "--buffer-pool");

    let many = connections.iter().max().copied().unwrap_or(64);
    let cnf = |ps: bool| {
        let mut v = vec![("max_connections".to_string(), (many + 50).to_string())];
        if let Some(p) = &pool {
            v.push(("innodb_buffer_pool_size".into(), p.clone()));
        }
        if ps {
            v.push(("performance_schema".into(), "ON".into()));
            v.push(("performance_schema_instrument".into(), "wait/synch/%=ON".into()));
        }
        v
    };
    let plain = Sandbox::start(Options { cnf: cnf(false), ..Default::default() })?;
    let plain_args = prepare(&plain, &workload)?;
    let ps = if tools.iter().any(|t| t == "performance-schema") {
        let sb = Sandbox::start(Options { cnf: cnf(true), ..Default::default() })?;
        let a = prepare(&sb, &workload)?;
        Some((sb, a))
    } else {
        None
    };
    let scratch = std::env::temp_dir().join(format!("pileup-locks-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut report = format!(
        "\nsysbench {workload} into one table on {} cores, windows of {} s after a {} s warm-up, {rounds} rounds, tools interleaved; medians over rounds{}\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        window.as_secs(),
        WARMUP.as_secs(),
        pool.as_deref().map(|p| format!("; buffer pool {p}")).unwrap_or_default()
    );
    for &conns in &connections {
        eprintln!("== {workload}, {conns} connections");
        let mut results: Vec<Vec<Window>> = vec![vec![]; tools.len()];
        // The first server's load, running while its windows follow one another.
        let mut running: Option<Load> = None;
        let paired = pileup_bench_drivers::interleaved(rounds, tools.len(), |i, r| {
            let tool = tools[i].as_str();
            let win = match (tool, &ps) {
                ("performance-schema", Some((sb, a))) => {
                    running = None;
                    let load = Load::start(&workload, a, conns)?;
                    std::thread::sleep(WARMUP);
                    run_window(tool, &pileup, sb, &load, window, &scratch)?
                }
                _ => {
                    if running.is_none() {
                        running = Some(Load::start(&workload, &plain_args, conns)?);
                        std::thread::sleep(WARMUP);
                    }
                    run_window(tool, &pileup, &plain, running.as_ref().unwrap(), window, &scratch)?
                }
            };
            eprintln!(
                "   round {r} {tool:<20} {:8.1} tps, tool CPU {:.3} cores{}{}",
                win.tps,
                win.cpu_cores,
                win.events.map(|(a, b)| format!(", events {a} / {b}")).unwrap_or_default(),
                win.probe
                    .map(|(runs, cores)| format!(", probe {runs:.0} runs/s, {cores:.4} cores in the kernel"))
                    .unwrap_or_default()
            );
            let tps = win.tps;
            results[i].push(win);
            Ok(tps)
        })?;
        report.push_str(&table(&workload, conns, &tools, &results, &paired));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{report}");
    if let Some(o) = out {
        pileup_bench_drivers::write(o, &report)?;
    }
    Ok(())
}

/// One window of `tool` on `sb`, under `load` (already warmed up): its
/// throughput over the window, the tool's CPU and what it recorded.
fn run_window(
    tool: &str,
    pileup: &str,
    sb: &Sandbox,
    load: &Load,
    window: Duration,
    scratch: &std::path::Path,
) -> Result<Window> {
    let pid = sb.pid().to_string();
    let secs = window.as_secs().to_string();
    let cpu0 = children_cpu();
    let t0 = Instant::now();
    let mut w = Window { ok: true, ..Default::default() };
    match tool {
        "none" | "performance-schema" => std::thread::sleep(window),
        t if t == "locks" || t.starts_with("locks-") || t.starts_with("locks@") => {
            run_locks(t, pileup, &pid, &secs, scratch, window, &mut w)?
        }
        "perf-trace" => run_perf_trace(&pid, &secs, scratch, &mut w)?,
        "offcputime" => run_offcputime(&pid, &secs, scratch, &mut w)?,
        t => bail!("unknown tool {t}"),
    }
    let t1 = Instant::now();
    w.cpu_cores = (children_cpu() - cpu0) / (t1 - t0).as_secs_f64();
    w.tps = load.tps(t0, t1);
    Ok(w)
}

/// A window under `pileup locks` (or a variant of it: `t` names which),
/// its counters, stack depths and probe cost read from its JSON report.
fn run_locks(
    t: &str,
    pileup: &str,
    pid: &str,
    secs: &str,
    scratch: &std::path::Path,
    window: Duration,
    w: &mut Window,
) -> Result<()> {
    let json = scratch.join("locks.json");
    // locks@PATH: another pileup build, to compare two builds' probes
    // side by side.
    let (t, bin) = t.split_once('@').unwrap_or((t, pileup));
    let mut cmd = Command::new(bin);
    cmd.arg("locks");
    // locks-budget-N: another stack budget; locks-elsewhere: the
    // probe attached but tracing an idle process, which leaves the
    // cost of the probe being on at all.
    let mut idle = None;
    let target = if t == "locks-elsewhere" {
        let c = Command::new("sleep").arg("3600").spawn()?;
        let p = c.id().to_string();
        idle = Some(c);
        cmd.arg("--any-process");
        p
    } else {
        pid.to_string()
    };
    if let Some(n) = t.strip_prefix("locks-budget-") {
        cmd.args(["--stack-budget", n]);
    }
    // locks-cost: the probe timed by the kernel (which costs a clock
    // read on either side of every run: a row of its own).
    if t == "locks-cost" {
        cmd.arg("--probe-cost");
    }
    let s = cmd
        .args(["--pid", &target, "--no-sql", "--duration"])
        .arg(format!("{secs}s"))
        .args(["--format", "json", "-o"])
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if let Some(mut c) = idle {
        let _ = c.kill();
        let _ = c.wait();
    }
    w.ok = s.success();
    read_locks_report(&json, window, w);
    let _ = std::fs::remove_file(&json);
    Ok(())
}

/// What `pileup locks --format json` said: waits seen and recorded, the
/// median stack depth, and the probe's runs and CPU per second.
fn read_locks_report(json: &std::path::Path, window: Duration, w: &mut Window) {
    if let Ok(j) = std::fs::read(json)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(serde_json::from_slice::<serde_json::Value>(&b)?))
    {
        let c = &j["counters"];
        w.events = Some((c["waits"].as_u64().unwrap_or(0), c["recorded"].as_u64().unwrap_or(0)));
        let depths: Vec<f64> = j["locks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|l| l["stacks"].as_array().into_iter().flatten())
            .filter_map(|s| s["frames"].as_array().map(|f| f.len() as f64))
            .collect();
        w.depth = (!depths.is_empty()).then(|| median(&depths));
        let p = &j["probe_cost"];
        if let (Some(runs), Some(ns)) = (p["runs"].as_f64(), p["run_ns"].as_f64()) {
            let secs = j["duration_s"].as_f64().unwrap_or(window.as_secs_f64()).max(1e-3);
            w.probe = Some((runs / secs, ns / 1e9 / secs));
        }
    }
}

/// A window under `perf trace -e futex`: its lines are the events.
fn run_perf_trace(pid: &str, secs: &str, scratch: &std::path::Path, w: &mut Window) -> Result<()> {
    let outf = scratch.join("perf-trace.txt");
    let s = Command::new("timeout")
        .args(["-s", "INT", secs, "perf", "trace", "-e", "futex", "-p", pid, "-o"])
        .arg(&outf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("perf (Debian: linux-perf)")?;
    // timeout's own exit when it had to stop perf: 124.
    w.ok = s.success() || s.code() == Some(124);
    let lines = std::fs::read_to_string(&outf).map(|t| t.lines().count() as u64).unwrap_or(0);
    w.events = Some((lines, 0));
    let _ = std::fs::remove_file(&outf);
    Ok(())
}

/// A window under bcc's `offcputime`: its stacks, and their user-space depth.
fn run_offcputime(pid: &str, secs: &str, scratch: &std::path::Path, w: &mut Window) -> Result<()> {
    let outf = scratch.join("offcputime.txt");
    let s = Command::new("offcputime")
        .args(["-p", pid, secs])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&outf)?)
        .stderr(Stdio::null())
        .status()
        .context("offcputime (Debian: libbpf-tools)")?;
    w.ok = s.success();
    let text = std::fs::read_to_string(&outf).unwrap_or_default();
    let depths = offcpu_user_depths(&text);
    w.events = Some((depths.len() as u64, 0));
    w.depth = (!depths.is_empty()).then(|| median(&depths));
    let _ = std::fs::remove_file(&outf);
    Ok(())
}

/// The user-space frames of each stack `offcputime` printed: its records
/// are the kernel stack (from the probe's own `bpf_prog_…` frame) then the
/// user stack, one frame a line, then "-  comm (pid)" and the time; user
/// frames follow the system call entry (a sleep outside a system call, in
/// a page fault, has none). A record whose user stack was missed may end
/// without its "-" line (the message goes to stderr): the next record's
/// first frame ends it.
fn offcpu_user_depths(text: &str) -> Vec<f64> {
    let mut out = vec![];
    let (mut open, mut user, mut after_entry) = (false, 0usize, false);
    for l in text.lines().map(str::trim) {
        if l.starts_with("bpf_prog_") {
            if open {
                out.push(user as f64);
            }
            (open, user, after_entry) = (true, 0, false);
        } else if l.starts_with("- ") || l == "-" {
            out.push(user as f64);
            (open, user, after_entry) = (false, 0, false);
        } else if l.starts_with("entry_SYSCALL") {
            (user, after_entry) = (0, true);
        } else if after_entry && !l.is_empty() && !l.starts_with("[Missed") && !l.chars().all(|c| c.is_ascii_digit()) {
            user += 1;
        }
    }
    out
}

fn table(workload: &str, conns: usize, tools: &[String], results: &[Vec<Window>], paired: &[Vec<f64>]) -> String {
    let base = median(&results[0].iter().map(|w| w.tps).filter(|x| x.is_finite()).collect::<Vec<f64>>());
    let mut md = format!("\n### {workload}, {conns} connections: {base:.0} tps without tracing\n\n");
    md.push_str("| tool | throughput (tps) | ÷ no tracing | ÷ flanking windows (paired) | throughput lost (paired), 95% interval | tool CPU (cores) | probe runs a second / time in the kernel (cores), with --probe-cost | CPU taken: tool + probe (% of the machine) | waits counted / recorded with a stack (pileup), lines written (perf trace), stacks written (offcputime) | server frames per stack written (median) | failed windows |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    for (i, tool) in tools.iter().enumerate() {
        let r = &results[i];
        let tps = median(&r.iter().map(|w| w.tps).filter(|x| x.is_finite()).collect::<Vec<f64>>());
        let ev: Vec<(u64, u64)> = r.iter().filter_map(|w| w.events).collect();
        let events = if ev.is_empty() {
            "–".to_string()
        } else if tool == "perf-trace" || tool == "offcputime" {
            format!("{:.0}", median(&ev.iter().map(|e| e.0 as f64).collect::<Vec<f64>>()))
        } else {
            format!(
                "{:.0} / {:.0}",
                median(&ev.iter().map(|e| e.0 as f64).collect::<Vec<f64>>()),
                median(&ev.iter().map(|e| e.1 as f64).collect::<Vec<f64>>())
            )
        };
        let probe: Vec<(f64, f64)> = r.iter().filter_map(|w| w.probe).collect();
        let (probe_col, taken) = if probe.is_empty() {
            ("–".to_string(), 100.0 * median(&r.iter().map(|w| w.cpu_cores).collect::<Vec<f64>>()) / cpus)
        } else {
            (
                format!(
                    "{:.0} / {:.4}",
                    median(&probe.iter().map(|p| p.0).collect::<Vec<f64>>()),
                    median(&probe.iter().map(|p| p.1).collect::<Vec<f64>>())
                ),
                100.0 * median(&r.iter().map(|w| w.cpu_cores + w.probe.map_or(0.0, |p| p.1)).collect::<Vec<f64>>())
                    / cpus,
            )
        };
        md.push_str(&format!(
            "| {} | {tps:.0} | {:.3} | {} | {} | {:.3} | {probe_col} | {taken:.2} | {events} | {} | {} |\n",
            describe(tool),
            tps / base,
            if i == 0 { "1.000".into() } else { format!("{:.3}", median(&paired[i].clone())) },
            if i == 0 { "–".into() } else { lost(&paired[i]) },
            median(&r.iter().map(|w| w.cpu_cores).collect::<Vec<f64>>()),
            {
                let d: Vec<f64> = r.iter().filter_map(|w| w.depth).collect();
                if d.is_empty() {
                    "–".to_string()
                } else {
                    format!("{:.0}", median(&d))
                }
            },
            r.iter().filter(|w| !w.ok).count()
        ));
    }
    md
}

fn describe(tool: &str) -> String {
    match tool {
        "none" => "no tracing".into(),
        "locks" => "pileup locks (default: 200 stacks a second)".into(),
        "locks-elsewhere" => "pileup locks on an idle process (the probe alone)".into(),
        "locks-cost" => "pileup locks --probe-cost (the probe timed by the kernel)".into(),
        t if t.starts_with("locks@") => format!("pileup locks, the build at {}", &t["locks@".len()..]),
        t if t.starts_with("locks-budget-") => {
            format!("pileup locks, {} stacks a second", t.trim_start_matches("locks-budget-"))
        }
        "performance-schema" => "performance_schema, wait/synch/% instruments on (a server started so)".into(),
        "perf-trace" => "perf trace -e futex".into(),
        "offcputime" => "offcputime -p (libbpf-tools: every off-CPU stack)".into(),
        t => t.into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn offcputime_user_frames_are_those_after_the_system_call_entry() {
        let text = "    bpf_prog_1_sched_switch
    __schedule
    do_syscall_64
    entry_SYSCALL_64_after_hwframe
    syscall
    [unknown]
    -                mariadbd (1234)
        1983901

    bpf_prog_1_sched_switch
    __schedule
    entry_SYSCALL_64_after_hwframe
    bpf_prog_1_sched_switch
    __schedule
    asm_sysvec_reschedule_ipi
    main
    -                mariadbd (1236)
        12
";
        // The second record lost its user stack and its "-" line.
        assert_eq!(super::offcpu_user_depths(text), [2.0, 0.0, 0.0]);
    }
}
