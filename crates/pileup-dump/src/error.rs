//! What can stop a dump or a load, in their terms.

/// Why a dump or a load failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{what}: {source}")]
    Sql { what: String, source: pileup_conn::SqlError },
    #[error(transparent)]
    Server(#[from] pileup_conn::SqlError),
    #[error(transparent)]
    Connect(#[from] pileup_conn::ConnError),
    #[error(transparent)]
    File(#[from] pileup_files::FileError),
    #[error(transparent)]
    Disk(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A step that failed, what it was doing said before its cause.
    #[error("{what}: {source}")]
    In { what: String, source: Box<DumpError> },
    /// What went wrong, and what to do.
    #[error("{0}")]
    Failed(String),
}

impl From<mysql::Error> for DumpError {
    fn from(e: mysql::Error) -> DumpError {
        DumpError::Server(e.into())
    }
}

impl DumpError {
    /// This error, with what the step was doing said before it.
    pub fn ctx(self, what: impl Into<String>) -> DumpError {
        DumpError::In { what: what.into(), source: Box::new(self) }
    }

    /// The server's error this one comes from, if it does.
    pub fn server_error(&self) -> Option<&mysql::Error> {
        match self {
            DumpError::Sql { source, .. } | DumpError::Server(source) => Some(&source.0),
            DumpError::In { source, .. } => source.server_error(),
            _ => None,
        }
    }
}

pub type Result<T, E = DumpError> = std::result::Result<T, E>;

pileup_conn::context_trait!(
    DumpError,
    io: |what, source| DumpError::Io { what, source },
    sql: |what, e: mysql::Error| DumpError::Sql { what, source: e.into() },
    within: |what, e| DumpError::In { what, source: Box::new(e) }
);

impl<T> Ctx<T> for std::result::Result<T, pileup_files::FileError> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| DumpError::In { what: what(), source: Box::new(e.into()) })
    }
}

impl<T> Ctx<T> for std::result::Result<T, serde_json::Error> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| DumpError::In { what: what(), source: Box::new(e.into()) })
    }
}

impl<T> Ctx<T> for Option<T> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| DumpError::Failed(what()))
    }
}

/// Return a [`DumpError::Failed`] with this message.
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::error::DumpError::Failed(format!($($t)*))) };
}

/// A [`DumpError::Failed`] with this message.
macro_rules! failed {
    ($($t:tt)*) => { $crate::error::DumpError::Failed(format!($($t)*)) };
}

pub(crate) use {bail, failed};
