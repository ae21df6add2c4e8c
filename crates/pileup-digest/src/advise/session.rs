//! The session the advisor runs statements on: each run inside a
//! read-only transaction, with a variant's settings for that run only.

use std::hash::{Hash, Hasher};
use std::time::Instant;

use mysql::prelude::Queryable;

/// Rows' checksum: order-independent unless the statement orders them.
fn checksum(rows: &[mysql::Row], ordered: bool) -> u64 {
    let mut hs: Vec<u64> = rows
        .iter()
        .map(|r| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            for v in r.clone().unwrap() {
                v.as_sql(false).hash(&mut h);
            }
            h.finish()
        })
        .collect();
    if !ordered {
        hs.sort_unstable();
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hs.hash(&mut h);
    h.finish()
}

/// Does the statement order its rows (so a variant must return them in the
/// same order)?
pub fn is_ordered(sql: &str) -> bool {
    let mut fp = Vec::new();
    pileup_sql::fingerprint(sql.as_bytes(), &mut fp);
    String::from_utf8_lossy(&fp).contains(" order by ")
}

/// One timed run: milliseconds, rows and their checksum.
pub struct Run {
    pub ms: f64,
    pub rows: usize,
    pub checksum: u64,
}

/// A session and the statements run on it.
pub struct Session {
    pub conn: mysql::Conn,
}

impl Session {
    /// In a read-only transaction, with `setup` applied to the session for
    /// this run only: whatever fails, the transaction is rolled back and
    /// the settings put back.
    fn within<T>(
        &mut self,
        setup: &[String],
        f: impl FnOnce(&mut mysql::Conn) -> Result<T, String>,
    ) -> Result<T, String> {
        let r =
            self.conn.query_drop("START TRANSACTION READ ONLY").map_err(|e| pileup_conn::plain(&e)).and_then(|()| {
                for s in setup {
                    self.conn.query_drop(s).map_err(|e| pileup_conn::plain(&e))?;
                }
                f(&mut self.conn)
            });
        let _ = self.conn.query_drop("ROLLBACK");
        self.reset(setup);
        r
    }

    /// One timed run (the statement and the fetch of its rows).
    pub fn run(&mut self, setup: &[String], sql: &str, ordered: bool) -> Result<Run, String> {
        self.within(setup, |c| {
            let t0 = Instant::now();
            let rows: Vec<mysql::Row> = c.query(sql).map_err(|e| pileup_conn::plain(&e))?;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            Ok(Run { ms, rows: rows.len(), checksum: checksum(&rows, ordered) })
        })
    }

    /// Undo a variant's session settings.
    fn reset(&mut self, setup: &[String]) {
        for s in setup {
            if let Some(var) = s.strip_prefix("SET SESSION ").and_then(|r| r.split_once(" = ")).map(|(v, _)| v) {
                let _ = self.conn.query_drop(format!("SET SESSION {var} = DEFAULT"));
            }
        }
    }

    /// `EXPLAIN FORMAT=JSON` of a write, which EXPLAIN does not run, in a
    /// transaction rolled back all the same.
    pub fn explain_write(&mut self, sql: &str) -> Result<serde_json::Value, String> {
        let r = self.conn.query_drop("START TRANSACTION").map_err(|e| pileup_conn::plain(&e)).and_then(|()| {
            let r: Option<String> =
                self.conn.query_first(format!("EXPLAIN FORMAT=JSON {sql}")).map_err(|e| pileup_conn::plain(&e))?;
            r.ok_or_else(|| "EXPLAIN returned nothing".to_string())
        });
        let _ = self.conn.query_drop("ROLLBACK");
        serde_json::from_str(&r?).map_err(|e| format!("EXPLAIN FORMAT=JSON: {e}"))
    }

    /// `EXPLAIN FORMAT=JSON` (`analyze`: `ANALYZE FORMAT=JSON`, which runs
    /// the statement) under `setup`.
    pub fn explain(&mut self, setup: &[String], sql: &str, analyze: bool) -> Result<serde_json::Value, String> {
        let verb = if analyze { "ANALYZE" } else { "EXPLAIN" };
        let text = self.within(setup, |c| {
            let r: Option<String> =
                c.query_first(format!("{verb} FORMAT=JSON {sql}")).map_err(|e| pileup_conn::plain(&e))?;
            r.ok_or_else(|| format!("{verb} returned nothing"))
        })?;
        serde_json::from_str(&text).map_err(|e| format!("{verb} FORMAT=JSON: {e}"))
    }
}
