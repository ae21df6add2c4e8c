//! The data shapes, each in a database of its own on the one sandbox:
//! - `big`: one large table beside four small ones, measured twice: with
//!   a buffer pool that holds it (`fits`) and with one a quarter of its size
//!   (`beyond`), where the table is read from and written to the device;
//! - `many`: many small tables, where the per-table work (schema, files,
//!   statements) counts more than the rows.
//!
//! Each table has an integer primary key, a secondary index, text, a
//! datetime, a double and binary bytes, as an application's table does.

use anyhow::Result;
use mysql::prelude::Queryable;

/// A shape: its database, its tables with their rows, and the buffer pool
/// it is measured with.
#[derive(Debug, Clone)]
pub struct Shape {
    pub name: &'static str,
    pub db: String,
    pub tables: Vec<(String, u64)>,
    pub pool_mib: u64,
    /// What it is, in a line of the report.
    pub about: String,
}

impl Shape {
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.1).sum()
    }
}

/// The shapes asked for, at `scale` (1.0: a 4,000,000-row table of about
/// 1.1 GB beside four of 250,000; 400 tables of 5,000 rows).
pub fn shapes(names: &[String], scale: f64) -> Result<Vec<Shape>> {
    let n = |rows: f64| ((rows * scale).round() as u64).max(1);
    let big_tables = || {
        let mut t = vec![("big".to_string(), n(4_000_000.0))];
        t.extend((1..=4).map(|i| (format!("t{i}"), n(250_000.0))));
        t
    };
    // About 280 bytes a row with the index, in InnoDB.
    let big_mib = (n(5_000_000.0) * 280) >> 20;
    names
        .iter()
        .map(|s| {
            Ok(match s.as_str() {
                "fits" => Shape {
                    name: "fits",
                    db: "bench_big".into(),
                    tables: big_tables(),
                    pool_mib: (big_mib * 2).max(256),
                    about: "one large table beside four small ones, in a buffer pool that holds them".into(),
                },
                "beyond" => Shape {
                    name: "beyond",
                    db: "bench_big".into(),
                    tables: big_tables(),
                    pool_mib: (big_mib / 4).max(128),
                    about: "the same tables with a buffer pool a quarter of their size: the large table is read \
                            from and written to the device"
                        .into(),
                },
                "many" => Shape {
                    name: "many",
                    db: "bench_many".into(),
                    tables: (1..=400).map(|i| (format!("m{i:03}"), n(5_000.0))).collect(),
                    pool_mib: 1024,
                    about: "400 small tables".into(),
                },
                other => anyhow::bail!("--shapes takes fits, beyond and many, not {other}"),
            })
        })
        .collect()
}

/// Fill the shape's database unless it holds its tables already (a run
/// with --reuse keeps them).
pub fn fill(c: &mut mysql::Conn, s: &Shape) -> Result<()> {
    let have: u64 =
        c.exec_first("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", (&s.db,))?.unwrap_or(0);
    if have == s.tables.len() as u64 {
        return Ok(());
    }
    eprintln!("== filling {}: {} rows in {} tables", s.db, s.rows(), s.tables.len());
    c.query_drop(format!("DROP DATABASE IF EXISTS `{}`", s.db))?;
    c.query_drop(format!("CREATE DATABASE `{}`", s.db))?;
    c.query_drop(format!("USE `{}`", s.db))?;
    for (t, n) in &s.tables {
        c.query_drop(format!(
            "CREATE TABLE `{t}` (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, \
             d DATETIME NOT NULL, f DOUBLE, b VARBINARY(32), KEY (k))"
        ))?;
        // In statements of at most 500,000 rows each.
        for from in (1..=*n).step_by(500_000) {
            let to = (from + 499_999).min(*n);
            c.query_drop(format!(
                "INSERT INTO `{t}` SELECT seq, seq * 7919 % {n}, CONCAT(MD5(seq), MD5(seq + 1), MD5(seq + 2)), \
                 CONCAT(SHA1(seq), 'x'), '2020-01-01' + INTERVAL seq SECOND, seq / 7, UNHEX(MD5(seq)) FROM seq_{from}_to_{to}"
            ))?;
        }
    }
    let names: Vec<String> = s.tables.iter().map(|(t, _)| format!("`{}`.`{t}`", s.db)).collect();
    for batch in names.chunks(50) {
        c.query_drop(format!("ANALYZE TABLE {}", batch.join(", ")))?;
    }
    Ok(())
}

/// The shape's size as the report counts a GB: the source's
/// `data_length + index_length`, in bytes.
pub fn bytes(c: &mut mysql::Conn, s: &Shape) -> Result<u64> {
    Ok(c.exec_first(
        "SELECT CAST(SUM(DATA_LENGTH + INDEX_LENGTH) AS UNSIGNED) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
        (&s.db,),
    )?
    .unwrap_or(0))
}

/// Each table's CHECKSUM TABLE in `db`, in the shape's order.
pub fn checksums(c: &mut mysql::Conn, db: &str, s: &Shape) -> Result<Vec<Option<u64>>> {
    s.tables
        .iter()
        .map(|(t, _)| {
            let r: Option<(String, Option<u64>)> = c.query_first(format!("CHECKSUM TABLE `{db}`.`{t}`"))?;
            Ok(r.and_then(|r| r.1))
        })
        .collect()
}

/// Set the buffer pool's size and wait until the server has resized it
/// (MariaDB 10.11 resizes within the statement; older servers in the
/// background, saying so in their resize status).
pub fn pool(c: &mut mysql::Conn, mib: u64) -> Result<()> {
    c.query_drop(format!("SET GLOBAL innodb_buffer_pool_size = {}", mib << 20))?;
    let t = std::time::Instant::now();
    loop {
        let size: u64 = c.query_first("SELECT @@innodb_buffer_pool_size")?.unwrap_or(0);
        let st: Option<(String, String)> =
            c.query_first("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_resize_status'")?;
        let busy = st.is_some_and(|(_, v)| v.to_ascii_lowercase().contains("resizing"));
        if size == mib << 20 && !busy {
            return Ok(());
        }
        if t.elapsed().as_secs() > 300 {
            anyhow::bail!("the buffer pool is not {mib} MiB after 5 minutes ({size} bytes)");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
