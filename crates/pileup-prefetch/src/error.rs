//! What can stop the prefetcher, in a replica's terms.

use std::path::PathBuf;

/// Why prefetching, or one of its parts, failed.
#[derive(Debug, thiserror::Error)]
pub enum PrefetchError {
    #[error("{what}: {source}")]
    Sql { what: String, source: pileup_conn::SqlError },
    #[error(transparent)]
    Connect(#[from] pileup_conn::ConnError),
    #[error(transparent)]
    Replica(#[from] pileup_replica::ReplicaError),
    #[error(transparent)]
    File(#[from] pileup_files::FileError),
    #[error("reading the relay log: {0}")]
    Relay(#[from] pileup_binlog::ReadError),
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("cannot read {} ({source}): --warm pages needs to read and write the server's buffer pool file; run pileup as the server's user or root, or use --warm sql", path.display())]
    BufferPoolFile { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Page(String),
    #[error("--defer-purge: {0}")]
    DeferPurge(Box<PrefetchError>),
}

impl From<mysql::Error> for PrefetchError {
    fn from(e: mysql::Error) -> PrefetchError {
        PrefetchError::Sql { what: "querying the replica".into(), source: e.into() }
    }
}

impl PrefetchError {
    /// A query of `what` failed.
    pub(crate) fn sql(what: &str) -> impl FnOnce(mysql::Error) -> PrefetchError + '_ {
        move |e| PrefetchError::Sql { what: what.into(), source: e.into() }
    }
}

pub type Result<T, E = PrefetchError> = std::result::Result<T, E>;
