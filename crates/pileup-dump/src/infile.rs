//! `LOAD DATA LOCAL INFILE` from a stream: how rows get into a table from
//! mydumper's INSERTs, and from pileup's chunk files on a server without
//! bulk execution (see [`crate::bulk`]).

use std::io::Read;
use std::sync::{Arc, Mutex};

use crate::error::{bail, Ctx, Result};
use mysql::prelude::Queryable;

use crate::manifest::quote;

/// Stream `data` (`LOAD DATA` text) into `db.table` with `LOAD DATA LOCAL
/// INFILE`; returns the rows loaded. `expect`: the bytes and CRC-32 the
/// data must have, checked as it is read; a file that is corrupt or does
/// not match is named (`shown`) and the statement fails.
pub fn load_data(
    w: &mut mysql::Conn,
    db: &str,
    table: &str,
    cols: Option<&[String]>,
    data: Box<dyn Read + Send>,
    shown: String,
    expect: Option<(u64, u32)>,
) -> Result<u64> {
    let state = Arc::new(Mutex::new(None::<String>));
    let st = state.clone();
    let mut data = Some(data);
    w.set_local_infile_handler(Some(mysql::LocalInfileHandler::new(move |_, out| {
        let Some(mut z) = data.take() else { return Ok(()) };
        let mut buf = vec![0u8; 1 << 16];
        let (mut n, mut crc) = (0u64, crc32fast::Hasher::new());
        loop {
            let got = match z.read(&mut buf) {
                Ok(0) => break,
                Ok(g) => g,
                Err(e) => {
                    *st.lock().unwrap() = Some(format!("{shown} is corrupt at byte {n} of its data ({e})"));
                    return Err(e);
                }
            };
            crc.update(&buf[..got]);
            n += got as u64;
            std::io::Write::write_all(out, &buf[..got])?;
        }
        if let Some(expect) = expect.filter(|&e| e != (n, crc.clone().finalize())) {
            let msg = format!(
                "{shown} does not match the manifest ({n} bytes read, {} expected, or a different checksum)",
                expect.0
            );
            *st.lock().unwrap() = Some(msg.clone());
            return Err(std::io::Error::other(msg));
        }
        Ok(())
    })));
    let cols =
        cols.map(|c| format!(" ({})", c.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", "))).unwrap_or_default();
    let sql = format!(
        "LOAD DATA LOCAL INFILE 'chunk' INTO TABLE {}.{} {}{cols}",
        quote(db),
        quote(table),
        crate::tsv::LOAD_FORMAT
    );
    let r = w.query_drop(&sql);
    w.set_local_infile_handler(None);
    if let Some(why) = state.lock().unwrap().take() {
        bail!("{why}; table {db}.{table} is incomplete");
    }
    r.map_err(crate::error::DumpError::from).with_ctx(|| format!("loading {db}.{table}"))?;
    Ok(w.affected_rows())
}
