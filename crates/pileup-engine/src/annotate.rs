//! Annotation: what each OS thread is in SQL terms — connection id, user,
//! command, state, time and statement — and its role (accept thread,
//! replication SQL/IO thread, client connection). Where the SQL side comes
//! from is an [`Annotator`]'s business.

use std::collections::HashMap;

use serde::Serialize;

/// The SQL side of one OS thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SqlThread {
    /// The connection's processlist id.
    pub id: u64,
    /// The connection's user name.
    pub user: Option<String>,
    /// The client's host (`host:port` for a TCP client), as the processlist shows it.
    pub host: Option<String>,
    /// The connection's default database.
    pub db: Option<String>,
    /// The processlist command (`Query`, `Sleep`, `Binlog Dump`, …).
    pub command: Option<String>,
    /// The processlist's TIME: seconds the thread has been in its current state.
    pub time: Option<i64>,
    /// How long the connection has been in its current command, in
    /// milliseconds (MariaDB's TIME_MS): when its statement began.
    pub time_ms: Option<u64>,
    /// The processlist state (`Updating`, `Sending data`, …).
    pub state: Option<String>,
    /// The statement running (the processlist's INFO).
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
    /// A role by the name `--focus` takes (`accept`, `sql-thread`, `io-thread`,
    /// `connection`, or an alias such as `sql`, `io`, `connections`).
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "accept" => Role::Accept,
            "sql-thread" | "sql" | "applier" => Role::SqlThread,
            "io-thread" | "io" => Role::IoThread,
            "connections" | "connection" => Role::Connection,
            _ => return None,
        })
    }
    /// The role's name (kebab-case, as serialized).
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

/// What knows which SQL connection each of the server's threads serves,
/// and what it runs: a connection to the server (`pileup-annotate`'s
/// `SqlSource`), or a recording. The engine asks it, never the server: the
/// core knows processes, not SQL.
pub trait Annotator: Send {
    /// The server's version, as it reports itself.
    fn version(&self) -> &str;
    /// OS thread id → what the thread is in SQL terms, read without
    /// blocking the server; `Err` says why it could not be read.
    fn threads(&mut self) -> Result<HashMap<i32, SqlThread>, String>;
    /// CPU time (ns) the server thread serving the annotator's own queries
    /// has used so far, when that thread is one of `pid`'s: what reading
    /// the threads cost the server.
    fn server_cpu_ns(&self, pid: i32) -> Option<u64>;
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
