//! Replica catch-up benchmark: how long an I/O-bound replica takes to apply
//! a fixed backlog with no help, with `pileup prefetch`, with MariaDB's
//! optimistic parallel replication, and with both, side by side in one run,
//! for ROW and MIXED binlog formats.
//!
//! Set-up: a primary (buffer pool large enough for everything, so it makes
//! the backlog quickly) and a replica whose buffer pool is several times
//! smaller than the data, with `innodb_flush_method=O_DIRECT` so a page not
//! in the pool is a real read from the device, not a copy from the OS page
//! cache. sysbench oltp_update_index tables fill both.
//!
//! A round, for one format and one mode: stop the replica's SQL thread;
//! run a fixed number of sysbench oltp_update_index transactions on the
//! primary (uniform keys) and wait until the replica's I/O thread has them
//! all in its relay log; restart the replica (an empty buffer pool: every
//! round starts equally cold), and wait until the previous round's purge is
//! done (history list under 1,000); set the mode (slave_parallel_threads,
//! prefetcher); start the applier and time it until it has applied the
//! primary's position. Modes run in a rotated order each round.
//!
//! Reported per format and mode (medians over rounds): catch-up time,
//! transactions per second, the ratio to the plain applier, the applier
//! threads' own CPU (the bound no prefetcher can beat), the replica's whole
//! CPU, the prefetcher's CPU and buffer-pool reads per transaction. Also,
//! per mode: the history list the catch-up left for purge and how long
//! purge then took on the idle replica (deferring purge moves that work
//! after the catch-up, so a speed-up with that time counted is reported
//! beside the catch-up's own), the whole machine's busy CPU and how long an
//! applier thread sat runnable waiting for a CPU (schedstat; the mean over
//! the threads with parallel replication).
//!
//! Usage: see [`USAGE`] (what `--help` prints).
//!
//! The replica runs with innodb_io_capacity=4000 (max 8000) and
//! innodb_flush_neighbors=0, as a DBA sets them for an SSD; `--cnf` adds or
//! overrides replica server options.
//!
//! `--io-thread-down`: the catch-up of a replica restarted with
//! skip-slave-start whose IO thread stays down (a failover with the primary
//! gone, an operator holding the IO thread): the replica replicates by file
//! and position (a GTID replica discards its relay logs at a restart), each
//! round starts only the SQL thread on the backlog already in the relay
//! log, and `Seconds_Behind_Master` stays NULL throughout; the prefetcher
//! runs with its default `--min-lag`.
//!
//! `--reuse DIR` keeps both servers' datadirs in DIR and loads the tables
//! only when DIR does not already hold them.
//!
//! After the timed rounds, `--lag-rounds N` (default 1) extra catch-ups per
//! format run under `pileup lag` for the plain applier and with the
//! prefetcher: where the applier's time goes, and so the most any prefetcher
//! can win here (the page-read share). Before the rounds, the device's
//! random-read latency and parallel throughput are measured, alone and
//! while four threads write (an I/O-bound replica flushes as much as it
//! reads); during every catch-up, what the replica's device did
//! (/proc/diskstats: reads, writes, read latency, busy time).
//!
//! `prewarmed` (not in the default modes) is the ceiling for any
//! prefetcher: the applier is held at its first transaction while the
//! prefetcher reads the whole backlog, and only then timed. Use it with a
//! backlog whose pages fit in the pool (`--trx 2000` for 128 MB): every page
//! the applier needs is then in memory before it starts, and what remains
//! is its CPU, latches, commits and the replica's own writes.
//!
//! The `-deferred` modes (not in the default modes) hold InnoDB's purge off
//! while the applier catches up: with the prefetcher by `pileup prefetch
//! --defer-purge`, without it by a session holding a consistent snapshot
//! (the same hold), so what deferring purge is worth and what prefetching
//! adds to it are told apart. `pages` and `both-pages` run the prefetcher
//! with `--warm pages`; `pages-deferred` and `both-pages-deferred` with
//! `--warm pages --defer-purge`.
//!
//! `--hold-purge` (a diagnostic) keeps purge from running during each
//! catch-up: a session holds a consistent snapshot taken just before the
//! applier starts, so the history the catch-up creates is purged only
//! before the next one. It shows what purge costs the applier beside it.
//!
//! `--profile DIR` also samples the applier threads' stacks for 3 s of each
//! catch-up, starting `--profile-after SECS` (default 0) into it, so the
//! steady state rather than the cold start can be looked at
//! (`pileup stacks --focus sql-thread`), into DIR/ROUND-FORMAT-MODE.txt,
//! with what the applier threads and every kind of server thread waited on
//! (performance_schema: `-waits.txt`, `-waits-all.txt`), pages read by page
//! type when the server counts them (`-page-reads.txt`, with `--cnf
//! innodb_monitor_enable=module_buffer_page`), the prefetcher's
//! counters and stderr, and the lag rounds' `pileup lag --json` reports.

/// What `--help` prints; the flags it names are the ones accepted.
const USAGE: &str = "Usage: prefetch-bench --pileup PATH [--tables 8] [--table-size 1250000]
  [--pool 128M] [--trx 30000] [--rounds 3] [--formats ROW,MIXED]
  [--modes none,prefetch,parallel,both[,prewarmed,deferred,prefetch-deferred,parallel-deferred,both-deferred,pages,both-pages,pages-deferred,both-pages-deferred]]
  [--parallel-threads 4]
  [--readers 4] [--lag-rounds 1] [--prefetch-args \"--batch 8 ...\"] [--cnf KEY=VALUE]... [--hold-purge] [--io-thread-down] [--profile DIR [--profile-after SECS]] [--reuse DIR] [--out FILE]";

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::{arg, median};
use pileup_replica::device::{device_of, DeviceReport};
use pileup_sandbox::{Options, Sandbox};

fn sysbench(sock: &str, tables: u64, size: u64, extra: &[String]) -> Result<()> {
    let out = Command::new("sysbench")
        .arg("oltp_update_index")
        .args(["--db-driver=mysql", &format!("--mysql-socket={sock}"), "--mysql-user=root", "--mysql-db=sbtest"])
        .args([format!("--tables={tables}"), format!("--table-size={size}")])
        .args(extra)
        .output()
        .context("running sysbench (make deps installs it)")?;
    if !out.status.success() {
        bail!("sysbench {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// utime + stime of a process or one of its threads, in seconds.
fn cpu_of(stat_path: &str) -> f64 {
    pileup_bench_drivers::stat_cpu(stat_path, 2)
}

/// OS thread ids of the replication applier threads (SQL driver and workers).
fn applier_tids(replica: &Sandbox) -> Result<Vec<u64>> {
    let tids: Vec<Option<u64>> = replica
        .connect()?
        .query("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE NAME IN ('thread/sql/slave_sql', 'thread/sql/slave_worker', 'thread/sql/rpl_parallel_thread')")?;
    Ok(tids.into_iter().flatten().collect())
}

fn applier_cpu(pid: u32, tids: &[u64]) -> f64 {
    tids.iter().map(|t| cpu_of(&format!("/proc/{pid}/task/{t}/stat"))).sum()
}

/// Seconds an applier thread spent runnable but waiting for a CPU, the mean
/// over the applier threads (the second field of
/// /proc/PID/task/TID/schedstat, in nanoseconds): one thread's figure
/// without parallel replication, a worker's on average with it.
fn applier_runq(pid: u32, tids: &[u64]) -> f64 {
    let waits: Vec<f64> = tids
        .iter()
        .filter_map(|&t| pileup_engine::process::sched_times(pid as i32, t as i32))
        .map(|s| s.waiting_ns as f64)
        .collect();
    waits.iter().sum::<f64>() / waits.len().max(1) as f64 / 1e9
}

/// CPU seconds the whole machine spent busy (every state but idle and
/// iowait, summed over cores), from the first line of /proc/stat.
fn machine_busy() -> f64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> =
        s.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    f.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum::<f64>() / tick
}

fn status(c: &mut mysql::Conn, name: &str) -> Result<f64> {
    Ok(pileup_conn::global_status(c, name)?.unwrap_or(0) as f64)
}

/// Wait (at most `limit`) until purge has brought InnoDB's history list
/// under 1,000, the bar every catch-up starts from; returns the seconds
/// waited.
fn wait_purged(c: &mut mysql::Conn, limit: Duration) -> Result<f64> {
    let t = Instant::now();
    while status(c, "Innodb_history_list_length")? > 1000.0 && t.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(t.elapsed().as_secs_f64())
}

#[derive(Default, Clone)]
struct Sample {
    secs: f64,
    applier_cpu: f64,
    replica_cpu: f64,
    prefetch_cpu: f64,
    pool_reads: f64,
    wait_free: f64,
    /// The replica's device over the catch-up (none if /proc/diskstats
    /// does not list it).
    disk: Option<DeviceReport>,
    /// The prefetcher's last counters line (JSON).
    prefetch_report: String,
    /// `pileup lag --json` of this catch-up (untimed composition rounds only).
    lag_json: String,
    /// Seconds an applier thread waited in the run queue for a CPU (mean
    /// over the applier threads).
    applier_runq: f64,
    /// CPU seconds the whole machine was busy during the catch-up.
    machine_busy: f64,
    /// InnoDB's history list when the applier had caught up (and any purge
    /// hold was released): the purge work this catch-up left behind.
    history_left: f64,
    /// Seconds from then until purge brought the history list under 1,000
    /// on the otherwise idle replica (the bar every round starts from).
    purge_after: f64,
}

/// What the device did while a probe ran: random 16 KiB O_DIRECT reads
/// from a table file and, optionally, random 16 KiB O_DIRECT writes to a
/// scratch file at the same time.
struct Probe {
    /// Median read latency, microseconds.
    read_us: f64,
    reads_per_s: f64,
    writes_per_s: f64,
}

/// Random 16 KiB reads with O_DIRECT from `file`, `readers` at a time, for
/// `secs`, while `writers` threads write random 16 KiB pages to `scratch`
/// (a file of `file`'s filesystem, created and removed here). One page read
/// alone and several at once say what parallel reads gain on an idle
/// device; with writers they say what is left when the device is also
/// flushing, as an I/O-bound replica's is: the numbers that decide what any
/// prefetcher can win. `sync_every`: each writer syncs the file after that
/// many writes, as InnoDB does after each doublewrite batch; sustained for
/// many seconds this says how much the device writes beside reads (a few
/// seconds without syncs flatter it: measured here, 3 s unsynced gave 13,752
/// reads/s beside 13,170 writes/s; 15 s syncing, 7,352 reads/s beside 13,656
/// writes/s, 224 MB/s — and no catch-up mode of the replica wrote more than
/// 219 MB/s).
fn device_probe(
    file: &std::path::Path,
    readers: usize,
    writers: usize,
    sync_every: Option<u64>,
    scratch: &std::path::Path,
    secs: f64,
) -> Result<Probe> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    let pages = f.metadata()?.len() / 16384;
    if pages < 2 {
        bail!("{} is too small to probe", file.display());
    }
    // 256 MiB written sequentially first, so the random writes overwrite
    // allocated blocks like InnoDB's page flushes do.
    const SCRATCH_PAGES: u64 = 16384;
    let w = if writers > 0 {
        let w = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let mut v = vec![0x5au8; (1 << 20) + 4096];
        let off = v.as_ptr().align_offset(4096);
        for i in 0..SCRATCH_PAGES / 64 {
            w.write_all_at(&v[off..off + (1 << 20)], i << 20)?;
        }
        w.sync_all()?;
        v.clear();
        Some(w)
    } else {
        None
    };
    // O_DIRECT wants an aligned buffer: 16 KiB inside a 20 KiB vector.
    fn aligned() -> Vec<u8> {
        vec![0u8; 20480]
    }
    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut lat: Vec<f64> = Vec::new();
    let mut written = 0u64;
    std::thread::scope(|sc| -> Result<()> {
        let rs: Vec<_> = (0..readers)
            .map(|t| {
                let f = &f;
                sc.spawn(move || -> Result<Vec<f64>> {
                    let mut v = aligned();
                    let off = v.as_ptr().align_offset(4096);
                    let buf = &mut v[off..off + 16384];
                    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
                    let mut out = Vec::new();
                    while Instant::now() < deadline {
                        let at = (xorshift(&mut x) % pages) * 16384;
                        let t0 = Instant::now();
                        f.read_exact_at(buf, at)?;
                        out.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                    Ok(out)
                })
            })
            .collect();
        let ws: Vec<_> = (0..writers)
            .map(|t| {
                let w = w.as_ref();
                sc.spawn(move || -> Result<u64> {
                    let Some(w) = w else { return Ok(0) };
                    let mut v = aligned();
                    let off = v.as_ptr().align_offset(4096);
                    let buf = &mut v[off..off + 16384];
                    buf.fill(0xa5);
                    let mut x: u64 = 0x2545_F491_4F6C_DD1D ^ (t as u64 + 1);
                    let mut n = 0;
                    while Instant::now() < deadline {
                        w.write_all_at(buf, (xorshift(&mut x) % SCRATCH_PAGES) * 16384)?;
                        n += 1;
                        if sync_every.is_some_and(|k| n % k == 0) {
                            w.sync_data()?;
                        }
                    }
                    Ok(n)
                })
            })
            .collect();
        for h in rs {
            lat.extend(h.join().map_err(|_| anyhow::anyhow!("probe thread panicked"))??);
        }
        for h in ws {
            written += h.join().map_err(|_| anyhow::anyhow!("probe thread panicked"))??;
        }
        Ok(())
    })?;
    if writers > 0 {
        let _ = std::fs::remove_file(scratch);
    }
    let n = lat.len() as f64;
    Ok(Probe { read_us: median(&lat), reads_per_s: n / secs, writes_per_s: written as f64 / secs })
}

/// Where the applier threads' time went, from `pileup lag --json`: share
/// (0..1) per category name, and as "ps_data_file" the share
/// performance_schema measured inside InnoDB data-file reads (the call, so
/// including the wait for a CPU after it).
fn lag_shares(json: &str) -> Result<Vec<(String, f64)>> {
    let v: serde_json::Value = serde_json::from_str(json).context("pileup lag --json output")?;
    let t = &v["tally"];
    let n = t["samples"].as_f64().unwrap_or(0.0).max(1.0);
    let mut out: Vec<(String, f64)> = t["by_category"]
        .as_object()
        .map(|m| m.iter().map(|(k, c)| (k.clone(), c.as_f64().unwrap_or(0.0) / n)).collect())
        .unwrap_or_default();
    let wall = v["seconds"].as_f64().unwrap_or(0.0) * v["applier_threads"].as_f64().unwrap_or(1.0).max(1.0);
    let file: f64 = v["waits"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter(|x| x["event"] == "wait/io/file/innodb/innodb_data_file")
                .filter_map(|x| x["seconds"].as_f64())
                .sum()
        })
        .unwrap_or(0.0);
    if wall > 0.0 {
        out.push(("ps_data_file".into(), file / wall));
    }
    // Share of the period the applier stood still (stalls of 200 ms or more).
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    if secs > 0.0 {
        out.push(("stalled".into(), v["stalls"]["seconds"].as_f64().unwrap_or(0.0) / secs));
    }
    Ok(out)
}

struct Mode {
    name: &'static str,
    prefetch: bool,
    parallel: bool,
    /// The ceiling, not a way to run a replica: the applier is held at its
    /// first transaction (another session holds FLUSH TABLES WITH READ
    /// LOCK) while the prefetcher reads the whole backlog, and the clock
    /// starts when the lock is released. Only meaningful when the backlog's
    /// pages fit in the buffer pool (`--trx 2000` with a 128 MB pool).
    prewarm: bool,
    /// Purge held off during the catch-up: by `pileup prefetch
    /// --defer-purge` when prefetching, else by a session holding a
    /// consistent snapshot (what the option does, without the prefetcher).
    defer: bool,
    /// `pileup prefetch --warm pages`.
    pages: bool,
}

const MODES: [Mode; 13] = [
    Mode { name: "none", prefetch: false, parallel: false, prewarm: false, defer: false, pages: false },
    Mode { name: "prefetch", prefetch: true, parallel: false, prewarm: false, defer: false, pages: false },
    Mode { name: "parallel", prefetch: false, parallel: true, prewarm: false, defer: false, pages: false },
    Mode { name: "both", prefetch: true, parallel: true, prewarm: false, defer: false, pages: false },
    Mode { name: "prewarmed", prefetch: true, parallel: false, prewarm: true, defer: false, pages: false },
    Mode { name: "deferred", prefetch: false, parallel: false, prewarm: false, defer: true, pages: false },
    Mode { name: "prefetch-deferred", prefetch: true, parallel: false, prewarm: false, defer: true, pages: false },
    Mode { name: "parallel-deferred", prefetch: false, parallel: true, prewarm: false, defer: true, pages: false },
    Mode { name: "both-deferred", prefetch: true, parallel: true, prewarm: false, defer: true, pages: false },
    Mode { name: "pages", prefetch: true, parallel: false, prewarm: false, defer: false, pages: true },
    Mode { name: "both-pages", prefetch: true, parallel: true, prewarm: false, defer: false, pages: true },
    Mode { name: "pages-deferred", prefetch: true, parallel: false, prewarm: false, defer: true, pages: true },
    Mode { name: "both-pages-deferred", prefetch: true, parallel: true, prewarm: false, defer: true, pages: true },
];

struct Bench {
    primary: Sandbox,
    replica: Sandbox,
    pileup: String,
    tables: u64,
    size: u64,
    trx: u64,
    parallel_threads: u64,
    readers: u64,
    profile: Option<String>,
    /// Seconds into a catch-up before --profile starts sampling.
    profile_after: f64,
    label: String,
    /// More `pileup prefetch` options (--prefetch-args "--batch 8 ...").
    prefetch_args: Vec<String>,
    /// Hold purge off during each catch-up (--hold-purge).
    hold_purge: bool,
    /// Catch up with the SQL thread alone (--io-thread-down).
    io_thread_down: bool,
}

impl Bench {
    /// Make the backlog: `trx` transactions in `format`, all in the replica's relay log.
    fn backlog(&self, format: &str) -> Result<()> {
        // The IO thread may be down since the last catch-up.
        self.replica.sql("START SLAVE IO_THREAD; STOP SLAVE SQL_THREAD")?;
        self.primary.sql(&format!("SET GLOBAL binlog_format = '{format}'"))?;
        let sock = self.primary.endpoint.socket.display().to_string();
        let extra: Vec<String> =
            ["--threads=4", "--time=0", &format!("--events={}", self.trx), "--rand-type=uniform", "run"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        sysbench(&sock, self.tables, self.size, &extra)?;
        Ok(self.replica.wait_received(&self.primary, Duration::from_secs(300))?)
    }

    /// The `prewarmed` mode's set-up: hold the applier at its first
    /// transaction with a global read lock, start it, and wait until the
    /// prefetcher has read the whole backlog (the buffer pool's reads have
    /// stopped for a second). Returns the session holding the lock.
    fn prewarm(&self, c: &mut mysql::Conn) -> Result<mysql::Conn> {
        let mut gate = self.replica.connect()?;
        gate.query_drop("FLUSH TABLES WITH READ LOCK")?;
        self.replica.sql("START SLAVE")?;
        let t = Instant::now();
        let first = status(c, "Innodb_buffer_pool_reads")?;
        let (mut last, mut quiet) = (first, Instant::now());
        // Quiet for a second once the reads have begun (or never began in 10 s).
        while quiet.elapsed() < Duration::from_secs(1) || (last == first && t.elapsed() < Duration::from_secs(10)) {
            std::thread::sleep(Duration::from_millis(200));
            let r = status(c, "Innodb_buffer_pool_reads")?;
            if r != last {
                (last, quiet) = (r, Instant::now());
            }
            if t.elapsed() > Duration::from_secs(600) {
                bail!("the prefetcher was still reading after 600 s of prewarming");
            }
        }
        Ok(gate)
    }

    /// `pileup prefetch` for a mode that prefetches, given time to connect
    /// and find the relay log before the applier starts.
    fn start_prefetcher(&self, mode: &Mode) -> Result<Option<Child>> {
        if !mode.prefetch {
            return Ok(None);
        }
        let ch = Command::new(&self.pileup)
            .args([
                "prefetch",
                "-S",
                self.replica.endpoint.socket.to_str().unwrap(),
                "-u",
                "root",
                "--stats-every",
                "1",
                "--json",
            ])
            // With the IO thread down, the defaults must find the work.
            .args(if self.io_thread_down { &[][..] } else { &["--min-lag", "0"][..] })
            .arg(format!("--threads={}", self.readers))
            .args(&self.prefetch_args)
            .args(if mode.defer { &["--defer-purge"][..] } else { &[][..] })
            .args(if mode.pages { &["--warm", "pages"][..] } else { &[][..] })
            .args(if mode.prewarm {
                &["--window-events", "1000000000", "--window-keys", "1000000000", "--window-secs", "1000000"][..]
            } else {
                &[][..]
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting pileup prefetch")?;
        // Let it connect and find the relay log before the applier starts.
        std::thread::sleep(Duration::from_millis(500));
        Ok(Some(ch))
    }

    /// `pileup lag` on the replica for `d`.
    fn start_lag(&self, pid: u32, d: Duration) -> Result<Child> {
        Command::new(&self.pileup)
            .args(["lag", "--pid", &pid.to_string(), "--interval-ms", "10", "--json", "-S"])
            .arg(&self.replica.endpoint.socket)
            .args(["-u", "root", &format!("--duration={}ms", d.as_millis())])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting pileup lag")
    }

    /// --profile DIR: the applier threads' stacks for 3 s of this catch-up
    /// (not in a lag round: pileup lag is tracing the server then, and a
    /// process has one tracer at a time), and which system call they are
    /// in, sampled from /proc meanwhile.
    fn profile_applier(&self, mode: &Mode, pid: u32, tids: &[u64], dir: &str) -> Result<std::io::Result<Child>> {
        if self.profile_after > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(self.profile_after));
        }
        let out = format!("{dir}/{}-{}.txt", self.label, mode.name);
        let prof = Command::new(&self.pileup)
            .args(["stacks", "--pid", &pid.to_string(), "--focus", "sql-thread", "--duration", "3s"])
            .args(["--interval-ms", "10", "-S"])
            .arg(&self.replica.endpoint.socket)
            .args(["-u", "root", "-o", &out])
            .stdout(Stdio::null())
            .spawn();
        let mut hist: HashMap<String, u64> = HashMap::new();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            for tid in tids {
                let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
                let f: Vec<&str> = sc.split_whitespace().collect();
                let key = match f.first() {
                    Some(&"running") => "running".to_string(),
                    Some(n) => format!("{n} {} {}", f.get(1).unwrap_or(&""), f.get(2).unwrap_or(&"")),
                    None => "?".into(),
                };
                *hist.entry(key).or_default() += 1;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut v: Vec<_> = hist.into_iter().collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.1));
        let text: String = v.iter().take(30).map(|(k, n)| format!("{n:6} {k}\n")).collect();
        pileup_bench_drivers::write(format!("{dir}/{}-{}-syscalls.txt", self.label, mode.name), text)?;
        Ok(prof)
    }

    /// --profile DIR: what the applier threads and every kind of thread
    /// waited on, and pages read by type, into DIR.
    fn write_waits(&self, c: &mut mysql::Conn, mode: &Mode, tids: &[u64], dir: &str) -> Result<()> {
        // What the applier threads waited on, by instrument (as many as
        // the server was started with: see --cnf performance_schema_instrument).
        let rows: Vec<(String, u64, f64)> = c.query(format!(
            "SELECT EVENT_NAME, SUM(COUNT_STAR), SUM(SUM_TIMER_WAIT)/1e12 FROM performance_schema.events_waits_summary_by_thread_by_event_name \
             WHERE THREAD_ID IN (SELECT THREAD_ID FROM performance_schema.threads WHERE THREAD_OS_ID IN ({})) AND COUNT_STAR > 0 \
             GROUP BY EVENT_NAME ORDER BY 3 DESC LIMIT 25",
            tids.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",")
        ))?;
        let text: String = rows.iter().map(|(n, k, t)| format!("{t:10.3} s {k:10} {n}\n")).collect();
        pileup_bench_drivers::write(format!("{dir}/{}-{}-waits.txt", self.label, mode.name), text)?;
        // …and what every kind of thread waited on (readers, purge,
        // page cleaner): who else holds what the applier waits for.
        let rows: Vec<(String, String, u64, f64)> = c.query(
            "SELECT t.NAME, w.EVENT_NAME, SUM(w.COUNT_STAR), SUM(w.SUM_TIMER_WAIT)/1e12 FROM performance_schema.events_waits_summary_by_thread_by_event_name w \
             JOIN performance_schema.threads t USING (THREAD_ID) WHERE w.COUNT_STAR > 0 AND w.EVENT_NAME NOT LIKE 'idle%' \
             GROUP BY t.NAME, w.EVENT_NAME ORDER BY 4 DESC LIMIT 40",
        )?;
        let text: String = rows.iter().map(|(t, n, k, s)| format!("{s:10.3} s {k:10} {t} {n}\n")).collect();
        pileup_bench_drivers::write(format!("{dir}/{}-{}-waits-all.txt", self.label, mode.name), text)?;
        // Pages read by page type since the restart before this
        // catch-up, when the server counts them (`--cnf
        // innodb_monitor_enable=module_buffer_page`): index leaves, undo
        // log pages and the rest, which SQL lookups cannot warm.
        let rows: Vec<(String, i64)> =
            c.query("SELECT NAME, COUNT FROM information_schema.INNODB_METRICS WHERE NAME LIKE 'buffer_page_read%' AND COUNT > 0 ORDER BY COUNT DESC")?;
        let text: String = rows.iter().map(|(n, k)| format!("{k:10} {n}\n")).collect();
        pileup_bench_drivers::write(format!("{dir}/{}-{}-page-reads.txt", self.label, mode.name), text)?;
        Ok(())
    }

    /// Collect `pileup lag`'s report and stop the prefetcher, keeping
    /// what they said in the sample (and in --profile's directory).
    fn finish(&self, mode: &Mode, s: &mut Sample, lag: Option<Child>, child: Option<Child>) -> Result<()> {
        if let Some(l) = lag {
            let out = l.wait_with_output()?;
            if !out.status.success() {
                bail!("pileup lag failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            s.lag_json = String::from_utf8_lossy(&out.stdout).into_owned();
            if let Some(dir) = &self.profile {
                pileup_bench_drivers::write(format!("{dir}/{}-{}-lag.json", self.label, mode.name), &s.lag_json)?;
            }
        }
        if let Some(ch) = child {
            s.prefetch_cpu = cpu_of(&format!("/proc/{}/stat", ch.id()));
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(ch.id() as i32), nix::sys::signal::Signal::SIGTERM)?;
            let out = ch.wait_with_output()?;
            if !out.status.success() {
                bail!("pileup prefetch failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            s.prefetch_report = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or("").to_string();
            if let Some(dir) = &self.profile {
                pileup_bench_drivers::write(format!("{dir}/{}-{}-counters.jsonl", self.label, mode.name), &out.stdout)?;
                pileup_bench_drivers::write(format!("{dir}/{}-{}-stderr.txt", self.label, mode.name), &out.stderr)?;
            }
            for l in String::from_utf8_lossy(&out.stderr).lines().take(5) {
                eprintln!("  prefetch said: {l}");
            }
        }
        Ok(())
    }

    /// One timed catch-up in `mode` (the backlog is already in the relay log).
    /// With `lag_for`, `pileup lag` samples the applier for that long (such
    /// a round perturbs what it measures and is not timed).
    fn catch_up(&mut self, mode: &Mode, lag_for: Option<Duration>) -> Result<Sample> {
        self.replica.restart()?;
        let threads = if mode.parallel { self.parallel_threads } else { 0 };
        self.replica.sql(&format!(
            "SET GLOBAL slave_parallel_mode = 'optimistic'; SET GLOBAL slave_parallel_threads = {threads}"
        ))?;
        let mut c = self.replica.connect()?;
        // Every catch-up starts with the previous one's purge finished (it
        // would otherwise read and latch beside this one's applier).
        wait_purged(&mut c, Duration::from_secs(300))?;
        let pid = self.replica.pid();
        let child = self.start_prefetcher(mode)?;
        // --hold-purge: a session with a consistent snapshot from before the
        // applier starts keeps purge from removing anything it changes (a
        // diagnostic: on a real replica the history list would grow).
        let purge_hold = if self.hold_purge || (mode.defer && !mode.prefetch) {
            let mut h = self.replica.connect()?;
            h.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")?;
            Some(h)
        } else {
            None
        };
        let gate = if mode.prewarm { Some(self.prewarm(&mut c)?) } else { None };
        let reads0 = status(&mut c, "Innodb_buffer_pool_reads")?;
        let waitfree0 = status(&mut c, "Innodb_buffer_pool_wait_free")?;
        let rcpu0 = cpu_of(&format!("/proc/{pid}/stat"));
        let datadir = self.replica.endpoint.dir.join("data").display().to_string();
        let disk0 = device_of(pid as i32, &datadir);
        let t0 = Instant::now();
        match gate {
            Some(mut g) => g.query_drop("UNLOCK TABLES")?,
            None if self.io_thread_down => self.replica.sql("START SLAVE SQL_THREAD")?,
            None => self.replica.sql("START SLAVE")?,
        }
        let tids = applier_tids(&self.replica)?;
        let acpu0 = applier_cpu(pid, &tids);
        let (runq0, busy0) = (applier_runq(pid, &tids), machine_busy());
        let lag = lag_for.map(|d| self.start_lag(pid, d)).transpose()?;
        // --profile DIR: the applier threads' stacks during this catch-up
        // (not in a lag round: pileup lag is tracing the server then, and a
        // process has one tracer at a time).
        let stacks_dir = self.profile.clone().filter(|_| lag_for.is_none());
        let prof = match &stacks_dir {
            Some(dir) => Some(self.profile_applier(mode, pid, &tids, dir)?),
            None => None,
        };
        self.replica.wait_caught_up(&self.primary, Duration::from_secs(3600))?;
        let secs = t0.elapsed().as_secs_f64();
        // CPU over the catch-up itself, before the profile's queries below.
        let (runq, busy) = (applier_runq(pid, &tids) - runq0, machine_busy() - busy0);
        let disk = device_of(pid as i32, &datadir)
            .zip(disk0)
            .map(|((name, b), (_, a))| DeviceReport::between(&name, &a, &b, secs));
        if let Some(Ok(mut p)) = prof {
            let _ = p.wait();
        }
        if let Some(dir) = &self.profile {
            self.write_waits(&mut c, mode, &tids, dir)?;
        }
        let mut s = Sample {
            secs,
            applier_cpu: applier_cpu(pid, &tids) - acpu0,
            replica_cpu: cpu_of(&format!("/proc/{pid}/stat")) - rcpu0,
            pool_reads: status(&mut c, "Innodb_buffer_pool_reads")? - reads0,
            wait_free: status(&mut c, "Innodb_buffer_pool_wait_free")? - waitfree0,
            disk,
            prefetch_cpu: 0.0,
            prefetch_report: String::new(),
            lag_json: String::new(),
            history_left: 0.0,
            purge_after: 0.0,
            applier_runq: runq,
            machine_busy: busy,
        };
        self.finish(mode, &mut s, lag, child)?;
        // What the catch-up left for purge, and how long purge then took:
        // deferring purge moves that work after the catch-up, so the bench
        // times it too (on an idle replica; a live one keeps applying).
        drop(purge_hold);
        s.history_left = status(&mut c, "Innodb_history_list_length")?;
        s.purge_after = wait_purged(&mut c, Duration::from_secs(600))?;
        let st: mysql::Row = c.query_first("SHOW SLAVE STATUS")?.context("no replica status")?;
        let errno: u64 = st.get("Last_SQL_Errno").unwrap_or(0);
        if errno != 0 {
            bail!("the applier failed in mode {}: {:?}", mode.name, st.get::<String, _>("Last_SQL_Error"));
        }
        Ok(s)
    }
}

/// The run's settings, from the command line.
struct Config {
    pileup: String,
    tables: u64,
    size: u64,
    trx: u64,
    rounds: u64,
    lag_rounds: u64,
    pool: String,
    formats: Vec<String>,
    modes: Vec<&'static Mode>,
    /// Keep both servers' data in this directory and load it only once.
    reuse: Option<std::path::PathBuf>,
    /// The replica's options beyond the fixed ones (with --cnf's).
    extra: Vec<(String, String)>,
}

fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

impl Config {
    fn parse(args: &[String]) -> Result<Config> {
        let num = |k: &str, d: u64| -> Result<u64> {
            Ok(arg(args, k).map(|s| s.parse()).transpose().with_context(|| format!("{k} takes a number"))?.unwrap_or(d))
        };
        let formats = arg(args, "--formats")
            .unwrap_or_else(|| "ROW,MIXED".into())
            .split(',')
            .map(|s| s.trim().to_uppercase())
            .collect();
        let wanted = arg(args, "--modes").unwrap_or_else(|| "none,prefetch,parallel,both".into());
        let modes: Vec<&Mode> = MODES.iter().filter(|m| wanted.split(',').any(|w| w.trim() == m.name)).collect();
        if modes.is_empty() || modes[0].name != "none" {
            bail!("--modes must include none (every ratio is to it)");
        }
        // What a DBA sets for an SSD: the default innodb_io_capacity (200) makes
        // the page cleaner the bottleneck of any write-heavy small-pool server.
        // MariaDB skips neighbour flushing on its own when the kernel says the
        // disk is solid-state, but virtual disks (virtio here) often claim to be
        // rotational, and flushing neighbours then writes pages that are dirtied
        // again soon after: the plain applier caught up ~1.2x faster without it.
        let mut extra: Vec<(String, String)> = vec![
            kv("innodb_io_capacity", "4000"),
            kv("innodb_io_capacity_max", "8000"),
            kv("innodb_flush_neighbors", "0"),
        ];
        for (i, a) in args.iter().enumerate() {
            if a == "--cnf" {
                let v = args.get(i + 1).context("--cnf KEY=VALUE")?;
                let (k, v) = v.split_once('=').context("--cnf KEY=VALUE")?;
                extra.retain(|(x, _)| x != k);
                extra.push(kv(k, v));
            }
        }
        Ok(Config {
            pileup: arg(args, "--pileup").context("--pileup PATH")?,
            tables: num("--tables", 8)?,
            size: num("--table-size", 1_250_000)?,
            trx: num("--trx", 30_000)?,
            rounds: num("--rounds", 3)?,
            lag_rounds: num("--lag-rounds", 1)?,
            pool: arg(args, "--pool").unwrap_or_else(|| "128M".into()),
            formats,
            modes,
            reuse: arg(args, "--reuse").map(std::path::PathBuf::from),
            extra,
        })
    }
}

/// Start the primary and the replica and load the tables (once, with
/// --reuse). Returns the bench and the bytes of data loaded.
fn start(cfg: &Config, args: &[String]) -> Result<(Bench, f64)> {
    let named = |n: &str| Options {
        name: cfg.reuse.as_ref().map(|_| n.to_string()),
        base_dir: cfg.reuse.clone(),
        reuse: cfg.reuse.is_some(),
        ..Default::default()
    };
    let primary = Sandbox::start(Options {
        binlog: true,
        cnf: vec![kv("innodb_buffer_pool_size", "4G"), kv("binlog_format", "ROW")],
        ..named("primary")
    })?;
    let replica = Sandbox::start(Options {
        replica_of: Some(primary.endpoint.clone()),
        cnf: vec![
            kv("innodb_buffer_pool_size", &cfg.pool),
            kv("innodb_flush_method", "O_DIRECT"),
            kv("innodb_buffer_pool_load_at_startup", "OFF"),
            kv("innodb_buffer_pool_dump_at_shutdown", "OFF"),
            kv("innodb_log_file_size", "256M"),
            kv("performance_schema", "ON"),
        ]
        .into_iter()
        .chain(cfg.extra.clone())
        .collect(),
        ..named("replica")
    })?;
    let io_thread_down = args.iter().any(|a| a == "--io-thread-down");
    if io_thread_down {
        // A GTID replica discards its relay logs at a restart: by file and
        // position the backlog stays for the SQL thread alone.
        replica.sql("STOP SLAVE; CHANGE MASTER TO MASTER_USE_GTID=no; START SLAVE")?;
    }
    let (tables, size) = (cfg.tables, cfg.size);
    let t0 = Instant::now();
    let marker = cfg.reuse.as_ref().map(|d| d.join("loaded"));
    let loaded = format!("{tables} {size}");
    if marker.as_ref().and_then(|m| std::fs::read_to_string(m).ok()).as_deref() != Some(loaded.as_str()) {
        eprintln!("loading {tables} tables x {size} rows");
        primary.sql("DROP DATABASE IF EXISTS sbtest; CREATE DATABASE sbtest")?;
        sysbench(
            &primary.endpoint.socket.display().to_string(),
            tables,
            size,
            &[format!("--threads={}", tables.min(2)), "prepare".into()],
        )?;
    }
    replica.wait_caught_up(&primary, Duration::from_secs(7200))?;
    if let Some(m) = &marker {
        pileup_bench_drivers::write(m, &loaded)?;
    }
    let bytes: f64 = replica
        .connect()?
        .query_first::<Option<f64>, _>(
            "SELECT SUM(DATA_LENGTH + INDEX_LENGTH) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'sbtest'",
        )?
        .flatten()
        .unwrap_or(0.0);
    eprintln!("loaded {:.2} GB in {:.0} s", bytes / 1e9, t0.elapsed().as_secs_f64());
    let num = |k: &str, d: u64| -> Result<u64> {
        Ok(arg(args, k).map(|s| s.parse()).transpose().with_context(|| format!("{k} takes a number"))?.unwrap_or(d))
    };
    let b = Bench {
        primary,
        replica,
        pileup: cfg.pileup.clone(),
        tables,
        size,
        trx: cfg.trx,
        parallel_threads: num("--parallel-threads", 4)?,
        readers: num("--readers", 4)?,
        profile: arg(args, "--profile"),
        profile_after: arg(args, "--profile-after")
            .map(|v| v.parse::<f64>())
            .transpose()
            .context("--profile-after SECS")?
            .unwrap_or(0.0),
        label: String::new(),
        hold_purge: args.iter().any(|a| a == "--hold-purge"),
        io_thread_down,
        prefetch_args: arg(args, "--prefetch-args")
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default(),
    };
    Ok((b, bytes))
}

/// The device, measured before the rounds: one page read alone, several at
/// once, several beside writers, and sustained beside syncing writers.
struct Device {
    one: Probe,
    four: Probe,
    mixed: Probe,
    sustained: Probe,
}

impl Device {
    fn probe(b: &Bench) -> Result<Device> {
        let ibd = std::fs::read_dir(b.replica.endpoint.dir.join("data/sbtest"))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "ibd"))
            .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .map(|e| e.path())
            .context("no sbtest .ibd file in the replica's datadir")?;
        let scratch = b.replica.endpoint.dir.join("tmp/device-probe");
        let d = Device {
            one: device_probe(&ibd, 1, 0, None, &scratch, 3.0)?,
            four: device_probe(&ibd, 4, 0, None, &scratch, 3.0)?,
            mixed: device_probe(&ibd, 4, 4, None, &scratch, 3.0)?,
            sustained: device_probe(&ibd, 4, 8, Some(64), &scratch, 15.0)?,
        };
        let (one, four, mixed, sustained) = (&d.one, &d.four, &d.mixed, &d.sustained);
        eprintln!(
            "device: 16 KiB O_DIRECT random reads: 1 at a time {:.0} µs, {:.0}/s; 4 at a time {:.0} µs, {:.0}/s; \
             4 at a time with 4 writers {:.0} µs, {:.0} reads/s + {:.0} writes/s; sustained with 8 syncing writers {:.0} µs, {:.0} reads/s + {:.0} writes/s",
            one.read_us, one.reads_per_s, four.read_us, four.reads_per_s,
            mixed.read_us, mixed.reads_per_s, mixed.writes_per_s, sustained.read_us, sustained.reads_per_s, sustained.writes_per_s
        );
        Ok(d)
    }

    /// The device's figures as a paragraph of the report.
    fn describe(&self) -> String {
        let (one, four, mixed, sustained) = (&self.one, &self.four, &self.mixed, &self.sustained);
        format!(
            "\nThe device (16 KiB O_DIRECT random reads of the replica's largest table file, measured before the rounds): \
             one read at a time takes {:.0} µs ({:.0} reads/s); four at a time, {:.0} µs each ({:.0} reads/s, {:.1}× the throughput); \
             four at a time while four threads write random 16 KiB pages to a scratch file, {:.0} µs each ({:.0} reads/s + {:.0} writes/s); \
             sustained for 15 s beside eight writers that sync every 64 writes (as InnoDB syncs each doublewrite batch), {:.0} µs each \
             ({:.0} reads/s + {:.0} writes/s, {:.0} MB/s written).\n",
            one.read_us,
            one.reads_per_s,
            four.read_us,
            four.reads_per_s,
            four.reads_per_s / one.reads_per_s.max(1e-9),
            mixed.read_us,
            mixed.reads_per_s,
            mixed.writes_per_s,
            sustained.read_us,
            sustained.reads_per_s,
            sustained.writes_per_s,
            sustained.writes_per_s * 16384.0 / 1e6
        )
    }
}

/// (format, mode) → the timed catch-ups' samples.
type Samples = HashMap<(String, &'static str), Vec<Sample>>;
/// One list of (category, share) per lag round.
type Shares = Vec<(String, f64)>;
/// (format, mode) → the lag rounds' shares.
type Lagged = HashMap<(String, &'static str), Vec<Shares>>;

/// The timed rounds: every format, every mode in a rotated order.
fn timed_rounds(b: &mut Bench, cfg: &Config) -> Result<Samples> {
    let mut samples = Samples::new();
    let trx = cfg.trx as f64;
    for r in 0..cfg.rounds as usize {
        for f in &cfg.formats {
            for i in 0..cfg.modes.len() {
                let m = cfg.modes[(i + r) % cfg.modes.len()];
                b.backlog(f)?;
                b.label = format!("{}-{f}", r + 1);
                let s = b.catch_up(m, None)?;
                eprintln!(
                    "round {} {f} {}: {:.2} s, {:.0} trx/s, applier CPU {:.2} s, replica CPU {:.2} s, prefetch CPU {:.2} s, pool reads/trx {:.2}, waits for a free page/trx {:.2}, history left {:.0}, purged in {:.1} s, an applier thread waited {:.2} s for a CPU, machine busy {:.2} cores",
                    r + 1,
                    m.name,
                    s.secs,
                    trx / s.secs,
                    s.applier_cpu,
                    s.replica_cpu,
                    s.prefetch_cpu,
                    s.pool_reads / trx,
                    s.wait_free / trx,
                    s.history_left,
                    s.purge_after,
                    s.applier_runq,
                    s.machine_busy / s.secs
                );
                if !s.prefetch_report.is_empty() {
                    eprintln!("  prefetch counters: {}", s.prefetch_report);
                }
                samples.entry((f.clone(), m.name)).or_default().push(s);
            }
        }
    }
    Ok(samples)
}

/// Untimed rounds under `pileup lag`: where the applier's time goes
/// without help and with the prefetcher.
fn lag_rounds(b: &mut Bench, cfg: &Config, samples: &Samples) -> Result<Lagged> {
    let mut lagged = Lagged::new();
    for _ in 0..cfg.lag_rounds {
        for f in &cfg.formats {
            for m in cfg.modes.iter().filter(|m| !m.parallel) {
                let secs = median(
                    &samples
                        .get(&(f.clone(), m.name))
                        .map(|v| v.iter().map(|s| s.secs).collect::<Vec<f64>>())
                        .unwrap_or_default(),
                );
                b.backlog(f)?;
                b.label = format!("lag-{f}");
                let s = b.catch_up(m, Some(Duration::from_secs_f64((secs * 0.6).max(1.0))))?;
                let shares = lag_shares(&s.lag_json)?;
                eprintln!("lag {f} {}: {:.2} s, {shares:?}", m.name, s.secs);
                lagged.entry((f.clone(), m.name)).or_default().push(shares);
            }
        }
    }
    Ok(lagged)
}

fn main() -> Result<()> {
    let args = pileup_bench_drivers::args(USAGE)?;
    let cfg = Config::parse(&args)?;
    let (mut b, bytes) = start(&cfg, &args)?;
    let dev = Device::probe(&b)?;
    let samples = timed_rounds(&mut b, &cfg)?;
    let lagged = lag_rounds(&mut b, &cfg, &samples)?;
    let mut md = header(&b, &cfg, bytes);
    for f in &cfg.formats {
        md.push_str(&format_section(&cfg, f, &samples, &dev));
    }
    md.push_str(&dev.describe());
    if !lagged.is_empty() {
        md.push_str(&lag_table(&cfg, &lagged));
    }
    print!("{md}");
    if let Some(o) = arg(&args, "--out") {
        pileup_bench_drivers::write(o, &md)?;
    }
    Ok(())
}

/// What was run: data, pool, backlog, modes and options.
fn header(b: &Bench, cfg: &Config, bytes: f64) -> String {
    let mut md = format!(
        "\n{:.2} GB of data ({} sysbench tables × {} rows) on a replica with a {} buffer pool and O_DIRECT; \
         backlog {} oltp_update_index transactions (uniform keys) per round, {} rounds, modes in rotated order; \
         parallel = slave_parallel_threads={} slave_parallel_mode=optimistic; prefetch = `pileup prefetch --threads {}{}`; replica options {}{}. Medians.\n",
        bytes / 1e9,
        cfg.tables,
        cfg.size,
        cfg.pool,
        cfg.trx,
        cfg.rounds,
        b.parallel_threads,
        b.readers,
        b.prefetch_args.iter().map(|a| format!(" {a}")).collect::<String>(),
        cfg.extra.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        if b.hold_purge { "; purge held off during each catch-up (--hold-purge: a consistent snapshot taken before the applier starts)" } else { "" }
    );
    if b.io_thread_down {
        md.push_str("Catch-up with the IO thread down: replicating by file and position, restarted with skip-slave-start, `START SLAVE SQL_THREAD` on the backlog in the relay log (Seconds_Behind_Master NULL); the prefetcher with its default --min-lag.\n");
    }
    md
}

/// The median of one figure of one format's catch-ups in a mode.
struct Medians<'a> {
    samples: &'a Samples,
    format: &'a str,
}

impl Medians<'_> {
    fn of(&self, mode: &str, g: &dyn Fn(&Sample) -> f64) -> f64 {
        median(
            &self
                .samples
                .get(&(self.format.to_string(), leak(mode)))
                .map(|v| v.iter().map(g).collect::<Vec<f64>>())
                .unwrap_or_default(),
        )
    }
}

/// One format's tables: speed, purge, CPU, the device, and the bounds.
fn format_section(cfg: &Config, f: &str, samples: &Samples, dev: &Device) -> String {
    let med = Medians { samples, format: f };
    let trx = cfg.trx as f64;
    let base = med.of("none", &|s| s.secs);
    let mut md = format!(
        "\n#### binlog_format={f}\n\n| mode | catch-up (s) | trx/s | speed-up vs none | applier threads' CPU (% of wall) | replica CPU (cores) | prefetcher CPU (cores) | buffer-pool reads per trx |\n|---|---|---|---|---|---|---|---|\n"
    );
    for m in &cfg.modes {
        let secs = med.of(m.name, &|s| s.secs);
        md.push_str(&format!(
            "| {} | {:.2} | {:.0} | {:.2}× | {:.0}% | {:.2} | {:.2} | {:.2} |\n",
            m.name,
            secs,
            trx / secs,
            base / secs,
            100.0 * med.of(m.name, &|s| s.applier_cpu / s.secs),
            med.of(m.name, &|s| s.replica_cpu / s.secs),
            med.of(m.name, &|s| s.prefetch_cpu / s.secs),
            med.of(m.name, &|s| s.pool_reads) / trx
        ));
    }
    md.push_str(&purge_and_cpu_tables(cfg, &med));
    if samples.values().flatten().all(|s| s.disk.is_some()) {
        md.push_str(&disk_table(cfg, &med, dev));
    }
    md.push_str(&bounds(cfg, &med, dev));
    md
}

/// What each catch-up left for purge, and the CPU during it.
fn purge_and_cpu_tables(cfg: &Config, med: &Medians) -> String {
    let base_total = med.of("none", &|s| s.secs + s.purge_after);
    let mut md = String::from(
        "\nWhat each catch-up left for purge (InnoDB's history list when the applier had caught up and any hold was released) \
         and how long purge then took to bring it under 1,000 on the idle replica; the last column counts that time too:\n\n\
         | mode | history left | purge afterwards (s) | catch-up + purge (s) | speed-up vs none, purge included |\n|---|---|---|---|---|\n",
    );
    for m in &cfg.modes {
        let total = med.of(m.name, &|s| s.secs + s.purge_after);
        md.push_str(&format!(
            "| {} | {:.0} | {:.1} | {:.2} | {:.2}× |\n",
            m.name,
            med.of(m.name, &|s| s.history_left),
            med.of(m.name, &|s| s.purge_after),
            total,
            base_total / total
        ));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    md.push_str(&format!(
        "\nCPU during the catch-up: the whole machine's busy time (/proc/stat, every state but idle and iowait) and the time the \
         applier threads were runnable but waiting for a CPU (schedstat; with parallel replication, the mean over its threads):\n\n\
         | mode | machine busy (cores of {cores:.0}) | an applier thread waiting for a CPU (% of wall) |\n|---|---|---|\n"
    ));
    for m in &cfg.modes {
        md.push_str(&format!(
            "| {} | {:.2} | {:.0}% |\n",
            m.name,
            med.of(m.name, &|s| s.machine_busy / s.secs),
            100.0 * med.of(m.name, &|s| s.applier_runq / s.secs)
        ));
    }
    md
}

/// The replica's device during the catch-ups.
fn disk_table(cfg: &Config, med: &Medians, dev: &Device) -> String {
    let trx = cfg.trx as f64;
    let mut md = String::from(
        "\nThe replica's device during the catch-up (/proc/diskstats):\n\n\
         | mode | reads/s | writes/s | MB written/s | mean read latency (µs) | busy | device reads per trx | device writes per trx |\n|---|---|---|---|---|---|---|---|\n",
    );
    for m in &cfg.modes {
        let d = |g: &dyn Fn(&DeviceReport, f64) -> f64| {
            med.of(m.name, &|s| s.disk.as_ref().map(|d| g(d, s.secs)).unwrap_or(0.0))
        };
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0}% | {:.2} | {:.2} |\n",
            m.name,
            d(&|d, _| d.reads_per_s),
            d(&|d, _| d.writes_per_s),
            d(&|d, _| d.mb_written_per_s),
            d(&|d, _| d.mean_read_us),
            d(&|d, _| 100.0 * d.busy),
            d(&|d, t| d.reads_per_s * t) / trx,
            d(&|d, t| d.writes_per_s * t) / trx,
        ));
    }
    let lat = med.of("none", &|s| s.disk.as_ref().map(|d| d.mean_read_us).unwrap_or(0.0));
    let wpt = med.of("none", &|s| s.disk.as_ref().map(|d| d.writes_per_s * s.secs).unwrap_or(0.0)) / trx;
    md.push_str(&if lat > 2.0 * dev.one.read_us {
        format!(
            "\nThe plain applier's replica read a page in {lat:.0} µs on average where the idle device takes {:.0} µs: \
             it also writes ({wpt:.1} writes per transaction: page flushes, doublewrite, redo), and the reads queue behind those writes. \
             A prefetcher adds reads to that queue; it does not remove any.\n",
            dev.one.read_us
        )
    } else {
        format!(
            "\nThe plain applier's replica read a page in {lat:.0} µs on average (the idle device: {:.0} µs; {wpt:.1} writes per transaction).\n",
            dev.one.read_us
        )
    });
    md
}

/// What bounds a speed-up for this format: the device's writes, the
/// applier's CPU, the machine's cores.
fn bounds(cfg: &Config, med: &Medians, dev: &Device) -> String {
    let mut md = String::new();
    let base = med.of("none", &|s| s.secs);
    // What limits a replica catching up on this kind of device is what it
    // writes (page flushes, doublewrite: ~30 KB per write on average), not
    // how many I/Os it makes: the sustained probe's write bandwidth against
    // the plain catch-up's.
    let plain_mbw = med.of("none", &|s| s.disk.as_ref().map(|d| d.mb_written_per_s).unwrap_or(0.0));
    let cap_mbw = dev.sustained.writes_per_s * 16384.0 / 1e6;
    if plain_mbw > 0.0 {
        md.push_str(&format!(
            "\nThe device's bound: the plain catch-up wrote {plain_mbw:.0} MB/s ({:.0} KB per transaction); beside reads, the device sustains about \
             {cap_mbw:.0} MB/s of syncing writes (below), so a mode that writes as much per transaction is capped near {:.2}× here (an estimate: the probe's writes are not InnoDB's). \
             Prefetching moves the applier's reads earlier without making it write less; a larger pool or purge deferred \
             (fewer pages evicted dirty and read back) lowers the bytes per transaction and raises the cap.\n",
            plain_mbw * 1e3 * base / cfg.trx as f64,
            cap_mbw / plain_mbw
        ));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    let applier = med.of("none", &|s| s.applier_cpu);
    let replica_cores = med.of("none", &|s| s.replica_cpu / s.secs);
    md.push_str(&format!(
        "\nBounds for this format: the plain applier thread was on CPU {:.0}% of the time, so removing every wait it has would make it at most {:.2}× faster; \
         the replica used {:.2} of {cores:.0} cores while applying without help, so with the same CPU per transaction the box caps any speed-up near {:.2}×.\n",
        100.0 * applier / base,
        base / applier.max(1e-9),
        replica_cores,
        cores / replica_cores.max(1e-9)
    ));
    md
}

/// Where the applier's time went in the lag rounds, by format and mode.
fn lag_table(cfg: &Config, lagged: &Lagged) -> String {
    let cats = ["page_read", "ps_data_file", "latch_wait", "commit", "cpu", "other_wait", "relay_wait", "stalled"];
    let mut md = format!(
        "\n#### Where the applier's time goes (`pileup lag` over 60% of an extra, untimed catch-up per mode; medians of {})\n\n\
         | format | mode | page reads | (performance_schema: in data-file reads) | lock/latch waits | commit and fsync | CPU in row apply | other waits | waiting for relay log | stood still (stalls ≥ 200 ms) | bound for a prefetcher |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        cfg.lag_rounds
    );
    for f in &cfg.formats {
        for m in cfg.modes.iter().filter(|m| !m.parallel) {
            let Some(v) = lagged.get(&(f.clone(), m.name)) else { continue };
            let share = |c: &str| {
                median(
                    &v.iter()
                        .map(|sh| sh.iter().find(|(k, _)| k == c).map(|x| x.1).unwrap_or(0.0))
                        .collect::<Vec<f64>>(),
                )
            };
            let cells: Vec<String> = cats.iter().map(|c| format!("{:.0}%", 100.0 * share(c))).collect();
            // A prefetcher can at best take the applier's own page reads away.
            let bound = if m.prefetch {
                "".to_string()
            } else {
                format!("≤ {:.2}×", 1.0 / (1.0 - share("page_read")).max(1e-9))
            };
            md.push_str(&format!("| {f} | {} | {} | {bound} |\n", m.name, cells.join(" | ")));
        }
    }
    md.push_str(
        "\nShares of the applier threads' time from stack samples (each thread is stopped for microseconds every 10 ms; \
         a thread in a read stops as the read returns, so \"page reads\" includes the wait for a CPU after it), and, for comparison, \
         the time performance_schema measured inside InnoDB data-file reads over the same period. \
         The bound assumes a prefetcher removes every page read the applier itself makes and nothing else changes: \
         1 / (1 − page-read share). Lock/latch waits (pages in flight, the index tree latch, purge) and CPU stay. \
         \"Stood still\": the share of the period inside stretches of 200 ms or more in which the applier had work and its \
         relay log position did not move (`pileup lag`'s stalls; the sampled position is read every 10 ms).\n",
    );
    md
}

/// Mode names are 'static; map a borrowed one back for the lookup.
fn leak(m: &str) -> &'static str {
    MODES.iter().find(|x| x.name == m).map(|x| x.name).unwrap_or("none")
}
