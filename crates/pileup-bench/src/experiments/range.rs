//! Range reads: 100 consecutive rows by primary key, returned to the
//! client or summed on the server, with InnoDB's thread concurrency
//! unlimited (0) and limited; PostgreSQL the same two ways.

use mysql::prelude::Queryable;

use super::common::{globals, maria_error, pg_error, rows_table, settings, Ctx, Rand, Variant};
use crate::drive::{Client, OpError};
use crate::error::Result;

/// Rows a range reads.
const RANGE: u32 = 100;

struct MariaRange {
    conn: mysql::Conn,
    stmt: mysql::Statement,
    rand: Rand,
    rows: u32,
}

impl Client for MariaRange {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        let from = self.rand.upto(self.rows.saturating_sub(RANGE).max(1));
        let rows: Vec<mysql::Row> = self.conn.exec(&self.stmt, (from, from + RANGE - 1)).map_err(maria_error)?;
        drop(rows);
        Ok(())
    }
}

struct PgRange {
    conn: postgres::Client,
    stmt: postgres::Statement,
    rand: Rand,
    rows: u32,
}

impl Client for PgRange {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        let from = self.rand.upto(self.rows.saturating_sub(RANGE).max(1)) as i32;
        self.conn.query(&self.stmt, &[&from, &(from + RANGE as i32 - 1)]).map(drop).map_err(pg_error)
    }
}

const DATA: &str = "SELECT c FROM sb WHERE id BETWEEN ? AND ?";
const SUM: &str = "SELECT SUM(k) FROM sb WHERE id BETWEEN ? AND ?";

pub(super) fn setup<'a>(ctx: &'a Ctx) -> Result<Vec<Variant<'a>>> {
    rows_table(ctx)?;
    let m = ctx.maria;
    let rows = ctx.o.rows.max(RANGE + 1);
    let mut v = vec![];
    let limits = m.has_variable("innodb_thread_concurrency")?;
    if !limits {
        ctx.notes.borrow_mut().push(format!(
            "{} has no innodb_thread_concurrency (MariaDB removed it in 10.6; InnoDB no longer queues threads at its entry): the range curves run without such a limit.",
            m.version
        ));
    }
    let mut cases: Vec<(&str, &'static str, Option<&'static str>, bool)> =
        vec![("rows returned", DATA, Some("0"), true), ("summed", SUM, Some("0"), false)];
    if limits {
        cases.push(("rows returned", DATA, Some(crate::name::THREAD_CONCURRENCY_LIMIT), false));
    } else {
        cases.iter_mut().for_each(|c| c.2 = None);
    }
    for (what, sql, icc, profiled) in cases {
        let pairs: &'static [(&'static str, &'static str)] = match icc {
            None => &[],
            Some("0") => &[("innodb_thread_concurrency", "0")],
            Some(_) => &[("innodb_thread_concurrency", crate::name::THREAD_CONCURRENCY_LIMIT)],
        };
        let mut set = settings(&[("rows per range", "100")]);
        let mut label = format!("MariaDB, {what}");
        if let Some(icc) = icc {
            set.insert("innodb_thread_concurrency".into(), icc.into());
            label.push_str(&format!(", innodb_thread_concurrency={icc}"));
        }
        v.push(Variant {
            label,
            system: "MariaDB",
            settings: set,
            apply: globals(m, pairs),
            make: Box::new(move |t| {
                let mut conn = m.client()?;
                let stmt = conn.prep(sql).map_err(|e| pileup_conn::error_text(&e))?;
                Ok(Box::new(MariaRange { conn, stmt, rand: Rand::new(t), rows }))
            }),
            pid: m.pid,
            counter: None,
            profiled,
        });
    }
    if let Some(pg) = ctx.pg {
        for (what, sql) in [("rows returned", DATA), ("summed", SUM)] {
            let sql = sql.replacen('?', "$1", 1).replacen('?', "$2", 1);
            v.push(Variant {
                label: format!("PostgreSQL, {what}"),
                system: "PostgreSQL",
                settings: settings(&[("rows per range", "100")]),
                apply: Box::new(|| Ok(vec![])),
                make: Box::new(move |t| {
                    let mut conn = pg.client()?;
                    let stmt = conn.prepare(&sql).map_err(|e| crate::target::pg_text(&e))?;
                    Ok(Box::new(PgRange { conn, stmt, rand: Rand::new(t), rows }))
                }),
                pid: pg.pid,
                counter: None,
                profiled: false,
            });
        }
    }
    Ok(v)
}
