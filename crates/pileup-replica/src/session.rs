//! Sessions that read beside the applier and never wait on it: short
//! metadata-lock and row-lock waits, a statement time limit, read-only,
//! no read view.

use std::time::Duration;

use mysql::prelude::Queryable;

/// Set up `c` to read beside the applier without ever holding it up.
/// Settings the server does not know are left as they are.
pub fn reader_safe(c: &mut mysql::Conn, query_timeout: Duration) {
    let secs = query_timeout.as_secs_f64();
    let _ = c.query_drop(format!("SET SESSION max_statement_time = {secs}"));
    let _ = c.query_drop("SET SESSION lock_wait_timeout = 1");
    let _ = c.query_drop("SET SESSION innodb_lock_wait_timeout = 1");
    let _ = c.query_drop("SET SESSION time_zone = '+00:00'");
    let _ = c.query_drop("SET SESSION transaction_read_only = 1");
    // The values read do not matter, only that the pages come into the
    // buffer pool. READ UNCOMMITTED builds no read view: a secondary index
    // entry on a page the applier changed recently is not checked against
    // its clustered record, which would read another page while holding the
    // leaf latch the applier is about to need.
    let _ = c.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED");
    // Point lookups need no row estimates: skip the index dives the range
    // optimizer would otherwise make for every key (CPU and page latches the
    // applier would compete with).
    let _ = c.query_drop("SET SESSION eq_range_index_dive_limit = 1");
}
