//! Rows into a table by MariaDB's bulk execution of a prepared `INSERT
//! IGNORE` (`COM_STMT_BULK_EXECUTE`): the chunk's `LOAD DATA` text is read
//! here, and its rows go to the server as arrays of values, several
//! thousand a packet, in one transaction. The server stores each value as
//! `LOAD DATA LOCAL ... CHARACTER SET binary` would: the same conversion
//! from the file's bytes (the session's character set is binary while it
//! runs, so no value is converted on the way), and `IGNORE` as `LOAD DATA
//! LOCAL` implies (a value a column cannot hold stored as converted, with
//! a warning; a duplicate key's row skipped, which the caller's row count
//! catches). What it saves is the server reading the text byte by byte:
//! on MariaDB 10.11 that is a quarter of a `LOAD DATA` load's server CPU.
//!
//! The packets are cut here, not by the driver: pileup's connections take
//! results of up to 1 GiB, and the driver cuts bulk packets at that, while
//! the server refuses a packet over its `max_allowed_packet`.

use std::io::Read;

use mysql::prelude::Queryable;
use mysql::Value;

use crate::error::{bail, Ctx, DumpError, Result};
use crate::manifest::quote;

/// The most bytes of one bulk packet (under the server's limit): a few
/// thousand rows, few enough that the driver's buffers for it are kept
/// for the next.
const BATCH_BYTES: usize = 2 << 20;

/// Insert the rows of `data` (`LOAD DATA` text, see [`crate::tsv`]) into
/// `db.table`'s `cols`, in one transaction; returns the rows inserted.
/// `expect`: the bytes and CRC-32 the data must have, checked before the
/// commit; a file that is corrupt or does not match is named (`shown`) and
/// nothing of it stays. The session's character sets are given back after.
pub fn insert(
    w: &mut mysql::Conn,
    db: &str,
    table: &str,
    cols: &[String],
    data: Box<dyn Read + Send>,
    shown: &str,
    expect: Option<(u64, u32)>,
) -> Result<u64> {
    let session: Option<(u64, String, Option<String>, String)> = w.query_first(
        "SELECT @@max_allowed_packet, @@character_set_client, @@character_set_results, @@collation_connection",
    )?;
    let (max_packet, client, results, collation) = session.unwrap_or((1 << 24, "utf8mb4".into(), None, String::new()));
    let r = (|| {
        w.query_drop("SET NAMES binary")?;
        w.query_drop("START TRANSACTION")?;
        let into = Target { db, table, cols, shown };
        let inserted = send(w, &into, data, max_packet as usize, expect)?;
        w.query_drop("COMMIT")?;
        Ok::<_, DumpError>(inserted)
    })();
    if r.is_err() {
        let _ = w.query_drop("ROLLBACK");
    }
    // Names the server gave: letters, digits and underscores.
    let name = |s: &str| s.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut back = format!(
        "SET character_set_client = {}, character_set_results = {}",
        name(&client),
        results.as_deref().map(name).unwrap_or_else(|| "NULL".into())
    );
    if !collation.is_empty() {
        back.push_str(&format!(", collation_connection = {}", name(&collation)));
    }
    let restored = w.query_drop(back);
    let inserted = r?;
    restored?;
    Ok(inserted)
}

/// Where the rows go.
struct Target<'a> {
    db: &'a str,
    table: &'a str,
    cols: &'a [String],
    shown: &'a str,
}

/// Read `data` and send its rows; the rows the server inserted.
fn send(
    w: &mut mysql::Conn,
    into: &Target,
    mut data: Box<dyn Read + Send>,
    max_packet: usize,
    expect: Option<(u64, u32)>,
) -> Result<u64> {
    let Target { db, table, cols, shown } = *into;
    let sql = format!(
        "INSERT IGNORE INTO {}.{} ({}) VALUES ({})",
        quote(db),
        quote(table),
        cols.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
        vec!["?"; cols.len()].join(", ")
    );
    let stmt = w.prep(&sql).with_ctx(|| format!("preparing the insert into {db}.{table}"))?;
    let kinds = kinds(w, db, table, cols)?;
    // A packet stays 16 KiB under the server's limit (which it applies to
    // its buffer for the packet, rounded up to 4 KiB), and under 16 MiB (a
    // larger one goes as several protocol packets of 16 MiB each, which a
    // server at the default limit refuses).
    let packet = max_packet.min(1 << 24).saturating_sub(16 << 10);
    let held = Held { rows: vec![], sent: vec![Sent::Nothing; cols.len()], size: 0 };
    let mut batch = Batch { stmt, into, held, limit: BATCH_BYTES.min(packet), packet, inserted: 0 };
    let (mut buf, mut parsed) = (Vec::with_capacity(2 << 20), Vec::new());
    let (mut n, mut crc, mut base) = (0u64, crc32fast::Hasher::new(), 0u64);
    let mut block = vec![0u8; 1 << 20];
    loop {
        let got = match data.read(&mut block) {
            Ok(g) => g,
            Err(e) => bail!("{shown} is corrupt at byte {n} of its data ({e})"),
        };
        crc.update(&block[..got]);
        n += got as u64;
        buf.extend_from_slice(&block[..got]);
        let end = got == 0;
        // The last row may lack its newline, as LOAD DATA allows.
        if end && !buf.is_empty() && !buf.ends_with(b"\n") {
            buf.push(b'\n');
        }
        // Rows end at newlines: a block without one (inside a long value)
        // completes no row, and what is held is not read again for it.
        if end || memchr::memchr(b'\n', &block[..got]).is_some() {
            let took = crate::tsv::read_rows(&buf, &kinds, &mut parsed).map_err(|at| {
                DumpError::Failed(format!(
                    "{shown} is corrupt at byte {} of its data (a row without {} fields)",
                    base + at as u64,
                    cols.len()
                ))
            })?;
            base += took as u64;
            buf.drain(..took);
            for row in parsed.drain(..) {
                batch.push(w, row)?;
            }
        }
        if end {
            if !buf.is_empty() {
                bail!("{shown} is corrupt at byte {base} of its data (a row cut short)");
            }
            break;
        }
    }
    batch.flush(w)?;
    if let Some(expect) = expect.filter(|&e| e != (n, crc.finalize())) {
        bail!("{shown} does not match the manifest ({n} bytes read, {} expected, or a different checksum)", expect.0);
    }
    Ok(batch.inserted)
}

/// Rows into one table, a bulk packet at a time.
struct Batch<'a> {
    stmt: mysql::Statement,
    into: &'a Target<'a>,
    held: Held,
    /// The packet's bytes to send at.
    limit: usize,
    /// The most a packet may hold.
    packet: usize,
    /// Rows inserted so far.
    inserted: u64,
}

impl Batch<'_> {
    /// The packet's bytes before its rows: command, statement, flags, and
    /// each column's type.
    fn head(&self) -> usize {
        7 + 2 * self.into.cols.len()
    }

    fn push(&mut self, w: &mut mysql::Conn, row: Vec<Value>) -> Result<()> {
        let size = wire(&row);
        if self.head() + size > self.packet {
            // A row no packet holds goes by LOAD DATA, which streams it.
            self.flush(w)?;
            let mut text = vec![];
            crate::tsv::row(&mut text, &row);
            let Target { db, table, cols, shown } = *self.into;
            let data = Box::new(std::io::Cursor::new(text));
            self.inserted += crate::infile::load_data(w, db, table, Some(cols), data, shown.to_string(), None)?;
            return Ok(());
        }
        if !self.held.rows.is_empty() && self.head() + self.held.size + size > self.limit {
            self.flush(w)?;
        }
        self.held.add(row, size);
        Ok(())
    }

    /// Send the rows held as one bulk packet.
    fn flush(&mut self, w: &mut mysql::Conn) -> Result<()> {
        if self.held.rows.is_empty() {
            return Ok(());
        }
        let Target { db, table, .. } = *self.into;
        // Each row as the driver's parameters as it is: a `Vec` would be
        // copied value by value into a new one.
        w.exec_batch(&self.stmt, self.held.take().map(mysql::Params::Positional))
            .with_ctx(|| format!("loading {db}.{table}"))?;
        self.inserted += w.affected_rows();
        Ok(())
    }
}

/// The rows of the next packet.
struct Held {
    rows: Vec<Vec<Value>>,
    /// How each column's values go, for the rows held.
    sent: Vec<Sent>,
    /// Their bytes in the packet (a typed value's counted as the larger of
    /// its two forms, see [`wire`]).
    size: usize,
}

impl Held {
    fn add(&mut self, row: Vec<Value>, size: usize) {
        for (s, v) in self.sent.iter_mut().zip(&row) {
            *s = s.with(v);
        }
        self.size += size;
        self.rows.push(row);
    }

    /// The rows held, each column's values of one type (see [`as_sent`]);
    /// none held after.
    fn take(&mut self) -> std::vec::Drain<'_, Vec<Value>> {
        as_sent(&mut self.rows, &self.sent);
        self.sent.fill(Sent::Nothing);
        self.size = 0;
        self.rows.drain(..)
    }
}

/// How a column's values go in one packet: the server takes one type for
/// each column of a bulk packet and refuses values of another.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sent {
    /// Only NULLs so far.
    Nothing,
    /// Numbers, or dates and times (a column holds one of these).
    Typed,
    Bytes,
    /// Typed values and bytes: the typed values go as their text.
    Mixed,
}

impl Sent {
    fn with(self, v: &Value) -> Sent {
        let this = match v {
            Value::NULL => return self,
            Value::Bytes(_) => Sent::Bytes,
            _ => Sent::Typed,
        };
        match self {
            Sent::Nothing => this,
            s if s == this => s,
            _ => Sent::Mixed,
        }
    }
}

/// The typed values of a column that also holds bytes (`sent`) turned to
/// their text, as the column goes.
fn as_sent(rows: &mut [Vec<Value>], sent: &[Sent]) {
    for (i, _) in sent.iter().enumerate().filter(|(_, s)| **s == Sent::Mixed) {
        for v in rows.iter_mut().filter_map(|r| r.get_mut(i)) {
            if !matches!(v, Value::Bytes(_) | Value::NULL) {
                let mut text = vec![];
                crate::tsv::value(&mut text, v);
                *v = Value::Bytes(text);
            }
        }
    }
}

/// A row's bytes in a bulk packet: each value's indicator byte, and a
/// string's length (as the protocol encodes it) and bytes; a typed value
/// counted as the larger of its binary form and its text, which it goes
/// as in a column that also holds bytes.
fn wire(row: &[Value]) -> usize {
    // At most 21 characters: one byte of length before them.
    let text = |digits: u64, sign: bool| 2 + digits.checked_ilog10().map_or(1, |l| l as usize + 1) + usize::from(sign);
    row.iter()
        .map(|v| match v {
            Value::Bytes(b) if b.len() < 251 => 2 + b.len(),
            Value::Bytes(b) if b.len() < 1 << 16 => 4 + b.len(),
            Value::Bytes(b) if b.len() < 1 << 24 => 5 + b.len(),
            Value::Bytes(b) => 10 + b.len(),
            Value::Int(n) => 9.max(text(n.unsigned_abs(), *n < 0)),
            Value::UInt(n) => 9.max(text(*n, false)),
            Value::NULL => 1,
            // A date and time's text is at most 26 characters (its binary
            // form 12 bytes); no other value is read from the text.
            _ => 2 + 26,
        })
        .sum()
}

/// How each of `cols` of `db.table` is read from the text: its integer
/// and `DATETIME` columns as typed values (see
/// [`crate::tsv::Kind`]), the rest as bytes.
fn kinds(w: &mut mysql::Conn, db: &str, table: &str, cols: &[String]) -> Result<Vec<crate::tsv::Kind>> {
    use crate::tsv::Kind;
    let found =
        crate::schema::table_columns(w, db, table).with_ctx(|| format!("reading the columns of {db}.{table}"))?;
    let kind = |c: &String| match found.iter().find(|f| f.name == *c) {
        Some(f) if f.is_integer() && f.column_type.to_ascii_lowercase().contains("unsigned") => Kind::Unsigned,
        Some(f) if f.is_integer() => Kind::Signed,
        Some(f) if f.data_type.eq_ignore_ascii_case("datetime") => Kind::DateTime,
        _ => Kind::Text,
    };
    Ok(cols.iter().map(kind).collect())
}

/// Whether a server takes rows by bulk execution: MariaDB 10.2 and later
/// (`version` as `SELECT VERSION()` gives it).
pub fn takes_bulk(version: &str) -> bool {
    mariadb_from(version, (10, 2))
}

/// Whether `version` (as `SELECT VERSION()` gives it) is MariaDB's, `at`
/// (major, minor) or later.
pub(crate) fn mariadb_from(version: &str, at: (u32, u32)) -> bool {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return false;
    }
    let mut n = version.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) >= at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_execution_is_mariadbs_from_10_2() {
        assert!(takes_bulk("10.11.19-MariaDB-0+deb12u1"));
        assert!(takes_bulk("11.4.2-MariaDB"));
        assert!(takes_bulk("10.2.44-MariaDB-log"));
        assert!(!takes_bulk("10.1.48-MariaDB"));
        assert!(!takes_bulk("8.0.36"));
        assert!(!takes_bulk("9.1.0-commercial"));
    }

    #[test]
    fn a_packets_column_of_numbers_and_bytes_goes_as_bytes_and_one_of_numbers_as_numbers() {
        let b = |t: &str| Value::Bytes(t.as_bytes().to_vec());
        let mut held = Held { rows: vec![], sent: vec![Sent::Nothing; 3], size: 0 };
        // A packet of numbers, then one whose first row has a number where
        // the rest has bytes.
        held.add(vec![Value::Int(1), b("x"), Value::NULL], 20);
        assert_eq!(held.take().collect::<Vec<_>>(), vec![vec![Value::Int(1), b("x"), Value::NULL]]);
        assert_eq!((held.size, &held.sent[..]), (0, &[Sent::Nothing; 3][..]));
        for r in [
            vec![Value::Int(12), Value::NULL, Value::UInt(7)],
            vec![b("00012"), Value::Int(-3), Value::NULL],
            vec![Value::NULL, Value::Int(4), Value::UInt(u64::MAX)],
        ] {
            held.add(r, 10);
        }
        assert_eq!(held.size, 30);
        assert_eq!(held.sent, vec![Sent::Mixed, Sent::Typed, Sent::Typed]);
        assert_eq!(
            held.take().collect::<Vec<_>>(),
            vec![
                vec![b("12"), Value::NULL, Value::UInt(7)],
                vec![b("00012"), Value::Int(-3), Value::NULL],
                vec![Value::NULL, Value::Int(4), Value::UInt(u64::MAX)],
            ]
        );
        assert_eq!(Sent::Nothing.with(&Value::NULL), Sent::Nothing);
        assert_eq!(Sent::Bytes.with(&Value::Int(1)), Sent::Mixed);
        assert_eq!(Sent::Mixed.with(&b("x")), Sent::Mixed);
    }

    #[test]
    fn a_rows_packet_bytes_count_each_values_indicator_and_length() {
        let b = |n: usize| Value::Bytes(vec![b'x'; n]);
        assert_eq!(wire(&[Value::NULL, b(0), b(250)]), 1 + 2 + 252);
        // A number: its 8 bytes, or its text where that is longer.
        assert_eq!(wire(&[Value::Int(0), Value::Int(-123456), Value::UInt(0)]), 9 * 3);
        assert_eq!(wire(&[Value::Double(0.1), Value::Date(2024, 1, 2, 3, 4, 5, 6)]), 28 + 28);
        assert_eq!(wire(&[Value::Int(i64::MIN), Value::UInt(u64::MAX), Value::Int(-12345678)]), 22 + 22 + 11);
        assert_eq!(wire(&[b(251), b(65535)]), 255 + 65539);
        assert_eq!(wire(&[b(1 << 16), b(1 << 24)]), (1 << 16) + 5 + (1 << 24) + 10);
    }
}
