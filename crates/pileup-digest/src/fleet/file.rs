//! Rows to a Parquet file's bytes and back: LZ4 or zstd-compressed columns,
//! dictionary-encoded (a file repeats its hosts, labels and fingerprints),
//! a row group per [`ROW_GROUP_ROWS`] rows.

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::arrow_writer::ArrowWriterOptions;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::{rows, Row, Samples};
use crate::Error;

fn stored(e: impl std::fmt::Display) -> Error {
    Error::Stored(format!("a stored digest file: {e}"))
}

/// The key-value metadata entry in which a compacted file lists the files
/// it holds (keys relative to its own directory, one per line).
pub const SOURCES: &str = "pileup.sources";

/// The stored columns of what the profile alone shows
/// ([`crate::report::profile_attributes`]): each attribute's count, sum,
/// minimum and maximum (a run of rows merges at once only with all four),
/// each flag's two counts.
pub fn profile_columns(rank: crate::rank::Rank) -> Vec<String> {
    let (attrs, flags) = crate::report::profile_attributes(rank);
    let mut v = vec![];
    for a in attrs {
        let name = crate::attr::ATTRS[a as usize].name;
        v.extend(["n", "sum", "min", "max"].map(|part| format!("{name}_{part}")));
    }
    for &f in flags {
        let name = crate::attr::FLAGS[f].0;
        v.extend(["seen", "yes"].map(|part| format!("{name}_{part}")));
    }
    v
}

/// What a merge of [`profile_columns`] keeps: the flags read, no time
/// series.
pub fn profile_keep(rank: crate::rank::Rank) -> super::rows::Keep {
    let mut flags = [false; crate::attr::N_FLAGS];
    for &f in crate::report::profile_attributes(rank).1 {
        flags[f] = true;
    }
    super::rows::Keep { flags, series: false, labels: false }
}

/// Rows a row group holds at most: a compacted hour of a large fleet is
/// read a row group per thread.
pub const ROW_GROUP_ROWS: usize = 65_536;

/// Rows a record batch holds at most when read: the per-batch work (the
/// columns looked up and typed) spread over more rows than the reader's
/// default of 1,024.
const BATCH_ROWS: usize = 8192;

/// `rows` as a window's Parquet file ([`Codec::Lz4`]).
pub fn write(rows: &[Row], samples: Samples) -> Result<Vec<u8>, Error> {
    let mut w = Writer::new(samples, vec![], Codec::Lz4)?;
    w.write(rows)?;
    w.finish()
}

/// How a file's columns are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// LZ4 (raw), for a window's file of a few hundred rows: a zstd
    /// column is a zstd context made to read it, and in a file of 132
    /// columns making them costs more than decoding (two thirds of
    /// `--from`'s CPU on such files); LZ4 costs about 5% more bytes there.
    Lz4,
    /// zstd (level 3), for a compacted hour: about 12% fewer bytes than
    /// LZ4 on what is kept longest, and few contexts for many rows.
    Zstd,
}

/// A Parquet file written some rows at a time.
pub struct Writer {
    w: ArrowWriter<Vec<u8>>,
    samples: Samples,
}

impl Writer {
    /// A file with key-value metadata `meta`, its samples as `samples`
    /// says, compressed with `codec`.
    pub fn new(samples: Samples, meta: Vec<(String, String)>, codec: Codec) -> Result<Writer, Error> {
        let kv: Vec<parquet::file::metadata::KeyValue> =
            meta.into_iter().map(|(k, v)| parquet::file::metadata::KeyValue::new(k, v)).collect();
        // A window's file is a few hundred rows of 132 columns, most of
        // them null (attributes a server does not log): the footer's
        // per-column metadata is a large share of its bytes. So no page
        // index and no statistics, but for the columns engines prune on
        // (`minute`, `host`, `fingerprint`), kept per row group.
        let mut props = WriterProperties::builder()
            .set_compression(match codec {
                Codec::Lz4 => Compression::LZ4_RAW,
                Codec::Zstd => Compression::ZSTD(ZstdLevel::try_new(3).map_err(stored)?),
            })
            .set_created_by(format!("pileup {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata((!kv.is_empty()).then_some(kv))
            .set_statistics_enabled(EnabledStatistics::None)
            .set_offset_index_disabled(true)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
        for col in ["minute", "host", "fingerprint"] {
            props = props.set_column_statistics_enabled(ColumnPath::from(col), EnabledStatistics::Chunk);
        }
        if codec == Codec::Zstd {
            // A compacted hour is many rows: statistics for every column
            // cost little beside them, and their null counts let a reader
            // skip the columns a row group holds no value of (most of the
            // attributes a server does not log).
            props = props.set_statistics_enabled(EnabledStatistics::Chunk);
        }
        // The Arrow schema is not stored beside Parquet's own (10 KB a
        // file): the reader asks for the types it needs by name.
        let opts = ArrowWriterOptions::new().with_properties(props.build()).with_skip_arrow_metadata(true);
        let w = ArrowWriter::try_new_with_options(Vec::new(), rows::schema(), opts).map_err(stored)?;
        Ok(Writer { w, samples })
    }

    pub fn write(&mut self, rows: &[Row]) -> Result<(), Error> {
        if rows.is_empty() {
            return Ok(());
        }
        self.w.write(&rows::to_batch(rows, self.samples)?).map_err(stored)
    }

    /// The file's bytes.
    pub fn finish(self) -> Result<Vec<u8>, Error> {
        self.w.into_inner().map_err(stored)
    }
}

/// The rows of a Parquet file of [`rows::schema`]; with `columns`, only
/// those columns are decoded (`minute`, `host`, `fingerprint`,
/// `fingerprint_version` and `count` are always read).
pub fn read(file: Bytes, columns: Option<&[&str]>) -> Result<Vec<Row>, Error> {
    let mut rows = vec![];
    Opened::open(file)?.read(columns, None, |r| rows.extend(r))?;
    Ok(rows)
}

/// Text columns read as views (`Utf8View`): the strings of a
/// dictionary-encoded column chunk are its dictionary's, not a copy per
/// row, and rows of one host, class or database are found equal by their
/// views ([`super::rows`]).
const VIEWED: &[&str] = &["host", "fingerprint", "db", "sample"];

/// A stored file whose footer is read: its row groups can be read apart
/// (on several threads) without reading the footer again.
#[derive(Clone)]
pub struct Opened {
    data: Bytes,
    meta: ArrowReaderMetadata,
}

impl Opened {
    /// The file's footer read; its text columns are read as views
    /// ([`VIEWED`]).
    pub fn open(data: Bytes) -> Result<Opened, Error> {
        let meta = ArrowReaderMetadata::load(&data, Default::default()).map_err(stored)?;
        let schema = meta.schema();
        let fields: Vec<arrow_schema::FieldRef> = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                arrow_schema::DataType::Utf8 if VIEWED.contains(&f.name().as_str()) => {
                    std::sync::Arc::new(f.as_ref().clone().with_data_type(arrow_schema::DataType::Utf8View))
                }
                _ => f.clone(),
            })
            .collect();
        let hinted = arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone());
        let options = ArrowReaderOptions::new().with_schema(std::sync::Arc::new(hinted));
        let meta = ArrowReaderMetadata::try_new(meta.metadata().clone(), options).map_err(stored)?;
        Ok(Opened { data, meta })
    }

    pub fn row_groups(&self) -> usize {
        self.meta.metadata().num_row_groups()
    }

    /// The keys of the windows this file, stored at `key`, holds (a
    /// compacted hour's: its [`SOURCES`] metadata names them relative to
    /// its own directory); none for a window's file.
    pub fn sources(&self, key: &str) -> Vec<String> {
        let kv = self.meta.metadata().file_metadata().key_value_metadata();
        kv.into_iter()
            .flatten()
            .filter(|e| e.key == SOURCES)
            .flat_map(|e| e.value.as_deref().unwrap_or("").lines().filter(|l| !l.is_empty()))
            .map(|name| super::layout::beside(key, name))
            .collect()
    }

    /// The rows of row group `group` (all: `None`), handed to `each` a
    /// batch at a time; `columns` as for [`read`].
    pub fn read(
        &self,
        columns: Option<&[&str]>,
        group: Option<usize>,
        mut each: impl FnMut(Vec<Row>),
    ) -> Result<(), Error> {
        self.batches(columns, group, |b| {
            each(rows::from_batch(b)?);
            Ok(())
        })
    }

    /// The record batches of row group `group` (all: `None`), of the
    /// columns `columns` names (as for [`read`]), handed to `each`.
    pub fn batches(
        &self,
        columns: Option<&[&str]>,
        group: Option<usize>,
        mut each: impl FnMut(&RecordBatch) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let b = ParquetRecordBatchReaderBuilder::new_with_metadata(self.data.clone(), self.meta.clone());
        let asked = match columns {
            Some(cols) => {
                let always = ["minute", "host", "fingerprint", "fingerprint_version", "count"];
                let want: Vec<&str> = always.iter().chain(cols).copied().collect();
                ProjectionMask::columns(b.parquet_schema(), want.iter().copied())
            }
            None => ProjectionMask::all(),
        };
        let groups: Vec<usize> = match group {
            Some(g) => vec![g],
            None => (0..self.row_groups()).collect(),
        };
        // Columns whose chunks hold no value in the groups read are left
        // out: no codec is made for them and no page read. `class_id` is
        // for engines: pileup names a class from its fingerprint.
        let md = self.meta.metadata();
        let held = |leaf: usize| {
            groups.iter().any(|&g| {
                let c = md.row_group(g).column(leaf);
                c.statistics().and_then(|s| s.null_count_opt()).is_none_or(|nulls| nulls < c.num_values() as u64)
            })
        };
        let schema = b.parquet_schema();
        let leaves = (0..schema.num_columns())
            .filter(|&l| asked.leaf_included(l) && held(l) && schema.column(l).name() != "class_id");
        let mask = ProjectionMask::leaves(schema, leaves);
        let b = b.with_projection(mask).with_row_groups(groups).with_batch_size(BATCH_ROWS);
        for batch in b.build().map_err(stored)? {
            each(&batch.map_err(stored)?)?;
        }
        Ok(())
    }
}
