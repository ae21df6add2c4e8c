//! Poll: one round of raw values from the server and the OS.
//!
//! SQL: `SHOW GLOBAL STATUS`, replica status. OS: `/proc/stat`, the server
//! process's CPU and I/O, `/proc/diskstats` for the device holding the
//! datadir. Every query is bounded (client read timeout and server-side
//! `max_statement_time`); a poll that fails or times out is data, recorded
//! as `poll_ok = 0` with the reason, and the connection is rebuilt next time.
//! Polls never overlap: the caller runs them one after another.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;

/// One poll's outcome.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Poll {
    /// Unix time, seconds.
    pub unix: f64,
    /// Whether the SQL part answered.
    pub ok: bool,
    pub error: Option<String>,
    /// How long the whole poll took (its own cost), milliseconds.
    pub cost_ms: f64,
    /// Raw values: status variables (lower case) and OS values (`os_*`,
    /// `mysqld_*`, `disk_*`), all numbers.
    pub values: BTreeMap<String, f64>,
}

/// Polls one server. Keeps its connection between polls.
pub struct Poller {
    spec: ConnSpec,
    conn: Option<mysql::Conn>,
    pid: Option<i32>,
    datadir_dev: Option<(u32, u32)>,
    is_mariadb: bool,
}

impl Poller {
    /// `timeout` bounds connecting and every query of a poll.
    pub fn new(mut spec: ConnSpec, pid: Option<i32>, timeout: Duration) -> Poller {
        spec.timeout = timeout;
        Poller { spec, conn: None, pid, datadir_dev: None, is_mariadb: true }
    }

    pub fn pid(&self) -> Option<i32> {
        self.pid
    }

    fn connect(&mut self) -> anyhow::Result<&mut mysql::Conn> {
        if self.conn.is_none() {
            let mut c = self.spec.connect()?;
            let (flavor, _) = pileup_conn::flavor(&mut c)?;
            self.is_mariadb = flavor == pileup_conn::Flavor::MariaDb;
            if self.datadir_dev.is_none() {
                let dd: Option<String> = c.query_first("SELECT @@datadir").unwrap_or(None);
                self.datadir_dev = dd.and_then(|d| device_of(&d, self.pid));
            }
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().unwrap())
    }

    /// One poll. Never returns an error: failure is part of the result.
    pub fn poll(&mut self) -> Poll {
        let t0 = Instant::now();
        let unix = now_unix();
        let mut values = BTreeMap::new();
        let sql = self.poll_sql(&mut values);
        if let Err(e) = &sql {
            // A failed or timed-out connection is not reused.
            self.conn = None;
            tracing::debug!("poll failed: {e:#}");
        }
        if let Some(pid) = self.pid {
            os_values(pid, self.datadir_dev, &mut values);
        }
        let ok = sql.is_ok();
        values.insert("poll_ok".into(), if ok { 1.0 } else { 0.0 });
        let cost_ms = t0.elapsed().as_secs_f64() * 1e3;
        values.insert("poll_cost_ms".into(), cost_ms);
        Poll { unix, ok, error: sql.err().map(|e| format!("{e:#}")), cost_ms, values }
    }

    fn poll_sql(&mut self, values: &mut BTreeMap<String, f64>) -> anyhow::Result<()> {
        let is_mariadb = {
            self.connect()?;
            self.is_mariadb
        };
        let c = self.conn.as_mut().unwrap();
        let rows: Vec<(String, String)> = c.query("SHOW GLOBAL STATUS")?;
        for (k, v) in rows {
            if let Ok(x) = v.parse::<f64>() {
                values.insert(k.to_ascii_lowercase(), x);
            } else if v == "ON" || v == "OFF" {
                values.insert(k.to_ascii_lowercase(), if v == "ON" { 1.0 } else { 0.0 });
            }
        }
        // Threads_running counts the thread running our own SHOW STATUS:
        // report the server's threads, not the watcher.
        if let Some(r) = values.get_mut("threads_running") {
            *r = (*r - 1.0).max(0.0);
        }
        let q = if is_mariadb { "SHOW ALL SLAVES STATUS" } else { "SHOW REPLICA STATUS" };
        if let Ok(rows) = c.query::<mysql::Row, _>(q) {
            let mut lag: Option<f64> = None;
            for r in &rows {
                let cols = r.columns_ref();
                let idx = cols.iter().position(|c| c.name_str() == "Seconds_Behind_Master" || c.name_str() == "Seconds_Behind_Source");
                if let Some(i) = idx {
                    let v: Option<Option<i64>> = r.get_opt(i).and_then(|x| x.ok());
                    if let Some(Some(s)) = v {
                        lag = Some(lag.unwrap_or(0.0).max(s as f64));
                    }
                }
            }
            if let Some(l) = lag {
                values.insert("replica_lag".into(), l);
            }
            values.insert("replica_channels".into(), rows.len() as f64);
        }
        Ok(())
    }
}

pub fn now_unix() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// major:minor of the block device holding `path` (seen from the server's root).
fn device_of(path: &str, pid: Option<i32>) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let p = match pid {
        Some(pid) => format!("/proc/{pid}/root{path}"),
        None => path.to_string(),
    };
    let dev = std::fs::metadata(p).ok()?.dev();
    Some((((dev >> 8) & 0xfff) as u32 | ((dev >> 32) & !0xfff) as u32, ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32))
}

/// OS values: host CPU, the server process's CPU and I/O, the datadir's disk.
fn os_values(pid: i32, dev: Option<(u32, u32)>, out: &mut BTreeMap<String, f64>) {
    if let Ok(s) = std::fs::read_to_string("/proc/stat") {
        if let Some(cpu) = s.lines().next() {
            let f: Vec<f64> = cpu.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            if f.len() >= 5 {
                let total: f64 = f.iter().sum();
                let idle = f[3] + f[4];
                out.insert("os_cpu_ticks".into(), total);
                out.insert("os_cpu_busy_ticks".into(), total - idle);
                out.insert("os_cpu_iowait_ticks".into(), f[4]);
            }
        }
    }
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        if let Some((_, rest)) = s.rsplit_once(')') {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if let (Some(u), Some(sy)) = (f.get(11).and_then(|x| x.parse::<f64>().ok()), f.get(12).and_then(|x| x.parse::<f64>().ok())) {
                out.insert("mysqld_cpu_ticks".into(), u + sy);
            }
            if let Some(rss) = f.get(21).and_then(|x| x.parse::<f64>().ok()) {
                out.insert("mysqld_rss_bytes".into(), rss * 4096.0);
            }
        }
    }
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/io")) {
        for l in s.lines() {
            if let Some((k, v)) = l.split_once(':') {
                if let Ok(v) = v.trim().parse::<f64>() {
                    match k {
                        "read_bytes" => out.insert("mysqld_read_bytes".into(), v),
                        "write_bytes" => out.insert("mysqld_write_bytes".into(), v),
                        _ => None,
                    };
                }
            }
        }
    }
    if let (Some((maj, min)), Ok(s)) = (dev, std::fs::read_to_string("/proc/diskstats")) {
        for l in s.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 14 && f[0].parse() == Ok(maj) && f[1].parse() == Ok(min) {
                let n = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
                out.insert("disk_reads".into(), n(3));
                out.insert("disk_writes".into(), n(7));
                out.insert("disk_in_flight".into(), n(11));
                out.insert("disk_io_ms".into(), n(12));
            }
        }
    }
}
