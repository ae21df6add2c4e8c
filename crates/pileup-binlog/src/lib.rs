//! pileup-binlog: read MySQL and MariaDB binary logs and relay logs straight
//! from disk.
//!
//! Data flow: [`reader::FileReader`] frames events out of a file,
//! [`follow::Follower`] reads on from a position file after file while the
//! server writes, [`Decoder`] turns each into an [`Event`]
//! (keeping the table maps row events refer to), and [`value`] decodes row
//! images column by column without copying.
//!
//! Written here rather than taken from a crate: the Rust binlog parsers
//! (mysql_common's `binlog` module and others) know MySQL's events but not
//! MariaDB's (GTID, GTID_LIST, ANNOTATE_ROWS, BINLOG_CHECKPOINT, compressed
//! QUERY and ROWS events), decode rows into owned values (too slow for a
//! prefetcher that must stay ahead of the applier), and stop at the first
//! bad byte where a relay-log reader must name the place and carry on.

pub mod check;
pub mod decode;
mod decoder;
pub mod error;
pub mod event;
pub mod follow;
pub mod print;
pub mod reader;
pub mod stats;
pub mod value;

pub use decode::{MariaGtid, Query, Rows, RowsKind, TableMap};
pub use decoder::{Decoder, Event};
pub use error::{DecodeError, ReadError};
pub use event::{et, Format, Header};
pub use follow::{Follower, Step};
pub use print::{print_event, PrintFormat};
pub use reader::{FileReader, RawEvent};
pub use stats::Stats;
pub use value::Value;
