//! The two servers and one catch-up: making the backlog, starting the
//! helpers a mode needs, timing the applier and collecting what was seen.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mysql::prelude::Queryable;
use pileup_bench_drivers::arg;
use pileup_replica::device::{device_of, DeviceReport};
use pileup_sandbox::{Options, Sandbox};

use crate::config::{kv, Config, Mode};
use crate::measure::{applier_cpu, applier_runq, applier_tids, cpu_of, machine_busy, status, sysbench, Sample};

/// The primary, the replica and how catch-ups run on them.
pub(crate) struct Bench {
    primary: Sandbox,
    pub(crate) replica: Sandbox,
    pileup: String,
    tables: u64,
    size: u64,
    trx: u64,
    pub(crate) parallel_threads: u64,
    pub(crate) readers: u64,
    profile: Option<String>,
    /// Seconds into a catch-up before --profile starts sampling.
    profile_after: f64,
    pub(crate) label: String,
    /// More `pileup prefetch` options (--prefetch-args "--batch 8 ...").
    pub(crate) prefetch_args: Vec<String>,
    /// Hold purge off during each catch-up (--hold-purge).
    pub(crate) hold_purge: bool,
    /// Catch up with the SQL thread alone (--io-thread-down).
    pub(crate) io_thread_down: bool,
}

impl Bench {
    /// Make the backlog: `trx` transactions in `format`, all in the replica's relay log.
    pub(crate) fn backlog(&self, format: &str) -> Result<()> {
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
            s.prefetch_report = String::from_utf8_lossy(&out.stdout)
                .lines()
                .rev()
                .find(|l| l.contains("\"event\":\"counters\""))
                .unwrap_or("")
                .to_string();
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
    pub(crate) fn catch_up(&mut self, mode: &Mode, lag_for: Option<Duration>) -> Result<Sample> {
        self.replica.restart()?;
        let threads = if mode.parallel { self.parallel_threads } else { 0 };
        self.replica.sql(&format!(
            "SET GLOBAL slave_parallel_mode = 'optimistic'; SET GLOBAL slave_parallel_threads = {threads}"
        ))?;
        let mut c = self.replica.connect()?;
        // Every catch-up starts with the previous one's purge finished (it
        // would otherwise read and latch beside this one's applier).
        pileup_bench_drivers::wait_purged(&mut c, Duration::from_secs(300))?;
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
        s.purge_after = pileup_bench_drivers::wait_purged(&mut c, Duration::from_secs(600))?;
        let st: mysql::Row = c.query_first("SHOW SLAVE STATUS")?.context("no replica status")?;
        let errno: u64 = st.get("Last_SQL_Errno").unwrap_or(0);
        if errno != 0 {
            bail!("the applier failed in mode {}: {:?}", mode.name, st.get::<String, _>("Last_SQL_Error"));
        }
        Ok(s)
    }
}

/// Start the primary and the replica and load the tables (once, with
/// --reuse). Returns the bench and the bytes of data loaded.
pub(crate) fn start(cfg: &Config, args: &[String]) -> Result<(Bench, f64)> {
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
