//! pileup's dump and load: a parallel, consistent logical copy of schemas
//! and data, and its restore.
//!
//! Data flow: dump = schema (what to copy) → snapshot (one consistent
//! point for every thread, with its binlog position) → chunk (key ranges)
//! → tsv (rows as `LOAD DATA` text) → files → manifest; load = manifest →
//! tables (primary keys) → data in parallel →
//! secondary indexes → views, routines, triggers, events.
//!
//! A library without printing: progress goes through a callback.

pub mod bulk;
pub mod check;
pub mod chunk;
pub mod copy;
pub mod dump;
mod error;
pub mod files;
pub mod indexes;
pub mod infile;
pub mod load;
pub mod manifest;
pub mod mydumper;
pub mod news;
mod pool;
pub mod schema;
pub mod snapshot;
pub mod sql;
mod stats;
pub mod tsv;

pub use dump::{dump, DumpOptions};
pub use error::DumpError;
pub use load::{load, Existing, LoadOptions};
pub use manifest::Manifest;
