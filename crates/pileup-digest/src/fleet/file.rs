//! Rows to a Parquet file's bytes and back: zstd-compressed columns, text
//! columns dictionary-encoded (a host's file repeats its host, labels and
//! fingerprints), one row group per file.

use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::{rows, Row, Samples};
use crate::Error;

fn stored(e: impl std::fmt::Display) -> Error {
    Error::Stored(format!("a stored digest file: {e}"))
}

/// `rows` as a Parquet file.
pub fn write(rows: &[Row], samples: Samples) -> Result<Vec<u8>, Error> {
    let batch = rows::to_batch(rows, samples)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(stored)?))
        .set_created_by(format!("pileup {}", env!("CARGO_PKG_VERSION")))
        .build();
    let mut out = Vec::new();
    let mut w = ArrowWriter::try_new(&mut out, rows::schema(), Some(props)).map_err(stored)?;
    w.write(&batch).map_err(stored)?;
    w.close().map_err(stored)?;
    Ok(out)
}

/// The rows of a Parquet file of [`rows::schema`]; with `columns`, only
/// those columns are decoded (`minute`, `host`, `fingerprint`,
/// `fingerprint_version` and `count` are always read).
pub fn read(file: Bytes, columns: Option<&[&str]>) -> Result<Vec<Row>, Error> {
    let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(stored)?;
    let b = match columns {
        Some(cols) => {
            let always = ["minute", "host", "fingerprint", "fingerprint_version", "count"];
            let want: Vec<&str> = always.iter().chain(cols).copied().collect();
            let mask = ProjectionMask::columns(b.parquet_schema(), want.iter().copied());
            b.with_projection(mask)
        }
        None => b,
    };
    let mut rows = vec![];
    for batch in b.build().map_err(stored)? {
        rows.extend(rows::from_batch(&batch.map_err(stored)?)?);
    }
    Ok(rows)
}
