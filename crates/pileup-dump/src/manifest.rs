//! The dump's manifest, `pileup-dump.json`: what was dumped, from where and
//! when, the binlog position of the snapshot, every object's definition and
//! every data chunk with its row count and checksum. It is written last:
//! a directory without it is not a complete dump.

use serde::{Deserialize, Serialize};

use crate::chunk::Range;

pub const MANIFEST: &str = "pileup-dump.json";
pub const FORMAT: &str = "pileup-dump 1";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub server_version: String,
    /// Unix seconds.
    pub started: u64,
    pub finished: u64,
    /// The same, in the server's time zone (`YYYY-MM-DD HH:MM:SS`).
    pub started_at: String,
    pub finished_at: String,
    pub position: Position,
    /// The `--where` condition every table's rows were read with.
    #[serde(rename = "where", default)]
    pub where_: Option<String>,
    /// The global lock taken to open every thread's snapshot at the same
    /// point, and how long it was held.
    pub lock: LockHeld,
    pub databases: Vec<Database>,
    pub tables: Vec<Table>,
    /// Views, routines, triggers and events, in the order they are created.
    pub objects: Vec<Object>,
    /// Accounts and their grants (`dump --users`).
    #[serde(default)]
    pub users: Vec<User>,
    /// Sequences, created before the tables (a column's default may read
    /// one).
    #[serde(default)]
    pub sequences: Vec<Sequence>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sequence {
    pub db: String,
    pub name: String,
    /// `SHOW CREATE SEQUENCE`.
    pub create: String,
    /// Its `next_not_cached_value`, read after the data: the load sets it
    /// with `SETVAL`, so no value a dumped row holds is handed out again.
    pub next: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    pub user: String,
    pub host: String,
    /// `SHOW CREATE USER` (password hash included).
    pub create: String,
    /// `SHOW GRANTS FOR` the account.
    pub grants: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Position {
    pub binlog_file: Option<String>,
    pub binlog_pos: Option<u64>,
    pub gtid_binlog_pos: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LockHeld {
    pub statement: String,
    pub held_ms: f64,
    /// How long its requests waited to be granted, over every try (commits
    /// queue behind a waiting request).
    #[serde(default)]
    pub waited_ms: f64,
    /// Tables copied while it was held (not transactional).
    pub copied_under_lock: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Database {
    pub name: String,
    pub charset: String,
    pub collation: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Table {
    pub db: String,
    pub name: String,
    pub engine: String,
    pub create: String,
    /// Columns dumped and loaded, in order (generated columns are not).
    pub columns: Vec<String>,
    /// The integer key the chunks are ranges of.
    pub chunk_key: Option<String>,
    pub chunks: Vec<Chunk>,
    /// Estimated size when planned (bytes), for largest-first loading.
    pub size_estimate: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chunk {
    /// Relative to the dump directory.
    pub file: String,
    pub range: Range,
    pub rows: u64,
    /// The wrapping sum of every row's CRC-32 (its `LOAD DATA` text): what
    /// `load --verify` compares the loaded rows with.
    pub row_sum: u64,
    /// Uncompressed bytes and their CRC-32.
    pub bytes: u64,
    pub crc32: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    View,
    Procedure,
    Function,
    Trigger,
    Event,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Object {
    pub kind: Kind,
    pub db: String,
    pub name: String,
    /// The session settings it was created with.
    pub sql_mode: Option<String>,
    pub character_set_client: Option<String>,
    pub collation_connection: Option<String>,
    pub time_zone: Option<String>,
    pub create: String,
}

/// A name as a file name: bytes other than ASCII letters, digits, `_` and
/// `-` as `@XX` (hex), so any database or table name is one safe path
/// component. (Hand-written: four lines, no crate encodes exactly this.)
pub fn file_part(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            s.push(b as char);
        } else {
            s.push_str(&format!("@{b:02x}"));
        }
    }
    s
}

/// Quote an identifier with backticks.
pub fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_safe_file_names_and_quoted_identifiers() {
        assert_eq!(file_part("sbtest1"), "sbtest1");
        assert_eq!(file_part("we.ird/na me"), "we@2eird@2fna@20me");
        assert_eq!(file_part("é"), "@c3@a9");
        assert_eq!(quote("a`b"), "`a``b`");
    }
}
