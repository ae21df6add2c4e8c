//! What can stop a sandbox from being made, started or used.

/// Why a sandbox could not be made, started or used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{what}: {source}")]
    Sql { what: String, source: pileup_conn::SqlError },
    #[error(transparent)]
    Connect(#[from] pileup_conn::ConnError),
    #[error(transparent)]
    File(#[from] std::io::Error),
    /// What could not be set up, and what to do.
    #[error("{0}")]
    Setup(String),
}

impl From<mysql::Error> for SandboxError {
    fn from(e: mysql::Error) -> SandboxError {
        SandboxError::Sql { what: "querying the sandbox".into(), source: e.into() }
    }
}

impl From<std::sync::mpsc::RecvError> for SandboxError {
    fn from(_: std::sync::mpsc::RecvError) -> SandboxError {
        SandboxError::Setup("the sandbox keeper thread is gone".into())
    }
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

/// What a failed step was doing, said before its error.
pub(crate) trait Ctx<T> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T>;
    fn ctx(self, what: &str) -> Result<T>
    where
        Self: Sized,
    {
        self.with_ctx(|| what.to_string())
    }
}

impl<T> Ctx<T> for std::result::Result<T, std::io::Error> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| SandboxError::Io { what: what(), source })
    }
}

impl<T> Ctx<T> for std::result::Result<T, mysql::Error> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| SandboxError::Sql { what: what(), source: e.into() })
    }
}

impl<T> Ctx<T> for Result<T> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| SandboxError::Setup(format!("{}: {e}", what())))
    }
}

impl<T> Ctx<T> for Option<T> {
    fn with_ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| SandboxError::Setup(what()))
    }
}

/// Return a [`SandboxError::Setup`] with this message.
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::error::SandboxError::Setup(format!($($t)*))) };
}

/// A [`SandboxError::Setup`] with this message.
macro_rules! setup {
    ($($t:tt)*) => { $crate::error::SandboxError::Setup(format!($($t)*)) };
}

pub(crate) use {bail, setup};
