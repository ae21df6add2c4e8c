//! Where the replica's SQL thread is: relay log file and position, lag,
//! and where its relay logs live.

use std::path::{Path, PathBuf};

use crate::error::ReplicaError;

type Result<T> = std::result::Result<T, ReplicaError>;
use mysql::prelude::Queryable;

#[derive(Debug, Clone, PartialEq)]
pub struct Applier {
    /// The relay log file the SQL thread executes from (full path).
    pub relay_file: PathBuf,
    /// The start of the next event it will execute.
    pub relay_pos: u64,
    /// Seconds_Behind_Master (None when the SQL or IO thread is not
    /// running).
    pub lag: Option<u64>,
    pub sql_running: bool,
    pub io_running: bool,
}

/// Read the default replication connection's status.
pub fn applier(c: &mut mysql::Conn) -> Result<Applier> {
    ApplierProbe::default().read(c)
}

/// Polls the applier's position. The relay log directory comes from
/// read-only server settings, so it is read once per connection instead of
/// with every poll (`pileup prefetch` polls 20 times a second while lagging).
#[derive(Debug, Default)]
pub struct ApplierProbe {
    dir: Option<PathBuf>,
}

impl ApplierProbe {
    /// After a reconnect: the server may have been restarted with other settings.
    pub fn forget(&mut self) {
        self.dir = None;
    }

    pub fn read(&mut self, c: &mut mysql::Conn) -> Result<Applier> {
        let row: Option<mysql::Row> = c.query_first("SHOW SLAVE STATUS").map_err(|e| {
            let denied =
                matches!(&e, mysql::Error::MySqlError(m) if m.code == 1227 || m.code == 1045 || m.code == 1142);
            let hint = if denied {
                "; it needs the REPLICATION CLIENT privilege (SLAVE MONITOR on MariaDB 10.5+)"
            } else {
                ""
            };
            ReplicaError::Sql { what: "reading replica status (SHOW SLAVE STATUS)", source: e.into(), hint }
        })?;
        let Some(row) = row else {
            return Err(ReplicaError::NotAReplica);
        };
        let get = |name: &str| -> Option<String> {
            let i = row.columns_ref().iter().position(|c| c.name_str() == name)?;
            match row.as_ref(i)? {
                mysql::Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
                mysql::Value::Int(v) => Some(v.to_string()),
                mysql::Value::UInt(v) => Some(v.to_string()),
                _ => None,
            }
        };
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let d = relay_dir(c)?.0;
                self.dir = Some(d.clone());
                d
            }
        };
        let file =
            get("Relay_Log_File").ok_or(ReplicaError::Missing("Relay_Log_File missing from SHOW SLAVE STATUS"))?;
        let relay_file = if Path::new(&file).is_absolute() { PathBuf::from(&file) } else { dir.join(&file) };
        Ok(Applier {
            relay_file,
            relay_pos: get("Relay_Log_Pos").and_then(|s| s.parse().ok()).unwrap_or(4),
            lag: get("Seconds_Behind_Master").and_then(|s| s.parse().ok()),
            sql_running: get("Slave_SQL_Running").as_deref() == Some("Yes"),
            io_running: get("Slave_IO_Running").as_deref() == Some("Yes"),
        })
    }
}

/// The directory of the relay logs and the index file.
pub fn relay_dir(c: &mut mysql::Conn) -> Result<(PathBuf, PathBuf)> {
    let (index, datadir): (Option<String>, String) = c
        .query_first("SELECT @@relay_log_index, @@datadir")
        .map_err(ReplicaError::sql("reading the relay log settings"))?
        .ok_or(ReplicaError::Missing("no relay log settings"))?;
    let index = index.filter(|s| !s.is_empty()).ok_or(ReplicaError::Missing("relay_log_index is empty"))?;
    let index = Path::new(&datadir).join(index);
    let dir = index.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(&datadir));
    Ok((dir, index))
}
