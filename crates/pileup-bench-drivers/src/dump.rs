//! Dump and load, side by side in one run: `pileup dump`/`load`,
//! mydumper/myloader 0.10.1 at the same threads, and `mariadb-dump |
//! mariadb`, on one data set (one large table and several smaller ones),
//! rounds interleaved, medians. Per dump: wall time, rows/s, and the worst
//! round trip of a writer committing a one-row update every millisecond (at
//! nice -10, see [`pileup_bench_drivers::Probe::writer`]) during the
//! dump's first seconds (where a global read lock hurts). Per load: wall
//! time and rows/s. Every load is checked against the source with
//! CHECKSUM TABLE.
//!
//! Every load does the same work: with `--binlog on` (the default) each
//! writes the loaded rows to the server's binary log (pileup's and the
//! mariadb client's default; myloader needs `--enable-binlog`), with
//! `--binlog off` none does (myloader's default; `pileup load --no-binlog`;
//! the mariadb client with `SET SESSION sql_log_bin = 0`).
//!
//! Usage: see [`USAGE`] (what `--help` prints).

const USAGE: &str = "Usage: dump-bench --pileup PATH [--big-rows 1000000] [--tables 4] [--small-rows 100000] [--threads 4] [--rounds 3] [--binlog on|off] [--reuse NAME] [--out FILE]";

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median, Probe};
use pileup_sandbox::{Options, Sandbox};

fn num(args: &[String], k: &str, d: u64) -> Result<u64> {
    Ok(arg(args, k).map(|s| s.parse()).transpose().with_context(|| format!("{k} takes a number"))?.unwrap_or(d))
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let o = cmd.stdin(Stdio::null()).output().with_context(|| format!("running {what}"))?;
    if !o.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or(""));
    }
    Ok(())
}

fn checksums(c: &mut mysql::Conn, db: &str, tables: &[String]) -> Result<Vec<Option<u64>>> {
    tables
        .iter()
        .map(|t| {
            let r: Option<(String, Option<u64>)> = c.query_first(format!("CHECKSUM TABLE `{db}`.`{t}`"))?;
            Ok(r.and_then(|r| r.1))
        })
        .collect()
}

/// Purge the binary logs before the current one: every load writes the
/// data set's size into them.
fn purge_binlogs(c: &mut mysql::Conn) -> Result<()> {
    c.query_drop("FLUSH BINARY LOGS")?;
    c.query_drop("PURGE BINARY LOGS BEFORE NOW() + INTERVAL 1 SECOND")?;
    Ok(())
}

/// Wait (at most 2 minutes) until InnoDB has under 10% of its buffer pool
/// dirty and the kernel under 64 MiB of dirty file data (the binary log
/// written with `sync_binlog = 0` among it); returns the seconds waited and
/// whether it settled within them.
/// (InnoDB keeps a few percent dirty under the writer's updates: it flushes
/// ahead only as its redo log fills.)
fn settle(c: &mut mysql::Conn) -> Result<(f64, bool)> {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(120) {
        let (dirty, total): (u64, u64) = c
            .query_first(
                "SELECT CAST(SUM(IF(VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY', VARIABLE_VALUE, 0)) AS UNSIGNED), \
                 CAST(SUM(IF(VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_TOTAL', VARIABLE_VALUE, 0)) AS UNSIGNED) \
                 FROM information_schema.GLOBAL_STATUS",
            )?
            .unwrap_or((0, 1));
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let os_dirty_kib: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("Dirty:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        if dirty * 10 < total && os_dirty_kib < 64 << 10 {
            return Ok((t.elapsed().as_secs_f64(), true));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok((t.elapsed().as_secs_f64(), false))
}

/// `pileup load`'s arguments for the binary log setting: none when it is
/// written (pileup's default), `--no-binlog` when not.
fn no_binlog(binlog: bool) -> &'static [&'static str] {
    if binlog {
        &[]
    } else {
        &["--no-binlog"]
    }
}

/// The run's settings, from the command line.
struct Config {
    pileup: String,
    big: u64,
    ntables: u64,
    small: u64,
    threads: String,
    rounds: usize,
    reuse: Option<String>,
    binlog: bool,
}

impl Config {
    fn parse(args: &[String]) -> Result<Config> {
        Ok(Config {
            pileup: arg(args, "--pileup").context("--pileup PATH is required")?,
            big: num(args, "--big-rows", 1_000_000)?,
            ntables: num(args, "--tables", 4)?,
            small: num(args, "--small-rows", 100_000)?,
            threads: num(args, "--threads", 4)?.to_string(),
            rounds: num(args, "--rounds", 3)? as usize,
            reuse: arg(args, "--reuse"),
            binlog: match arg(args, "--binlog").as_deref().unwrap_or("on") {
                "on" => true,
                "off" => false,
                other => bail!("--binlog takes on or off, not {other}"),
            },
        })
    }
}

/// The data set: one big table and several smaller ones, loaded once
/// (kept with --reuse), and a one-row table the writer updates.
fn load_data(c: &mut mysql::Conn, cfg: &Config, tables: &[String]) -> Result<()> {
    let have: u64 =
        c.query_first("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'bench'")?.unwrap_or(0);
    if have == tables.len() as u64 + 1 {
        return Ok(());
    }
    eprintln!("== loading the data set: big {} rows, {} tables of {} rows", cfg.big, cfg.ntables, cfg.small);
    c.query_drop("DROP DATABASE IF EXISTS bench")?;
    c.query_drop("CREATE DATABASE bench")?;
    c.query_drop("USE bench")?;
    for (t, n) in tables.iter().map(|t| (t, if t == "big" { cfg.big } else { cfg.small })) {
        c.query_drop(format!(
            "CREATE TABLE `{t}` (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, \
             d DATETIME NOT NULL, f DOUBLE, b VARBINARY(32), KEY (k))"
        ))?;
        // In statements of at most 500,000 rows each.
        for from in (1..=n).step_by(500_000) {
            let to = (from + 499_999).min(n);
            c.query_drop(format!(
                "INSERT INTO `{t}` SELECT seq, seq * 7919 % {n}, CONCAT(MD5(seq), MD5(seq + 1), MD5(seq + 2)), \
                 CONCAT(SHA1(seq), 'x'), '2020-01-01' + INTERVAL seq SECOND, seq / 7, UNHEX(MD5(seq)) FROM seq_{from}_to_{to}"
            ))?;
        }
    }
    c.query_drop("CREATE TABLE hot (id INT PRIMARY KEY, v BIGINT)")?;
    c.query_drop("INSERT INTO hot VALUES (1, 0)")?;
    Ok(())
}

const TOOLS: [&str; 3] = ["pileup", "mydumper", "mariadb-dump"];

/// What the rounds measured, per tool (in [`TOOLS`]' order).
#[derive(Default)]
struct Results {
    dump_s: [Vec<f64>; 3],
    load_s: [Vec<f64>; 3],
    stall_ms: [Vec<f64>; 3],
    /// CPU seconds of the tool's own processes and of the server (less the
    /// thread serving the writer).
    dump_cpu: [Vec<(f64, f64)>; 3],
    load_cpu: [Vec<(f64, f64)>; 3],
    /// The writer's worst round trip with no dump running.
    base_stall: Vec<f64>,
    settle_s: Vec<f64>,
    unsettled: usize,
    /// pileup's load of the same dump with its tables created as dumped
    /// (secondary indexes maintained row by row), against its default.
    with_data_s: Vec<f64>,
    /// pileup: the lock's hold and wait, and the writer's worst round trip
    /// until it was released and after.
    held: Vec<f64>,
    waited: Vec<f64>,
    lock_phase: Vec<f64>,
    copy_phase: Vec<f64>,
}

/// One run's fixed parts: the server, the tables and their checksums.
struct Run<'a> {
    cfg: &'a Config,
    sock: String,
    tables: Vec<String>,
    source: Vec<Option<u64>>,
}

impl Run<'_> {
    /// Dump with `tool` into `dir` (a directory) or `file` (an SQL file).
    /// Returns when pileup's snapshot lock was released.
    fn dump(
        &self,
        tool: &str,
        r: usize,
        dir: &std::path::Path,
        file: &std::path::Path,
        res: &mut Results,
    ) -> Result<Option<Instant>> {
        let (sock, threads) = (self.sock.as_str(), self.cfg.threads.as_str());
        match tool {
            "pileup" => return self.dump_pileup(r, dir, res),
            "mydumper" => run(
                Command::new("mydumper")
                    .args(["-S", sock, "-u", "root", "-B", "bench", "-t", threads, "-r", "200000", "-c", "-o"])
                    .arg(dir),
                "mydumper",
            )?,
            _ => {
                let out = std::fs::File::create(file)?;
                let st = Command::new("mariadb-dump")
                    .args(["-S", sock, "-u", "root", "--single-transaction", "--master-data=2", "bench"])
                    .stdout(out)
                    .status()?;
                if !st.success() {
                    bail!("mariadb-dump failed");
                }
            }
        }
        Ok(None)
    }

    /// `pileup dump`: its JSON progress says when the snapshot lock was
    /// released, how long its requests waited and how long it was held.
    fn dump_pileup(&self, r: usize, dir: &std::path::Path, res: &mut Results) -> Result<Option<Instant>> {
        let mut child = Command::new(&self.cfg.pileup)
            .args(["dump", "-S", &self.sock, "-u", "root", "--databases", "bench", "--threads", &self.cfg.threads])
            .args(["--json", "-o"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut unlocked = None;
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        for l in std::io::BufRead::lines(out).map_while(Result::ok) {
            if !l.contains("\"event\":\"unlocked\"") {
                continue;
            }
            unlocked = Some(Instant::now());
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else { continue };
            let ms = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
            res.held.push(ms(&v["held_ms"]));
            res.waited.push(ms(&v["waited_ms"]));
            let stages: Vec<String> = v["stages_ms"]
                .as_array()
                .map(|a| {
                    a.iter().map(|s| format!("{} {:.1}", s["stage"].as_str().unwrap_or("?"), ms(&s["ms"]))).collect()
                })
                .unwrap_or_default();
            eprintln!(
                "   round {r} pileup's lock requests waited {:.1} ms (stages, ms: {}), held {:.1} ms",
                ms(&v["waited_ms"]),
                stages.join(", "),
                ms(&v["held_ms"])
            );
        }
        if !child.wait()?.success() {
            bail!("pileup dump failed");
        }
        Ok(unlocked)
    }

    /// Load what `tool` dumped into `bench_l`.
    fn load(&self, c: &mut mysql::Conn, tool: &str, dir: &std::path::Path, file: &std::path::Path) -> Result<()> {
        let (sock, threads, binlog) = (self.sock.as_str(), self.cfg.threads.as_str(), self.cfg.binlog);
        match tool {
            "pileup" => run(
                Command::new(&self.cfg.pileup)
                    .args(["load", "-S", sock, "-u", "root", "--rename", "bench:bench_l", "--threads", threads])
                    .args(no_binlog(binlog))
                    .arg(dir),
                "pileup load",
            ),
            "mydumper" => run(
                Command::new("myloader")
                    .args(["-S", sock, "-u", "root", "-B", "bench_l", "-t", threads])
                    .args(if binlog { &["--enable-binlog"][..] } else { &[][..] })
                    .arg("-d")
                    .arg(dir),
                "myloader",
            ),
            _ => {
                c.query_drop("CREATE DATABASE bench_l")?;
                let st = Command::new("mariadb")
                    .args(["-S", sock, "-u", "root", "bench_l"])
                    .args(if binlog { &[][..] } else { &["--init-command=SET SESSION sql_log_bin = 0"][..] })
                    .stdin(std::fs::File::open(file)?)
                    .status()?;
                if !st.success() {
                    bail!("mariadb < dump failed");
                }
                Ok(())
            }
        }
    }

    /// pileup's load with `--indexes with-data`, timed and checked.
    fn load_with_data(&self, c: &mut mysql::Conn, dir: &std::path::Path) -> Result<f64> {
        c.query_drop("DROP DATABASE IF EXISTS bench_l")?;
        purge_binlogs(c)?;
        let t = Instant::now();
        run(
            Command::new(&self.cfg.pileup)
                .args([
                    "load",
                    "-S",
                    &self.sock,
                    "-u",
                    "root",
                    "--rename",
                    "bench:bench_l",
                    "--threads",
                    &self.cfg.threads,
                ])
                .args(["--indexes", "with-data"])
                .args(no_binlog(self.cfg.binlog))
                .arg(dir),
            "pileup load --indexes with-data",
        )?;
        let s = t.elapsed().as_secs_f64();
        if checksums(c, "bench_l", &self.tables)? != self.source {
            bail!("pileup load --indexes with-data: the loaded tables differ from the source (CHECKSUM TABLE)");
        }
        eprintln!("   {:<21} load {s:6.1} s with --indexes with-data", "");
        Ok(s)
    }
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let cfg = Config::parse(&args)?;
    for tool in ["mydumper", "myloader", "mariadb-dump", "mariadb"] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("{tool} is needed (Debian: apt-get install mydumper mariadb-client)");
        }
    }
    let sb = Sandbox::start(Options {
        name: cfg.reuse.clone(),
        reuse: cfg.reuse.is_some(),
        binlog: true,
        cnf: vec![("innodb_buffer_pool_size".into(), "1G".into())],
        ..Default::default()
    })?;
    // Data sets of a few GB: CHECKSUM TABLE and DROP DATABASE take minutes.
    let mut spec = sb.conn_spec();
    spec.timeout = Duration::from_secs(3600);
    let mut c = spec.connect()?;
    c.query_drop("SET SESSION max_statement_time = 0")?;
    let mut tables = vec!["big".to_string()];
    tables.extend((1..=cfg.ntables).map(|i| format!("t{i}")));
    load_data(&mut c, &cfg, &tables)?;
    c.query_drop("USE bench")?;
    let source = checksums(&mut c, "bench", &tables)?;
    c.query_drop(format!(
        "ANALYZE TABLE {}",
        tables.iter().map(|t| format!("bench.`{t}`")).collect::<Vec<_>>().join(", ")
    ))?;
    let size: u64 = c
        .query_first(
            "SELECT SUM(DATA_LENGTH + INDEX_LENGTH) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'bench'",
        )?
        .unwrap_or(0);
    let writer = Probe::writer(&sb, "UPDATE bench.hot SET v = v + 1 WHERE id = 1")?;
    let run = Run { cfg: &cfg, sock: sb.endpoint.socket.to_string_lossy().into_owned(), tables, source };
    let res = rounds(&run, &sb, &mut c, &writer)?;
    c.query_drop("DROP DATABASE IF EXISTS bench_l")?;
    let md = report(&cfg, &res, run.tables.len(), size, writer.prioritized);
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    Ok(())
}

/// Every round: each tool dumps (on a settled server, beside the writer)
/// and loads, and the load is checked against the source.
fn rounds(run: &Run, sb: &Sandbox, c: &mut mysql::Conn, writer: &Probe) -> Result<Results> {
    let mut res = Results::default();
    let scratch = std::env::temp_dir().join(format!("pileup-dump-bench-{}", std::process::id()));
    let server_stat = format!("/proc/{}/stat", sb.pid());
    let writer_stat = writer.server_tid.map(|t| format!("/proc/{}/task/{t}/stat", sb.pid()));
    let server_cpu = || {
        pileup_bench_drivers::stat_cpu(&server_stat, 2)
            - writer_stat.as_deref().map_or(0.0, |w| pileup_bench_drivers::stat_cpu(w, 2))
    };
    for r in 0..run.cfg.rounds {
        for (i, tool) in TOOLS.iter().enumerate() {
            let _ = std::fs::remove_dir_all(&scratch);
            std::fs::create_dir_all(&scratch)?;
            let (dir, file) = (scratch.join("d"), scratch.join("dump.sql"));
            // Each dump starts on a settled server: the previous load's
            // writes are on disk, so the stall a dump start causes is not
            // mixed with the writeback of the load before it.
            let (settled, in_time) = settle(c)?;
            res.settle_s.push(settled);
            res.unsettled += usize::from(!in_time);
            // No tool: the writer's worst round trip over the same window.
            let t = Instant::now();
            std::thread::sleep(Duration::from_secs(3));
            res.base_stall.push(writer.worst(t, Instant::now()).as_secs_f64() * 1e3);
            let t0 = Instant::now();
            let (own0, server0) = (pileup_bench_drivers::children_cpu(), server_cpu());
            let unlocked = run.dump(tool, r, &dir, &file, &mut res)?;
            let dumped = t0.elapsed();
            res.dump_cpu[i].push((pileup_bench_drivers::children_cpu() - own0, server_cpu() - server0));
            writer.check()?;
            let stall = writer.worst(t0, t0 + Duration::from_secs(3).min(dumped)).as_secs_f64() * 1e3;
            if let Some(u) = unlocked {
                res.lock_phase.push(writer.worst(t0, u).as_secs_f64() * 1e3);
                res.copy_phase.push(writer.worst(u, t0 + dumped).as_secs_f64() * 1e3);
            }
            // The binary log of the loads grows by the data set's size each
            // time: the files before the current one go before each load
            // (after the dump, which meets the previous load's log as a
            // server would).
            purge_binlogs(c)?;
            // Rounds alternate which of pileup's two loads runs first.
            if *tool == "pileup" && r % 2 == 1 {
                res.with_data_s.push(run.load_with_data(c, &dir)?);
            }
            c.query_drop("DROP DATABASE IF EXISTS bench_l")?;
            let t1 = Instant::now();
            let (own0, server0) = (pileup_bench_drivers::children_cpu(), server_cpu());
            run.load(c, tool, &dir, &file)?;
            let loaded = t1.elapsed();
            res.load_cpu[i].push((pileup_bench_drivers::children_cpu() - own0, server_cpu() - server0));
            if checksums(c, "bench_l", &run.tables)? != run.source {
                bail!("{tool}: the loaded tables differ from the source (CHECKSUM TABLE)");
            }
            eprintln!(
                "   round {r} {tool:<13} dump {:6.1} s, load {:6.1} s, writer's worst round trip in the dump's first 3 s {stall:7.1} ms",
                dumped.as_secs_f64(),
                loaded.as_secs_f64()
            );
            if *tool == "pileup" && r % 2 == 0 {
                res.with_data_s.push(run.load_with_data(c, &dir)?);
            }
            res.dump_s[i].push(dumped.as_secs_f64());
            res.load_s[i].push(loaded.as_secs_f64());
            res.stall_ms[i].push(stall);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(res)
}

/// The results as markdown: the table of tools, then the lock and CPU notes.
fn report(cfg: &Config, res: &Results, ntables: usize, size: u64, prioritized: bool) -> String {
    let (big, small, threads, rounds) = (cfg.big, cfg.small, &cfg.threads, cfg.rounds);
    let rows = big + cfg.ntables * small;
    let (pd, pl) = (median(&res.dump_s[0].clone()), median(&res.load_s[0].clone()));
    let mut md = format!(
        "\n{} rows in {} tables ({:.0} MB in InnoDB: one of {big} rows, {} of {small}), {threads} threads, {rounds} rounds interleaved, medians; every load checked with CHECKSUM TABLE; {}; writer's worst round trip with no dump running: {:.1} ms\n\n",
        rows,
        ntables,
        size as f64 / 1e6,
        cfg.ntables,
        if cfg.binlog {
            "every load writes the binary log (`binlog_format=ROW`; myloader with `--enable-binlog`)"
        } else {
            "no load writes the binary log (`pileup load --no-binlog`, myloader's default, the mariadb client with `sql_log_bin = 0`)"
        },
        median(&res.base_stall.clone())
    );
    if !prioritized {
        md.push_str("The writer ran at normal priority (nice -10 needs root or CAP_SYS_NICE): its round trips include waits for a core.\n\n");
    }
    md.push_str("| tool | dump (s) | dump rows/s | pileup's dump faster by | dump CPU s: tool + server | load (s) | load rows/s | pileup's load faster by | load CPU s: tool + server | writer's worst round trip at dump start (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n");
    let names = [
        "pileup dump / load",
        if cfg.binlog {
            "mydumper / myloader 0.10.1 (-c, -r 200000 / --enable-binlog)"
        } else {
            "mydumper / myloader 0.10.1 (-c, -r 200000)"
        },
        "mariadb-dump --single-transaction / mariadb",
    ];
    for (i, name) in names.iter().enumerate() {
        let (d, l) = (median(&res.dump_s[i].clone()), median(&res.load_s[i].clone()));
        let cpu = |v: &[(f64, f64)]| {
            format!(
                "{:.1} + {:.1}",
                median(&v.iter().map(|x| x.0).collect::<Vec<f64>>()),
                median(&v.iter().map(|x| x.1).collect::<Vec<f64>>())
            )
        };
        md.push_str(&format!(
            "| {} | {d:.1} | {:.0} | {:.2}× | {} | {l:.1} | {:.0} | {:.2}× | {} | {:.1} |\n",
            name,
            rows as f64 / d,
            d / pd,
            cpu(&res.dump_cpu[i]),
            rows as f64 / l,
            l / pl,
            cpu(&res.load_cpu[i]),
            median(&res.stall_ms[i].clone())
        ));
    }
    let w = median(&res.with_data_s.clone());
    md.push_str(&format!(
        "| pileup load --indexes with-data (secondary indexes built row by row) | – | – | – | – | {w:.1} | {:.0} | {:.2}× | – | – |\n",
        rows as f64 / w,
        w / pl
    ));
    md.push_str(&format!(
        "\nEach dump began on a settled server (InnoDB under 10% dirty pages, the kernel under 64 MiB of dirty file data; {:.0} s waited for it, median{}).\n\npileup's snapshot lock's requests waited {:.1} ms to be granted and it was held {:.1} ms (medians); the writer's worst round trip was {:.1} ms from the dump's start until the lock was released, and {:.1} ms while the threads copied.\n",
        median(&res.settle_s.clone()),
        if res.unsettled > 0 { format!("; {} began unsettled after 2 minutes", if res.unsettled == 1 { "1 dump".to_string() } else { format!("{} dumps", res.unsettled) }) } else { String::new() },
        median(&res.waited.clone()),
        median(&res.held.clone()),
        median(&res.lock_phase.clone()),
        median(&res.copy_phase.clone())
    ));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    md.push_str(&format!(
        "\nCPU seconds are medians of the tool's own processes (`pileup`, `mydumper`, `mariadb-dump`, the `mariadb` client) and of the server's threads but the one serving the writer. On {cores} cores a run's wall time cannot be less than its CPU seconds divided by {cores}.\n",
    ));
    md
}
