//! The soak: pileup killed with SIGKILL at random moments (50 ms to 3 s
//! after it starts; 1.5 s for a load), under sysbench load on a sandbox
//! (and its replica), and what each kill leaves checked:
//! - `stacks` (consistent and passive) and `lag`: no server thread left in
//!   a stop state (`t`/`T` in /proc), half a second after the kill;
//! - `locks` and `memory`: no pileup eBPF program left loaded (bpftool),
//!   ten seconds after;
//! - `watch` capturing: its history database whole (`PRAGMA
//!   integrity_check`) and no capture directory presented as complete
//!   (its `complete.json`) with a file it lists missing or `evidence.json`
//!   unreadable;
//! - `load`: the load resumed (`--resume`) after the kill gives the dumped
//!   tables, checksum for checksum (`CHECKSUM TABLE`);
//! - `prefetch --warm pages` on the replica: the server's buffer pool file
//!   as it was before the round once the next prefetch has started and
//!   stopped (it puts back what a killed run left aside);
//! - `bench --sandbox`: no MariaDB or PostgreSQL server it started left
//!   running (a process whose command line names its sandbox directory),
//!   ten seconds after.
//!
//! Every fault and every check goes to a record file as a JSON line, with
//! the round's seed (`--replay SEED` runs that round again). A run resumes
//! from the record: kills add up across runs until `--kills` (1,000 by
//! default) is reached, each tool taking its turn (the one with the fewest
//! kills goes next), or `--minutes` of this run are spent.

const USAGE: &str = "Usage: soak-bench --pileup PATH [--minutes 30] [--kills 1000] [--record FILE] [--seed N] [--replay SEED] [--out FILE]";

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::arg;
use pileup_sandbox::{Options, Sandbox};

/// The tools killed, each with its checks.
const TOOLS: [&str; 9] =
    ["stacks-consistent", "stacks-passive", "lag", "locks", "memory", "watch", "load", "bench", "prefetch"];

/// eBPF programs pileup loads, by name (what `locks` and `memory` attach).
const PROGRAMS: [&str; 6] =
    ["futex_switch", "growth_fault", "growth_mmap", "growth_munmap", "growth_brk", "growth_madvise"];

/// A small generator of its own (splitmix64): the soak's draws are
/// reproducible from a seed, which is all it needs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What one kill left: the counts of the record's table.
#[derive(Default, Debug)]
struct Left {
    stopped_threads: u64,
    probes: u64,
    partial_presented: u64,
    data_differences: u64,
    servers: u64,
    notes: Vec<String>,
}

/// The servers and files every round uses.
struct World {
    pileup: PathBuf,
    primary: Sandbox,
    replica: Sandbox,
    dump: PathBuf,
    scratch: PathBuf,
    /// The dumped tables' checksums on the primary.
    checksums: BTreeMap<String, u64>,
    /// The sysbench load, ended with the soak.
    _load: KillOnExit,
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let pileup = PathBuf::from(arg(&args, "--pileup").context("--pileup PATH is required")?);
    let minutes: f64 = arg(&args, "--minutes").map(|s| s.parse()).transpose()?.unwrap_or(30.0);
    let kills: u64 = arg(&args, "--kills").map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let record = PathBuf::from(arg(&args, "--record").unwrap_or_else(|| "bench/soak-record.jsonl".into()));
    let seed: u64 = arg(&args, "--seed").map(|s| s.parse()).transpose()?.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    let replay: Option<u64> = arg(&args, "--replay").map(|s| s.parse()).transpose()?;
    let world = setup(&pileup)?;
    let mut done = tally(&record);
    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let mut failed = 0;
    loop {
        let total: u64 = done.values().map(|t| t.0).sum();
        if replay.is_none() && (total >= kills || Instant::now() >= deadline) {
            break;
        }
        let round_seed = replay.unwrap_or_else(|| rng.next());
        let tool = *TOOLS.iter().min_by_key(|t| (done.get(**t).map_or(0, |d| d.0), **t)).unwrap();
        let tool = if replay.is_some() { TOOLS[(round_seed % TOOLS.len() as u64) as usize] } else { tool };
        let (at_ms, left) = round(&world, tool, round_seed)?;
        let bad = left.stopped_threads + left.probes + left.partial_presented + left.data_differences + left.servers;
        failed += u64::from(bad > 0);
        let line = serde_json::json!({
            "seed": round_seed, "tool": tool, "fault": "sigkill", "at_ms": at_ms,
            "stopped_threads": left.stopped_threads, "probes_left": left.probes,
            "partial_presented": left.partial_presented, "data_differences": left.data_differences,
            "servers_left": left.servers,
            "notes": left.notes,
        });
        eprintln!("{line}");
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&record)?;
        writeln!(f, "{line}")?;
        f.sync_data()?;
        let d = done.entry(tool.to_string()).or_default();
        d.0 += 1;
        d.1 += left.stopped_threads;
        d.2 += left.probes;
        d.3 += left.partial_presented;
        d.4 += left.data_differences;
        d.5 += left.servers;
        if replay.is_some() {
            break;
        }
    }
    let md = table(&done);
    println!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    drop(world);
    anyhow::ensure!(failed == 0, "{failed} rounds left something behind (the record names their seeds)");
    Ok(())
}

/// Kills and what they left, per tool, from the record so far.
type Tally = BTreeMap<String, (u64, u64, u64, u64, u64, u64)>;

fn tally(record: &Path) -> Tally {
    let mut t = Tally::new();
    for l in std::fs::read_to_string(record).unwrap_or_default().lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else { continue };
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let e = t.entry(v["tool"].as_str().unwrap_or("?").to_string()).or_default();
        e.0 += 1;
        e.1 += n("stopped_threads");
        e.2 += n("probes_left");
        e.3 += n("partial_presented");
        e.4 += n("data_differences");
        e.5 += n("servers_left");
    }
    t
}

fn table(t: &Tally) -> String {
    let mut md = String::from(
        "\n| fault | tool | count | threads left stopped | probes left | files presented whole but partial | data differences | servers left running |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (tool, (n, s, p, f, d, v)) in t {
        md += &format!("| SIGKILL | {tool} | {n} | {s} | {p} | {f} | {d} | {v} |\n");
    }
    let all =
        t.values().fold((0, 0, 0, 0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3, a.4 + b.4, a.5 + b.5));
    md += &format!("| SIGKILL | all | {} | {} | {} | {} | {} | {} |\n", all.0, all.1, all.2, all.3, all.4, all.5);
    md
}

/// A primary under sysbench load, its replica, a dump of a database of its
/// own to load, and that database's checksums.
fn setup(pileup: &Path) -> Result<World> {
    let bpftool = Command::new(bpftool()).arg("version").output();
    anyhow::ensure!(
        bpftool.is_ok_and(|o| o.status.success()),
        "bpftool does not run (Debian's bpftool package; make deps installs it): the probe checks need it"
    );
    let scratch = std::env::temp_dir().join(format!("soak-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let primary = Sandbox::start(Options { binlog: true, ..Default::default() })?;
    let replica = Sandbox::start(Options { replica_of: Some(primary.endpoint.clone()), ..Default::default() })?;
    let base = pileup_bench_drivers::sysbench_prepared_sized(&primary, "oltp_read_write", 4, 20_000)?;
    let load = Command::new("sysbench")
        .args(&base)
        .args(["--threads=4", "--time=86400", "--rate=300", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let load = KillOnExit(load);
    let mut c = primary.connect()?;
    c.query_drop("CREATE DATABASE soakd")?;
    c.query_drop("CREATE TABLE soakd.t (id INT PRIMARY KEY, a INT, b VARCHAR(64), KEY (a))")?;
    c.query_drop("USE soakd")?;
    c.query_drop("INSERT INTO soakd.t SELECT seq, seq % 97, MD5(seq) FROM seq_1_to_200000")?;
    let dump = scratch.join("dump");
    let out = Command::new(pileup)
        .args(["dump", "--databases", "soakd", "--chunk-rows", "5000", "-o"])
        .arg(&dump)
        .args(["-S", primary.endpoint.socket.to_str().unwrap(), "-u", "root"])
        .output()?;
    anyhow::ensure!(out.status.success(), "pileup dump: {}", String::from_utf8_lossy(&out.stderr));
    let checksums = checksums(&mut c, "soakd")?;
    Ok(World { pileup: pileup.to_path_buf(), primary, replica, dump, scratch, checksums, _load: load })
}

/// Ends the load generator when the soak ends however it ends.
struct KillOnExit(Child);

impl Drop for KillOnExit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn checksums(c: &mut mysql::Conn, db: &str) -> Result<BTreeMap<String, u64>> {
    let tables: Vec<String> = c.exec(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'",
        (db,),
    )?;
    let mut out = BTreeMap::new();
    for t in tables {
        let r: Option<(String, Option<u64>)> = c.query_first(format!("CHECKSUM TABLE `{db}`.`{t}`"))?;
        out.insert(t, r.and_then(|r| r.1).unwrap_or(0));
    }
    Ok(out)
}

/// One round: `tool` started, killed after a delay drawn from `seed`, and
/// what it left checked. The delay and the counts.
fn round(w: &World, tool: &str, seed: u64) -> Result<(u64, Left)> {
    let mut rng = Rng(seed);
    // Within the tool's work: a load of the dump takes about two seconds.
    let at_ms = 50 + rng.below(if tool == "load" { 1450 } else { 2950 });
    let sock = |s: &Sandbox| s.endpoint.socket.to_str().unwrap().to_string();
    let (server, args): (&Sandbox, Vec<String>) = match tool {
        "stacks-consistent" | "stacks-passive" => (
            &w.primary,
            [
                "stacks",
                "--no-sql",
                "--mode",
                &tool[7..],
                "--samples",
                "100000",
                "--interval-ms",
                "2",
                "-o",
                "/dev/null",
            ]
            .map(String::from)
            .into_iter()
            .chain(["--pid".into(), w.primary.pid().to_string()])
            .collect(),
        ),
        "lag" => (
            &w.replica,
            ["lag", "--duration", "60s", "-S", &sock(&w.replica), "--pid", &w.replica.pid().to_string()]
                .map(String::from)
                .to_vec(),
        ),
        "locks" => (
            &w.primary,
            ["locks", "--no-sql", "--duration", "60s", "--pid", &w.primary.pid().to_string()]
                .map(String::from)
                .to_vec(),
        ),
        "memory" => (
            &w.primary,
            ["memory", "--no-sql", "--duration", "60s"]
                .map(String::from)
                .into_iter()
                .chain(["--pid".into(), w.primary.pid().to_string()])
                .collect(),
        ),
        "watch" => (&w.primary, watch_args(w, seed)),
        "bench" => (
            &w.primary,
            ["bench", "point-select", "--sandbox", "--threads", "4", "--duration", "5s", "--rounds", "1", "-o"]
                .map(String::from)
                .into_iter()
                // A directory (the trailing slash): the results' three files.
                .chain([format!("{}/", w.scratch.join(format!("bench-{seed}")).display())])
                .collect(),
        ),
        "prefetch" => (&w.replica, prefetch_args(w)),
        _ => (&w.primary, load_args(w)?),
    };
    let holders: Vec<i64> = programs().into_iter().flatten().collect();
    let bp_file = w.replica.endpoint.dir.join("data/ib_buffer_pool");
    let bp_before = std::fs::read(&bp_file).ok();
    // `bench --sandbox` starts its servers in a directory of the round's own.
    let sandboxes = w.scratch.join(format!("sandboxes-{seed}"));
    let mut child = Command::new(&w.pileup)
        .env("PILEUP_SANDBOX_DIR", &sandboxes)
        .args(&args)
        .args(if tool == "lag" || tool == "watch" || tool == "load" { &["-u", "root"][..] } else { &[][..] })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_millis(at_ms));
    let mut left = Left::default();
    // A tool that failed before its kill injected nothing: its command is wrong.
    match child.try_wait()? {
        Some(st) if !st.success() => anyhow::bail!("{tool} ({args:?}) exited before its kill ({st})"),
        Some(_) => left.notes.push("done before the kill".into()),
        None => {}
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
    child.wait()?;
    left.stopped_threads = stopped(server.pid());
    left.probes = probes_left(&holders);
    match tool {
        "watch" => check_watch(&w.scratch.join(format!("watch-{seed}")), &mut left),
        "load" => check_load(w, &mut left)?,
        "bench" => left.servers = servers_left(&sandboxes),
        "prefetch" => check_prefetch(w, &bp_file, bp_before.as_deref(), &mut left)?,
        _ => {}
    }
    Ok((at_ms, left))
}

fn watch_args(w: &World, seed: u64) -> Vec<String> {
    let data = w.scratch.join(format!("watch-{seed}"));
    let sock = w.primary.endpoint.socket.to_str().unwrap().to_string();
    ["watch", "-S", &sock, "--pid", &w.primary.pid().to_string(), "--data-dir", data.to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .chain(["--interval", "200ms", "--cooldown", "1s", "--trigger", "poll_ok > 0 for 200ms"].map(String::from))
        .collect()
}

fn prefetch_args(w: &World) -> Vec<String> {
    let sock = w.replica.endpoint.socket.to_str().unwrap().to_string();
    ["prefetch", "--warm", "pages", "--duration", "60s", "-S", &sock].map(String::from).to_vec()
}

/// The next prefetch, started and stopped cleanly (SIGTERM), leaves the
/// server's buffer pool file as it was before the killed one.
fn check_prefetch(w: &World, file: &Path, before: Option<&[u8]>, left: &mut Left) -> Result<()> {
    let mut next = Command::new(&w.pileup)
        .args(prefetch_args(w))
        .args(["-u", "root"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    std::thread::sleep(Duration::from_secs(2));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(next.id() as i32), nix::sys::signal::Signal::SIGTERM);
    next.wait()?;
    if std::fs::read(file).ok().as_deref() != before {
        left.data_differences += 1;
        left.notes.push(format!("{} is not the server's own after the next run", file.display()));
    }
    Ok(())
}

/// `load` of the dump into a database of its own, dropped first.
fn load_args(w: &World) -> Result<Vec<String>> {
    w.primary.connect()?.query_drop("DROP DATABASE IF EXISTS soakl")?;
    let sock = w.primary.endpoint.socket.to_str().unwrap().to_string();
    Ok(["load", w.dump.to_str().unwrap(), "--rename", "soakd:soakl", "--threads", "2", "-S", &sock]
        .map(String::from)
        .to_vec())
}

/// Server threads in a stop state, after half a second for the kernel to
/// finish detaching.
fn stopped(pid: u32) -> u64 {
    let pid = pid as i32;
    let count = || {
        let tids = pileup_engine::process::tids(pid).unwrap_or_default();
        tids.into_iter().filter(|t| matches!(pileup_engine::process::state(pid, *t), Some('t' | 'T'))).count() as u64
    };
    let t0 = Instant::now();
    while count() > 0 && t0.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(10));
    }
    count()
}

/// bpftool, on PATH or where Debian puts it (/usr/sbin is not on every
/// user's PATH).
fn bpftool() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/bpftool");
    if sbin.exists() {
        sbin
    } else {
        PathBuf::from("bpftool")
    }
}

/// pileup's eBPF programs loaded now (`bpftool prog show`), each with the
/// live processes bpftool says hold it.
fn programs() -> Vec<Vec<i64>> {
    let out = Command::new(bpftool()).args(["prog", "show", "--json"]).output();
    let v: serde_json::Value =
        out.ok().and_then(|o| serde_json::from_slice(&o.stdout).ok()).unwrap_or(serde_json::Value::Null);
    let live = |pid: &i64| std::path::Path::new(&format!("/proc/{pid}")).exists();
    v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| PROGRAMS.iter().any(|n| p["name"] == *n))
        .map(|p| p["pids"].as_array().into_iter().flatten().filter_map(|h| h["pid"].as_i64()).filter(live).collect())
        .collect()
}

/// pileup's eBPF programs still loaded ten seconds after the kill, but for
/// those held by processes that held them before the round (another
/// pileup on the host, not the tool killed): a program without a holder,
/// or held by a process the round started (a child that outlived the
/// tool), counts.
fn probes_left(before: &[i64]) -> u64 {
    let count = || {
        programs().iter().filter(|holders| holders.is_empty() || holders.iter().any(|h| !before.contains(h))).count()
            as u64
    };
    let t0 = Instant::now();
    while count() > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    count()
}

/// Server processes still running ten seconds after the kill whose
/// command line names a path under `dir` (MariaDB's `--datadir`,
/// PostgreSQL's `-D`).
fn servers_left(dir: &Path) -> u64 {
    let inside = format!("{}/", dir.display());
    let count = || {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
            .filter(|e| {
                let pid = e.file_name().to_str().and_then(|n| n.parse().ok()).unwrap_or(0);
                pileup_engine::process::alive(pid)
                    && std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(&inside))
            })
            .count() as u64
    };
    let t0 = Instant::now();
    while count() > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let n = count();
    let _ = std::fs::remove_dir_all(dir);
    n
}

/// The history database whole, and every capture presented as complete
/// whole.
fn check_watch(data: &Path, left: &mut Left) {
    if data.join("pileup.db").exists() {
        let check = rusqlite::Connection::open(data.join("pileup.db"))
            .and_then(|db| db.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0)));
        match check {
            Ok(ok) if ok == "ok" => {}
            Ok(bad) => {
                left.partial_presented += 1;
                left.notes.push(format!("history: {bad}"));
            }
            Err(e) => {
                left.partial_presented += 1;
                left.notes.push(format!("history: {e}"));
            }
        }
    }
    for d in std::fs::read_dir(data.join("captures")).into_iter().flatten().flatten() {
        let dir = d.path();
        let Ok(marker) = std::fs::read(dir.join("complete.json")) else { continue };
        let listed: Vec<String> = serde_json::from_slice::<serde_json::Value>(&marker)
            .ok()
            .and_then(|v| {
                v["files"].as_array().map(|a| a.iter().filter_map(|f| f.as_str().map(String::from)).collect())
            })
            .unwrap_or_default();
        let missing: Vec<&String> = listed.iter().filter(|f| !dir.join(f).exists()).collect();
        let evidence = std::fs::read(dir.join("evidence.json"))
            .ok()
            .is_some_and(|b| serde_json::from_slice::<serde_json::Value>(&b).is_ok());
        if !missing.is_empty() || !evidence {
            left.partial_presented += 1;
            left.notes.push(format!("{} presented complete: missing {missing:?}", dir.display()));
        }
    }
}

/// The load resumed after the kill: the tables as dumped.
fn check_load(w: &World, left: &mut Left) -> Result<()> {
    let sock = w.primary.endpoint.socket.to_str().unwrap().to_string();
    let out = Command::new(&w.pileup)
        .args(["load", w.dump.to_str().unwrap(), "--rename", "soakd:soakl", "--resume", "--threads", "2", "-S", &sock])
        .args(["-u", "root"])
        .output()?;
    if !out.status.success() {
        // Killed before it created anything to resume: a fresh load.
        let again = Command::new(&w.pileup).args(load_args(w)?).args(["-u", "root"]).output()?;
        if !again.status.success() {
            left.data_differences += 1;
            left.notes.push(format!("load: {}", String::from_utf8_lossy(&again.stderr).trim()));
            return Ok(());
        }
        left.notes.push(format!("resume refused: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let got = checksums(&mut w.primary.connect()?, "soakl")?;
    for (t, sum) in &w.checksums {
        if got.get(t) != Some(sum) {
            left.data_differences += 1;
            left.notes.push(format!("soakl.{t}: checksum {:?}, dumped {sum}", got.get(t)));
        }
    }
    Ok(())
}
