//! performance_schema's `events_statements_summary_by_digest`, read twice
//! and subtracted: what each statement digest did over a window. The table
//! keeps sums since it was last reset, so a window's figures are the
//! difference of two reads; a digest the table evicted or reset between
//! them counts from zero. Sums only: performance_schema keeps no
//! per-statement values, so a class from it has totals and means but no
//! min, max or percentiles of the window.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql::prelude::Queryable;

/// One digest's sums, as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sums {
    pub count: u64,
    /// Picoseconds.
    pub timer_wait: u64,
    pub lock_time: u64,
    pub rows_sent: u64,
    pub rows_examined: u64,
    pub rows_affected: u64,
    pub tmp_disk_tables: u64,
    pub tmp_tables: u64,
    pub sort_merge_passes: u64,
    pub sort_rows: u64,
    pub select_scan: u64,
    pub select_full_join: u64,
    pub errors: u64,
}

impl Sums {
    /// `self − before`, or `self` when the digest's counters went back
    /// (the table was reset or the digest evicted and seen again).
    pub fn since(&self, before: Option<&Sums>) -> Sums {
        let Some(b) = before.filter(|b| b.count <= self.count) else { return self.clone() };
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Sums {
            count: d(self.count, b.count),
            timer_wait: d(self.timer_wait, b.timer_wait),
            lock_time: d(self.lock_time, b.lock_time),
            rows_sent: d(self.rows_sent, b.rows_sent),
            rows_examined: d(self.rows_examined, b.rows_examined),
            rows_affected: d(self.rows_affected, b.rows_affected),
            tmp_disk_tables: d(self.tmp_disk_tables, b.tmp_disk_tables),
            tmp_tables: d(self.tmp_tables, b.tmp_tables),
            sort_merge_passes: d(self.sort_merge_passes, b.sort_merge_passes),
            sort_rows: d(self.sort_rows, b.sort_rows),
            select_scan: d(self.select_scan, b.select_scan),
            select_full_join: d(self.select_full_join, b.select_full_join),
            errors: d(self.errors, b.errors),
        }
    }
}

/// A digest over the window.
#[derive(Clone, Debug)]
pub struct Delta {
    pub schema: String,
    pub text: String,
    /// MySQL 8's QUERY_SAMPLE_TEXT: one real statement of the digest.
    pub sample: Option<String>,
    pub sums: Sums,
    /// LAST_SEEN, Unix seconds.
    pub last_seen: Option<i64>,
}

type Key = (String, String);

struct Row {
    text: String,
    sample: Option<String>,
    sums: Sums,
    last_seen: Option<i64>,
}

fn read(conn: &mut mysql::Conn, sample_col: bool) -> Result<HashMap<Key, Row>, String> {
    let sql = format!(
        "SELECT IFNULL(SCHEMA_NAME, ''), DIGEST, DIGEST_TEXT, {}, COUNT_STAR, SUM_TIMER_WAIT, SUM_LOCK_TIME, \
         SUM_ROWS_SENT, SUM_ROWS_EXAMINED, SUM_ROWS_AFFECTED, SUM_CREATED_TMP_DISK_TABLES, SUM_CREATED_TMP_TABLES, \
         SUM_SORT_MERGE_PASSES, SUM_SORT_ROWS, SUM_SELECT_SCAN, SUM_SELECT_FULL_JOIN, SUM_ERRORS, \
         UNIX_TIMESTAMP(LAST_SEEN) FROM performance_schema.events_statements_summary_by_digest WHERE DIGEST IS NOT NULL",
        if sample_col { "QUERY_SAMPLE_TEXT" } else { "NULL" }
    );
    let mut out = HashMap::new();
    for row in conn.query_iter(sql).map_err(|e| pileup_conn::plain(&e))? {
        let row = row.map_err(|e| pileup_conn::plain(&e))?;
        let v = row.unwrap();
        let s = |i: usize| mysql::from_value_opt::<String>(v[i].clone()).unwrap_or_default();
        let n = |i: usize| mysql::from_value_opt::<u64>(v[i].clone()).unwrap_or(0);
        let sums = Sums {
            count: n(4),
            timer_wait: n(5),
            lock_time: n(6),
            rows_sent: n(7),
            rows_examined: n(8),
            rows_affected: n(9),
            tmp_disk_tables: n(10),
            tmp_tables: n(11),
            sort_merge_passes: n(12),
            sort_rows: n(13),
            select_scan: n(14),
            select_full_join: n(15),
            errors: n(16),
        };
        let sample = mysql::from_value_opt::<String>(v[3].clone()).ok().filter(|x| !x.is_empty());
        let last_seen = mysql::from_value_opt::<f64>(v[17].clone()).ok().map(|t| t as i64);
        out.insert((s(0), s(1)), Row { text: s(2), sample, sums, last_seen });
    }
    Ok(out)
}

/// The server's own count of client statements, and of executions of
/// prepared statements, so far.
fn statements(conn: &mut mysql::Conn) -> Result<(u64, u64), String> {
    let rows: Vec<(String, String)> = conn
        .query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_execute')")
        .map_err(|e| pileup_conn::plain(&e))?;
    let get = |k: &str| rows.iter().find(|r| r.0.eq_ignore_ascii_case(k)).and_then(|r| r.1.parse().ok()).unwrap_or(0);
    Ok((get("Questions"), get("Com_stmt_execute")))
}

/// What performance_schema did not see of a window: `seen` statements in
/// its digests, against the server's `questions` (less `own`, pileup's own
/// statements) of which `executes` ran prepared statements. `None` when it
/// saw (nearly) all.
pub fn unseen(seen: u64, questions: u64, executes: u64, own: u64) -> Option<String> {
    let asked = questions.saturating_sub(own);
    let missed = asked.saturating_sub(seen);
    if missed <= 10 || missed * 10 <= asked {
        return None;
    }
    Some(if executes * 2 >= missed {
        format!(
            "performance_schema's digests saw {seen} of the {asked} statements the server ran; {executes} were executions of prepared statements (COM_STMT_EXECUTE), which its digests leave out: digest the slow log for them (slow_query_log=ON, long_query_time=0)"
        )
    } else {
        format!(
            "performance_schema's digests saw {seen} of the {asked} statements the server ran: the digest table may be full (raise performance_schema_digests_size) or statement instruments off (performance_schema.setup_consumers, setup_instruments)"
        )
    })
}

/// Windows read one after another: each ends with the read the next one
/// starts from, so no statement falls between two.
pub struct Reader {
    sample_col: bool,
    before: HashMap<Key, Row>,
    /// Questions and Com_stmt_execute at the window's start.
    status: (u64, u64),
    /// pileup's own statements the server counts in a window.
    own: u64,
}

impl Reader {
    /// Check that performance_schema is on and read the digests a first
    /// time.
    pub fn open(conn: &mut mysql::Conn) -> Result<Reader, String> {
        let on: Option<String> =
            conn.query_first("SELECT @@performance_schema").map_err(|e| pileup_conn::plain(&e))?.map(|v: String| v);
        if on.as_deref() != Some("1") && on.as_deref() != Some("ON") {
            return Err("performance_schema is off on this server (it takes performance_schema=ON in the server's \
                        configuration and a restart); read its slow log instead"
                .into());
        }
        let sample_col: bool = conn
            .query_first::<u64, _>(
                "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'performance_schema' \
                 AND TABLE_NAME = 'events_statements_summary_by_digest' AND COLUMN_NAME = 'QUERY_SAMPLE_TEXT'",
            )
            .map_err(|e| pileup_conn::plain(&e))?
            .unwrap_or(0)
            > 0;
        let status = statements(conn)?;
        let before = read(conn, sample_col)?;
        // The first window counts the first digest read, the second
        // status read and the second digest read.
        Ok(Reader { sample_col, before, status, own: 3 })
    }

    /// Wait `duration` (or until `stop`), read the digests again: what
    /// each did since the last read, digests with no statement left out,
    /// and what performance_schema did not see of the window ([`unseen`]).
    pub fn next(
        &mut self,
        conn: &mut mysql::Conn,
        duration: Duration,
        stop: &AtomicBool,
    ) -> Result<(Vec<Delta>, Option<String>), String> {
        let t0 = Instant::now();
        let mut pinged = Instant::now();
        while t0.elapsed() < duration && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100).min(duration.saturating_sub(t0.elapsed())));
            // A ping a second (not a statement: the server's Questions leave
            // it out): a server that dies in the window takes its counters
            // with it, and is said at once rather than at the window's end.
            if pinged.elapsed() >= Duration::from_secs(1) {
                pinged = Instant::now();
                if let Err(e) = conn.ping() {
                    return Err(format!(
                        "the server stopped answering {:.0} s into the window ({}): performance_schema's counters \
                         went with it, so the window has no digest",
                        t0.elapsed().as_secs_f64(),
                        pileup_conn::plain(&e)
                    ));
                }
            }
        }
        let after = read(conn, self.sample_col)?;
        let (q1, e1) = statements(conn)?;
        let mut out: Vec<Delta> = after
            .iter()
            .map(|(k, r)| {
                let sums = r.sums.since(self.before.get(k).map(|b| &b.sums));
                let (text, sample) = (r.text.clone(), r.sample.clone());
                Delta { schema: k.0.clone(), text, sample, sums, last_seen: r.last_seen }
            })
            .filter(|d| d.sums.count > 0)
            .collect();
        out.sort_by_key(|d| std::cmp::Reverse(d.sums.timer_wait));
        let seen: u64 = out.iter().map(|d| d.sums.count).sum();
        let (q0, e0) = self.status;
        let note = unseen(seen, q1.saturating_sub(q0), e1.saturating_sub(e0), self.own);
        // The next window: this read, this status read, the next digest
        // read and status read.
        (self.before, self.status, self.own) = (after, (q1, e1), 2);
        Ok((out, note))
    }
}

/// Read the digests, wait `duration` (or until `stop`), read them again:
/// one window of a [`Reader`].
pub fn window(
    conn: &mut mysql::Conn,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<(Vec<Delta>, Option<String>), String> {
    Reader::open(conn)?.next(conn, duration, stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_performance_schema_did_not_see_is_said() {
        assert_eq!(unseen(94_470, 94_480, 0, 3), None, "all but a few");
        let n = unseen(4, 94_483, 94_470, 3).unwrap();
        assert!(n.contains("saw 4 of the 94480") && n.contains("COM_STMT_EXECUTE"), "{n}");
        assert!(unseen(100, 10_000, 0, 3).unwrap().contains("performance_schema_digests_size"));
    }

    #[test]
    fn a_window_is_the_difference_and_a_reset_counts_from_zero() {
        let a = Sums { count: 10, timer_wait: 1000, rows_examined: 50, ..Default::default() };
        let b = Sums { count: 15, timer_wait: 1600, rows_examined: 80, ..Default::default() };
        let d = b.since(Some(&a));
        assert_eq!((d.count, d.timer_wait, d.rows_examined), (5, 600, 30));
        // Reset (or evicted and back): the later read is the window's.
        let c = Sums { count: 3, timer_wait: 90, ..Default::default() };
        assert_eq!(c.since(Some(&a)), c);
        assert_eq!(c.since(None), c);
    }
}
