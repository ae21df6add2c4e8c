//! Poll: one round of raw values from the server and the OS.
//!
//! SQL: `SHOW GLOBAL STATUS`, a grouped processlist summary, replica status
//! (and on MySQL InnoDB's history length and checkpoint age). OS: `/proc/stat`, the server
//! process's CPU and I/O, `/proc/diskstats` for the device holding the
//! datadir. Every query is bounded (client read timeout and server-side
//! `max_statement_time`); a poll that fails or times out is data, recorded
//! as `poll_ok = 0` with the reason, and the connection is rebuilt next time.
//! Polls never overlap: the caller runs them one after another. Each
//! collector's own duration is recorded (`cost_*_ms`) next to the whole
//! poll's (`poll_cost_ms`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;

/// The metrics the server `spec` names cannot give (from the names of its
/// status counters); `None` when it cannot be asked now (a watcher polls
/// a server that is down until it answers).
pub fn unavailable_metrics(spec: &ConnSpec) -> Option<Vec<crate::derive::Availability>> {
    // A look at start: a server that is down must not hold the watcher up
    // for the whole connect timeout before its polls begin.
    let mut quick = spec.clone();
    quick.timeout = quick.timeout.min(Duration::from_secs(2));
    let mut c = quick.connect().ok()?;
    let rows: Vec<(String, String)> = c.query("SHOW GLOBAL STATUS").ok()?;
    let names: std::collections::HashSet<String> = rows.into_iter().map(|(k, _)| k.to_ascii_lowercase()).collect();
    Some(crate::derive::unavailable(&|k| names.contains(k)))
}

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
    /// OS thread ids of the client connections (and replication threads),
    /// for the thread scan; `None` when the server does not list them.
    pub conn_tids: Option<Vec<i32>>,
    /// Every thread of the server just before the connections were listed.
    pub known_tids: Option<Vec<i32>>,
}

/// Polls one server. Keeps its connection between polls.
pub struct Poller {
    spec: ConnSpec,
    conn: Option<mysql::Conn>,
    pid: Option<i32>,
    datadir_dev: Option<(u32, u32)>,
    is_mariadb: bool,
    identity: Option<String>,
    /// Statements pileup sent the server, on the poll's connection and on
    /// others the caller reports: Questions counts them too.
    sent: u64,
    /// The caller's other connections to the server (`top`'s).
    others: u32,
    /// The poll connection's id (0: not connected), for whoever must leave
    /// pileup's own connection out of what it reads.
    conn_id: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The server's process changed on a reconnect: (old, new), until taken.
    moved: Option<(i32, i32)>,
}

impl Poller {
    /// `timeout` bounds connecting and every query of a poll.
    pub fn new(mut spec: ConnSpec, pid: Option<i32>, timeout: Duration) -> Poller {
        spec.timeout = timeout;
        Poller {
            spec,
            conn: None,
            pid,
            datadir_dev: None,
            is_mariadb: true,
            identity: None,
            sent: 0,
            others: 0,
            conn_id: Default::default(),
            moved: None,
        }
    }

    /// The caller sent `statements` more on its own connections, of which it
    /// holds `connections` now: they are pileup's, not the server's work,
    /// and `questions_rate`, `queries_rate` and `threads_connected` leave
    /// them out.
    pub fn own_work(&mut self, statements: u64, connections: u32) {
        self.sent += statements;
        self.others = connections;
    }

    pub fn pid(&self) -> Option<i32> {
        self.pid
    }

    /// The server's process changed since the last call: (old, new). A
    /// reconnect after the process watched is gone looks for the process
    /// that now listens on the same socket or port.
    pub fn take_moved(&mut self) -> Option<(i32, i32)> {
        self.moved.take()
    }

    /// On a new connection: the process watched is gone, so the server
    /// answering is another one (restarted); find it.
    fn follow_restart(&mut self) {
        let Some(old) = self.pid.filter(|p| !pileup_engine::process::alive(*p)) else { return };
        if let Ok(new) = pileup_annotate::server_for(&self.spec) {
            if new != old {
                self.pid = Some(new);
                self.datadir_dev = None;
                self.moved = Some((old, new));
            }
        }
    }

    /// The poll connection's id as it changes (0 while not connected).
    pub fn connection_id(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.conn_id.clone()
    }

    /// The server's own identity, `hostname:port datadir`, once connected.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    fn connect(&mut self) -> crate::error::Result<&mut mysql::Conn> {
        if self.conn.is_none() {
            let mut c = self.spec.connect()?;
            self.follow_restart();
            let (flavor, _) = pileup_conn::flavor(&mut c)?;
            self.is_mariadb = flavor == pileup_conn::Flavor::MariaDb;
            let id: Option<(String, u32, String, u64)> =
                c.query_first("SELECT @@hostname, @@port, @@datadir, CONNECTION_ID()")?;
            // What connecting sent (the session's settings, these queries).
            self.sent += pileup_conn::session_questions(&mut c)?;
            if let Some((host, port, datadir, conn_id)) = id {
                self.conn_id.store(conn_id, std::sync::atomic::Ordering::Relaxed);
                if self.datadir_dev.is_none() {
                    self.datadir_dev = device_of(&datadir, self.pid);
                }
                self.identity = Some(format!("{host}:{port} {datadir}"));
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
        let mut conn_tids = None;
        // Read before the connections are listed, so a thread missing from
        // both is one that came after the list.
        let known_tids = self.pid.and_then(|p| pileup_engine::process::tids(p).ok());
        // The OS's counters are read at the poll's time stamp, before the
        // SQL, which a stall can hold up for seconds: their rates are over
        // the interval between time stamps.
        if let Some(pid) = self.pid {
            let t = Instant::now();
            os_values(pid, self.datadir_dev, &mut values);
            values.insert("cost_os_ms".into(), ms(t));
        }
        let sql = self.poll_sql(&mut values, &mut conn_tids);
        if let Err(e) = &sql {
            // A failed or timed-out connection is not reused.
            self.conn = None;
            tracing::debug!("poll failed: {e:#}");
        }
        let ok = sql.is_ok();
        values.insert("poll_ok".into(), if ok { 1.0 } else { 0.0 });
        let cost_ms = t0.elapsed().as_secs_f64() * 1e3;
        values.insert("poll_cost_ms".into(), cost_ms);
        Poll { unix, ok, error: sql.err().map(|e| pileup_conn::error_text(&e)), cost_ms, values, conn_tids, known_tids }
    }

    fn poll_sql(
        &mut self,
        values: &mut BTreeMap<String, f64>,
        tids: &mut Option<Vec<i32>>,
    ) -> crate::error::Result<()> {
        let is_mariadb = {
            self.connect()?;
            self.is_mariadb
        };
        let c = self.conn.as_mut().unwrap();
        let t = Instant::now();
        self.sent += 1;
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
        // Nor the watcher's connections and the statements it sent up to
        // this one (derive takes them out of the rates).
        if let Some(r) = values.get_mut("threads_connected") {
            *r = (*r - 1.0 - f64::from(self.others)).max(0.0);
        }
        values.insert("own_statements".into(), self.sent as f64);
        values.insert("cost_status_ms".into(), ms(t));

        // The processlist, summarised on the server so a poll moves a few
        // rows whatever the connection count. MariaDB's
        // information_schema.PROCESSLIST and MySQL's
        // performance_schema.processlist do not take the global thread-list
        // lock for the whole scan the way SHOW PROCESSLIST does.
        // With each group, MariaDB gives its connections' OS thread ids
        // (TID) for the thread scan, in the same query.
        let t = Instant::now();
        let q = if is_mariadb {
            "SELECT COMMAND, IFNULL(STATE, ''), COUNT(*), MAX(TIME_MS) / 1000, GROUP_CONCAT(TID) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() GROUP BY 1, 2"
        } else {
            "SELECT COMMAND, IFNULL(STATE, ''), COUNT(*), MAX(TIME), NULL FROM performance_schema.processlist WHERE ID <> CONNECTION_ID() GROUP BY 1, 2"
        };
        self.sent += 1;
        let pl: Vec<(String, String, i64, Option<f64>, Option<String>)> = c.query(q)?;
        if is_mariadb {
            *tids = Some(
                pl.iter()
                    .filter(|g| g.0 != "Daemon")
                    .filter_map(|g| g.4.as_deref())
                    .flat_map(|l| l.split(',').filter_map(|t| t.parse().ok()))
                    .collect(),
            );
        } else {
            self.sent += 1;
            *tids = c
                .query::<i32, _>("SELECT THREAD_OS_ID FROM performance_schema.threads WHERE TYPE = 'FOREGROUND' AND THREAD_OS_ID IS NOT NULL")
                .ok();
        }
        let groups: Vec<PlGroup> = pl
            .into_iter()
            .map(|(command, state, threads, max_secs, _)| PlGroup {
                command,
                state,
                threads,
                max_secs: max_secs.unwrap_or(0.0),
            })
            .collect();
        summarize_processlist(&groups, values);
        values.insert("cost_processlist_ms".into(), ms(t));

        // MySQL has no history-length / checkpoint-age status variables;
        // INNODB_METRICS has both and reading it takes no InnoDB lock.
        if !values.contains_key("innodb_history_list_length") {
            let t = Instant::now();
            self.sent += 1;
            let rows: Vec<(String, Option<f64>)> = c
                .query("SELECT NAME, COUNT FROM information_schema.INNODB_METRICS WHERE NAME IN ('trx_rseg_history_len', 'log_lsn_checkpoint_age')")
                .unwrap_or_default();
            innodb_metrics(rows, values);
            values.insert("cost_innodb_metrics_ms".into(), ms(t));
        }

        let t = Instant::now();
        let q = if is_mariadb { "SHOW ALL SLAVES STATUS" } else { "SHOW REPLICA STATUS" };
        self.sent += 1;
        if let Ok(rows) = c.query::<mysql::Row, _>(q) {
            if let Some(l) = replica_lag(&rows) {
                values.insert("replica_lag".into(), l);
            }
            values.insert("replica_channels".into(), rows.len() as f64);
        }
        values.insert("cost_replica_ms".into(), ms(t));
        Ok(())
    }
}

/// The most any replication channel lags (Seconds_Behind_Master or
/// _Source), of those that say.
fn replica_lag(rows: &[mysql::Row]) -> Option<f64> {
    let mut lag: Option<f64> = None;
    for r in rows {
        let cols = r.columns_ref();
        let idx = cols
            .iter()
            .position(|c| c.name_str() == "Seconds_Behind_Master" || c.name_str() == "Seconds_Behind_Source");
        if let Some(i) = idx {
            let v: Option<Option<i64>> = r.get_opt(i).and_then(|x| x.ok());
            if let Some(Some(s)) = v {
                lag = Some(lag.unwrap_or(0.0).max(s as f64));
            }
        }
    }
    lag
}

/// INNODB_METRICS' history length and checkpoint age, under the names of
/// MariaDB's status variables.
fn innodb_metrics(rows: Vec<(String, Option<f64>)>, values: &mut BTreeMap<String, f64>) {
    for (name, v) in rows {
        let k = if name == "trx_rseg_history_len" { "innodb_history_list_length" } else { "innodb_checkpoint_age" };
        if let Some(v) = v {
            values.insert(k.into(), v);
        }
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// One (COMMAND, STATE) group of the processlist.
#[derive(Debug, Clone, PartialEq)]
pub struct PlGroup {
    pub command: String,
    pub state: String,
    pub threads: i64,
    /// Longest time in this command/state, seconds.
    pub max_secs: f64,
}

/// Commands of the server's own threads and of idle clients: not user work.
fn is_background(command: &str) -> bool {
    matches!(command, "Sleep" | "Daemon" | "Binlog Dump" | "Binlog Dump GTID" | "Connect" | "Killed")
        || command.starts_with("Slave_")
        || command.starts_with("Replica_")
}

/// Processlist gauges (`pl_*`) from the grouped processlist:
/// * `pl_threads`: every thread listed (but our own poll);
/// * `pl_sleeping`: idle client connections;
/// * `pl_active`: connections running a command (Query, Execute, ...);
/// * `pl_active_longest_s`: the longest such command, seconds;
/// * `pl_waiting_lock`: active connections in a `Waiting for ... lock` state
///   (metadata, table-level, global read / backup lock); row-lock waits do
///   not show in the state, they are `innodb_row_lock_current_waits`;
/// * `pl_waiting_mdl`, `pl_waiting_global_lock`: the two that matter most.
pub fn summarize_processlist(groups: &[PlGroup], out: &mut BTreeMap<String, f64>) {
    let (mut total, mut sleeping, mut active, mut longest, mut waiting, mut mdl, mut global) =
        (0i64, 0i64, 0i64, 0f64, 0i64, 0i64, 0i64);
    for g in groups {
        total += g.threads;
        if g.command == "Sleep" {
            sleeping += g.threads;
        }
        if is_background(&g.command) {
            continue;
        }
        active += g.threads;
        longest = longest.max(g.max_secs);
        let st = g.state.to_ascii_lowercase();
        if st.starts_with("waiting for") && st.contains("lock") {
            waiting += g.threads;
            if st.contains("metadata lock") {
                mdl += g.threads;
            }
            if st.contains("global read lock") || st.contains("backup lock") || st.contains("commit lock") {
                global += g.threads;
            }
        }
    }
    for (k, v) in [
        ("pl_threads", total as f64),
        ("pl_sleeping", sleeping as f64),
        ("pl_active", active as f64),
        ("pl_active_longest_s", longest),
        ("pl_waiting_lock", waiting as f64),
        ("pl_waiting_mdl", mdl as f64),
        ("pl_waiting_global_lock", global as f64),
    ] {
        out.insert(k.into(), v);
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
            if let (Some(u), Some(sy)) =
                (f.get(11).and_then(|x| x.parse::<f64>().ok()), f.get(12).and_then(|x| x.parse::<f64>().ok()))
            {
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
    // The cgroup is looked up once for both of its files.
    let cgroup = cgroup_dir(pid);
    if let Some(b) = memory_limit_in(cgroup.as_deref()) {
        out.insert("memory_limit_bytes".into(), b);
    }
    if let Some(us) = io_pressure_in(cgroup.as_deref()) {
        out.insert("io_pressure_some_us".into(), us);
    }
    if let (Some((maj, min)), Ok(s)) = (dev, std::fs::read_to_string("/proc/diskstats")) {
        for l in s.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 14 && f[0].parse() == Ok(maj) && f[1].parse() == Ok(min) {
                let n = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
                out.insert("disk_reads".into(), n(3));
                out.insert("disk_read_ms".into(), n(6));
                out.insert("disk_writes".into(), n(7));
                out.insert("disk_write_ms".into(), n(10));
                out.insert("disk_in_flight".into(), n(11));
                out.insert("disk_io_ms".into(), n(12));
            }
        }
    }
}

/// Microseconds some task of the server's cgroup has spent stalled on I/O
/// since the cgroup began ([`cgroup_dir`]).
pub fn io_pressure_us(pid: i32) -> Option<f64> {
    io_pressure_in(cgroup_dir(pid).as_deref())
}

fn io_pressure_in(cgroup: Option<&std::path::Path>) -> Option<f64> {
    std::fs::read_to_string(cgroup?.join("io.pressure")).ok().and_then(|t| io_some_us(&t))
}

/// The memory the server may use: its cgroup's `memory.max` when one is
/// set, else the host's memory (`MemTotal`), bytes.
fn memory_limit_in(cgroup: Option<&std::path::Path>) -> Option<f64> {
    let limit = cgroup
        .and_then(|d| std::fs::read_to_string(d.join("memory.max")).ok())
        .and_then(|t| t.trim().parse::<f64>().ok());
    limit.or_else(|| {
        let m = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kb: f64 =
            m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024.0)
    })
}

/// The server's cgroup directory (its `io.pressure`, `memory.max`), when it
/// runs in one of the unified (v2) hierarchy's cgroups other than the root
/// (a systemd service's holds the server alone). The host's files (such as
/// `/proc/pressure/io`) are not used: they mix in every other process, another
/// server's on the same host included.
fn cgroup_dir(pid: i32) -> Option<std::path::PathBuf> {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = cg.lines().find_map(|l| l.strip_prefix("0::")).filter(|p| *p != "/")?;
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(|root| std::path::Path::new(root).join(path.trim_start_matches('/')))
        // A unified-hierarchy cgroup (hybrid mounts keep v1 controllers
        // under the root).
        .find(|d| d.join("cgroup.controllers").exists())
}

/// Microseconds some task spent stalled on I/O, from an `io.pressure` file
/// (`some avg10=… avg60=… avg300=… total=N`).
fn io_some_us(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total=")).and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_pressure_total_is_read_from_the_some_line() {
        let t = "some avg10=0.01 avg60=0.18 avg300=2.26 total=1139154146\nfull avg10=0.00 avg60=0.15 avg300=1.16 total=640821622\n";
        assert_eq!(io_some_us(t), Some(1_139_154_146.0));
        assert_eq!(io_some_us("full avg10=0.00 total=5\n"), None);
        assert_eq!(io_some_us(""), None);
    }

    fn g(command: &str, state: &str, threads: i64, max_secs: f64) -> PlGroup {
        PlGroup { command: command.into(), state: state.into(), threads, max_secs }
    }

    #[test]
    fn processlist_summary() {
        let mut v = BTreeMap::new();
        summarize_processlist(
            &[
                g("Sleep", "", 40, 900.0),
                g("Daemon", "InnoDB purge worker", 4, 5000.0),
                g("Slave_SQL", "Waiting for table metadata lock", 1, 30.0),
                g("Query", "Sending data", 3, 2.5),
                g("Query", "Waiting for backup lock", 12, 7.0),
                g("Query", "Waiting for table metadata lock", 2, 1.0),
                g("Execute", "Updating", 5, 0.2),
            ],
            &mut v,
        );
        assert_eq!(v["pl_threads"], 67.0);
        assert_eq!(v["pl_sleeping"], 40.0);
        assert_eq!(v["pl_active"], 22.0, "sleeping, daemons and the replica's threads are not user work");
        assert_eq!(v["pl_active_longest_s"], 7.0);
        assert_eq!(v["pl_waiting_lock"], 14.0);
        assert_eq!(v["pl_waiting_mdl"], 2.0);
        assert_eq!(v["pl_waiting_global_lock"], 12.0);
    }

    #[test]
    fn empty_processlist_is_zero_not_missing() {
        let mut v = BTreeMap::new();
        summarize_processlist(&[], &mut v);
        assert_eq!(v["pl_active"], 0.0);
        assert_eq!(v["pl_active_longest_s"], 0.0);
    }
}
