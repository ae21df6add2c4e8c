//! Rows into a table by MariaDB's bulk execution of a prepared `INSERT`
//! (`COM_STMT_BULK_EXECUTE`): the chunk's `LOAD DATA` text is read here,
//! and its rows go to the server as arrays of values, several thousand a
//! packet, in one transaction. The server stores each value as `LOAD DATA
//! ... CHARACTER SET binary` would (the session's character set is binary
//! while it runs, so no value is converted), without reading the text
//! byte by byte: on MariaDB 10.11 that parsing is a quarter of a load's
//! server CPU.

use std::io::Read;

use mysql::prelude::Queryable;
use mysql::Value;

use crate::error::{bail, Ctx, Result};
use crate::manifest::quote;

/// The rows' bytes sent in one bulk execution (the driver splits it
/// further at the server's `max_allowed_packet`).
const BATCH_BYTES: usize = 2 << 20;

/// Insert the rows of `data` (`LOAD DATA` text, see [`crate::tsv`]) into
/// `db.table`'s `cols`, in one transaction; returns the rows inserted.
/// `expect`: the bytes and CRC-32 the data must have, checked before the
/// commit; a file that is corrupt or does not match is named (`shown`) and
/// nothing of it stays.
pub fn insert(
    w: &mut mysql::Conn,
    db: &str,
    table: &str,
    cols: &[String],
    mut data: Box<dyn Read + Send>,
    shown: &str,
    expect: Option<(u64, u32)>,
) -> Result<u64> {
    let sql = format!(
        "INSERT INTO {}.{} ({}) VALUES ({})",
        quote(db),
        quote(table),
        cols.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "),
        vec!["?"; cols.len()].join(", ")
    );
    w.query_drop("SET NAMES binary")?;
    w.query_drop("START TRANSACTION")?;
    let r = (|| {
        let packet: u64 = w.query_first("SELECT @@max_allowed_packet")?.unwrap_or(1 << 24);
        let stmt = w.prep(&sql).with_ctx(|| format!("preparing the insert into {db}.{table}"))?;
        let (mut buf, mut rows, mut pending) = (Vec::with_capacity(1 << 20), Vec::new(), 0usize);
        let (mut n, mut crc, mut inserted, mut base) = (0u64, crc32fast::Hasher::new(), 0u64, 0u64);
        let mut block = vec![0u8; 1 << 20];
        loop {
            let got = match data.read(&mut block) {
                Ok(g) => g,
                Err(e) => bail!("{shown} is corrupt at byte {n} of its data ({e})"),
            };
            crc.update(&block[..got]);
            n += got as u64;
            buf.extend_from_slice(&block[..got]);
            // The last row may lack its newline, as LOAD DATA allows.
            if got == 0 && !buf.is_empty() && !buf.ends_with(b"\n") {
                buf.push(b'\n');
            }
            let took = crate::tsv::read_rows(&buf, cols.len(), &mut rows).map_err(|at| {
                crate::error::DumpError::Failed(format!(
                    "{shown} is corrupt at byte {} of its data (a row without {} fields)",
                    base + at as u64,
                    cols.len()
                ))
            })?;
            pending += took;
            base += took as u64;
            buf.drain(..took);
            if got == 0 && !buf.is_empty() {
                bail!("{shown} is corrupt at byte {base} of its data (a row cut short)");
            }
            if pending >= BATCH_BYTES || (got == 0 && !rows.is_empty()) {
                inserted += rows.len() as u64;
                send(w, &stmt, &mut rows, packet as usize / 2).with_ctx(|| format!("loading {db}.{table}"))?;
                pending = 0;
            }
            if got == 0 {
                break;
            }
        }
        if let Some(expect) = expect.filter(|&e| e != (n, crc.finalize())) {
            bail!(
                "{shown} does not match the manifest ({n} bytes read, {} expected, or a different checksum)",
                expect.0
            );
        }
        w.query_drop("COMMIT")?;
        Ok::<_, crate::error::DumpError>(inserted)
    })();
    if r.is_err() {
        let _ = w.query_drop("ROLLBACK");
    }
    let names = w.query_drop("SET NAMES utf8mb4");
    let inserted = r?;
    names?;
    Ok(inserted)
}

/// Send `rows` (taking them): by bulk execution, but a row of more than
/// `single` bytes by an execution of its own, which the driver sends in
/// pieces when it is larger than a packet.
fn send(w: &mut mysql::Conn, stmt: &mysql::Statement, rows: &mut Vec<Vec<Value>>, single: usize) -> mysql::Result<()> {
    let size = |r: &[Value]| r.iter().map(|v| if let Value::Bytes(b) = v { b.len() + 10 } else { 1 }).sum::<usize>();
    if rows.iter().all(|r| size(r) <= single) {
        return w.exec_batch(stmt, rows.drain(..));
    }
    let mut batch = vec![];
    for r in rows.drain(..) {
        if size(&r) <= single {
            batch.push(r);
            continue;
        }
        if !batch.is_empty() {
            w.exec_batch(stmt, std::mem::take(&mut batch))?;
        }
        w.exec_drop(stmt, r)?;
    }
    if !batch.is_empty() {
        w.exec_batch(stmt, batch)?;
    }
    Ok(())
}

/// Whether a server takes rows by bulk execution: MariaDB 10.2 and later
/// (`version` as `SELECT VERSION()` gives it).
pub fn takes_bulk(version: &str) -> bool {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return false;
    }
    let mut n = version.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0)) >= (10, 2)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bulk_execution_is_mariadbs_from_10_2() {
        assert!(super::takes_bulk("10.11.19-MariaDB-0+deb12u1"));
        assert!(super::takes_bulk("11.4.2-MariaDB"));
        assert!(super::takes_bulk("10.2.44-MariaDB-log"));
        assert!(!super::takes_bulk("10.1.48-MariaDB"));
        assert!(!super::takes_bulk("8.0.36"));
        assert!(!super::takes_bulk("9.1.0-commercial"));
    }
}
