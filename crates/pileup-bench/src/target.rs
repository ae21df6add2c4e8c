//! The servers an experiment runs on: the MariaDB/MySQL server it is
//! pointed at (refused unless it is a pileup sandbox, or the user says
//! they know), and a PostgreSQL server for the comparisons. What each
//! runs with (version, durability settings), and the global settings an
//! experiment changes, put back when it ends.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mysql::prelude::Queryable;
use pileup_conn::ConnSpec;
use serde::Serialize;

use crate::error::{ExperimentError, Result};

/// The schema the experiments make their tables in (dropped when done).
pub const SCHEMA: &str = "pileup_bench";

/// A PostgreSQL error's own message (the client's display of a server
/// error is only "db error").
pub fn pg_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => {
            let mut t = e.to_string();
            let mut cur = std::error::Error::source(e);
            while let Some(c) = cur {
                t.push_str(&format!(": {c}"));
                cur = c.source();
            }
            t
        }
    }
}

/// The MariaDB or MySQL server under test.
pub struct Maria {
    pub spec: ConnSpec,
    /// Its process on this host, for its CPU and the knee's profile.
    pub pid: Option<i32>,
    pub version: String,
    /// A pileup sandbox on this host.
    pub sandbox: bool,
    /// Where clients connect over TCP (the accept experiment): host, port.
    pub tcp: (String, u16),
}

impl Maria {
    /// Connect and look: refused unless it is a sandbox or `i_know`.
    pub fn open(spec: ConnSpec, pid: Option<i32>, i_know: bool) -> Result<Maria> {
        let mut c = spec.connect().map_err(|e| ExperimentError::Server(pileup_conn::error_text(&e)))?;
        let (version, datadir, port): (String, String, u16) = c
            .query_first("SELECT VERSION(), @@datadir, @@port")
            .map_err(sql("reading the server's version"))?
            .ok_or_else(|| ExperimentError::Server("the server returned no version".into()))?;
        let sandbox = pileup_sandbox::sandbox_of_datadir(&PathBuf::from(&datadir)).is_some();
        if !sandbox && !i_know {
            return Err(ExperimentError::NotASandbox { server: spec.describe(), datadir });
        }
        let host = match &spec.host {
            Some(h) if spec.socket.is_none() && h != "localhost" => h.clone(),
            _ => "127.0.0.1".into(),
        };
        Ok(Maria { spec, pid, version, sandbox, tcp: (host, port) })
    }

    /// An administrative connection (bounded statements, as every pileup connection).
    pub fn admin(&self) -> Result<mysql::Conn> {
        let mut spec = self.spec.clone();
        // Making thousands of tables takes longer than one status read.
        spec.query_timeout = Some(std::time::Duration::from_secs(600));
        spec.connect().map_err(|e| ExperimentError::Server(pileup_conn::error_text(&e)))
    }

    /// A load generator's connection: the workload's statements only. Its
    /// reads wait longer than any lock wait an experiment sets (a hot row's
    /// queue at many threads), so a long wait is never taken for a server
    /// that went away.
    pub fn client(&self) -> std::result::Result<mysql::Conn, String> {
        let mut spec = self.spec.clone();
        spec.query_timeout = Some(std::time::Duration::from_secs(700));
        mysql::Conn::new(spec.opts().db_name(Some(SCHEMA))).map_err(|e| pileup_conn::error_text(&e))
    }

    /// A connection over TCP made the way an application makes one.
    pub fn tcp_opts(&self) -> mysql::OptsBuilder {
        let mut spec = self.spec.clone();
        spec.socket = None;
        spec.host = Some(self.tcp.0.clone());
        spec.port = self.tcp.1;
        spec.opts()
    }

    /// The settings that decide what a commit costs, as the server has them now.
    pub fn durability(&self) -> Result<BTreeMap<String, String>> {
        let mut c = self.admin()?;
        let names = [
            "innodb_flush_log_at_trx_commit",
            "sync_binlog",
            "log_bin",
            "innodb_flush_method",
            "innodb_doublewrite",
            "innodb_deadlock_detect",
            "innodb_thread_concurrency",
            "table_open_cache",
            "thread_handling",
        ];
        let mut out = BTreeMap::new();
        for n in names {
            if let Ok(Some(v)) = c.query_first::<String, _>(format!("SELECT @@GLOBAL.{n}")) {
                out.insert(n.to_string(), v);
            }
        }
        Ok(out)
    }

    /// Whether the server has this global variable.
    pub fn has_variable(&self, name: &str) -> Result<bool> {
        let mut c = self.admin()?;
        let n: Option<u64> = c
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = ?",
                (name.to_uppercase(),),
            )
            .map_err(sql("reading the server's variables"))?;
        Ok(n.unwrap_or(0) > 0)
    }

    /// Set a global variable for the experiment; [`Restore`] puts the old
    /// value back when dropped.
    pub fn set_global(&self, name: &str, value: &str) -> Result<Restore> {
        let mut c = self.admin()?;
        let old: Option<String> =
            c.query_first(format!("SELECT @@GLOBAL.{name}")).map_err(sql(&format!("reading {name}")))?;
        c.query_drop(format!("SET GLOBAL {name} = {value}")).map_err(sql(&format!("SET GLOBAL {name} = {value}")))?;
        Ok(Restore { spec: self.spec.clone(), name: name.into(), old })
    }
}

/// A global variable to put back.
pub struct Restore {
    spec: ConnSpec,
    name: String,
    old: Option<String>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let (Some(old), Ok(mut c)) = (&self.old, self.spec.connect()) {
            let v = if old.parse::<f64>().is_ok() { old.clone() } else { format!("'{old}'") };
            let _ = c.query_drop(format!("SET GLOBAL {} = {v}", self.name));
        }
    }
}

pub(crate) fn sql(what: &str) -> impl Fn(mysql::Error) -> ExperimentError + '_ {
    move |e| ExperimentError::Server(format!("{what}: {}", pileup_conn::error_text(&e)))
}

/// The PostgreSQL server compared with.
pub struct Pg {
    /// Trusted clients (the workloads' connections).
    pub trust: postgres::Config,
    /// Trusted clients over TCP (the accept experiment's first curve).
    pub tcp_trust: Option<postgres::Config>,
    /// Clients that authenticate with SCRAM-SHA-256 over TCP, when the
    /// server has such an account (the accept experiment's second curve).
    pub scram: Option<postgres::Config>,
    pub pid: Option<i32>,
    pub version: String,
    /// What it runs with (fsync, synchronous_commit, …).
    pub settings: BTreeMap<String, String>,
}

impl Pg {
    /// Connect and read its version and settings; without `pid`, its
    /// postmaster's when the server is on this host ([`postmaster_of`]).
    pub fn open(
        trust: postgres::Config,
        tcp_trust: Option<postgres::Config>,
        scram: Option<postgres::Config>,
        pid: Option<i32>,
    ) -> Result<Pg> {
        let mut c = trust.connect(postgres::NoTls).map_err(|e| ExperimentError::Postgres(pg_text(&e)))?;
        let pid = pid.or_else(|| postmaster_of(&trust, &mut c));
        let version = c
            .query_one("SHOW server_version", &[])
            .map(|r| r.get::<_, String>(0))
            .map_err(|e| ExperimentError::Postgres(pg_text(&e)))?;
        let mut settings = BTreeMap::new();
        for n in ["fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "shared_buffers"] {
            if let Ok(row) = c.query_one(&format!("SHOW {n}"), &[]) {
                settings.insert(n.to_string(), row.get::<_, String>(0));
            }
        }
        Ok(Pg { trust, tcp_trust, scram, pid, version, settings })
    }

    /// What `--pg` says, checked before anything is opened: a connection
    /// string that parses, no password in it, and `i_know`.
    pub fn check(info: &str, i_know: bool) -> Result<postgres::Config> {
        let usage = |m: String| ExperimentError::Usage(m);
        let cfg: postgres::Config =
            info.parse().map_err(|e| usage(format!("--pg is not a PostgreSQL connection string ({e})")))?;
        if cfg.get_password().is_some() {
            return Err(usage("--pg carries a password, which other users of this host can read in the process list: give it in PGPASSWORD instead".into()));
        }
        if !i_know {
            return Err(usage("--pg names a PostgreSQL server pileup did not start; the experiments write to it (schema pileup_bench, dropped after) and open many connections: add --i-know to go on".into()));
        }
        Ok(cfg)
    }

    /// A server the user names (libpq key=value pairs or a postgres://
    /// URL): refused without `i_know` (pileup did not start it, and the
    /// experiments write to it), and with a password in it (the command
    /// line is visible to every user of the host: PGPASSWORD is read
    /// instead). What it leaves out comes from PGHOST, PGPORT, PGUSER and
    /// PGDATABASE, else the login name and Debian's socket directory.
    pub fn given(info: &str, i_know: bool) -> Result<Pg> {
        let mut cfg = Pg::check(info, i_know)?;
        if let Ok(p) = std::env::var("PGPASSWORD") {
            cfg.password(p);
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if cfg.get_user().is_none() {
            let user = env("PGUSER").or_else(|| env("USER")).unwrap_or_else(|| "postgres".into());
            cfg.user(&user);
        }
        if cfg.get_dbname().is_none() {
            if let Some(d) = env("PGDATABASE") {
                cfg.dbname(&d);
            }
        }
        if cfg.get_ports().is_empty() {
            if let Some(p) = env("PGPORT") {
                let port = p.parse().map_err(|_| ExperimentError::Usage(format!("PGPORT={p} is not a port number")))?;
                cfg.port(port);
            }
        }
        if cfg.get_hosts().is_empty() && cfg.get_hostaddrs().is_empty() {
            match env("PGHOST") {
                Some(h) if h.starts_with('/') => {
                    cfg.host_path(h);
                }
                Some(h) => {
                    cfg.host(&h);
                }
                // libpq's default on Debian: the local socket directory.
                None => {
                    cfg.host_path("/var/run/postgresql");
                }
            }
        }
        Pg::open(cfg, None, None, None)
    }

    pub fn admin(&self) -> Result<postgres::Client> {
        self.trust.connect(postgres::NoTls).map_err(|e| ExperimentError::Postgres(pg_text(&e)))
    }

    /// A load generator's connection, its search path on the experiments' schema.
    pub fn client(&self) -> std::result::Result<postgres::Client, String> {
        let mut c = self.trust.connect(postgres::NoTls).map_err(|e| pg_text(&e))?;
        c.batch_execute(&format!("SET search_path = {}", SCHEMA)).map_err(|e| pg_text(&e))?;
        Ok(c)
    }
}

/// The postmaster of a PostgreSQL server on this host: the parent of the
/// backend serving connection `c` (made with `cfg`), when both are
/// `postgres` processes here (a remote server has none: its CPU is then
/// not reported).
fn postmaster_of(cfg: &postgres::Config, c: &mut postgres::Client) -> Option<i32> {
    // Only a server reached over a Unix socket or the loopback runs here: a
    // remote backend's pid may be some local process's.
    let local = |h: &postgres::config::Host| match h {
        postgres::config::Host::Unix(_) => true,
        postgres::config::Host::Tcp(name) => matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1"),
    };
    let loopback = |a: &std::net::IpAddr| a.is_loopback();
    let all_local = cfg.get_hosts().iter().all(local) && cfg.get_hostaddrs().iter().all(loopback);
    if !all_local || (cfg.get_hosts().is_empty() && cfg.get_hostaddrs().is_empty()) {
        return None;
    }
    let backend: i32 = c.query_one("SELECT pg_backend_pid()", &[]).ok()?.get(0);
    let is_postgres =
        |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|n| n.trim().starts_with("postgres"));
    if !is_postgres(backend) {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{backend}/status")).ok()?;
    let ppid: i32 = status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().parse().ok()?;
    is_postgres(ppid).then_some(ppid)
}

/// The machine the experiment ran on.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub cpu: String,
}

impl Machine {
    pub fn here() -> Machine {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
            .unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            memory_gib: (kib / 1048576.0 * 10.0).round() / 10.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string(),
            cpu,
        }
    }
}
