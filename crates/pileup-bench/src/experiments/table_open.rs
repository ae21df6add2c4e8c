//! Table opens: many small InnoDB tables read by the clients in random
//! order through a table cache far smaller than the tables, so almost
//! every statement opens a table (`Opened_tables` a second is reported
//! beside); the same with the engine-independent statistics left out of
//! the open path (`use_stat_tables=NEVER`: their tables are not read when
//! a table's share is loaded); and with a cache that holds every table.

use mysql::prelude::Queryable;

use super::common::{fresh_schema, globals, maria_error, settings, Ctx, Rand, Variant};
use crate::drive::{Client, OpError};
use crate::error::Result;
use crate::target::SCHEMA;

struct Reader {
    conn: mysql::Conn,
    rand: Rand,
    tables: u32,
}

impl Client for Reader {
    fn op(&mut self) -> std::result::Result<(), OpError> {
        let t = self.rand.upto(self.tables);
        self.conn.query_drop(format!("SELECT id FROM t{t} WHERE id = 1")).map_err(maria_error)
    }
}

/// The small cache: ten tables, far fewer than the experiment reads.
const SMALL_CACHE: &str = "10";

pub(super) fn setup<'a>(ctx: &'a Ctx) -> Result<Vec<Variant<'a>>> {
    let m = ctx.maria;
    let tables = ctx.o.tables.max(1);
    let mut c = m.admin()?;
    fresh_schema(&mut c)?;
    for t in 1..=tables {
        c.query_drop(format!(
            "CREATE TABLE {SCHEMA}.t{t} (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB; INSERT INTO {SCHEMA}.t{t} VALUES (1)"
        ))
        .map_err(crate::target::sql("making the tables"))?;
    }
    let big = (tables + 400).to_string();
    let variant = |cache: String, stats: &str, label: String, profiled: bool| {
        // 400 is the definition cache's smallest.
        let defs = cache.parse::<u32>().unwrap_or(400).max(400).to_string();
        Variant {
            label,
            system: "MariaDB",
            settings: settings(&[
                ("table_open_cache", &cache),
                ("use_stat_tables", stats),
                ("tables", &tables.to_string()),
            ]),
            apply: globals(
                m,
                &[("table_open_cache", &cache), ("table_definition_cache", &defs), ("use_stat_tables", stats)],
            ),
            make: Box::new(move |t| Ok(Box::new(Reader { conn: m.client()?, rand: Rand::new(t), tables }))),
            pid: m.pid,
            counter: Some("Opened_tables"),
            profiled,
        }
    };
    // The server's own default, read back so the curve states it.
    let default_stats: String = c
        .query_first("SELECT @@GLOBAL.use_stat_tables")
        .map_err(crate::target::sql("reading use_stat_tables"))?
        .unwrap_or_else(|| "PREFERABLY_FOR_QUERIES".into());
    Ok(vec![
        variant(SMALL_CACHE.into(), &default_stats, format!("{tables} tables, table_open_cache={SMALL_CACHE}"), true),
        variant(
            SMALL_CACHE.into(),
            "NEVER",
            format!("{tables} tables, table_open_cache={SMALL_CACHE}, statistics not read (use_stat_tables=NEVER)"),
            true,
        ),
        variant(
            big.clone(),
            &default_stats,
            format!("{tables} tables, every table cached (table_open_cache={big})"),
            false,
        ),
    ])
}
