//! Annotation: what each OS thread is in SQL terms — connection id, user,
//! command, state, time and statement — and its role (accept thread,
//! replication SQL/IO thread, client connection).
//!
//! Sources that do not block the server: MariaDB's
//! `information_schema.PROCESSLIST` (column `TID`), MySQL 8's
//! `performance_schema.threads` (`THREAD_OS_ID`). Classic `SHOW PROCESSLIST`
//! is avoided: it holds a global mutex.

use std::collections::HashMap;

use mysql::prelude::Queryable;
use pileup_conn::Flavor;
use serde::Serialize;

use crate::error::StacksError;

/// The SQL side of one OS thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SqlThread {
    pub id: u64,
    pub user: Option<String>,
    pub host: Option<String>,
    pub db: Option<String>,
    pub command: Option<String>,
    pub time: Option<i64>,
    /// How long the connection has been in its current command, in
    /// milliseconds (MariaDB's TIME_MS): when its statement began.
    pub time_ms: Option<u64>,
    pub state: Option<String>,
    pub info: Option<String>,
    /// performance_schema thread name (`thread/sql/one_connection`), when known.
    pub thread_name: Option<String>,
    /// This is pileup's own connection.
    pub is_pileup: bool,
    /// The processlist is read just before the stacks and again just
    /// after: when this thread's row changed in between (a statement began
    /// or ended while its stack was read), what it said after. The stack
    /// itself says which of the two it was in.
    pub after: Option<String>,
}

/// Keep in `before` (the rows read before the stacks) what changed by
/// `after` (read just after them), so an annotation never claims one state
/// for a stack read in another: a row whose command, state or statement
/// differs gets the later one beside it; a thread gone by then is said to
/// have ended.
pub fn bracket(before: &mut HashMap<i32, SqlThread>, after: &HashMap<i32, SqlThread>) {
    for (tid, b) in before.iter_mut() {
        let what = |t: &SqlThread| (t.id, t.command.clone(), t.state.clone(), t.info.clone());
        b.after = match after.get(tid) {
            Some(a) if what(a) == what(b) => None,
            Some(a) => Some(a.activity(160)),
            None => Some("the connection ended".into()),
        };
    }
}

impl SqlThread {
    /// What the thread was doing, without who it is: `Query (Updating): `UPDATE …``.
    fn activity(&self, max_stmt: usize) -> String {
        let mut s = self.command.clone().unwrap_or_default();
        self.push_state_and_statement(&mut s, max_stmt);
        s
    }

    /// ` (state): `statement`` where there are any.
    fn push_state_and_statement(&self, s: &mut String, max_stmt: usize) {
        if let Some(st) = self.state.as_deref().filter(|x| !x.is_empty()) {
            s.push_str(&format!(" ({st})"));
        }
        if let Some(i) = &self.info {
            s.push_str(": `");
            s.push_str(&one_line(i, max_stmt));
            s.push('`');
        }
    }

    /// One-line summary: `conn 12 root@localhost Query 3s "Updating": UPDATE …`.
    pub fn summary(&self, max_stmt: usize) -> String {
        let mut s = format!("conn {}", self.id);
        if let Some(u) = &self.user {
            s.push(' ');
            s.push_str(u);
            if let Some(h) = self.host.as_deref().filter(|h| !h.is_empty()) {
                s.push('@');
                s.push_str(h.split(':').next().unwrap_or(h));
            }
        }
        if let Some(c) = &self.command {
            s.push(' ');
            s.push_str(c);
        }
        if let Some(t) = self.time {
            s.push_str(&format!(" {t}s"));
        }
        self.push_state_and_statement(&mut s, max_stmt);
        if self.is_pileup {
            s.push_str(" [pileup itself]");
        }
        if let Some(a) = &self.after {
            s.push_str(&format!(" [changed while the stacks were read; just after: {a}]"));
        }
        s
    }
}

/// Collapse whitespace and cut a statement for one-line display.
pub fn one_line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 3));
    let mut prev_space = false;
    for c in s.chars() {
        let sp = c.is_whitespace();
        if sp && prev_space {
            continue;
        }
        out.push(if sp { ' ' } else { c });
        prev_space = sp;
        if out.len() >= max {
            out.push('…');
            break;
        }
    }
    out.trim().to_string()
}

/// Thread roles users can focus on with `--focus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The thread accepting new connections (the main thread).
    Accept,
    /// Replication applier: SQL thread and parallel workers.
    SqlThread,
    /// Replication receiver (IO thread).
    IoThread,
    /// A client connection.
    Connection,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "accept" => Role::Accept,
            "sql-thread" | "sql" | "applier" => Role::SqlThread,
            "io-thread" | "io" => Role::IoThread,
            "connections" | "connection" => Role::Connection,
            _ => return None,
        })
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Accept => "accept",
            Role::SqlThread => "sql-thread",
            Role::IoThread => "io-thread",
            Role::Connection => "connection",
        }
    }
}

/// The role of a thread from what we know about it.
pub fn role_of(pid: i32, tid: i32, sql: Option<&SqlThread>) -> Option<Role> {
    if let Some(s) = sql {
        if let Some(n) = &s.thread_name {
            let n = n.to_ascii_lowercase();
            if n.ends_with("/main") {
                return Some(Role::Accept);
            }
            if n.contains("slave_sql")
                || n.contains("replica_sql")
                || n.contains("slave_worker")
                || n.contains("replica_worker")
                || n.contains("coordinator")
            {
                return Some(Role::SqlThread);
            }
            if n.contains("slave_io") || n.contains("replica_io") {
                return Some(Role::IoThread);
            }
        }
        match s.command.as_deref() {
            Some("Slave_SQL") | Some("Slave_worker") => return Some(Role::SqlThread),
            Some("Slave_IO") => return Some(Role::IoThread),
            _ => {}
        }
    }
    if tid == pid {
        // Both MariaDB (handle_connections_sockets) and MySQL 8
        // (Connection_acceptor) accept connections in the main thread.
        return Some(Role::Accept);
    }
    match sql {
        Some(s)
            if s.command.as_deref() != Some("Daemon") && s.user.as_deref() != Some("system user") && !s.is_pileup =>
        {
            if s.thread_name.as_deref().is_none_or(|n| n.contains("connection")) {
                Some(Role::Connection)
            } else {
                None
            }
        }
        _ => None,
    }
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
    pub fn new(mut conn: mysql::Conn) -> Result<SqlSource, StacksError> {
        let (flavor, version) = pileup_conn::flavor(&mut conn)
            .map_err(|e| StacksError::Sql { what: "asking the server its version", source: e })?;
        let own_id: u64 = conn
            .query_first("SELECT CONNECTION_ID()")
            .map_err(StacksError::sql("SELECT CONNECTION_ID()"))?
            .unwrap_or(0);
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
        crate::proc::sched_times(pid, self.server_tid?).map(|t| t.on_cpu_ns)
    }

    /// Map OS thread id → SQL thread, from the non-blocking sources.
    pub fn threads(&mut self) -> Result<HashMap<i32, SqlThread>, StacksError> {
        let mut out = HashMap::new();
        match self.flavor {
            Flavor::MariaDb => {
                let rows: Vec<mysql::Row> = self
                    .conn
                    .query("SELECT ID, USER, HOST, DB, COMMAND, TIME, STATE, INFO, TID, TIME_MS FROM information_schema.PROCESSLIST")
                    .map_err(StacksError::sql("reading information_schema.PROCESSLIST"))?;
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
                    .map_err(StacksError::sql("reading performance_schema.threads"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_that_changed_while_the_stacks_were_read_says_so() {
        let row = |command: &str, state: &str, info: Option<&str>| SqlThread {
            id: 7,
            command: Some(command.into()),
            state: Some(state.into()),
            info: info.map(String::from),
            ..Default::default()
        };
        let mut before: HashMap<i32, SqlThread> = [
            (1, row("Sleep", "", None)),
            (2, row("Query", "Updating", Some("UPDATE t SET v = 1"))),
            (3, row("Sleep", "", None)),
        ]
        .into();
        let after: HashMap<i32, SqlThread> = [
            (1, row("Query", "Updating", Some("UPDATE t SET v = 2"))),
            (2, row("Query", "Updating", Some("UPDATE t SET v = 1"))),
        ]
        .into();
        bracket(&mut before, &after);
        assert_eq!(before[&1].after.as_deref(), Some("Query (Updating): `UPDATE t SET v = 2`"));
        assert!(before[&1]
            .summary(80)
            .ends_with("[changed while the stacks were read; just after: Query (Updating): `UPDATE t SET v = 2`]"));
        assert_eq!(before[&2].after, None, "unchanged rows say nothing more");
        assert_eq!(before[&3].after.as_deref(), Some("the connection ended"));
    }

    #[test]
    fn roles() {
        let conn = SqlThread { id: 5, user: Some("app".into()), command: Some("Query".into()), ..Default::default() };
        assert_eq!(role_of(100, 100, None), Some(Role::Accept));
        assert_eq!(role_of(100, 101, Some(&conn)), Some(Role::Connection));
        let sql =
            SqlThread { command: Some("Slave_SQL".into()), user: Some("system user".into()), ..Default::default() };
        assert_eq!(role_of(100, 102, Some(&sql)), Some(Role::SqlThread));
        let daemon =
            SqlThread { command: Some("Daemon".into()), user: Some("system user".into()), ..Default::default() };
        assert_eq!(role_of(100, 103, Some(&daemon)), None);
        let own = SqlThread { is_pileup: true, ..conn.clone() };
        assert_eq!(role_of(100, 104, Some(&own)), None);
        let mysql_io = SqlThread { thread_name: Some("thread/sql/replica_io".into()), ..Default::default() };
        assert_eq!(role_of(100, 105, Some(&mysql_io)), Some(Role::IoThread));
    }

    #[test]
    fn summary_line() {
        let t = SqlThread {
            id: 12,
            user: Some("root".into()),
            host: Some("localhost:5555".into()),
            command: Some("Query".into()),
            time: Some(3),
            state: Some("Updating".into()),
            info: Some("UPDATE  t\n  SET a=1".into()),
            ..Default::default()
        };
        assert_eq!(t.summary(80), "conn 12 root@localhost Query 3s (Updating): `UPDATE t SET a=1`");
        assert_eq!(one_line("abcdef", 3), "abc…");
    }
}
