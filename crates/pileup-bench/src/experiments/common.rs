//! What the experiments share: a curve's variant and what it needs,
//! errors read as "repeat" or "the server is gone", the tables of the
//! row experiments, and small helpers.

use std::any::Any;
use std::collections::BTreeMap;

use mysql::prelude::Queryable;

use crate::drive::{Client, OpError};
use crate::error::{ExperimentError, Result};
use crate::options::Options;
use crate::target::{pg_text, Maria, Pg, SCHEMA};

/// Something put back when dropped (a global setting).
pub(crate) type Guard = Box<dyn Any>;

/// Makes the client of thread N, or says why it cannot.
pub(crate) type MakeClient<'a> = dyn Fn(u32) -> std::result::Result<Box<dyn Client>, String> + Sync + 'a;

/// Global settings of a variant: name, value.
pub(crate) type Globals = &'static [(&'static str, &'static str)];

/// One curve to measure.
pub(crate) struct Variant<'a> {
    pub label: String,
    /// `MariaDB` or `PostgreSQL`.
    pub system: &'static str,
    /// The settings this curve runs with, for the report.
    pub settings: BTreeMap<String, String>,
    /// Put the settings in place; dropping what it returns puts them back.
    pub apply: Box<dyn Fn() -> Result<Vec<Guard>> + 'a>,
    /// A client for thread N.
    pub make: Box<MakeClient<'a>>,
    /// The server's process, for its CPU.
    pub pid: Option<i32>,
    /// A MariaDB status counter whose rate is reported beside.
    pub counter: Option<&'static str>,
    /// The curve profiled at its knee.
    pub profiled: bool,
}

/// What an experiment needs from its servers, made once.
pub(crate) struct Ctx<'a> {
    pub maria: &'a Maria,
    pub pg: Option<&'a Pg>,
    pub o: &'a Options,
    /// What an experiment could not measure on these servers, and why.
    pub notes: std::cell::RefCell<Vec<String>>,
}

/// A MariaDB error that a client repeats past (a deadlock, a lock wait
/// timeout, too many connections, a snapshot conflict under
/// `innodb_snapshot_isolation`), or one that ends the run: the server or
/// the connection gone, or a statement the server refuses (a privilege, a
/// read-only server), which would fail the same way every time.
pub(crate) fn maria_error(e: mysql::Error) -> OpError {
    match &e {
        mysql::Error::MySqlError(m) if matches!(m.code, 1205 | 1213 | 1040 | 1020) => OpError::Retry(m.message.clone()),
        mysql::Error::MySqlError(m) if !matches!(m.code, 1927 | 2006 | 2013 | 1053 | 4031) => {
            OpError::Gone(format!("the server refused the experiment's statement (error {}): {}", m.code, m.message))
        }
        _ => OpError::Gone(pileup_conn::error_text(&e)),
    }
}

/// A PostgreSQL error that a client repeats past (a serialization failure,
/// a deadlock, a lock not available, too many connections), or one that
/// ends the run.
pub(crate) fn pg_error(e: postgres::Error) -> OpError {
    use postgres::error::SqlState;
    let transient = [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::TOO_MANY_CONNECTIONS,
    ];
    match e.as_db_error() {
        Some(d) if !e.is_closed() && transient.contains(d.code()) => OpError::Retry(pg_text(&e)),
        Some(d) if !e.is_closed() => OpError::Gone(format!(
            "the server refused the experiment's statement ({}): {}",
            d.code().code(),
            d.message()
        )),
        _ => OpError::Gone(pg_text(&e)),
    }
}

/// Run one MariaDB statement (no result) as a client's operation.
pub(crate) struct MariaStatement {
    pub conn: mysql::Conn,
    pub sql: String,
}

impl Client for MariaStatement {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        self.conn.query_drop(&self.sql).map_err(maria_error)
    }
}

/// Make the experiments' schema afresh.
pub(crate) fn fresh_schema(c: &mut mysql::Conn) -> Result<()> {
    c.query_drop(format!("DROP DATABASE IF EXISTS {SCHEMA}"))
        .and_then(|_| c.query_drop(format!("CREATE DATABASE {SCHEMA}")))
        .map_err(crate::target::sql("making the experiments' schema"))
}

/// Make `rows` rows of the point-select/range table (`id` 1..=rows), in
/// MariaDB and, given one, PostgreSQL.
pub(crate) fn rows_table(ctx: &Ctx) -> Result<()> {
    let mut c = ctx.maria.admin()?;
    fresh_schema(&mut c)?;
    c.query_drop(format!(
        "CREATE TABLE {SCHEMA}.sb (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY (k)) ENGINE=InnoDB"
    ))
    .map_err(crate::target::sql("making the table"))?;
    let mut id = 0;
    while id < ctx.o.rows {
        let n = (ctx.o.rows - id).min(5000);
        let values: Vec<String> = (id + 1..=id + n)
            .map(|i| format!("({i},{},'{:0>119}','{:0>59}')", i.wrapping_mul(2654435761) % ctx.o.rows.max(1), i, i))
            .collect();
        c.query_drop(format!("INSERT INTO {SCHEMA}.sb VALUES {}", values.join(",")))
            .map_err(crate::target::sql("filling the table"))?;
        id += n;
    }
    if let Some(pg) = ctx.pg {
        let mut p = pg.admin()?;
        p.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};
             CREATE TABLE {SCHEMA}.sb (id INT NOT NULL PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL);
             INSERT INTO {SCHEMA}.sb SELECT i, (i::bigint * 2654435761 % {rows})::int, lpad(i::text, 119, '0'), lpad(i::text, 59, '0') FROM generate_series(1, {rows}) i;
             CREATE INDEX ON {SCHEMA}.sb (k)",
            rows = ctx.o.rows.max(1)
        ))
        .and_then(|_| p.batch_execute(&format!("VACUUM ANALYZE {SCHEMA}.sb")))
        .map_err(|e| ExperimentError::Postgres(format!("making the table: {}", pg_text(&e))))?;
    }
    Ok(())
}

/// A small, fast random number source for the clients (xorshift): which
/// row or table an operation touches is not worth a dependency.
pub(crate) struct Rand(u64);

impl Rand {
    pub fn new(seed: u32) -> Rand {
        Rand(0x9E37_79B9_7F4A_7C15 ^ (seed as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9))
    }

    /// 1..=n.
    pub fn upto(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as u32 + 1
    }
}

/// `name=value` pairs for a report.
pub(crate) fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Set MariaDB globals for a variant; they are put back when the guards drop.
pub(crate) fn globals<'a>(m: &'a Maria, pairs: &[(&str, &str)]) -> Box<dyn Fn() -> Result<Vec<Guard>> + 'a> {
    let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Box::new(move || {
        let mut g: Vec<Guard> = vec![];
        for (k, v) in &pairs {
            g.push(Box::new(m.set_global(k, v)?));
        }
        Ok(g)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_rows_stay_in_range() {
        let mut r = Rand::new(3);
        let v: Vec<u32> = (0..10_000).map(|_| r.upto(100)).collect();
        assert!(v.iter().all(|&x| (1..=100).contains(&x)));
        assert!(v.contains(&1) && v.contains(&100));
    }

    #[test]
    fn only_transient_errors_are_repeated() {
        let e = |code: u16, message: &str| {
            maria_error(mysql::Error::MySqlError(mysql::MySqlError {
                state: "HY000".into(),
                message: message.into(),
                code,
            }))
        };
        assert!(matches!(e(1213, "Deadlock found"), OpError::Retry(_)));
        assert!(matches!(e(1205, "Lock wait timeout exceeded"), OpError::Retry(_)));
        assert!(matches!(e(2013, "Lost connection"), OpError::Gone(_)));
        // A statement the server refuses fails the same way every time:
        // the run stops and says why, rather than counting errors.
        match e(1142, "UPDATE command denied to user 'bench'") {
            OpError::Gone(why) => assert_eq!(
                why,
                "the server refused the experiment's statement (error 1142): UPDATE command denied to user 'bench'"
            ),
            OpError::Retry(_) => panic!("a refused statement was repeated"),
        }
    }
}
