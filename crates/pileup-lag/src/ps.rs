//! The applier threads' instrumented waits over the sampling period, from
//! performance_schema: the stack samples say "waiting on a latch", the
//! server's own instruments say which one (`index_tree_rw_lock`, a data
//! file read, the binlog lock...) and for how long.
//!
//! Read as a difference of two snapshots of
//! `events_waits_summary_by_thread_by_event_name` for the applier threads
//! (cheap: one summary row per instrument and thread, no history tables).
//! What it can name depends on what the server instruments: MariaDB turns
//! performance_schema off by default and, when on, times only file and
//! table I/O unless `performance_schema_instrument='wait/synch/%=ON'` is
//! set at startup; InnoDB's page latches are never instrumented.

use std::collections::HashMap;

use mysql::prelude::Queryable;
use serde::Serialize;

/// One instrument's waits by the applier threads over the period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PsWait {
    pub event: String,
    pub count: u64,
    pub seconds: f64,
}

/// Counts and picoseconds per instrument, summed over the applier threads.
pub type Snapshot = HashMap<String, (u64, u128)>;

/// Applier thread names in performance_schema.threads: MariaDB and MySQL
/// before 8.0.26 (slave_*), MySQL 8.0.26 and later (replica_*), MariaDB's
/// parallel replication pool.
const APPLIER_THREADS: &str = "'thread/sql/slave_sql','thread/sql/slave_worker','thread/sql/rpl_parallel_thread',\
'thread/sql/replica_sql','thread/sql/replica_worker'";

/// The applier threads' performance_schema ids, or why there are none to read.
pub fn applier_threads(c: &mut mysql::Conn) -> Result<Result<Vec<u64>, String>, pileup_conn::SqlError> {
    let on: Option<i64> = c.query_first("SELECT @@performance_schema").unwrap_or(None);
    if on != Some(1) {
        return Ok(Err("performance_schema is OFF: start the replica with performance_schema=ON \
(and performance_schema_instrument='wait/synch/%=ON' to time latches) to have the waits named"
            .into()));
    }
    let ids: Vec<u64> =
        c.query(format!("SELECT THREAD_ID FROM performance_schema.threads WHERE NAME IN ({APPLIER_THREADS})"))?;
    if ids.is_empty() {
        return Ok(Err("performance_schema lists no applier thread (is the SQL thread running?)".into()));
    }
    Ok(Ok(ids))
}

/// Summed waits of `ids` per instrument, now.
pub fn snapshot(c: &mut mysql::Conn, ids: &[u64]) -> Result<Snapshot, pileup_conn::SqlError> {
    let list = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let rows: Vec<(String, u64, String)> = c.query(format!(
        "SELECT EVENT_NAME, CAST(SUM(COUNT_STAR) AS UNSIGNED), CAST(SUM(SUM_TIMER_WAIT) AS CHAR) \
         FROM performance_schema.events_waits_summary_by_thread_by_event_name \
         WHERE THREAD_ID IN ({list}) AND COUNT_STAR > 0 GROUP BY EVENT_NAME"
    ))?;
    Ok(rows.into_iter().map(|(e, n, ps)| (e, (n, ps.parse().unwrap_or(0)))).collect())
}

/// What happened between two snapshots, longest first; instruments that
/// did not wait in between are left out. A thread that ended in between
/// takes its sums with it, so negative differences count as zero.
pub fn between(before: &Snapshot, after: &Snapshot) -> Vec<PsWait> {
    let mut v: Vec<PsWait> = after
        .iter()
        .filter_map(|(e, (n, ps))| {
            let (n0, ps0) = before.get(e).copied().unwrap_or((0, 0));
            let count = n.saturating_sub(n0);
            let seconds = ps.saturating_sub(ps0) as f64 / 1e12;
            (count > 0 && seconds > 0.0).then(|| PsWait { event: e.clone(), count, seconds })
        })
        .collect();
    v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then_with(|| a.event.cmp(&b.event)));
    v
}

/// Reads which transaction each parallel-replication worker is applying,
/// by the worker's OS thread id, from
/// `performance_schema.replication_applier_status_by_worker`: MySQL 8's
/// `APPLYING_TRANSACTION`, or MariaDB's `LAST_SEEN_TRANSACTION` (set when a
/// worker starts an event group, so the one it is on). A single-threaded
/// MariaDB replica has no rows there.
#[derive(Debug, Default)]
pub struct WorkerGtids {
    column: Option<&'static str>,
    unavailable: bool,
}

impl WorkerGtids {
    pub fn read(&mut self, c: &mut mysql::Conn) -> HashMap<i32, String> {
        if self.unavailable {
            return HashMap::new();
        }
        let columns: Vec<&'static str> = match self.column {
            Some(col) => vec![col],
            None => vec!["APPLYING_TRANSACTION", "LAST_SEEN_TRANSACTION"],
        };
        for col in columns {
            let q = format!(
                "SELECT t.THREAD_OS_ID, w.{col} FROM performance_schema.replication_applier_status_by_worker w \
                 JOIN performance_schema.threads t ON t.THREAD_ID = w.THREAD_ID WHERE w.{col} <> ''"
            );
            if let Ok(rows) = c.query::<(Option<i64>, String), _>(q) {
                self.column = Some(col);
                return rows.into_iter().filter_map(|(tid, g)| Some((i32::try_from(tid?).ok()?, g))).collect();
            }
        }
        // Neither column exists (an older server): stop asking. A failure
        // after one worked (a dropped connection) only loses this sample.
        self.unavailable = self.column.is_none();
        HashMap::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_longest_first_without_idle_or_vanished_instruments() {
        let s = |v: &[(&str, u64, u128)]| -> Snapshot { v.iter().map(|(e, n, p)| (e.to_string(), (*n, *p))).collect() };
        let before = s(&[
            ("wait/io/file/innodb/innodb_data_file", 100, 5_000_000_000_000),
            ("wait/synch/sxlock/innodb/index_tree_rw_lock", 10, 1_000_000_000),
            ("wait/io/file/sql/binlog", 7, 9),
        ]);
        let after = s(&[
            ("wait/io/file/innodb/innodb_data_file", 400, 6_500_000_000_000),
            ("wait/synch/sxlock/innodb/index_tree_rw_lock", 1010, 2_701_000_000_000),
            ("wait/io/file/sql/binlog", 7, 9),
            ("wait/synch/mutex/sql/LOG::LOCK_log", 5, 2_000_000),
        ]);
        let d = between(&before, &after);
        assert_eq!(
            d.iter().map(|w| w.event.as_str()).collect::<Vec<_>>(),
            [
                "wait/synch/sxlock/innodb/index_tree_rw_lock",
                "wait/io/file/innodb/innodb_data_file",
                "wait/synch/mutex/sql/LOG::LOCK_log"
            ]
        );
        assert_eq!(d[0].count, 1000);
        assert!((d[0].seconds - 2.7).abs() < 1e-9);
        assert!((d[1].seconds - 1.5).abs() < 1e-9);
        // A worker that ended meanwhile: its sums vanish; no negative waits.
        assert!(between(&after, &before).is_empty());
    }
}
