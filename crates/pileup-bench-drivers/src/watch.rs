//! Watch benchmark: what watching costs and how fast it catches a stall,
//! pileup against pt-stalk, side by side in one run.
//!
//! 1. Throughput: sysbench oltp_read_only (8 threads, 20 s) with no watcher,
//!    `pileup watch` at 1 s (with and without its 100 ms thread scan) and at
//!    100 ms, and pt-stalk with its defaults
//!    (polling Threads_running every second), interleaved over `--rounds`
//!    rounds (the order rotating each round); median transactions per second and the ratio to no watcher.
//! 2. Onset to first stack: seven stalls on a default server (no plugin,
//!    performance_schema off): the four that hold up 30 connections (a
//!    hot-row lock convoy, FLUSH TABLES WITH READ LOCK, an ALTER waiting
//!    for an open transaction with readers queued behind it, and the
//!    datadir's device throttled under point selects that read from disk),
//!    and three whose sufferers are few or not held up at all (a table-open
//!    storm, a connection storm over TCP, and a flushing storm when writers
//!    outrun a small redo log, whose onset is when the checkpoint age first
//!    passes 7/8 of its maximum); for the classes, the watcher
//!    first learns 20 s of steady load, and its CPU is measured while it
//!    watches that load and, apart, from the stall on (its capture
//!    included). Time from the stall's onset to the
//!    first stack file each tool writes, both with their default triggers
//!    (pt-stalk: Threads_running > 25 for 5 cycles, `--collect-gdb`). The
//!    server runs as `mysqld` here: pt-stalk only looks for that name. Each
//!    tool's watcher CPU over the run is measured too (% of one core).
//!
//! 3. Idle cost: against an idle server, the server's CPU (answering the
//!    polls) and the watcher's own, 30 s each: the cost without the noise
//!    of a loaded shared box.
//!
//! 4. Short stalls: FLUSH TABLES WITH READ LOCK held 50 ms to 500 ms under
//!    write load, over and over: how many of them the thread scan records as
//!    stalls, and how long it says they were.
//!
//! Usage: see [`USAGE`] (what `--help` prints).

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: watch-bench --pileup PATH [--rounds 3] [--part all|throughput|idle|onset|short] [--stalls convoy,ftwrl,mdl,slow-disk,table-open,connection,flushing] [--out FILE]";

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median};
use pileup_sandbox::throttle::{Limit, Throttle};
use pileup_sandbox::{Options, Sandbox};

fn sysbench_args(sock: &str) -> Vec<String> {
    vec![
        "--db-driver=mysql".into(),
        format!("--mysql-socket={sock}"),
        "--mysql-user=root".into(),
        "--tables=4".into(),
        "--table-size=10000".into(),
    ]
}

fn start_watcher(kind: &str, pileup: &str, sb: &Sandbox, dir: &Path) -> Result<Option<Child>> {
    let sock = sb.endpoint.socket.to_string_lossy().into_owned();
    let pid = sb.pid().to_string();
    std::fs::create_dir_all(dir)?;
    let c = match kind {
        "none" => return Ok(None),
        "pileup 1s" | "pileup 1s, no scan" | "pileup 100ms" => {
            let mut c = Command::new(pileup);
            c.args(["watch", "-S", &sock, "-u", "root", "--pid", &pid, "--data-dir", dir.to_str().unwrap()])
                .args(["--interval", if kind == "pileup 100ms" { "100ms" } else { "1s" }])
                .args(if kind.ends_with("no scan") { &["--scan-interval", "0"][..] } else { &[][..] })
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // PILEUP_BENCH_LOG keeps each watcher's debug log beside its captures.
            if std::env::var_os("PILEUP_BENCH_LOG").is_some() {
                c.arg("-vv").stderr(std::fs::File::create(dir.join("watch.log"))?);
            }
            c.spawn()?
        }
        "pt-stalk" | "pt-stalk gdb" => {
            let mut c = Command::new("pt-stalk");
            c.args([
                "--socket",
                &sock,
                "--user",
                "root",
                "--dest",
                dir.to_str().unwrap(),
                "--log",
                dir.join("pt-stalk.log").to_str().unwrap(),
            ]);
            c.args(["--pid", dir.join("pt-stalk.pid").to_str().unwrap(), "--iterations", "1"]);
            if kind == "pt-stalk gdb" {
                c.arg("--collect-gdb");
            }
            // Its own process group: stopping it stops the collectors it forks.
            use std::os::unix::process::CommandExt;
            c.process_group(0);
            c.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?
        }
        _ => bail!("unknown watcher {kind}"),
    };
    std::thread::sleep(Duration::from_secs(2));
    Ok(Some(c))
}

/// CPU seconds a watcher and the children it has reaped used so far
/// (utime + stime + cutime + cstime from /proc/PID/stat): pt-stalk's work is
/// done by the `mysql` clients it starts each second.
fn cpu_secs(c: &Option<Child>) -> f64 {
    c.as_ref().map_or(0.0, |c| stat_cpu_secs(c.id(), 4))
}

fn stat_cpu_secs(pid: u32, fields: usize) -> f64 {
    pileup_bench_drivers::stat_cpu(&format!("/proc/{pid}/stat"), fields)
}

/// A watcher stopped when this goes out of scope, an error's early
/// return included (a dropped `Child` is not killed: pt-stalk would go on).
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        stop(self.0.take());
    }
}

fn stop(c: Option<Child>) {
    if let Some(mut c) = c {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
        // pt-stalk runs in its own group: the collectors it forked too.
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGKILL);
        let _ = c.kill();
        let _ = c.wait();
    }
}

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

/// The server binary under the name `mysqld`: pt-stalk looks for a process
/// called `mysqld` (`pidof mysqld`) and silently collects no stacks from one
/// called `mariadbd`, MariaDB's binary name since 10.5.
fn mysqld_named(root: &Path) -> Result<PathBuf> {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin)?;
    let link = bin.join("mysqld");
    if !link.exists() {
        let real = ["/usr/sbin/mariadbd", "/usr/bin/mariadbd"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| anyhow::anyhow!("mariadbd not found"))?;
        std::os::unix::fs::symlink(real, &link)?;
    }
    Ok(link)
}

/// When the first stack taken from `from` on was taken, in seconds after
/// `onset` (negative: before it): pileup records each sample's time in
/// stacks.json; for pt-stalk, the creation time of its gdb output file (the
/// shell creates it just before gdb attaches: the most favourable reading).
fn first_stack(dir: &Path, kind: &str, from: std::time::SystemTime, onset: std::time::SystemTime) -> Option<f64> {
    let (from, onset) = (unix_secs(from), unix_secs(onset));
    let at = if kind.starts_with("pileup") {
        // The earliest capture begun since `from` (one before it, on the
        // steady load, is counted apart).
        find_files(dir, "stacks.json")
            .into_iter()
            .filter_map(|f| {
                let j: serde_json::Value = serde_json::from_slice(&std::fs::read(f).ok()?).ok()?;
                Some(j["samples"][0]["at_unix_ms"].as_f64()? / 1000.0)
            })
            .filter(|at| *at >= from)
            .min_by(f64::total_cmp)?
    } else {
        find_files(dir, "stacktrace")
            .into_iter()
            .filter_map(|p| std::fs::metadata(p).ok().and_then(|m| m.created().or_else(|_| m.modified()).ok()))
            .map(unix_secs)
            .filter(|t| *t >= from)
            .min_by(f64::total_cmp)?
    };
    Some(at - onset)
}

fn find_files(dir: &Path, pat: &str) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n.to_string_lossy().contains(pat)) {
                out.push(p);
            }
        }
    }
    out
}

/// The stalls the onset part provokes, each holding up 30 connections.
const STALLS: &[(&str, &str)] = &[
    ("convoy", "hot-row convoy: one transaction holds a row, 30 connections update it"),
    ("ftwrl", "global read lock: FLUSH TABLES WITH READ LOCK held, 30 connections insert"),
    ("mdl", "metadata lock: ALTER TABLE waits for an open transaction, 30 connections read the table behind it"),
    (
        "slow-disk",
        "slow disk: 30 connections run 5,000 point selects a second on 4 × 40,000 rows through an 8 MB buffer pool, and the volume drops to 40 reads a second",
    ),
    (
        "table-open",
        "table-open storm: 400 tables and table_open_cache=64; after two clients read a cached few, 48 connections read them all in turn",
    ),
    ("connection", "connection storm: beside two steady clients, 96 clients connect over TCP, run SELECT 1 and disconnect, over and over"),
    (
        "flushing",
        "flushing storm: a 4 MB redo log and a page cleaner told the disk does 100 pages a second, 4 connections writing 2 transactions a second, then 32 more writing unthrottled; the onset is when the checkpoint age, read every 50 ms, first passes 7/8 of its maximum (where InnoDB starts flushing at full speed)",
    ),
];

/// Run `work(connection slot, client number, iteration)` on `n` threads until `stop`.
fn clients(
    n: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    work: impl Fn(&mut Option<mysql::Conn>, usize, u64) + Send + Sync + 'static,
) -> Vec<std::thread::JoinHandle<()>> {
    let work = std::sync::Arc::new(work);
    (0..n)
        .map(|i| {
            let (stop, work) = (stop.clone(), work.clone());
            std::thread::spawn(move || {
                let (mut c, mut k) = (None, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    work(&mut c, i, k);
                    k += 1;
                }
            })
        })
        .collect()
}

/// Clients stopped and joined when this goes out of scope.
struct Clients(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Drop for Clients {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// The storms and the flushing storm: a steady load while the watcher
/// learns it (20 s: the default triggers judge against the server's own
/// baseline), then the stall; seconds from its onset to the first stack.
fn class_onset(pileup: &str, kind: &str, stall: &str, root: &Path, round: usize) -> Result<Onset> {
    let cnf: Vec<(String, String)> = match stall {
        "table-open" => {
            vec![("table_open_cache".into(), "64".into()), ("table_open_cache_instances".into(), "1".into())]
        }
        "flushing" => vec![
            ("innodb_log_file_size".into(), "4M".into()),
            ("innodb_io_capacity".into(), "100".into()),
            ("innodb_io_capacity_max".into(), "100".into()),
            ("innodb_flush_log_at_trx_commit".into(), "2".into()),
        ],
        _ => vec![],
    };
    let sb = Sandbox::start(Options { mariadbd: Some(mysqld_named(root)?), cnf, ..Options::default() })?;
    let dir = root.join(format!("{stall}-{}-{round}", kind.replace([' ', ','], "-")));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut steady = Clients(stop.clone(), vec![]);
    let mut load = None;
    let mut gauge_spec = None;
    let mut sbargs_flush = vec![];
    match stall {
        "table-open" => {
            let mut ddl = String::from("CREATE DATABASE t;");
            for i in 0..400 {
                ddl += &format!("CREATE TABLE t.t{i} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB;");
            }
            sb.sql(&ddl)?;
            let spec = sb.conn_spec();
            steady.1 = clients(2, &stop, move |c, i, k| {
                let t = (i as u64 * 3 + k) % 8;
                let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop(format!("SELECT * FROM t.t{t}"));
            });
        }
        "connection" => {
            let spec = sb.conn_spec();
            steady.1 = clients(2, &stop, move |c, _, _| {
                let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop("SELECT 1");
            });
        }
        _ => {
            let mut sbargs = pileup_bench_drivers::sysbench_prepared_sized(&sb, "oltp_write_only", 4, 20_000)?;
            sbargs_flush = sbargs.clone();
            // Few enough that the checkpoint age stays low while the
            // watcher learns: the storm's onset is then a change.
            sbargs.push("--rate=2".into());
            // The prepare leaves the checkpoint age high: flushed at full
            // speed until it falls, then the slow page cleaner again.
            sb.sql(
                "SET GLOBAL innodb_io_capacity_max = 20000, innodb_io_capacity = 10000, innodb_max_dirty_pages_pct = 0",
            )?;
            let settle = Instant::now();
            while checkpoint_age_pct(&mut sb.connect()?)? > 5.0 {
                anyhow::ensure!(
                    settle.elapsed() < Duration::from_secs(60),
                    "the checkpoint age never fell after the prepare"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            sb.sql("SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT, innodb_io_capacity = 100, innodb_io_capacity_max = 100")?;
            load = Some(pileup_bench_drivers::Load::start("oltp_write_only", &sbargs, 4)?);
            gauge_spec = Some(sb.conn_spec());
        }
    }
    let w = Running(start_watcher(kind, pileup, &sb, &dir)?);
    let (cpu0, run0) = (cpu_secs(&w.0), Instant::now());
    // pileup's baselines need 10 values older than 5 s. The checkpoint age
    // is followed meanwhile: a storm already under way (the age past 7/8 of
    // its maximum) has no onset.
    let mut learnt_age = 0.0f64;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(spec) = &gauge_spec {
            learnt_age = learnt_age.max(checkpoint_age_pct(&mut spec.connect()?)?);
        }
    }
    anyhow::ensure!(
        learnt_age < 87.5,
        "the checkpoint age reached {learnt_age:.0}% under the steady load, before the flushing storm"
    );
    // What watching the steady load cost, apart from any capture.
    let watching = (cpu_secs(&w.0) - cpu0) / run0.elapsed().as_secs_f64() * 100.0;
    let cpu1 = cpu_secs(&w.0);
    let from = std::time::SystemTime::now();
    let from_instant = Instant::now();
    let storm_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut storm = Clients(storm_stop.clone(), vec![]);
    let mut more = None;
    match stall {
        "table-open" => {
            let spec = sb.conn_spec();
            storm.1 = clients(48, &storm_stop, move |c, i, k| {
                let t = (i as u64 * 7919 + k * 104_729) % 400;
                let _ = c.get_or_insert_with(|| spec.connect().unwrap()).query_drop(format!("SELECT * FROM t.t{t}"));
            });
        }
        "connection" => {
            // Over TCP, as an application server's clients come.
            let mut spec = sb.conn_spec();
            spec.host = Some("127.0.0.1".into());
            spec.socket = None;
            spec.port = sb.endpoint.port;
            storm.1 = clients(96, &storm_stop, move |_, _, _| {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SELECT 1");
                }
            });
        }
        // Eight times the writers, unthrottled: the redo log fills faster
        // than the page cleaner, told the disk is slow, flushes.
        _ => more = Some(pileup_bench_drivers::Load::start("oltp_write_only", &sbargs_flush, 32)?),
    }
    // The onset: the storm's start, or when the checkpoint age passed 7/8.
    let gauge = gauge_spec.map(|spec| AgeGauge::start(spec, 87.5)).transpose()?;
    let t0 = Instant::now();
    let (mut onset, mut first) = (None, None);
    while t0.elapsed() < Duration::from_secs(35) && (onset.is_none() || first.is_none()) {
        onset = match &gauge {
            Some(g) => g.first_over().map(|at| from + at.duration_since(from_instant)),
            None => Some(from),
        };
        first = onset.and_then(|o| first_stack(&dir, kind, from, o));
        std::thread::sleep(Duration::from_millis(100));
    }
    let verdict = (kind.starts_with("pileup") && first.is_some())
        .then(|| verdict_after(&dir, from, Duration::from_secs(15)))
        .flatten();
    if onset.is_none() {
        eprintln!("{stall} {kind}: the checkpoint age never passed 7/8 of its maximum within 35 s");
    }
    drop(storm);
    drop(more);
    drop(gauge);
    drop(load);
    drop(steady);
    let before = kept_before(&dir, from);
    let stall_cpu = cpu_secs(&w.0) - cpu1;
    drop(w);
    Ok(Onset { first_stack: first, verdict, before, cpu: watching, stall_cpu: Some(stall_cpu) })
}

/// The checkpoint age as a share of its maximum, %.
fn checkpoint_age_pct(c: &mut mysql::Conn) -> Result<f64> {
    let rows: Vec<(String, f64)> = c.query("SHOW GLOBAL STATUS LIKE 'Innodb_checkpoint%age'")?;
    let get = |n: &str| rows.iter().find(|r| r.0.eq_ignore_ascii_case(n)).map(|r| r.1);
    match (get("Innodb_checkpoint_age"), get("Innodb_checkpoint_max_age")) {
        (Some(age), Some(max)) if max > 0.0 => Ok(100.0 * age / max),
        _ => anyhow::bail!("the server reports no checkpoint age"),
    }
}

/// When the checkpoint age first reached a share of its maximum, read
/// every 50 ms on a connection of its own until then.
struct AgeGauge {
    first: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl AgeGauge {
    fn start(spec: pileup_conn::ConnSpec, pct: f64) -> Result<AgeGauge> {
        let mut c = spec.connect()?;
        let first = std::sync::Arc::new(std::sync::Mutex::new(None));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (f, st) = (first.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let at = Instant::now();
                match checkpoint_age_pct(&mut c) {
                    Ok(p) if p >= pct => {
                        *f.lock().unwrap() = Some(at);
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Ok(AgeGauge { first, stop, handle: Some(handle) })
    }

    fn first_over(&self) -> Option<Instant> {
        *self.first.lock().unwrap()
    }
}

impl Drop for AgeGauge {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What one provoked stall gave: seconds from its start to the watcher's
/// first stack, and pileup's verdict (its first words) once the capture
/// is kept.
struct Onset {
    first_stack: Option<f64>,
    verdict: Option<String>,
    /// Captures kept before the stall began (a false alarm on the steady load).
    before: usize,
    /// The watcher's CPU while it watched the load before the stall (% of
    /// one core; the lock stalls come 3 s after it starts, its start-up
    /// included).
    cpu: f64,
    /// CPU-seconds the watcher used from the stall's start to the end of
    /// the run (its capture included).
    stall_cpu: Option<f64>,
}

/// The verdict of the first capture kept after `onset`, up to its first
/// colon (the class), waiting up to `within`.
fn verdict_after(dir: &Path, onset: std::time::SystemTime, within: Duration) -> Option<String> {
    let since = unix_secs(onset);
    let t0 = Instant::now();
    loop {
        let first = kept(dir).into_iter().filter(|(at, _)| *at >= since).min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, v)) = first {
            return Some(v.split([':', ';']).next().unwrap_or(&v).to_string());
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Captures kept in `dir` before `onset`.
fn kept_before(dir: &Path, onset: std::time::SystemTime) -> usize {
    let since = unix_secs(onset);
    kept(dir).into_iter().filter(|(at, _)| *at < since).count()
}

/// The captures pileup kept in `dir`: when each fired, and its verdict.
fn kept(dir: &Path) -> Vec<(f64, String)> {
    find_files(dir, "evidence.json")
        .into_iter()
        .filter_map(|f| {
            let j: serde_json::Value = serde_json::from_slice(&std::fs::read(f).ok()?).ok()?;
            Some((j["unix"].as_f64()?, j["verdict"].as_str()?.to_string()))
        })
        .collect()
}

fn unix_secs(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Wait up to 35 s for the watcher's first stack after `onset`.
fn wait_first_stack(dir: &Path, kind: &str, onset: std::time::SystemTime) -> Option<f64> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(35) {
        if let Some(t) = first_stack(dir, kind, onset, onset) {
            return Some(t);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// A slow disk under a steady load: 30 connections run point selects on
/// data far larger than the buffer pool while the watcher learns the load,
/// then the datadir's device drops to 40 reads a second (the onset), until
/// the watcher has its stacks and verdict.
fn slow_disk_onset(pileup: &str, kind: &str, stall: &str, root: &Path, round: usize) -> Result<Onset> {
    let sb = Sandbox::start(Options {
        mariadbd: Some(mysqld_named(root)?),
        cnf: vec![("innodb_buffer_pool_size".into(), "8M".into())],
        ..Options::default()
    })?;
    let test = "oltp_point_select";
    let mut sbargs = pileup_bench_drivers::sysbench_prepared_sized(&sb, test, 4, 40_000)?;
    // Held below what the machine's cores serve, so the steady load is not
    // itself a pile-up of running threads that a default trigger captures.
    sbargs.push("--rate=5000".into());
    let load = pileup_bench_drivers::Load::start(test, &sbargs, 30)?;
    let dir = root.join(format!("{stall}-{}-{round}", kind.replace([' ', ','], "-")));
    let w = Running(start_watcher(kind, pileup, &sb, &dir)?);
    let (cpu0, run0) = (cpu_secs(&w.0), Instant::now());
    std::thread::sleep(Duration::from_secs(8));
    // The onset is the moment the volume slows: the stall is the server's
    // answer to it, however long its queues take to build.
    let onset = std::time::SystemTime::now();
    let watching = (cpu_secs(&w.0) - cpu0) / run0.elapsed().as_secs_f64() * 100.0;
    let cpu1 = cpu_secs(&w.0);
    let throttle = Throttle::new(&sb, Limit::ReadIops(40))?;
    let first_stack = wait_first_stack(&dir, kind, onset);
    let verdict = (kind.starts_with("pileup") && first_stack.is_some())
        .then(|| verdict_after(&dir, onset, Duration::from_secs(15)))
        .flatten();
    drop(throttle);
    drop(load);
    let before = kept_before(&dir, onset);
    let stall_cpu = cpu_secs(&w.0) - cpu1;
    drop(w);
    Ok(Onset { first_stack, verdict, before, cpu: watching, stall_cpu: Some(stall_cpu) })
}

/// Provoke `stall` on a fresh sandbox watched by `kind`; seconds from its
/// start to the watcher's first stack.
fn stall_onset(pileup: &str, kind: &str, stall: &str, root: &Path, round: usize) -> Result<Onset> {
    if stall == "slow-disk" {
        return slow_disk_onset(pileup, kind, stall, root, round);
    }
    if ["table-open", "connection", "flushing"].contains(&stall) {
        return class_onset(pileup, kind, stall, root, round);
    }
    let sb = Sandbox::start(Options { mariadbd: Some(mysqld_named(root)?), ..Options::default() })?;
    sb.sql("CREATE DATABASE w; CREATE TABLE w.hot (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO w.hot VALUES (1, 0)")?;
    let dir = root.join(format!("{stall}-{}-{round}", kind.replace([' ', ','], "-")));
    let w = Running(start_watcher(kind, pileup, &sb, &dir)?);
    let (cpu0, run0) = (cpu_secs(&w.0), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let mut holder = sb.connect()?;
    let mut ddl = None;
    let waiter_sql = match stall {
        "convoy" => {
            holder.query_drop("BEGIN")?;
            holder.query_drop("UPDATE w.hot SET v = v + 1 WHERE id = 1")?;
            "UPDATE w.hot SET v = v + 1 WHERE id = 1"
        }
        "ftwrl" => {
            holder.query_drop("FLUSH TABLES WITH READ LOCK")?;
            "UPDATE w.hot SET v = v + 1 WHERE id = 1"
        }
        _ => {
            holder.query_drop("BEGIN")?;
            holder.query_drop("SELECT * FROM w.hot")?;
            let spec = sb.conn_spec();
            ddl = Some(std::thread::spawn(move || {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SET SESSION lock_wait_timeout = 40");
                    let _ = c.query_drop("ALTER TABLE w.hot ADD COLUMN x INT");
                }
            }));
            // Readers queue only once the ALTER waits.
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                let n: Option<i64> = holder.query_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'ALTER TABLE w.hot%' AND STATE LIKE 'Waiting for table metadata lock'",
                )?;
                if n.unwrap_or(0) > 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            "SELECT * FROM w.hot"
        }
    };
    let onset = std::time::SystemTime::now();
    let watching = (cpu_secs(&w.0) - cpu0) / run0.elapsed().as_secs_f64() * 100.0;
    let cpu1 = cpu_secs(&w.0);
    let waiters: Vec<_> = (0..30)
        .map(|_| {
            let spec = sb.conn_spec();
            std::thread::spawn(move || {
                if let Ok(mut c) = spec.connect() {
                    let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 40, lock_wait_timeout = 40");
                    let _ = c.query_drop(waiter_sql);
                }
            })
        })
        .collect();
    let first_stack = wait_first_stack(&dir, kind, onset);
    // Held until pileup keeps its capture (a pile-up that lasts 2 s), for its verdict.
    let verdict = (kind.starts_with("pileup") && first_stack.is_some())
        .then(|| verdict_after(&dir, onset, Duration::from_secs(10)))
        .flatten();
    holder.query_drop(if stall == "ftwrl" { "UNLOCK TABLES" } else { "ROLLBACK" })?;
    for w in waiters.into_iter().chain(ddl) {
        let _ = w.join();
    }
    let before = kept_before(&dir, onset);
    let stall_cpu = cpu_secs(&w.0) - cpu1;
    drop(w);
    Ok(Onset { first_stack, verdict, before, cpu: watching, stall_cpu: Some(stall_cpu) })
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = arg(&args, "--pileup").expect("--pileup PATH");
    let rounds: usize = arg(&args, "--rounds").map(|s| s.parse().unwrap()).unwrap_or(3);
    let part = arg(&args, "--part").unwrap_or_else(|| "all".into());
    if !["all", "throughput", "idle", "onset", "short"].contains(&part.as_str()) {
        bail!("--part must be all, throughput, idle, onset or short");
    }
    // Checked before any part runs: the onset part comes after twenty minutes of others.
    let only = arg(&args, "--stalls");
    if let Some(bad) = only.as_deref().and_then(|o| o.split(',').find(|x| !STALLS.iter().any(|(s, _)| s == x))) {
        bail!(
            "--stalls: no stall named {bad:?}; the stalls are {}",
            STALLS.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(", ")
        );
    }
    let mut md = String::new();
    let root = std::env::temp_dir().join(format!("pileup-watch-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);

    if part == "all" || part == "throughput" {
        md.push_str(&throughput(&pileup, &root, rounds)?);
    }
    if part == "all" || part == "idle" {
        md.push_str(&idle_cost(&pileup, &root, rounds)?);
    }
    if part == "all" || part == "onset" {
        md.push_str(&onset(&pileup, &root, rounds, only.as_deref())?);
    }
    if part == "all" || part == "short" {
        md.push_str(&short_stalls(&pileup, &root, rounds)?);
    }
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}

fn throughput(pileup: &str, root: &Path, rounds: usize) -> Result<String> {
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

/// CPU seconds a process has used (utime + stime).
fn proc_cpu_secs(pid: u32) -> f64 {
    stat_cpu_secs(pid, 2)
}

/// What watching costs with nothing else running: the server's CPU
/// (answering the polls) and the watcher's own, over 30 s, against an idle
/// server with no watcher. Low-noise where tx/s on a shared box is not.
fn idle_cost(pileup: &str, root: &Path, rounds: usize) -> Result<String> {
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

fn onset(pileup: &str, root: &Path, rounds: usize, only: Option<&str>) -> Result<String> {
    let mut md = String::new();
    md.push_str("\n### Stall onset to first captured stack (default triggers, server binary named mysqld so pt-stalk finds it)\n\nNegative: the first stack came before the stall's onset (a capture begun as the load that caused it built up).\n\n| stall | tool | seconds from onset to the first stack taken | watcher's CPU watching (% of one core, median) | watcher's CPU-seconds from the stall on, capture included (median) | pileup's verdict |\n|---|---|---|---|---|---|\n");
    let stalls: Vec<&(&str, &str)> =
        STALLS.iter().filter(|(s, _)| only.is_none_or(|o| o.split(',').any(|x| x == *s))).collect();
    for (stall, what) in &stalls {
        eprintln!("{what}");
        for k in ["pileup 1s", "pt-stalk gdb"] {
            let mut v = vec![];
            let mut cpu = vec![];
            let mut stall_cpu = vec![];
            let mut verdicts: Vec<String> = vec![];
            for round in 0..rounds {
                let o = stall_onset(pileup, k, stall, root, round)?;
                cpu.push(o.cpu);
                stall_cpu.extend(o.stall_cpu);
                match o.first_stack {
                    Some(s) => v.push(s),
                    None => eprintln!("{stall} {k}: no stack within 35 s"),
                }
                if o.before > 0 {
                    verdicts.push(format!("{} capture(s) before the onset", o.before));
                }
                verdicts.extend(o.verdict);
            }
            eprintln!(
                "{stall} {k}: first stack after {} s; {}",
                v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
                verdicts.join("; ")
            );
            let shown = if v.is_empty() {
                "none within 35 s".into()
            } else {
                format!(
                    "{:.2} (runs: {})",
                    median(&v.clone()),
                    v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")
                )
            };
            // Each verdict with the rounds that gave it.
            let mut said: Vec<(String, usize)> = vec![];
            for x in verdicts {
                match said.iter_mut().find(|(y, _)| *y == x) {
                    Some((_, n)) => *n += 1,
                    None => said.push((x, 1)),
                }
            }
            let said = if k.starts_with("pileup") {
                said.iter().map(|(x, n)| format!("{x} ({n} of {rounds})")).collect::<Vec<_>>().join("; ")
            } else {
                "—".into()
            };
            let sc = if stall_cpu.is_empty() { "—".to_string() } else { format!("{:.2}", median(&stall_cpu)) };
            md.push_str(&format!("| {stall} | {k} | {shown} | {:.2} | {sc} | {said} |\n", median(&cpu)));
        }
    }
    md.push_str(&format!(
        "\nStalls: {}.\n",
        stalls.iter().map(|(s, w)| format!("{s}, {w}")).collect::<Vec<_>>().join("; ")
    ));
    Ok(md)
}

/// How long each short stall holds the global read lock, in milliseconds.
const SHORT_HOLDS: &[u64] = &[50, 100, 150, 200, 300, 500];

/// Short stalls: 30 connections insert 1,000 rows a second; FLUSH TABLES
/// WITH READ LOCK is held for each of [`SHORT_HOLDS`], `4 × rounds` times,
/// 1.5 s apart, under `pileup watch` at its defaults. A stall is caught when
/// the scan records one beginning between the lock and 350 ms after the
/// unlock (the writers queue behind the lock within milliseconds).
fn short_stalls(pileup: &str, root: &Path, rounds: usize) -> Result<String> {
    let sb = Sandbox::start(Options::default())?;
    let mut sbargs = pileup_bench_drivers::sysbench_prepared_sized(&sb, "oltp_insert", 1, 1000)?;
    sbargs.push("--rate=1000".into());
    let load = pileup_bench_drivers::Load::start("oltp_insert", &sbargs, 30)?;
    let dir = root.join("short");
    std::fs::create_dir_all(&dir)?;
    let mut child = Command::new(pileup)
        .args(["watch", "-S", &sb.endpoint.socket.to_string_lossy(), "-u", "root", "--pid", &sb.pid().to_string()])
        .args(["--data-dir", &dir.to_string_lossy(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let out = child.stdout.take().expect("piped stdout");
    let w = Running(Some(child));
    let stalls = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(f64, f64)>::new()));
    let s2 = stalls.clone();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else { continue };
            if v["event"] == "stall" {
                if let (Some(b), Some(e)) = (v["began_unix"].as_f64(), v["ended_unix"].as_f64()) {
                    s2.lock().unwrap().push((b, e));
                }
            }
        }
    });
    std::thread::sleep(Duration::from_secs(6));
    let now = || unix_secs(std::time::SystemTime::now());
    let mut c = sb.connect()?;
    let mut held: Vec<(u64, f64, f64)> = vec![];
    for i in 0..4 * rounds {
        for &ms in SHORT_HOLDS {
            c.query_drop("FLUSH TABLES WITH READ LOCK")?;
            let t = now();
            std::thread::sleep(Duration::from_millis(ms));
            c.query_drop("UNLOCK TABLES")?;
            held.push((ms, t, now()));
            std::thread::sleep(Duration::from_millis(1500));
        }
        eprintln!("short stalls: pass {} of {}", i + 1, 4 * rounds);
    }
    std::thread::sleep(Duration::from_secs(2));
    drop(w);
    let _ = reader.join();
    drop(load);
    let stalls = stalls.lock().unwrap().clone();
    let mut md = format!(
        "\n### Short stalls: FLUSH TABLES WITH READ LOCK held briefly under 30 inserting connections (1,000 rows/s), {} times each, pileup watch at its defaults\n\n| lock held | recorded as a stall | stall length recorded (median) |\n|---|---|---|\n",
        4 * rounds
    );
    for &ms in SHORT_HOLDS {
        let mut lens = vec![];
        let tries = held.iter().filter(|h| h.0 == ms).count();
        for &(_, from, to) in held.iter().filter(|h| h.0 == ms) {
            if let Some((b, e)) = stalls.iter().find(|(b, _)| *b >= from - 0.05 && *b <= to + 0.35) {
                lens.push((e - b) * 1000.0);
            }
        }
        let shown = if lens.is_empty() { "–".to_string() } else { format!("{:.0} ms", median(&lens.clone())) };
        md.push_str(&format!("| {ms} ms | {} of {tries} | {shown} |\n", lens.len()));
    }
    md.push_str(&format!("\nStalls recorded in all: {} (locks taken: {}).\n", stalls.len(), held.len()));
    Ok(md)
}
