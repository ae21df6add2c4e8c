//! Errors: a decode error says what was wrong; a read error adds the file
//! and offset, so a user can look at the event with `pileup binlog`.

use std::path::PathBuf;

use thiserror::Error;

/// What was wrong with one event's bytes.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("event too short for its {0}")]
    Short(&'static str),
    #[error("{0}")]
    Bad(String),
    #[error("checksum mismatch (stored {stored:08x}, computed {computed:08x})")]
    Checksum { stored: u32, computed: u32 },
}

/// An error reading a binlog or relay log file.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a binlog or relay log file (no binlog magic at its start)")]
    NotBinlog { path: PathBuf },
    #[error("{path} at offset {offset}: corrupt event: {what}")]
    Corrupt { path: PathBuf, offset: u64, what: String },
}
