//! Three planted read problems, each with a signal of its own in the slow
//! log, for the tests and benchmark of `pileup digest`:
//! * `miss`: a lookup on an unindexed column reads the whole table for one
//!   row (rows examined per row sent);
//! * `dive`: indexes on (a), (b), (a,b) and a 999-value IN list on a: the
//!   optimizer dives into (a) and (a,b) for every value, then reads by b
//!   (time spent choosing the plan);
//! * `spill`: a sort in a 16 KB sort buffer spills to disk (merge passes).

use crate::error::Result;
use mysql::prelude::Queryable;

/// Make the `planted` database and its three tables.
pub fn make(c: &mut mysql::Conn) -> Result<()> {
    c.query_drop("CREATE DATABASE IF NOT EXISTS planted")?;
    c.query_drop("USE planted")?;
    for s in [
        "CREATE TABLE miss (id INT PRIMARY KEY AUTO_INCREMENT, k INT NOT NULL, pad CHAR(40) NOT NULL)",
        "INSERT INTO miss (k, pad) SELECT seq, 'p' FROM seq_1_to_10000",
        "CREATE TABLE dive (id INT PRIMARY KEY AUTO_INCREMENT, a INT, b INT, c CHAR(20), KEY (a), KEY (b), KEY ab (a, b))",
        "INSERT INTO dive (a, b, c) SELECT seq % 1000, seq % 10007, 'x' FROM seq_1_to_200000",
        "ANALYZE TABLE dive",
        "CREATE TABLE spill (id INT PRIMARY KEY AUTO_INCREMENT, pad VARCHAR(200) NOT NULL)",
        "INSERT INTO spill (pad) SELECT md5(seq) FROM seq_1_to_20000",
    ] {
        c.query_drop(s)?;
    }
    Ok(())
}

/// Run each problem once, with literals varied by round `r`, on a
/// connection whose default database is `planted`.
pub fn round(c: &mut mysql::Conn, r: u32) -> Result<()> {
    let in_list: String = (1..=999).map(|v| v.to_string()).collect::<Vec<_>>().join(",");
    let _: Vec<(i32,)> = c.query(format!("SELECT id FROM miss WHERE k = {}", 17 + r * 31))?;
    let _: Vec<(i32,)> = c.query(format!("SELECT id FROM dive WHERE a IN ({in_list}) AND b > {}", 10000 + r % 3))?;
    c.query_drop("SET SESSION sort_buffer_size = 16384")?;
    let _: Vec<(i32, String)> = c.query(format!("SELECT id, pad FROM spill WHERE id > {r} ORDER BY pad"))?;
    c.query_drop("SET SESSION sort_buffer_size = DEFAULT")?;
    Ok(())
}
