//! The rounds: in each, every dump of the shape (each compression, each
//! tool, the tools' order alternating by round) and then every load (each
//! binary log setting, each tool loading its own plain dump), each from a
//! settled server, each load reading its dump from the device and checked
//! against the source with CHECKSUM TABLE.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use mysql::prelude::Queryable;

use super::data::{self, Shape};
use super::measure::{self, FileWork, FileWorkCount, Measured, Meters};
use super::Config;

/// The tools: pileup and the anchor, mydumper/myloader 0.10.1.
pub const TOOLS: [&str; 2] = ["pileup", "mydumper"];

/// A dump's compression: its name, pileup's arguments and mydumper's
/// (none: pileup only).
type Dump = (&'static str, &'static [&'static str], Option<&'static [&'static str]>);

/// The dumps' compressions.
pub const DUMPS: [Dump; 3] = [
    ("plain", &["--compress", "none"], Some(&[])),
    ("gzip", &["--compress", "gzip"], Some(&["-c"])),
    ("zstd", &["--compress", "zstd"], None),
];

/// The seconds at a load's end when index builds were all it waited on,
/// and the tables they were of.
type IndexAlone = (f64, Vec<String>);

/// What one cell of the report holds: a tool's runs of one work.
#[derive(Default, Debug, Clone)]
pub struct Cell {
    pub runs: Vec<Measured>,
    /// The dump's files, bytes.
    pub out_bytes: Vec<u64>,
    /// A dump: the writer's worst round trip in its first 3 s, ms.
    pub writer_ms: Vec<f64>,
    /// pileup's dump: how long its snapshot lock was held, ms.
    pub lock_held_ms: Vec<f64>,
    /// pileup's load: the seconds at its end when index builds were all it
    /// waited on (0 when never), and the tables they were of.
    pub index_alone_s: Vec<f64>,
    pub index_tables: Vec<String>,
    /// A load: the server's file syncs and extensions, where perf counted
    /// them.
    pub file_work: Vec<FileWork>,
}

/// Cells by (work, tool): work is `dump plain`, `load binlog off`, ….
pub type Cells = BTreeMap<(String, &'static str), Cell>;

/// One shape's rounds.
pub struct Rounds<'a> {
    pub cfg: &'a Config,
    pub sock: String,
    pub meters: Meters,
    pub shape: &'a Shape,
    pub source: Vec<Option<u64>>,
    pub scratch: PathBuf,
    /// The writer committing a one-row update every millisecond.
    pub writer: &'a pileup_bench_drivers::Probe,
}

impl Rounds<'_> {
    pub fn run(&self, c: &mut mysql::Conn) -> Result<Cells> {
        let mut cells = Cells::new();
        for r in 0..self.cfg.rounds {
            let order: Vec<&'static str> =
                if r % 2 == 0 { TOOLS.to_vec() } else { TOOLS.iter().rev().copied().collect() };
            for (name, pileup_args, anchor_args) in DUMPS {
                for &tool in &order {
                    let args = if tool == "pileup" { Some(pileup_args) } else { anchor_args };
                    let Some(args) = args else { continue };
                    settle(c)?;
                    let dir = self.dir(tool, name);
                    let _ = std::fs::remove_dir_all(&dir);
                    let t0 = Instant::now();
                    let (m, held) = self.dump(tool, args, &dir)?;
                    let early = self.writer.worst(t0, t0 + Duration::from_secs_f64(m.wall_s.min(3.0)));
                    let cell = cells.entry((format!("dump {name}"), tool)).or_default();
                    cell.out_bytes.push(du(&dir));
                    cell.writer_ms.push(early.as_secs_f64() * 1e3);
                    cell.lock_held_ms.extend(held);
                    eprintln!("   {} round {r}: {tool:<8} dump {name:<5} {}", self.shape.name, line(&m));
                    cell.runs.push(m);
                    if name != "plain" {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                }
            }
            for &binlog in &self.cfg.binlog {
                for &tool in &order {
                    let (m, alone, files) = self.load(c, tool, binlog)?;
                    let word = if binlog { "on" } else { "off" };
                    eprintln!("   {} round {r}: {tool:<8} load binlog {word:<3} {}", self.shape.name, line(&m));
                    let cell = cells.entry((format!("load binlog {word}"), tool)).or_default();
                    cell.file_work.extend(files);
                    cell.runs.push(m);
                    if let Some((s, tables)) = alone {
                        cell.index_alone_s.push(s);
                        if !tables.is_empty() {
                            cell.index_tables = tables;
                        }
                    }
                }
            }
        }
        Ok(cells)
    }

    fn dir(&self, tool: &str, name: &str) -> PathBuf {
        self.scratch.join(format!("{}-{tool}-{name}", self.shape.name))
    }

    fn target(&self) -> String {
        format!("{}_l", self.shape.db)
    }

    /// Dump with `tool`; pileup's snapshot lock's hold, ms.
    fn dump(&self, tool: &str, args: &[&str], dir: &Path) -> Result<(Measured, Option<f64>)> {
        let (sock, threads, db) = (self.sock.as_str(), self.cfg.threads.to_string(), self.shape.db.as_str());
        let rows = self.cfg.chunk_rows.to_string();
        let mut cmd = match tool {
            "pileup" => {
                let mut c = Command::new(&self.cfg.pileup);
                c.args(["dump", "-S", sock, "-u", "root", "--databases", db, "--threads", &threads]);
                c.args(["--chunk-rows", &rows, "--json"]).args(args).arg("-o").arg(dir);
                c
            }
            _ => {
                let mut c = Command::new("mydumper");
                c.args(["-S", sock, "-u", "root", "-B", db, "-t", &threads, "-r", &rows]).args(args).arg("-o").arg(dir);
                c
            }
        };
        let mut held = None;
        let m = measure::run(&mut cmd, &format!("{tool}'s dump"), &self.meters, |l| {
            if l.contains("\"event\":\"unlocked\"") {
                held = serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["held_ms"].as_f64());
            }
        })?;
        if tool == "pileup" {
            return Ok((m, held));
        }
        // Durability like for like: pileup fsyncs each file before naming
        // it; mydumper leaves its files to the kernel, so they are fsynced
        // (and the directory) as part of its run.
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.push(dir.to_path_buf());
        let synced = measure::run(Command::new("sync").arg("--").args(&files), "sync", &self.meters, |_| {})?;
        Ok((m.then(synced), held))
    }

    /// Load `tool`'s plain dump into the shape's target database; for
    /// pileup, also the seconds at the load's end when index builds were
    /// all it waited on (its `only_indexing` event), with their tables.
    /// And the server's file syncs and extensions, where perf counts them.
    fn load(
        &self,
        c: &mut mysql::Conn,
        tool: &str,
        binlog: bool,
    ) -> Result<(Measured, Option<IndexAlone>, Option<FileWork>)> {
        let target = self.target();
        // Settled before the drop: the pages of a dropped table are let go
        // lazily and would count as dirty for minutes.
        settle(c)?;
        c.query_drop(format!("DROP DATABASE IF EXISTS `{target}`"))?;
        c.query_drop("FLUSH BINARY LOGS")?;
        c.query_drop("PURGE BINARY LOGS BEFORE NOW() + INTERVAL 1 SECOND")?;
        let (sock, threads) = (self.sock.as_str(), self.cfg.threads.to_string());
        let dir = self.dir(tool, "plain");
        // A restore reads its dump from the device: whatever of either
        // tool's files the page cache holds (mydumper's, written through
        // it) is let go first.
        evict(&dir)?;
        let mut cmd = match tool {
            "pileup" => {
                let mut c = Command::new(&self.cfg.pileup);
                c.args(["load", "-S", sock, "-u", "root", "--threads", &threads, "--json"]);
                c.arg("--rename").arg(format!("{}:{target}", self.shape.db));
                if !binlog {
                    c.arg("--no-binlog");
                }
                c.arg(&dir);
                c
            }
            _ => {
                let mut c = Command::new("myloader");
                c.args(["-S", sock, "-u", "root", "-B", &target, "-t", &threads]);
                if binlog {
                    c.arg("--enable-binlog");
                }
                c.arg("-d").arg(&dir);
                c
            }
        };
        let counting = FileWorkCount::start(self.meters.server_pid);
        let t0 = Instant::now();
        let mut only: Option<(Instant, Vec<String>)> = None;
        let m = measure::run(&mut cmd, &format!("{tool}'s load"), &self.meters, |l| {
            if l.contains("\"event\":\"only_indexing\"") {
                let v: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
                let tables = v["tables"].as_array().into_iter().flatten().filter_map(|t| t.as_str().map(String::from));
                only = Some((Instant::now(), tables.collect()));
            }
        });
        let files = counting.and_then(FileWorkCount::stop);
        let m = m?;
        if data::checksums(c, &target, self.shape)? != self.source {
            bail!("{tool}: the loaded tables differ from the source (CHECKSUM TABLE)");
        }
        let alone = (tool == "pileup").then(|| match only {
            Some((at, tables)) => ((m.wall_s - at.duration_since(t0).as_secs_f64()).max(0.0), tables),
            None => (0.0, vec![]),
        });
        Ok((m, alone, files))
    }
}

/// A run in a line of progress.
fn line(m: &Measured) -> String {
    format!(
        "{:6.1} s, CPU {:5.1} s + server {:5.1} s, {:5.0} MiB, device busy {:4.1} s, one core at the end {:4.1} s",
        m.wall_s, m.tool_cpu_s, m.server_cpu_s, m.tool_rss_mib, m.device_busy_s, m.one_core_tail_s
    )
}

/// The bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => du(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Let the page cache drop the files under `dir` (written out already:
/// pileup fsyncs its files, mydumper's are synced after its run).
fn evict(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            evict(&e.path())?;
            continue;
        }
        let f = std::fs::File::open(e.path())?;
        nix::fcntl::posix_fadvise(&f, 0, 0, nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED)?;
    }
    Ok(())
}

/// Bring the server to a settled state before a run, so that a run does
/// not pay for the work left by the one before it: InnoDB's purge of the
/// last load's undo history (until under 1000 transactions are left, at
/// most a minute), then its dirty pages flushed
/// ([`pileup_sandbox::flush::flushing`], until under 1% are dirty, at most
/// a minute), and the kernel's dirty file data written out (`sync`).
pub fn settle(c: &mut mysql::Conn) -> Result<()> {
    pileup_bench_drivers::wait_purged(c, Duration::from_secs(60))?;
    pileup_sandbox::flush::flushing(c, |c| -> Result<()> {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            let (dirty, total): (u64, u64) = c
                .query_first(
                    "SELECT CAST(SUM(IF(VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY', VARIABLE_VALUE, 0)) AS UNSIGNED), \
                     CAST(SUM(IF(VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_TOTAL', VARIABLE_VALUE, 0)) AS UNSIGNED) \
                     FROM information_schema.GLOBAL_STATUS",
                )?
                .unwrap_or((0, 1));
            if dirty * 100 < total {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    })??;
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    Ok(())
}
