//! What can stop `pileup memory`, in its own terms.

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Target(#[from] pileup_engine::EngineError),
    #[error("{what}: {source}")]
    Sql { what: &'static str, source: pileup_conn::SqlError },
    #[error("process {0} exited before its memory could be read")]
    ProcessGone(i32),
    #[error("tracing memory growth needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (missing: {0}); run it with sudo, or with --no-trace for /proc and the server's accounting alone")]
    Privileges(String),
    #[error("eBPF tracing is not available here: {0}; --no-trace follows /proc and the server's accounting alone")]
    NoEbpf(String),
    #[error("eBPF: {0}")]
    Ebpf(String),
    #[error("{0}")]
    Usage(String),
}

impl MemoryError {
    /// A query of `what` failed.
    pub(crate) fn sql(what: &'static str) -> impl FnOnce(mysql::Error) -> MemoryError {
        move |e| MemoryError::Sql { what, source: e.into() }
    }
}

impl From<pileup_growth::GrowthError> for MemoryError {
    fn from(e: pileup_growth::GrowthError) -> MemoryError {
        use pileup_growth::GrowthError as G;
        match e {
            G::Privileges(m) => MemoryError::Privileges(m),
            G::NoEbpf(m) => MemoryError::NoEbpf(m),
            G::Ebpf(m) => MemoryError::Ebpf(m),
        }
    }
}
