//! What can go wrong, in the terms of lock tracing.

#[derive(Debug, thiserror::Error)]
pub enum LocksError {
    #[error("tracing locks needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (missing: {0}); run it with sudo")]
    Privileges(String),
    #[error("eBPF tracing is not available here: {0}; with performance_schema on (performance_schema=ON and the wait/synch instruments), its events_waits_summary tables time the server's mutexes instead")]
    NoEbpf(String),
    #[error("performance_schema: {0}")]
    PerformanceSchema(String),
    #[error("eBPF: {0}")]
    Ebpf(String),
    #[error(transparent)]
    Target(#[from] pileup_engine::EngineError),
    #[error("{0}")]
    Usage(String),
}
