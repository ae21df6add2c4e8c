//! Reading one chunk: its SELECT (columns, key range, `--where`) and its
//! rows streamed as `LOAD DATA` text, counted and hashed. The dump writes
//! the text to the chunk's file; `load --verify` reads the loaded table the
//! same way and compares the counts and hashes.
//!
//! The hash is order-free (the wrapping sum of each row's CRC-32), so a
//! table read back in another order (no key) still matches.

use crate::error::{Ctx, Result};
use mysql::prelude::Queryable;

use crate::chunk::Range;
use crate::manifest::{quote, Table};

/// The SELECT of one chunk of `t` in database `db`.
pub fn select(t: &Table, db: &str, r: &Range, where_: Option<&str>) -> String {
    let cols = t.columns.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ");
    let mut conds = vec![];
    if let Some(c) = t.chunk_key.as_ref().and_then(|k| r.condition(&quote(k))) {
        conds.push(c);
    }
    if let Some(wh) = where_ {
        conds.push(format!("({wh})"));
    }
    let mut sql = format!("SELECT {cols} FROM {}.{}", quote(db), quote(&t.name));
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    sql
}

/// Rows read and their order-free hash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub rows: u64,
    pub row_sum: u64,
}

/// Run `sql` (binary protocol: values as stored) and hand its rows as
/// `LOAD DATA` text to `sink` in blocks of about 64 KiB.
pub fn stream(w: &mut mysql::Conn, sql: &str, what: &str, sink: impl FnMut(&[u8]) -> Result<()>) -> Result<Tally> {
    stream_as(w, sql, what, crate::tsv::row, sink)
}

/// [`stream`] with another text for each row (`encode` appends one row);
/// the hash is of that text.
pub fn stream_as(
    w: &mut mysql::Conn,
    sql: &str,
    what: &str,
    mut encode: impl FnMut(&mut Vec<u8>, &[mysql::Value]),
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<Tally> {
    let mut t = Tally::default();
    let mut buf = Vec::with_capacity(1 << 17);
    let result = w.exec_iter(sql, ()).with_ctx(|| format!("reading {what}"))?;
    for row in result {
        let row = row.with_ctx(|| format!("reading {what}"))?;
        let start = buf.len();
        encode(&mut buf, &row.unwrap());
        t.row_sum = t.row_sum.wrapping_add(u64::from(crc32fast::hash(&buf[start..])));
        t.rows += 1;
        if buf.len() >= 1 << 16 {
            sink(&buf)?;
            buf.clear();
        }
    }
    sink(&buf)?;
    Ok(t)
}
