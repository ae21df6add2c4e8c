//! Event bodies: what each event type carries, decoded without copying.

use crate::error::DecodeError;
use crate::event::{et, Format, HEADER_LEN};
use crate::value::{self, ColumnType, Value};

/// A cursor over an event body.
#[derive(Clone, Copy)]
pub struct Cur<'a> {
    pub b: &'a [u8],
    pub what: &'static str,
}

impl<'a> Cur<'a> {
    pub fn new(b: &'a [u8], what: &'static str) -> Self {
        Cur { b, what }
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError::Short(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub fn uint(&mut self, n: usize) -> Result<u64, DecodeError> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64))
    }
    /// Length-encoded integer (`net_field_length`).
    pub fn lenenc(&mut self) -> Result<u64, DecodeError> {
        match self.u8()? {
            x @ 0..=250 => Ok(x as u64),
            252 => self.uint(2),
            253 => self.uint(3),
            254 => self.uint(8),
            x => Err(DecodeError::Bad(format!("bad length-encoded integer prefix {x:#x} in {}", self.what))),
        }
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.b)
    }
}

/// QUERY: a statement (DDL, statement-based DML, BEGIN/COMMIT).
#[derive(Debug, Clone, PartialEq)]
pub struct Query<'a> {
    pub thread_id: u32,
    pub exec_time: u32,
    pub error_code: u16,
    /// Default database (`USE db`) when the statement ran.
    pub db: &'a [u8],
    /// The statement (inflated for MariaDB's QUERY_COMPRESSED).
    pub sql: std::borrow::Cow<'a, [u8]>,
}

pub fn query<'a>(f: &Format, body: &'a [u8]) -> Result<Query<'a>, DecodeError> {
    let mut c = Cur::new(body, "query event");
    let ph = f.post_header_len(et::QUERY).max(11);
    let post = c.take(ph)?;
    let thread_id = u32::from_le_bytes(post[0..4].try_into().unwrap());
    let exec_time = u32::from_le_bytes(post[4..8].try_into().unwrap());
    let db_len = post[8] as usize;
    let error_code = u16::from_le_bytes([post[9], post[10]]);
    let status_len = if ph >= 13 { u16::from_le_bytes([post[11], post[12]]) as usize } else { 0 };
    c.take(status_len)?;
    let db = c.take(db_len)?;
    c.take(1)?; // NUL after the database name
    Ok(Query { thread_id, exec_time, error_code, db, sql: std::borrow::Cow::Borrowed(c.rest()) })
}

/// ROTATE: the next file and where in it to continue.
pub fn rotate(body: &[u8]) -> Result<(u64, &[u8]), DecodeError> {
    let mut c = Cur::new(body, "rotate event");
    let pos = c.uint(8)?;
    Ok((pos, c.rest()))
}

/// MariaDB GTID: starts a transaction (event group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MariaGtid {
    pub seq_no: u64,
    pub domain_id: u32,
    pub flags: u8,
    pub commit_id: Option<u64>,
}

impl MariaGtid {
    /// A statement with no BEGIN/COMMIT around it (DDL, non-transactional).
    pub fn standalone(&self) -> bool {
        self.flags & 1 != 0
    }
}

pub fn maria_gtid(body: &[u8]) -> Result<MariaGtid, DecodeError> {
    let mut c = Cur::new(body, "GTID event");
    let seq_no = c.uint(8)?;
    let domain_id = c.uint(4)? as u32;
    let flags = c.u8()?;
    let commit_id = if flags & 2 != 0 { Some(c.uint(8)?) } else { None };
    Ok(MariaGtid { seq_no, domain_id, flags, commit_id })
}

/// MariaDB GTID_LIST: the replication state at the start of a binlog.
pub fn maria_gtid_list(body: &[u8]) -> Result<Vec<(u32, u32, u64)>, DecodeError> {
    let mut c = Cur::new(body, "GTID list event");
    let n = (c.uint(4)? & 0x0fff_ffff) as usize;
    let mut v = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        v.push((c.uint(4)? as u32, c.uint(4)? as u32, c.uint(8)?));
    }
    Ok(v)
}

/// MySQL GTID: `uuid:gno`.
pub fn mysql_gtid(body: &[u8]) -> Result<(String, u64), DecodeError> {
    let mut c = Cur::new(body, "GTID event");
    c.u8()?; // flags
    let sid = c.take(16)?;
    let gno = c.uint(8)?;
    let h = |r: std::ops::Range<usize>| sid[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    Ok((format!("{}-{}-{}-{}-{}", h(0..4), h(4..6), h(6..8), h(8..10), h(10..16)), gno))
}

/// TABLE_MAP: which table the following row events change, and its columns' types.
#[derive(Debug, Clone, PartialEq)]
pub struct TableMap {
    pub table_id: u64,
    pub schema: String,
    pub table: String,
    pub columns: Vec<ColumnType>,
    /// Column may be NULL (bit per column).
    pub nullable: Vec<bool>,
    /// From the optional metadata (binlog_row_metadata), when present.
    pub unsigned: Vec<bool>,
    pub column_names: Vec<String>,
    pub primary_key: Vec<usize>,
}

fn table_id(c: &mut Cur, post_len: usize) -> Result<u64, DecodeError> {
    // 6-byte table ids since 5.1; 4 bytes when the post-header is 6 long.
    if post_len == 6 {
        c.uint(4)
    } else {
        c.uint(6)
    }
}

pub fn table_map(f: &Format, body: &[u8]) -> Result<TableMap, DecodeError> {
    let mut c = Cur::new(body, "table map event");
    let ph = f.post_header_len(et::TABLE_MAP);
    let id = table_id(&mut c, ph)?;
    c.take(2)?; // flags
    let n = c.u8()? as usize;
    let schema = String::from_utf8_lossy(c.take(n)?).into_owned();
    c.take(1)?;
    let n = c.u8()? as usize;
    let table = String::from_utf8_lossy(c.take(n)?).into_owned();
    c.take(1)?;
    let ncols = c.lenenc()? as usize;
    if ncols > 4096 {
        return Err(DecodeError::Bad(format!("{ncols} columns in a table map")));
    }
    let types = c.take(ncols)?;
    let meta_len = c.lenenc()? as usize;
    let meta = c.take(meta_len)?;
    let columns = value::parse_meta(types, meta)?;
    let nulls = c.take(ncols.div_ceil(8))?;
    let nullable = (0..ncols).map(|i| nulls[i / 8] & (1 << (i % 8)) != 0).collect();
    let mut tm = TableMap {
        table_id: id,
        schema,
        table,
        columns,
        nullable,
        unsigned: vec![false; ncols],
        column_names: vec![],
        primary_key: vec![],
    };
    // Optional metadata: type, length, value triples.
    while !c.b.is_empty() {
        let Ok(kind) = c.u8() else { break };
        let Ok(len) = c.lenenc() else { break };
        let Ok(v) = c.take(len as usize) else { break };
        let mut m = Cur::new(v, "table map optional metadata");
        match kind {
            1 => {
                // SIGNEDNESS: one bit per numeric column, most significant first.
                let mut bit = 0usize;
                for (i, col) in tm.columns.iter().enumerate() {
                    if is_numeric(col.code) {
                        tm.unsigned[i] = v.get(bit / 8).is_some_and(|b| b & (0x80 >> (bit % 8)) != 0);
                        bit += 1;
                    }
                }
            }
            4 => {
                // COLUMN_NAME
                while !m.b.is_empty() {
                    let n = m.lenenc()? as usize;
                    tm.column_names.push(String::from_utf8_lossy(m.take(n)?).into_owned());
                }
            }
            8 => {
                // SIMPLE_PRIMARY_KEY
                while !m.b.is_empty() {
                    tm.primary_key.push(m.lenenc()? as usize);
                }
            }
            9 => {
                // PRIMARY_KEY_WITH_PREFIX: (column, prefix length) pairs
                while !m.b.is_empty() {
                    tm.primary_key.push(m.lenenc()? as usize);
                    m.lenenc()?;
                }
            }
            _ => {}
        }
    }
    Ok(tm)
}

fn is_numeric(code: u8) -> bool {
    use value::ty::*;
    matches!(code, TINY | SHORT | INT24 | LONG | LONGLONG | FLOAT | DOUBLE | NEWDECIMAL | DECIMAL)
}

/// Which change a rows event makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsKind {
    Insert,
    Update,
    Delete,
}

impl RowsKind {
    /// The name printed for it (`insert`, `update`, `delete`).
    pub fn name(self) -> &'static str {
        match self {
            RowsKind::Insert => "insert",
            RowsKind::Update => "update",
            RowsKind::Delete => "delete",
        }
    }
}

impl serde::Serialize for RowsKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A WRITE/UPDATE/DELETE_ROWS event (v1, v2, or a decompressed MariaDB one).
#[derive(Debug, Clone, PartialEq)]
pub struct Rows<'a> {
    pub kind: RowsKind,
    pub table_id: u64,
    pub flags: u16,
    /// Columns in the table.
    pub width: usize,
    /// Columns present in the before image (UPDATE, DELETE) or the row (INSERT).
    pub present: &'a [u8],
    /// Columns present in the after image (UPDATE).
    pub present_after: Option<&'a [u8]>,
    /// The row images.
    pub data: &'a [u8],
}

/// Flag on the last rows event of a statement.
pub const ROWS_STMT_END: u16 = 1;

/// The uncompressed type of a rows event type, and its kind.
pub fn rows_kind(t: u8) -> Option<(RowsKind, bool)> {
    use et::*;
    let k = match t {
        WRITE_ROWS_V1 | WRITE_ROWS_V2 | WRITE_ROWS_COMPRESSED_V1 | WRITE_ROWS_COMPRESSED | WRITE_ROWS_V0 => {
            RowsKind::Insert
        }
        UPDATE_ROWS_V1
        | UPDATE_ROWS_V2
        | UPDATE_ROWS_COMPRESSED_V1
        | UPDATE_ROWS_COMPRESSED
        | UPDATE_ROWS_V0
        | PARTIAL_UPDATE_ROWS => RowsKind::Update,
        DELETE_ROWS_V1 | DELETE_ROWS_V2 | DELETE_ROWS_COMPRESSED_V1 | DELETE_ROWS_COMPRESSED | DELETE_ROWS_V0 => {
            RowsKind::Delete
        }
        _ => return None,
    };
    let compressed = (WRITE_ROWS_COMPRESSED_V1..=DELETE_ROWS_COMPRESSED).contains(&t);
    Some((k, compressed))
}

/// Parse a rows event body. For MariaDB's compressed rows events `scratch`
/// receives the inflated row data, which the result then borrows.
pub fn rows<'a>(f: &Format, t: u8, body: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<Rows<'a>, DecodeError> {
    let (kind, compressed) =
        rows_kind(t).ok_or_else(|| DecodeError::Bad(format!("event type {t} is not a rows event")))?;
    if t == et::PARTIAL_UPDATE_ROWS {
        return Err(DecodeError::Bad(
            "partial JSON updates (binlog_row_value_options=PARTIAL_JSON) are not decoded".into(),
        ));
    }
    let mut c = Cur::new(body, "rows event");
    let ph = f.post_header_len(t);
    let table_id = table_id(&mut c, ph)?;
    let flags = c.uint(2)? as u16;
    if ph == 10 {
        // v2: extra data, its length counting its own two bytes
        let extra = c.uint(2)? as usize;
        c.take(extra.saturating_sub(2))?;
    }
    let width = c.lenenc()? as usize;
    let present = c.take(width.div_ceil(8))?;
    let present_after = if kind == RowsKind::Update { Some(c.take(width.div_ceil(8))?) } else { None };
    let data = if compressed {
        *scratch = inflate(c.rest())?;
        &scratch[..]
    } else {
        c.rest()
    };
    Ok(Rows { kind, table_id, flags, width, present, present_after, data })
}

/// MariaDB's compressed event payload: a header byte `0x80 | algorithm << 4 |
/// n`, the uncompressed length in `n` big-endian bytes, then zlib data.
pub fn inflate(b: &[u8]) -> Result<Vec<u8>, DecodeError> {
    use std::io::Read;
    let h = *b.first().ok_or(DecodeError::Short("compressed payload"))?;
    if h & 0x80 == 0 || (h >> 4) & 7 != 0 {
        return Err(DecodeError::Bad(format!("unknown compression header {h:#04x}")));
    }
    let n = (h & 7) as usize;
    if !(1..=4).contains(&n) {
        return Err(DecodeError::Bad(format!("compressed length of {n} bytes")));
    }
    let len = b
        .get(1..1 + n)
        .ok_or(DecodeError::Short("compressed payload"))?
        .iter()
        .fold(0usize, |a, &x| (a << 8) | x as usize);
    if len > 1 << 30 {
        return Err(DecodeError::Bad(format!("compressed payload claims {len} bytes")));
    }
    let mut out = Vec::with_capacity(len);
    flate2::read::ZlibDecoder::new(&b[1 + n..])
        .take(len as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Bad(format!("zlib: {e}")))?;
    if out.len() != len {
        return Err(DecodeError::Bad(format!("compressed payload inflated to {} bytes, expected {len}", out.len())));
    }
    Ok(out)
}

/// A QUERY_COMPRESSED event, its statement inflated.
pub fn query_compressed<'a>(f: &Format, body: &'a [u8]) -> Result<Query<'a>, DecodeError> {
    let mut q = query(f, body)?;
    q.sql = std::borrow::Cow::Owned(inflate(&q.sql)?);
    Ok(q)
}

fn bit(bits: &[u8], i: usize) -> bool {
    bits[i / 8] & (1 << (i % 8)) != 0
}

/// Iterates over the row images of a rows event.
pub struct RowIter<'a, 't> {
    rows: Rows<'a>,
    tm: &'t TableMap,
    pos: usize,
}

impl<'a> Rows<'a> {
    pub fn iter<'t>(&self, tm: &'t TableMap) -> RowIter<'a, 't> {
        RowIter { rows: self.clone(), tm, pos: 0 }
    }
}

impl<'a> RowIter<'a, '_> {
    /// Decode one image into `out` (one entry per table column; columns not
    /// in the image are `None`).
    fn image(&mut self, present: &[u8], out: &mut Vec<Option<Value<'a>>>) -> Result<(), DecodeError> {
        // A corrupt width must not make every row cost (or allocate) that much.
        if self.rows.width > self.tm.columns.len() {
            return Err(DecodeError::Bad(format!(
                "rows event has {} columns but the table map has {}",
                self.rows.width,
                self.tm.columns.len()
            )));
        }
        let w = self.rows.width;
        out.clear();
        out.resize(self.rows.width, None);
        let npresent = (0..self.rows.width).filter(|&i| bit(present, i)).count();
        let data = self.rows.data;
        let nulls = data.get(self.pos..self.pos + npresent.div_ceil(8)).ok_or(DecodeError::Short("row null bitmap"))?;
        self.pos += npresent.div_ceil(8);
        let mut k = 0usize;
        for (i, slot) in out.iter_mut().enumerate().take(self.rows.width) {
            if !bit(present, i) {
                continue;
            }
            let is_null = bit(nulls, k);
            k += 1;
            if is_null {
                *slot = Some(Value::Null);
                continue;
            }
            if i >= w {
                return Err(DecodeError::Bad(format!(
                    "row has column {i} but the table map has {} columns",
                    self.tm.columns.len()
                )));
            }
            let (v, n) = value::decode(self.tm.columns[i], self.tm.unsigned[i], &data[self.pos..])?;
            self.pos += n;
            *slot = Some(v);
        }
        Ok(())
    }

    /// The next row: `(before, after)`; INSERT has only after, DELETE only
    /// before. Returns `Ok(false)` at the end.
    pub fn next_into(
        &mut self,
        before: &mut Vec<Option<Value<'a>>>,
        after: &mut Vec<Option<Value<'a>>>,
    ) -> Result<bool, DecodeError> {
        if self.pos >= self.rows.data.len() {
            return Ok(false);
        }
        let start = self.pos;
        before.clear();
        after.clear();
        match self.rows.kind {
            RowsKind::Insert => self.image(self.rows.present, after)?,
            RowsKind::Delete => self.image(self.rows.present, before)?,
            RowsKind::Update => {
                self.image(self.rows.present, before)?;
                let pa = self.rows.present_after.unwrap_or(self.rows.present);
                self.image(pa, after)?;
            }
        }
        if self.pos == start {
            // No column present: nothing consumed, and the same bytes would
            // be read as the next row forever.
            return Err(DecodeError::Bad("row image with no columns".into()));
        }
        Ok(true)
    }
}

/// The part of an event after its header and before its checksum.
pub fn body<'a>(ev: &'a [u8], f: &Format) -> &'a [u8] {
    let end = ev.len() - if f.checksum == crate::event::Checksum::Crc32 { crate::event::CHECKSUM_LEN } else { 0 };
    &ev[HEADER_LEN.min(end)..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_and_inflate() {
        let mut c = Cur::new(&[0xfc, 0x10, 0x27, 5], "t");
        assert_eq!(c.lenenc().unwrap(), 10_000);
        assert_eq!(c.lenenc().unwrap(), 5);
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"UPDATE t SET a = 1").unwrap();
        let mut b = vec![0x81, 18];
        b.extend(z.finish().unwrap());
        assert_eq!(inflate(&b).unwrap(), b"UPDATE t SET a = 1");
        b[1] = 17;
        assert!(inflate(&b).is_err(), "a wrong length is an error");
        assert!(inflate(&[0x91, 1, 0]).is_err(), "an unknown algorithm is an error");
    }
}
