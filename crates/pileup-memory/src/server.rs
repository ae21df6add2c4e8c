//! What the server says it allocated: `Memory_used` (MariaDB: memory
//! allocated through its own allocator, by every thread), each
//! connection's `MEMORY_USED` and `MAX_MEMORY_USED`, and the buffer pool's
//! size (InnoDB allocates it apart, in one mapping).

use mysql::prelude::Queryable;
use serde::Serialize;

use crate::error::MemoryError;

/// One connection's own accounting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionMemory {
    pub id: u64,
    pub user: String,
    pub command: String,
    pub bytes: u64,
    pub max_bytes: u64,
    /// The statement running, if any.
    pub info: Option<String>,
}

/// The server's accounting at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ServerMemory {
    /// `Memory_used`, bytes (global).
    pub memory_used: u64,
    /// `innodb_buffer_pool_size`, bytes.
    pub pool_size: u64,
    /// The connections charged most, largest first (at most [`TOP`]).
    pub connections: Vec<ConnectionMemory>,
    /// performance_schema's memory instruments' current total, when it is
    /// on and they count (they are off unless the server started with them).
    pub instrumented: Option<u64>,
}

/// ID, USER, COMMAND, MEMORY_USED, MAX_MEMORY_USED, INFO.
type ProcesslistRow = (u64, Option<String>, Option<String>, u64, u64, Option<Vec<u8>>);

/// Connections kept per point.
pub const TOP: usize = 5;

pub(crate) struct Reader {
    /// Whether the processlist has MEMORY_USED (MariaDB).
    per_connection: bool,
    /// Whether performance_schema is on.
    pfs: bool,
}

impl Reader {
    pub(crate) fn new(c: &mut mysql::Conn) -> Result<Reader, MemoryError> {
        let per_connection = c
            .query_first::<u64, _>(
                "SELECT COUNT(*) FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = 'information_schema' AND TABLE_NAME = 'PROCESSLIST' AND COLUMN_NAME = 'MEMORY_USED'",
            )
            .map_err(MemoryError::sql("reading the processlist's columns"))?
            .unwrap_or(0)
            > 0;
        let pfs = c
            .query_first::<u64, _>("SELECT @@performance_schema")
            .map_err(MemoryError::sql("reading performance_schema's state"))?
            .unwrap_or(0)
            > 0;
        Ok(Reader { per_connection, pfs })
    }

    pub(crate) fn read(&mut self, c: &mut mysql::Conn) -> Result<ServerMemory, MemoryError> {
        let used: Option<(String, u64)> =
            c.query_first("SHOW GLOBAL STATUS LIKE 'Memory_used'").map_err(MemoryError::sql("reading Memory_used"))?;
        let pool: Option<u64> = c
            .query_first("SELECT @@innodb_buffer_pool_size")
            .map_err(MemoryError::sql("reading the buffer pool size"))?;
        let mut connections = vec![];
        if self.per_connection {
            // Statements are bytes: a literal need not be UTF-8.
            let rows: Vec<ProcesslistRow> = c
                .query(format!(
                    "SELECT ID, USER, COMMAND, MEMORY_USED, MAX_MEMORY_USED, INFO FROM information_schema.PROCESSLIST \
                     WHERE ID <> CONNECTION_ID() ORDER BY MEMORY_USED DESC LIMIT {TOP}"
                ))
                .map_err(MemoryError::sql("reading the processlist"))?;
            connections = rows
                .into_iter()
                .map(|(id, user, command, bytes, max_bytes, info)| ConnectionMemory {
                    id,
                    user: user.unwrap_or_default(),
                    command: command.unwrap_or_default(),
                    bytes,
                    max_bytes,
                    info: info.map(|i| String::from_utf8_lossy(&i).into_owned()),
                })
                .collect();
        }
        let instrumented = if self.pfs {
            c.query_first::<Option<u64>, _>(
                "SELECT SUM(CURRENT_NUMBER_OF_BYTES_USED) FROM performance_schema.memory_summary_global_by_event_name",
            )
            .map_err(MemoryError::sql("reading performance_schema's memory summary"))?
            .flatten()
            .filter(|&b| b > 0)
        } else {
            None
        };
        Ok(ServerMemory {
            memory_used: used.map_or(0, |u| u.1),
            pool_size: pool.unwrap_or(0),
            connections,
            instrumented,
        })
    }
}
