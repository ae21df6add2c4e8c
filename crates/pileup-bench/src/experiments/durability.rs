//! Honest durability: one-row updates, each its own transaction, at each
//! durability level, so two systems are compared only at the same one.
//! MariaDB: the redo log written and flushed at every commit
//! (innodb_flush_log_at_trx_commit=1, with sync_binlog=1 where the binary
//! log is on), written at commit and flushed once a second (2), or both
//! once a second (0). PostgreSQL: synchronous_commit on (the WAL flushed
//! at every commit) and off (flushed by the WAL writer within 3 × 200 ms);
//! fsync stays on.

use mysql::prelude::Queryable;

use super::common::{globals, maria_error, pg_error, rows_table, settings, Ctx, Globals, Rand, Variant};
use crate::drive::{Client, OpError};
use crate::error::Result;

struct MariaUpdate {
    conn: mysql::Conn,
    stmt: mysql::Statement,
    rand: Rand,
    rows: u32,
}

impl Client for MariaUpdate {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        let id = self.rand.upto(self.rows);
        self.conn.exec_drop(&self.stmt, (id,)).map_err(maria_error)
    }
}

struct PgUpdate {
    conn: postgres::Client,
    stmt: postgres::Statement,
    rand: Rand,
    rows: u32,
}

impl Client for PgUpdate {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        let id = self.rand.upto(self.rows) as i32;
        self.conn.execute(&self.stmt, &[&id]).map(drop).map_err(pg_error)
    }
}

pub(super) fn setup<'a>(ctx: &'a Ctx) -> Result<Vec<Variant<'a>>> {
    rows_table(ctx)?;
    let m = ctx.maria;
    let rows = ctx.o.rows.max(1);
    let binlog = m.durability()?.get("log_bin").is_some_and(|v| v == "1" || v == "ON");
    let levels: [(&str, Globals, &str); 3] = if binlog {
        [
            ("flushed at every commit", &[("innodb_flush_log_at_trx_commit", "1"), ("sync_binlog", "1")], "1"),
            (
                "written at commit, flushed each second",
                &[("innodb_flush_log_at_trx_commit", "2"), ("sync_binlog", "0")],
                "2",
            ),
            ("written and flushed each second", &[("innodb_flush_log_at_trx_commit", "0"), ("sync_binlog", "0")], "0"),
        ]
    } else {
        [
            ("flushed at every commit", &[("innodb_flush_log_at_trx_commit", "1")], "1"),
            ("written at commit, flushed each second", &[("innodb_flush_log_at_trx_commit", "2")], "2"),
            ("written and flushed each second", &[("innodb_flush_log_at_trx_commit", "0")], "0"),
        ]
    };
    let mut v = vec![];
    for (what, pairs, level) in levels {
        let mut set = settings(pairs);
        set.insert("log_bin".into(), if binlog { "ON" } else { "OFF" }.into());
        v.push(Variant {
            label: format!("MariaDB, redo log {what} (innodb_flush_log_at_trx_commit={level})"),
            system: "MariaDB",
            settings: set,
            apply: globals(m, pairs),
            make: Box::new(move |t| {
                let mut conn = m.client()?;
                let stmt =
                    conn.prep("UPDATE sb SET k = k + 1 WHERE id = ?").map_err(|e| pileup_conn::error_text(&e))?;
                Ok(Box::new(MariaUpdate { conn, stmt, rand: Rand::new(t), rows }))
            }),
            pid: m.pid,
            counter: None,
            profiled: level == "1",
        });
    }
    if let Some(pg) = ctx.pg {
        // As the server runs: a server of the user's may have fsync off.
        let fsync = pg.settings.get("fsync").map(String::as_str).unwrap_or("unknown");
        for sync in ["on", "off"] {
            v.push(Variant {
                label: format!(
                    "PostgreSQL, WAL {} (synchronous_commit={sync})",
                    if sync == "on" { "flushed at every commit" } else { "flushed by the WAL writer" }
                ),
                system: "PostgreSQL",
                settings: settings(&[("synchronous_commit", sync), ("fsync", fsync)]),
                apply: Box::new(|| Ok(vec![])),
                make: Box::new(move |t| {
                    let mut conn = pg.client()?;
                    // A session setting: nothing global changes.
                    conn.batch_execute(&format!("SET synchronous_commit = {sync}"))
                        .map_err(|e| crate::target::pg_text(&e))?;
                    let stmt = conn
                        .prepare("UPDATE sb SET k = k + 1 WHERE id = $1")
                        .map_err(|e| crate::target::pg_text(&e))?;
                    Ok(Box::new(PgUpdate { conn, stmt, rand: Rand::new(t), rows }))
                }),
                pid: pg.pid,
                counter: None,
                profiled: false,
            });
        }
    }
    Ok(v)
}
