//! InnoDB's dirty pages written now, on a server of pileup's own (a
//! benchmark's sandbox): flushing turned up for the length of a wait, and
//! put back as it was.

use mysql::prelude::Queryable;

/// Run `wait` (which polls for what it needs) with InnoDB flushing its
/// dirty pages as fast as it can: `innodb_max_dirty_pages_pct` and its
/// low-water mark at 0, the page cleaner's I/O budget raised
/// (`innodb_io_capacity` 20000, its maximum 40000; at a budget of 100 it
/// writes a few dozen pages a second). The four settings are put back as
/// they were afterwards, whatever `wait` returned.
pub fn flushing<T>(c: &mut mysql::Conn, wait: impl FnOnce(&mut mysql::Conn) -> T) -> Result<T, mysql::Error> {
    let (pct, lwm, cap, cap_max): (f64, f64, u64, u64) = c
        .query_first(
            "SELECT @@innodb_max_dirty_pages_pct, @@innodb_max_dirty_pages_pct_lwm, @@innodb_io_capacity, \
             @@innodb_io_capacity_max",
        )?
        .unwrap_or((90.0, 0.0, 200, 2000));
    c.query_drop(
        "SET GLOBAL innodb_io_capacity_max = 40000, GLOBAL innodb_io_capacity = 20000, \
         GLOBAL innodb_max_dirty_pages_pct_lwm = 0, GLOBAL innodb_max_dirty_pages_pct = 0",
    )?;
    let r = wait(c);
    c.query_drop(format!(
        "SET GLOBAL innodb_max_dirty_pages_pct = {pct}, GLOBAL innodb_max_dirty_pages_pct_lwm = {lwm}, \
         GLOBAL innodb_io_capacity = {cap}, GLOBAL innodb_io_capacity_max = {cap_max}"
    ))?;
    Ok(r)
}
