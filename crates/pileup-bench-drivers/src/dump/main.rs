//! `pileup dump`/`load` against mydumper/myloader 0.10.1, like for like, on
//! several data shapes, in one run: both plain and both gzip (pileup's zstd
//! beside them), loads with the binary log off and on, the same threads
//! and chunk rows. Each figure is the median of interleaved rounds with its
//! range; beside wall time, the CPU-seconds per GB of the tool and of the
//! server (so a machine with more cores can be judged from this one), peak
//! RSS, the files' size, and what bound each run: both cores, the
//! datadir's device, or one core left working at the end.
//!
//! A GB is the source's `data_length + index_length`, 10^9 bytes.

const USAGE: &str = "Usage: dump-bench --pileup PATH [--shapes fits,beyond,many] [--scale 1.0] [--threads 2] [--chunk-rows 200000] [--rounds 5] [--binlog off,on] [--reuse NAME] [--out FILE]";

mod data;
mod measure;
mod report;
mod rounds;

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, Probe};
use pileup_sandbox::{Options, Sandbox};

/// The run's settings, from the command line.
pub struct Config {
    pub pileup: String,
    pub shapes: Vec<String>,
    pub scale: f64,
    pub threads: usize,
    pub chunk_rows: u64,
    pub rounds: usize,
    /// The loads' binary log settings, in order (true: written).
    pub binlog: Vec<bool>,
    pub reuse: Option<String>,
}

impl Config {
    fn parse(args: &[String]) -> Result<Config> {
        let num = |k: &str, d: u64| -> Result<u64> {
            Ok(arg(args, k).map(|s| s.parse()).transpose().with_context(|| format!("{k} takes a number"))?.unwrap_or(d))
        };
        let list = |k: &str, d: &str| -> Vec<String> {
            arg(args, k).unwrap_or_else(|| d.to_string()).split(',').map(|s| s.trim().to_string()).collect()
        };
        let binlog = list("--binlog", "off,on")
            .iter()
            .map(|b| match b.as_str() {
                "on" => Ok(true),
                "off" => Ok(false),
                other => bail!("--binlog takes on and off, not {other}"),
            })
            .collect::<Result<Vec<bool>>>()?;
        let scale: f64 =
            arg(args, "--scale").map(|s| s.parse()).transpose().context("--scale takes a number")?.unwrap_or(1.0);
        if scale.is_nan() || scale <= 0.0 {
            bail!("--scale must be above 0");
        }
        Ok(Config {
            pileup: arg(args, "--pileup").context("--pileup PATH is required")?,
            shapes: list("--shapes", "fits,beyond,many"),
            scale,
            threads: num("--threads", 2)?.max(1) as usize,
            chunk_rows: num("--chunk-rows", 200_000)?.max(1),
            rounds: num("--rounds", 5)?.max(1) as usize,
            binlog,
            reuse: arg(args, "--reuse"),
        })
    }
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let cfg = Config::parse(&args)?;
    let shapes = data::shapes(&cfg.shapes, cfg.scale)?;
    for tool in ["mydumper", "myloader"] {
        if Command::new(tool).arg("--version").output().is_err() {
            bail!("{tool} is needed (Debian: apt-get install mydumper)");
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
    // A writer committing all along, as on a server in use; its own server
    // thread's CPU is left out of the server's.
    c.query_drop("CREATE DATABASE IF NOT EXISTS bench_hot")?;
    c.query_drop("CREATE TABLE IF NOT EXISTS bench_hot.hot (id INT PRIMARY KEY, v BIGINT)")?;
    c.query_drop("INSERT IGNORE INTO bench_hot.hot VALUES (1, 0)")?;
    let writer = Probe::writer(&sb, "UPDATE bench_hot.hot SET v = v + 1 WHERE id = 1")?;
    let meters = measure::Meters {
        server_pid: sb.pid(),
        server_stat: format!("/proc/{}/stat", sb.pid()),
        writer_stat: writer.server_tid.map(|t| format!("/proc/{}/task/{t}/stat", sb.pid())),
        device_stat: measure::Meters::device_of(&sb.endpoint.dir),
    };
    let scratch = std::env::temp_dir().join(format!("pileup-dump-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut md = format!(
        "\npileup dump/load against mydumper/myloader 0.10.1 ({} threads each, chunks of {} rows), {}.\n",
        cfg.threads,
        cfg.chunk_rows,
        if meters.device_stat.is_some() {
            "the datadir's device measured"
        } else {
            "no device statistics for the datadir"
        }
    );
    for shape in &shapes {
        data::fill(&mut c, shape)?;
        data::pool(&mut c, shape.pool_mib)?;
        let bytes = data::bytes(&mut c, shape)?;
        let source = data::checksums(&mut c, &shape.db, shape)?;
        let run = rounds::Rounds {
            cfg: &cfg,
            sock: sb.endpoint.socket.to_string_lossy().into_owned(),
            meters: meters.clone(),
            shape,
            source,
            scratch: scratch.clone(),
            writer: &writer,
        };
        // The writer's worst round trip with nothing running, 3 s a round.
        let mut idle_ms = vec![];
        for _ in 0..cfg.rounds.min(3) {
            rounds::settle(&mut c)?;
            let t = std::time::Instant::now();
            std::thread::sleep(Duration::from_secs(3));
            idle_ms.push(writer.worst(t, std::time::Instant::now()).as_secs_f64() * 1e3);
        }
        let cells = run.run(&mut c)?;
        writer.check()?;
        c.query_drop(format!("DROP DATABASE IF EXISTS `{}_l`", shape.db))?;
        let section = report::shape(shape, bytes, &cells, &idle_ms, cfg.threads, cfg.rounds);
        eprint!("{section}");
        md.push_str(&section);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    md.push_str(NOTES);
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    Ok(())
}

const NOTES: &str = "
Like for like: both tools dump the same tables with the same threads and chunk rows, to the same disk, and load what they dumped into a new database on the same server; both write plain files, or both gzip (mydumper 0.10.1 has no other compressor and no level: zlib's default, 6; pileup's gzip is level 1); pileup's zstd is beside them. A load with the binary log on writes every row to it (`binlog_format=ROW`; myloader with `--enable-binlog`), off writes none (`pileup load --no-binlog`; myloader's default). Every load is checked against the source with CHECKSUM TABLE. Both dumps end with their files on the device: pileup fsyncs each file before naming it, and mydumper's files (which it leaves to the kernel) are fsynced with coreutils' `sync FILE…` as part of its run. Each run starts on a settled server (InnoDB's undo history purged to under 1000 transactions, its dirty pages flushed to under 1%, the kernel's dirty data synced), and each load reads its dump from the device: both tools' dump files are dropped from the page cache before it (`posix_fadvise(DONTNEED)`), as a restore finds them.

CPU seconds are the tool's own (its rusage) and the server's threads' over the run, less the thread serving a writer that commits a one-row update all along; peak RSS is the tool's `VmHWM`. \"bound by\" names, for a pileup load that said index builds were all it waited on (its `only_indexing` event) for a tenth of the run or more, that build; otherwise the device when it had I/O in flight for 60% of the run or more, CPU when tool and server kept 80% of the cores busy, the server's file syncs when its threads spent half the cores' time in them (timed at the syscall tracepoints: the statements then wait on the device's sync latency while the device and the cores idle), and otherwise one core when the run's end (a tenth of it or more) left one core working alone.
";
