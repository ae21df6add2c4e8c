//! Which of the server's OS threads are the applier's and which are a
//! given connection's, so what each reads from storage can be told apart
//! ([`crate::device::task_io`]).
//!
//! MariaDB lists every connection's OS thread id in
//! `information_schema.PROCESSLIST.TID`, the applier's too (`Slave_SQL`,
//! and `Slave_worker` with parallel replication), without
//! performance_schema. A server without that column (MySQL) or one that
//! runs connections on a thread pool (a connection has no thread of its
//! own) gives no answer here.

use mysql::prelude::Queryable;

/// The OS thread that serves connection `c` (None: the server does not
/// say, or connections share threads).
pub fn own_os_thread(c: &mut mysql::Conn) -> Option<i32> {
    let (tid, handling): (Option<i64>, Option<String>) = c
        .query_first("SELECT TID, @@thread_handling FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
        .ok()
        .flatten()?;
    if handling.as_deref() != Some("one-thread-per-connection") {
        return None;
    }
    tid.and_then(|t| i32::try_from(t).ok()).filter(|t| *t > 0)
}

/// The OS threads of the replica's SQL thread and its parallel workers.
pub fn applier_os_threads(c: &mut mysql::Conn) -> mysql::Result<Vec<i32>> {
    let tids: Vec<Option<i64>> =
        c.query("SELECT TID FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Slave_SQL', 'Slave_worker')")?;
    Ok(tids.into_iter().flatten().filter_map(|t| i32::try_from(t).ok()).filter(|t| *t > 0).collect())
}

/// The server process a thread id the server reported belongs to, when
/// that thread runs on this host as a MariaDB or MySQL server (a server in
/// another PID namespace reports ids that mean nothing here, or another
/// process's).
pub fn server_process_of(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let pid: i32 = status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    matches!(comm.trim(), "mariadbd" | "mysqld").then_some(pid)
}
