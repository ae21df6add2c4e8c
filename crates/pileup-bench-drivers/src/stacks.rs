//! Stack-capture benchmark: pileup (consistent, rolling) vs gdb
//! `thread apply all bt` vs eu-stack, side by side in one run, on a sandbox
//! with N server threads under sysbench load.
//!
//! For every tool run it measures, with a client looping `DO 1` on its own
//! connection (the probe): the worst round trip while the tool ran, against
//! the worst round trip over an equally long window just before (baseline);
//! the tool's wall time; and for pileup its own stop statistics. Each tool
//! runs `--runs` times per thread count, interleaved; medians are reported.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: stacks-bench --pileup PATH [--threads 50,300,1000] [--runs 5] [--out FILE]";

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use pileup_bench_drivers::{arg, median, Probe};
use pileup_sandbox::{Options, Sandbox};

#[derive(Default, Clone)]
struct Run {
    worst_ms: f64,
    baseline_ms: f64,
    wall_ms: f64,
    window_ms: Option<f64>,
    max_thread_ms: Option<f64>,
    captured: Option<u64>,
    missed: Option<u64>,
    /// pileup's own time split (ms): load modules, capture, unwind, symbolize, annotate.
    split: Option<[f64; 5]>,
    ok: bool,
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH is required")?;
    let counts: Vec<usize> = arg(&args, "--threads")
        .unwrap_or_else(|| "50,300,1000".into())
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let runs: usize = arg(&args, "--runs").map(|s| s.parse().unwrap()).unwrap_or(5);
    let out = arg(&args, "--out");
    let mut report = String::new();
    for &n in &counts {
        report.push_str(&bench_one(&pileup, n, runs)?);
    }
    print!("{report}");
    if let Some(o) = out {
        pileup_bench_drivers::write(o, &report)?;
    }
    Ok(())
}

fn bench_one(pileup: &str, target_threads: usize, runs: usize) -> Result<String> {
    eprintln!("== {target_threads} server threads");
    let sb = Sandbox::start(Options { cnf: vec![("thread_cache_size".into(), "2000".into())], ..Default::default() })?;
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let sbargs = pileup_bench_drivers::sysbench_prepared(&sb, "oltp_read_only")?;
    let background = server_thread_count(sb.pid());
    // Load: sysbench connections (rate-limited so the box is busy, not saturated) plus idle connections.
    let sysbench_threads = (target_threads / 4).clamp(8, 64);
    let mut load = Command::new("sysbench")
        .arg("oltp_read_only")
        .args(&sbargs)
        .arg(format!("--threads={sysbench_threads}"))
        .arg("--rate=400")
        .arg("--time=3600")
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let mut idle = vec![];
    std::thread::sleep(Duration::from_secs(2));
    while server_thread_count(sb.pid()) < target_threads {
        idle.push(sb.connect()?);
    }
    let server_threads = server_thread_count(sb.pid());
    eprintln!(
        "   {server_threads} threads ({background} background, {sysbench_threads} sysbench, {} idle)",
        idle.len()
    );
    let probe = Probe::start(&sb)?;
    std::thread::sleep(Duration::from_secs(1));
    let tools = tools(pileup, &sb.pid().to_string(), &sock);
    let mut results: Vec<Vec<Run>> = vec![vec![]; tools.len()];
    for r in 0..runs {
        for (i, (name, cmd)) in tools.iter().enumerate() {
            results[i].push(Run::measure(name, cmd, &probe, r));
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    drop(probe);
    let _ = load.kill();
    let _ = load.wait();
    drop(idle);
    let mut md = format!(
        "\n### {server_threads} server threads ({sysbench_threads} sysbench connections at 400 tx/s, {} idle connections, the rest background), {runs} runs, medians\n\n",
        server_threads.saturating_sub(background + sysbench_threads)
    );
    md.push_str(&table(&tools, &results));
    Ok(md)
}

/// The tools compared, with their command lines.
fn tools(pileup: &str, pid: &str, sock: &str) -> Vec<(&'static str, Vec<String>)> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let stacks = |mode: &str| {
        words(&[pileup, "stacks", "--pid", pid, "-S", sock, "-u", "root", "--mode", mode, "--format", "json"])
    };
    vec![
        ("pileup consistent", stacks("consistent")),
        ("pileup rolling", stacks("rolling")),
        (
            "gdb thread apply all bt",
            words(&["gdb", "-p", pid, "-batch", "-nx", "-ex", "set pagination 0", "-ex", "thread apply all bt"]),
        ),
        ("eu-stack", words(&["eu-stack", "-p", pid])),
    ]
}

impl Run {
    /// Run one tool once: its wall time and the probe's worst round trip
    /// while it ran, against an equally long window with no tool just after.
    fn measure(name: &str, cmd: &[String], probe: &Probe, r: usize) -> Run {
        let t0 = Instant::now();
        let o = Command::new(&cmd[0]).args(&cmd[1..]).stdin(Stdio::null()).stderr(Stdio::null()).output();
        let t1 = Instant::now();
        let wall = t1 - t0;
        std::thread::sleep(Duration::from_millis(300));
        let b0 = Instant::now();
        std::thread::sleep(wall);
        let b1 = Instant::now();
        let mut run = Run {
            worst_ms: probe.worst(t0, t1).as_secs_f64() * 1e3,
            baseline_ms: probe.worst(b0, b1).as_secs_f64() * 1e3,
            wall_ms: wall.as_secs_f64() * 1e3,
            ..Default::default()
        };
        if let Ok(o) = o {
            run.ok = o.status.success();
            if name.starts_with("pileup") {
                run.read_pileup(&o.stdout);
            }
        }
        eprintln!(
            "   run {r} {name:<24} worst {:7.2} ms (baseline {:6.2}) wall {:8.1} ms{}",
            run.worst_ms,
            run.baseline_ms,
            run.wall_ms,
            run.captured.map(|c| format!(" captured {c} missed {}", run.missed.unwrap_or(0))).unwrap_or_default()
        );
        if let Some(sp) = run.split {
            eprintln!(
                "       modules {:.1} capture {:.1} unwind {:.1} symbolize {:.1} annotate {:.1} ms",
                sp[0], sp[1], sp[2], sp[3], sp[4]
            );
        }
        run
    }

    /// pileup's own figures, from its JSON: the stop and the time split.
    fn read_pileup(&mut self, stdout: &[u8]) {
        let Ok(j) = serde_json::from_slice::<serde_json::Value>(stdout) else { return };
        let s = &j["samples"][0]["stats"];
        self.window_ms = s["window_us"].as_f64().map(|x| x / 1e3);
        self.max_thread_ms = s["max_thread_stop_us"].as_f64().map(|x| x / 1e3);
        self.captured = s["threads_captured"].as_u64();
        self.missed = s["threads_missed"].as_u64();
        let t = &j["timing"];
        let ms = |k: &str| t[k].as_f64().unwrap_or(f64::NAN) / 1e3;
        self.split =
            Some([ms("load_modules_us"), ms("capture_us"), ms("unwind_us"), ms("symbolize_us"), ms("annotate_us")]);
    }
}

/// The medians of every tool's runs, as a markdown table.
fn table(tools: &[(&str, Vec<String>)], results: &[Vec<Run>]) -> String {
    let mut md = String::from("| tool | probe worst RTT (ms) | gdb's worst ÷ this | baseline worst (ms) | wall (ms) | pileup stop window (ms) | longest thread stop (ms) | threads captured / missed | pileup time: modules / capture / unwind / symbolize / annotate (ms) | non-zero exits |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let gdb_worst = median(&results[2].iter().map(|x| x.worst_ms).collect::<Vec<f64>>());
    for (i, (name, _)) in tools.iter().enumerate() {
        let r = &results[i];
        let worst = median(&r.iter().map(|x| x.worst_ms).collect::<Vec<f64>>());
        let base = median(&r.iter().map(|x| x.baseline_ms).collect::<Vec<f64>>());
        let wall = median(&r.iter().map(|x| x.wall_ms).collect::<Vec<f64>>());
        let opt = |f: &dyn Fn(&Run) -> Option<f64>| {
            let v: Vec<f64> = r.iter().filter_map(f).collect();
            if v.is_empty() {
                "–".to_string()
            } else {
                format!("{:.2}", median(&v))
            }
        };
        let pileup = name.starts_with("pileup");
        let cap = if pileup {
            format!(
                "{:.0} / {:.0}",
                median(&r.iter().filter_map(|x| x.captured.map(|c| c as f64)).collect::<Vec<f64>>()),
                median(&r.iter().filter_map(|x| x.missed.map(|c| c as f64)).collect::<Vec<f64>>())
            )
        } else {
            "–".into()
        };
        let failed = r.iter().filter(|x| !x.ok).count();
        let split = if pileup {
            (0..5).map(|k| opt(&|x| x.split.map(|s| s[k]))).collect::<Vec<_>>().join(" / ")
        } else {
            "–".into()
        };
        md.push_str(&format!(
            "| {name} | {worst:.2} | {:.0}× | {base:.2} | {wall:.1} | {} | {} | {cap} | {split} | {failed} |\n",
            gdb_worst / worst.max(0.01),
            opt(&|x| x.window_ms),
            opt(&|x| x.max_thread_ms)
        ));
    }
    md
}

fn server_thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0)
}
