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

/// The key-value metadata entry in which a compacted file lists the files
/// it holds (keys under the bucket, one per line).
pub const SOURCES: &str = "pileup.sources";

/// `rows` as a Parquet file.
pub fn write(rows: &[Row], samples: Samples) -> Result<Vec<u8>, Error> {
    write_with(rows, samples, vec![])
}

/// `rows` as a Parquet file with key-value metadata `meta`.
pub fn write_with(rows: &[Row], samples: Samples, meta: Vec<(String, String)>) -> Result<Vec<u8>, Error> {
    let batch = rows::to_batch(rows, samples)?;
    let kv: Vec<parquet::file::metadata::KeyValue> =
        meta.into_iter().map(|(k, v)| parquet::file::metadata::KeyValue::new(k, v)).collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).map_err(stored)?))
        .set_created_by(format!("pileup {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata((!kv.is_empty()).then_some(kv))
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
    Ok(read_with(file, columns)?.0)
}

/// A Parquet file's key-value metadata.
pub type Meta = Vec<(String, String)>;

/// [`read`], and the file's key-value metadata.
pub fn read_with(file: Bytes, columns: Option<&[&str]>) -> Result<(Vec<Row>, Meta), Error> {
    let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(stored)?;
    let meta: Meta = b
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kv| kv.iter().map(|e| (e.key.clone(), e.value.clone().unwrap_or_default())).collect())
        .unwrap_or_default();
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
    Ok((rows, meta))
}

/// The keys a compacted file's metadata says it holds.
pub fn sources(meta: &[(String, String)]) -> Vec<String> {
    meta.iter()
        .filter(|(k, _)| k == SOURCES)
        .flat_map(|(_, v)| v.lines().filter(|l| !l.is_empty()).map(str::to_string))
        .collect()
}
