//! Why growth could not be traced.

#[derive(Debug, thiserror::Error)]
pub enum GrowthError {
    /// Capabilities missing (their names).
    #[error("missing {0}")]
    Privileges(String),
    /// The kernel or the environment cannot trace (the reason).
    #[error("{0}")]
    NoEbpf(String),
    #[error("eBPF: {0}")]
    Ebpf(String),
}
