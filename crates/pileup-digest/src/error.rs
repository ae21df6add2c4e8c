//! What can go wrong reading slow logs and servers.

/// What can stop a digest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open {0}: {1}")]
    Open(String, #[source] std::io::Error),
    #[error("{0} is a directory; name the slow-log files in it")]
    IsDir(String),
    #[error("cannot read {0}: {1}")]
    Read(String, #[source] std::io::Error),
    #[error("{0}")]
    Server(String),
    /// A stored digest (a fleet's Parquet rows) that cannot be read.
    #[error("{0}")]
    Stored(String),
    /// The input holds bytes no slow log has (a NUL): a binary file, or a
    /// compressed one that decompresses to one.
    #[error("{0} is not a slow log (it starts with binary data, or is UTF-16 text: convert that with iconv -f UTF-16 -t UTF-8); give the server's slow-log file (@@slow_query_log_file)")]
    NotSlowLog(String),
}
