//! One snapshot for every thread. MariaDB has no way to share a read view
//! between connections, so every thread opens its own (`START TRANSACTION
//! WITH CONSISTENT SNAPSHOT`) while no transaction can commit: then all of
//! them see the same committed state, and the binlog position read in that
//! window is theirs.
//!
//! On MariaDB the window is `BACKUP STAGE BLOCK_COMMIT`, which blocks
//! commits only; running statements go on, and no table is flushed (a
//! global read lock waits for every running query and blocks every writer
//! while it waits). MySQL gets `FLUSH TABLES WITH READ LOCK`. A request
//! waits at most [`TRY`] on MariaDB (`max_statement_time`) and
//! `lock_wait_timeout` (1 s) on MySQL, then is given up and asked for again
//! a quarter of a second later: commits that start while it waits queue
//! behind it, and this bounds how long. After a second of failed requests,
//! what keeps it from being granted is looked up and named: the caller
//! waits for it up to a limit, aborts naming it, or kills it when asked.

use std::time::{Duration, Instant};

use crate::error::{bail, Result};
use mysql::prelude::Queryable;

use crate::manifest::Position;

/// A query that may keep the lock from being granted.
#[derive(Debug, Clone)]
pub struct Blocker {
    pub id: u64,
    pub user: String,
    pub seconds: u64,
    pub info: String,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection {} ({}) running for {} s: {}", self.id, self.user, self.seconds, self.info)
    }
}

/// How the lock is taken.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// Give up after this long of failed attempts.
    pub wait: Duration,
    /// Kill the queries that keep the lock from being granted.
    pub kill: bool,
    /// Take no lock at all: each thread opens its own snapshot when the
    /// copy starts and reads its chunks in it, so the copy is not of one
    /// point in time (a row whose key changed between two threads'
    /// snapshots can be read twice, and the load then fails on it) and no
    /// binlog position is recorded; the snapshots hold back purge while the
    /// copy runs, as any dump's do. For copies that need no single point in
    /// time (the index advisor's), where blocking the server's commits for
    /// one is not worth it.
    pub unlocked: bool,
}

pub struct Held {
    pub statement: &'static str,
    pub at: Instant,
    /// How long the requests that block commits (BLOCK_COMMIT, FTWRL)
    /// took, over every try: commits queue behind a request while it waits.
    pub waited: Duration,
    /// MariaDB: how long each BACKUP STAGE statement of the granted request took.
    pub stages: Vec<(&'static str, Duration)>,
    mariadb: bool,
}

/// Queries running for a second or more, longest first (not our own, not
/// replication or server threads).
pub fn long_queries(c: &mut mysql::Conn) -> Result<Vec<Blocker>> {
    let rows: Vec<(u64, String, u64, Option<String>)> = c.query(
        "SELECT ID, USER, TIME, LEFT(INFO, 200) FROM information_schema.PROCESSLIST \
         WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump', 'Slave_IO', 'Slave_SQL', 'Slave_worker') \
         AND TIME >= 1 ORDER BY TIME DESC",
    )?;
    Ok(rows
        .into_iter()
        .map(|(id, user, seconds, info)| Blocker { id, user, seconds, info: info.unwrap_or_default() })
        .collect())
}

/// A lock wait given up: `lock_wait_timeout` (1205), or the bound put on
/// the MariaDB snapshot lock's request with `max_statement_time` (1969).
fn is_lock_timeout(e: &mysql::Error) -> bool {
    matches!(e, mysql::Error::MySqlError(m) if m.code == 1205 || m.code == 1969)
}

/// How long one request for MariaDB's snapshot lock may wait: commits that
/// start while it waits queue behind it, so it is given up soon and asked
/// for again after they drain.
pub const TRY: Duration = Duration::from_millis(50);

fn lock_timeout_in(e: &crate::error::DumpError) -> bool {
    e.server_error().is_some_and(is_lock_timeout)
}

/// Run `f`, which waits at most a second for any lock; while it times out
/// (after a second of retries: earlier ones are commits passing),
/// name the queries that keep it waiting and retry for up to `o.wait`, kill
/// them when asked, or give up naming them. `what` says what waits.
pub fn guarded<T>(
    c: &mut mysql::Conn,
    o: &LockOptions,
    what: &str,
    note: &mut dyn FnMut(String),
    mut f: impl FnMut(&mut mysql::Conn) -> Result<T>,
) -> Result<T> {
    let t0 = Instant::now();
    let mut killed = vec![];
    let mut noted: Option<Instant> = None;
    loop {
        match f(c) {
            Ok(v) => return Ok(v),
            // Short tries that fail within the first second are commits
            // passing: nothing is named or killed for them.
            Err(e) if lock_timeout_in(&e) => {
                if t0.elapsed() >= Duration::from_secs(1) {
                    let blockers = long_queries(c)?;
                    let names = blockers.iter().map(|b| b.to_string()).collect::<Vec<_>>().join("; ");
                    if o.kill && !blockers.is_empty() {
                        for b in &blockers {
                            if !killed.contains(&b.id) {
                                let _ = c.query_drop(format!("KILL QUERY {}", b.id));
                                note(format!("killed the query of {b} (--kill-long-queries)"));
                                killed.push(b.id);
                            }
                        }
                    } else if t0.elapsed() >= o.wait {
                        bail!(
                            "{what} waited {} s for a lock: {}; wait for {} to finish, raise --lock-wait, or pass --kill-long-queries",
                            o.wait.as_secs(),
                            if names.is_empty() { "a commit or DDL kept it waiting".to_string() } else { names.clone() },
                            if blockers.len() == 1 { "it" } else { "them" }
                        );
                    } else if noted.is_none_or(|n| n.elapsed() >= Duration::from_secs(1)) {
                        noted = Some(Instant::now());
                        note(format!(
                            "{what} waits for a lock ({}); retrying for up to {} s",
                            if names.is_empty() { "no long query seen".into() } else { names },
                            o.wait.as_secs()
                        ));
                    }
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Take the lock (see the module docs). `note` hears about waits.
pub fn lock(c: &mut mysql::Conn, mariadb: bool, o: &LockOptions, note: &mut dyn FnMut(String)) -> Result<Held> {
    c.query_drop("SET SESSION lock_wait_timeout = 1")?;
    let mut queued = Duration::ZERO;
    guarded(c, o, "the snapshot lock", note, |c| {
        let mut stages = vec![];
        let tried = if mariadb {
            // BLOCK_COMMIT fsyncs the binary log after it has blocked
            // commits, and that cannot be interrupted: with the log written
            // in the last half minute and not synced (sync_binlog=0), that
            // took 150–300 ms in bench/dump. When the log is on this
            // machine it is written out here first, while commits go on.
            let t = Instant::now();
            if sync_binlog_here(c) {
                stages.push(("fsync binary log", t.elapsed()));
            }
            // Stage by stage: the flushes of FLUSH and BLOCK_DDL run before
            // commits are blocked, and only BLOCK_COMMIT, which blocks them,
            // is bounded by TRY.
            let mut step = |c: &mut mysql::Conn, stage: &'static str| {
                let t = Instant::now();
                let r = c.query_drop(format!("BACKUP STAGE {stage}"));
                stages.push((stage, t.elapsed()));
                r
            };
            let r = step(c, "START")
                .and_then(|_| step(c, "FLUSH"))
                .and_then(|_| step(c, "BLOCK_DDL"))
                .and_then(|_| c.query_drop(format!("SET SESSION max_statement_time = {}", TRY.as_secs_f64())))
                .and_then(|_| step(c, "BLOCK_COMMIT"));
            let _ = c.query_drop("SET SESSION max_statement_time = 0");
            queued += stages.iter().filter(|(s, _)| *s == "BLOCK_COMMIT").map(|(_, d)| *d).sum::<Duration>();
            r
        } else {
            let t = Instant::now();
            let r = c.query_drop("FLUSH TABLES WITH READ LOCK");
            queued += t.elapsed();
            r
        };
        match tried {
            Ok(()) => Ok(Held {
                statement: if mariadb { "BACKUP STAGE BLOCK_COMMIT" } else { "FLUSH TABLES WITH READ LOCK" },
                at: Instant::now(),
                waited: queued,
                stages,
                mariadb,
            }),
            Err(e) => {
                release(c, mariadb);
                if is_lock_timeout(&e) {
                    Err(e.into())
                } else {
                    bail!("taking the snapshot lock failed: {}", pileup_conn::plain(&e))
                }
            }
        }
    })
}

/// fsync the server's current binary log file if it is on this machine
/// and not synced at every commit already; whether it was.
fn sync_binlog_here(c: &mut mysql::Conn) -> bool {
    let v: Option<(u8, Option<String>, u64)> =
        c.query_first("SELECT @@log_bin, @@log_bin_basename, @@sync_binlog").unwrap_or(None);
    let Some((1, Some(base), sync)) = v else { return false };
    if sync == 1 {
        return false;
    }
    let file: Option<String> = c
        .query_first::<mysql::Row, _>("SHOW MASTER STATUS")
        .unwrap_or(None)
        .and_then(|r| r.get_opt::<String, _>(0).and_then(|x| x.ok()));
    let Some(file) = file else { return false };
    let path = std::path::Path::new(&base).with_file_name(file);
    // In 4 MiB steps: one fsync of a few hundred MB written in the last
    // half minute filled the device's queue and held the server's own
    // commits for tens of milliseconds in bench/dump.
    pileup_files::sync_gently(&path, 4 << 20).is_ok()
}

fn release(c: &mut mysql::Conn, mariadb: bool) {
    let _ = c.query_drop(if mariadb { "BACKUP STAGE END" } else { "UNLOCK TABLES" });
}

impl Held {
    pub fn release(self, c: &mut mysql::Conn) -> Duration {
        release(c, self.mariadb);
        self.at.elapsed()
    }
}

/// Open a worker's snapshot (while the lock is held).
pub fn open(w: &mut mysql::Conn) -> Result<()> {
    w.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")?;
    w.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")?;
    Ok(())
}

/// The binlog position (while the lock is held).
pub fn position(c: &mut mysql::Conn) -> Position {
    let master: Option<mysql::Row> = c.query_first("SHOW MASTER STATUS").unwrap_or(None);
    let (binlog_file, binlog_pos) = match master {
        Some(r) => (r.get_opt::<String, _>(0).and_then(|x| x.ok()), r.get_opt::<u64, _>(1).and_then(|x| x.ok())),
        None => (None, None),
    };
    let gtid_binlog_pos: Option<String> = c.query_first("SELECT @@gtid_binlog_pos").unwrap_or(None);
    Position { binlog_file, binlog_pos, gtid_binlog_pos }
}
