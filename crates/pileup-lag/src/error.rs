//! What can stop `lag`, in a replica's terms.

/// Why the applier could not be sampled.
#[derive(Debug, thiserror::Error)]
pub enum LagError {
    #[error("the server at {0} is not a replica (SHOW SLAVE STATUS is empty); run pileup lag against a replica")]
    NotAReplica(String),
    #[error("{what}: {source}")]
    Sql { what: &'static str, source: pileup_conn::SqlError },
    #[error(transparent)]
    Connect(#[from] pileup_conn::ConnError),
    #[error(transparent)]
    Stacks(#[from] pileup_engine::EngineError),
    #[error(transparent)]
    Annotate(#[from] pileup_annotate::AnnotateError),
}

impl LagError {
    /// A query of `what` failed.
    pub(crate) fn sql(what: &'static str) -> impl FnOnce(mysql::Error) -> LagError {
        move |e| LagError::Sql { what, source: e.into() }
    }
}
