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

pileup_conn::context_trait!(
    SandboxError,
    io: |what, source| SandboxError::Io { what, source },
    sql: |what, e: mysql::Error| SandboxError::Sql { what, source: e.into() },
    within: |what, e| SandboxError::Setup(format!("{what}: {e}"))
);

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
