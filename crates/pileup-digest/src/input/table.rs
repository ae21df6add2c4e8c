//! The `mysql.slow_log` table (`log_output=TABLE`): its rows as statements.
//! MariaDB's table has `rows_affected`; MySQL's has not. The table keeps
//! what the file's first lines keep (times, rows, database, user and host)
//! and nothing of `log_slow_verbosity`'s extra lines.

use mysql::prelude::Queryable;

use crate::aggregate::Aggregate;
use crate::attr::{A, N_ATTRS};
use crate::class::Event;
use crate::input::slowlog::user_host;

/// Read every row of `mysql.slow_log` into `agg` as input `input`; the
/// number of rows read, and a note when the server no longer writes the
/// table.
pub fn read(conn: &mut mysql::Conn, input: usize, agg: &mut Aggregate) -> Result<(u64, Option<String>), String> {
    // A server that logs to a file leaves the table empty, or holding only
    // what it logged before: say so rather than report an empty log, or
    // the old rows as if they were all.
    let reading = |e: mysql::Error| format!("reading mysql.slow_log: {}", pileup_conn::plain(&e));
    let output: Option<String> = conn
        .query_first("SELECT @@log_output")
        .map_err(|e| format!("reading @@log_output: {}", pileup_conn::plain(&e)))?;
    let output = output.unwrap_or_default();
    let mut note = None;
    if !output.to_ascii_uppercase().split(',').any(|o| o == "TABLE") {
        let file: Option<String> = conn.query_first("SELECT @@slow_query_log_file").ok().flatten();
        let file = file.unwrap_or_else(|| "@@slow_query_log_file".into());
        let held: Option<u64> = conn.query_first("SELECT COUNT(*) FROM mysql.slow_log").map_err(reading)?;
        if held.unwrap_or(0) == 0 {
            return Err(format!(
                "this server does not write mysql.slow_log (log_output={output}): read its slow-log file instead ({file}), or SET GLOBAL log_output='TABLE'"
            ));
        }
        note = Some(format!(
            "this server does not write mysql.slow_log now (log_output={output}): its rows are from when it did; what it logs now is in {file}"
        ));
    }
    let cols: Vec<String> = conn
        .query(
            "SELECT LOWER(COLUMN_NAME) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = 'mysql' AND TABLE_NAME = 'slow_log'",
        )
        .map_err(|e| pileup_conn::plain(&e))?;
    if cols.is_empty() {
        return Err("the server has no mysql.slow_log table".into());
    }
    let affected = cols.iter().any(|c| c == "rows_affected");
    let sql = format!(
        // Seconds with their fraction, the same on MariaDB and MySQL (whose
        // TIME_TO_SEC drops the fraction).
        "SELECT UNIX_TIMESTAMP(start_time), user_host, \
         HOUR(query_time) * 3600 + MINUTE(query_time) * 60 + SECOND(query_time) + MICROSECOND(query_time) / 1e6, \
         HOUR(lock_time) * 3600 + MINUTE(lock_time) * 60 + SECOND(lock_time) + MICROSECOND(lock_time) / 1e6, \
         rows_sent, rows_examined, db, sql_text, {} FROM mysql.slow_log",
        if affected { "rows_affected" } else { "NULL" }
    );
    let mut n = 0u64;
    let rows = conn.query_iter(sql).map_err(reading)?;
    for row in rows {
        let row = row.map_err(reading)?;
        let v = row.unwrap();
        let f = |i: usize| mysql::from_value_opt::<f64>(v[i].clone()).ok();
        let b = |i: usize| mysql::from_value_opt::<Vec<u8>>(v[i].clone()).unwrap_or_default();
        let (uh, db, text) = (b(1), b(6), b(7));
        let (user, host) = user_host(&uh);
        let mut values = [0.0; N_ATTRS];
        let mut present = 0u64;
        for (a, x) in [
            (A::QueryTime, f(2)),
            (A::LockTime, f(3)),
            (A::RowsSent, f(4)),
            (A::RowsExamined, f(5)),
            (A::RowsAffected, f(8)),
        ] {
            if let Some(x) = x {
                values[a as usize] = x;
                present |= 1 << a as usize;
            }
        }
        n += 1;
        agg.add(&Event {
            values: &values,
            present,
            flags_seen: 0,
            flags_yes: 0,
            user,
            host,
            db: &db,
            ts: f(0).map(|t| t as i64),
            query: &text,
            explain: &[],
            at: (input, n),
        });
    }
    Ok((n, note))
}
