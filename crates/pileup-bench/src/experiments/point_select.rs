//! Point selects: a primary-key lookup of a random row, prepared, as an
//! autocommit statement (a snapshot made and dropped per statement) and
//! inside REPEATABLE READ transactions of ten statements (one snapshot for
//! ten; PostgreSQL's default, READ COMMITTED, would take one per statement). The
//! difference is what a snapshot per statement costs. PostgreSQL the same
//! way, with the simple query protocol (plain) and prepared statements.

use mysql::prelude::Queryable;

use super::common::{maria_error, pg_error, rows_table, settings, Ctx, Rand, Variant};
use crate::drive::{Client, OpError};
use crate::error::Result;

/// Statements per transaction when not in autocommit.
const PER_TRX: u32 = 10;

struct MariaPoint {
    conn: mysql::Conn,
    stmt: mysql::Statement,
    rand: Rand,
    rows: u32,
    /// Statements run in the open transaction (0: autocommit).
    in_trx: Option<u32>,
}

impl Client for MariaPoint {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        if self.in_trx == Some(0) {
            self.conn.query_drop("BEGIN").map_err(maria_error)?;
        }
        let id = self.rand.upto(self.rows);
        let _: Option<String> = self.conn.exec_first(&self.stmt, (id,)).map_err(maria_error)?;
        if let Some(n) = self.in_trx.as_mut() {
            *n += 1;
            if *n == PER_TRX {
                *n = 0;
                self.conn.query_drop("COMMIT").map_err(maria_error)?;
            }
        }
        Ok(())
    }
}

struct PgPoint {
    conn: postgres::Client,
    prepared: Option<postgres::Statement>,
    rand: Rand,
    rows: u32,
    in_trx: Option<u32>,
}

impl Client for PgPoint {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        if self.in_trx == Some(0) {
            self.conn.batch_execute("BEGIN").map_err(pg_error)?;
        }
        let id = self.rand.upto(self.rows) as i32;
        match &self.prepared {
            Some(s) => {
                self.conn.query_opt(s, &[&id]).map_err(pg_error)?;
            }
            None => {
                self.conn.simple_query(&format!("SELECT c FROM sb WHERE id = {id}")).map_err(pg_error)?;
            }
        }
        if let Some(n) = self.in_trx.as_mut() {
            *n += 1;
            if *n == PER_TRX {
                *n = 0;
                self.conn.batch_execute("COMMIT").map_err(pg_error)?;
            }
        }
        Ok(())
    }
}

pub(super) fn setup<'a>(ctx: &'a Ctx) -> Result<Vec<Variant<'a>>> {
    rows_table(ctx)?;
    let m = ctx.maria;
    let rows = ctx.o.rows.max(1);
    let mut v = vec![];
    for trx in [false, true] {
        v.push(Variant {
            label: format!("MariaDB, prepared, {}", if trx { "10 per transaction" } else { "autocommit" }),
            system: "MariaDB",
            settings: settings(&[
                ("autocommit", if trx { "0 (10 statements per transaction)" } else { "1" }),
                ("isolation", if trx { "REPEATABLE READ" } else { "-" }),
            ]),
            apply: Box::new(|| Ok(vec![])),
            make: Box::new(move |t| {
                let mut conn = m.client()?;
                if trx {
                    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                        .map_err(|e| pileup_conn::error_text(&e))?;
                }
                let stmt = conn.prep("SELECT c FROM sb WHERE id = ?").map_err(|e| pileup_conn::error_text(&e))?;
                Ok(Box::new(MariaPoint { conn, stmt, rand: Rand::new(t), rows, in_trx: trx.then_some(0) }))
            }),
            pid: m.pid,
            counter: None,
            profiled: !trx,
        });
    }
    if let Some(pg) = ctx.pg {
        for prepared in [false, true] {
            for trx in [false, true] {
                let how = if prepared { "prepared" } else { "plain" };
                v.push(Variant {
                    label: format!("PostgreSQL, {how}, {}", if trx { "10 per transaction" } else { "autocommit" }),
                    system: "PostgreSQL",
                    settings: settings(&[
                        ("protocol", if prepared { "extended (prepared)" } else { "simple" }),
                        ("autocommit", if trx { "off (10 statements per transaction)" } else { "on" }),
                        ("isolation", if trx { "REPEATABLE READ" } else { "-" }),
                    ]),
                    apply: Box::new(|| Ok(vec![])),
                    make: Box::new(move |t| {
                        let mut conn = pg.client()?;
                        if trx {
                            conn.batch_execute(
                                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                            )
                            .map_err(|e| crate::target::pg_text(&e))?;
                        }
                        let prepared = match prepared {
                            true => Some(
                                conn.prepare("SELECT c FROM sb WHERE id = $1")
                                    .map_err(|e| crate::target::pg_text(&e))?,
                            ),
                            false => None,
                        };
                        Ok(Box::new(PgPoint { conn, prepared, rand: Rand::new(t), rows, in_trx: trx.then_some(0) }))
                    }),
                    pid: pg.pid,
                    counter: None,
                    profiled: false,
                });
            }
        }
    }
    Ok(v)
}
