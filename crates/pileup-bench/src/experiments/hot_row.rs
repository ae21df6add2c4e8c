//! The hot row: one row updated by every client (autocommit), with
//! InnoDB's deadlock detection on and off. Each waiting update queues on
//! the row's lock; with detection on, each wait also searches the waits-for
//! graph.

use mysql::prelude::Queryable;

use super::common::{fresh_schema, globals, settings, Ctx, MariaStatement, Variant};
use crate::error::Result;
use crate::target::SCHEMA;

pub(super) fn setup<'a>(ctx: &'a Ctx) -> Result<Vec<Variant<'a>>> {
    let m = ctx.maria;
    let mut c = m.admin()?;
    fresh_schema(&mut c)?;
    c.query_drop(format!(
        "CREATE TABLE {SCHEMA}.hot (id INT NOT NULL PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB; INSERT INTO {SCHEMA}.hot VALUES (1, 0)"
    ))
    .map_err(crate::target::sql("making the hot row"))?;
    let variant = |detect: &'static str, profiled: bool| Variant {
        label: format!("deadlock detection {}", if detect == "ON" { "on" } else { "off" }),
        system: "MariaDB",
        settings: settings(&[("innodb_deadlock_detect", detect)]),
        apply: globals(
            m,
            if detect == "ON" { &[("innodb_deadlock_detect", "ON")] } else { &[("innodb_deadlock_detect", "OFF")] },
        ),
        make: Box::new(move |_| {
            let mut conn = m.client()?;
            // A wait on the hot row may be long at many threads: no client gives up on it.
            conn.query_drop("SET SESSION innodb_lock_wait_timeout = 600").map_err(|e| pileup_conn::error_text(&e))?;
            Ok(Box::new(MariaStatement { conn, sql: "UPDATE hot SET n = n + 1 WHERE id = 1".into() }))
        }),
        pid: m.pid,
        counter: None,
        profiled,
    };
    Ok(vec![variant("ON", true), variant("OFF", false)])
}
