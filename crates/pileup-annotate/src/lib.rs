//! `pileup-annotate`: the server's threads in SQL terms, read over a
//! connection to it, for the engine's [`Annotator`] (stacks, locks, memory,
//! lag, watch and bench name each thread's connection, user and
//! statement); and which local server process a connection reaches.
//!
//! Sources that do not block the server: MariaDB's
//! `information_schema.PROCESSLIST` (column `TID`), MySQL 8's
//! `performance_schema.threads` (`THREAD_OS_ID`). Classic `SHOW PROCESSLIST`
//! is avoided: it holds a global mutex.

use std::collections::HashMap;

use mysql::prelude::Queryable;
use pileup_conn::Flavor;
use pileup_engine::{Annotator, SqlThread};

/// A query of the server failed: which, and why.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct AnnotateError {
    pub what: &'static str,
    #[source]
    pub source: pileup_conn::SqlError,
}

/// A query of `what` failed.
fn sql(what: &'static str) -> impl FnOnce(mysql::Error) -> AnnotateError {
    move |e| AnnotateError { what, source: e.into() }
}

/// An open SQL connection used for annotation.
pub struct SqlSource {
    pub conn: mysql::Conn,
    pub flavor: Flavor,
    pub version: String,
    pub own_id: u64,
    /// MariaDB with performance_schema on: thread names available too.
    pub pfs_threads: bool,
    /// The server thread that serves this connection (one thread per
    /// connection only: a pool's worker serves others too), whose CPU time
    /// is what pileup's queries cost the server.
    pub server_tid: Option<i32>,
}

impl SqlSource {
    pub fn new(mut conn: mysql::Conn) -> Result<SqlSource, AnnotateError> {
        let (flavor, version) = pileup_conn::flavor(&mut conn)
            .map_err(|e| AnnotateError { what: "asking the server its version", source: e })?;
        let own_id: u64 =
            conn.query_first("SELECT CONNECTION_ID()").map_err(sql("SELECT CONNECTION_ID()"))?.unwrap_or(0);
        let pfs: Option<String> = conn.query_first("SELECT @@performance_schema").unwrap_or(None);
        let pfs_threads = matches!(pfs.as_deref(), Some("1") | Some("ON"));
        let handling: Option<String> = conn.query_first("SELECT @@thread_handling").unwrap_or(None);
        let server_tid = if handling.as_deref() == Some("one-thread-per-connection") {
            let q = match flavor {
                Flavor::MariaDb => "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
                Flavor::MySql => {
                    "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()"
                }
            };
            conn.query_first::<Option<i64>, _>(q).ok().flatten().flatten().map(|t| t as i32)
        } else {
            None
        };
        Ok(SqlSource { conn, flavor, version, own_id, pfs_threads, server_tid })
    }

    /// CPU time the server thread serving this connection has used so far
    /// (nanoseconds), when that thread is one of `pid`'s.
    pub fn server_cpu_ns(&self, pid: i32) -> Option<u64> {
        pileup_engine::process::sched_times(pid, self.server_tid?).map(|t| t.on_cpu_ns)
    }

    /// Map OS thread id → SQL thread, from the non-blocking sources.
    pub fn threads(&mut self) -> Result<HashMap<i32, SqlThread>, AnnotateError> {
        let mut out = HashMap::new();
        match self.flavor {
            Flavor::MariaDb => {
                let rows: Vec<mysql::Row> = self
                    .conn
                    .query("SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE, INFO, TID, TIME_MS FROM information_schema.PROCESSLIST")
                    .map_err(sql("reading information_schema.PROCESSLIST"))?;
                for r in rows {
                    if let Some((tid, mut t)) = from_row(&r, self.own_id, None) {
                        t.time_ms = get::<f64>(&r, 9).map(|ms| ms.max(0.0) as u64);
                        out.insert(tid, t);
                    }
                }
                if self.pfs_threads {
                    if let Ok(rows) = self.conn.query::<mysql::Row, _>(
                        "SELECT THREAD_OS_ID, NAME FROM performance_schema.threads WHERE THREAD_OS_ID IS NOT NULL",
                    ) {
                        for r in rows {
                            let (Some(tid), Some(name)) = (get::<i64>(&r, 0), get::<String>(&r, 1)) else { continue };
                            out.entry(tid as i32).or_default().thread_name = Some(name);
                        }
                    }
                }
            }
            Flavor::MySql => {
                let rows: Vec<mysql::Row> = self
                    .conn
                    .query(
                        "SELECT PROCESSLIST_ID, PROCESSLIST_USER, PROCESSLIST_HOST, PROCESSLIST_DB, PROCESSLIST_COMMAND, \
                         PROCESSLIST_TIME, PROCESSLIST_STATE, PROCESSLIST_INFO, THREAD_OS_ID, NAME \
                         FROM performance_schema.threads WHERE THREAD_OS_ID IS NOT NULL",
                    )
                    .map_err(sql("reading performance_schema.threads"))?;
                for r in rows {
                    if let Some((tid, t)) = from_row(&r, self.own_id, Some(9)) {
                        out.insert(tid, t);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Both queries select id, user, host, db, command, time, state, info, OS
/// thread id in that order (MySQL adds the thread name).
fn from_row(r: &mysql::Row, own_id: u64, name_col: Option<usize>) -> Option<(i32, SqlThread)> {
    let tid = get::<i64>(r, 8)?;
    let id: u64 = get(r, 0).unwrap_or(0);
    Some((
        tid as i32,
        SqlThread {
            id,
            user: get(r, 1),
            host: get(r, 2),
            db: get(r, 3),
            command: get(r, 4),
            time: get(r, 5),
            time_ms: None,
            state: get(r, 6),
            info: get(r, 7),
            thread_name: name_col.and_then(|c| get(r, c)),
            is_pileup: id != 0 && id == own_id,
            after: None,
        },
    ))
}

fn get<T: mysql::prelude::FromValue>(r: &mysql::Row, i: usize) -> Option<T> {
    r.get_opt::<Option<T>, usize>(i).and_then(|x| x.ok()).flatten()
}

impl SqlSource {
    /// As the engine's [`Annotator`], for a sampler.
    pub fn boxed(self) -> Box<dyn Annotator> {
        Box::new(self)
    }
}

impl Annotator for SqlSource {
    fn version(&self) -> &str {
        &self.version
    }

    fn threads(&mut self) -> Result<HashMap<i32, SqlThread>, String> {
        SqlSource::threads(self).map_err(|e| pileup_conn::error_text(&e))
    }

    fn server_cpu_ns(&self, pid: i32) -> Option<u64> {
        SqlSource::server_cpu_ns(self, pid)
    }
}

/// The server process pileup's connection `spec` reaches, on this host:
/// the one listening on its socket or local TCP port; when the servers'
/// sockets cannot be seen (not root), the one server running. `Err` says
/// why there is none (the server is remote, none listens there, several
/// run and none could be told).
pub fn server_for(spec: &pileup_conn::ConnSpec) -> Result<i32, String> {
    use pileup_engine::process::{auto_pid, server_listening_on, Listener};
    let local = spec.socket.is_some()
        || matches!(spec.host.as_deref(), None | Some("localhost" | "127.0.0.1" | "::1" | "localhost6"));
    if !local {
        return Err(format!("the server is on {}: run pileup on that host for OS data and stacks", spec.describe()));
    }
    let port = if spec.socket.is_none() { Some(spec.port) } else { None };
    match server_listening_on(spec.socket.as_deref(), port) {
        Listener::Server(pid) => Ok(pid),
        Listener::None => Err(format!("no local server process listens on {}", spec.describe())),
        Listener::Unknown => auto_pid().map_err(|e| e.to_string()),
    }
}

/// The server's process on this host as the server itself names it (its
/// pid file): the file's path when it cannot be read here or names no
/// running process.
pub fn server_pid_file(conn: &mut mysql::Conn) -> Result<Result<i32, String>, pileup_conn::SqlError> {
    let file: Option<String> = conn.query_first("SELECT @@pid_file")?;
    let file = file.unwrap_or_default();
    let pid = std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|p| std::path::Path::new(&format!("/proc/{p}/task")).exists());
    Ok(pid.ok_or(file))
}
