//! What can stop `pileup memory`, in its own terms.

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Target(#[from] pileup_engine::StacksError),
    #[error("{what}: {source}")]
    Sql { what: &'static str, source: pileup_conn::SqlError },
    #[error("process {0} exited before its memory could be read")]
    ProcessGone(i32),
}

impl MemoryError {
    /// A query of `what` failed.
    pub(crate) fn sql(what: &'static str) -> impl FnOnce(mysql::Error) -> MemoryError {
        move |e| MemoryError::Sql { what, source: e.into() }
    }
}
