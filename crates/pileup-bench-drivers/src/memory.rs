//! What following a server's memory costs it, side by side in one run, and
//! how soon the statement that grows it is named.
//!
//! Throughput: sysbench `oltp_read_write` saturating the machine. Windows
//! of `--window` seconds alternate, each tool's window between two windows
//! without tracing (the tools' order rotated each round):
//! - `memory`: `pileup memory` (growth tracing with eBPF, the processlist
//!   read while the server grows, /proc and the server's accounting each
//!   second);
//! - `memory-cost`: the same with `--probe-cost`, the probes timed by the
//!   kernel (which costs a clock read on either side of every run: a row of
//!   its own);
//! - `memory-focus`: the same with one sysbench connection's allocations
//!   sampled (uprobes on malloc, calloc, realloc and free: every allocator
//!   call of the server traps);
//! - `heaptrack`: heaptrack recording a server of its own, started under it
//!   and loaded alike for each of its windows (`heaptrack -p` attaches
//!   through gdb, whose calls into the process fail on hosts where gdb
//!   cannot restore the CPU's extended state, "Couldn't write extended
//!   state status"; started under heaptrack the same hooks record the same
//!   calls);
//! - `performance-schema`: a server started with performance_schema and
//!   every memory instrument on (its cost needs a restart and is paid
//!   always), its memory summary read each second.
//!
//! Reported per tool: throughput as a ratio of medians against the
//! windows without tracing and paired against its flanking windows (with a
//! 95% interval over rounds), and the tool's CPU.
//!
//! Time to answer: an idle server starts growing (a connection creating a
//! MEMORY table of ~25 MiB every 200 ms). Measured from the first growing
//! statement: `pileup memory --duration 1s` started then, until its report
//! names the statement; and `pileup watch` running before, with a growth
//! trigger held for 1 s and `--capture-memory 1s`, until its capture's
//! verdict names it.

const USAGE: &str = "Usage: memory-bench --pileup PATH [--connections 16] [--window 12] [--rounds 5] [--tools none,memory,memory-cost,memory-focus,heaptrack,performance-schema] [--answer-rounds 3] [--out FILE]";

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, children_cpu, lost, median, Load};
use pileup_sandbox::{Options, Sandbox};

/// Seconds of each window's sysbench run before measuring.
const WARMUP: Duration = Duration::from_secs(3);

#[derive(Default, Clone)]
struct Window {
    tps: f64,
    cpu_cores: f64,
    /// pileup memory: bytes first touched, and stacks copied.
    traced: Option<(u64, u64)>,
    /// memory-focus: the probes' cost to the server (cores), as printed.
    probe_cores: Option<f64>,
    /// memory-cost: the growth probes' runs a second and their time in the
    /// kernel (cores), from the kernel's BPF statistics.
    probe: Option<(f64, f64)>,
    ok: bool,
}

fn prepare(sb: &Sandbox) -> Result<Vec<String>> {
    pileup_bench_drivers::sysbench_prepared_sized(sb, "oltp_read_write", 1, 10000)
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").context("--pileup PATH is required")?;
    let conns: usize = arg(&args, "--connections").map(|s| s.parse()).transpose()?.unwrap_or(16);
    let window = Duration::from_secs(arg(&args, "--window").map(|s| s.parse()).transpose()?.unwrap_or(12));
    let rounds: usize = arg(&args, "--rounds").map(|s| s.parse()).transpose()?.unwrap_or(5);
    let answer_rounds: usize = arg(&args, "--answer-rounds").map(|s| s.parse()).transpose()?.unwrap_or(3);
    let tools: Vec<String> = arg(&args, "--tools")
        .unwrap_or_else(|| "none,memory,memory-cost,memory-focus,heaptrack,performance-schema".into())
        .split(',')
        .map(String::from)
        .collect();
    if tools.first().map(String::as_str) != Some("none") {
        bail!("--tools must start with none: every figure is against the windows without tracing");
    }
    let out = arg(&args, "--out");
    let cnf = |ps: bool| {
        let mut v = vec![("max_connections".to_string(), (conns + 50).to_string())];
        if ps {
            v.push(("performance_schema".into(), "ON".into()));
            v.push(("performance_schema_instrument".into(), "memory/%=COUNTED".into()));
        }
        v
    };
    let plain = Sandbox::start(Options { cnf: cnf(false), ..Default::default() })?;
    let plain_args = prepare(&plain)?;
    let ps = if tools.iter().any(|t| t == "performance-schema") {
        let sb = Sandbox::start(Options { cnf: cnf(true), ..Default::default() })?;
        let a = prepare(&sb)?;
        Some((sb, a))
    } else {
        None
    };
    let scratch = std::env::temp_dir().join(format!("pileup-memory-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut report = format!(
        "\nsysbench oltp_read_write, 1 table of 10,000 rows, {conns} connections on {cpus} cores; windows of {} s after a {} s warm-up, {rounds} rounds, tools interleaved; medians over rounds\n",
        window.as_secs(),
        WARMUP.as_secs(),
    );
    let mut results: Vec<Vec<Window>> = vec![vec![]; tools.len()];
    let mut running: Option<Load> = None;
    let paired = pileup_bench_drivers::interleaved(rounds, tools.len(), |i, r| {
        let tool = tools[i].as_str();
        let win = match tool {
            "performance-schema" => {
                let (sb, a) = ps.as_ref().context("no performance_schema server")?;
                running = None;
                let load = Load::start("oltp_read_write", a, conns)?;
                std::thread::sleep(WARMUP);
                run_window(tool, &pileup, sb, &load, window, &scratch)?
            }
            "heaptrack" => {
                running = None;
                // A server of its own for each window, started under
                // heaptrack.
                let wrapper = heaptrack_wrapper(&scratch)?;
                let sb = Sandbox::start(Options { cnf: cnf(false), launcher: Some(wrapper), ..Default::default() })?;
                let a = prepare(&sb)?;
                let load = Load::start("oltp_read_write", &a, conns)?;
                std::thread::sleep(WARMUP);
                let w = run_window(tool, &pileup, &sb, &load, window, &scratch)?;
                drop(load);
                sb.stop()?;
                w
            }
            _ => {
                if running.is_none() {
                    running = Some(Load::start("oltp_read_write", &plain_args, conns)?);
                    std::thread::sleep(WARMUP);
                }
                run_window(tool, &pileup, &plain, running.as_ref().unwrap(), window, &scratch)?
            }
        };
        eprintln!(
            "   round {r} {tool:<20} {:8.1} tps, tool CPU {:.3} cores{}{}",
            win.tps,
            win.cpu_cores,
            win.traced
                .map(|(b, s)| format!(", {:.1} MiB first touched, {s} stacks", b as f64 / 1048576.0))
                .unwrap_or_default(),
            win.probe_cores.map(|c| format!(", uprobes {c:.4} cores of the server")).unwrap_or_default()
                + &win
                    .probe
                    .map(|(r, c)| format!(", probes {r:.0} runs/s, {c:.4} cores in the kernel"))
                    .unwrap_or_default()
        );
        let tps = win.tps;
        results[i].push(win);
        Ok(tps)
    })?;
    drop(running);
    report.push_str(&table(&tools, &results, &paired, cpus));
    report.push_str(&time_to_answer(&pileup, answer_rounds, &scratch)?);
    let _ = std::fs::remove_dir_all(&scratch);
    print!("{report}");
    if let Some(o) = out {
        pileup_bench_drivers::write(o, &report)?;
    }
    Ok(())
}

/// One window of `tool` on `sb` under `load` (warmed up).
fn run_window(
    tool: &str,
    pileup: &str,
    sb: &Sandbox,
    load: &Load,
    window: Duration,
    scratch: &std::path::Path,
) -> Result<Window> {
    let pid = sb.pid().to_string();
    let sock = sb.endpoint.socket.display().to_string();
    let secs = format!("{}s", window.as_secs());
    let mut w = Window { ok: true, ..Default::default() };
    let cpu0 = children_cpu();
    let t0 = Instant::now();
    match tool {
        "none" => std::thread::sleep(window),
        "performance-schema" => {
            // What a user of the instruments does: read the summary.
            let mut c = sb.connect()?;
            while t0.elapsed() < window {
                let _: Vec<(String, i64)> = c.query(
                    "SELECT EVENT_NAME, CURRENT_NUMBER_OF_BYTES_USED FROM performance_schema.memory_summary_global_by_event_name ORDER BY 2 DESC LIMIT 20",
                )?;
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        "memory" | "memory-cost" | "memory-focus" => {
            let json = scratch.join("memory.json");
            let mut cmd = Command::new(pileup);
            cmd.args(["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", &secs, "-f", "json", "-o"]);
            cmd.arg(&json);
            if tool == "memory-cost" {
                cmd.arg("--probe-cost");
            }
            if tool == "memory-focus" {
                // One sysbench connection's allocations.
                let id: Option<u64> = sb.connect()?.query_first(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = 'sbtest' ORDER BY ID LIMIT 1",
                )?;
                let id = id.context("no sysbench connection to follow")?;
                cmd.args(["--focus", &format!("conn:{id}")]);
            }
            let s = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
            w.ok = s.success();
            if let Ok(j) = std::fs::read(&json)
                .map_err(anyhow::Error::from)
                .and_then(|b| Ok(serde_json::from_slice::<serde_json::Value>(&b)?))
            {
                let t = &j["traced"];
                let touched = t["growth"]["totals"]["anon_bytes"].as_u64().unwrap_or(0)
                    + t["growth"]["totals"]["file_bytes"].as_u64().unwrap_or(0);
                w.traced = Some((touched, t["counters"]["stacks"].as_u64().unwrap_or(0)));
                if let (Some(runs), Some(ns), Some(el)) =
                    (t["probe_cost"]["runs"].as_f64(), t["probe_cost"]["run_ns"].as_f64(), t["elapsed_s"].as_f64())
                {
                    w.probe = Some((runs / el.max(1e-3), ns / 1e9 / el.max(1e-3)));
                }
                if let (Some(cpu), Some(el)) =
                    (t["malloc"]["cost"]["server_cpu_s"].as_f64(), t["malloc"]["elapsed_s"].as_f64())
                {
                    w.probe_cores = Some(cpu / el.max(1e-3));
                }
            }
            let _ = std::fs::remove_file(&json);
        }
        "heaptrack" => {
            // heaptrack's interpreter reads the hooks' stream beside the
            // server: its CPU is the tool's.
            let before = heaptrack_cpu();
            std::thread::sleep(window);
            let t1 = Instant::now();
            w.cpu_cores = (heaptrack_cpu() - before) / (t1 - t0).as_secs_f64();
            w.tps = load.tps(t0, t1);
            w.ok = before > 0.0 || heaptrack_cpu() > 0.0;
            return Ok(w);
        }
        t => bail!("unknown tool {t}"),
    }
    let t1 = Instant::now();
    w.cpu_cores = (children_cpu() - cpu0) / (t1 - t0).as_secs_f64();
    w.tps = load.tps(t0, t1);
    Ok(w)
}

/// A script that runs the server it is given under heaptrack (its data in
/// `dir`), for a sandbox to start its server through: what the `heaptrack`
/// command does (its hooks preloaded, their stream read by
/// heaptrack_interpret into a compressed file), with the server exec'd so
/// that it keeps the process id the sandbox stops it by.
fn heaptrack_wrapper(dir: &std::path::Path) -> Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("mariadbd-under-heaptrack");
    let lib = "/usr/lib/heaptrack";
    if !std::path::Path::new(lib).join("libheaptrack_preload.so").exists() {
        bail!("heaptrack's library is not in {lib} (Debian: apt-get install heaptrack)");
    }
    let d = dir.display();
    let script = format!(
        "#!/bin/sh\npipe={d}/heaptrack.$$.pipe\nmkfifo \"$pipe\"\n{lib}/libexec/heaptrack_interpret < \"$pipe\" | gzip -c > {d}/heaptrack.$$.gz &\nexport LD_PRELOAD={lib}/libheaptrack_preload.so DUMP_HEAPTRACK_OUTPUT=\"$pipe\"\nexec \"$@\"\n"
    );
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// CPU seconds of every heaptrack interpreter running (one per server
/// started under heaptrack).
fn heaptrack_cpu() -> f64 {
    let mut total = 0.0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim().starts_with("heaptrack_inter") {
            total += pileup_bench_drivers::stat_cpu(&e.path().join("stat").to_string_lossy(), 2);
        }
    }
    total
}

fn table(tools: &[String], results: &[Vec<Window>], paired: &[Vec<f64>], cpus: usize) -> String {
    let base = median(&results[0].iter().map(|w| w.tps).filter(|x| x.is_finite()).collect::<Vec<f64>>());
    let mut md = format!("\n### throughput: {base:.0} tps without tracing\n\n");
    md.push_str("| tool | throughput (tps) | ÷ no tracing | ÷ flanking windows (paired) | throughput lost (paired), 95% interval | tool CPU (cores) | growth probes: runs a second / time in the kernel (cores), with --probe-cost | allocator probes' cost to the server (cores, as pileup prints it) | first touched / stacks (pileup) | failed windows |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let _ = cpus;
    for (i, tool) in tools.iter().enumerate() {
        let r = &results[i];
        let tps = median(&r.iter().map(|w| w.tps).filter(|x| x.is_finite()).collect::<Vec<f64>>());
        let traced: Vec<(u64, u64)> = r.iter().filter_map(|w| w.traced).collect();
        let traced = if traced.is_empty() {
            "–".to_string()
        } else {
            format!(
                "{:.1} MiB / {:.0}",
                median(&traced.iter().map(|t| t.0 as f64 / 1048576.0).collect::<Vec<f64>>()),
                median(&traced.iter().map(|t| t.1 as f64).collect::<Vec<f64>>())
            )
        };
        let probes: Vec<f64> = r.iter().filter_map(|w| w.probe_cores).collect();
        let kernel: Vec<(f64, f64)> = r.iter().filter_map(|w| w.probe).collect();
        let kernel = if kernel.is_empty() {
            "–".to_string()
        } else {
            format!(
                "{:.0} / {:.4}",
                median(&kernel.iter().map(|k| k.0).collect::<Vec<f64>>()),
                median(&kernel.iter().map(|k| k.1).collect::<Vec<f64>>())
            )
        };
        md.push_str(&format!(
            "| {} | {tps:.0} | {:.3} | {} | {} | {:.3} | {kernel} | {} | {traced} | {} |\n",
            describe(tool),
            tps / base,
            if i == 0 { "1.000".into() } else { format!("{:.3}", median(&paired[i].clone())) },
            if i == 0 { "–".into() } else { lost(&paired[i]) },
            median(&r.iter().map(|w| w.cpu_cores).collect::<Vec<f64>>()),
            if probes.is_empty() { "–".into() } else { format!("{:.4}", median(&probes)) },
            r.iter().filter(|w| !w.ok).count()
        ));
    }
    md
}

fn describe(tool: &str) -> String {
    match tool {
        "none" => "no tracing".into(),
        "memory" => "pileup memory (growth traced, 200 stacks a second)".into(),
        "memory-cost" => "pileup memory --probe-cost (the probes timed by the kernel)".into(),
        "memory-focus" => "pileup memory --focus conn:ID (one connection's allocations sampled too)".into(),
        "heaptrack" => "heaptrack (a server of its own started under it)".into(),
        "performance-schema" => "performance_schema, memory/% instruments on (a server started so)".into(),
        t => t.into(),
    }
}

/// A connection that grows the server: a MEMORY table of ~25 MiB every
/// 200 ms, 30 of them. Returns when its first statement was sent.
fn grower(sb: &Sandbox) -> Result<(std::thread::JoinHandle<()>, Instant)> {
    let mut c = sb.connect()?;
    c.query_drop("SET SESSION max_heap_table_size = 1024 * 1024 * 1024")?;
    c.query_drop("CREATE DATABASE IF NOT EXISTS grow")?;
    c.query_drop("USE grow")?;
    let stamp = std::process::id();
    let t0 = Instant::now();
    let h = std::thread::spawn(move || {
        for i in 0..30 {
            let sql = format!(
                "CREATE TABLE g{stamp}_{i} ENGINE=MEMORY SELECT seq, REPEAT('x', 200) AS pad FROM seq_1_to_100000"
            );
            if c.query_drop(sql).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    Ok((h, t0))
}

/// Seconds from the first growing statement to a report naming it, with
/// `pileup memory` started then and with `pileup watch` running before.
fn time_to_answer(pileup: &str, rounds: usize, scratch: &std::path::Path) -> Result<String> {
    let mut cli = vec![];
    let mut watch = vec![];
    for r in 0..rounds {
        // pileup memory --duration 1s, started as the growth begins.
        let sb = Sandbox::start(Options::default())?;
        let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.display().to_string());
        let (h, t0) = grower(&sb)?;
        let out = Command::new(pileup)
            .args(["memory", "--pid", &pid, "-S", &sock, "-u", "root", "--duration", "1s", "-f", "json"])
            .output()?;
        let took = t0.elapsed().as_secs_f64();
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let named = j["traced"]["growth"]["by_statement"][0]["class"]
            .as_str()
            .is_some_and(|c| c.contains("engine = memory") || c.contains("engine=memory"));
        eprintln!("   answer round {r}: pileup memory --duration 1s {took:.2} s, statement named: {named}");
        cli.push(if named { took } else { f64::NAN });
        let _ = h.join();
        sb.stop()?;

        // pileup watch, running before, with a growth trigger.
        let sb = Sandbox::start(Options::default())?;
        let (pid, sock) = (sb.pid().to_string(), sb.endpoint.socket.display().to_string());
        let data = scratch.join(format!("watch-{r}"));
        let mut w = Command::new(pileup)
            .args(["watch", "--pid", &pid, "-S", &sock, "-u", "root", "--json", "--interval", "200ms"])
            .args(["--trigger", "mysqld_rss_growth_rate > 50000000 for 1s", "--capture-memory", "1s", "--data-dir"])
            .arg(&data)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let lines = std::io::BufReader::new(w.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        // Polling before the growth begins.
        while rx.recv_timeout(Duration::from_secs(30)).is_ok_and(|v| v["event"] != "poll") {}
        std::thread::sleep(Duration::from_secs(2));
        let (h, t0) = grower(&sb)?;
        let mut took = f64::NAN;
        while t0.elapsed() < Duration::from_secs(30) {
            let Ok(v) = rx.recv_timeout(Duration::from_millis(100)) else { continue };
            if v["event"] == "captured" {
                let verdict = v["verdict"].as_str().unwrap_or("").to_lowercase();
                if verdict.starts_with("memory growth") && verdict.contains("engine=memory") {
                    took = t0.elapsed().as_secs_f64();
                }
                break;
            }
        }
        eprintln!("   answer round {r}: pileup watch {took:.2} s");
        watch.push(took);
        let _ = w.kill();
        let _ = w.wait();
        let _ = h.join();
        sb.stop()?;
    }
    let fmt = |v: &[f64]| {
        let ok: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        let spread = |f: fn(f64, f64) -> f64| ok.iter().copied().fold(ok.first().copied().unwrap_or(f64::NAN), f);
        format!(
            "{:.2} s (range {:.2}–{:.2}; named in {} of {})",
            median(&ok.clone()),
            spread(f64::min),
            spread(f64::max),
            ok.len(),
            v.len()
        )
    };
    Ok(format!(
        "\n### time to answer: from the first growing statement to a report naming it\n\nAn idle server, one connection creating a MEMORY table of ~25 MiB every 200 ms; {rounds} rounds, medians.\n\n| how | seconds to the statement named |\n|---|---|\n| `pileup memory --duration 1s`, started as the growth begins | {} |\n| `pileup watch` running, trigger `mysqld_rss_growth_rate > 50000000 for 1s`, `--capture-memory 1s` | {} |\n| heaptrack | never: it records allocations by stack, not by statement or connection |\n| performance_schema memory instruments | never by statement: bytes by instrument and thread, and only on a server started with them |\n",
        fmt(&cli),
        fmt(&watch)
    ))
}
