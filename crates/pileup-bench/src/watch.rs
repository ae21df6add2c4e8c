//! Watch benchmark: what watching costs and how fast it catches a stall,
//! pileup against pt-stalk, side by side in one run.
//!
//! 1. Throughput: sysbench oltp_read_only (8 threads, 20 s) with no watcher,
//!    `pileup watch` at 1 s and at 100 ms, and pt-stalk with its defaults
//!    (polling Threads_running every second), interleaved over `--rounds`
//!    rounds; median transactions per second and the ratio to no watcher.
//! 2. Onset to first stack: a hot-row lock convoy (one open transaction, 30
//!    connections updating the same row) under light load; time from the
//!    convoy's start to the first stack file each tool writes, both with
//!    their default triggers (pileup: threads_running > 4×CPUs for 1 s;
//!    pt-stalk: Threads_running > 25 for 5 cycles, `--collect-gdb`).
//!
//! Usage: watch-bench --pileup PATH [--rounds 3] [--out FILE]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use mysql::prelude::Queryable;
use pileup_sandbox::{Options, Sandbox};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn sysbench_args(sock: &str) -> Vec<String> {
    vec!["--db-driver=mysql".into(), format!("--mysql-socket={sock}"), "--mysql-user=root".into(), "--tables=4".into(), "--table-size=10000".into()]
}

fn start_watcher(kind: &str, pileup: &str, sb: &Sandbox, dir: &Path) -> Result<Option<Child>> {
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let pid = sb.pid().to_string();
    std::fs::create_dir_all(dir)?;
    let c = match kind {
        "none" => return Ok(None),
        "pileup 1s" | "pileup 100ms" => Command::new(pileup)
            .args(["watch", "-S", &sock, "-u", "root", "--pid", &pid, "--data-dir", dir.to_str().unwrap()])
            .args(["--interval", if kind == "pileup 1s" { "1s" } else { "100ms" }])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
        "pt-stalk" | "pt-stalk gdb" => {
            let mut c = Command::new("pt-stalk");
            c.args(["--socket", &sock, "--user", "root", "--dest", dir.to_str().unwrap(), "--log", dir.join("pt-stalk.log").to_str().unwrap()]);
            c.args(["--pid", dir.join("pt-stalk.pid").to_str().unwrap(), "--iterations", "1"]);
            if kind == "pt-stalk gdb" {
                c.arg("--collect-gdb");
            }
            c.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?
        }
        _ => bail!("unknown watcher {kind}"),
    };
    std::thread::sleep(Duration::from_secs(2));
    Ok(Some(c))
}

fn stop(c: Option<Child>) {
    if let Some(mut c) = c {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn tps(sock: &str) -> Result<f64> {
    let out = Command::new("sysbench").arg("oltp_read_only").args(sysbench_args(sock)).args(["--threads=8", "--time=20", "run"]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("transactions:")).unwrap_or("");
    // "    transactions:                        12345  (617.21 per sec.)"
    let per_sec = line.split('(').nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| s.parse().ok());
    per_sec.ok_or_else(|| anyhow::anyhow!("could not read sysbench output: {text}"))
}

/// Earliest modification time, after `since`, of a file named like `pat` below `dir`.
fn first_file(dir: &Path, pat: &str, since: std::time::SystemTime) -> Option<std::time::SystemTime> {
    let mut best: Option<std::time::SystemTime> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n.to_string_lossy().contains(pat)) {
                if let Some(m) = e.metadata().ok().and_then(|m| m.modified().ok()).filter(|m| *m >= since) {
                    best = Some(best.map_or(m, |b| b.min(m)));
                }
            }
        }
    }
    best
}

fn convoy(pileup: &str, kind: &str, root: &Path, round: usize) -> Result<Option<f64>> {
    let sb = Sandbox::start(Options::default())?;
    sb.sql("CREATE DATABASE w; CREATE TABLE w.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO w.hot VALUES (1, 0)")?;
    let dir = root.join(format!("convoy-{}-{round}", kind.replace(' ', "-")));
    let w = start_watcher(kind, pileup, &sb, &dir)?;
    std::thread::sleep(Duration::from_secs(3));
    let mut holder = sb.connect()?;
    holder.query_drop("BEGIN")?;
    holder.query_drop("UPDATE w.hot SET v = v + 1 WHERE id = 1")?;
    let onset = std::time::SystemTime::now();
    let waiters: Vec<_> = (0..30)
        .map(|_| {
            let spec = sb.conn_spec();
            std::thread::spawn(move || {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 40");
                    let _ = c.query_drop("UPDATE w.hot SET v = v + 1 WHERE id = 1");
                }
            })
        })
        .collect();
    let pat = if kind.starts_with("pileup") { "stacks.json" } else { "stacktrace" };
    let t0 = Instant::now();
    let mut found = None;
    while t0.elapsed() < Duration::from_secs(35) {
        if let Some(t) = first_file(&dir, pat, onset) {
            found = t.duration_since(onset).ok().map(|d| d.as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    holder.query_drop("ROLLBACK")?;
    for w in waiters {
        let _ = w.join();
    }
    stop(w);
    Ok(found)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let get = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let pileup = get("--pileup").expect("--pileup PATH");
    let rounds: usize = get("--rounds").map(|s| s.parse().unwrap()).unwrap_or(3);
    let root = PathBuf::from(std::env::temp_dir()).join(format!("pileup-watch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    // 1. Throughput.
    let sb = Sandbox::start(Options::default())?;
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    sb.sql("CREATE DATABASE sbtest")?;
    Command::new("sysbench").arg("oltp_read_only").args(sysbench_args(&sock)).arg("prepare").stdout(Stdio::null()).status()?;
    let kinds = ["none", "pileup 1s", "pileup 100ms", "pt-stalk"];
    let mut res: Vec<Vec<f64>> = vec![vec![]; kinds.len()];
    for r in 0..rounds {
        for (i, k) in kinds.iter().enumerate() {
            let w = start_watcher(k, &pileup, &sb, &root.join(format!("tput-{r}-{i}")))?;
            let t = tps(&sock)?;
            stop(w);
            eprintln!("round {r} {k:<14} {t:8.1} tps");
            res[i].push(t);
        }
    }
    drop(sb);
    let base = median(res[0].clone());
    let mut md = format!("\n### Throughput while watching (sysbench oltp_read_only, 8 threads, 20 s runs, {rounds} interleaved rounds, medians)\n\n| watcher | tx/s | vs no watcher |\n|---|---|---|\n");
    for (i, k) in kinds.iter().enumerate() {
        let m = median(res[i].clone());
        md.push_str(&format!("| {k} | {m:.1} | {:+.2}% |\n", (m / base - 1.0) * 100.0));
    }
    md.push_str(&format!("\nRuns: {}\n", kinds.iter().zip(&res).map(|(k, v)| format!("{k}: {}", v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", "))).collect::<Vec<_>>().join("; ")));

    // 2. Onset to first stack.
    md.push_str("\n### Hot-row convoy: stall onset to first captured stack (default triggers)\n\n| tool | seconds from onset to first stack file |\n|---|---|\n");
    for k in ["pileup 1s", "pt-stalk gdb"] {
        let mut v = vec![];
        for round in 0..rounds {
            match convoy(&pileup, k, &root, round)? {
                Some(s) => v.push(s),
                None => eprintln!("{k}: no stack within 35 s"),
            }
        }
        eprintln!("{k}: {v:?}");
        let shown = if v.is_empty() { "none within 35 s".into() } else { format!("{:.2} (runs: {})", median(v.clone()), v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")) };
        md.push_str(&format!("| {k} | {shown} |\n"));
    }
    print!("{md}");
    if let Some(o) = get("--out") {
        std::fs::write(o, &md)?;
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
